package dawn

import "log/slog"

// Config chooses the Dawn library and the adapter.
type Config struct {
	// Library is the Dawn shared library, and only it is tried; empty: the runtime's search.
	Library string
	// Adapter, when > 0, opens adapter Adapter-1 of ListAdapters' list instead of the first; a
	// device reopened after a loss is on the same adapter.
	Adapter int
	// Logger receives Dawn's messages and the backend's reports of device loss; nil discards.
	Logger *slog.Logger
	// QuietLoader is dawnrt.Options.QuietLoader: an auto engine sets it.
	QuietLoader bool
	// Faults is dawnrt.Options.Faults: the module's fault tests set it.
	Faults func(site string) error
}
