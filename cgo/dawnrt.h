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
    void *handle;
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

typedef struct drt_device {
    const drt_procs *p;
    WGPUInstance instance;
    WGPUAdapter adapter;
    WGPUDevice device;
    WGPUQueue queue;
    WGPULimits limits; /* the device's, after the raise */

    char vendor[256], architecture[256], device_name[256], description[256];
    uint32_t backend_type, adapter_type, vendor_id, device_id, subgroup_min, subgroup_max;

    /* Written by the device-lost and uncaptured-error callbacks; lost is set last (release). */
    int lost;
    uint32_t lost_reason;
    char lost_msg[DRT_MSG_CAP];
    uint64_t uncaptured;
    uint32_t uncaptured_type;
    char uncaptured_msg[DRT_MSG_CAP];

    /* Dawn's device log (wgpuDeviceSetLoggingCallback), kept instead of printed: a ring of the
     * last DRT_LOG_SLOTS messages; log_written counts every message ever logged. */
    int log_lock;
    uint64_t log_written;
    uint32_t log_type[DRT_LOG_SLOTS];
    char log_msg[DRT_LOG_SLOTS][DRT_LOG_MSG_CAP];
} drt_device;

/* Features requested when the adapter has them; none is required. */
#define DRT_WANTED_FEATURES \
    { WGPUFeatureName_TimestampQuery, WGPUFeatureName_ShaderF16, WGPUFeatureName_Subgroups }

/*
 * drt_open creates an instance with timed waits, requests a Vulkan adapter, refuses Dawn's Null
 * backend and creates a device whose compute and storage limits are raised to the adapter's.
 * On failure every half-built object is released.
 */
int drt_open(const drt_procs *p, drt_device *d, uint64_t timeout_ns, char *err, size_t cap);
/* drt_open_adapter is drt_open on the adapter at index of drt_adapters' list (Vulkan adapters
 * in Dawn's order, the first being drt_open's); index < 0 is drt_open. DRT_EUNAVAILABLE when
 * the index is past the list or the library cannot enumerate. */
int drt_open_adapter(const drt_procs *p, drt_device *d, int index, uint64_t timeout_ns, char *err, size_t cap);

/* One adapter of drt_adapters' list. */
typedef struct drt_adapter_info {
    char vendor[256], architecture[256], device_name[256], description[256];
    uint32_t backend_type, adapter_type, vendor_id, device_id;
} drt_adapter_info;

/* drt_adapters lists up to cap_out Vulkan adapters in Dawn's order into out and their count
 * into *n (which may exceed cap_out). DRT_EUNAVAILABLE when the library cannot enumerate. */
int drt_adapters(const drt_procs *p, drt_adapter_info *out, int cap_out, int *n, char *err, size_t cap);
void drt_close(drt_device *d);
int drt_has_feature(drt_device *d, uint32_t feature);

/* drt_lost reports whether the device-lost callback has run (for any reason, Destroyed included). */
int drt_lost(const drt_device *d);
/* drt_force_loss makes Dawn lose the device (wgpuDeviceForceLoss), for fault injection, and
 * processes events so the lost callback has run on return. DRT_EUNAVAILABLE without the proc. */
int drt_force_loss(drt_device *d, const char *msg, char *err, size_t cap);
/* drt_log_take copies log message seq (of log_written) into msg and its type into *type;
 * DRT_EUNAVAILABLE when the ring has already overwritten it. */
int drt_log_take(drt_device *d, uint64_t seq, uint32_t *type, char *msg, size_t cap);

int drt_create_buffer(drt_device *d, const char *label, uint64_t size, uint64_t usage, WGPUBuffer *out,
                      char *err, size_t cap);
void drt_buffer_release(drt_device *d, WGPUBuffer b);
/* Writes n bytes at offset (a multiple of 4); a tail that is not a multiple of 4 is padded with zeros. */
int drt_write_buffer(drt_device *d, WGPUBuffer b, uint64_t offset, const void *data, size_t n, char *err,
                     size_t cap);

/* Compiles wgsl and creates a compute pipeline with an automatic layout; bgl gets bind group 0's layout. */
int drt_create_pipeline(drt_device *d, const char *label, const char *wgsl, size_t wgsl_len, const char *entry,
                        WGPUComputePipeline *out, WGPUBindGroupLayout *bgl, char *err, size_t cap);
void drt_pipeline_release(drt_device *d, WGPUComputePipeline pl, WGPUBindGroupLayout bgl);

typedef struct drt_binding {
    uint32_t binding;
    WGPUBuffer buffer;
    uint64_t offset, size;
} drt_binding;

typedef struct drt_read {
    WGPUBuffer src;
    uint64_t src_offset;
    WGPUBuffer staging; /* MapRead | CopyDst, at least size bytes */
    uint64_t size;      /* multiple of 4 */
} drt_read;

/* Optional GPU timing of the pass: two timestamps resolved into resolve, copied to staging.
   repeat > 1 records the dispatch that many times inside the one timed pass (a kernel timed
   as K back-to-back dispatches: small kernels are shorter than a pass's own overhead). */
typedef struct drt_timing {
    WGPUQuerySet query_set; /* Timestamp query set of 2 */
    WGPUBuffer resolve;     /* QueryResolve | CopySrc, 256 bytes */
    WGPUBuffer staging;     /* MapRead | CopyDst, 256 bytes */
    uint32_t repeat;        /* dispatches in the pass; 0 and 1 both mean one */
} drt_timing;

/* Encode one compute pass (timestamped when timing is given), and the resolve of its
   timestamps; see dawnrt.c. */
void drt_encode_dispatch(const drt_procs *p, WGPUCommandEncoder enc, WGPUComputePipeline pl, WGPUBindGroup bg,
                         uint32_t gx, uint32_t gy, uint32_t gz, const drt_timing *timing);
void drt_encode_timing(const drt_procs *p, WGPUCommandEncoder enc, const drt_timing *timing);

/*
 * A ticket tracks one submitted dispatch until all of its futures complete. It lives in C
 * memory because Dawn's callbacks write into it; if the Go caller gives up waiting, the
 * ticket is kept and reaped later, so no callback ever writes into freed memory.
 */
typedef struct drt_ticket {
    int nreads;
    int timed;
    drt_status scope[3];
    drt_status work;
    drt_status ts_map;
    int nfutures;
    WGPUFuture futures[8];
    drt_status *future_status[8];
    /* reads: nreads entries of map status follow */
    drt_status *map;
    WGPUFuture *map_futures;
} drt_ticket;

drt_ticket *drt_ticket_new(int nreads);
void drt_ticket_free(drt_ticket *t);

/*
 * drt_submit encodes one compute pass (pipeline, bind group 0, dispatch), copies each read
 * region into its staging buffer, submits, and starts the map of every staging buffer (or a
 * queue-done wait when nothing is read back); all inside error scopes whose pops the ticket
 * waits for too.
 */
int drt_submit(drt_device *d, drt_ticket *t, WGPUComputePipeline pl, WGPUBindGroupLayout bgl,
               const drt_binding *binds, int nbinds, uint32_t gx, uint32_t gy, uint32_t gz, const drt_read *reads,
               const drt_timing *timing, char *err, size_t cap);

/* Waits up to timeout_ns for every future of t: DRT_OK when all are done, DRT_ETIMEOUT, or DRT_EDEVICE. */
int drt_ticket_wait(drt_device *d, drt_ticket *t, uint64_t timeout_ns, char *err, size_t cap);

/*
 * After a successful wait: the first error of the ticket's scopes and maps, or DRT_OK. Copies
 * n bytes from each mapped staging buffer into dst[i] when no error occurred.
 */
int drt_ticket_error(const drt_ticket *t, char *err, size_t cap);
int drt_copy_mapped(drt_device *d, WGPUBuffer staging, void *dst, size_t n, char *err, size_t cap);
void drt_unmap(drt_device *d, WGPUBuffer staging);

/* Like drt_copy_mapped for the timing staging buffer: the two u64 timestamps. */
int drt_read_timestamps(drt_device *d, const drt_timing *timing, uint64_t *begin, uint64_t *end, char *err,
                        size_t cap);
int drt_create_query_set(drt_device *d, uint32_t count, WGPUQuerySet *out, char *err, size_t cap);
void drt_query_set_release(drt_device *d, WGPUQuerySet qs);

#endif /* FUSEDNORM_DAWNRT_H */
