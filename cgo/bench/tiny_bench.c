/*
 * tiny_bench: the native twin of the Go tiny-call benchmarks (issue 17). It performs what one
 * device-resident call of the Go path does, through the same C layer (dawnrt + dawnrt_fast):
 *
 *   EmbedLayerNorm f32 (1,1,768): the id (a device tensor) bound where it is; zero the status
 *     word, dispatch, copy the status word to the id-check slot;
 *   AddLayerNorm f32 (1,768), weights resident: dispatch, copy mean and rstd out of the
 *     statistics buffer into their device tensors;
 *
 * each inside one validation error scope, pipelines and bind groups made once. Two patterns,
 * N calls each: one by one (submit, then wait for the queue), and back to back (N submits, one
 * wait). It prints the median per call (and the mean of the back-to-back run with its wait).
 *
 *   go run ./internal/cmd/tinywgsl build/tiny   # the kernels, as the Go path renders them
 *   build/tiny_bench LIBRARY build/tiny [N]
 *
 * Not a test: ctest does not run it. Numbers on lavapipe mean nothing.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../dawnrt.h"
#include "../dawnrt_fast.h"

#define H 768u
#define V 64u
#define P 8u

static char err[DRT_MSG_CAP * 4];

#define CHECK(call, what)                                                                             \
    do {                                                                                              \
        if ((call) != DRT_OK) {                                                                       \
            fprintf(stderr, "FAIL %s: %s\n", what, err);                                              \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *read_file(const char *dir, const char *name, size_t *len) {
    char path[2048];
    FILE *f;
    long n;
    char *buf;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "FAIL: cannot open %s (run: go run ./internal/cmd/tinywgsl %s)\n", path, dir);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (char *)calloc(1, (size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "FAIL: reading %s\n", path);
        exit(1);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static drt_device d;

static WGPUBuffer buffer(const char *label, uint64_t size, uint64_t usage, const void *data) {
    WGPUBuffer b;
    CHECK(drt_create_buffer(&d, label, size, usage, &b, err, sizeof err), label);
    if (data) CHECK(drt_write_buffer(&d, b, 0, data, (size_t)size, err, sizeof err), label);
    return b;
}

static void pipeline(const char *dir, const char *file, WGPUComputePipeline *pl, WGPUBindGroupLayout *bgl) {
    size_t n;
    char *src = read_file(dir, file, &n);
    CHECK(drt_create_pipeline(&d, file, src, n, "main", pl, bgl, err, sizeof err), file);
    free(src);
}

/* One call as the Go path records it; ids, when set, is what its Sync reads back. */
typedef struct call {
    WGPUComputePipeline pl;
    WGPUBindGroup bg;
    drt_copy copies[4];
    int npre, npost;
    const drt_read *ids;
} call;

static drt_status *ring;
static drt_read ids_read;
static unsigned ring_i;
static drt_wait *wt;

static void submit(const call *c) {
    drt_status *scope = &ring[ring_i++ % 256];
    drt_call dc;
    memset(&dc, 0, sizeof dc);
    dc.pl = c->pl;
    dc.bg = c->bg;
    dc.groups[0] = dc.groups[1] = dc.groups[2] = 1;
    dc.copies = c->copies;
    dc.npre = c->npre;
    dc.npost = c->npost;
    dc.scope = scope;
    CHECK(drt_enqueue(&d, &dc, err, sizeof err), "enqueue");
}

/* What the Go Sync does: a queue-done future, its wait (polled, then slept), and the scopes' verdicts; after calls
   with ids on the device (EmbedLayerNorm), the read-back of their id-check words (SPEC A.2a),
   which it scans for a call that found an id out of range. */
static void wait_queue(const drt_read *ids) {
    uint32_t words[256];
    int i;
    drt_call dc;
    memset(&dc, 0, sizeof dc);
    dc.reads = ids;
    dc.nreads = ids ? 1 : 0;
    dc.w = wt;
    CHECK(drt_enqueue(&d, &dc, err, sizeof err), "sync");
    /* Poll for up to 200 us, then sleep in the driver (the Go side's spinWait). */
    {
        double end = now_ns() + 200e3;
        int rc;
        while ((rc = drt_wait_all(&d, wt, 0, err, sizeof err)) == DRT_ETIMEOUT && now_ns() < end) {
        }
        if (rc == DRT_ETIMEOUT) rc = drt_wait_all(&d, wt, 30000000000ull, err, sizeof err);
        CHECK(rc, "wait");
    }
    CHECK(drt_wait_error(wt, err, sizeof err), "wait status");
    drt_process_events(&d);
    if (ids == NULL) return;
    CHECK(drt_copy_mapped(&d, ids->staging, words, sizeof words, err, sizeof err), "id words");
    drt_unmap(&d, ids->staging);
    for (i = 0; i < 256; i++) {
        if (words[i] != 0) {
            fprintf(stderr, "FAIL: id out of range reported\n");
            exit(1);
        }
    }
}

static double median_of(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

static void bench(const char *name, const call *c, int n, double *t, double *tc, double *tw) {
    int i;
    double t0, t1, total, med_each, med_b2b;
    for (i = 0; i < 20; i++) submit(c);
    wait_queue(c->ids);
    for (i = 0; i < n; i++) {
        t0 = now_ns();
        submit(c);
        t1 = now_ns();
        wait_queue(c->ids);
        t[i] = now_ns() - t0;
        tc[i] = t1 - t0;
        tw[i] = t[i] - tc[i];
    }
    med_each = median_of(t, n);
    total = now_ns();
    for (i = 0; i < n; i++) {
        t0 = now_ns();
        submit(c);
        t[i] = now_ns() - t0;
        if (i % 256 == 255) drt_process_events(&d); /* as the Go side collects verdicts */
    }
    wait_queue(c->ids);
    total = now_ns() - total;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    med_b2b = t[n / 2];
    printf("C  %-14s one-by-one median %9.2f us (call %.2f + wait %.2f)   back-to-back median %9.2f us   back-to-back mean "
           "(with the final wait) %9.2f us   (N=%d)\n",
           name, med_each / 1e3, median_of(tc, n) / 1e3, median_of(tw, n) / 1e3, med_b2b / 1e3, total / n / 1e3, n);
}

int main(int argc, char **argv) {
    static drt_lib lib;
    const char *cand[1];
    const char *dir;
    int n = 2000;
    float invh, eps = 1e-12f;
    double *t, *tc, *tw;
    char *s;
    size_t len;
    WGPUComputePipeline epl, apl;
    WGPUBindGroupLayout ebgl, abgl;
    call ec, ac;

    if (argc < 3) {
        fprintf(stderr, "usage: tiny_bench LIBRARY KERNEL_DIR [N]\n");
        return 2;
    }
    cand[0] = argv[1];
    dir = argv[2];
    if (argc > 3) n = atoi(argv[3]);
    if (n < 1) n = 1;
    t = (double *)calloc((size_t)n, sizeof *t);
    tc = (double *)calloc((size_t)n, sizeof *tc);
    tw = (double *)calloc((size_t)n, sizeof *tw);
    ring = (drt_status *)calloc(256, sizeof *ring);
    wt = (drt_wait *)calloc(1, sizeof *wt);
    s = read_file(dir, "invh.txt", &len);
    invh = strtof(s, NULL);
    free(s);
    if (drt_load(cand, 1, &lib, err, sizeof err) != DRT_OK) {
        fprintf(stderr, "FAIL load:\n%s", err);
        return 1;
    }
    CHECK(drt_open(&lib.p, &d, 60000000000ull, err, sizeof err), "open");
    printf("adapter: %s (%s)\n", d.device_name, d.description);
    pipeline(dir, "embed.wgsl", &epl, &ebgl);
    pipeline(dir, "addln.wgsl", &apl, &abgl);

    {
        /* EmbedLayerNorm f32 (1,1,768): params as dawn/devops.go lays them out. */
        uint32_t params[16] = {1, H, 1, 1, V, P, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1};
        float *word = (float *)calloc(V * H, 4), *pos = (float *)calloc(P * H, 4), *gb = (float *)calloc(2 * H, 4);
        int32_t id = 5;
        unsigned i;
        WGPUBuffer bp, bw, bpos, bgb, out, aux, ids, zero, idstatus;
        drt_binding b[7];
        memcpy(&params[12], &invh, 4);
        memcpy(&params[13], &eps, 4);
        for (i = 0; i < V * H; i++) word[i] = (float)(i % 97) * 0.01f - 1;
        for (i = 0; i < P * H; i++) pos[i] = (float)(i % 97) * 0.02f - 1;
        for (i = 0; i < H; i++) gb[i] = (float)(i % 97) * 0.003f - 1, gb[H + i] = (float)(i % 97) * 0.001f - 1;
        bp = buffer("params", 64, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, params);
        bw = buffer("word", V * H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst, word);
        bpos = buffer("pos", P * H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst, pos);
        bgb = buffer("gb", 2 * H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst, gb);
        out = buffer("out", H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, NULL);
        aux = buffer("aux", 8, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, NULL);
        ids = buffer("ids", 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, &id);
        zero = buffer("zero", 256, WGPUBufferUsage_CopySrc, NULL);
        idstatus = buffer("idstatus", 1024, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst,
                          NULL);
        b[0] = (drt_binding){0, bp, 0, 64};
        b[1] = (drt_binding){1, ids, 0, 4};
        b[2] = (drt_binding){2, bw, 0, V * H * 4};
        b[3] = (drt_binding){3, bpos, 0, P * H * 4};
        b[4] = (drt_binding){5, bgb, 0, 2 * H * 4};
        b[5] = (drt_binding){6, out, 0, H * 4};
        b[6] = (drt_binding){8, aux, 0, 8};
        memset(&ec, 0, sizeof ec);
        ec.pl = epl;
        CHECK(drt_bind_group(&d, ebgl, b, 7, &ec.bg, err, sizeof err), "embed bind group");
        ec.copies[0] = (drt_copy){zero, 0, aux, 0, 4};
        ec.copies[1] = (drt_copy){aux, 0, idstatus, 0, 4};
        ec.npre = 1;
        ec.npost = 1;
        ids_read.src = idstatus;
        ids_read.src_offset = 0;
        ids_read.staging = buffer("idstatus staging", 1024, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, NULL);
        ids_read.size = 1024;
        ec.ids = &ids_read;
        free(word);
        free(pos);
        free(gb);
    }
    {
        /* AddLayerNorm f32 (1,768), gamma+beta resident. */
        uint32_t params[8] = {1, H, 1, 0, 0, 0, 0, 0};
        float epsa = 1e-5f, *x = (float *)calloc(H, 4), *gb = (float *)calloc(2 * H, 4);
        unsigned i;
        WGPUBuffer bp, x1, x2, bgb, y, stats, mean, rstd;
        drt_binding b[6];
        memcpy(&params[4], &invh, 4);
        memcpy(&params[5], &epsa, 4);
        for (i = 0; i < H; i++) x[i] = (float)(i % 97) * 0.01f - 1;
        for (i = 0; i < H; i++) gb[i] = (float)(i % 97) * 0.003f - 1, gb[H + i] = (float)(i % 97) * 0.001f - 1;
        bp = buffer("params", 32, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, params);
        x1 = buffer("x1", H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, x);
        x2 = buffer("x2", H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, x);
        bgb = buffer("gb", 2 * H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst, gb);
        y = buffer("y", H * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, NULL);
        stats = buffer("stats", 8, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc, NULL);
        mean = buffer("mean", 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, NULL);
        rstd = buffer("rstd", 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst, NULL);
        b[0] = (drt_binding){0, bp, 0, 32};
        b[1] = (drt_binding){1, x1, 0, H * 4};
        b[2] = (drt_binding){2, x2, 0, H * 4};
        b[3] = (drt_binding){3, bgb, 0, 2 * H * 4};
        b[4] = (drt_binding){5, y, 0, H * 4};
        b[5] = (drt_binding){7, stats, 0, 8};
        memset(&ac, 0, sizeof ac);
        ac.pl = apl;
        CHECK(drt_bind_group(&d, abgl, b, 6, &ac.bg, err, sizeof err), "addln bind group");
        ac.copies[0] = (drt_copy){stats, 0, mean, 0, 4};
        ac.copies[1] = (drt_copy){stats, 4, rstd, 0, 4};
        ac.npre = 0;
        ac.npost = 2;
        free(x);
        free(gb);
    }
    bench("EmbedLayerNorm", &ec, n, t, tc, tw);
    bench("AddLayerNorm", &ac, n, t, tc, tw);
    /* Objects are released with the process; this is a benchmark, not a library. */
    drt_close(&d);
    free(t);
    free(tc);
    free(tw);
    return 0;
}
