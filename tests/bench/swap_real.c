/* swap-real: replays the recorded real-model traces (tests/swap/traces,
 * written by tests/swap/record_traces.py) at budgets of 1/1.25, 1/1.5 and
 * 1/2 of each trace's peak working set (the most bytes of blocks alive at
 * once), counting the whole run (warm-up
 * included), and prints per trace and budget the bytes moved by history and
 * lru, the best offline schedule found ("offline", swap_min.c) and the
 * proven lower bound ("lb", fractional Belady on host->device bytes; no
 * schedule moves less). "offline" is the cheapest schedule known for the
 * trace: the MIN family of swap_min.c (furthest true next use under several
 * write-back weights), or lru's or history's own schedule where one of them
 * is cheaper (each is a feasible schedule; the column `best` says which).
 * The ratios:
 *   hist/off   history over the best offline schedule (the goal: <= 1.10)
 *   hist/lru   history over lru (the goal: <= 1.01)
 *   off/lb     the gap between the two offline figures: the optimum lies
 *              between lb and offline
 * then one `goal` line per target (ok|miss; printed, never asserted):
 *   goal swap-offline: worst history/offline W (TRACE at Xx) <= 1.10 ok|miss
 *   goal swap-lru: worst history/lru W (TRACE at Xx) <= 1.01 ok|miss
 * With SWAP_REAL_ITERS set, each row is followed by its MiB per iteration
 * (history/offline/lru) and by those of swap_replay_past, the previous
 * iteration taken as the future (docs/swap.md, "What predicting from the
 * previous iteration can reach").
 * With --model, the timing model instead (swap_real_model.c): each
 * iteration's modeled time under the managed engine, the VMM engine as
 * built (before and with fetch ahead) and the planned one beside its
 * physical bound, with the model's goal lines (judging the engine as
 * built).
 * With --designs, the VMM engine's variants side by side (swap_real_model.c).
 * With --ahead N, history fetches ahead within N launches after every
 * launch (swap_policy_prefetch, the horizon fixed): the policy goals with
 * fetch ahead on.
 * Usage: swap-real [--model | --designs | --ahead N] [--json FILE] TRACE... */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap_load.h"
#include "swap_real.h"
#include "swap_offline.h"
#include "uthash_wrap.h"

static const double oversubs[] = {1.25, 1.5, 2.0};
#define NO (sizeof(oversubs) / sizeof(oversubs[0]))
#define GOAL_OFFLINE 1.10
#define GOAL_LRU 1.01
#define GOAL_ITERATION 1.05
/* The whole-run goal applies to traces of at least this many iterations. */
#define MIN_ITERATIONS 8

static double mib(double b)
{
    return b / (1024.0 * 1024.0);
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : (a > 0 ? 1e9 : 1.0);
}

static double total(const struct swap_replay_result *r)
{
    return (double)(r->total.h2d_bytes + r->total.d2h_bytes);
}

const char *swap_real_base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    static char buf[256];
    snprintf(buf, sizeof(buf), "%s", s ? s + 1 : path);
    char *dot = strstr(buf, ".trace");
    if (dot) *dot = '\0';
    return buf;
}

/* The worst ratio of history's bytes to the offline schedule's in one
 * iteration, from the second iteration to the one before the last (the
 * offline schedule sees the end of the trace coming). An iteration in which
 * the offline schedule moves nothing counts history's bytes over one MiB
 * floor, so that a few stray bytes do not make the ratio infinite. */
static double worst_iteration(const struct swap_replay_result *h,
                              const struct swap_replay_result *o)
{
    double w = 0;
    uint64_t n = h->iterations < SWAP_REPLAY_ITERS ? h->iterations : SWAP_REPLAY_ITERS;
    for (uint64_t i = 1; i + 1 < n; i++) {
        double floor = 1024.0 * 1024.0, ob = (double)o->iter_bytes[i];
        double v = ((double)h->iter_bytes[i] + floor) / (ob + floor);
        if (v > w) w = v;
    }
    return w;
}

/* With SWAP_REAL_ITERS set: MiB per iteration, history / offline / lru. */
static void print_iterations(const struct swap_replay_result *h, const struct swap_replay_result *o,
                             const struct swap_replay_result *l)
{
    uint64_t n = h->iterations < SWAP_REPLAY_ITERS ? h->iterations : SWAP_REPLAY_ITERS;
    printf("    iterations (history/offline/lru MiB):");
    for (uint64_t i = 0; i < n; i++)
        printf(" %.0f/%.0f/%.0f", mib((double)h->iter_bytes[i]), mib((double)o->iter_bytes[i]),
               mib((double)l->iter_bytes[i]));
    printf("\n");
}

void swap_real_note(struct swap_real_worst *w, double v, const char *trace, double oversub)
{
    if (v <= w->v) return;
    w->v = v;
    snprintf(w->trace, sizeof(w->trace), "%s", trace);
    w->oversub = oversub;
}

int main(int argc, char **argv)
{
    const char *json = NULL;
    int first = 1, model = 0, designs = 0;
    uint32_t ahead = 0;
    for (;;) {
        if (first < argc && !strcmp(argv[first], "--model")) {
            model = 1;
            first++;
        } else if (first < argc && !strcmp(argv[first], "--designs")) {
            model = designs = 1;
            first++;
        } else if (first + 1 < argc && !strcmp(argv[first], "--ahead")) {
            ahead = (uint32_t)strtoul(argv[first + 1], NULL, 10);
            first += 2;
        } else if (first + 1 < argc && !strcmp(argv[first], "--json")) {
            json = argv[first + 1];
            first += 2;
        } else {
            break;
        }
    }
    if (first >= argc) {
        fprintf(stderr,
                "usage: swap-real [--model | --designs | --ahead N] [--json FILE] TRACE...\n");
        return 2;
    }
    if (designs) return swap_real_designs(argc - first, argv + first);
    if (model) return swap_real_model(argc - first, argv + first, json);
    FILE *jf = NULL;
    if (json && !(jf = fopen(json, "w"))) {
        fprintf(stderr, "swap-real: %s: %s\n", json, strerror(errno));
        return 1;
    }
    if (jf) fprintf(jf, "{\n  \"unit\": \"bytes moved over the whole trace\",\n  \"rows\": [\n");
    printf("real traces, whole run (warm-up counts), MiB moved (host->device + device->host)");
    if (ahead) printf("; history fetches ahead within %u launches", (unsigned)ahead);
    printf("\n");
    printf("%-32s %6s %8s %9s %9s %7s %9s %9s %8s %8s %7s %8s\n", "trace", "budget", "MiB",
           "lb(h2d)", "offline", "best", "history", "lru", "hist/off", "hist/lru", "off/lb",
           "iter>=2");
    struct swap_real_worst w_off = {0}, w_lru = {0}, w_it = {0};
    int rows = 0;
    for (int i = first; i < argc; i++) {
        struct swap_trace t = {0};
        size_t bad = 0;
        int rc = swap_load(argv[i], &t, &bad);
        if (rc) {
            fprintf(stderr, "swap-real: %s:%zu: %s\n", argv[i], bad, strerror(-rc));
            return 1;
        }
        const char *name = swap_real_base_name(argv[i]);
        uint64_t ws = swap_trace_peak_live(&t);
        if (!ws) {
            fprintf(stderr, "swap-real: %s: no accesses, or out of memory\n", argv[i]);
            return 1;
        }
        for (size_t k = 0; k < NO; k++) {
            uint64_t budget = (uint64_t)((double)ws / oversubs[k]);
            struct swap_params prm = {.budget_bytes = budget};
            struct swap_replay_result lb, off, hist, lru;
            rc = swap_replay_lower_bound(&t, budget, 0, &lb);
            prm.kind = SWAP_POLICY_MIN;
            if (!rc) rc = swap_replay(&t, &prm, 0, &off);
            prm.kind = SWAP_POLICY_HISTORY;
            prm.ahead_horizon = ahead;
            if (!rc) rc = swap_replay(&t, &prm, 0, &hist);
            prm.ahead_horizon = 0;
            prm.kind = SWAP_POLICY_LRU;
            if (!rc) rc = swap_replay(&t, &prm, 0, &lru);
            if (rc) {
                fprintf(stderr, "swap-real: %s: replay: %s\n", argv[i], strerror(-rc));
                return 1;
            }
            const char *best = "min";
            if (total(&lru) < total(&off)) {
                off = lru;
                best = "lru";
            }
            if (total(&hist) < total(&off)) {
                off = hist;
                best = "history";
            }
            double ho = ratio(total(&hist), total(&off)), hl = ratio(total(&hist), total(&lru));
            double it = worst_iteration(&hist, &off);
            double ol = ratio(total(&off), (double)lb.total.h2d_bytes);
            if (hist.iterations >= MIN_ITERATIONS) swap_real_note(&w_off, ho, name, oversubs[k]);
            swap_real_note(&w_it, it, name, oversubs[k]);
            swap_real_note(&w_lru, hl, name, oversubs[k]);
            char gap[16] = "-";
            if (lb.total.h2d_bytes) snprintf(gap, sizeof(gap), "%.2f", ol);
            printf("%-32s %5.2fx %8.1f %9.1f %9.1f %7s %9.1f %9.1f %8.3f %8.3f %7s %8.3f\n", name,
                   oversubs[k], mib((double)budget), mib((double)lb.total.h2d_bytes),
                   mib(total(&off)), best, mib(total(&hist)), mib(total(&lru)), ho, hl, gap, it);
            if (jf)
                fprintf(jf,
                        "%s    {\"trace\": \"%s\", \"oversub\": %.2f, \"working_set\": %llu, "
                        "\"budget\": %llu, \"lb_h2d\": %llu, \"offline\": %.0f, "
                        "\"history\": %.0f, \"lru\": %.0f, \"history_offline\": %.4f, "
                        "\"history_lru\": %.4f, \"offline_lb\": %.4f}",
                        rows ? ",\n" : "", name, oversubs[k], (unsigned long long)ws,
                        (unsigned long long)budget, (unsigned long long)lb.total.h2d_bytes,
                        total(&off), total(&hist), total(&lru), ho, hl, ol);
            if (getenv("SWAP_REAL_ITERS")) {
                print_iterations(&hist, &off, &lru);
                struct swap_replay_result past;
                prm.kind = SWAP_POLICY_MIN;
                if (!swap_replay_past(&t, &prm, &past)) {
                    printf("    previous iteration as the future (MiB):");
                    for (uint64_t j = 0; j < past.iterations && j < SWAP_REPLAY_ITERS; j++)
                        printf(" %.0f", mib((double)past.iter_bytes[j]));
                    printf("  worst iteration >= 2 %.3f, whole %.3f\n",
                           worst_iteration(&past, &off), ratio(total(&past), total(&off)));
                }
            }
            rows++;
        }
        swap_trace_fini(&t);
    }
    printf("goal swap-offline: worst history/offline %.3f (%s at %.2fx) <= %.2f %s\n", w_off.v,
           w_off.trace, w_off.oversub, GOAL_OFFLINE, w_off.v <= GOAL_OFFLINE ? "ok" : "miss");
    printf("goal swap-iteration: worst history/offline in one iteration from the second on %.3f "
           "(%s at %.2fx) <= %.2f %s\n",
           w_it.v, w_it.trace, w_it.oversub, GOAL_ITERATION,
           w_it.v <= GOAL_ITERATION ? "ok" : "miss");
    printf("goal swap-lru: worst history/lru %.3f (%s at %.2fx) <= %.2f %s\n", w_lru.v, w_lru.trace,
           w_lru.oversub, GOAL_LRU, w_lru.v <= GOAL_LRU ? "ok" : "miss");
    if (jf) {
        fprintf(jf,
                "\n  ],\n  \"worst_history_offline\": %.4f,\n  \"worst_history_lru\": %.4f\n}\n",
                w_off.v, w_lru.v);
        if (fclose(jf)) {
            fprintf(stderr, "swap-real: %s: write failed\n", json);
            return 1;
        }
    }
    return 0;
}
