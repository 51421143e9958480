/* tiny_twin: see tiny_twin.h. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "tiny_twin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../dawnrt.h"

#define TINY_H 768u
#define TINY_V 64u
#define TINY_P 8u

/* One call as the Go path records it; ids, when set, is what its Sync reads back. */
typedef struct tiny_call {
    WGPUComputePipeline pl;
    WGPUBindGroup bg;
    drt_copy copies[4];
    int npre, npost;
    const drt_read *ids;
} tiny_call;

/* The batch bound of the Go executor (internal/dawnrt, batchCalls). */
#define TINY_BATCH 64

static struct {
    int open;
    drt_lib lib;
    drt_device d;
    drt_status ring[256];
    unsigned ring_i;
    drt_wait wt;
    drt_read ids_read;
    tiny_call ec, ac;
    char err[DRT_MSG_CAP * 4];
} T;

#define TRY(call, what)                                                                               \
    do {                                                                                              \
        if ((call) != DRT_OK) {                                                                       \
            snprintf(msg, cap, "%s: %s", what, T.err);                                                \
            return -1;                                                                                \
        }                                                                                             \
    } while (0)

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int buffer(const char *label, uint64_t size, uint64_t usage, const void *data, WGPUBuffer *b, char *msg,
                  size_t cap) {
    TRY(drt_create_buffer(&T.d, label, size, usage, b, T.err, sizeof T.err), label);
    if (data) drt_queue_write(&T.d, *b, 0, data, (size_t)size);
    return 0;
}

#define BUF(label, size, usage, data, b)                                                              \
    do {                                                                                              \
        if (buffer(label, size, usage, data, b, msg, cap) != 0) return -1;                            \
    } while (0)

enum {
    ST = WGPUBufferUsage_Storage,
    RW = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst,
    IN = WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst
};

static void ramp(float *p, unsigned n, float scale) {
    unsigned i;
    for (i = 0; i < n; i++) p[i] = (float)(i % 97) * scale - 1;
}

/* record records c into the open encoder, as the Go executor does (one labelled pass). */
static int record(const tiny_call *c, char *msg, size_t cap) {
    drt_call dc;
    memset(&dc, 0, sizeof dc);
    dc.label = "fusednorm tiny";
    dc.pl = c->pl;
    dc.bg = c->bg;
    dc.groups[0] = dc.groups[1] = dc.groups[2] = 1;
    dc.copies = c->copies;
    dc.npre = c->npre;
    dc.npost = c->npost;
    TRY(drt_record(&T.d, &dc, T.err, sizeof T.err), "record");
    return 0;
}

/* submit submits what is recorded, its verdict into the next ring slot. */
static int submit(char *msg, size_t cap) {
    TRY(drt_flush(&T.d, &T.ring[T.ring_i++ % 256], NULL, 0, NULL, T.err, sizeof T.err), "submit");
    return 0;
}

/* What the Go Sync does: a queue-done future, its wait (polled for up to 200 us, then slept
   in the driver, as dawn's spinWait), and the scopes' verdicts; after calls with ids on the
   device (EmbedLayerNorm), the read-back of their id-check words (spec §A.2a), which it scans
   for a call that found an id out of range. */
static int wait_queue(const drt_read *ids, char *msg, size_t cap) {
    uint32_t words[256];
    int i, rc;
    double end;
    drt_call dc;
    drt_map m = {NULL, 0, 0};
    memset(&dc, 0, sizeof dc);
    dc.reads = ids;
    dc.nreads = ids ? 1 : 0;
    if (ids) {
        TRY(drt_record(&T.d, &dc, T.err, sizeof T.err), "sync");
        m = (drt_map){ids->staging, ids->size, 0};
    }
    TRY(drt_flush(&T.d, &T.ring[T.ring_i++ % 256], &m, ids ? 1 : 0, &T.wt, T.err, sizeof T.err), "sync");
    end = now_ns() + 200e3;
    while ((rc = drt_wait_all(&T.d, &T.wt, 0, T.err, sizeof T.err)) == DRT_ETIMEOUT && now_ns() < end) {
    }
    if (rc == DRT_ETIMEOUT) rc = drt_wait_all(&T.d, &T.wt, 30000000000ull, T.err, sizeof T.err);
    TRY(rc, "wait");
    TRY(drt_wait_error(&T.wt, T.err, sizeof T.err), "wait status");
    drt_process_events(&T.d);
    if (ids == NULL) return 0;
    TRY(drt_copy_mapped(&T.d, ids->staging, words, sizeof words, T.err, sizeof T.err), "id words");
    drt_unmap(&T.d, ids->staging);
    for (i = 0; i < 256; i++) {
        if (words[i] != 0) {
            snprintf(msg, cap, "an id out of range reported");
            return -1;
        }
    }
    return 0;
}

static int pipeline(const char *name, const char *src, WGPUComputePipeline *pl, WGPUBindGroupLayout *bgl, char *msg,
                    size_t cap) {
    TRY(drt_create_pipeline(&T.d, name, src, strlen(src), "main", pl, bgl, T.err, sizeof T.err), name);
    return 0;
}

/* EmbedLayerNorm f32 (1,1,768): params as internal/dawn/embed.go lays them out. */
static int setup_embed(WGPUComputePipeline pl, WGPUBindGroupLayout bgl, float invh, char *msg, size_t cap) {
    static float word[TINY_V * TINY_H], pos[TINY_P * TINY_H], gb[2 * TINY_H];
    uint32_t params[16] = {1, TINY_H, 1, 1, TINY_V, TINY_P, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1};
    float eps = 1e-12f;
    int32_t id = 5;
    WGPUBuffer bp, bw, bpos, bgb, out, aux, ids, zero, idstatus, staging;
    drt_binding b[7];
    tiny_call *c = &T.ec;
    memcpy(&params[12], &invh, 4);
    memcpy(&params[13], &eps, 4);
    ramp(word, TINY_V * TINY_H, 0.01f);
    ramp(pos, TINY_P * TINY_H, 0.02f);
    ramp(gb, TINY_H, 0.003f);
    ramp(gb + TINY_H, TINY_H, 0.001f);
    BUF("params", 64, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, params, &bp);
    BUF("word", sizeof word, IN, word, &bw);
    BUF("pos", sizeof pos, IN, pos, &bpos);
    BUF("gb", sizeof gb, IN, gb, &bgb);
    BUF("out", TINY_H * 4, RW, NULL, &out);
    BUF("aux", 8, RW, NULL, &aux);
    BUF("ids", 4, RW, &id, &ids);
    BUF("zero", 256, WGPUBufferUsage_CopySrc, NULL, &zero);
    BUF("idstatus", 1024, RW, NULL, &idstatus);
    BUF("idstatus staging", 1024, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, NULL, &staging);
    b[0] = (drt_binding){0, bp, 0, 64};
    b[1] = (drt_binding){1, ids, 0, 4};
    b[2] = (drt_binding){2, bw, 0, sizeof word};
    b[3] = (drt_binding){3, bpos, 0, sizeof pos};
    b[4] = (drt_binding){5, bgb, 0, sizeof gb};
    b[5] = (drt_binding){6, out, 0, TINY_H * 4};
    b[6] = (drt_binding){8, aux, 0, 8};
    memset(c, 0, sizeof *c);
    c->pl = pl;
    TRY(drt_bind_group(&T.d, bgl, b, 7, &c->bg, T.err, sizeof T.err), "embed bind group");
    c->copies[0] = (drt_copy){zero, 0, aux, 0, 4};
    c->copies[1] = (drt_copy){aux, 0, idstatus, 0, 4};
    c->npre = 1;
    c->npost = 1;
    T.ids_read = (drt_read){idstatus, 0, staging, 1024};
    c->ids = &T.ids_read;
    return 0;
}

/* AddLayerNorm f32 (1,768), gamma+beta resident, mean and rstd device tensors. */
static int setup_add(WGPUComputePipeline pl, WGPUBindGroupLayout bgl, float invh, char *msg, size_t cap) {
    static float x[TINY_H], gb[2 * TINY_H];
    uint32_t params[8] = {1, TINY_H, 1, 0, 0, 0, 0, 0};
    float eps = 1e-5f;
    WGPUBuffer bp, x1, x2, bgb, y, mean, rstd;
    drt_binding b[7];
    tiny_call *c = &T.ac;
    memcpy(&params[4], &invh, 4);
    memcpy(&params[5], &eps, 4);
    ramp(x, TINY_H, 0.01f);
    ramp(gb, TINY_H, 0.003f);
    ramp(gb + TINY_H, TINY_H, 0.001f);
    BUF("params", 32, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, params, &bp);
    BUF("x1", sizeof x, RW, x, &x1);
    BUF("x2", sizeof x, RW, x, &x2);
    BUF("gb", sizeof gb, IN, gb, &bgb);
    BUF("y", sizeof x, RW, NULL, &y);
    BUF("mean", 4, RW, NULL, &mean);
    BUF("rstd", 4, RW, NULL, &rstd);
    b[0] = (drt_binding){0, bp, 0, 32};
    b[1] = (drt_binding){1, x1, 0, sizeof x};
    b[2] = (drt_binding){2, x2, 0, sizeof x};
    b[3] = (drt_binding){3, bgb, 0, sizeof gb};
    b[4] = (drt_binding){5, y, 0, sizeof x};
    b[5] = (drt_binding){7, mean, 0, 4};
    b[6] = (drt_binding){8, rstd, 0, 4};
    memset(c, 0, sizeof *c);
    c->pl = pl;
    TRY(drt_bind_group(&T.d, bgl, b, 7, &c->bg, T.err, sizeof T.err), "addln bind group");
    return 0;
}

int tiny_twin_open(const char *library, const char *embed_wgsl, const char *add_wgsl, float invh, char *msg,
                   size_t cap) {
    const char *cand[1];
    WGPUComputePipeline epl, apl;
    WGPUBindGroupLayout ebgl, abgl;
    if (T.open) {
        snprintf(msg, cap, "the twin is open already");
        return -1;
    }
    cand[0] = library;
    TRY(drt_load(cand, 1, &T.lib, T.err, sizeof T.err), "load");
    TRY(drt_open_adapter(&T.lib.p, &T.d, -1, 60000000000ull, T.err, sizeof T.err), "open");
    if (pipeline("embed.wgsl", embed_wgsl, &epl, &ebgl, msg, cap) != 0 ||
        pipeline("addln.wgsl", add_wgsl, &apl, &abgl, msg, cap) != 0 || setup_embed(epl, ebgl, invh, msg, cap) != 0 ||
        setup_add(apl, abgl, invh, msg, cap) != 0)
        return -1;
    T.open = 1;
    return 0;
}

const char *tiny_twin_adapter(void) { return T.open ? T.d.info.device_name : ""; }

int tiny_twin_run(int op, int n, tiny_samples *s, char *msg, size_t cap) {
    const tiny_call *c = op == TINY_EMBED ? &T.ec : &T.ac;
    double t0, t1, start;
    int i;
    if (!T.open) {
        snprintf(msg, cap, "the twin is not open");
        return -1;
    }
    for (i = 0; i < 20; i++)
        if (record(c, msg, cap) != 0 || submit(msg, cap) != 0) return -1;
    if (wait_queue(c->ids, msg, cap) != 0) return -1;
    /* One by one: each call submitted and waited for, as a Go call followed by Sync. */
    for (i = 0; i < n; i++) {
        t0 = now_ns();
        if (record(c, msg, cap) != 0) return -1;
        t1 = now_ns();
        if (wait_queue(c->ids, msg, cap) != 0) return -1;
        s->each[i] = now_ns() - t0;
        s->call[i] = t1 - t0;
        s->wait[i] = s->each[i] - s->call[i];
    }
    /* Back to back, one submit per call (what the Go path did before calls shared submits). */
    start = now_ns();
    for (i = 0; i < n; i++) {
        t0 = now_ns();
        if (record(c, msg, cap) != 0 || submit(msg, cap) != 0) return -1;
        s->b2b[i] = now_ns() - t0;
        if (i % 256 == 255) drt_process_events(&T.d); /* as the Go side collects verdicts */
    }
    if (wait_queue(c->ids, msg, cap) != 0) return -1;
    s->b2b_total = now_ns() - start;
    /* Back to back, calls sharing submits of TINY_BATCH, as the Go executor records them. */
    start = now_ns();
    for (i = 0; i < n; i++) {
        t0 = now_ns();
        if (record(c, msg, cap) != 0) return -1;
        if (i % TINY_BATCH == TINY_BATCH - 1 && submit(msg, cap) != 0) return -1;
        s->shared[i] = now_ns() - t0;
    }
    if (wait_queue(c->ids, msg, cap) != 0) return -1;
    s->shared_total = now_ns() - start;
    return 0;
}
