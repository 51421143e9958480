package fusednorm

import (
	"github.com/fusednorm/fusednorm/dawn"
)

// openDawn opens the Dawn backend: the library from WithDawnLibrary or FUSEDNORM_DAWN_LIB
// first, then dawn's search list; errors wrap ErrUnavailable with the cause (every path
// tried, no adapter, Null backend only, built without cgo).
func openDawn(c *config) (Backend, error) {
	be, err := dawn.New(dawn.Config{LibPath: c.dawnLib, Inject: c.inject})
	if err != nil {
		return nil, err
	}
	return be, nil
}
