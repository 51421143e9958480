//go:build cgo && linux

package dawnrt

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
)

// What is written to file descriptor 2 while the adapter is requested is captured and
// nothing of it reaches the process's stderr; stderr works as before afterwards.
func TestCaptureStderr(t *testing.T) {
	outer, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(outer.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	got := withStderrCaptured(func() { fmt.Fprint(os.Stderr, "Warning: vkCreateInstance: Found no drivers!\n") })
	fmt.Fprint(os.Stderr, "after\n")
	syscall.Dup3(saved, 2, 0)
	syscall.Close(saved)
	if got != "Warning: vkCreateInstance: Found no drivers!\n" {
		t.Errorf("captured %q", got)
	}
	outer.Seek(0, io.SeekStart)
	rest, _ := io.ReadAll(outer)
	if string(rest) != "after\n" {
		t.Errorf("the process's stderr got %q, want only the line written after", rest)
	}
}
