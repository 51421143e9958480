//go:build cgo

package dawnrt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

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
	if !testkit.ListDriverTwice(t) {
		t.Skip("VK_ICD_FILENAMES is unset: no manifest to list twice")
	}
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
