//go:build fusednorm_phases

package cpu

import "time"

// This build times the phases of AddLayerNorm's rows (BenchmarkRowPhases). The counters
// are shared and unsynchronized: time calls of one thread.
const numPhases = phaseAffine + 1

var phaseNames = [numPhases]string{"shift", "first", "stats", "affine"}

var (
	phaseNs   [numPhases]int64
	phaseLast time.Time
)

func phaseStart() { phaseLast = time.Now() }

func phaseMark(p rowPhase) {
	now := time.Now()
	phaseNs[p] += now.Sub(phaseLast).Nanoseconds()
	phaseLast = now
}

func phaseReset() { phaseNs = [numPhases]int64{} }
