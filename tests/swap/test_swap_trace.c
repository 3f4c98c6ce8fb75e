/* Tests of the trace format, the generator, and the replay: round trips,
 * strict parsing, determinism, and the history/min property on fixed
 * generated traces (a property of the policy on a fixed input, not timing). */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "swap_gen.h"
#include "swap_offline.h"

static void push_copy(struct swap_trace *t, char kind, uint64_t block, uint64_t bytes, bool w,
                      bool copy)
{
    cr_assert_eq(swap_trace_push(t, (struct swap_event){.kind = (uint8_t)kind,
                                                        .block = block,
                                                        .bytes = bytes,
                                                        .is_write = w,
                                                        .is_copy = copy}),
                 0);
}

static void push(struct swap_trace *t, char kind, uint64_t block, uint64_t bytes, bool w)
{
    push_copy(t, kind, block, bytes, w, false);
}

static bool same(const struct swap_trace *a, const struct swap_trace *b)
{
    if (a->n != b->n) return false;
    for (size_t i = 0; i < a->n; i++) {
        const struct swap_event *x = &a->ev[i], *y = &b->ev[i];
        if (x->kind != y->kind || x->block != y->block || x->bytes != y->bytes ||
            x->is_write != y->is_write || x->is_copy != y->is_copy)
            return false;
    }
    return true;
}

Test(swap_trace, writer_and_reader_round_trip)
{
    struct swap_trace t = {0}, u = {0};
    push(&t, 'A', 0x7f0012340000ULL, 4096, false);
    push(&t, 'A', 1, UINT64_MAX, true);
    push(&t, 'L', 0, 0, false);
    push_copy(&t, 'A', 0x7f0012340000ULL, 4096, true, true); /* a copy or set */
    push_copy(&t, 'A', 2, 8192, false, true);
    push(&t, 'L', 0, 0, false);
    push(&t, 'F', 0x7f0012340000ULL, 0, false);
    push(&t, 'I', 0, 0, false);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(swap_trace_write(f, &t), 0);
    fclose(f);
    cr_expect(strstr(buf, "A 0x7f0012340000 4096 r\n") != NULL, "%s", buf);
    cr_expect(strstr(buf, "A 0x7f0012340000 4096 w c\n") != NULL, "%s", buf);
    f = fmemopen(buf, len, "r");
    cr_assert_eq(swap_trace_read(f, &u, NULL), 0);
    fclose(f);
    cr_expect(same(&t, &u));
    free(buf);
    swap_trace_fini(&t);
    swap_trace_fini(&u);
}

Test(swap_trace, reader_is_strict)
{
    const char *bad[] = {
        "A 12 0 r\n",    "A 12 10 x\n",       "A 12 10\n",   "Q\n",          "L x\n",
        "F\n",           "A 12 10 r extra\n", "A -1 10 r\n", "A 12 10 rc\n", "A 12 10 r c x\n",
        "A 12 10 r d\n", "A 12 10 r \n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "# c\n\nA 1 2 w\n%s", bad[i]);
        FILE *f = fmemopen(text, strlen(text), "r");
        struct swap_trace t = {0};
        size_t line = 0;
        cr_expect_eq(swap_trace_read(f, &t, &line), -EINVAL, "%s", bad[i]);
        cr_expect_eq(line, 4, "%s", bad[i]);
        fclose(f);
        swap_trace_fini(&t);
    }
}

Test(swap_trace, generator_is_deterministic)
{
    for (int v = SWAP_GEN_TRAIN; v <= SWAP_GEN_JITTER; v++) {
        struct swap_gen_params g = {
            .variant = (enum swap_gen_variant)v, .layers = 6, .iterations = 5, .seed = 42};
        struct swap_trace a = {0}, b = {0}, c = {0};
        cr_assert_eq(swap_gen(&g, &a), 0);
        cr_assert_eq(swap_gen(&g, &b), 0);
        g.seed = 43;
        cr_assert_eq(swap_gen(&g, &c), 0);
        cr_expect(same(&a, &b), "%s", swap_gen_variant_name(g.variant));
        cr_expect_not(same(&a, &c), "%s: the seed matters", swap_gen_variant_name(g.variant));
        swap_trace_fini(&a);
        swap_trace_fini(&b);
        swap_trace_fini(&c);
    }
}

Test(swap_trace, generated_traces_survive_the_text_format)
{
    struct swap_gen_params g = {.variant = SWAP_GEN_ACCUM, .layers = 4, .iterations = 3};
    struct swap_trace a = {0}, b = {0};
    cr_assert_eq(swap_gen(&g, &a), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(swap_trace_write(f, &a), 0);
    fclose(f);
    f = fmemopen(buf, len, "r");
    cr_assert_eq(swap_trace_read(f, &b, NULL), 0);
    fclose(f);
    cr_expect(same(&a, &b));
    free(buf);
    swap_trace_fini(&a);
    swap_trace_fini(&b);
}

/* The bench's property at small scale: on fixed training traces history
 * stays within 10% of MIN, LRU does not, and MIN's fetches are never below
 * the fractional lower bound. */
Test(swap_trace, history_is_within_ten_percent_of_min_on_training_traces, .timeout = 60)
{
    const enum swap_gen_variant vs[] = {SWAP_GEN_TRAIN, SWAP_GEN_ACCUM, SWAP_GEN_JITTER};
    const double oversub[] = {1.25, 1.5, 2.0};
    for (size_t v = 0; v < 3; v++) {
        struct swap_gen_params g = {.variant = vs[v], .layers = 12, .iterations = 10, .seed = 7};
        struct swap_trace t = {0};
        cr_assert_eq(swap_gen(&g, &t), 0);
        uint64_t ws = swap_trace_working_set(&t, 3, NULL);
        for (size_t o = 0; o < 3; o++) {
            uint64_t budget = (uint64_t)((double)ws / oversub[o]);
            struct swap_replay_result lb, min, hist, lru;
            struct swap_params prm = {.kind = SWAP_POLICY_MIN, .budget_bytes = budget};
            cr_assert_eq(swap_replay(&t, &prm, 3, &min), 0);
            prm.kind = SWAP_POLICY_HISTORY;
            cr_assert_eq(swap_replay(&t, &prm, 3, &hist), 0);
            prm.kind = SWAP_POLICY_LRU;
            cr_assert_eq(swap_replay(&t, &prm, 3, &lru), 0);
            cr_assert_eq(swap_replay_lower_bound(&t, budget, 3, &lb), 0);
            cr_assert_gt(min.steady_bytes, 0);
            double hm = hist.steady_bytes / min.steady_bytes;
            cr_expect_leq(hm, 1.10, "%s %.2fx: history/min %.3f", swap_gen_variant_name(vs[v]),
                          oversub[o], hm);
            cr_expect_gt(lru.steady_bytes / min.steady_bytes, 1.2, "%s %.2fx: lru/min",
                         swap_gen_variant_name(vs[v]), oversub[o]);
            cr_expect_leq(lb.steady_h2d, min.steady_h2d);
            cr_expect_leq(lb.steady_h2d, hist.steady_h2d);
            cr_expect_eq(min.total.overflows + hist.total.overflows + lru.total.overflows, 0);
        }
        swap_trace_fini(&t);
    }
}

Test(swap_trace, working_set_and_largest_launch)
{
    struct swap_trace t = {0};
    push(&t, 'A', 1, 10, false);
    push(&t, 'A', 2, 20, true);
    push(&t, 'L', 0, 0, false);
    push(&t, 'A', 1, 10, false);
    push(&t, 'L', 0, 0, false);
    push(&t, 'I', 0, 0, false);
    push(&t, 'A', 3, 5, false);
    push(&t, 'L', 0, 0, false);
    push(&t, 'I', 0, 0, false);
    uint64_t ml;
    cr_expect_eq(swap_trace_working_set(&t, 0, &ml), 30);
    cr_expect_eq(ml, 30);
    cr_expect_eq(swap_trace_working_set(&t, 1, NULL), 5);
    swap_trace_fini(&t);
}

/* A loop of `launches` launches, launch k reading block k of 1 MiB, for
 * `iters` iterations (an I line after each); from iteration `renamed_from`
 * on, block 0 is block 100 (an allocator that put it elsewhere). */
static void loop_trace(struct swap_trace *t, int launches, int iters, int renamed_from)
{
    for (int i = 0; i < iters; i++) {
        for (int k = 0; k < launches; k++) {
            uint64_t b = k == 0 && i >= renamed_from ? 100 : (uint64_t)k;
            push(t, 'A', b, 1 << 20, false);
            push(t, 'L', 0, 0, false);
        }
        push(t, 'I', 0, 0, false);
    }
}

/* swap_replay_past: the previous iteration as the future. Where the
 * iterations repeat exactly it is MIN itself but for the last iteration
 * (MIN sees the end coming); a block at an id the previous iteration did
 * not use is predicted never used again, evicted first and fetched back. */
Test(swap_trace, the_previous_iteration_as_the_future)
{
    struct swap_params prm = {.kind = SWAP_POLICY_MIN, .budget_bytes = 6u << 20};
    struct swap_replay_result min, past;
    struct swap_trace t = {0};
    loop_trace(&t, 8, 5, 99);
    cr_assert_eq(swap_replay(&t, &prm, 0, &min), 0);
    cr_assert_eq(swap_replay_past(&t, &prm, &past), 0);
    cr_assert_eq(past.iterations, 5);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(past.iter_bytes[i], min.iter_bytes[i], "iteration %d", i + 1);
    swap_trace_fini(&t);

    struct swap_trace r = {0};
    loop_trace(&r, 8, 5, 1);
    cr_assert_eq(swap_replay(&r, &prm, 0, &min), 0);
    cr_assert_eq(swap_replay_past(&r, &prm, &past), 0);
    cr_expect_eq(past.iter_bytes[0], min.iter_bytes[0], "the first iteration gets the truth");
    cr_expect_gt(past.iter_bytes[1] + past.iter_bytes[2], min.iter_bytes[1] + min.iter_bytes[2],
                 "block 100 has no past in the second iteration");
    for (int i = 3; i < 4; i++)
        cr_expect_eq(past.iter_bytes[i], min.iter_bytes[i], "iteration %d", i + 1);
    prm.kind = SWAP_POLICY_LRU;
    cr_expect_eq(swap_replay_past(&r, &prm, &past), -EINVAL);
    swap_trace_fini(&r);
}
