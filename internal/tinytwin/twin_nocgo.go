//go:build !cgo

package tinytwin

import (
	"errors"
	"time"
)

// Op is one of the two tiny calls.
type Op int

const (
	Embed Op = iota // EmbedLayerNorm f32 (1,1,768)
	Add             // AddLayerNorm f32 (1,768)
)

// Samples are one run's times (see the cgo build).
type Samples struct {
	Each, Call, Wait, BackToBack []time.Duration
	BackToBackTotal              time.Duration
}

var errNoCgo = errors.New("tinytwin: the C twin needs a cgo build")

// Open fails: the twin is C.
func Open(library string) error { return errNoCgo }

// Adapter is empty without the twin.
func Adapter() string { return "" }

// Run fails: the twin is C.
func Run(op Op, n int) (Samples, error) { return Samples{}, errNoCgo }
