package fusednorm_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// specFile is the module's specification; comments, tests and docs cite its sections.
const specFile = "docs/spec.md"

// sectionID is a section number of the spec: a letter, then up to two numeric levels, the
// first with an optional letter (A, A.2, A.2a, C.4b). A third level names an item of a
// section's numbered list (A.7.3: item 3 of A.7).
const sectionID = `[A-F](?:\.[0-9]+[a-z]?(?:\.[0-9]+)?)?`

var (
	// specHeading is a heading of the spec that opens a numbered section ("### A.2a …").
	specHeading = regexp.MustCompile(`^#{2,6}[ \t]+(` + sectionID + `)[. \t]`)
	// citeMark is a cited section: the section sign is reserved for the spec in this module,
	// so every "§" followed by a section number is a citation, whatever precedes it ("spec",
	// "SPEC", or nothing in a list such as "spec §C.4 and §C.4a").
	citeMark = regexp.MustCompile(`§[ \t]*(` + sectionID + `)\b`)
	// citeBare is the older form without the sign, in capitals.
	citeBare = regexp.MustCompile(`\bSPEC[ \t]+(` + sectionID + `)\b`)
	// staleFile is a citation of a spec file a clone of the module does not have.
	staleFile = regexp.MustCompile(`\bSPEC\.md\b`)
	// listItem is a numbered list item: "3. …".
	listItem = regexp.MustCompile(`^[ \t]*([0-9]+)\.[ \t]`)
)

// specSections reads the spec's numbered sections: each id with the numbers of the list
// items in its body. It reports headings that occur twice (a citation would be ambiguous).
func specSections(t *testing.T, text string) map[string]map[string]bool {
	t.Helper()
	sections := map[string]map[string]bool{}
	var cur map[string]bool
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "#") {
			cur = nil
			if m := specHeading.FindStringSubmatch(line); m != nil {
				if sections[m[1]] != nil {
					t.Errorf("%s:%d: section %s has a second heading", specFile, i+1, m[1])
				}
				cur = map[string]bool{}
				sections[m[1]] = cur
			}
			continue
		}
		if m := listItem.FindStringSubmatch(line); m != nil && cur != nil {
			cur[m[1]] = true
		}
	}
	return sections
}

// resolves reports whether the spec has section id: a heading, or, for a three-level id, an
// item of its section's numbered list.
func resolves(sections map[string]map[string]bool, id string) bool {
	if sections[id] != nil {
		return true
	}
	if strings.Count(id, ".") != 2 {
		return false
	}
	cut := strings.LastIndexByte(id, '.')
	items := sections[id[:cut]]
	return items != nil && items[id[cut+1:]]
}

// skipDir are the directories the walk leaves out: provisioned or generated files that are
// not the module's own (all git-ignored).
var skipDir = map[string]bool{"third_party": true, "build": true, "node_modules": true, "carry": true, "bench-results": true}

// citingExt are the kinds of files that cite the spec: Go, Markdown, and the WGSL templates,
// C, JavaScript, JSON test data and scripts beside them.
var citingExt = map[string]bool{".go": true, ".md": true, ".tmpl": true, ".wgsl": true, ".c": true, ".h": true,
	".js": true, ".json": true, ".sh": true, ".txt": true}

// TestSpecCitationsResolve walks every Go, Markdown and other source file of the module and
// fails when one cites a section of the spec that docs/spec.md has no heading for, or cites
// a spec file by a name that is not in the module.
func TestSpecCitationsResolve(t *testing.T) {
	raw, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatalf("the spec: %v", err)
	}
	sections := specSections(t, string(raw))
	if len(sections) < 30 {
		t.Fatalf("%s: %d numbered sections found, want the A–F sections (a heading format changed?)", specFile, len(sections))
	}
	files, citations := 0, 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || skipDir[d.Name()]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !citingExt[filepath.Ext(path)] {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		name := filepath.ToSlash(path)
		for i, line := range strings.Split(string(b), "\n") {
			if staleFile.MatchString(line) {
				t.Errorf("%s:%d: cites a spec file the module does not have; cite %s (\"spec §X\")", name, i+1, specFile)
			}
			for _, re := range []*regexp.Regexp{citeMark, citeBare} {
				for _, m := range re.FindAllStringSubmatch(line, -1) {
					citations++
					if !resolves(sections, m[1]) {
						t.Errorf("%s:%d: cites §%s, which %s has no section for", name, i+1, m[1], specFile)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A walk that finds nothing would pass for the wrong reason.
	if files < 100 || citations < 50 {
		t.Fatalf("walked %d files and found %d citations: the walk missed the module's sources", files, citations)
	}
	t.Logf("%d files, %d citations, %d sections", files, citations, len(sections))
}
