/* swap-bench: generates training-like traces in process (train, accum,
 * jitter, infer), replays each at 1.25x, 1.5x and 2x oversubscription
 * (working set / budget) through min, history and lru, and prints bytes
 * moved per steady-state iteration, with the fractional lower bound on
 * host->device bytes for reference. The last line is exactly
 *   swap history/min: <worst ratio over the training traces>
 * (train, accum, jitter; infer is shown but not counted). --json FILE writes
 * the figures. Options: --layers N --iters N --warmup N --seed N. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap_gen.h"
#include "swap_offline.h"

static const double oversubs[] = {1.25, 1.5, 2.0};
static const enum swap_gen_variant variants[] = {SWAP_GEN_TRAIN, SWAP_GEN_ACCUM, SWAP_GEN_JITTER,
                                                 SWAP_GEN_INFER};
#define NV (sizeof(variants) / sizeof(variants[0]))
#define NO (sizeof(oversubs) / sizeof(oversubs[0]))

struct row {
    enum swap_gen_variant v;
    double oversub;
    uint64_t budget, ws;
    struct swap_replay_result lb, min, hist, lru;
    uint64_t period;
};

static double mib(double b)
{
    return b / (1024.0 * 1024.0);
}
static double ratio(double a, double b)
{
    return b > 0 ? a / b : (a > 0 ? 1e9 : 1.0);
}

static void usage(void)
{
    fprintf(stderr, "usage: swap-bench [--json FILE] [--layers N] [--iters N] [--warmup N] "
                    "[--seed N]\n");
    exit(2);
}

/* The period the history policy settles on, for the table. */
static uint64_t learned_period(const struct swap_trace *t, uint64_t budget)
{
    struct swap_policy *p;
    if (swap_policy_create(SWAP_POLICY_HISTORY, budget, &p)) return 0;
    struct swap_decision d;
    for (size_t i = 0; i < t->n; i++) {
        const struct swap_event *e = &t->ev[i];
        if (e->kind == SWAP_EV_ACCESS)
            swap_policy_access(p, e->block, e->bytes, e->is_write, &d);
        else if (e->kind == SWAP_EV_LAUNCH)
            swap_policy_next_launch(p);
        else if (e->kind == SWAP_EV_FREE)
            swap_policy_free(p, e->block);
    }
    uint64_t per = swap_history_period(swap_policy_history(p));
    swap_policy_destroy(p);
    return per;
}

int main(int argc, char **argv)
{
    const char *json = NULL;
    struct swap_gen_params base = {.layers = 24, .iterations = 12, .seed = 1};
    unsigned warmup = 3;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--json"))
            json = argv[++i];
        else if (!strcmp(argv[i], "--layers"))
            base.layers = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters"))
            base.iterations = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed"))
            base.seed = strtoull(argv[++i], NULL, 0);
        else
            usage();
    }
    struct row rows[NV * NO];
    size_t nr = 0;
    double worst = 0;
    printf("%-7s %7s %9s %9s %9s %9s %9s %8s %8s %6s\n", "trace", "oversub", "budgetMiB", "lb(h2d)",
           "min", "history", "lru", "hist/min", "lru/min", "period");
    printf("%-7s %7s %9s %9s %9s %9s %9s %8s %8s %6s\n", "", "", "", "MiB/it", "MiB/it", "MiB/it",
           "MiB/it", "", "", "");
    for (size_t vi = 0; vi < NV; vi++) {
        struct swap_gen_params g = base;
        g.variant = variants[vi];
        struct swap_trace t = {0};
        int rc = swap_gen(&g, &t);
        if (rc) {
            fprintf(stderr, "swap-bench: generate %s: %s\n", swap_gen_variant_name(g.variant),
                    strerror(-rc));
            return 1;
        }
        uint64_t max_launch;
        uint64_t ws = swap_trace_working_set(&t, warmup, &max_launch);
        for (size_t oi = 0; oi < NO; oi++) {
            struct row *r = &rows[nr++];
            *r = (struct row){.v = g.variant, .oversub = oversubs[oi], .ws = ws};
            r->budget = (uint64_t)((double)ws / oversubs[oi]);
            if (r->budget < max_launch)
                fprintf(stderr, "swap-bench: %s at %.2fx: a launch needs %.0f MiB > budget\n",
                        swap_gen_variant_name(g.variant), oversubs[oi], mib((double)max_launch));
            struct swap_params prm = {.budget_bytes = r->budget};
            prm.kind = SWAP_POLICY_MIN;
            rc = swap_replay(&t, &prm, warmup, &r->min);
            prm.kind = SWAP_POLICY_HISTORY;
            if (!rc) rc = swap_replay(&t, &prm, warmup, &r->hist);
            prm.kind = SWAP_POLICY_LRU;
            if (!rc) rc = swap_replay(&t, &prm, warmup, &r->lru);
            if (!rc) rc = swap_replay_lower_bound(&t, r->budget, warmup, &r->lb);
            if (rc) {
                fprintf(stderr, "swap-bench: replay: %s\n", strerror(-rc));
                return 1;
            }
            r->period = learned_period(&t, r->budget);
            double hm = ratio(r->hist.steady_bytes, r->min.steady_bytes);
            if (g.variant != SWAP_GEN_INFER && hm > worst) worst = hm;
            printf("%-7s %6.2fx %9.0f %9.0f %9.0f %9.0f %9.0f %8.3f %8.3f %6llu\n",
                   swap_gen_variant_name(g.variant), r->oversub, mib((double)r->budget),
                   mib(r->lb.steady_bytes), mib(r->min.steady_bytes), mib(r->hist.steady_bytes),
                   mib(r->lru.steady_bytes), hm, ratio(r->lru.steady_bytes, r->min.steady_bytes),
                   (unsigned long long)r->period);
        }
        swap_trace_fini(&t);
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "swap-bench: %s: %s\n", json, strerror(errno));
            return 1;
        }
        fprintf(f, "{\n  \"unit\": \"bytes per steady-state iteration\",\n");
        fprintf(f, "  \"layers\": %u, \"iterations\": %u, \"warmup\": %u, \"seed\": %llu,\n",
                base.layers, base.iterations, warmup, (unsigned long long)base.seed);
        fprintf(f, "  \"history_min_worst\": %.4f,\n  \"rows\": [\n", worst);
        for (size_t i = 0; i < nr; i++) {
            const struct row *r = &rows[i];
            fprintf(f,
                    "    {\"trace\": \"%s\", \"oversub\": %.2f, \"working_set\": %llu, "
                    "\"budget\": %llu, \"lb_h2d\": %.0f, \"min\": %.0f, \"history\": %.0f, "
                    "\"lru\": %.0f, \"history_min\": %.4f, \"lru_min\": %.4f, "
                    "\"period\": %llu}%s\n",
                    swap_gen_variant_name(r->v), r->oversub, (unsigned long long)r->ws,
                    (unsigned long long)r->budget, r->lb.steady_bytes, r->min.steady_bytes,
                    r->hist.steady_bytes, r->lru.steady_bytes,
                    ratio(r->hist.steady_bytes, r->min.steady_bytes),
                    ratio(r->lru.steady_bytes, r->min.steady_bytes), (unsigned long long)r->period,
                    i + 1 < nr ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
        if (fclose(f)) {
            fprintf(stderr, "swap-bench: %s: write failed\n", json);
            return 1;
        }
    }
    printf("swap history/min: %.3f\n", worst);
    return 0;
}
