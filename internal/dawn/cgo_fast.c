//go:build cgo

// The low-overhead dispatch path lives in ../cgo so CMake builds the same file.
#include "../../cgo/dawnrt_fast.c"
