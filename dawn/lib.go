//go:build cgo

// The Dawn runtime layer of package dawn (no op-specific code): WGSL compute kernels through
// native Dawn, loaded at run time with dlopen, so building needs no Dawn, no CMake and no
// link flags, and a process without the library gets an error, not a crash. The package
// documentation lives in doc.go; this is the runtime's part of it.
//
// # Backends
//
// Only Dawn's Vulkan backend is used: a GPU's Vulkan driver, or on GPU-less machines Mesa's
// lavapipe as provisioned by scripts/provision.sh. Dawn's Null backend, which "succeeds" with
// garbage, is refused.
//
// # Thread safety
//
// A Device and everything made from it may be used from many goroutines: every call into Dawn
// runs under the device's lock. Run releases the lock while it waits for the GPU, so several
// dispatches can be in flight.
//
// # Errors
//
// Errors wrap the sentinels of internal/ops, prefixed with the Go method that failed:
// ops.ErrUnavailable (library or adapter missing), ops.ErrNotSupported (a size over a
// device limit), ops.ErrInvalidArgument (misuse), ops.ErrDevice (Dawn or the driver
// rejected or failed an operation; the message carries Dawn's, e.g. the WGSL compiler's),
// ops.ErrClosed (used after Close). A cancelled or expired context comes back as
// ctx.Err(), wrapped.
//
// # Library search
//
// OpenDevice tries, in order: Options.LibPath; $FUSEDNORM_DAWN_LIB; libwebgpu_dawn.so and
// libwebgpu_wrapper.so next to the executable; third_party/dawn/libwebgpu_wrapper.so in the
// module root above the working directory and above this package's source; then the bare
// names for the system loader. A failure lists every path tried and why.

package dawn

//go:generate go run ../internal/cmd/dawnhdr -h ../cgo/webgpu_gen.h -go zdawn_gen.go

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "../cgo/dawnrt.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// libNames are the file names a Dawn library goes by: the monolithic build, and the npm
// package's build that scripts/provision.sh installs.
var libNames = []string{"libwebgpu_dawn.so", "libwebgpu_wrapper.so"}

var (
	libMu sync.Mutex
	libs  = map[string]*C.drt_lib{} // by candidate; never closed: Dawn keeps threads and statics
)

// libCandidates is the ordered search list.
func libCandidates(explicit string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	add(explicit)
	add(os.Getenv("FUSEDNORM_DAWN_LIB"))
	if exe, err := os.Executable(); err == nil {
		for _, n := range libNames {
			add(filepath.Join(filepath.Dir(exe), n))
		}
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) { // not with -trimpath
		starts = append(starts, filepath.Dir(file))
	}
	for _, s := range starts {
		if root := moduleRoot(s); root != "" {
			add(filepath.Join(root, "third_party", "dawn", "libwebgpu_wrapper.so"))
		}
	}
	for _, n := range libNames {
		add(n)
	}
	return out
}

// moduleRoot is the nearest directory at or above dir holding go.mod, or "".
func moduleRoot(dir string) string {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// loadLib returns the first candidate that loads and exports every required function.
func loadLib(explicit string) (*C.drt_lib, error) {
	libMu.Lock()
	defer libMu.Unlock()
	cands := libCandidates(explicit)
	var tried []string
	report := (*C.char)(C.calloc(1, 8192))
	defer C.free(unsafe.Pointer(report))
	for _, c := range cands {
		if lib := libs[c]; lib != nil {
			return lib, nil
		}
		cs := C.CString(c)
		lib := (*C.drt_lib)(C.calloc(1, C.sizeof_drt_lib))
		rc := C.drt_load(&cs, 1, lib, report, 8192)
		C.free(unsafe.Pointer(cs))
		if rc == C.DRT_OK {
			libs[c] = lib
			return lib, nil
		}
		C.free(unsafe.Pointer(lib))
		tried = append(tried, strings.TrimSpace(C.GoString(report)))
	}
	return nil, fmt.Errorf("dawn: OpenDevice: %w: Dawn library not found (run scripts/provision.sh or set FUSEDNORM_DAWN_LIB); tried: %s",
		ops.ErrUnavailable, strings.Join(tried, "; "))
}

// checkGenerated reports a disagreement between the two outputs of internal/cmd/dawnhdr
// (zdawn_gen.go and cgo/webgpu_gen.h), and a WGPULimits of another size than the 152 bytes
// measured against the library.
func checkGenerated() error {
	if featureNames[uint32(C.WGPUFeatureName_TimestampQuery)] != "TimestampQuery" ||
		featureNames[uint32(C.WGPUFeatureName_Subgroups)] != "Subgroups" ||
		backendTypeNames[uint32(C.WGPUBackendType_Vulkan)] != "Vulkan" ||
		backendTypeNames[uint32(C.WGPUBackendType_Null)] != "Null" ||
		adapterTypeNames[uint32(C.WGPUAdapterType_CPU)] != "CPU" ||
		uint64(UsageStorage) != uint64(C.WGPUBufferUsage_Storage) ||
		uint64(UsageMapRead) != uint64(C.WGPUBufferUsage_MapRead) {
		return fmt.Errorf("dawn: zdawn_gen.go disagrees with cgo/webgpu_gen.h: run go generate ./dawn/")
	}
	if C.sizeof_WGPULimits != 152 {
		return fmt.Errorf("dawn: sizeof(WGPULimits) = %d, want 152", C.sizeof_WGPULimits)
	}
	return nil
}
