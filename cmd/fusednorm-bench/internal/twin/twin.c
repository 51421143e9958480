//go:build cgo

// The twin lives in cgo/bench so CMake builds the same file for tiny_bench; its calls into
// the C layer link against internal/dawnrt's copy of it. zcinclude_gen.go holds the hash of
// the included files (go generate writes it), so that an edit there rebuilds this package.
#include "../../../../cgo/bench/tiny_twin.c"
