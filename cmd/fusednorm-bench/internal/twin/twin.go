//go:build cgo

package twin

/*
#include <stdlib.h>
#include "../../../../cgo/bench/tiny_twin.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

var twin struct {
	sync.Mutex
	open bool
}

const msgCap = 8192

// Open loads the Dawn library at path and opens the twin's own device on it. Once a process.
func Open(library string) error {
	twin.Lock()
	defer twin.Unlock()
	if twin.open {
		return errors.New("twin: open already")
	}
	embed, add, invH, err := Kernels()
	if err != nil {
		return err
	}
	cl, ce, ca := C.CString(library), C.CString(embed), C.CString(add)
	defer C.free(unsafe.Pointer(cl))
	defer C.free(unsafe.Pointer(ce))
	defer C.free(unsafe.Pointer(ca))
	msg := (*C.char)(C.malloc(msgCap))
	defer C.free(unsafe.Pointer(msg))
	if C.tiny_twin_open(cl, ce, ca, C.float(invH), msg, msgCap) != 0 {
		return fmt.Errorf("twin: %s", C.GoString(msg))
	}
	twin.open = true
	return nil
}

// Adapter names the twin's device.
func Adapter() string { return C.GoString(C.tiny_twin_adapter()) }

// Run runs op on the twin: 20 calls to warm, n one by one, n back to back with a submit
// each, n back to back sharing submits.
func Run(op Op, n int) (Samples, error) {
	twin.Lock()
	defer twin.Unlock()
	if n < 1 {
		return Samples{}, errors.New("twin: n < 1")
	}
	arr := (*C.double)(C.calloc(C.size_t(5*n), C.size_t(unsafe.Sizeof(C.double(0)))))
	defer C.free(unsafe.Pointer(arr))
	all := unsafe.Slice((*float64)(unsafe.Pointer(arr)), 5*n)
	var s C.tiny_samples
	s.each, s.call = arr, (*C.double)(unsafe.Pointer(&all[n]))
	s.wait, s.b2b = (*C.double)(unsafe.Pointer(&all[2*n])), (*C.double)(unsafe.Pointer(&all[3*n]))
	s.shared = (*C.double)(unsafe.Pointer(&all[4*n]))
	msg := (*C.char)(C.malloc(msgCap))
	defer C.free(unsafe.Pointer(msg))
	if C.tiny_twin_run([...]C.int{Embed: C.TINY_EMBED, Add: C.TINY_ADD}[op], C.int(n), &s, msg, msgCap) != 0 {
		return Samples{}, fmt.Errorf("twin: %s", C.GoString(msg))
	}
	durs := func(f []float64) []time.Duration {
		d := make([]time.Duration, len(f))
		for i, v := range f {
			d[i] = time.Duration(v)
		}
		return d
	}
	return Samples{Each: durs(all[:n]), Call: durs(all[n : 2*n]), Wait: durs(all[2*n : 3*n]),
		BackToBack: durs(all[3*n : 4*n]), BackToBackTotal: time.Duration(s.b2b_total),
		Shared: durs(all[4*n:]), SharedTotal: time.Duration(s.shared_total)}, nil
}
