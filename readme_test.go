package fusednorm_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/testkit"
)

// readmeSection returns the lines under the heading in README.md, up to the next heading of
// the same or a higher level outside a fenced block.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	depth := headingDepth(heading)
	var out []string
	found, fenced := false, false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if found && !fenced {
			if d := headingDepth(line); d > 0 && d <= depth {
				break
			}
		}
		if found {
			out = append(out, line)
		}
		found = found || line == heading
	}
	if !found {
		t.Fatalf("README.md has no %q heading", heading)
	}
	return strings.Join(out, "\n")
}

// headingDepth is the level of a Markdown heading line ("## Layout": 2), or 0.
func headingDepth(line string) int {
	d := len(line) - len(strings.TrimLeft(line, "#"))
	if d > 0 && strings.HasPrefix(line[d:], " ") {
		return d
	}
	return 0
}

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

var number = regexp.MustCompile(`\d+(?:\.\d+)?`)

// TestReadmePerformanceTraces: every number in the README's Performance section (figures,
// shapes, flags of the commands) appears, written the same way, in docs/performance.md, so
// the README quotes the page and never derives or rounds a figure of its own.
func TestReadmePerformanceTraces(t *testing.T) {
	perf := readmeSection(t, "## Performance")
	doc, err := os.ReadFile(filepath.Join("docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, n := range number.FindAllString(string(doc), -1) {
		have[n] = true
	}
	for _, n := range number.FindAllString(perf, -1) {
		if !have[n] {
			t.Errorf("README.md, Performance: %s is not in docs/performance.md", n)
		}
	}
}

// TestReadmeLayoutExists: every path in the first column of the README's Layout table exists.
func TestReadmeLayoutExists(t *testing.T) {
	paths := 0
	for _, line := range strings.Split(readmeSection(t, "## Layout"), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.Contains(cells[1], "`") {
			continue
		}
		for _, p := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1) {
			paths++
			if _, err := os.Stat(filepath.FromSlash(p[1])); err != nil {
				t.Errorf("README.md, Layout: %v", err)
			}
		}
	}
	if paths == 0 {
		t.Fatal("README.md, Layout: no paths found in the table")
	}
}

// TestReadmeExamplesExist: every Example function the README names is defined in the root
// package's example*_test.go files, which go test runs.
func TestReadmeExamplesExist(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("example*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	names := regexp.MustCompile(`\bExample[A-Za-z_]*`).FindAllString(string(raw), -1)
	if len(names) == 0 {
		t.Fatal("README.md names no Example functions")
	}
	for _, n := range names {
		if !strings.Contains(src.String(), "func "+n+"()") {
			t.Errorf("README.md names %s, which no example*_test.go defines", n)
		}
	}
}
