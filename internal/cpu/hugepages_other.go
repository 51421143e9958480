//go:build !linux

package cpu

import "errors"

// collapseHuge is a no-op off Linux: huge pages there are not asked for.
func collapseHuge(b []byte) error { return errors.ErrUnsupported }
