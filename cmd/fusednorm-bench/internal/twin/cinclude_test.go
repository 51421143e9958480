package twin

import (
	"testing"

	"github.com/fusednorm/fusednorm/internal/cinclude"
	_ "github.com/fusednorm/fusednorm/internal/dawnrt" // the C layer the twin's C calls
)

// TestCIncludeCurrent fails after an edit to cgo/ or cgo/bench/ that was not followed by `go generate`: the
// package's object would keep the old C (the go command does not track included files).
func TestCIncludeCurrent(t *testing.T) {
	if err := cinclude.Check("."); err != nil {
		t.Fatal(err)
	}
}
