package cinclude

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A package that includes C from a sibling directory: Outside follows the chain of quoted
// includes, skips system headers and files in the package, and the hash moves with an edit
// two includes away.
func TestOutsideAndCheck(t *testing.T) {
	root := t.TempDir()
	pkg := filepath.Join(root, "pkg")
	write(t, filepath.Join(root, "c", "rt.c"), "#include \"rt.h\"\n#include <stdio.h>\nint f(void);\n")
	write(t, filepath.Join(root, "c", "rt.h"), "#include \"gen.h\"\n")
	write(t, filepath.Join(root, "c", "gen.h"), "#define A 1\n")
	write(t, filepath.Join(pkg, "cgo.c"), "#include \"../c/rt.c\"\n#include \"local.h\"\n")
	write(t, filepath.Join(pkg, "local.h"), "\n")
	write(t, filepath.Join(pkg, "p.go"), "package p\n\n/*\n#include \"../c/rt.h\"\n#include \"missing.h\"\n*/\nimport \"C\"\n")

	got, err := Outside(pkg)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"../c/gen.h", "../c/rt.c", "../c/rt.h"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Outside = %q, want %q", got, want)
	}
	if err := Check(pkg); err == nil {
		t.Fatal("Check passed with no generated file")
	}
	b, err := Generate(pkg)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(pkg, FileName), string(b))
	if err := Check(pkg); err != nil {
		t.Fatalf("Check of a fresh file: %v", err)
	}
	write(t, filepath.Join(root, "c", "gen.h"), "#define A 2\n")
	err = Check(pkg)
	if err == nil || !strings.Contains(err.Error(), "go generate") {
		t.Fatalf("Check after an edit two includes away = %v, want a stale error", err)
	}
}
