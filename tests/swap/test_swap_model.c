/* Tests of the timing model (tests/swap/offline/swap_model.c): its arithmetic on
 * a three-launch trace worked out by hand, under rates chosen so that
 * every figure is exact (1 GB/s everywhere, remaps of 100 us, launches of
 * 10 us recorded), and the interpolation of the measured curves. */
#include <criterion/criterion.h>
#include <math.h>

#include "swap_model.h"

#define MIB (1024ULL * 1024ULL)
#define US 1e-6
/* 1 MiB at 1 GB/s, in microseconds */
#define MOVE 1048.576

static void push(struct swap_trace *t, char kind, uint64_t block, uint64_t bytes, bool w)
{
    cr_assert_eq(swap_trace_push(t, (struct swap_event){.kind = (uint8_t)kind,
                                                        .block = block,
                                                        .bytes = bytes,
                                                        .is_write = w}),
                 0);
}

static void flat(struct swap_model_curve *c, double gbps)
{
    *c = (struct swap_model_curve){.n = 1, .size = {MIB}, .gbps = {gbps}};
}

static void unit_rates(struct swap_model_rates *r)
{
    swap_model_default_rates(r);
    flat(&r->pinned_d2h, 1);
    flat(&r->pinned_h2d, 1);
    flat(&r->pinned_both, 0.5);
    flat(&r->managed_d2h, 1);
    flat(&r->managed_h2d, 1);
    r->remap_us[0] = r->remap_us[1] = 100;
    r->submit_us = 1;
}

/* Blocks 1 and 2 of 1 MiB under a budget of 1 MiB, lru: launch 0 writes 1
 * (first touch), launch 1 writes 2 (evict 1, dirty), an iteration ends,
 * launch 2 reads 1 (evict 2, dirty; fetch 1). */
static void tiny(struct swap_trace *t)
{
    push(t, 'A', 1, MIB, true);
    push(t, 'L', 0, 0, false);
    push(t, 'A', 2, MIB, true);
    push(t, 'L', 0, 0, false);
    push(t, 'I', 0, 0, false);
    push(t, 'A', 1, MIB, false);
    push(t, 'L', 0, 0, false);
}

static const uint64_t ten_us[] = {10000, 10000, 10000};

static void run(enum swap_model_engine engine, struct swap_model_result *r)
{
    struct swap_trace t = {0};
    tiny(&t);
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = engine,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 3};
    cr_assert_eq(swap_model_run(&t, &p, r), 0);
    swap_trace_fini(&t);
    cr_assert_eq(r->iterations, 2);
    cr_expect_eq(r->launches, 3);
    cr_expect_eq(r->estimated_launches, 0);
    cr_expect_eq(r->h2d_bytes, MIB);
    cr_expect_eq(r->d2h_bytes, 2 * MIB);
}

Test(swap_model, managed_moves_one_after_the_other_on_the_launch_stream)
{
    struct swap_model_result r;
    run(SWAP_MODEL_MANAGED, &r);
    /* launch 0: submitted at 1 us, runs 10. launch 1: evict 1, then run.
     * launch 2: evict 2, fetch 1, run. */
    double l1 = 11 + MOVE + 10, l2 = l1 + 2 * MOVE + 10;
    cr_expect(fabs(r.seconds - l2 * US) < 1e-12, "%.9f", r.seconds);
    cr_expect(fabs(r.it[0].seconds - l1 * US) < 1e-12, "%.9f", r.it[0].seconds);
    cr_expect(fabs(r.it[1].seconds - (l2 - l1) * US) < 1e-12, "%.9f", r.it[1].seconds);
    cr_expect_eq(r.it[0].d2h_bytes, MIB);
    cr_expect_eq(r.it[1].h2d_bytes, MIB);
    cr_expect_eq(r.it[1].d2h_bytes, MIB);
    /* the link's share at the both-ways rate: 1 MiB at 0.5 GB/s */
    cr_expect(fabs(r.it[1].h2d_link_seconds - 2 * MOVE * US) < 1e-12);
    swap_model_result_fini(&r);
}

Test(swap_model, vmm_copies_wait_for_the_last_use_and_remaps_for_the_copies)
{
    struct swap_model_result r;
    run(SWAP_MODEL_VMM, &r);
    /* launch 1: block 1's write-back starts when launch 0 ends (11), its
     * remap follows (+100); block 2 is first touched in the room it frees,
     * so launch 1 starts then. */
    double evict1 = 11 + MOVE + 100, l1 = evict1 + 10;
    /* launch 2: block 2's write-back starts when launch 1 ends, remap;
     * block 1's fetch starts in the room freed, remap; then the launch. */
    double evict2 = l1 + MOVE + 100, fetch1 = evict2 + MOVE + 100, l2 = fetch1 + 10;
    cr_expect(fabs(r.it[0].seconds - l1 * US) < 1e-12, "%.9f", r.it[0].seconds);
    cr_expect(fabs(r.seconds - l2 * US) < 1e-12, "%.9f vs %.9f", r.seconds, l2 * US);
    swap_model_result_fini(&r);
}

Test(swap_model, the_unlimited_run_is_submissions_and_launches_and_the_bound_takes_the_largest)
{
    struct swap_trace t = {0};
    tiny(&t);
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = SWAP_MODEL_NONE, .rates = &rates};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    /* no durations: each launch touches 1 MiB, estimated at the floor */
    cr_expect_eq(r.estimated_launches, 3);
    double k = swap_model_launch_estimate(&rates, MIB, 0);
    cr_expect(fabs(k - 2 * US) < 1e-12, "1 MiB at 2.4 TB/s is under the 2 us floor: %.9f", k);
    cr_expect(fabs(r.seconds - (1 + 3 * 2) * US) < 1e-12, "%.9f", r.seconds);
    cr_expect_eq(r.h2d_bytes + r.d2h_bytes, 0);
    struct swap_model_iter unl = {.seconds = 3e-3},
                           off = {.h2d_link_seconds = 2e-3, .d2h_link_seconds = 5e-3};
    cr_expect_eq(swap_model_bound(&unl, &off), 5e-3);
    off.d2h_link_seconds = 0;
    cr_expect_eq(swap_model_bound(&unl, &off), 3e-3);
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
}

Test(swap_model, measured_curves_interpolate_in_log_size_and_clamp)
{
    struct swap_model_rates r;
    swap_model_default_rates(&r);
    /* pinned both-ways: 40.2 GB/s at 1 MiB, 43.3 at 2 MiB; 1.5 MiB is at
     * log2 0.585 of the way */
    double f = log2(1.5), gbps = 40.2 + f * (43.3 - 40.2);
    double want = 1.5 * MIB / (gbps * 1e9);
    cr_expect(fabs(swap_model_curve_seconds(&r.pinned_both, 3 * MIB / 2) - want) < 1e-12);
    /* below the first point: the first rate */
    cr_expect(fabs(swap_model_curve_seconds(&r.pinned_both, 64 * 1024) - 65536 / 26.3e9) < 1e-15);
    /* remaps: 145.5 us at 2 MiB and anything smaller, 1065.8 at 64 MiB */
    cr_expect(fabs(swap_model_remap_seconds(&r, 4096) - 145.5e-6) < 1e-12);
    cr_expect(fabs(swap_model_remap_seconds(&r, 64 * MIB) - 1065.8e-6) < 1e-12);
    double mid = 145.5 + (33.0 - 2.0) / 62.0 * (1065.8 - 145.5);
    cr_expect(fabs(swap_model_remap_seconds(&r, 33 * MIB) - mid * 1e-6) < 1e-12);
}
