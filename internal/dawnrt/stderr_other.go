//go:build cgo && !linux

package dawnrt

// withStderrCaptured runs f; capturing the loader's output is done on Linux only.
func withStderrCaptured(f func()) string {
	f()
	return ""
}
