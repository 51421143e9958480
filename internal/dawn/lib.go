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
// A device and everything made from it may be used from many goroutines: every call into Dawn
// runs under the device's lock. run releases the lock while it waits for the GPU, so several
// dispatches can be in flight.
//
// # Errors
//
// Errors wrap the sentinels of internal/ops, prefixed with the Go method that failed:
// ops.ErrUnavailable (library or adapter missing), ops.ErrNotSupported (a size over a
// device limit), ops.ErrInvalidArgument (misuse), ops.ErrDevice (Dawn or the driver
// rejected or failed an operation; the message carries Dawn's, e.g. the WGSL compiler's),
// ops.ErrClosed (used after close). A cancelled or expired context comes back as
// ctx.Err(), wrapped.
//
// # Library search
//
// An explicit library, deviceOptions.LibPath (Config.LibPath) or else $FUSEDNORM_DAWN_LIB, is
// a demand, not a hint: only that file is tried, and openDevice fails with its path and the
// reason when it does not load. It must be an absolute path, or a bare file name for the
// system loader; a relative path with a directory would be resolved against the working
// directory and is refused.
//
// Without one, openDevice tries libwebgpu_dawn.so and libwebgpu_wrapper.so next to the
// executable (only when that directory and file are owned by the user or root and writable by
// their owner alone: whoever can write there can already replace the executable), then the
// same names through the system loader (LD_LIBRARY_PATH, the loader cache, the system
// directories; skipped when LD_LIBRARY_PATH has an empty or relative entry, which the loader
// reads as the working directory). Nothing is ever loaded from a place derived from the
// working directory or from where the source was built. A failure lists every candidate and
// why it was not used. device.library names the file that was loaded.

package dawn

//go:generate go run ../cmd/dawnhdr -h ../../cgo/webgpu_gen.h -go zdawn_gen.go

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "../../cgo/dawnrt.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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

// envLib names the library to load instead of the search list (see Library search above);
// the root package calls it EnvDawnLib.
const envLib = "FUSEDNORM_DAWN_LIB"

// candidate is one place to load the library from; skip, when set, says why it is not tried.
type candidate struct{ path, skip string }

// libCandidates is the ordered search list: the explicit library alone, or the search list.
func libCandidates(explicit string) (cands []candidate, isExplicit bool) {
	if explicit == "" {
		explicit = os.Getenv(envLib)
	}
	if explicit != "" {
		c := candidate{path: explicit}
		if strings.Contains(explicit, "/") && !filepath.IsAbs(explicit) {
			c.skip = "a relative path, which would be resolved against the working directory: give an absolute path"
		}
		return []candidate{c}, true
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, n := range libNames {
			p := filepath.Join(dir, n)
			cands = append(cands, candidate{path: p, skip: unsafePlace(dir, p)})
		}
	}
	loaderSkip := ""
	if v, ok := os.LookupEnv("LD_LIBRARY_PATH"); ok && v != "" {
		for _, e := range strings.Split(v, ":") {
			if e == "" || !filepath.IsAbs(e) {
				loaderSkip = "LD_LIBRARY_PATH has an empty or relative entry, which the system loader reads as the working directory"
			}
		}
	}
	for _, n := range libNames {
		cands = append(cands, candidate{path: n, skip: loaderSkip})
	}
	return cands, false
}

// unsafePlace says why a library next to the executable is not trusted, or "" when it is:
// the directory and the file (when it exists) must be owned by the user or root and writable
// by their owner alone, so that nobody who could not already replace the executable can
// plant a library there.
func unsafePlace(dir, file string) string {
	check := func(p string) string {
		fi, err := os.Stat(p)
		if err != nil {
			return "" // a missing file is reported when loading
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return fmt.Sprintf("%s is writable by others (mode %v)", p, fi.Mode().Perm())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
			return fmt.Sprintf("%s belongs to another user (uid %d)", p, st.Uid)
		}
		return ""
	}
	if why := check(dir); why != "" {
		return why
	}
	return check(file)
}

// loadLib loads the explicit library, or else the first candidate of the search list that
// loads and exports every required function.
func loadLib(explicit string) (*C.drt_lib, error) {
	libMu.Lock()
	defer libMu.Unlock()
	cands, isExplicit := libCandidates(explicit)
	var tried []string
	report := (*C.char)(C.calloc(1, 8192))
	defer C.free(unsafe.Pointer(report))
	for _, c := range cands {
		if c.skip != "" {
			tried = append(tried, c.path+": not tried: "+c.skip)
			continue
		}
		if lib := libs[c.path]; lib != nil {
			return lib, nil
		}
		cs := C.CString(c.path)
		lib := (*C.drt_lib)(C.calloc(1, C.sizeof_drt_lib))
		rc := C.drt_load(&cs, 1, lib, report, 8192)
		C.free(unsafe.Pointer(cs))
		if rc == C.DRT_OK {
			libs[c.path] = lib
			return lib, nil
		}
		C.free(unsafe.Pointer(lib))
		tried = append(tried, strings.TrimSpace(C.GoString(report)))
	}
	if isExplicit {
		return nil, fmt.Errorf("dawn: openDevice: %w: the requested Dawn library (WithDawnLibrary or %s) did not load, and an explicit library is never replaced by another: %s",
			ops.ErrUnavailable, envLib, strings.Join(tried, "; "))
	}
	return nil, fmt.Errorf("dawn: openDevice: %w: Dawn library not found (run scripts/provision.sh and set %s); tried: %s",
		ops.ErrUnavailable, envLib, strings.Join(tried, "; "))
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
		uint64(usageStorage) != uint64(C.WGPUBufferUsage_Storage) ||
		uint64(usageMapRead) != uint64(C.WGPUBufferUsage_MapRead) {
		return fmt.Errorf("dawn: zdawn_gen.go disagrees with cgo/webgpu_gen.h: run go generate ./internal/dawn/")
	}
	if C.sizeof_WGPULimits != 152 {
		return fmt.Errorf("dawn: sizeof(WGPULimits) = %d, want 152", C.sizeof_WGPULimits)
	}
	return nil
}
