package dawnrt

import (
	"testing"

	"github.com/fusednorm/fusednorm/internal/cinclude"
)

// TestCIncludeCurrent fails after an edit to cgo/ that was not followed by `go generate`: the
// package's object would keep the old C (the go command does not track included files).
func TestCIncludeCurrent(t *testing.T) {
	if err := cinclude.Check("."); err != nil {
		t.Fatal(err)
	}
}
