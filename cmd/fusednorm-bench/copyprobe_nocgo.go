//go:build !cgo

package main

import (
	"context"
	"errors"
)

// copyProbe needs the Dawn runtime, which needs cgo.
type copyProbe struct{}

func newCopyProbe(string) (*copyProbe, error) {
	return nil, errors.New("copy probe: built without cgo")
}

func (p *copyProbe) gbps(context.Context, int64, int) (float64, string, error) {
	return 0, "", errors.New("copy probe: built without cgo")
}

func (p *copyProbe) close() {}
