/*
 * tiny_bench: the native twin of the Go tiny-call benchmarks as a program of its own: what
 * tiny_twin.c does (see tiny_twin.h), printed as the median per call one by one (with its
 * record and wait parts) and back to back, a submit per call and sharing submits (and each
 * back-to-back run's mean with its final wait).
 *
 *   go run ./cmd/fusednorm-bench -tiny-wgsl build/tiny   # the kernels, as the Go path renders them
 *   build/tiny_bench LIBRARY build/tiny [N]
 *
 * fusednorm-bench -tiny runs the same twin in its own process, alternating with the Go calls.
 * Not a test: ctest does not run it. Numbers on lavapipe mean nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiny_twin.h"

static char *read_file(const char *dir, const char *name) {
    char path[2048];
    FILE *f;
    long n;
    char *buf;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "FAIL: cannot open %s (run: go run ./cmd/fusednorm-bench -tiny-wgsl %s)\n", path, dir);
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
    return buf;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

int main(int argc, char **argv) {
    static char msg[8192];
    static const char *names[2] = {"EmbedLayerNorm", "AddLayerNorm"};
    int n = 2000, op;
    char *embed, *add, *invh;
    tiny_samples s;

    if (argc < 3) {
        fprintf(stderr, "usage: tiny_bench LIBRARY KERNEL_DIR [N]\n");
        return 2;
    }
    if (argc > 3) n = atoi(argv[3]);
    if (n < 1) n = 1;
    embed = read_file(argv[2], "embed.wgsl");
    add = read_file(argv[2], "addln.wgsl");
    invh = read_file(argv[2], "invh.txt");
    if (tiny_twin_open(argv[1], embed, add, strtof(invh, NULL), msg, sizeof msg) != 0) {
        fprintf(stderr, "FAIL %s\n", msg);
        return 1;
    }
    printf("adapter: %s\n", tiny_twin_adapter());
    s.each = (double *)calloc((size_t)n, sizeof(double));
    s.call = (double *)calloc((size_t)n, sizeof(double));
    s.wait = (double *)calloc((size_t)n, sizeof(double));
    s.b2b = (double *)calloc((size_t)n, sizeof(double));
    s.shared = (double *)calloc((size_t)n, sizeof(double));
    for (op = TINY_EMBED; op <= TINY_ADD; op++) {
        if (tiny_twin_run(op, n, &s, msg, sizeof msg) != 0) {
            fprintf(stderr, "FAIL %s: %s\n", names[op], msg);
            return 1;
        }
        printf("C  %-14s one-by-one median %9.2f us (call %.2f + wait %.2f)   back-to-back, a submit each: "
               "median %9.2f us, mean with the final wait %9.2f us   sharing submits: median %9.2f us, mean "
               "with the final wait %9.2f us   (N=%d)\n",
               names[op], median_of(s.each, n) / 1e3, median_of(s.call, n) / 1e3, median_of(s.wait, n) / 1e3,
               median_of(s.b2b, n) / 1e3, s.b2b_total / n / 1e3, median_of(s.shared, n) / 1e3,
               s.shared_total / n / 1e3, n);
    }
    /* Objects are released with the process; this is a benchmark, not a library. */
    return 0;
}
