/* ipc_bench.h: what ipc-bench's figures share across its files (ipc_bench.c:
 * the per-call figures and main; ipc_bench_procs.c: whole processes, exit
 * and the wake floor): the parsed options, the channel's doors and the
 * helpers both use. */
#ifndef IPC_BENCH_H
#define IPC_BENCH_H

#include "bench.h"

#include <stdbool.h>

enum { D_TO_CHILD, D_TO_PARENT, D_READY, D_GO }; /* doors */
#define SPIN_NS 2000000ull                       /* busy-wait up to 2 ms before sleeping */

struct args {
    long pairs, reps, size, cycles, blocks, sample, rounds, samples, scratch_us, timeout_ms, procs;
    long limbo, budget_s, pace_us, domain_blocks, exits;
    double seconds;
    bool export_one, once, pin, async, sides;
};

/* v as decimal text in buf (an argument of a child's command line). */
char *fmt_long(char *buf, long v);
/* This process on the first CPU it may use, child on the second (when two). */
void pin_pair(int child);

/* ipc_bench_procs.c: figure 9 and the wake floor, and their children. */
int fig_exit(const struct args *a, const char *self);
int exit_child(struct chan *c, long n, size_t size);
int fig_wake(const struct args *a, const char *self);
int wake_child(struct chan *c, long n);

#endif
