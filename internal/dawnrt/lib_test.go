//go:build cgo

package dawnrt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestLibrarySearch: an explicit library (option or environment) is the only one tried; a
// relative one is refused; the search list holds nothing derived from the working directory
// or the source tree, and the system loader is skipped when LD_LIBRARY_PATH would make it
// read the working directory.
func TestLibrarySearch(t *testing.T) {
	t.Setenv(envLib, "/nonexistent/env/libwebgpu_dawn.so")
	cands, explicit := libCandidates("/nonexistent/explicit.so")
	if !explicit || len(cands) != 1 || cands[0].path != "/nonexistent/explicit.so" {
		t.Fatalf("explicit library: %+v", cands)
	}
	cands, explicit = libCandidates("")
	if !explicit || len(cands) != 1 || cands[0].path != "/nonexistent/env/libwebgpu_dawn.so" {
		t.Fatalf("library from the environment: %+v", cands)
	}
	for _, lib := range []string{"/nonexistent/explicit.so", ""} {
		_, err := Open(Options{Library: lib})
		want := lib
		if want == "" {
			want = "/nonexistent/env/libwebgpu_dawn.so"
		}
		if !errors.Is(err, ops.ErrUnavailable) || !strings.Contains(err.Error(), want+": no such file") ||
			!strings.Contains(err.Error(), "never replaced") {
			t.Errorf("missing explicit library %q: %v", want, err)
		}
		if _, err := ListAdapters(lib); !errors.Is(err, ops.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("ListAdapters with the missing explicit library %q: %v", want, err)
		}
	}
	if _, err := Open(Options{Library: "third_party/dawn/libwebgpu_wrapper.so"}); !errors.Is(err, ops.ErrUnavailable) ||
		!strings.Contains(err.Error(), "relative path") {
		t.Errorf("relative explicit library: %v", err)
	}
	// A library that loads but is not Dawn: the missing function is named.
	if _, err := Open(Options{Library: "libc.so.6"}); !errors.Is(err, ops.ErrUnavailable) ||
		!strings.Contains(err.Error(), "libc.so.6: not a usable Dawn: missing wgpu") {
		t.Errorf("libc as Dawn: %v", err)
	}

	t.Setenv(envLib, "")
	t.Setenv("LD_LIBRARY_PATH", "/usr/lib::/opt/lib")
	cands, explicit = libCandidates("")
	if explicit || len(cands) == 0 {
		t.Fatalf("search list: %+v", cands)
	}
	loader := 0
	for _, c := range cands {
		if !strings.Contains(c.path, "/") {
			loader++
			if !strings.Contains(c.skip, "LD_LIBRARY_PATH") {
				t.Errorf("the system loader is tried with an empty LD_LIBRARY_PATH entry: %+v", c)
			}
		} else if !filepath.IsAbs(c.path) {
			t.Errorf("a relative candidate: %+v", c)
		}
	}
	if loader != len(libNames) {
		t.Errorf("%d bare names for the system loader, want %d: %+v", loader, len(libNames), cands)
	}
	t.Setenv("LD_LIBRARY_PATH", "/usr/lib:lib")
	cands, _ = libCandidates("")
	for _, c := range cands {
		if !strings.Contains(c.path, "/") && c.skip == "" {
			t.Errorf("the system loader is tried with a relative LD_LIBRARY_PATH entry: %+v", c)
		}
	}
	t.Setenv("LD_LIBRARY_PATH", "/usr/lib")
	cands, _ = libCandidates("")
	for _, c := range cands {
		if !strings.Contains(c.path, "/") && c.skip != "" {
			t.Errorf("the system loader is skipped with an absolute LD_LIBRARY_PATH: %+v", c)
		}
	}
	// The failure of the whole search lists every candidate.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("LD_LIBRARY_PATH", "/nonexistent")
	if _, err := loadLib(""); err == nil {
		t.Log("a Dawn library is reachable without the environment: the failure is not seen")
	} else {
		cands, _ = libCandidates("")
		for _, c := range cands {
			if !strings.Contains(err.Error(), c.path) {
				t.Errorf("the search failed without naming %s: %v", c.path, err)
			}
		}
		t.Logf("search without a library: %v", err)
	}
}

// TestUnsafePlace: a library next to the executable is tried only from a directory and a
// file that nobody but their owner (the user or root) can write.
func TestUnsafePlace(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libwebgpu_dawn.so")
	if err := os.WriteFile(lib, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if why := unsafePlace(dir, lib); why != "" {
		t.Errorf("the user's own directory and file: %s", why)
	}
	if why := unsafePlace(dir, filepath.Join(dir, "missing.so")); why != "" {
		t.Errorf("a missing file (reported when loading): %s", why)
	}
	if err := os.Chmod(lib, 0o775); err != nil {
		t.Fatal(err)
	}
	if why := unsafePlace(dir, lib); !strings.Contains(why, lib) || !strings.Contains(why, "writable by others") {
		t.Errorf("a group-writable file: %q", why)
	}
	if err := os.Chmod(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if why := unsafePlace(dir, lib); !strings.Contains(why, dir) || !strings.Contains(why, "writable by others") {
		t.Errorf("a world-writable directory: %q", why)
	}
}

// TestNoLibraryFromWorkingDirectory plants a Dawn library where an old search looked
// (third_party/dawn/ of the module above the working directory), stands there, and checks it
// is neither a candidate nor loaded.
func TestNoLibraryFromWorkingDirectory(t *testing.T) {
	real := os.Getenv(envLib)
	loadedBefore := ""
	libMu.Lock()
	if loaded != nil {
		loadedBefore = libPath(loaded)
	}
	libMu.Unlock()
	dir := t.TempDir()
	planted := dir + "/third_party/dawn/libwebgpu_wrapper.so"
	if err := os.MkdirAll(dir+"/third_party/dawn", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/go.mod", []byte("module planted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if real != "" {
		if err := os.Symlink(real, planted); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(planted, []byte("not a library"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir + "/third_party")
	t.Setenv(envLib, "")
	// Not the pinned build fusednorm-dawn may have installed for the user: a second copy of
	// Dawn in this process would disturb the tests that follow (see libcache_test.go).
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	cands, _ := libCandidates("")
	for _, c := range cands {
		if strings.HasPrefix(c.path, dir) || !strings.HasPrefix(c.path, "/") && strings.Contains(c.path, "/") {
			t.Errorf("candidate derived from the working directory: %+v", c)
		}
	}
	d, err := Open(Options{})
	if err != nil {
		if strings.Contains(err.Error(), dir) {
			t.Errorf("the planted library was tried: %v", err)
		}
		return
	}
	defer d.Close()
	// With a Dawn already running in this process (an earlier test's), the search returns
	// it: the one from the environment, not the planted link to it.
	lib := d.Library()
	if before := loadedBefore; before != "" && lib != before || before == "" && lib == real || strings.HasPrefix(lib, dir) {
		t.Errorf("loaded %s, the planted library", lib)
	}
}

// TestLibraryNamed: a device says which file it loaded, the explicit one when given.
func TestLibraryNamed(t *testing.T) {
	d := openDevice(t, Options{})
	lib := d.Library()
	if !strings.HasPrefix(lib, "/") {
		t.Fatalf("Library() = %q, want an absolute path", lib)
	}
	if want := os.Getenv(envLib); want != "" && lib != want {
		t.Errorf("Library() = %q, want %s", lib, want)
	}
	t.Setenv(envLib, "")
	e := openDevice(t, Options{Library: lib})
	if e.Library() != lib {
		t.Errorf("explicit %s: Library() = %q", lib, e.Library())
	}
}

// TestOneDawnPerProcess: once a Dawn library runs in the process, the search returns it and
// another file is refused, saying why, before it is loaded (a second copy breaks the first).
func TestOneDawnPerProcess(t *testing.T) {
	d := openDevice(t, Options{})
	lib := d.Library()
	copyPath := filepath.Join(t.TempDir(), filepath.Base(lib))
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Library: copyPath}); !errors.Is(err, ops.ErrUnavailable) ||
		!strings.Contains(err.Error(), copyPath+": not loaded") || !strings.Contains(err.Error(), lib) {
		t.Errorf("a second Dawn file: %v, want it refused naming both files", err)
	}
	t.Setenv(envLib, "")
	l, err := loadLib("")
	if err != nil || libPath(l) != lib {
		t.Errorf("the search with a library loaded: %v, %v; want %s", l, err, lib)
	}
	e := openDevice(t, Options{Library: lib})
	if e.Library() != lib {
		t.Errorf("the loaded file named again: Library() = %q, want %s", e.Library(), lib)
	}
}
