/* Tests of swap_history: period learning, next-use prediction, phase
 * correction, forgetting, and bounded memory. */
#include <criterion/criterion.h>
#include <errno.h>

#include "swap.h"

static struct swap_history *make(uint32_t events, uint32_t launches)
{
    struct swap_history *h = NULL;
    cr_assert_eq(swap_history_create(events, launches, &h), 0);
    return h;
}

/* One launch reading the given blocks. */
static void launch(struct swap_history *h, const uint64_t *blocks, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(swap_history_record(h, blocks[i], 64, i == n - 1), 0);
    swap_history_next_launch(h);
}

/* Loop: launch k of a period touches block k (and block 100 every launch). */
static void loop_launch(struct swap_history *h, int k)
{
    uint64_t b[2] = {100, (uint64_t)k};
    launch(h, b, 2);
}

Test(swap_history, learns_a_loop_period_after_two_periods)
{
    const int P = 7;
    struct swap_history *h = make(0, 0);
    for (int k = 0; k < P; k++)
        loop_launch(h, k);
    cr_expect_eq(swap_history_period(h), 0, "one period is not a pattern yet");
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < P; k++)
            loop_launch(h, k);
    cr_expect_eq(swap_history_period(h), (uint64_t)P);
    swap_history_destroy(h);
}

Test(swap_history, predicts_the_next_use_one_period_after_the_last)
{
    const int P = 10;
    struct swap_history *h = make(0, 0);
    for (int r = 0; r < 5; r++)
        for (int k = 0; k < P; k++)
            loop_launch(h, k);
    cr_assert_eq(swap_history_period(h), (uint64_t)P);
    uint64_t now = swap_history_now(h); /* the start of a period: launch 0 is next */
    for (int k = 0; k < P; k++)
        cr_expect_eq(swap_history_predict(h, (uint64_t)k), now + (uint64_t)k, "block %d", k);
    cr_expect_eq(swap_history_predict(h, 100), now, "used by every launch: this one");
    cr_expect_eq(swap_history_predict(h, 555), SWAP_NEVER, "never seen");
    /* half-way through the next period */
    for (int k = 0; k < P / 2; k++)
        loop_launch(h, k);
    now = swap_history_now(h);
    cr_expect_eq(swap_history_predict(h, 0), now + P / 2, "next period's first launch");
    cr_expect_eq(swap_history_predict(h, P / 2), now);
    swap_history_forget(h, 3);
    cr_expect_eq(swap_history_predict(h, 3), SWAP_NEVER, "forgotten when freed");
    swap_history_destroy(h);
}

/* A block the pattern stopped using is predicted never to come back. */
Test(swap_history, a_block_outside_the_pattern_is_never_needed)
{
    struct swap_history *h = make(0, 0);
    uint64_t stray = 999;
    launch(h, &stray, 1);
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < 5; k++)
            loop_launch(h, k);
    cr_assert_eq(swap_history_period(h), 5);
    cr_expect_eq(swap_history_predict(h, stray), SWAP_NEVER);
    swap_history_destroy(h);
}

/* Gradient accumulation: a micro-batch of m launches repeats k times, then
 * an optimizer section; the period is the whole step, not the micro-batch. */
Test(swap_history, learns_the_full_step_under_accumulation)
{
    const int m = 8, k = 4, opt = 3, steps = 6;
    struct swap_history *h = make(0, 0);
    for (int s = 0; s < steps; s++) {
        for (int j = 0; j < k; j++)
            for (int i = 0; i < m; i++)
                loop_launch(h, i);
        for (int i = 0; i < opt; i++)
            loop_launch(h, 50 + i);
    }
    cr_expect_eq(swap_history_period(h), (uint64_t)(k * m + opt));
    swap_history_destroy(h);
}

/* An extra kernel in one iteration shifts the rest of it by one launch: the
 * period is kept and predictions follow the shift. */
Test(swap_history, an_inserted_launch_shifts_predictions)
{
    const int P = 12;
    struct swap_history *h = make(0, 0);
    for (int r = 0; r < 5; r++)
        for (int k = 0; k < P; k++)
            loop_launch(h, k);
    for (int k = 0; k < 4; k++)
        loop_launch(h, k);
    uint64_t extra = 77;
    launch(h, &extra, 1);
    for (int k = 4; k < 8; k++)
        loop_launch(h, k);
    cr_expect_eq(swap_history_period(h), (uint64_t)P);
    uint64_t now = swap_history_now(h);
    /* block 8 comes next, block 10 two launches later, block 0 after the wrap */
    cr_expect_eq(swap_history_predict(h, 8), now);
    cr_expect_eq(swap_history_predict(h, 10), now + 2);
    cr_expect_eq(swap_history_predict(h, 0), now + (P - 8));
    swap_history_destroy(h);
}

Test(swap_history, no_period_in_noise)
{
    struct swap_history *h = make(0, 0);
    uint64_t x = 12345;
    for (int i = 0; i < 2000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t b = (x >> 33) % 1000;
        launch(h, &b, 1);
    }
    cr_expect_eq(swap_history_period(h), 0);
    swap_history_destroy(h);
}

/* Memory is bounded by the ring capacities and the live blocks, however
 * long the run; a period longer than the rings hold is not learned. */
Test(swap_history, memory_stays_bounded_under_a_long_trace)
{
    struct swap_history *h = make(4096, 1024);
    size_t base = swap_history_memory(h);
    for (int r = 0; r < 2000; r++)
        for (int k = 0; k < 50; k++)
            loop_launch(h, k);
    size_t after_100k = swap_history_memory(h);
    for (int r = 0; r < 20000; r++)
        for (int k = 0; k < 50; k++)
            loop_launch(h, k);
    size_t after_1m = swap_history_memory(h);
    cr_expect_eq(after_1m, after_100k, "%zu vs %zu", after_1m, after_100k);
    cr_expect_lt(after_1m - base, 51 * 256, "one small record per live block");
    cr_expect_eq(swap_history_period(h), 50);
    swap_history_destroy(h);

    h = make(4096, 64); /* 64 launches of history: a period of 50 needs 50 + 12 + 4 */
    for (int r = 0; r < 20; r++)
        for (int k = 0; k < 50; k++)
            loop_launch(h, k);
    cr_expect_eq(swap_history_period(h), 0);
    swap_history_destroy(h);
}

/* A loop whose launch k writes a fresh block k that is freed and
 * reallocated every period at the same id and size (a caching allocator). */
Test(swap_history, a_freed_block_reused_at_the_same_size_keeps_its_past)
{
    struct swap_history *h = make(4096, 1024);
    const int P = 20;
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < P; k++) {
            /* block 1000 + k lives from launch k to launch P - 1 - k/2 */
            uint64_t b[2] = {100, 1000 + (uint64_t)k};
            launch(h, b, 2);
            if (k >= P / 2) swap_history_retire(h, 1000 + (uint64_t)(P - 1 - k));
        }
    cr_assert_eq(swap_history_period(h), (uint64_t)P);
    uint64_t now = swap_history_now(h);
    /* block 1000 was retired mid-period; reused at its size it continues */
    cr_assert_eq(swap_history_record(h, 1000, 64, true), 0);
    cr_expect_eq(swap_history_predict(h, 1000), now, "used again in this launch");
    cr_expect_eq(swap_history_predict(h, 1005), now + 5, "a live block: one period on");
    /* another size at a retired id is another tensor: no past */
    swap_history_retire(h, 1001);
    cr_assert_eq(swap_history_record(h, 1001, 128, true), 0);
    cr_expect_eq(swap_history_predict(h, 1001), now + P, "no past: only its own access now");
    bool dies, no_past;
    cr_expect_eq(swap_history_predict_use(h, 1001, false, &dies, &no_past), now + P);
    cr_expect(no_past, "what the period predicts for 1001 is its access now, one period on");
    swap_history_predict_use(h, 1005, false, &dies, &no_past);
    cr_expect_not(no_past, "1005 was used a period ago");
    swap_history_predict_use(h, 1000, false, &dies, &no_past);
    cr_expect_not(no_past, "1000 continues the past of its id");
    swap_history_destroy(h);
}

Test(swap_history, retired_records_stay_bounded)
{
    struct swap_history *h = make(1024, 256);
    size_t base = swap_history_memory(h);
    for (uint64_t i = 0; i < 200000; i++) {
        uint64_t b = 1u << 20 | i; /* a fresh id every launch, never reused */
        launch(h, &b, 1);
        swap_history_retire(h, b);
    }
    size_t after = swap_history_memory(h);
    cr_expect_lt(after - base, (size_t)4096 * 256, "bounded by the ring, not the run");
    swap_history_destroy(h);
}

Test(swap_history, create_rejects_null)
{
    cr_expect_eq(swap_history_create(0, 0, NULL), -EINVAL);
}

/* A run of launches that recur at the same distance (their anchor) is a
 * repetition before the period can be verified: a long loop is learned a
 * few launches into its second pass, not a quarter of a period in. */
Test(swap_history, a_run_of_recurring_launches_gives_the_period_early)
{
    const int P = 200;
    struct swap_history *h = make(0, 0);
    for (int k = 0; k < P; k++)
        loop_launch(h, k);
    cr_expect_eq(swap_history_period(h), 0, "one pass is not a pattern yet");
    for (int k = 0; k < 10; k++)
        loop_launch(h, k);
    cr_expect_eq(swap_history_period(h), (uint64_t)P, "10 launches into the second pass");
    uint64_t now = swap_history_now(h);
    cr_expect_eq(swap_history_predict(h, 50), now + 40);
    swap_history_destroy(h);
}

/* Launch k reads weight k; runs of 4 launches that each also write a block
 * new in it alternate with runs of 4 that do not, and in the second pass
 * the allocator put the new blocks elsewhere (other ids, the same sizes),
 * as a caching allocator does in a first iteration (dcgan-train): by block,
 * half the launches do not recur one pass back, and the anchor's count (net
 * of odd launches) never grows. Those launches recur loosely (their new
 * blocks taken by size) and count neither way, so the period is learned in
 * the second pass. */
Test(swap_history, blocks_placed_elsewhere_do_not_hide_the_period)
{
    const int P = 200;
    struct swap_history *h = make(0, 0);
    for (uint64_t k = 0; k < (uint64_t)P; k++) /* the weights, set up before the loop */
        cr_assert_eq(swap_history_record(h, k, 64, true), 0);
    swap_history_next_launch(h);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < (pass ? 64 : P); k++) {
            uint64_t b[2] = {(uint64_t)k, (uint64_t)(pass ? 2000 : 1000) + (uint64_t)k};
            launch(h, b, (k / 4) % 2 ? 2 : 1);
        }
    }
    cr_expect_eq(swap_history_period(h), (uint64_t)P, "64 launches into the second pass");
    swap_history_destroy(h);
}

/* An iteration: 30 launches of their own, an inner loop of 10 to 16 steps
 * of 3 launches (the count drawn per iteration, as a decoder runs for as
 * many steps as the batch's target length), 30 more. One iteration's
 * launches land up to 18 launches from where the last one's did, further
 * than the period check's +-4, but a trusted anchor follows them; several
 * iterations back, lengths may add up alike (4 and 5 iterations here):
 * the period stays one iteration long instead of jumping to such a
 * multiple. */
Test(swap_history, a_varying_inner_loop_keeps_a_period_of_one_iteration)
{
    static const int steps[] = {10, 14, 12, 10, 16, 12, 14, 10, 12, 16, 10, 14, 12, 16, 10, 12};
    struct swap_history *h = make(0, 0);
    for (int it = 0; it < 16; it++) {
        for (uint64_t k = 0; k < 30; k++)
            launch(h, &k, 1);
        for (int s = 0; s < steps[it]; s++)
            for (uint64_t k = 0; k < 3; k++) {
                uint64_t b[2] = {100 + k, 200 + (uint64_t)s};
                launch(h, b, 2);
            }
        for (uint64_t k = 300; k < 330; k++)
            launch(h, &k, 1);
        if (it >= 2)
            cr_expect_leq(swap_history_period(h), 30 + 3 * 16 + 30, "after iteration %d: %llu",
                          it + 1, (unsigned long long)swap_history_period(h));
    }
    swap_history_destroy(h);
}

/* The first iteration is shorter than the next ones (an optimizer creates
 * its state in step 0): predictions follow the new length as soon as a run
 * of launches recurs at it, not one period later. */
Test(swap_history, predictions_follow_an_iteration_that_grew)
{
    struct swap_history *h = make(0, 0);
    for (int k = 0; k < 100; k++)
        loop_launch(h, k);
    for (int k = 0; k < 100; k++)
        loop_launch(h, k);
    for (int k = 200; k < 220; k++) /* 20 launches iteration 0 did not have */
        loop_launch(h, k);
    for (int k = 0; k < 9; k++) /* the period learned is still 100 */
        loop_launch(h, k);
    uint64_t now = swap_history_now(h);
    cr_expect_eq(swap_history_predict(h, 60), now + 51, "one iteration of 120 back");
    cr_expect_eq(swap_history_predict(h, 210), now + 101);
    swap_history_destroy(h);
}

/* A block freed one period ago before its next access is predicted to die
 * (and when), while swap_history_predict still reports its next access at
 * that id (the reallocation). */
Test(swap_history, a_block_freed_before_its_next_use_is_predicted_to_die)
{
    const int P = 20;
    struct swap_history *h = make(0, 0);
    for (int r = 0; r < 5; r++)
        for (int k = 0; k < P; k++) {
            uint64_t b[2] = {100, (uint64_t)k};
            if (k == 2 || k == 8) b[1] = 500; /* 500 is written at 2, read at 8 */
            launch(h, b, 2);
            if (k == 10) swap_history_retire(h, 500); /* freed after launch 10 */
        }
    cr_assert_eq(swap_history_period(h), (uint64_t)P);
    uint64_t now = swap_history_now(h); /* launch 0 of a period */
    uint64_t b0[2] = {100, 0}, b1[2] = {100, 1};
    launch(h, b0, 2);
    launch(h, b1, 2);
    uint64_t b2[2] = {100, 500};
    launch(h, b2, 2); /* reallocated at its id and size: its past continues */
    bool dies = true, no_past = true;
    cr_expect_eq(swap_history_predict_use(h, 500, false, &dies, &no_past), now + 8);
    cr_expect_not(no_past);
    cr_expect_not(dies, "read at 8 first");
    for (int k = 3; k <= 8; k++) {
        uint64_t b[2] = {100, k == 8 ? 500 : (uint64_t)k};
        launch(h, b, 2);
    }
    cr_expect_eq(swap_history_predict_use(h, 500, false, &dies, &no_past), now + 11);
    cr_expect(dies, "freed before launch 11, before its next use");
    cr_expect_eq(swap_history_predict(h, 500), now + P + 2, "next access: the reallocation");
    swap_history_destroy(h);
}

/* One iteration: 20 launches of blocks 0..19, an inner loop of 5 launches
 * (blocks 50..54) run `inner` times, then 20 launches of blocks 60..79. */
static void varying_iteration(struct swap_history *h, int inner)
{
    for (int k = 0; k < 20; k++)
        loop_launch(h, k);
    for (int r = 0; r < inner; r++)
        for (int k = 50; k < 55; k++)
            loop_launch(h, k);
    for (int k = 60; k < 80; k++)
        loop_launch(h, k);
}

/* An inner loop that runs more often than one iteration ago: the launch
 * after it is looked up again in the history (re-anchored) and the
 * predictions follow from there at once, not after an anchor's 8 launches. */
Test(swap_history, a_longer_inner_loop_is_re_anchored_at_once)
{
    struct swap_history *h = make(0, 0);
    varying_iteration(h, 4);
    varying_iteration(h, 4);
    varying_iteration(h, 4);
    cr_assert_eq(swap_history_period(h), 60);
    for (int k = 0; k < 20; k++)
        loop_launch(h, k);
    for (int r = 0; r < 10; r++) /* 30 launches more than one iteration ago */
        for (int k = 50; k < 55; k++)
            loop_launch(h, k);
    loop_launch(h, 60);
    loop_launch(h, 61);
    uint64_t now = swap_history_now(h);
    cr_expect_eq(swap_history_predict(h, 69), now + 7, "block 69 comes 7 launches on");
    cr_expect_eq(swap_history_miss_run(h), 0);
    swap_history_destroy(h);
}

/* Launches that recur nowhere (a new pattern) are counted while the period
 * is kept: the policy follows lru once FALLBACK_RUN (64) are counted
 * (swap_policy.c), long before a period of 100 is verified again. */
Test(swap_history, launches_the_prediction_does_not_match_are_counted)
{
    struct swap_history *h = make(0, 0);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 100; k++)
            loop_launch(h, k);
    cr_assert_eq(swap_history_period(h), 100);
    uint64_t most = 0;
    for (int i = 0; i < 100 && swap_history_period(h) == 100; i++) {
        uint64_t b = 1000 + (uint64_t)i;
        launch(h, &b, 1);
        uint64_t m = swap_history_miss_run(h);
        most = m > most ? m : most;
    }
    cr_expect_geq(most, 64, "a run of %llu", (unsigned long long)most);
    for (int k = 0; k < 100; k++)
        loop_launch(h, k);
    cr_expect_eq(swap_history_miss_run(h), 0);
    swap_history_destroy(h);
}
