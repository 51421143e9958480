/*
 * tiny_twin: the native twin of the Go tiny calls, as a library. It performs what one
 * device-resident call of the Go path records, through the same C layer (cgo/dawnrt.c), on a
 * device of its own:
 *
 *   EmbedLayerNorm f32 (1,1,768): the id (a device tensor) bound where it is; zero the status
 *     word, dispatch, copy the status word to the id-check slot;
 *   AddLayerNorm f32 (1,768), weights resident, mean and rstd bound where they are: dispatch;
 *
 * pipelines and bind groups made once, each submit inside one validation error scope. Three
 * patterns: one by one (record, submit, wait for the queue as the Go Sync does), back to back
 * with a submit per call, and back to back with calls sharing submits as the Go executor
 * records them (n calls, one wait). tiny_bench.c runs it as a program; fusednorm-bench -tiny
 * runs it in its own process beside the Go calls, so both twins share the process's placement
 * on the machine.
 *
 * One twin per process; not safe for concurrent use.
 */
#ifndef FUSEDNORM_TINY_TWIN_H
#define FUSEDNORM_TINY_TWIN_H

#include <stddef.h>

enum { TINY_EMBED = 0, TINY_ADD = 1 };

/* The samples of one tiny_twin_run, in nanoseconds: per call one by one (each = call +
 * wait), per call back to back with a submit each (b2b) and sharing submits (shared), and
 * each back-to-back run's whole time with its final wait. The arrays hold n each. */
typedef struct tiny_samples {
    double *each, *call, *wait, *b2b, *shared;
    double b2b_total, shared_total;
} tiny_samples;

/* Loads the library, opens a device, builds both calls from the kernels' WGSL (as
 * fusednorm-bench -tiny-wgsl writes them) and invh, the plan's 1/H. 0 or -1 with a message. */
int tiny_twin_open(const char *library, const char *embed_wgsl, const char *add_wgsl, float invh, char *msg,
                   size_t cap);

/* Runs op (TINY_EMBED or TINY_ADD): 20 calls to warm, n one by one, n back to back with a
 * submit each, n back to back sharing submits. */
int tiny_twin_run(int op, int n, tiny_samples *s, char *msg, size_t cap);

/* The device's name, once open. */
const char *tiny_twin_adapter(void);

#endif /* FUSEDNORM_TINY_TWIN_H */
