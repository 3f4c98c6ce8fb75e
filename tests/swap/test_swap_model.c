/* Tests of the timing model (tests/swap/offline/swap_model.c): its arithmetic on
 * a three-launch trace worked out by hand, under rates chosen so that
 * every figure is exact (1 GB/s everywhere, remaps of 100 us, launches of
 * 10 us recorded), and the interpolation of the measured curves. */
#include <criterion/criterion.h>
#include <errno.h>
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

static const uint64_t ten_us[] = {10000, 10000, 10000, 10000}; /* at most 4 launches */

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

Test(swap_model, built_moves_on_the_host_thread_before_the_launch)
{
    struct swap_model_result r;
    run(SWAP_MODEL_BUILT, &r);
    /* launch 0: the host maps block 1 (a remap, nothing copied), submits
     * (+1), the launch runs (+10). */
    double l0 = 100 + 1 + 10;
    /* launch 1: the host waits for launch 0 (the stream's event) and for
     * block 1's write-back, remaps it, maps block 2, submits. */
    double h1 = l0 + MOVE + 100 + 100 + 1, l1 = h1 + 10;
    /* launch 2: the host waits for launch 1 and block 2's write-back,
     * remaps it, remaps block 1 and queues its copy, which only the launch
     * waits for: the host submits before the copy ends. */
    double fetch1 = l1 + MOVE + 100 + 100, l2 = fetch1 + MOVE + 10;
    cr_expect(fabs(r.it[0].seconds - l1 * US) < 1e-12, "%.9f vs %.9f", r.it[0].seconds, l1 * US);
    cr_expect(fabs(r.seconds - l2 * US) < 1e-12, "%.9f vs %.9f", r.seconds, l2 * US);
    swap_model_result_fini(&r);
}

/* The tiny trace under SWAP_MODEL_BUILT, async evictions or not. */
static void built_tiny(bool async, struct swap_model_result *r)
{
    struct swap_trace t = {0};
    tiny(&t);
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = SWAP_MODEL_BUILT,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 3,
                                  .built_async = async};
    cr_assert_eq(swap_model_run(&t, &p, r), 0);
    swap_trace_fini(&t);
    cr_assert_eq(r->iterations, 2);
    cr_expect_eq(r->h2d_bytes, MIB);
    cr_expect_eq(r->d2h_bytes, 2 * MIB);
}

Test(swap_model, built_host_time_splits_into_eviction_waits_and_remaps)
{
    struct swap_model_result r;
    built_tiny(false, &r);
    /* as in built_moves_on_the_host_thread_before_the_launch: the host
     * waits for launch 0 and block 1's write-back (from 101 to 111 + MOVE),
     * later for launch 1 and block 2's write-back (from 312 + MOVE to
     * 322 + 2 MOVE); it remaps five times: two first touches, two
     * evictions, one fetch */
    double wait = 10 + MOVE + 10 + MOVE;
    cr_expect(fabs(r.host_evict_wait_seconds - wait * US) < 1e-12, "%.9f",
              r.host_evict_wait_seconds);
    cr_expect(fabs(r.host_remap_seconds - 500 * US) < 1e-12, "%.9f", r.host_remap_seconds);
    swap_model_result_fini(&r);
}

Test(swap_model, async_evictions_order_the_write_back_on_the_device_and_remap_on_a_mover)
{
    struct swap_model_result r;
    built_tiny(true, &r);
    /* launch 0 as in built: map block 1 (100), submit (+1), run (+10). */
    double l0 = 100 + 1 + 10;
    /* launch 1: block 1's write-back waits on the device for launch 0
     * (111) and ends at 111 + MOVE, when the mover starts remapping its
     * range (+100); the host does not wait: it maps block 2 on block 1's
     * chunks at once (101 + 100), submits (202); launch 2's first touch
     * waits for the write-back. */
    double wb1 = l0 + MOVE, l1 = wb1 + 10, remap1 = wb1 + 100;
    cr_expect(fabs(r.it[0].seconds - l1 * US) < 1e-12, "%.9f vs %.9f", r.it[0].seconds, l1 * US);
    /* launch 2: block 2's write-back waits for launch 1 (the stream's
     * event) and ends MOVE later; fetching block 1 the host waits for the
     * mover's remap of its range (remap1), maps it (+100) and queues its
     * copy, which waits for block 2's write-back: the chunks it lands in */
    double wb2 = l1 + MOVE, fetch1 = wb2 + MOVE, l2 = fetch1 + 10;
    cr_expect(remap1 + 100 < wb2, "the host's remap ends before the copy may start");
    cr_expect(fabs(r.seconds - l2 * US) < 1e-12, "%.9f vs %.9f", r.seconds, l2 * US);
    /* the host's only wait: block 1's remap, from 202 */
    cr_expect(fabs(r.host_evict_wait_seconds - (remap1 - 202) * US) < 1e-12, "%.9f",
              r.host_evict_wait_seconds);
    cr_expect(fabs(r.host_remap_seconds - 300 * US) < 1e-12, "%.9f", r.host_remap_seconds);
    swap_model_result_fini(&r);
}

/* The tiny trace under async evictions with remaps of 2000 us, the host's
 * and the mover's side by side or one at a time; its first iteration in
 * *first, the whole run returned. */
static double async_slow_remaps(bool serial, double *first)
{
    struct swap_trace t = {0};
    tiny(&t);
    struct swap_model_rates rates;
    unit_rates(&rates);
    rates.remap_us[0] = rates.remap_us[1] = 2000;
    struct swap_model_params p = {.engine = SWAP_MODEL_BUILT,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 3,
                                  .built_async = true,
                                  .built_remaps_serial = serial};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    *first = r.it[0].seconds;
    double s = r.seconds;
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
    return s;
}

Test(swap_model, async_remaps_one_at_a_time_are_served_in_the_order_asked)
{
    /* launch 0: the host maps block 1 (2000), submits, it runs to 2011.
     * launch 1: block 1's write-back ends at 2011 + MOVE, when the mover
     * asks to remap its range; the host asked before (2001) to map block 2
     * and does so either way: launch 1 ends at 4001 + 1 + 10. */
    double wb1 = 2011 + MOVE, l1 = 4012, first;
    /* side by side: block 1's remap ends at wb1 + 2000; launch 2 fetches
     * block 1, so the host waits for it, maps it (2000) and the copy
     * follows (block 2's write-back, from 4012, is done by then) */
    double l2 = wb1 + 2000 + 2000 + MOVE + 10;
    double s = async_slow_remaps(false, &first);
    cr_expect(fabs(first - l1 * US) < 1e-12, "%.9f", first);
    cr_expect(fabs(s - l2 * US) < 1e-12, "%.9f vs %.9f", s, l2 * US);
    /* one at a time: block 1's remap waits for the host's map of block 2
     * (to 4001); block 2's remap asked at 4012 + MOVE, before the host
     * asks to map block 1 (6001), so it goes first */
    l2 = 4001 + 2000 + 2000 + 2000 + MOVE + 10;
    s = async_slow_remaps(true, &first);
    cr_expect(fabs(first - l1 * US) < 1e-12, "%.9f", first);
    cr_expect(fabs(s - l2 * US) < 1e-12, "%.9f vs %.9f", s, l2 * US);
}

/* Blocks 1, 2, 3 of 4 MiB (two 2 MiB chunks each) under a budget of 8 MiB,
 * lru, each written by one launch; launch 1 runs 1 ms: launch 2's
 * eviction of block 1 waits for it (the shim's one event per stream)
 * unless it waits only for block 1's own launch. */
static double built_three(enum swap_model_wait wait)
{
    struct swap_trace t = {0};
    for (uint64_t b = 1; b <= 3; b++) {
        push(&t, 'A', b, 4 * MIB, true);
        push(&t, 'L', 0, 0, false);
    }
    struct swap_model_rates rates;
    unit_rates(&rates);
    rates.map_chunk_us = 20;
    static const uint64_t ns[] = {10000, 1000000, 10000};
    struct swap_model_params p = {.engine = SWAP_MODEL_BUILT,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = 8 * MIB,
                                  .rates = &rates,
                                  .launch_ns = ns,
                                  .n_launch_ns = 3,
                                  .built_wait = wait};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    cr_expect_eq(r.h2d_bytes, 0);
    cr_expect_eq(r.d2h_bytes, 4 * MIB);
    double s = r.seconds;
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
    return s;
}

Test(swap_model, built_evictions_wait_for_the_stream_and_map_each_chunk)
{
    /* a first touch maps two chunks: the remap (100) and one more map (20) */
    double h0 = 120 + 1, h1 = h0 + 120 + 1, l1 = h1 + 1000;
    /* launch 2: block 1's write-back starts when launch 1 ends */
    double l2 = l1 + 4 * MOVE + 100 + 120 + 1 + 10;
    double s = built_three(SWAP_MODEL_WAIT_QUEUE);
    cr_expect(fabs(s - l2 * US) < 1e-12, "%.9f vs %.9f", s, l2 * US);
    /* waiting for block 1's launch only: the copy starts when the host gets
     * there, and the launch follows the host, not launch 1 */
    l2 = h1 + 4 * MOVE + 100 + 120 + 1 + 10;
    s = built_three(SWAP_MODEL_WAIT_LAST_USE);
    cr_expect(fabs(s - l2 * US) < 1e-12, "%.9f vs %.9f", s, l2 * US);
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

/* ---- the engine's variants (item 3 and 4 of issue 45) -------------------- */

static void access_ev(struct swap_trace *t, uint64_t block, uint64_t bytes, bool w)
{
    push(t, 'A', block, bytes, w);
}

static void free_ev(struct swap_trace *t, uint64_t block)
{
    push(t, 'F', block, 0, false);
}

/* The events of t, one letter, block, bytes and r/w each, for comparison. */
static void expect_events(const struct swap_trace *t, const struct swap_event *want, size_t n)
{
    cr_assert_eq(t->n, n, "%zu events, want %zu", t->n, n);
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(t->ev[i].kind, want[i].kind, "event %zu: kind %c", i, t->ev[i].kind);
        cr_expect_eq(t->ev[i].block, want[i].block, "event %zu: block %#llx", i,
                     (unsigned long long)t->ev[i].block);
        cr_expect_eq(t->ev[i].bytes, want[i].bytes, "event %zu: bytes %llu", i,
                     (unsigned long long)t->ev[i].bytes);
        cr_expect_eq(t->ev[i].is_write, want[i].is_write, "event %zu: write", i);
    }
}

#define EV_A(b, n, w)                                                                              \
    {                                                                                              \
        .kind = 'A', .block = (b), .bytes = (n), .is_write = (w)                                   \
    }
#define EV_L                                                                                       \
    {                                                                                              \
        .kind = 'L'                                                                                \
    }
#define EV_F(b)                                                                                    \
    {                                                                                              \
        .kind = 'F', .block = (b)                                                                  \
    }

Test(swap_model, pack_fills_units_in_allocation_order_and_frees_them_when_closed_and_empty)
{
    struct swap_trace t = {0}, out = {0};
    access_ev(&t, 1, MIB, true);
    access_ev(&t, 2, MIB, false);
    push(&t, 'L', 0, 0, false);
    access_ev(&t, 3, MIB, false); /* does not fit in unit 1: opens unit 2 */
    push(&t, 'L', 0, 0, false);
    free_ev(&t, 1);
    free_ev(&t, 2);                  /* unit 1 closed and empty: freed */
    access_ev(&t, 4, 3 * MIB, true); /* >= U: a unit of its own, 4 MiB */
    push(&t, 'L', 0, 0, false);
    free_ev(&t, 3); /* unit 2 is still open: kept */
    cr_assert_eq(swap_model_pack(&t, 2 * MIB, &out), 0);
    const struct swap_event want[] = {
        EV_A(1, 2 * MIB, true), EV_L, EV_A(2, 2 * MIB, false), EV_L, EV_F(1),
        EV_A(3, 4 * MIB, true), EV_L};
    expect_events(&out, want, sizeof(want) / sizeof(want[0]));
    swap_trace_fini(&t);
    swap_trace_fini(&out);
}

/* PyTorch's rules (swap_model.h): 100 KiB from the small pool (a 2 MiB
 * segment); 3 MiB from the large pool (a 20 MiB segment, split: 17 MiB
 * left); 12 MiB + 1 into that cached 17 MiB piece (best fit, split: the
 * 5 MiB - 512 left is over 1 MiB); after 100 KiB is freed, 50 KiB reuses
 * its segment; 30 MiB gets a segment of its own. */
static void pytorch_trace(struct swap_trace *t)
{
    access_ev(t, 1, 100 * 1024, true);
    access_ev(t, 2, 3 * MIB, true);
    access_ev(t, 3, 12 * MIB + 1, true);
    push(t, 'L', 0, 0, false);
    free_ev(t, 1);
    access_ev(t, 4, 50 * 1024, false);
    access_ev(t, 5, 30 * MIB, true);
    push(t, 'L', 0, 0, false);
}

Test(swap_model, segments_follow_the_caching_allocator)
{
    struct swap_trace t = {0}, out = {0};
    pytorch_trace(&t);
    cr_assert_eq(swap_model_segments(&t, 0, &out), 0);
    const struct swap_event want[] = {EV_A(1, 2 * MIB, true),  EV_A(2, 20 * MIB, true), EV_L,
                                      EV_A(1, 2 * MIB, false), EV_A(3, 30 * MIB, true), EV_L};
    expect_events(&out, want, sizeof(want) / sizeof(want[0]));
    swap_trace_fini(&out);
    /* in 2 MiB chunks: block 2 lies in chunks 0-1 of segment 2, block 3
     * (from 3 MiB to 15 MiB + 1) in chunks 1-7; segment 3's 15 chunks */
    cr_assert_eq(swap_model_segments(&t, 2 * MIB, &out), 0);
    size_t a0 = 0, a1 = 0, i = 0;
    for (; out.ev[i].kind != 'L'; i++)
        a0++;
    for (i++; out.ev[i].kind != 'L'; i++)
        a1++;
    cr_expect_eq(a0, 1 + 8);
    cr_expect_eq(a1, 1 + 15);
    cr_expect_eq(out.ev[0].block, 1ULL << 24);
    cr_expect_eq(out.ev[1].block, 2ULL << 24);
    cr_expect_eq(out.ev[8].block, 2ULL << 24 | 7);
    cr_expect_eq(out.ev[8].bytes, 2 * MIB);
    swap_trace_fini(&out);
    swap_trace_fini(&t);
}

Test(swap_model, small_blocks_on_the_managed_path_move_as_the_managed_engine_moves_them)
{
    struct swap_model_result mg, sm;
    run(SWAP_MODEL_MANAGED, &mg);
    struct swap_trace t = {0};
    tiny(&t);
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = SWAP_MODEL_VMM,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 3,
                                  .unit = SWAP_MODEL_UNIT_SMALL_MANAGED};
    cr_assert_eq(swap_model_run(&t, &p, &sm), 0);
    /* every block is 1 MiB, under 2 MiB: no copy engine, no remap */
    cr_expect(fabs(sm.seconds - mg.seconds) < 1e-12, "%.9f vs %.9f", sm.seconds, mg.seconds);
    cr_expect(fabs(sm.it[0].seconds - mg.it[0].seconds) < 1e-12);
    cr_expect_eq(sm.h2d_bytes, mg.h2d_bytes);
    cr_expect_eq(sm.d2h_bytes, mg.d2h_bytes);
    swap_model_result_fini(&mg);
    swap_model_result_fini(&sm);
    swap_trace_fini(&t);
}

/* Blocks 1 and 2 written in launch 0 under a budget of 2 MiB; launch 1
 * writes 3 and 4, so both are written back, one after the other on the
 * device->host engine, and each remapped (2000 us): 3 and 4 are first
 * touched in the room their remaps free. */
static double two_evictions(unsigned movers)
{
    struct swap_trace t = {0};
    access_ev(&t, 1, MIB, true);
    access_ev(&t, 2, MIB, true);
    push(&t, 'L', 0, 0, false);
    access_ev(&t, 3, MIB, true);
    access_ev(&t, 4, MIB, true);
    push(&t, 'L', 0, 0, false);
    struct swap_model_rates rates;
    unit_rates(&rates);
    rates.remap_us[0] = rates.remap_us[1] = 2000;
    struct swap_model_params p = {.engine = SWAP_MODEL_VMM,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = 2 * MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 2,
                                  .movers = movers};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    double s = r.seconds;
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
    return s;
}

Test(swap_model, remaps_run_side_by_side_on_several_movers)
{
    /* launch 0 ends at 11; write-backs end at 11 + MOVE and 11 + 2 MOVE.
     * One mover: the second remap waits for the first. Two: it starts
     * when its copy ends. */
    double one = 11 + MOVE + 2000 + 2000 + 10, two = 11 + 2 * MOVE + 2000 + 10;
    cr_expect(fabs(two_evictions(1) - one * US) < 1e-12, "%.9f", two_evictions(1));
    cr_expect(fabs(two_evictions(2) - two * US) < 1e-12, "%.9f", two_evictions(2));
}

Test(swap_model, headroom_lets_a_block_in_before_its_victim_has_left)
{
    struct swap_trace t = {0};
    tiny(&t);
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = SWAP_MODEL_VMM,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = 2 * MIB,
                                  .headroom = MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 3};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    /* the policy keeps 1 MiB, as in the tiny run, so it moves the same;
     * but 2 MiB fit on the device: launch 1 starts when launch 0 ends,
     * while block 1 is still being written back (11 + MOVE + 100 without
     * headroom) */
    cr_expect_eq(r.h2d_bytes, MIB);
    cr_expect_eq(r.d2h_bytes, 2 * MIB);
    cr_expect(fabs(r.it[0].seconds - 21 * US) < 1e-12, "%.9f", r.it[0].seconds);
    /* launch 2: block 2's write-back waits for the engine (block 1's ends
     * at 11 + MOVE) and block 1's fetch for its remap (+100); from then the
     * fetch shares the link with the write-back (0.5 GB/s) until 11 + 2 MOVE,
     * then runs alone; its remap, then the launch */
    double fetch_end = 11 + 2 * MOVE + MOVE - 0.5 * (MOVE - 100);
    double l2 = fetch_end + 100 + 10;
    cr_expect(fabs(r.seconds - l2 * US) < 1e-9, "%.9f vs %.9f", r.seconds, l2 * US);
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
}

Test(swap_model, a_rewritten_trace_keeps_the_original_launch_durations)
{
    struct swap_trace t = {0};
    pytorch_trace(&t);
    struct swap_model_params none = {.engine = SWAP_MODEL_NONE};
    struct swap_model_params seg = {
        .engine = SWAP_MODEL_VMM, .kind = SWAP_POLICY_LRU, .budget = 1024 * MIB, .segments = true};
    struct swap_model_result a, b;
    cr_assert_eq(swap_model_run(&t, &none, &a), 0);
    cr_assert_eq(swap_model_run(&t, &seg, &b), 0);
    /* nothing moves under 1 GiB: the same two launches, estimated from the
     * tensors' bytes, not the segments' (to the nanosecond) */
    cr_expect_eq(b.estimated_launches, 2);
    cr_expect_eq(b.h2d_bytes + b.d2h_bytes, 0);
    cr_expect(fabs(a.seconds - b.seconds) < 1e-9, "%.9f vs %.9f", a.seconds, b.seconds);
    swap_model_result_fini(&a);
    swap_model_result_fini(&b);
    swap_trace_fini(&t);
}

Test(swap_model, a_freed_block_gives_its_room_back_when_its_last_launch_ends)
{
    /* budget 1 MiB: block 1 written by launch 0 and freed; block 2, first
     * touched by launch 1, takes its room once launch 0 has ended */
    struct swap_trace t = {0};
    access_ev(&t, 1, MIB, true);
    push(&t, 'L', 0, 0, false);
    free_ev(&t, 1);
    access_ev(&t, 2, MIB, true);
    push(&t, 'L', 0, 0, false);
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = SWAP_MODEL_VMM,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 2};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    cr_expect_eq(r.room_overruns, 0);
    cr_expect_eq(r.h2d_bytes + r.d2h_bytes, 0);
    cr_expect(fabs(r.seconds - 21 * US) < 1e-12, "%.9f", r.seconds);
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
}

/* ---- learned extents (swap_model_segments_extent) ------------------------ */

#define EV_U(b, n, w)                                                                              \
    {                                                                                              \
        .kind = SWAP_MODEL_EV_UNSEEN, .block = (b), .bytes = (n), .is_write = (w)                  \
    }
/* chunk c of the trace's first segment */
#define C(c) (1ULL << 24 | (c))
#define C4 (4 * MIB)

/* One 20 MiB segment in 4 MiB chunks (0-4) holding tensor 1 (3 MiB at 0),
 * 2 (3 MiB at 3 MiB) and 3 (5 MiB at 6 MiB), then 4 (5 MiB) in the 6 MiB
 * that 1 and 2 leave at 0 when freed. */
static void three_tensors(struct swap_trace *t)
{
    access_ev(t, 1, 3 * MIB, true); /* L0: no other start known yet */
    push(t, 'L', 0, 0, false);
    access_ev(t, 2, 3 * MIB, false); /* L1: none above 3 MiB */
    push(t, 'L', 0, 0, false);
    access_ev(t, 3, 5 * MIB, false); /* L2: 3 runs to the end; 1 stops at 3 MiB */
    access_ev(t, 1, 3 * MIB, false);
    push(t, 'L', 0, 0, false);
    access_ev(t, 2, 3 * MIB, true); /* L3: 2 stops at 6 MiB, in chunk 1 */
    push(t, 'L', 0, 0, false);
    free_ev(t, 1);
    free_ev(t, 2);
    access_ev(t, 4, 5 * MIB, true); /* L4: 2's start, stale, cuts 4 at 3 MiB */
    push(t, 'L', 0, 0, false);
    cr_assert_eq(
        swap_trace_push(
            t, (struct swap_event){.kind = 'A', .block = 4, .bytes = 5 * MIB, .is_copy = true}),
        0); /* L5: a copy carries its size */
    push(t, 'L', 0, 0, false);
}

Test(swap_model, learned_extents_run_to_the_next_start_seen_in_the_segment)
{
    struct swap_trace t = {0}, out = {0};
    three_tensors(&t);
    cr_assert_eq(swap_model_segments_extent(&t, C4, SWAP_MODEL_EXTENT_LEARNED, &out), 0);
    const struct swap_event want[] = {
        /* L0: 1 to the segment's end */
        EV_A(C(0), C4, true), EV_A(C(1), C4, true), EV_A(C(2), C4, true), EV_A(C(3), C4, true),
        EV_A(C(4), C4, true), EV_L,
        /* L1: 2 from chunk 0 (3 MiB) to the end */
        EV_A(C(0), C4, false), EV_A(C(1), C4, false), EV_A(C(2), C4, false), EV_A(C(3), C4, false),
        EV_A(C(4), C4, false), EV_L,
        /* L2: 3 from chunk 1 to the end, 1 in chunk 0 alone; every later
         * chunk is covered by 3 */
        EV_A(C(1), C4, false), EV_A(C(2), C4, false), EV_A(C(3), C4, false), EV_A(C(4), C4, false),
        EV_A(C(0), C4, false), EV_L,
        /* L3: 2 up to 6 MiB - 1, its true extent; the rest of the segment
         * unseen, none of its bytes there */
        EV_A(C(0), C4, true), EV_A(C(1), C4, true), EV_U(C(2), 0, true), EV_U(C(3), 0, true),
        EV_U(C(4), 0, true), EV_L,
        /* L4: 4 (0 to 5 MiB) cut at 2's old start: its last MiB, in chunk
         * 1, unseen */
        EV_A(C(0), C4, true), EV_U(C(1), MIB, true), EV_U(C(2), 0, true), EV_U(C(3), 0, true),
        EV_U(C(4), 0, true), EV_L,
        /* L5: the copy's true extent */
        EV_A(C(0), C4, false), EV_A(C(1), C4, false), EV_L};
    expect_events(&out, want, sizeof(want) / sizeof(want[0]));
    swap_trace_fini(&out);
    /* true extents: the tensors' own chunks, nothing unseen */
    cr_assert_eq(swap_model_segments_extent(&t, C4, SWAP_MODEL_EXTENT_TRUE, &out), 0);
    const struct swap_event truth[] = {EV_A(C(0), C4, true),
                                       EV_L,
                                       EV_A(C(0), C4, false),
                                       EV_A(C(1), C4, false),
                                       EV_L,
                                       EV_A(C(1), C4, false),
                                       EV_A(C(2), C4, false),
                                       EV_A(C(0), C4, false),
                                       EV_L,
                                       EV_A(C(0), C4, true),
                                       EV_A(C(1), C4, true),
                                       EV_L,
                                       EV_A(C(0), C4, true),
                                       EV_A(C(1), C4, true),
                                       EV_L,
                                       EV_A(C(0), C4, false),
                                       EV_A(C(1), C4, false),
                                       EV_L};
    expect_events(&out, truth, sizeof(truth) / sizeof(truth[0]));
    swap_trace_fini(&out);
    swap_trace_fini(&t);
}

/* The model's side of an unseen chunk: resident, a write makes its next
 * eviction a write-back; on the host, its bytes are read over the link. */
static void unseen_trace(struct swap_trace *t, bool unseen)
{
    access_ev(t, 1, MIB, true); /* L0: first touch */
    push(t, 'L', 0, 0, false);
    access_ev(t, 2, MIB, true); /* L1: evicts 1, dirty */
    push(t, 'L', 0, 0, false);
    access_ev(t, 1, MIB, false); /* L2: evicts 2, fetches 1: clean */
    if (unseen) push(t, SWAP_MODEL_EV_UNSEEN, 1, 0, true);
    push(t, 'L', 0, 0, false);
    access_ev(t, 2, MIB, false); /* L3: evicts 1, clean unless written unseen */
    if (unseen) push(t, SWAP_MODEL_EV_UNSEEN, 1, MIB / 2, false);
    push(t, 'L', 0, 0, false);
}

Test(swap_model, an_unseen_chunk_is_read_over_the_link_or_dirtied_where_it_lies)
{
    struct swap_model_rates rates;
    unit_rates(&rates);
    rates.host_read_gbps = 1;
    struct swap_model_params p = {.engine = SWAP_MODEL_VMM,
                                  .kind = SWAP_POLICY_LRU,
                                  .budget = MIB,
                                  .rates = &rates,
                                  .launch_ns = ten_us,
                                  .n_launch_ns = 4};
    struct swap_model_result with, without;
    struct swap_trace a = {0}, b = {0};
    unseen_trace(&a, true);
    unseen_trace(&b, false);
    cr_assert_eq(swap_model_run(&a, &p, &with), 0);
    cr_assert_eq(swap_model_run(&b, &p, &without), 0);
    /* L2's unseen write to the resident 1: L3's eviction copies it back */
    cr_expect_eq(with.d2h_bytes, without.d2h_bytes + MIB);
    cr_expect_eq(with.h2d_bytes, without.h2d_bytes);
    /* L3 reads half of the evicted 1 over the link, nothing else */
    cr_expect_eq(with.link_read_bytes, MIB / 2);
    cr_expect_eq(with.it[0].link_read_bytes, MIB / 2);
    cr_expect_eq(without.link_read_bytes, 0);
    cr_expect_eq(with.overflows, 0);
    swap_model_result_fini(&with);
    swap_model_result_fini(&without);
    swap_trace_fini(&a);
    swap_trace_fini(&b);
    /* a launch that reads half a MiB of a chunk never fetched: 1 us to
     * submit, 10 us on the device and 524.288 us over the link at 1 GB/s */
    struct swap_trace c = {0};
    access_ev(&c, 1, MIB, true);
    push(&c, SWAP_MODEL_EV_UNSEEN, 2, MIB / 2, false);
    push(&c, 'L', 0, 0, false);
    cr_assert_eq(swap_model_run(&c, &p, &with), 0);
    cr_expect_eq(with.link_read_bytes, MIB / 2);
    cr_expect_eq(with.h2d_bytes + with.d2h_bytes, 0);
    cr_expect(fabs(with.seconds - (11 + MOVE / 2) * US) < 1e-12, "%.9f", with.seconds);
    swap_model_result_fini(&with);
    swap_trace_fini(&c);
}

/* Three blocks of 2 MiB each read by two launches in a row (1 1 2 2 3 3),
 * under room for two, 150 rounds (an iteration each), launches of 3 ms: a
 * fetch (a 2 ms copy at 1 GB/s, and a remap) fits beside one launch.
 * Returns the steady-state mean of rounds 100..148; the run's bytes into
 * *h2d. */
static double ahead_loop(bool ahead, enum swap_model_wait wait, double margin, uint64_t *h2d)
{
    struct swap_trace t = {0};
    static const uint64_t order[] = {1, 1, 2, 2, 3, 3};
    for (int r = 0; r < 150; r++) {
        for (size_t i = 0; i < 6; i++) {
            push(&t, 'A', order[i], 2 * MIB, false);
            push(&t, 'L', 0, 0, false);
        }
        push(&t, 'I', 0, 0, false);
    }
    static uint64_t ns[1800];
    for (size_t i = 0; i < 1800; i++)
        ns[i] = 3000000;
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = SWAP_MODEL_BUILT,
                                  .kind = SWAP_POLICY_HISTORY,
                                  .budget = 4 * MIB,
                                  .rates = &rates,
                                  .launch_ns = ns,
                                  .n_launch_ns = 1800,
                                  .built_wait = wait,
                                  .built_async = true,
                                  .built_ahead = ahead,
                                  .ahead_margin = margin};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    double m = 0;
    for (size_t i = 100; i < 149; i++)
        m += r.it[i].seconds;
    *h2d = r.h2d_bytes;
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
    return m / 49;
}

/* Fetched ahead by the mover, a block's copy runs beside the launch before
 * its use instead of between the two: with the policy's cost gate opened
 * wide the loop runs at the launches' speed (but moves about twice the
 * bytes: fetched earlier, blocks are evicted that on demand would have
 * stayed); the default gate keeps the bytes within 2 % and gains little
 * here. With the shim's one event per stream (WAIT_QUEUE) the same. */
Test(swap_model, built_ahead_copies_beside_the_launches)
{
    uint64_t b_async, b_ahead, b_q, b_qa, b_gated;
    double async = ahead_loop(false, SWAP_MODEL_WAIT_LAST_USE, 0, &b_async);
    double ahead = ahead_loop(true, SWAP_MODEL_WAIT_LAST_USE, 1e9, &b_ahead);
    double gated = ahead_loop(true, SWAP_MODEL_WAIT_LAST_USE, 0, &b_gated);
    double q = ahead_loop(false, SWAP_MODEL_WAIT_QUEUE, 0, &b_q);
    double qa = ahead_loop(true, SWAP_MODEL_WAIT_QUEUE, 1e9, &b_qa);
    cr_log_info("ms per round, last-use events: async evictions %.3f, with fetch ahead %.3f, "
                "gated %.3f; stream events: %.3f, %.3f; MiB in %llu, %llu, %llu, %llu, %llu",
                async * 1e3, ahead * 1e3, gated * 1e3, q * 1e3, qa * 1e3,
                (unsigned long long)(b_async / MIB), (unsigned long long)(b_ahead / MIB),
                (unsigned long long)(b_gated / MIB), (unsigned long long)(b_q / MIB),
                (unsigned long long)(b_qa / MIB));
    /* on demand: 6 launches of 3 ms, and each fetch's copy (2 ms; 1.5 a
     * round) between two of them */
    cr_expect_gt(async, 18e-3 + 2e-3, "%.6f", async);
    cr_expect_lt(ahead, async - 2e-3, "at least one fetch of a round hidden: %.6f vs %.6f", ahead,
                 async);
    cr_expect_geq(ahead, 18e-3, "never faster than the launches alone");
    cr_expect_lt(gated, async + 1e-4);
    cr_expect_leq(b_gated, b_async + b_async / 50);
    cr_expect_gt(b_ahead, b_async);
    cr_expect_lt(qa, q - 2e-3, "%.6f vs %.6f", qa, q);
}

Test(swap_model, built_ahead_needs_async_evictions_and_history)
{
    struct swap_trace t = {0};
    tiny(&t);
    struct swap_model_params p = {.engine = SWAP_MODEL_BUILT,
                                  .kind = SWAP_POLICY_HISTORY,
                                  .budget = MIB,
                                  .built_ahead = true};
    struct swap_model_result r;
    cr_expect_eq(swap_model_run(&t, &p, &r), -EINVAL, "without async evictions");
    p.built_async = true;
    p.kind = SWAP_POLICY_LRU;
    cr_expect_eq(swap_model_run(&t, &p, &r), -EINVAL, "lru predicts nothing");
    p.kind = SWAP_POLICY_HISTORY;
    cr_expect_eq(swap_model_run(&t, &p, &r), 0);
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
}

/* Async evictions, per-block events (WAIT_LAST_USE), the offline policy
 * (MIN), budget 2 MiB: L0 reads block 1 for 100 ms, L1 writes block 2,
 * L2 reads new blocks 3 and 4 (both evicted: 2 first, never used again,
 * then 1), L3 reads 1 again. 2's remap waits for its write-back (after L1,
 * 1 MiB), 1's only for L0's end; the one mover serves 1's first when it
 * serves ready work first (params.mover_fifo: after 2's). The host's wait
 * for 1's remap at L3 in *wait; the run's seconds returned. */
static double mover_order_run(bool fifo, double *wait)
{
    struct swap_trace t = {0};
    push(&t, 'A', 1, MIB, false);
    push(&t, 'L', 0, 0, false);
    push(&t, 'A', 2, MIB, true);
    push(&t, 'L', 0, 0, false);
    push(&t, 'A', 3, MIB, false);
    push(&t, 'A', 4, MIB, false);
    push(&t, 'L', 0, 0, false);
    push(&t, 'A', 1, MIB, false);
    push(&t, 'L', 0, 0, false);
    static const uint64_t ns[] = {100000000, 10000, 10000, 10000};
    struct swap_model_rates rates;
    unit_rates(&rates);
    struct swap_model_params p = {.engine = SWAP_MODEL_BUILT,
                                  .kind = SWAP_POLICY_MIN,
                                  .budget = 2 * MIB,
                                  .rates = &rates,
                                  .launch_ns = ns,
                                  .n_launch_ns = 4,
                                  .built_wait = SWAP_MODEL_WAIT_LAST_USE,
                                  .built_async = true,
                                  .mover_fifo = fifo};
    struct swap_model_result r;
    cr_assert_eq(swap_model_run(&t, &p, &r), 0);
    double s = r.seconds;
    *wait = r.host_evict_wait_seconds;
    swap_model_result_fini(&r);
    swap_trace_fini(&t);
    return s;
}

Test(swap_model, the_mover_serves_ready_work_first)
{
    double wait_fifo, wait_ready;
    double fifo = mover_order_run(true, &wait_fifo), ready = mover_order_run(false, &wait_ready);
    /* L0: 1's first touch (100), submitted at 101, ends at 100101; L1:
     * 2's first touch (+100), submitted at 202, ends at 100111; L2: 3's
     * and 4's first touches by the host (+200), submitted at 403 */
    double l0 = 100101, l1 = 100111, h3 = 403;
    /* ready first: 1's remap in the mover's idle stretch before 2's
     * (which starts after 2's write-back, at l1 + MOVE) */
    cr_expect(fabs(wait_ready - (l0 + 100 - h3) * US) < 1e-12, "%.9f", wait_ready);
    /* in the order decided: 2's remap, then 1's */
    cr_expect(fabs(wait_fifo - (l1 + MOVE + 200 - h3) * US) < 1e-12, "%.9f", wait_fifo);
    cr_expect_lt(ready, fifo, "%.9f vs %.9f", ready, fifo);
}
