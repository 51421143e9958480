package fusednorm_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/testkit"
)

// readmeBlock returns the body of the first fenced block of the given language after the
// heading in README.md.
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q heading", heading)
	}
	s = s[i:]
	open := "\n```" + lang + "\n"
	j := strings.Index(s, open)
	if j < 0 {
		t.Fatalf("README.md: no ```%s block after %q", lang, heading)
	}
	s = s[j+len(open):]
	k := strings.Index(s, "\n```\n")
	if k < 0 {
		t.Fatalf("README.md: the ```%s block after %q is not closed", lang, heading)
	}
	return s[:k+1]
}

// TestReadmeQuickStart builds the README's quick start, exactly as written, in a new module
// outside the repository that requires this one (a replace directive standing in for the
// proxy), and runs it on the CPU: it must print what the README says it prints.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not under -short")
	}
	src := readmeBlock(t, "## Quick start", "go")
	want := readmeBlock(t, "## Quick start", "text")
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()
	mod := "module quickstart\n\ngo 1.26\n\nrequire github.com/fusednorm/fusednorm v0.0.0\n\n" +
		"replace github.com/fusednorm/fusednorm => " + root + "\n"
	for name, body := range map[string]string{"go.mod": mod, "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// On the CPU always; on Dawn too where the suite requires it (make test-dawn: lavapipe
	// or the GPU), which must print the same numbers.
	runs := []struct{ backend, cgo string }{{"cpu", "0"}}
	if testkit.DawnRequired() {
		runs = append(runs, struct{ backend, cgo string }{"dawn", "1"})
	}
	for _, r := range runs {
		env := append(os.Environ(), "GOFLAGS=-mod=mod", "FUSEDNORM_BACKEND="+r.backend, "CGO_ENABLED="+r.cgo, "GOWORK=off")
		for _, args := range [][]string{{"mod", "tidy"}, {"vet", "."}, {"build", "-o", "quickstart", "."}} {
			cmd := exec.Command(goBin, args...)
			cmd.Dir, cmd.Env = dir, env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s in a new module: %v\n%s\nmain.go:\n%s", strings.Join(args, " "), err, out, src)
			}
		}
		cmd := exec.Command(filepath.Join(dir, "quickstart"))
		cmd.Dir, cmd.Env = dir, env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("the quick start on %s failed: %v\n%s", r.backend, err, stderr.String())
		}
		// The first line is the backend; the numbers are the same on both.
		if w := strings.Replace(want, "cpu\n", r.backend+"\n", 1); string(got) != w {
			t.Errorf("the quick start on %s printed\n%s\nthe README says\n%s", r.backend, got, w)
		}
	}
}
