/* Tests of swap_engine: the orchestration in core, over a fake table of
 * device operations that records every move (no CUDA, no simulator). */
#include <criterion/criterion.h>
#include <errno.h>

#include "swap_engine.h"

#define MB (1u << 20)

struct move_log {
    struct {
        uint64_t base;
        int device;
        uint64_t stream;
        unsigned flags;
    } m[4096];
    int n;
    int fail_next;       /* the next move(s) fail */
    unsigned fail_flags; /* moves with any of these flags fail */
};

static int fake_move(void *ctx, uint64_t base, uint64_t size, int device, uint64_t stream,
                     unsigned flags)
{
    struct move_log *l = ctx;
    (void)size;
    if (l->fail_next > 0) {
        l->fail_next--;
        return -EIO;
    }
    if (flags & l->fail_flags) return -EIO;
    if (l->n < 4096) l->m[l->n++] = (typeof(l->m[0])){base, device, stream, flags};
    return 0;
}

static struct swap_engine *make(struct move_log *l, enum swap_policy_kind kind, uint64_t budget)
{
    struct swap_ops ops = {.move = fake_move, .ctx = l};
    struct swap_engine *e = NULL;
    cr_assert_eq(swap_engine_create(kind, budget, &ops, &e), 0);
    return e;
}

/* One launch touching the blocks at bases (fetching them). */
static int launch(struct swap_engine *e, const uint64_t *bases, int n, uint64_t stream)
{
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        struct swap_block *b = swap_engine_find(e, bases[i]);
        cr_assert(b, "block %#llx", (unsigned long long)bases[i]);
        rc = swap_engine_access(e, b, true, false, stream);
    }
    swap_engine_end_launch(e);
    return rc;
}

Test(swap_engine, create_rejects_bad_arguments)
{
    struct swap_ops ops = {.move = fake_move};
    struct swap_engine *e;
    cr_expect_eq(swap_engine_create(SWAP_POLICY_LRU, 0, &ops, &e), -EINVAL);
    cr_expect_eq(swap_engine_create(SWAP_POLICY_LRU, MB, NULL, &e), -EINVAL);
    cr_expect_eq(swap_engine_create(SWAP_POLICY_MIN, MB, &ops, &e), -EINVAL, "min is replay only");
    struct move_log l = {0};
    e = make(&l, SWAP_POLICY_LRU, 4 * MB);
    cr_expect_eq(swap_engine_add(e, 0x1000, 0, 0, 4096), -EINVAL);
    cr_expect_eq(swap_engine_add(e, 0x1000, MB, -1, 4096), -EINVAL);
    cr_expect_eq(swap_engine_add(e, 0x100000, MB, 0, 4096), 0);
    cr_expect_eq(swap_engine_add(e, 0x100000 + 4096, MB, 0, 4096), -EEXIST);
    cr_expect_eq(swap_engine_remove(e, 0x5000, NULL), -ENOENT);
    swap_engine_destroy(e);
}

/* A loop over 6 blocks of 1 MiB under a 4 MiB budget: every access is
 * fetched to the device, victims go to the host first, and what the engine
 * has placed never exceeds the budget nor what the policy counts. */
Test(swap_engine, evicts_before_fetching_and_stays_under_the_budget)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_LRU, 4 * MB);
    uint64_t base[6];
    for (int i = 0; i < 6; i++) {
        base[i] = 0x10000000ull + (uint64_t)i * 2 * MB;
        cr_assert_eq(swap_engine_add(e, base[i], MB - 100, 0, 4096), 0, "charge rounds up");
    }
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 6; i++) {
            int before = l.n;
            cr_assert_eq(launch(e, &base[i], 1, 7), 0);
            cr_assert_gt(l.n, before, "the block was fetched");
            cr_expect_eq(l.m[l.n - 1].base, base[i], "the fetch comes last");
            cr_expect_eq(l.m[l.n - 1].device, 0);
            cr_expect_eq(l.m[l.n - 1].stream, 7, "on the launch's stream");
            for (int k = before; k < l.n - 1; k++)
                cr_expect_eq(l.m[k].device, -1, "victims go to the host");
            cr_assert_leq(swap_engine_placed_bytes(e, 0), 4 * MB);
            cr_assert_leq(swap_engine_placed_bytes(e, 0), swap_engine_resident_bytes(e, 0));
        }
    struct swap_counters pc;
    struct swap_engine_counts c;
    swap_engine_counters(e, &pc, &c);
    cr_expect_eq(c.created_bytes, 6ull * MB, "the first round creates the blocks");
    cr_expect_eq(c.to_device_bytes, 12ull * MB, "every later access of an lru loop is a fetch");
    cr_expect_eq(c.to_host_bytes, 14ull * MB);
    cr_expect_eq(c.to_device_bytes, pc.h2d_bytes, "the engine's fetches are the policy's");
    cr_expect_eq(pc.launches, 18);
    swap_engine_destroy(e);
}

Test(swap_engine, a_failed_move_leaves_the_block_where_it_was)
{
    struct move_log l = {.fail_next = 1};
    struct swap_engine *e = make(&l, SWAP_POLICY_HISTORY, 4 * MB);
    cr_assert_eq(swap_engine_add(e, 0x200000, MB, 0, 4096), 0);
    struct swap_block *b = swap_engine_find(e, 0x200000 + 12);
    cr_assert(b, "interior addresses find the block");
    cr_assert_eq(swap_engine_access(e, b, false, false, 0), 0);
    cr_expect(!b->on_device, "the move failed: not noted as placed");
    struct swap_engine_counts c;
    swap_engine_counters(e, NULL, &c);
    cr_expect_eq(c.move_failures, 1);
    swap_engine_end_launch(e);
    cr_assert_eq(swap_engine_access(e, b, false, false, 0), 0);
    cr_expect(b->on_device, "the next launch fetches it");
    swap_engine_destroy(e);
}

Test(swap_engine, a_launch_larger_than_the_budget_moves_nothing)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_LRU, 2 * MB);
    uint64_t base[3] = {0x1000000, 0x2000000, 0x3000000};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(swap_engine_add(e, base[i], MB, 0, 4096), 0);
    cr_expect_eq(launch(e, base, 3, 0), -ENOSPC);
    cr_expect_eq(l.n, 2, "the first two fit and were fetched; the third is demand-paged");
    struct swap_engine_counts c;
    swap_engine_counters(e, NULL, &c);
    cr_expect_eq(c.overflows, 1);
    cr_expect_leq(swap_engine_placed_bytes(e, 0), 2 * MB);
    swap_engine_destroy(e);
}

Test(swap_engine, devices_have_their_own_budget_and_removal_frees_it)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_LRU, 2 * MB);
    uint64_t a = 0x1000000, b = 0x2000000, c = 0x3000000;
    cr_assert_eq(swap_engine_add(e, a, 2 * MB, 0, 4096), 0);
    cr_assert_eq(swap_engine_add(e, b, 2 * MB, 1, 4096), 0);
    cr_assert_eq(launch(e, &a, 1, 0), 0);
    cr_assert_eq(launch(e, &b, 1, 0), 0);
    cr_expect_eq(l.n, 2, "no eviction: two devices, one block each");
    cr_expect_eq(swap_engine_resident_bytes(e, 0), 2 * MB);
    struct swap_block out;
    cr_assert_eq(swap_engine_remove(e, a, &out), 0);
    cr_expect_eq(out.device, 0);
    cr_expect_eq(swap_engine_resident_bytes(e, 0), 0, "the freed block left the budget");
    cr_assert_eq(swap_engine_add(e, c, 2 * MB, 0, 4096), 0);
    cr_assert_eq(launch(e, &c, 1, 0), 0);
    cr_expect_eq(l.n, 3, "fits without evicting");
    swap_engine_destroy(e);
}

/* One copy (or set) of the block at base, a "launch" of its own. */
static void copy(struct swap_engine *e, uint64_t base, bool is_write)
{
    struct swap_block *b = swap_engine_find(e, base);
    cr_assert(b, "block %#llx", (unsigned long long)base);
    cr_assert_eq(swap_engine_access(e, b, is_write, true, 0), 0);
    swap_engine_end_launch(e);
}

/* Copies work wherever the block is (swap_policy_copy): a new block is
 * created on the device while it fits, else on the host, before the copy;
 * a copy of an evicted block moves nothing and evicts nothing; a launch
 * then fetches it. The moves are the policy's: created bytes apart, the
 * bytes to the device are its fetches, and nothing is placed beyond what it
 * counts resident. */
Test(swap_engine, copies_create_new_blocks_where_they_fit_and_move_nothing_else)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_LRU, 2 * MB);
    uint64_t a = 0x1000000, b = 0x2000000, c = 0x3000000;
    for (uint64_t x = a; x <= c; x += 0x1000000)
        cr_assert_eq(swap_engine_add(e, x, MB, 0, 4096), 0);
    copy(e, a, true); /* fills: a and b fit, c does not */
    copy(e, b, true);
    copy(e, c, true);
    cr_assert_eq(l.n, 3);
    cr_expect(l.m[0].device == 0 && l.m[1].device == 0, "a and b are created on the device");
    cr_expect_eq(l.m[2].base, c);
    cr_expect_eq(l.m[2].device, -1, "c is created on the host: nothing was evicted for it");
    cr_expect_eq(swap_engine_resident_bytes(e, 0), 2 * MB);
    cr_assert_eq(launch(e, &c, 1, 0), 0); /* a kernel: evicts a, fetches c */
    cr_assert_eq(l.n, 5);
    cr_expect(l.m[3].base == a && l.m[3].device == -1);
    cr_expect(l.m[4].base == c && l.m[4].device == 0);
    copy(e, a, false); /* a read-back of an evicted block: no move, no eviction */
    copy(e, a, true);
    cr_expect_eq(l.n, 5, "copies of a block on the host move nothing");
    cr_expect_leq(swap_engine_placed_bytes(e, 0), swap_engine_resident_bytes(e, 0));
    struct swap_counters pc;
    struct swap_engine_counts own;
    swap_engine_counters(e, &pc, &own);
    cr_expect_eq(own.created_bytes, 3ull * MB, "a and b on the device, c on the host");
    cr_expect_eq(own.to_device_bytes, pc.h2d_bytes, "the engine's fetches are the policy's");
    cr_expect_eq(own.to_host_bytes, pc.d2h_bytes, "and its evictions (a was dirty)");
    cr_expect_eq(pc.faults, 1);
    swap_engine_destroy(e);
}

/* What a copying backing needs from each move (host.h's flags): a first
 * touch is NEW (nothing to copy), a fetch is not; an eviction is DIRTY
 * exactly when the policy writes the block back (it was written while
 * resident), a clean one (only read since its fetch) is not. */
Test(swap_engine, moves_say_whether_the_block_is_new_and_whether_it_is_dirty)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_LRU, 2 * MB);
    uint64_t a = 0x1000000, b = 0x2000000, c = 0x3000000;
    for (uint64_t x = a; x <= c; x += 0x1000000)
        cr_assert_eq(swap_engine_add(e, x, MB, 0, 4096), 0);
    cr_assert_eq(launch(e, &a, 1, 0), 0); /* a: first touch, written */
    cr_assert_eq(l.n, 1);
    cr_expect_eq(l.m[0].flags, HOST_MOVE_NEW, "a first touch copies nothing");
    struct swap_block *bb = swap_engine_find(e, b);
    cr_assert_eq(swap_engine_access(e, bb, false, false, 0), 0); /* b: first touch, read */
    swap_engine_end_launch(e);
    cr_assert_eq(launch(e, &c, 1, 0), 0); /* evicts a (LRU, dirty), places c */
    cr_assert_eq(l.n, 4);
    cr_expect(l.m[2].base == a && l.m[2].device == -1);
    cr_expect_eq(l.m[2].flags, HOST_MOVE_DIRTY, "a was written on the device: write it back");
    cr_expect_eq(l.m[3].flags, HOST_MOVE_NEW);
    cr_assert_eq(launch(e, &a, 1, 0), 0); /* evicts b (clean), fetches a */
    cr_assert_eq(l.n, 6);
    cr_expect(l.m[4].base == b && l.m[4].device == -1);
    cr_expect_eq(l.m[4].flags, 0, "b was only read: its host copy is current");
    cr_expect(l.m[5].base == a && l.m[5].device == 0);
    cr_expect_eq(l.m[5].flags, 0, "a fetch copies the host copy in");
    swap_engine_destroy(e);
}

/* ---- fetch ahead ---------------------------------------------------------- */

/* A loop over 6 blocks of 1 MiB under 3 MiB with history, fetching ahead
 * after every launch from round `from` on; checks every move on the way.
 * Returns how many blocks were fetched ahead. */
static int ahead_loop(struct swap_engine *e, struct move_log *l, const uint64_t *base, int rounds,
                      int from)
{
    int ahead = 0;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 6; i++) {
            struct swap_block *b = swap_engine_find(e, base[i]);
            bool was_ahead = b->ahead;
            int before = l->n;
            cr_assert_eq(launch(e, &base[i], 1, 7), 0);
            if (was_ahead) {
                cr_expect_eq(l->n, before, "a block fetched ahead is not fetched again");
                cr_expect(b->on_device);
            }
            cr_expect_not(b->ahead, "the launch used it");
            if (r < from) continue;
            before = l->n;
            int n = swap_engine_fetch_ahead(e, 9);
            cr_assert_geq(n, 0);
            ahead += n;
            int seen = 0;
            for (int k = before; k < l->n; k++) {
                if (l->m[k].flags & HOST_MOVE_AHEAD) {
                    seen++;
                    cr_expect_eq(l->m[k].device, 0);
                    cr_expect_eq(l->m[k].stream, 9);
                    cr_expect_eq(l->m[k].flags, HOST_MOVE_AHEAD, "a fetch: neither new nor dirty");
                    struct swap_block *f = swap_engine_find(e, l->m[k].base);
                    cr_expect(f->ahead && f->on_device);
                } else {
                    cr_expect_eq(l->m[k].device, -1, "victims go to the host first");
                    cr_expect_eq(seen, 0, "before the fetch they make room for");
                }
            }
            cr_expect_eq(seen, n);
            cr_assert_leq(swap_engine_placed_bytes(e, 0), swap_engine_resident_bytes(e, 0));
            cr_assert_leq(swap_engine_resident_bytes(e, 0), 3 * MB);
        }
    return ahead;
}

/* Once history has learned the loop, the block the next launch needs is
 * fetched ahead (HOST_MOVE_AHEAD, after its victims), and the launch that
 * uses it moves nothing; the bytes are the policy's. */
Test(swap_engine, fetches_ahead_the_blocks_the_next_launches_need)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_HISTORY, 3 * MB);
    uint64_t base[6];
    for (int i = 0; i < 6; i++) {
        base[i] = 0x10000000ull + (uint64_t)i * 2 * MB;
        cr_assert_eq(swap_engine_add(e, base[i], MB, 0, 4096), 0);
    }
    cr_expect_eq(swap_engine_horizon(e, 0), 0, "no policy yet");
    /* the real cache reaches the shadow it follows with a few extra moves
     * in the first rounds, which the gate waits out */
    int ahead = ahead_loop(e, &l, base, 120, 0);
    cr_expect_gt(ahead, 120, "fetched ahead once learned: %d", ahead);
    struct swap_counters pc;
    struct swap_engine_counts c;
    swap_engine_counters(e, &pc, &c);
    cr_expect_eq(c.ahead_bytes, (uint64_t)ahead * MB);
    cr_expect_eq(pc.prefetches, (uint64_t)ahead);
    cr_expect_eq(c.to_device_bytes, pc.h2d_bytes, "the engine's fetches are the policy's");
    cr_expect_eq(c.to_host_bytes, pc.d2h_bytes);
    /* no feedback from the host: the horizon only grew where a predicted
     * block was fetched on demand */
    cr_expect_geq(swap_engine_horizon(e, 0), SWAP_AHEAD_START);
    swap_engine_destroy(e);
}

/* The host's feedback moves the horizon: a launch that waited for a block
 * fetched ahead grows it, launches whose blocks arrived early shrink it
 * slowly; the access clears the block's note; feedback for a device with
 * no policy is ignored. */
Test(swap_engine, the_hosts_feedback_moves_the_horizon)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_HISTORY, 3 * MB);
    uint64_t base[6];
    for (int i = 0; i < 6; i++) {
        base[i] = 0x10000000ull + (uint64_t)i * 2 * MB;
        cr_assert_eq(swap_engine_add(e, base[i], MB, 0, 4096), 0);
    }
    ahead_loop(e, &l, base, 120, 0);
    uint32_t h = swap_engine_horizon(e, 0);
    int late = 0, early = 0;
    for (int r = 0; r < 40; r++)
        for (int i = 0; i < 6; i++) {
            struct swap_block *b = swap_engine_find(e, base[i]);
            if (b->ahead && r < 2) {
                swap_engine_ahead_feedback(e, 0, true);
                late++;
            } else if (b->ahead) {
                swap_engine_ahead_feedback(e, 0, false);
                early++;
            }
            swap_engine_ahead_feedback(e, 5, true); /* no policy there: ignored */
            cr_assert_eq(launch(e, &base[i], 1, 0), 0);
            cr_expect_not(b->ahead, "the access clears the note");
            if (r == 1 && i == 5) {
                cr_expect_gt(swap_engine_horizon(e, 0), h, "late launches grow it");
                h = swap_engine_horizon(e, 0);
            }
            swap_engine_fetch_ahead(e, 0);
        }
    cr_assert_gt(late, 0);
    cr_assert_gt(early, SWAP_AHEAD_SHRINK_AFTER);
    cr_expect_lt(swap_engine_horizon(e, 0), h, "early ones shrink it");
    struct swap_engine_counts c;
    swap_engine_counters(e, NULL, &c);
    cr_expect_eq(c.ahead_late, (uint64_t)late);
    cr_expect_eq(c.ahead_early, (uint64_t)early);
    swap_engine_destroy(e);
}

/* A fetch ahead that fails leaves the block on the host, without the note;
 * the launch that uses it fetches it on demand (the policy counted it
 * resident: placing it keeps the guarantee). */
Test(swap_engine, a_failed_fetch_ahead_is_fetched_on_demand)
{
    struct move_log l = {0};
    struct swap_engine *e = make(&l, SWAP_POLICY_HISTORY, 3 * MB);
    uint64_t base[6];
    for (int i = 0; i < 6; i++) {
        base[i] = 0x10000000ull + (uint64_t)i * 2 * MB;
        cr_assert_eq(swap_engine_add(e, base[i], MB, 0, 4096), 0);
    }
    ahead_loop(e, &l, base, 120, 0);
    /* launch by launch, fail the fetches ahead until one was tried */
    struct swap_engine_counts c;
    swap_engine_counters(e, NULL, &c);
    uint64_t failures = c.move_failures;
    int i = 0;
    l.fail_flags = HOST_MOVE_AHEAD;
    for (int k = 0; k < 60 && c.move_failures == failures; k++, i = (i + 1) % 6) {
        cr_assert_eq(launch(e, &base[i], 1, 0), 0);
        cr_expect_eq(swap_engine_fetch_ahead(e, 0), 0, "nothing was fetched ahead");
        swap_engine_counters(e, NULL, &c);
    }
    l.fail_flags = 0;
    cr_assert_gt(c.move_failures, failures, "a fetch ahead was tried");
    for (int k = 0; k < 6; k++, i = (i + 1) % 6) {
        struct swap_block *b = swap_engine_find(e, base[i]);
        cr_expect_not(b->ahead);
        bool on = b->on_device;
        int before = l.n;
        cr_assert_eq(launch(e, &base[i], 1, 0), 0);
        cr_expect(b->on_device);
        if (!on) {
            cr_expect_gt(l.n, before, "fetched on demand");
            cr_expect_eq(l.m[l.n - 1].base, base[i]);
            cr_expect_eq(l.m[l.n - 1].flags, 0);
        }
        cr_assert_leq(swap_engine_placed_bytes(e, 0), swap_engine_resident_bytes(e, 0));
    }
    swap_engine_destroy(e);
}
