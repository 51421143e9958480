package fusednorm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/cases"
	"github.com/fusednorm/fusednorm/shaders"
)

// TestLibraryEmbedsOnlyManifests links a program that uses the library alone and checks it
// carries each op's manifest.json but not its test.json or bench.json (issue 14): those are
// for the conformance suite and the benchmark, in internal/cases, which the program's
// dependencies must not even list.
func TestLibraryEmbedsOnlyManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("links a program")
	}
	bin := filepath.Join(t.TempDir(), "libonly")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/libonly")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	deps, err := exec.Command("go", "list", "-deps", "./testdata/libonly").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(deps)) {
		if strings.HasSuffix(p, "/internal/cases") {
			t.Errorf("the library's program depends on %s", p)
		}
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{shaders.OpEmbedLayerNorm, shaders.OpAddLayerNorm} {
		for _, file := range []string{"manifest.json", "test.json", "bench.json"} {
			var src []byte
			var err error
			if file == "manifest.json" {
				src, err = shaders.Manifest(op)
			} else {
				src, err = cases.File(op, file)
			}
			if err != nil {
				t.Fatal(err)
			}
			head := src[:min(len(src), 200)] // the opening of the file, as embedded
			if got, want := bytes.Contains(b, head), file == "manifest.json"; got != want {
				t.Errorf("%s/%s in the library's binary: %v, want %v", op, file, got, want)
			}
		}
	}
}
