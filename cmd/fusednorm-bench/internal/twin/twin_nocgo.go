//go:build !cgo

package twin

import "errors"

var errNoCgo = errors.New("twin: the C twin needs a cgo build")

// Open fails: the twin is C.
func Open(library string) error { return errNoCgo }

// Adapter is empty without the twin.
func Adapter() string { return "" }

// Run fails: the twin is C.
func Run(op Op, n int) (Samples, error) { return Samples{}, errNoCgo }
