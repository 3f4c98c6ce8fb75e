/* swap_offline: what only the offline tools use (swap-replay, swap-real,
 * swap-bench, the tests): measurements of a trace (swap_analysis.c), its
 * replay through the policies with Belady's MIN fed the true next uses and
 * a fractional lower bound (swap_min.c). Built into the tools
 * (tests/swap/offline), never into libipcshim.so: the shim never links
 * against the future. */
#ifndef SWAP_OFFLINE_H
#define SWAP_OFFLINE_H

#include "swap_trace.h"

/* Working set: the largest sum of distinct block sizes touched in one
 * iteration from iteration `warmup` on (all of them if there are fewer).
 * *max_launch (if not NULL): the largest sum of distinct block sizes in one
 * launch, the smallest budget under which nothing overflows. */
uint64_t swap_trace_working_set(const struct swap_trace *t, unsigned warmup, uint64_t *max_launch);

/* Peak live memory: the largest sum of sizes of the blocks alive at once
 * (touched and not yet freed), over the whole trace. The per-iteration sum
 * of distinct blocks (swap_trace_working_set) overcounts a trace whose
 * tensors are freed and reallocated within an iteration. The replay tools
 * set a budget of --oversub X as this / X. 0 when the trace has no access,
 * or on -ENOMEM. */
uint64_t swap_trace_peak_live(const struct swap_trace *t);

/* ---- replay (swap_min.c) ----------------------------------------------- */

/* Iterations whose own bytes a replay reports (iter_bytes). */
#define SWAP_REPLAY_ITERS 64

struct swap_replay_result {
    struct swap_counters total;
    uint64_t iterations;        /* I lines, or 1 when there are none */
    uint64_t steady_iterations; /* those measured */
    double steady_bytes;        /* (h2d + d2h) per steady-state iteration */
    double steady_h2d, steady_d2h;
    double clean_weight; /* min: the ranking weight of the cheaper run */
    /* (h2d + d2h) bytes moved in each of the first SWAP_REPLAY_ITERS
     * iterations (whole run, warm-up included) */
    uint64_t iter_bytes[SWAP_REPLAY_ITERS];
};

/* Run the trace through a fresh policy of kind prm->kind and budget
 * prm->budget_bytes. Steady state is iterations [warmup, iterations - 1):
 * the warm-up learns, and the last iteration is left out because MIN sees
 * the end of the trace coming (fewer if the trace is short). For kind MIN
 * the true next uses are computed from the trace and the replay is run with
 * several clean weights (1 = plain Belady .. 8), keeping the cheapest.
 * An access refused with -ENOSPC is counted and skipped. -EINVAL, -ENOMEM. */
int swap_replay(const struct swap_trace *t, const struct swap_params *prm, unsigned warmup,
                struct swap_replay_result *r);

/* MIN fed, from the second iteration (I lines) on, the next uses that the
 * previous iteration predicts instead of the true ones: a block's next use
 * is where its next kernel access (or its free: dead) came in the previous
 * iteration, at the same offset from the iteration's start, else its first
 * one there an iteration on; never if the previous iteration did not use
 * it. The first iteration gets the true next uses, so the second starts
 * from the offline schedule's state. What a prediction that knew the
 * period from the first launch of the second iteration, exactly aligned,
 * could do with the blocks' ids as they are (docs/swap.md, "What
 * predicting from the previous iteration can reach"). prm->kind must be
 * SWAP_POLICY_MIN. -EINVAL, -ENOMEM. */
int swap_replay_past(const struct swap_trace *t, const struct swap_params *prm,
                     struct swap_replay_result *r);

/* For every event i of t, what swap_policy_access_known takes as next_use:
 * the launch of the same block's next kernel access after event i
 * (SWAP_NEVER if none), or its free with SWAP_DEAD_BIT set when it is freed
 * first. Copies are not uses (they need no residency). *out is malloc'd,
 * one entry per event. -ENOMEM. */
int swap_replay_next_uses(const struct swap_trace *t, uint64_t **out);

/* Lower bound on the host->device bytes any schedule moves under budget:
 * fractional byte-level Belady (evict the bytes whose next access is
 * furthest, one access at a time, partial blocks allowed). Exact as a bound
 * when block sizes do not change; with changing sizes (jitter) a close
 * estimate. Fills steady_h2d and steady_bytes (= steady_h2d) the same way as
 * swap_replay. -ENOMEM. */
int swap_replay_lower_bound(const struct swap_trace *t, uint64_t budget, unsigned warmup,
                            struct swap_replay_result *r);

#endif
