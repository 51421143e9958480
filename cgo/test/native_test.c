/*
 * Native test of the cgo layer without Go: load Dawn, open a real (non-Null) device, run
 * y[i] = x[i] * 2 + 1 over 1000 elements and check every element exactly.
 *
 * Library: argv[1], else $FUSEDNORM_DAWN_LIB, else the path CMake compiled in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dawnrt.h"

#ifndef DRT_TEST_DEFAULT_LIB
#define DRT_TEST_DEFAULT_LIB "libwebgpu_dawn.so"
#endif

#define N 1000u

static const char *kernel =
    "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
    "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
    "@compute @workgroup_size(64)\n"
    "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
    "    if (id.x < arrayLength(&x)) { y[id.x] = x[id.x] * 2.0 + 1.0; }\n"
    "}\n";

static char err[DRT_MSG_CAP * 4];

#define CHECK(call, what)                                                                             \
    do {                                                                                              \
        if ((call) != DRT_OK) {                                                                       \
            fprintf(stderr, "FAIL %s: %s\n", what, err);                                              \
            return 1;                                                                                 \
        }                                                                                             \
    } while (0)

int main(int argc, char **argv) {
    const char *cands[3];
    int n = 0, i, rc;
    static drt_lib lib;
    static drt_device d;
    WGPUBuffer x, y, staging;
    WGPUComputePipeline pl;
    WGPUBindGroupLayout bgl;
    drt_binding binds[2];
    drt_read rd;
    drt_call call;
    drt_map map;
    WGPUBindGroup bg;
    static drt_status verdict;
    static drt_wait w;
    float in[N], out[N];

    if (argc > 1) cands[n++] = argv[1];
    if (getenv("FUSEDNORM_DAWN_LIB")) cands[n++] = getenv("FUSEDNORM_DAWN_LIB");
    cands[n++] = DRT_TEST_DEFAULT_LIB;
    if (drt_load(cands, n, &lib, err, sizeof err) != DRT_OK) {
        fprintf(stderr, "FAIL load; tried:\n%s", err);
        return 1;
    }
    printf("loaded %s\n", lib.path);
    CHECK(drt_open_adapter(&lib.p, &d, -1, 30000000000ull, err, sizeof err), "open");
    printf("adapter: %s (backend %u, adapter type %u, %s)\n", d.info.device_name, d.info.backend_type, d.info.adapter_type,
           d.info.description);
    if (d.info.backend_type == WGPUBackendType_Null) {
        fprintf(stderr, "FAIL: Null backend accepted\n");
        return 1;
    }
    printf("limits: maxStorageBufferBindingSize=%llu maxBufferSize=%llu invocations=%u\n",
           (unsigned long long)d.limits.maxStorageBufferBindingSize, (unsigned long long)d.limits.maxBufferSize,
           d.limits.maxComputeInvocationsPerWorkgroup);

    for (i = 0; i < (int)N; i++) in[i] = (float)i - 500.25f;
    CHECK(drt_create_buffer(&d, "x", N * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst, &x, err, sizeof err),
          "x");
    CHECK(drt_create_buffer(&d, "y", N * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc, &y, err, sizeof err),
          "y");
    CHECK(drt_create_buffer(&d, "staging", N * 4, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, &staging, err,
                            sizeof err),
          "staging");
    drt_queue_write(&d, x, 0, in, sizeof in);
    CHECK(drt_create_pipeline(&d, "double", kernel, strlen(kernel), "main", &pl, &bgl, err, sizeof err),
          "pipeline");

    /* A bad shader must fail with the compiler's message. */
    {
        WGPUComputePipeline bad;
        WGPUBindGroupLayout badl;
        const char *src = "fn main( {";
        if (drt_create_pipeline(&d, "bad", src, strlen(src), "main", &bad, &badl, err, sizeof err) == DRT_OK) {
            fprintf(stderr, "FAIL: bad WGSL compiled\n");
            return 1;
        }
        printf("bad WGSL rejected: %.120s...\n", err);
    }

    binds[0].binding = 0, binds[0].buffer = x, binds[0].offset = 0, binds[0].size = N * 4;
    binds[1].binding = 1, binds[1].buffer = y, binds[1].offset = 0, binds[1].size = N * 4;
    rd.src = y, rd.src_offset = 0, rd.staging = staging, rd.size = N * 4;
    CHECK(drt_bind_group(&d, bgl, binds, 2, &bg, err, sizeof err), "bind group");
    /* One call recorded into the open encoder, submitted with its read-back's map. */
    memset(&call, 0, sizeof call);
    call.label = "double", call.pl = pl, call.bg = bg;
    call.groups[0] = (N + 63) / 64, call.groups[1] = 1, call.groups[2] = 1;
    call.nreads = 1, call.reads = &rd;
    CHECK(drt_record(&d, &call, err, sizeof err), "record");
    map.buf = staging, map.size = N * 4, map.write = 0;
    CHECK(drt_flush(&d, &verdict, &map, 1, &w, err, sizeof err), "flush");
    while ((rc = drt_wait_all(&d, &w, 1000000000ull, err, sizeof err)) == DRT_ETIMEOUT) {
    }
    CHECK(rc, "wait");
    CHECK(drt_wait_error(&w, err, sizeof err), "map");
    drt_process_events(&d);
    if (!verdict.done || verdict.status != WGPUPopErrorScopeStatus_Success || verdict.type != WGPUErrorType_NoError) {
        fprintf(stderr, "FAIL submit verdict: done %d status %u: %s\n", verdict.done, verdict.status, verdict.msg);
        return 1;
    }
    CHECK(drt_copy_mapped(&d, staging, out, sizeof out, err, sizeof err), "copy");
    drt_unmap(&d, staging);
    drt_bind_group_release(&d, bg);
    for (i = 0; i < (int)N; i++) {
        if (out[i] != in[i] * 2.0f + 1.0f) {
            fprintf(stderr, "FAIL y[%d] = %g, want %g\n", i, out[i], in[i] * 2.0f + 1.0f);
            return 1;
        }
    }
    drt_pipeline_release(&d, pl, bgl);
    drt_buffer_release(&d, x);
    drt_buffer_release(&d, y);
    drt_buffer_release(&d, staging);
    drt_close(&d);
    if (d.uncaptured) {
        fprintf(stderr, "FAIL: uncaptured error: %s\n", d.uncaptured_msg);
        return 1;
    }
    printf("PASS: %u elements exact\n", N);
    return 0;
}
