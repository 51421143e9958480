package fusednorm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fusednorm/fusednorm/internal/dawn"
)

// AdapterInfo describes a GPU adapter that Dawn finds (Adapters).
type AdapterInfo struct {
	Index    int    // its place in the list: WithAdapter(strconv.Itoa(Index)) opens it
	Name     string // the device, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)"
	Vendor   string // e.g. "nvidia" or "mesa"
	Type     string // "DiscreteGPU", "IntegratedGPU", "CPU", …
	Backend  string // "Vulkan"
	Driver   string // the driver's description
	VendorID uint32
	DeviceID uint32
	// Software: a CPU rasterizer (lavapipe), right for testing the GPU path, never faster
	// than the CPU backend; auto mode passes it over.
	Software bool
}

// Adapters lists the Vulkan adapters Dawn finds, in its order of preference (discrete GPUs
// first); the first is the one Open takes without WithAdapter. WithDawnLibrary (else
// FUSEDNORM_DAWN_LIB) names the library as for Open; other options are ignored. Errors wrap
// ErrUnavailable: no Dawn library, a build without cgo, or a Dawn library that cannot list
// adapters.
func Adapters(opts ...Option) ([]AdapterInfo, error) {
	lib := envOr(opts)
	list, err := dawn.ListAdapters(lib)
	if err != nil {
		return nil, fmt.Errorf("fusednorm: Adapters: %w", err)
	}
	out := make([]AdapterInfo, len(list))
	for i, a := range list {
		out[i] = AdapterInfo{Index: i, Name: a.Device, Vendor: a.Vendor, Type: a.AdapterType, Backend: a.Backend,
			Driver: a.Description, VendorID: a.VendorID, DeviceID: a.DeviceID, Software: a.AdapterType == "CPU"}
	}
	return out, nil
}

// envOr is the library the options name, else FUSEDNORM_DAWN_LIB's.
func envOr(opts []Option) string {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.dawnLib == "" {
		c.dawnLib = envDawnLib()
	}
	return c.dawnLib
}

// chooseAdapter resolves WithAdapter's selector against the list: a decimal index, else the
// first adapter whose name, vendor or driver contains sel (ignoring case).
func chooseAdapter(lib, sel string) (int, error) {
	sel = strings.TrimSpace(sel)
	if i, err := strconv.Atoi(sel); err == nil {
		return i, nil // Open refused a negative one; one past the list fails at the open, naming the count
	}
	list, err := dawn.ListAdapters(lib)
	if err != nil {
		return 0, err
	}
	var names []string
	for i, a := range list {
		for _, f := range [...]string{a.Device, a.Vendor, a.Description} {
			if strings.Contains(strings.ToLower(f), strings.ToLower(sel)) {
				return i, nil
			}
		}
		names = append(names, fmt.Sprintf("%d: %s", i, a.Device))
	}
	return 0, fmt.Errorf("dawn: no adapter matches %q (have %s): %w", sel, strings.Join(names, "; "), ErrUnavailable)
}
