/*
 * dawnrt: the thin C layer between the Go package dawn and a Dawn library loaded with dlopen.
 *
 * Why C at all: Go cannot call C function pointers, and Dawn reports results through C
 * callbacks. This layer owns the function table, the callbacks (which only write into C
 * structs that the Go side reads after a wait), and the short call sequences that must run
 * on one OS thread without a Go scheduling point in between (an error scope push, the
 * calls it guards, and its pop). No Go pointer is ever stored on the C side.
 *
 * Every function that can fail returns 0 on success and a DRT_E* code otherwise, with a
 * message in the caller's buffer.
 */
#ifndef FUSEDNORM_DAWNRT_H
#define FUSEDNORM_DAWNRT_H

#include <stddef.h>
#include <stdint.h>

#include "webgpu_gen.h"

enum {
    DRT_OK = 0,
    DRT_EUNAVAILABLE = 1, /* no library, no adapter, Null backend only */
    DRT_EDEVICE = 2,      /* Dawn or the driver rejected or failed an operation */
    DRT_ETIMEOUT = 3      /* a wait ran out of time; the operation is still pending */
};

#define DRT_MSG_CAP 2048
#define DRT_LOG_SLOTS 16
#define DRT_LOG_MSG_CAP 1024

/* The function table: one pointer per Dawn function the runtime calls. */
typedef struct drt_procs {
#define DRT_PROC_FIELD(name) WGPUProc##name name;
    WGPU_GEN_PROCS(DRT_PROC_FIELD, DRT_PROC_FIELD)
#undef DRT_PROC_FIELD
    /* dawn::native::DawnInstanceDescriptor's constructor (C++), kept only when it builds the
     * layout dawnrt.c declares (drt_instance_desc); NULL otherwise, and then the instance's
     * messages keep going to stderr. */
    void (*instance_desc_ctor)(void *self);
    /* Adapter enumeration, which Dawn's C API lacks: dawn::native::Instance's constructor from
     * its implementation, its EnumerateAdapters and destructor, dawn::native::Adapter's
     * destructor, operator delete and wgpuAdapterAddRef (C++, see dawnrt.c); all set or all
     * NULL, and then only the default adapter can be opened. */
    void (*instance_ctor)(void *self, WGPUInstance impl);
    void (*instance_dtor)(void *self);
    void (*enumerate)(void *ret, const void *self, const WGPURequestAdapterOptions *opts);
    void (*adapter_dtor)(void *self);
    void (*op_delete)(void *p);
    void (*adapter_add_ref)(WGPUAdapter a);
} drt_procs;

typedef struct drt_lib {
    drt_procs p;
    char path[1024]; /* the file loaded: the candidate, resolved by the loader for a bare name */
} drt_lib;

/*
 * drt_load tries each candidate in order (a path with a slash, or a bare name for the system
 * loader) and stops at the first that opens and exports every required function. For each
 * failure it appends "<candidate>: <why>\n" to report.
 */
int drt_load(const char *const *candidates, int n, drt_lib *lib, char *report, size_t cap);

/* The result of one asynchronous Dawn operation, written by its callback. */
typedef struct drt_status {
    int done;
    uint32_t status;
    uint32_t type;
    char msg[DRT_MSG_CAP];
} drt_status;

/* An adapter: the device's (drt_device.info), or one of drt_adapters' list. */
typedef struct drt_adapter_info {
    char vendor[256], architecture[256], device_name[256], description[256];
    uint32_t backend_type, adapter_type, vendor_id, device_id, subgroup_min, subgroup_max;
} drt_adapter_info;

typedef struct drt_device {
    const drt_procs *p;
    WGPUInstance instance;
    WGPUAdapter adapter;
    WGPUDevice device;
    WGPUQueue queue;
    WGPULimits limits; /* the device's, after the raise */

    drt_adapter_info info; /* the adapter the device is on */

    /* Written by the device-lost and uncaptured-error callbacks; lost is set last (release). */
    int lost;
    uint32_t lost_reason;
    char lost_msg[DRT_MSG_CAP];
    uint64_t uncaptured;
    char uncaptured_msg[DRT_MSG_CAP];

    /* Dawn's device log (wgpuDeviceSetLoggingCallback), kept instead of printed: a ring of the
     * last DRT_LOG_SLOTS messages; log_written counts every message ever logged. */
    int log_lock;
    uint64_t log_written;
    uint32_t log_type[DRT_LOG_SLOTS];
    char log_msg[DRT_LOG_SLOTS][DRT_LOG_MSG_CAP];

    /* The open command encoder that drt_record records into and drt_flush submits. */
    WGPUCommandEncoder enc;
    /* The compute pass left open in enc: consecutive recorded dispatches share it, until a
     * copy, a read-back, a timed dispatch or the submit ends it (NULL: none open). */
    WGPUComputePassEncoder pass;
} drt_device;

/* Features requested when the adapter has them; none is required. */
#define DRT_WANTED_FEATURES \
    { WGPUFeatureName_TimestampQuery, WGPUFeatureName_ShaderF16, WGPUFeatureName_Subgroups }

/*
 * drt_open_adapter creates an instance with timed waits, requests a Vulkan adapter, refuses Dawn's Null
 * backend and creates a device whose compute and storage limits are raised to the adapter's.
 * On failure every half-built object is released. index >= 0 opens the adapter at index of
 * drt_adapters' list (Vulkan adapters in Dawn's order) instead; DRT_EUNAVAILABLE when the index
 * is past the list or the library cannot enumerate.
 */
int drt_open_adapter(const drt_procs *p, drt_device *d, int index, uint64_t timeout_ns, char *err, size_t cap);

/* drt_adapters lists up to cap_out Vulkan adapters in Dawn's order into out and their count
 * into *n (which may exceed cap_out). DRT_EUNAVAILABLE when the library cannot enumerate. */
int drt_adapters(const drt_procs *p, drt_adapter_info *out, int cap_out, int *n, char *err, size_t cap);
void drt_close(drt_device *d);
int drt_has_feature(drt_device *d, uint32_t feature);

/* drt_force_loss makes Dawn lose the device (wgpuDeviceForceLoss), for fault injection, and
 * processes events so the lost callback has run on return. DRT_EUNAVAILABLE without the proc. */
int drt_force_loss(drt_device *d, const char *msg, char *err, size_t cap);
/* drt_log_take copies log message seq (of log_written) into msg and its type into *type;
 * DRT_EUNAVAILABLE when the ring has already overwritten it. */
int drt_log_take(drt_device *d, uint64_t seq, uint32_t *type, char *msg, size_t cap);

int drt_create_buffer(drt_device *d, const char *label, uint64_t size, uint64_t usage, WGPUBuffer *out,
                      char *err, size_t cap);
void drt_buffer_release(drt_device *d, WGPUBuffer b);
/* Queues a write of n bytes at offset (a multiple of 4), without an error scope (the caller
 * checks sizes; errors reach the uncaptured-error callback); a tail that is not a multiple of
 * 4 is padded with zeros. Like every queue write it takes effect after the work submitted
 * before it and before the work submitted after it, so never under recorded work that is
 * not yet submitted. */
void drt_queue_write(drt_device *d, WGPUBuffer b, uint64_t offset, const void *data, size_t n);

/* Compiles wgsl and creates a compute pipeline with an automatic layout; bgl gets bind group 0's layout. */
int drt_create_pipeline(drt_device *d, const char *label, const char *wgsl, size_t wgsl_len, const char *entry,
                        WGPUComputePipeline *out, WGPUBindGroupLayout *bgl, char *err, size_t cap);
void drt_pipeline_release(drt_device *d, WGPUComputePipeline pl, WGPUBindGroupLayout bgl);

typedef struct drt_binding {
    uint32_t binding;
    WGPUBuffer buffer;
    uint64_t offset, size;
} drt_binding;

#define DRT_MAX_BINDINGS 16

/* Creates a bind group for bgl inside error scopes, waiting for their verdict. */
int drt_bind_group(drt_device *d, WGPUBindGroupLayout bgl, const drt_binding *binds, int n, WGPUBindGroup *out,
                   char *err, size_t cap);
void drt_bind_group_release(drt_device *d, WGPUBindGroup bg);

int drt_create_query_set(drt_device *d, uint32_t count, WGPUQuerySet *out, char *err, size_t cap);
void drt_query_set_release(drt_device *d, WGPUQuerySet qs);

/*
 * The executor. Calls are recorded into the device's one open command encoder (drt_record)
 * and submitted together (drt_flush); a submit's validation verdict is delivered into a
 * drt_status by the pop of the error scope around it, and what a waiting caller needs (its
 * read-backs' maps, or the queue's completion) into a drt_wait.
 */

/* A buffer-to-buffer copy on the device. */
typedef struct drt_copy {
    WGPUBuffer src;
    uint64_t src_offset;
    WGPUBuffer dst;
    uint64_t dst_offset;
    uint64_t size; /* multiple of 4 */
} drt_copy;

/* A read-back: a copy of src's range into a staging buffer (MapRead | CopyDst). */
typedef struct drt_read {
    WGPUBuffer src;
    uint64_t src_offset;
    WGPUBuffer staging;
    uint64_t size; /* multiple of 4 */
} drt_read;

/* GPU timing of a call's pass: two timestamps resolved into resolve, copied to staging.
   repeat > 1 records the dispatch that many times inside the one timed pass. */
typedef struct drt_timing {
    WGPUQuerySet query_set; /* Timestamp query set of 2 */
    WGPUBuffer resolve;     /* QueryResolve | CopySrc, 256 bytes */
    WGPUBuffer staging;     /* MapRead | CopyDst, 256 bytes */
    uint32_t repeat;        /* dispatches in the pass; 0 and 1 both mean one */
} drt_timing;

/* One call: the first npre copies; a compute pass labelled label of pl with bg in group 0
   dispatching groups[0..2] when pl is not NULL (timestamped into timing when given); the
   next npost copies; timing's resolve; each read's copy into its staging buffer. The Go
   side keeps one in C memory and fills it per call, so a call's arguments cost one cgo
   pointer check. */
typedef struct drt_call {
    const char *label;
    WGPUComputePipeline pl;
    WGPUBindGroup bg;
    uint32_t groups[3];
    int npre, npost, nreads;
    const drt_copy *copies;
    const drt_read *reads;
    const drt_timing *timing;
} drt_call;

/* drt_record records c into the open encoder (made when there is none). */
int drt_record(drt_device *d, const drt_call *c, char *err, size_t cap);

/* A buffer to map once the submit is done: read-back staging, timing staging, or (write)
   a transfer buffer being handed back to the host. */
typedef struct drt_map {
    WGPUBuffer buf;
    uint64_t size;
    int write;
} drt_map;

#define DRT_WAIT_CAP 12

/* The futures one waiting caller waits on; reused (drt_flush resets it). */
typedef struct drt_wait {
    int n;
    WGPUFuture fut[DRT_WAIT_CAP];
    drt_status st[DRT_WAIT_CAP];
} drt_wait;

/*
 * drt_flush submits the open encoder, if any, inside a validation error scope whose verdict
 * reaches scope (when given) through wgpuInstanceProcessEvents or a wait. w, when given, is
 * reset and receives the map of each of maps (or, with none, the queue's completion of
 * everything submitted so far).
 */
int drt_flush(drt_device *d, drt_status *scope, const drt_map *maps, int nmaps, drt_wait *w, char *err, size_t cap);

/* drt_discard drops the open encoder and what was recorded into it (device loss, close). */
void drt_discard(drt_device *d);

/* Waits up to timeout_ns for every future of w: DRT_OK, DRT_ETIMEOUT or DRT_EDEVICE. */
int drt_wait_all(drt_device *d, drt_wait *w, uint64_t timeout_ns, char *err, size_t cap);

/* The first failure among w's completed futures (map or queue-done status), or DRT_OK. */
int drt_wait_error(const drt_wait *w, char *err, size_t cap);

/* The mapped range of b's first size bytes (writable when write is set), NULL when b is not
 * mapped so; drt_copy_mapped copies the first n bytes of a mapped read staging buffer. */
void *drt_mapped(drt_device *d, WGPUBuffer b, int write, uint64_t size);
int drt_copy_mapped(drt_device *d, WGPUBuffer staging, void *dst, size_t n, char *err, size_t cap);
void drt_unmap(drt_device *d, WGPUBuffer b);

/* Runs the callbacks of completed futures (the verdicts of earlier submits). */
void drt_process_events(drt_device *d);

#endif /* FUSEDNORM_DAWNRT_H */
