//go:build cgo

package dawnrt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/dawnpin"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// The folder cmd/fusednorm-dawn installs into is searched without any environment: the
// pinned build loads from there, a different file of the same name is refused, saying why.
func TestLibraryFromInstallFolder(t *testing.T) {
	// The test loads a second copy of Dawn (the pinned build, from another file). Once a
	// process has loaded two, the first one's waits can return before their callbacks ran
	// ("error scope never resolved", "map: status 0": seen on lavapipe in TestConcurrent after
	// this test; the copies share C++ symbols of unique binding). So it runs alone.
	if runInChild(t) {
		return
	}
	src := os.Getenv(envLib)
	if src == "" {
		testkit.SkipWithoutDawn(t, os.ErrNotExist)
	}
	if sum, err := dawnpin.FileSHA256(src); err != nil || sum != dawnpin.LibSHA256 {
		t.Skipf("%s is not the pinned build (%v)", src, err)
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(envLib, "")
	dir, err := dawnpin.CacheDir()
	if err != nil || !strings.HasPrefix(dir, cache) {
		t.Fatalf("CacheDir %q, %v: not under XDG_CACHE_HOME %s", dir, err, cache)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, dawnpin.LibName)

	// A planted file first: refused with the reason, and nothing else found here.
	if err := os.WriteFile(lib, []byte("\x7fELF not dawn"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := loadLib(""); err == nil {
		t.Skip("a Dawn library is reachable through the system loader here; the folder is not reached")
	} else if msg := err.Error(); !strings.Contains(msg, lib+": not loaded: its SHA-256") || !strings.Contains(msg, dawnpin.InstallCommand) {
		t.Errorf("planted library: %v\nwant the file named with its SHA-256 reason, and the install command", err)
	}

	// The pinned build, as fusednorm-dawn installs it.
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, data, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := loadLib("")
	if err != nil {
		t.Fatalf("pinned library in %s: %v", dir, err)
	}
	if got := libPath(l); got != lib {
		t.Errorf("loaded %s, want %s", got, lib)
	}

	// A folder others may write to is not trusted, whatever it holds.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	loaded = nil
	if _, err := loadLib(""); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("world-writable folder: %v", err)
	}
}
