//go:build cgo

package dawn

/*
#include <stdlib.h>
#include "../../cgo/dawnrt.h"
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// pipeline is a compiled compute pipeline with an automatic layout. The device's cache owns
// it; the device's close releases it.
type pipeline struct {
	key   string
	entry string
	c     C.WGPUComputePipeline
	bgl   C.WGPUBindGroupLayout // bind group 0; nil when the entry point binds nothing
}

// pipeline compiles wgsl's entry point once per key and returns the cached pipeline after
// that (the key must therefore identify the source). Compile errors carry the WGSL
// compiler's messages and are not cached.
//
// The layout is derived from the entry point: bind group 0 holds exactly the bindings the
// entry point uses statically, so run must bind those and no others.
func (d *device) pipeline(key, wgsl, entry string) (*pipeline, error) {
	const method = "(*device).pipeline"
	if err := d.lock(context.Background()); err != nil {
		return nil, err
	}
	defer d.unlock()
	if err := d.usable(method); err != nil {
		return nil, err
	}
	if p := d.pipelines[key]; p != nil {
		return p, nil
	}
	if err := injected(d.inject, "pipeline"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %s: %w: %w", method, key, ops.ErrDevice, err)
	}
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	csrc := C.CString(wgsl)
	defer C.free(unsafe.Pointer(csrc))
	centry := C.CString(entry)
	defer C.free(unsafe.Pointer(centry))
	p := &pipeline{key: key, entry: entry}
	if rc := C.drt_create_pipeline(d.c, ckey, csrc, C.size_t(len(wgsl)), centry, &p.c, &p.bgl, d.errbuf, errCap); rc != C.DRT_OK {
		return nil, d.failure(method, rc)
	}
	d.pipelines[key] = p
	return p, nil
}
