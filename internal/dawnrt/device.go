//go:build cgo

package dawnrt

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "../../cgo/dawnrt.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// openTimeoutNS bounds the adapter and device requests; lavapipe takes well under a second.
const openTimeoutNS = 60e9

// errCap is the size of the C buffer Dawn's messages are formatted into.
const errCap = 8192

// Options configure Open.
type Options struct {
	// Library is an explicit Dawn library: only it is tried (see Library search).
	Library string
	// Adapter, when > 0, opens adapter Adapter-1 of ListAdapters' list instead of the first.
	Adapter int
	// Logger receives Dawn's own messages (its device log, errors raised outside every error
	// scope) and device loss; nil discards them.
	Logger *slog.Logger
	// QuietLoader sends what the Vulkan loader prints to stderr while the adapter is
	// requested ("Found no drivers" on a machine without a GPU) to Logger instead (Linux).
	QuietLoader bool
	// Faults, when set, is called at each place the device can fail with the site's name:
	// "load", "open", "create-buffer", "write-buffer", "pipeline", "submit", "map"; a non-nil
	// return is that failure. At "async", called after a call is recorded, it becomes that
	// call's device error, reported at the next wait; at "lose", called after a submit, it
	// makes Dawn lose the device for real (wgpuDeviceForceLoss). The module's fault tests set it; nil in use.
	Faults func(site string) error
}

// Limits are the device limits the runtime raised to what the adapter offers.
type Limits struct {
	MaxStorageBufferBindingSize, MaxBufferSize                          uint64
	MaxComputeWorkgroupsPerDimension, MaxComputeInvocationsPerWorkgroup uint32
	MaxComputeWorkgroupSizeX, MaxComputeWorkgroupStorageSize            uint32
	MaxComputeWorkgroupSizeY, MaxComputeWorkgroupSizeZ                  uint32
	MaxStorageBuffersPerShaderStage                                     uint32
	MinStorageBufferOffsetAlignment                                     uint32
	MaxUniformBufferBindingSize                                         uint64
}

// AdapterInfo describes an adapter.
type AdapterInfo struct {
	Vendor, Architecture, Device, Description string
	Backend, AdapterType                      string // e.g. "Vulkan", "DiscreteGPU" or "CPU"
	VendorID, DeviceID                        uint32
	SubgroupMinSize, SubgroupMaxSize          uint32
}

// String is one line for logs: "NVIDIA H200 (Vulkan, DiscreteGPU, driver …)".
func (a AdapterInfo) String() string {
	s := a.Device
	if s == "" {
		s = a.Vendor
	}
	s += " (" + a.Backend + ", " + a.AdapterType
	if a.Description != "" {
		s += ", driver " + a.Description
	}
	return s + ")"
}

// Device is an open Dawn device: its queue, the objects made from it, and the executor.
type Device struct {
	sem    chan struct{} // the lock around every Dawn call; a channel so waits can honour ctx
	c      *C.drt_device
	errbuf *C.char
	faults func(string) error
	lib    string // the library file loaded
	logger *slog.Logger
	info   AdapterInfo
	limits Limits
	feats  map[string]bool

	gone atomic.Bool // set by Close: Lost reads no C memory after it

	// Under sem.
	closed     bool
	buffers    map[*Buffer]struct{}
	pipelines  []*Pipeline
	staging    map[uint64][]C.WGPUBuffer
	timings    []*timing
	uncaptured C.uint64_t
	logSeen    uint64 // messages of the device log passed on to logger
	lossLogged bool
	xfer       *xferRing // staging of large transfers (transfer.go)
	x          executor  // exec.go
}

// Open loads Dawn, requests a Vulkan adapter (refusing Dawn's Null backend) and opens a
// device with its storage, buffer and compute limits raised to the adapter's and the
// TimestampQuery, ShaderF16 and Subgroups features enabled where the adapter has them.
func Open(o Options) (*Device, error) {
	const method = "Open"
	if err := fault(o.Faults, "load"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %w: %w", method, ops.ErrUnavailable, err)
	}
	lib, err := loadLib(o.Library)
	if err != nil {
		return nil, err
	}
	if err := checkGenerated(); err != nil {
		return nil, fmt.Errorf("dawn: %s: %w: %w", method, ops.ErrUnavailable, err)
	}
	if err := fault(o.Faults, "open"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %w: %w", method, ops.ErrUnavailable, err)
	}
	d := &Device{
		sem:     make(chan struct{}, 1),
		c:       (*C.drt_device)(C.calloc(1, C.sizeof_drt_device)),
		errbuf:  (*C.char)(C.calloc(1, errCap)),
		faults:  o.Faults,
		lib:     libPath(lib),
		logger:  o.Logger,
		buffers: map[*Buffer]struct{}{},
		staging: map[uint64][]C.WGPUBuffer{},
	}
	var rc C.int
	openAdapter := func() { rc = C.drt_open_adapter(&lib.p, d.c, C.int(o.Adapter-1), openTimeoutNS, d.errbuf, errCap) }
	if o.QuietLoader {
		if text := strings.TrimSpace(withStderrCaptured(openAdapter)); text != "" && o.Logger != nil {
			o.Logger.Debug("dawn: Vulkan loader: "+text, "source", "vulkan-loader")
		}
	} else {
		openAdapter()
	}
	if rc != C.DRT_OK {
		msg := C.GoString(d.errbuf)
		if why := d.logReasons(); why != "" {
			msg += " (Dawn: " + why + ")"
		}
		if d.logger != nil {
			d.passLog() // what Dawn met looking for an adapter
		}
		d.free()
		return nil, fmt.Errorf("dawn: %s: %w: %s; library %s; Dawn needs a Vulkan driver: the GPU's, or to run on the CPU Mesa 25 or later's lavapipe (mesa-vulkan-drivers; older lavapipe lacks features Dawn requires)",
			method, ops.ErrUnavailable, msg, d.lib)
	}
	c := d.c
	d.info = adapterInfo(&c.info)
	l := &c.limits
	d.limits = Limits{
		MaxStorageBufferBindingSize:       uint64(l.maxStorageBufferBindingSize),
		MaxBufferSize:                     uint64(l.maxBufferSize),
		MaxComputeWorkgroupsPerDimension:  uint32(l.maxComputeWorkgroupsPerDimension),
		MaxComputeInvocationsPerWorkgroup: uint32(l.maxComputeInvocationsPerWorkgroup),
		MaxComputeWorkgroupSizeX:          uint32(l.maxComputeWorkgroupSizeX),
		MaxComputeWorkgroupStorageSize:    uint32(l.maxComputeWorkgroupStorageSize),
		MaxComputeWorkgroupSizeY:          uint32(l.maxComputeWorkgroupSizeY),
		MaxComputeWorkgroupSizeZ:          uint32(l.maxComputeWorkgroupSizeZ),
		MaxStorageBuffersPerShaderStage:   uint32(l.maxStorageBuffersPerShaderStage),
		MinStorageBufferOffsetAlignment:   uint32(l.minStorageBufferOffsetAlignment),
		MaxUniformBufferBindingSize:       uint64(l.maxUniformBufferBindingSize),
	}
	d.feats = map[string]bool{}
	for v, name := range featureNames {
		if C.drt_has_feature(c, C.uint32_t(v)) != 0 {
			d.feats[name] = true
		}
	}
	d.x.init(d)
	return d, nil
}

// ListAdapters lists the Vulkan adapters Dawn finds, in its order of preference (discrete
// GPUs first; the first is the one Open takes by default). library is as Options.Library.
// The list comes from Dawn's C++ API (dawn::native::Instance::EnumerateAdapters): a library
// without it gives an error wrapping ops.ErrUnavailable.
func ListAdapters(library string) ([]AdapterInfo, error) {
	lib, err := loadLib(library)
	if err != nil {
		return nil, err
	}
	const max = 64
	out := (*[max]C.drt_adapter_info)(C.calloc(max, C.sizeof_drt_adapter_info))
	defer C.free(unsafe.Pointer(out))
	errbuf := (*C.char)(C.calloc(1, errCap))
	defer C.free(unsafe.Pointer(errbuf))
	var n C.int
	if rc := C.drt_adapters(&lib.p, &out[0], max, &n, errbuf, errCap); rc != C.DRT_OK {
		return nil, fmt.Errorf("dawn: ListAdapters: %w: %s", ops.ErrUnavailable, C.GoString(errbuf))
	}
	list := make([]AdapterInfo, 0, min(int(n), max))
	for i := range min(int(n), max) {
		list = append(list, adapterInfo(&out[i]))
	}
	return list, nil
}

// adapterInfo is the Go form of an adapter's info.
func adapterInfo(a *C.drt_adapter_info) AdapterInfo {
	return AdapterInfo{
		Vendor:          C.GoString(&a.vendor[0]),
		Architecture:    C.GoString(&a.architecture[0]),
		Device:          C.GoString(&a.device_name[0]),
		Description:     C.GoString(&a.description[0]),
		Backend:         enumName(backendTypeNames, uint32(a.backend_type)),
		AdapterType:     enumName(adapterTypeNames, uint32(a.adapter_type)),
		VendorID:        uint32(a.vendor_id),
		DeviceID:        uint32(a.device_id),
		SubgroupMinSize: uint32(a.subgroup_min),
		SubgroupMaxSize: uint32(a.subgroup_max),
	}
}

func enumName(table map[uint32]string, v uint32) string {
	if s, ok := table[v]; ok {
		return s
	}
	return fmt.Sprintf("0x%X", v)
}

func fault(hook func(string) error, site string) error {
	if hook == nil {
		return nil
	}
	if err := hook(site); err != nil {
		return fmt.Errorf("injected fault at %s: %w", site, err)
	}
	return nil
}

// Info describes the adapter the device runs on.
func (d *Device) Info() AdapterInfo { return d.info }

// Limits are the device's limits.
func (d *Device) Limits() Limits { return d.limits }

// Library is the path of the Dawn library file the device runs on.
func (d *Device) Library() string { return d.lib }

// HasFeature reports whether the device has the named feature enabled, e.g. "TimestampQuery",
// "ShaderF16", "Subgroups".
func (d *Device) HasFeature(name string) bool { return d.feats[name] }

// Features lists the device's enabled features by name.
func (d *Device) Features() []string { return slices.Sorted(maps.Keys(d.feats)) }

// lock takes the device lock, giving up when ctx ends first.
func (d *Device) lock(ctx context.Context) error {
	select {
	case d.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case d.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Device) unlock() {
	if d.logger != nil && d.c != nil && uint64(d.c.log_written) != d.logSeen {
		d.passLog()
	}
	<-d.sem
}

// logReasons joins the warnings and errors Dawn has logged and not yet passed on (why no
// adapter was found, when opening fails), without consuming them.
func (d *Device) logReasons() string {
	var msg [C.DRT_LOG_MSG_CAP]C.char
	var typ C.uint32_t
	var out []string
	for seq := d.logSeen; seq < uint64(d.c.log_written); seq++ {
		if C.drt_log_take(d.c, C.uint64_t(seq), &typ, &msg[0], C.DRT_LOG_MSG_CAP) == C.DRT_OK &&
			(typ == C.WGPULoggingType_Warning || typ == C.WGPULoggingType_Error) {
			m, _, _ := strings.Cut(strings.TrimSpace(C.GoString(&msg[0])), "\n") // not Dawn's source location
			if m != "" && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return strings.Join(out, "; ")
}

// passLog hands the device log's new messages to the logger; under the lock.
func (d *Device) passLog() {
	var msg [C.DRT_LOG_MSG_CAP]C.char
	var typ C.uint32_t
	for n := uint64(d.c.log_written); d.logSeen < n; d.logSeen++ {
		if C.drt_log_take(d.c, C.uint64_t(d.logSeen), &typ, &msg[0], C.DRT_LOG_MSG_CAP) != C.DRT_OK {
			continue // overwritten before it was read
		}
		level := slog.LevelDebug
		switch typ {
		case C.WGPULoggingType_Info:
			level = slog.LevelInfo
		case C.WGPULoggingType_Warning:
			level = slog.LevelWarn
		case C.WGPULoggingType_Error:
			level = slog.LevelError
		}
		d.logger.Log(context.Background(), level, "dawn: "+C.GoString(&msg[0]), "source", "dawn")
	}
}

// lost reports whether Dawn lost the device (Close, which destroys it, is not a loss). The
// flag, which the C callback stores with release, is read in place with an atomic load: a call
// checks it before every record, and a cgo crossing there would cost more than the load.
func (d *Device) lost() bool {
	return !d.closed && d.c != nil && atomic.LoadInt32((*int32)(unsafe.Pointer(&d.c.lost))) != 0
}

// LossMessage is Dawn's message for the device's loss, "" while it is not lost.
func (d *Device) LossMessage() string {
	if err := d.lock(context.Background()); err != nil {
		return ""
	}
	defer d.unlock()
	if !d.lost() {
		return ""
	}
	return C.GoString(&d.c.lost_msg[0])
}

// Lost reports whether the device was lost (and not closed since). It takes no lock: the
// caller must not race it with Close (the backend holds its life lock around both).
func (d *Device) Lost() bool {
	return !d.gone.Load() && atomic.LoadInt32((*int32)(unsafe.Pointer(&d.c.lost))) != 0
}

// lossError is the error of a call on a lost device; under the lock.
func (d *Device) lossError(method string) error {
	msg := C.GoString(&d.c.lost_msg[0])
	if !d.lossLogged {
		d.lossLogged = true
		if d.logger != nil {
			d.logger.Error("dawn: device lost", "device", d.info.String(), "message", msg)
		}
	}
	return fmt.Errorf("dawn: %s: %w: device lost: %s", method, ops.ErrDevice, msg)
}

// usable reports, under the lock, why the device cannot take work, or nil.
func (d *Device) usable(method string) error {
	if d.closed {
		return fmt.Errorf("dawn: %s: %w", method, ops.ErrClosed)
	}
	if d.lost() {
		return d.lossError(method)
	}
	return nil
}

// failure wraps the message in d.errbuf for a DRT_* code; on a lost device the error says so
// first, since the loss is why Dawn failed.
func (d *Device) failure(method string, rc C.int) error {
	if d.lost() {
		return fmt.Errorf("%w (%s)", d.lossError(method), C.GoString(d.errbuf))
	}
	sentinel := ops.ErrDevice
	if rc == C.DRT_EUNAVAILABLE {
		sentinel = ops.ErrUnavailable
	}
	return fmt.Errorf("dawn: %s: %w: %s", method, sentinel, C.GoString(d.errbuf))
}

// uncapturedError reports an error Dawn raised outside every error scope since the last check.
func (d *Device) uncapturedError(method string) error {
	if d.c.uncaptured == d.uncaptured {
		return nil
	}
	d.uncaptured = d.c.uncaptured
	msg := C.GoString(&d.c.uncaptured_msg[0])
	if d.logger != nil {
		d.logger.Warn("dawn: uncaptured error", "message", msg)
	}
	return fmt.Errorf("dawn: %s: %w: uncaptured error: %s", method, ops.ErrDevice, msg)
}

// forceLoss makes Dawn lose the device, as a driver reset or a removed GPU would; under the
// lock. For the "lose" fault site: a library without wgpuDeviceForceLoss loses nothing.
func (d *Device) forceLoss(cause error) {
	msg := C.CString(cause.Error())
	defer C.free(unsafe.Pointer(msg))
	C.drt_force_loss(d.c, msg, d.errbuf, errCap)
}

// Close submits what is recorded, waits briefly for work in flight, and releases every
// object made from the device and the device itself. Later calls fail wrapping ErrClosed;
// Close itself may be called again. After a loss it returns an error saying so.
func (d *Device) Close() error {
	d.x.stopTimer()
	if err := d.lock(context.Background()); err != nil {
		return err
	}
	defer d.unlock()
	if d.closed {
		return nil
	}
	if !d.lost() {
		d.x.drain(reapOnClose)
	}
	d.x.release()
	for _, p := range d.pipelines {
		C.drt_pipeline_release(d.c, p.c, p.bgl)
	}
	d.pipelines = nil
	for b := range d.buffers {
		C.drt_buffer_release(d.c, b.c)
		b.c = nil
	}
	d.buffers = nil
	for _, list := range d.staging {
		for _, s := range list {
			C.drt_buffer_release(d.c, s)
		}
	}
	d.staging = nil
	d.releaseXfer()
	for _, t := range d.timings {
		t.release(d)
	}
	d.timings = nil
	var err error
	if d.lost() && d.c.lost_reason != C.WGPUDeviceLostReason_Destroyed {
		err = fmt.Errorf("dawn: Close: %w: device was lost: %s", ops.ErrDevice, C.GoString(&d.c.lost_msg[0]))
	}
	d.gone.Store(true)
	C.drt_close(d.c)
	// Only now, with the instance gone, can no callback write into C memory of the executor.
	d.x.free()
	d.freeXfer()
	if d.logger != nil {
		d.passLog()
	}
	d.closed = true
	d.free()
	return err
}

func (d *Device) free() {
	C.free(unsafe.Pointer(d.c))
	C.free(unsafe.Pointer(d.errbuf))
	d.c, d.errbuf = nil, nil
}

// isCtxErr reports whether err came from a context.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
