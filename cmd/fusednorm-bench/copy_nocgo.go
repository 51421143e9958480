//go:build !cgo

package main

import (
	"context"
	"errors"
)

// deviceCopier is the cgo build's GPU copy ceiling; without cgo there is no GPU to measure.
type deviceCopier struct{}

func newDeviceCopier(string) (*deviceCopier, error) {
	return nil, errors.New("built without cgo")
}

func (c *deviceCopier) close() {}

func (c *deviceCopier) gbps(context.Context, int64, int) (float64, error) {
	return 0, errors.New("built without cgo")
}
