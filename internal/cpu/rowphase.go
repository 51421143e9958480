package cpu

// rowPhase names a step of an AddLayerNorm row, for the phase-timing build
// (-tags fusednorm_phases, phases_on.go): each mark adds the time since the previous one to
// its phase. What a row spends outside them (the next row's lead, the loop) is the call's
// time less their sum.
type rowPhase int

const (
	phaseShift  rowPhase = iota // the shift x0, s[0], read
	phaseFirst                  // the first pass: t, x, the partial sums and their tree
	phaseStats                  // the variance pass and its tree
	phaseAffine                 // y
)
