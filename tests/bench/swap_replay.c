/* swap-replay: runs a trace file (swap_trace.h format) through min, history
 * and lru at one budget and prints bytes moved, in total and per
 * steady-state iteration, plus the fractional lower bound on host->device
 * bytes.
 *   swap-replay TRACE (--budget SIZE[K|M|G] | --oversub X) [--warmup N] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap_load.h"
#include "swap_trace.h"

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
    uint64_t max_launch, ws = swap_trace_working_set(&t, warmup, &max_launch);
    if (!budget) budget = (uint64_t)((double)ws / oversub);
    printf("trace %s: %zu events, working set %.1f MiB, largest launch %.1f MiB, budget %.1f MiB "
           "(%.2fx)\n",
           path, t.n, mib((double)ws), mib((double)max_launch), mib((double)budget),
           (double)ws / (double)budget);
    struct swap_replay_result lb;
    if ((rc = swap_replay_lower_bound(&t, budget, warmup, &lb))) goto fail;
    printf("%-8s %12s %12s %12s %10s %10s %9s\n", "policy", "MiB/iter", "h2d/iter", "d2h/iter",
           "total MiB", "faults", "overflows");
    printf("%-8s %12.1f %12.1f %12s %10s %10s %9s\n", "lb(h2d)", mib(lb.steady_bytes),
           mib(lb.steady_h2d), "-", "-", "-", "-");
    double min_bytes = 0;
    for (int k = SWAP_POLICY_MIN; k >= SWAP_POLICY_LRU; k--) {
        struct swap_params prm = {.kind = (enum swap_policy_kind)k, .budget_bytes = budget};
        struct swap_replay_result r;
        if ((rc = swap_replay(&t, &prm, warmup, &r))) goto fail;
        if (k == SWAP_POLICY_MIN) min_bytes = r.steady_bytes;
        printf("%-8s %12.1f %12.1f %12.1f %10.1f %10llu %9llu", swap_policy_kind_name(prm.kind),
               mib(r.steady_bytes), mib(r.steady_h2d), mib(r.steady_d2h),
               mib((double)(r.total.h2d_bytes + r.total.d2h_bytes)),
               (unsigned long long)r.total.faults, (unsigned long long)r.total.overflows);
        if (k != SWAP_POLICY_MIN && min_bytes > 0)
            printf("  (%.3fx min)", r.steady_bytes / min_bytes);
        printf("\n");
    }
    printf("steady state: %llu of %llu iterations (warm-up %u, last left out)\n",
           (unsigned long long)lb.steady_iterations, (unsigned long long)lb.iterations, warmup);
    swap_trace_fini(&t);
    return 0;
fail:
    fprintf(stderr, "swap-replay: replay: %s\n", strerror(-rc));
    swap_trace_fini(&t);
    return 1;
}
