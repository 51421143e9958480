//go:build cgo && linux

package dawnrt

import (
	"io"
	"os"
	"syscall"
)

// withStderrCaptured runs f with the process's file descriptor 2 pointed at an unlinked temporary
// file and returns what was written there: the Vulkan loader prints its complaints ("Found no
// drivers") straight to stderr, which an auto engine on a GPU-less machine must not do on
// every Open. Anything else written to stderr meanwhile is captured too; f is short.
func withStderrCaptured(f func()) string {
	tmp, err := os.CreateTemp("", "fusednorm-stderr-*")
	if err != nil {
		f()
		return ""
	}
	os.Remove(tmp.Name())
	defer tmp.Close()
	saved, err := syscall.Dup(2)
	if err != nil {
		f()
		return ""
	}
	if err := syscall.Dup3(int(tmp.Fd()), 2, 0); err != nil {
		syscall.Close(saved)
		f()
		return ""
	}
	f()
	syscall.Dup3(saved, 2, 0)
	syscall.Close(saved)
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(tmp, 64<<10))
	return string(b)
}
