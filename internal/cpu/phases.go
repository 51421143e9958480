//go:build !fusednorm_phases

package cpu

// Without -tags fusednorm_phases the row phase marks are empty and inline to nothing
// (phases_on.go times them).

func phaseStart()        {}
func phaseMark(rowPhase) {}
