//go:build cgo

// The C runtime lives in ../../cgo so CMake builds the same file; cgo compiles only C files of the
// package directory, so this one includes it. The go command does not track that file, so
// zcinclude_gen.go holds its hash (go generate writes it): an edit there changes a file here.
#include "../../cgo/dawnrt.c"
