//go:build cgo

package dawnrt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// secondICD lists the Vulkan driver of the first manifest in VK_ICD_FILENAMES a second time,
// through a copy of that manifest with its library path made absolute, so the loader reports
// two adapters (two lavapipes) and adapter choice can be tested on one machine. It skips
// when VK_ICD_FILENAMES is unset (a machine with its own GPU driver).
func secondICD(t *testing.T) {
	t.Helper()
	env := os.Getenv("VK_ICD_FILENAMES")
	if env == "" {
		t.Skip("VK_ICD_FILENAMES is unset: no manifest to list twice")
	}
	first := strings.Split(env, string(os.PathListSeparator))[0]
	raw, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
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
}

// TestListAndOpenAdapters lists the adapters, opens each by its index (the device's adapter
// is the one listed), and refuses an index past the list, naming the count.
func TestListAndOpenAdapters(t *testing.T) {
	d := openDevice(t, Options{}) // skips without Dawn
	one, err := ListAdapters("")
	if err != nil {
		t.Fatal(err)
	}
	if len(one) < 1 {
		t.Fatalf("ListAdapters: none, though a device opens")
	}
	if def := d.Info(); one[0].Device != def.Device || one[0].Backend != "Vulkan" {
		t.Errorf("the first adapter listed is %v, the default device's %v", one[0], def)
	}
	secondICD(t)
	list, err := ListAdapters("")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(one)+1 {
		t.Fatalf("with the first driver listed twice: %d adapters, want %d: %v", len(list), len(one)+1, list)
	}
	for i, a := range list {
		d, err := Open(Options{Adapter: i + 1})
		if err != nil {
			t.Fatalf("adapter %d (%v): %v", i, a, err)
		}
		got := d.Info()
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		if got.Device != a.Device || got.Description != a.Description || got.AdapterType != a.AdapterType ||
			got.VendorID != a.VendorID || got.DeviceID != a.DeviceID {
			t.Errorf("adapter %d: opened %v, listed %v", i, got, a)
		}
	}
	_, err = Open(Options{Adapter: len(list) + 1})
	if !errors.Is(err, ops.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("lists %d Vulkan adapter", len(list))) {
		t.Errorf("adapter past the list: %v", err)
	}
}
