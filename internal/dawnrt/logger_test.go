//go:build cgo

package dawnrt

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// warnWGSL compiles with a Tint warning (unreachable code), which Dawn reports through the
// device log.
const warnWGSL = `
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1)
fn main() {
    return;
    y[0] = 1.0;
}
`

// TestLogger: Dawn's device log goes to Options.Logger, and without one nowhere: not to
// stderr (Dawn's default).
func TestLogger(t *testing.T) {
	logs := &testkit.LockedBuffer{}
	d := openDevice(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	newPipeline(t, d, "test/warn", warnWGSL)
	got := logs.String()
	t.Logf("log: %s", got)
	if !strings.Contains(got, "unreachable") || !strings.Contains(got, "level=WARN") || !strings.Contains(got, "source=dawn") {
		t.Errorf("the shader's warning did not reach the logger: %q", got)
	}

	stderr := captureStderr(t, func() {
		d := openDevice(t, Options{})
		newPipeline(t, d, "test/warn", warnWGSL)
	})
	if strings.Contains(stderr, "unreachable") {
		t.Errorf("without a logger Dawn's message went to stderr: %q", stderr)
	}

	// No Vulkan driver: Dawn's instance reports the failed vkCreateInstance to the logger (only
	// the Vulkan loader's own "Found no drivers!", which Dawn's instance-creation callback
	// prints itself, still reaches stderr).
	t.Setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json")
	t.Setenv("VK_DRIVER_FILES", "/nonexistent/icd.json")
	logs.Reset()
	if d, err := Open(Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}); err == nil {
		d.Close()
		t.Skip("a Vulkan adapter without a driver file: nothing to report")
	} else if !errors.Is(err, ops.ErrUnavailable) {
		t.Errorf("no driver: %v", err)
	}
	got = logs.String()
	t.Logf("log without a driver: %s", got)
	if !strings.Contains(got, "VK_ERROR_INCOMPATIBLE_DRIVER") {
		t.Errorf("the instance's warning did not reach the logger: %q", got)
	}
	stderr = captureStderr(t, func() {
		if d, err := Open(Options{}); err == nil {
			d.Close()
			t.Error("opened a device without a driver")
		}
	})
	t.Logf("stderr without a logger and a driver: %q", stderr)
	if strings.Contains(stderr, "VK_ERROR_INCOMPATIBLE_DRIVER") {
		t.Errorf("without a logger the instance's warning went to stderr: %q", stderr)
	}
}

// captureStderr runs f with file descriptor 2 redirected to a file and returns what was written.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(tmp.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	func() {
		defer syscall.Dup2(saved, 2)
		f()
	}()
	syscall.Close(saved)
	b, err := os.ReadFile(tmp.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
