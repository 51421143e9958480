//go:build cgo

package dawnrt

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

// Entry is the entry point every kernel the runtime compiles is called by.
const Entry = "main"

// Pipeline is a compiled compute pipeline with an automatic layout: bind group 0 holds
// exactly the bindings its entry point uses statically. The device's Close releases it.
type Pipeline struct {
	c   C.WGPUComputePipeline
	bgl C.WGPUBindGroupLayout // bind group 0; nil when the entry point binds nothing
}

// NewPipeline compiles wgsl's entry point "main". Compile errors carry the WGSL compiler's
// messages. The caller caches pipelines: each call compiles anew.
func (d *Device) NewPipeline(label, wgsl string) (*Pipeline, error) {
	const method = "NewPipeline"
	if err := d.lock(context.Background()); err != nil {
		return nil, err
	}
	defer d.unlock()
	if err := d.usable(method); err != nil {
		return nil, err
	}
	if err := fault(d.faults, "pipeline"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %s: %w: %w", method, label, ops.ErrDevice, err)
	}
	cl := C.CString(label)
	defer C.free(unsafe.Pointer(cl))
	csrc := C.CString(wgsl)
	defer C.free(unsafe.Pointer(csrc))
	centry := C.CString(Entry)
	defer C.free(unsafe.Pointer(centry))
	p := &Pipeline{}
	if rc := C.drt_create_pipeline(d.c, cl, csrc, C.size_t(len(wgsl)), centry, &p.c, &p.bgl, d.errbuf, errCap); rc != C.DRT_OK {
		return nil, d.failure(method, rc)
	}
	d.pipelines = append(d.pipelines, p)
	return p, nil
}
