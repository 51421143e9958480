package testkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// LockedBuffer is a strings.Builder that several goroutines may write (a logger's output).
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Reset empties the buffer.
func (l *LockedBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// ListDriverTwice adds to VK_ICD_FILENAMES, for the rest of the test, a copy of its first
// manifest with the library path made absolute: the Vulkan loader, which reads the variable
// at every instance Dawn creates, then reports that driver's adapters twice (two lavapipes
// on a GPU-less machine). It returns false, changing nothing, where VK_ICD_FILENAMES is
// unset (the machine's own drivers).
func ListDriverTwice(t testing.TB) bool {
	t.Helper()
	env := os.Getenv("VK_ICD_FILENAMES")
	if env == "" {
		return false
	}
	first := strings.Split(env, string(os.PathListSeparator))[0]
	raw, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", first, err)
	}
	icd, _ := m["ICD"].(map[string]any)
	lib, _ := icd["library_path"].(string)
	if lib == "" {
		t.Fatalf("%s: no ICD.library_path", first)
	}
	if strings.Contains(lib, "/") && !filepath.IsAbs(lib) {
		icd["library_path"] = filepath.Join(filepath.Dir(first), lib)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(t.TempDir(), "second_icd.json")
	if err := os.WriteFile(second, out, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VK_ICD_FILENAMES", env+string(os.PathListSeparator)+second)
	return true
}
