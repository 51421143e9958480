//go:build cgo

package dawn

import "github.com/fusednorm/fusednorm/internal/dawnrt"

// AdapterInfo describes an adapter Dawn finds.
type AdapterInfo = dawnrt.AdapterInfo

// ListAdapters lists the Vulkan adapters Dawn finds, in its order of preference (the first is
// the one New opens by default); library is as Config.Library.
func ListAdapters(library string) ([]AdapterInfo, error) { return dawnrt.ListAdapters(library) }
