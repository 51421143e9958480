package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// tableField is the family each field of the kernels table (internal/cpu/kernels.go) dispatches.
var tableField = map[string]string{
	"sums": "sum", "adds": "addsum", "affines": "affine", "convs": "convert",
	"embeds": "embedsum", "masks": "mask", "mem": "memory",
}

// TestFamilies checks that every kernel is generated into the file of the family whose
// table field names it, that the tables name no kernel generated nowhere, that every
// family is generated into its own pair of files, and that no VADDPH is left for Go's
// assembler (which has none) in any of them.
func TestFamilies(t *testing.T) {
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	textRE := regexp.MustCompile(`(?m)^TEXT ·(\w+)\(SB\)`)
	declRE := regexp.MustCompile(`(?m)^func (\w+)\(`)
	home := map[string]string{} // kernel → the family file that generates it
	var tab []byte
	for _, f := range files {
		if f.name == tablesFile {
			tab = f.src
			continue
		}
		fam, ext, ok := strings.Cut(f.name, "_amd64.")
		if !ok {
			t.Fatalf("generated file %s: want <family>_amd64.{s,go}", f.name)
		}
		re := declRE
		if ext == "s" {
			re = textRE
			if m := regexp.MustCompile(`(?m)^\s+VADDPH`).Find(f.src); m != nil {
				t.Errorf("%s: VADDPH left unencoded", f.name)
			}
		}
		for _, m := range re.FindAllSubmatch(f.src, -1) {
			name := string(m[1])
			if ext == "s" {
				home[name] = fam
			} else if home[name] != fam {
				t.Errorf("%s declares %s, generated in %q", f.name, name, home[name])
			}
		}
	}
	if want := 2*len(families) + 1; len(files) != want {
		t.Errorf("%d generated files, want %d (a .s and a .go per family, and the tables)", len(files), want)
	}

	af, err := parser.ParseFile(token.NewFileSet(), tablesFile, tab, 0)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	ast.Inspect(af, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		key, ok := kv.Key.(*ast.Ident)
		if !ok {
			return true
		}
		fam, ok := tableField[key.Name]
		if !ok {
			return true
		}
		ast.Inspect(kv.Value, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || !strings.HasPrefix(id.Name, "avx") {
				return true
			}
			named[id.Name] = true
			if got, ok := home[id.Name]; !ok {
				t.Errorf("table field %s names %s, which is generated nowhere", key.Name, id.Name)
			} else if got != fam {
				t.Errorf("table field %s (%s.go) names %s, generated into %s_amd64.s", key.Name, fam, id.Name, got)
			}
			return true
		})
		return false
	})
	for name, fam := range home {
		// The avx512fp16 level's kernels are named in internal/cpu/levels_amd64.go, by hand.
		if !named[name] && !(fam == "embedsum" && strings.HasPrefix(name, "avx512fp16")) {
			t.Errorf("%s (%s_amd64.s) is in no table", name, fam)
		}
	}
}
