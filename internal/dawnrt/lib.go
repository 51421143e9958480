//go:build cgo

// Library search: see the package documentation (doc.go).

package dawnrt

//go:generate go run ../cmd/dawnhdr -h ../../cgo/webgpu_gen.h -go zdawn_gen.go
//go:generate go run ../cmd/cgohash

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "../../cgo/dawnrt.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/dawnpin"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// libNames are the file names a Dawn library goes by: the monolithic build, and the npm
// package's build that scripts/provision.sh installs.
var libNames = []string{"libwebgpu_dawn.so", "libwebgpu_wrapper.so"}

var (
	libMu sync.Mutex
	// loaded is the library loaded, never closed (Dawn keeps threads and statics): the one
	// Dawn of the process. A second copy from another file breaks the first (they share C++
	// symbols: its waits return before their callbacks ran), so the search list returns it
	// and another explicit file is refused.
	loaded *C.drt_lib
)

// envLib names the library to load instead of the search list (see Library search above);
// the root package calls it EnvDawnLib.
const envLib = "FUSEDNORM_DAWN_LIB"

// candidate is one place to load the library from; skip, when set, says why it is not tried;
// pinned, that the file loads only when its SHA-256 is the pinned build's.
type candidate struct {
	path, skip string
	pinned     bool
}

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
	if dir, err := dawnpin.CacheDir(); err == nil {
		p := filepath.Join(dir, dawnpin.LibName)
		cands = append(cands, candidate{path: p, skip: unsafePlace(dir, p), pinned: true})
	}
	return cands, false
}

// pinnedMismatch says why the file at path is not loaded as the pinned build, or "" when its
// SHA-256 is the pinned one (or it does not exist, which loading reports).
func pinnedMismatch(path string) string {
	sum, err := dawnpin.FileSHA256(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		return err.Error()
	}
	if sum != dawnpin.LibSHA256 {
		return fmt.Sprintf("its SHA-256 is %.12s…, not the pinned %s@%s build's %.12s…: a file there that %s did not install is never loaded",
			sum, dawnpin.NPMPackage, dawnpin.NPMVersion, dawnpin.LibSHA256, "fusednorm-dawn")
	}
	return ""
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
	if loaded != nil && cands[0].skip == "" {
		if !isExplicit {
			return loaded, nil
		}
		// A file that exists and is not the loaded one is refused; a name that is no file here
		// fails below as it would have (or loads a library that is not Dawn, and says so).
		first, _ := os.Stat(libPath(loaded))
		if fi, err := os.Stat(cands[0].path); err == nil && first != nil {
			if os.SameFile(fi, first) {
				return loaded, nil
			}
			return nil, fmt.Errorf("dawn: %w: %s: not loaded: this process already runs the Dawn library %s, and a second copy of Dawn breaks the first; name that one",
				ops.ErrUnavailable, cands[0].path, libPath(loaded))
		}
	}
	var tried []string
	report := (*C.char)(C.calloc(1, 8192))
	defer C.free(unsafe.Pointer(report))
	for _, c := range cands {
		if c.skip != "" {
			tried = append(tried, c.path+": not tried: "+c.skip)
			continue
		}
		if c.pinned {
			if why := pinnedMismatch(c.path); why != "" {
				tried = append(tried, c.path+": not loaded: "+why)
				continue
			}
		}
		cs := C.CString(c.path)
		lib := (*C.drt_lib)(C.calloc(1, C.sizeof_drt_lib))
		rc := C.drt_load(&cs, 1, lib, report, 8192)
		C.free(unsafe.Pointer(cs))
		if rc == C.DRT_OK {
			loaded = lib
			return lib, nil
		}
		C.free(unsafe.Pointer(lib))
		tried = append(tried, strings.TrimSpace(C.GoString(report)))
	}
	if isExplicit {
		return nil, fmt.Errorf("dawn: %w: the requested Dawn library (WithDawnLibrary or %s) did not load, and an explicit library is never replaced by another: %s",
			ops.ErrUnavailable, envLib, strings.Join(tried, "; "))
	}
	return nil, fmt.Errorf("dawn: %w: Dawn library not found (%s installs it where this search looks; or set %s to a Dawn library); tried: %s",
		ops.ErrUnavailable, dawnpin.InstallCommand, envLib, strings.Join(tried, "; "))
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
		return fmt.Errorf("dawn: zdawn_gen.go disagrees with cgo/webgpu_gen.h: run go generate ./internal/dawnrt/")
	}
	if C.sizeof_WGPULimits != 152 {
		return fmt.Errorf("dawn: sizeof(WGPULimits) = %d, want 152", C.sizeof_WGPULimits)
	}
	return nil
}

// libPath is the file a loaded library came from.
func libPath(l *C.drt_lib) string { return C.GoString(&l.path[0]) }
