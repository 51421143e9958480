/* dawnrt_fast: see dawnrt_fast.h. A translation unit of its own: it shares no static helper with dawnrt.c. */
#include "dawnrt_fast.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fast_fmt(char *dst, size_t cap, const char *format, ...) {
    va_list ap;
    if (dst == NULL || cap == 0) return;
    va_start(ap, format);
    vsnprintf(dst, cap, format, ap);
    va_end(ap);
}

static void fast_set(drt_status *s, uint32_t status, uint32_t type, WGPUStringView msg) {
    size_t n = 0;
    if (msg.data != NULL) {
        n = msg.length == WGPU_GEN_STRLEN ? strlen(msg.data) : msg.length;
        if (n >= sizeof s->msg) n = sizeof s->msg - 1;
        memcpy(s->msg, msg.data, n);
    }
    s->msg[n] = 0;
    s->status = status;
    s->type = type;
    s->done = 1;
}

static void fast_on_pop(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView msg, void *u1,
                        void *u2) {
    (void)u2;
    fast_set((drt_status *)u1, (uint32_t)status, (uint32_t)type, msg);
}

static void fast_on_map(WGPUMapAsyncStatus status, WGPUStringView msg, void *u1, void *u2) {
    (void)u2;
    fast_set((drt_status *)u1, (uint32_t)status, 0, msg);
}

static void fast_on_work(WGPUQueueWorkDoneStatus status, WGPUStringView msg, void *u1, void *u2) {
    (void)u2;
    /* Queue-done success is 1 and map success is 1 too; keep the raw status, the kind decides. */
    fast_set((drt_status *)u1, (uint32_t)status, 1, msg);
}

static WGPUStringView fast_nostr(void) {
    WGPUStringView v;
    v.data = NULL;
    v.length = WGPU_GEN_STRLEN;
    return v;
}

int drt_bind_group(drt_device *d, WGPUBindGroupLayout bgl, const drt_binding *binds, int n, WGPUBindGroup *out,
                   char *err, size_t cap) {
    const drt_procs *p = d->p;
    WGPUBindGroupEntry entries[16];
    WGPUBindGroupDescriptor bgd;
    WGPUBindGroup bg;
    drt_status s[3];
    WGPUFuture f[3];
    int i;
    if (bgl == NULL || n <= 0 || n > 16) {
        fast_fmt(err, cap, "bind group: %d bindings for a layout that %s", n, bgl ? "takes 1 to 16" : "is absent");
        return DRT_EDEVICE;
    }
    memset(entries, 0, sizeof entries);
    for (i = 0; i < n; i++) {
        entries[i].binding = binds[i].binding;
        entries[i].buffer = binds[i].buffer;
        entries[i].offset = binds[i].offset;
        entries[i].size = binds[i].size;
    }
    memset(&bgd, 0, sizeof bgd);
    bgd.label = fast_nostr();
    bgd.layout = bgl;
    bgd.entryCount = (size_t)n;
    bgd.entries = entries;
    p->DevicePushErrorScope(d->device, WGPUErrorFilter_Validation);
    p->DevicePushErrorScope(d->device, WGPUErrorFilter_OutOfMemory);
    p->DevicePushErrorScope(d->device, WGPUErrorFilter_Internal);
    bg = p->DeviceCreateBindGroup(d->device, &bgd);
    for (i = 0; i < 3; i++) {
        WGPUPopErrorScopeCallbackInfo ci;
        memset(&ci, 0, sizeof ci);
        memset(&s[i], 0, sizeof s[i]);
        ci.mode = WGPUCallbackMode_WaitAnyOnly;
        ci.callback = fast_on_pop;
        ci.userdata1 = &s[i];
        f[i] = p->DevicePopErrorScope(d->device, ci);
    }
    for (i = 0; i < 3; i++) {
        WGPUFutureWaitInfo w;
        w.future = f[i];
        w.completed = 0;
        if (p->InstanceWaitAny(d->instance, 1, &w, 30000000000ull) != WGPUWaitStatus_Success) {
            fast_fmt(err, cap, "bind group: waiting for the error scope failed");
            if (bg) p->BindGroupRelease(bg);
            return DRT_EDEVICE;
        }
    }
    for (i = 2; i >= 0; i--) {
        if (s[i].status != WGPUPopErrorScopeStatus_Success || s[i].type != WGPUErrorType_NoError) {
            fast_fmt(err, cap, "bind group: error %u: %s", (unsigned)s[i].type, s[i].msg);
            if (bg) p->BindGroupRelease(bg);
            return DRT_EDEVICE;
        }
    }
    if (bg == NULL) {
        fast_fmt(err, cap, "bind group: Dawn returned none");
        return DRT_EDEVICE;
    }
    *out = bg;
    return DRT_OK;
}

void drt_bind_group_release(drt_device *d, WGPUBindGroup bg) {
    if (bg) d->p->BindGroupRelease(bg);
}

void drt_queue_write(drt_device *d, WGPUBuffer b, uint64_t offset, const void *data, size_t n) {
    size_t head = n & ~(size_t)3, tail = n - head;
    if (head > 0) d->p->QueueWriteBuffer(d->queue, b, offset, data, head);
    if (tail > 0) {
        uint8_t pad[4] = {0, 0, 0, 0};
        memcpy(pad, (const uint8_t *)data + head, tail);
        d->p->QueueWriteBuffer(d->queue, b, offset + head, pad, 4);
    }
}

static void wait_add(drt_wait *w, WGPUFuture f) { w->fut[w->n++] = f; }

int drt_enqueue(drt_device *d, const drt_call *c, char *err, size_t cap) {
    const drt_procs *p = d->p;
    WGPUComputePipeline pl = c->pl;
    const drt_copy *copies = c->copies;
    const drt_read *reads = c->reads;
    const drt_timing *timing = c->timing;
    drt_status *scope = c->scope;
    drt_wait *w = c->w;
    int npre = c->npre, npost = c->npost, nreads = c->nreads;
    WGPUCommandEncoder enc;
    WGPUCommandBuffer cb;
    int i;
    if ((nreads > 0 || timing != NULL) && w == NULL) {
        fast_fmt(err, cap, "enqueue: reads without a wait");
        return DRT_EDEVICE;
    }
    if (w != NULL && nreads + 2 > DRT_WAIT_CAP) {
        fast_fmt(err, cap, "enqueue: %d reads, over %d", nreads, DRT_WAIT_CAP - 2);
        return DRT_EDEVICE;
    }
    if (pl == NULL && npre + npost == 0 && nreads == 0 && timing == NULL) {
        /* Nothing to record: only the queue-done wait, when asked for. */
        if (w != NULL) {
            WGPUQueueWorkDoneCallbackInfo wi;
            memset(&wi, 0, sizeof wi);
            w->n = 0;
            memset(w->st, 0, sizeof w->st);
            wi.mode = WGPUCallbackMode_WaitAnyOnly;
            wi.callback = fast_on_work;
            wi.userdata1 = &w->st[0];
            wait_add(w, p->QueueOnSubmittedWorkDone(d->queue, wi));
        }
        return DRT_OK;
    }
    if (scope != NULL) p->DevicePushErrorScope(d->device, WGPUErrorFilter_Validation);
    enc = p->DeviceCreateCommandEncoder(d->device, NULL);
    for (i = 0; i < npre; i++)
        p->CommandEncoderCopyBufferToBuffer(enc, copies[i].src, copies[i].src_offset, copies[i].dst,
                                            copies[i].dst_offset, copies[i].size);
    if (pl != NULL) drt_encode_dispatch(p, enc, pl, c->bg, c->groups[0], c->groups[1], c->groups[2], timing);
    for (i = npre; i < npre + npost; i++)
        p->CommandEncoderCopyBufferToBuffer(enc, copies[i].src, copies[i].src_offset, copies[i].dst,
                                            copies[i].dst_offset, copies[i].size);
    drt_encode_timing(p, enc, timing);
    for (i = 0; i < nreads; i++)
        p->CommandEncoderCopyBufferToBuffer(enc, reads[i].src, reads[i].src_offset, reads[i].staging, 0,
                                            reads[i].size);
    cb = p->CommandEncoderFinish(enc, NULL);
    p->QueueSubmit(d->queue, 1, &cb);
    p->CommandBufferRelease(cb);
    p->CommandEncoderRelease(enc);
    if (w != NULL) {
        w->n = 0;
        memset(w->st, 0, sizeof w->st);
        for (i = 0; i < nreads; i++) {
            WGPUBufferMapCallbackInfo mi;
            memset(&mi, 0, sizeof mi);
            mi.mode = WGPUCallbackMode_WaitAnyOnly;
            mi.callback = fast_on_map;
            mi.userdata1 = &w->st[w->n];
            wait_add(w, p->BufferMapAsync(reads[i].staging, WGPUMapMode_Read, 0, (size_t)reads[i].size, mi));
        }
        if (timing != NULL) {
            WGPUBufferMapCallbackInfo mi;
            memset(&mi, 0, sizeof mi);
            mi.mode = WGPUCallbackMode_WaitAnyOnly;
            mi.callback = fast_on_map;
            mi.userdata1 = &w->st[w->n];
            wait_add(w, p->BufferMapAsync(timing->staging, WGPUMapMode_Read, 0, 16, mi));
        }
        if (w->n == 0) {
            WGPUQueueWorkDoneCallbackInfo wi;
            memset(&wi, 0, sizeof wi);
            wi.mode = WGPUCallbackMode_WaitAnyOnly;
            wi.callback = fast_on_work;
            wi.userdata1 = &w->st[w->n];
            wait_add(w, p->QueueOnSubmittedWorkDone(d->queue, wi));
        }
    }
    if (scope != NULL) {
        WGPUPopErrorScopeCallbackInfo ci;
        memset(&ci, 0, sizeof ci);
        memset(scope, 0, sizeof *scope);
        ci.mode = WGPUCallbackMode_AllowProcessEvents;
        ci.callback = fast_on_pop;
        ci.userdata1 = scope;
        (void)p->DevicePopErrorScope(d->device, ci);
    }
    return DRT_OK;
}

int drt_wait_all(drt_device *d, drt_wait *w, uint64_t timeout_ns, char *err, size_t cap) {
    int i;
    for (i = 0; i < w->n; i++) {
        WGPUFutureWaitInfo fw;
        WGPUWaitStatus ws;
        if (w->st[i].done) continue;
        fw.future = w->fut[i];
        fw.completed = 0;
        ws = d->p->InstanceWaitAny(d->instance, 1, &fw, timeout_ns);
        if (ws == WGPUWaitStatus_TimedOut) return DRT_ETIMEOUT;
        if (ws != WGPUWaitStatus_Success) {
            fast_fmt(err, cap, "wgpuInstanceWaitAny failed (status %u)", (unsigned)ws);
            return DRT_EDEVICE;
        }
    }
    return DRT_OK;
}

int drt_wait_error(const drt_wait *w, char *err, size_t cap) {
    int i;
    for (i = 0; i < w->n; i++) {
        /* WGPUMapAsyncStatus_Success and WGPUQueueWorkDoneStatus_Success are both 1. */
        if (w->st[i].status != 1) {
            fast_fmt(err, cap, "%s: status %u: %s", w->st[i].type ? "queue work done" : "map readback",
                     (unsigned)w->st[i].status, w->st[i].msg);
            return DRT_EDEVICE;
        }
    }
    return DRT_OK;
}

void drt_map(drt_device *d, WGPUBuffer b, int write, uint64_t size, drt_wait *w) {
    WGPUBufferMapCallbackInfo mi;
    w->n = 0;
    memset(w->st, 0, sizeof w->st);
    memset(&mi, 0, sizeof mi);
    mi.mode = WGPUCallbackMode_WaitAnyOnly;
    mi.callback = fast_on_map;
    mi.userdata1 = &w->st[0];
    wait_add(w, d->p->BufferMapAsync(b, write ? WGPUMapMode_Write : WGPUMapMode_Read, 0, (size_t)size, mi));
}

void *drt_mapped(drt_device *d, WGPUBuffer b, int write, uint64_t size) {
    if (write) return d->p->BufferGetMappedRange(b, 0, (size_t)size);
    return (void *)d->p->BufferGetConstMappedRange(b, 0, (size_t)size);
}

void drt_process_events(drt_device *d) { d->p->InstanceProcessEvents(d->instance); }
