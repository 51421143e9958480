package fusednorm

import (
	"fmt"
)

// openDawn opens the Dawn backend. (Wired to package dawn once it lands.)
func openDawn(c *config) (Backend, error) {
	return nil, fmt.Errorf("dawn: not built in yet: %w", ErrUnavailable)
}
