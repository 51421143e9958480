//go:build cgo

// The C runtime lives in ../../cgo so CMake builds the same file; cgo compiles only C files of the
// package directory, so this one includes it.
#include "../../cgo/dawnrt.c"
