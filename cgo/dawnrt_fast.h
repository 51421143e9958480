/*
 * dawnrt_fast: the low-overhead dispatch path of the cgo layer (issue 17).
 *
 * One call of an op on the device is one crossing into C: drt_enqueue encodes the copies
 * that stage its inputs, the compute pass, the copies that deliver its outputs, and submits,
 * without waiting. Bind groups are made once (drt_bind_group) and reused by the Go side;
 * command encoders and command buffers cannot be reused in WebGPU and are made per call.
 * A call that asks for results gets a drt_wait, reused across calls, whose futures it waits on.
 */
#ifndef FUSEDNORM_DAWNRT_FAST_H
#define FUSEDNORM_DAWNRT_FAST_H

#include "dawnrt.h"

/* A buffer-to-buffer copy on the device. */
typedef struct drt_copy {
    WGPUBuffer src;
    uint64_t src_offset;
    WGPUBuffer dst;
    uint64_t dst_offset;
    uint64_t size; /* multiple of 4 */
} drt_copy;

#define DRT_WAIT_CAP 12

/* The futures one waiting call waits on; reused across calls (drt_enqueue resets it). */
typedef struct drt_wait {
    int n;
    WGPUFuture fut[DRT_WAIT_CAP];
    drt_status st[DRT_WAIT_CAP];
} drt_wait;

/* Creates a bind group for bgl inside error scopes, waiting for their verdict. */
int drt_bind_group(drt_device *d, WGPUBindGroupLayout bgl, const drt_binding *binds, int n, WGPUBindGroup *out,
                   char *err, size_t cap);
void drt_bind_group_release(drt_device *d, WGPUBindGroup bg);

/* Queues a write of n bytes at offset (a multiple of 4), without an error scope; a tail that
 * is not a multiple of 4 is padded with zeros. Errors reach the uncaptured-error callback. */
void drt_queue_write(drt_device *d, WGPUBuffer b, uint64_t offset, const void *data, size_t n);

/*
 * One call as drt_enqueue records it: the first npre copies; a compute pass of pl with bg in
 * group 0 dispatching groups[0..2] when pl is not NULL (timestamps into timing when given);
 * the next npost copies; then each read's copy into its staging buffer.
 *
 * scope, when given, receives the verdict of a validation error scope around the whole call,
 * delivered by wgpuInstanceProcessEvents (drt_process_events) or a wait. w, when given, is
 * reset and receives the map of every read's staging buffer and of timing's (or a queue-done
 * future when there is nothing to map); reads and timing need w.
 *
 * The Go side keeps one in C memory and fills it per call: passed as one pointer, a call's
 * arguments cost one cgo pointer check instead of one per pointer argument.
 */
typedef struct drt_call {
    WGPUComputePipeline pl;
    WGPUBindGroup bg;
    uint32_t groups[3];
    int npre, npost, nreads;
    const drt_copy *copies;
    const drt_read *reads;
    const drt_timing *timing;
    drt_status *scope;
    drt_wait *w;
} drt_call;

/* drt_enqueue records c in one command buffer and submits it, without waiting. */
int drt_enqueue(drt_device *d, const drt_call *c, char *err, size_t cap);

/* Waits up to timeout_ns for every future of w: DRT_OK, DRT_ETIMEOUT or DRT_EDEVICE. */
int drt_wait_all(drt_device *d, drt_wait *w, uint64_t timeout_ns, char *err, size_t cap);

/* The first failure among w's completed futures (map or queue-done status), or DRT_OK. */
int drt_wait_error(const drt_wait *w, char *err, size_t cap);

/* Resets w and queues a map of b's first size bytes, for writing when write is set, else for
 * reading; its future joins w (transfer staging, transfer.go). */
void drt_map(drt_device *d, WGPUBuffer b, int write, uint64_t size, drt_wait *w);

/* The mapped range of b's first size bytes (writable when write is set), NULL when b is not
 * mapped so. */
void *drt_mapped(drt_device *d, WGPUBuffer b, int write, uint64_t size);

/* Runs the callbacks of completed futures (error-scope verdicts of earlier calls). */
void drt_process_events(drt_device *d);

#endif /* FUSEDNORM_DAWNRT_FAST_H */
