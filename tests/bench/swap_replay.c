/* swap-replay: runs a trace file (swap_trace.h format; .xz or .gz is
 * decompressed) through min, history and lru at one budget and prints
 * bytes moved, in total and per steady-state iteration, plus the
 * fractional lower bound on host->device bytes; then the whole run (warm-up
 * counts): history over lru and over the best offline schedule found, and
 * the gap between that schedule and the proven lower bound. --oversub X sets
 * the budget to the trace's peak live memory / X (as swap-real does).
 *   swap-replay TRACE (--budget SIZE[K|M|G] | --oversub X) [--warmup N] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap_load.h"
#include "swap_offline.h"

static void usage(void)
{
    fprintf(stderr, "usage: swap-replay TRACE (--budget SIZE[K|M|G] | --oversub X) [--warmup N]\n");
    exit(2);
}

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'G':
    case 'g':
        v *= 1024; /* fall through */
    case 'M':
    case 'm':
        v *= 1024; /* fall through */
    case 'K':
    case 'k':
        v *= 1024;
        end++;
        break;
    case '\0':
        break;
    default:
        usage();
    }
    if (*end || v < 1) usage();
    return (uint64_t)v;
}

/* Every access the same size (Belady's MIN is then exact on fetches). */
static bool equal_sizes(const struct swap_trace *t)
{
    uint64_t size = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->ev[i].kind != SWAP_EV_ACCESS) continue;
        if (size && t->ev[i].bytes != size) return false;
        size = t->ev[i].bytes;
    }
    return true;
}

static double mib(double b)
{
    return b / (1024.0 * 1024.0);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    uint64_t budget = 0;
    double oversub = 0;
    unsigned warmup = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--budget") && i + 1 < argc)
            budget = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--oversub") && i + 1 < argc)
            oversub = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = (unsigned)atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            usage();
    }
    if (!path || (!budget && oversub <= 0)) usage();
    struct swap_trace t = {0};
    size_t bad = 0;
    int rc = swap_load(path, &t, &bad);
    if (rc) {
        if (rc == -EINVAL)
            fprintf(stderr, "swap-replay: %s:%zu: malformed line\n", path, bad);
        else
            fprintf(stderr, "swap-replay: %s: %s\n", path, strerror(-rc));
        return 1;
    }
    /* --oversub X: peak live memory / X, as swap-real (the per-iteration
     * working set overcounts a trace that frees and reallocates within an
     * iteration, which made a 1.25x budget move nothing). */
    uint64_t max_launch, ws = swap_trace_working_set(&t, warmup, &max_launch);
    uint64_t peak = swap_trace_peak_live(&t);
    if (!budget) budget = (uint64_t)((double)peak / oversub);
    if (!budget) {
        fprintf(stderr, "swap-replay: %s: no accesses\n", path);
        swap_trace_fini(&t);
        return 1;
    }
    printf("trace %s: %zu events, peak live %.1f MiB, working set per iteration %.1f MiB, largest "
           "launch %.1f MiB, budget %.1f MiB (%.2fx peak)\n",
           path, t.n, mib((double)peak), mib((double)ws), mib((double)max_launch),
           mib((double)budget), (double)peak / (double)budget);
    struct swap_replay_result lb;
    if ((rc = swap_replay_lower_bound(&t, budget, warmup, &lb))) goto fail;
    bool equal = equal_sizes(&t);
    printf("%-8s %12s %12s %12s %10s %10s %9s\n", "policy", "MiB/iter", "h2d/iter", "d2h/iter",
           "total MiB", "faults", "overflows");
    printf("%-8s %12.1f %12.1f %12s %10.1f %10s %9s\n", "lb(h2d)", mib(lb.steady_bytes),
           mib(lb.steady_h2d), "-", mib((double)lb.total.h2d_bytes), "-", "-");
    double min_bytes = 0, min_total = 0, lru_total = 0, hist_total = 0;
    for (int k = SWAP_POLICY_MIN; k >= SWAP_POLICY_LRU; k--) {
        struct swap_params prm = {.kind = (enum swap_policy_kind)k, .budget_bytes = budget};
        struct swap_replay_result r;
        if ((rc = swap_replay(&t, &prm, warmup, &r))) goto fail;
        double tot = (double)(r.total.h2d_bytes + r.total.d2h_bytes);
        if (k == SWAP_POLICY_MIN) {
            min_bytes = r.steady_bytes;
            min_total = tot;
        }
        if (k == SWAP_POLICY_HISTORY) hist_total = tot;
        if (k == SWAP_POLICY_LRU) lru_total = tot;
        printf("%-8s %12.1f %12.1f %12.1f %10.1f %10llu %9llu", swap_policy_kind_name(prm.kind),
               mib(r.steady_bytes), mib(r.steady_h2d), mib(r.steady_d2h), mib(tot),
               (unsigned long long)r.total.faults, (unsigned long long)r.total.overflows);
        if (k != SWAP_POLICY_MIN && min_bytes > 0)
            printf("  (%.3fx min)", r.steady_bytes / min_bytes);
        printf("\n");
    }
    printf("steady state: %llu of %llu iterations (warm-up %u, last left out)\n",
           (unsigned long long)lb.steady_iterations, (unsigned long long)lb.iterations, warmup);
    /* The whole run, warm-up included, against both offline figures. */
    double best = min_total;
    if (lru_total < best) best = lru_total;
    if (hist_total < best) best = hist_total;
    printf("whole run: history/lru %.3f, history/offline %.3f; offline (best schedule found: "
           "min family, lru or history) %.1f MiB, lower bound %.1f MiB (%s)\n",
           lru_total > 0 ? hist_total / lru_total : 1.0, best > 0 ? hist_total / best : 1.0,
           mib(best), mib((double)lb.total.h2d_bytes),
           equal ? "equal sizes: exact Belady on fetches" : "proven: fractional Belady on fetches");
    if (lb.total.h2d_bytes)
        printf("gap: the optimum lies between %.1f and %.1f MiB (offline/bound %.2f)\n",
               mib((double)lb.total.h2d_bytes), mib(best), best / (double)lb.total.h2d_bytes);
    swap_trace_fini(&t);
    return 0;
fail:
    fprintf(stderr, "swap-replay: replay: %s\n", strerror(-rc));
    swap_trace_fini(&t);
    return 1;
}
