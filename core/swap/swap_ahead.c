/* swap_ahead: the history policy's fetch ahead (swap_policy_prefetch, swap.h)
 * and the adaptive horizon its callers share (struct swap_ahead). A fetch
 * ahead is a fetch on demand moved earlier: the same block, the same
 * victims' rule (needed no sooner than it), counted as h2d bytes; it only
 * happens while the policy is following a prediction and has moved no
 * more than AHEAD_MARGIN times what it would have without fetching ahead. */
#include "swap_policy_internal.h"

#include <errno.h>

/* May v, evicted for a fetch ahead of a block predicted at `next`, go?
 * Only if it is not needed sooner, nor before `after` (see
 * swap_policy_prefetch). */
static bool ahead_victim(struct swap_policy *p, struct blk *v, enum rank how, uint64_t next,
                         uint64_t after)
{
    bool dies = false;
    uint64_t vnext = policy_predicted(p, v, how, &dies);
    if (dies) return !v->dirty || (vnext > next && vnext >= after);
    return vnext > next && vnext >= after;
}

/* The latest of the uses that follow the uses of resident blocks before
 * `next` (each block's use, plus its own latest gap, else the period): on
 * demand, when the fetched block is needed, those blocks would be ranked
 * from there, and the victim then would be needed no sooner than they. */
static uint64_t ahead_after(struct swap_policy *p, enum rank how, uint64_t next, uint64_t period)
{
    uint64_t after = 0;
    for (struct blk *z = p->blocks; z; z = z->hh.next) {
        if (!z->resident || policy_pinned(p, z)) continue;
        bool dies = false;
        uint64_t use = policy_predicted(p, z, how, &dies);
        if (dies || use == SWAP_NEVER || use >= next) continue;
        uint64_t again = use + (z->gap ? z->gap : period);
        if (again > after) after = again;
    }
    return after;
}

/* The block not on the device whose predicted next use (by how) is the
 * soonest before end, and that use into *next; NULL when none. */
static struct blk *ahead_candidate(struct swap_policy *p, enum rank how, uint64_t end,
                                   uint64_t *next_out)
{
    struct blk *best = NULL;
    uint64_t best_next = 0;
    for (struct blk *b = p->blocks; b; b = b->hh.next) {
        if (b->resident || !b->has_host || policy_pinned(p, b) || b->ahead_out == p->now + 1 ||
            b->wakes_by_copy)
            continue;
        bool dies = false;
        uint64_t next = policy_predicted(p, b, how, &dies);
        if (dies || next == SWAP_NEVER || next >= end) continue;
        b->ahead_seen = true;
        if (!best || next < best_next || (next == best_next && b->id < best->id)) {
            best = b;
            best_next = next;
        }
    }
    *next_out = best_next;
    return best;
}

/* Into p->evict, the victims that make best's room for a fetch ahead of
 * its use at best_next (ranked by rank_how, clean weight cw; each allowed
 * by ahead_victim), as make_room would take them: *n of them, and the
 * resident bytes after them into *after (still over the budget: no room).
 * Nothing changes in the policy. 0, or -ENOMEM. */
static int ahead_victims(struct swap_policy *p, struct blk *best, uint64_t best_next,
                         enum rank rank_how, enum rank how, double cw, size_t *n_out,
                         uint64_t *after_out)
{
    uint64_t after = p->resident + best->size;
    size_t n = 0;
    /* Tentative victims, as make_room takes them (converging first where
     * it would): nothing changes unless they make room. */
    uint64_t period = swap_history_period(p->hist);
    uint64_t not_before = after > p->prm.budget_bytes ? ahead_after(p, how, best_next, period) : 0;
    int converge = p->now - p->follow_since >= CONVERGE_PERIODS * period ? p->follow : -1;
    for (int pass = converge >= 0 ? 0 : 1; pass < 2 && after > p->prm.budget_bytes; pass++) {
        int rc = policy_rank_victims(p, best, -1, pass == 0 ? converge : -1, rank_how, cw);
        if (rc < 0) return rc;
        if (policy_grow((void **)&p->evict, &p->evict_cap, n + (size_t)rc, sizeof(*p->evict)))
            return -ENOMEM;
        for (struct blk *v; after > p->prm.budget_bytes && (v = policy_next_victim(p));) {
            if (v->ahead_out == p->now + 2 || !ahead_victim(p, v, how, best_next, not_before))
                continue;
            v->ahead_out = p->now + 2; /* taken in pass 0: not again in pass 1 */
            p->evict[n++] =
                (struct swap_evict){.block = v->id, .bytes = v->size, .writeback = v->dirty};
            after -= v->size;
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct blk *v;
        HASH_FIND(hh, p->blocks, &p->evict[i].block, sizeof(p->evict[i].block), v);
        v->ahead_out = 0;
    }
    *n_out = n;
    *after_out = after;
    return 0;
}

int swap_policy_prefetch(struct swap_policy *p, uint32_t horizon, uint64_t *block,
                         struct swap_decision *out)
{
    if (!p || !block || !out || !horizon) return -EINVAL;
    *out = (struct swap_decision){.evict = p->evict};
    if (p->prm.kind != SWAP_POLICY_HISTORY || !swap_history_period(p->hist) ||
        p->follow < SH_FIRST_PREDICT)
        return -ENOENT;
    /* Fetching ahead evicts earlier than on demand, and a greedy
     * schedule's steady state depends on where it starts ("Converging"):
     * only while the real cache has moved no more than it would have
     * without fetching ahead (the long window). */
    if (p->real_long > p->ahead_margin * p->s_long[SH_NOAHEAD] * (1 + 1e-9)) return -ENOENT;
    /* Victims in the followed ranking's order; what comes when, from the
     * period (asking a trusted anchor first where that ranking does): a
     * block's own rhythm, which only ever predicts sooner, keeps a victim
     * safe but would fetch a block too early where its gaps alternate. */
    enum rank rank_how = policy_shadows[p->follow].how;
    enum rank how = rank_how == RANK_ANCHOR ? RANK_ANCHOR : RANK_PREDICT;
    double cw = policy_shadows[p->follow].clean_weight;
    uint64_t best_next = 0, after = 0;
    struct blk *best = ahead_candidate(p, how, p->now + horizon, &best_next);
    if (!best) return -ENOENT;
    size_t n = 0;
    int rc = ahead_victims(p, best, best_next, rank_how, how, cw, &n, &after);
    if (rc) return rc;
    out->evict = p->evict;
    if (after > p->prm.budget_bytes) return -ENOENT;
    for (size_t i = 0; i < n; i++) {
        struct blk *v;
        HASH_FIND(hh, p->blocks, &p->evict[i].block, sizeof(p->evict[i].block), v);
        p->c.evictions++;
        if (v->dirty) {
            p->c.dirty_evictions++;
            p->c.d2h_bytes += v->size;
            p->real_long += (double)v->size;
        }
        v->resident = v->dirty = false;
        v->has_host = true;
        v->ahead_out = p->now + 1;
        if (v->ahead_fetched) p->c.prefetches_unused++;
        v->ahead_fetched = false;
    }
    out->n_evict = n;
    out->fetch = true;
    best->resident = true;
    best->dirty = false;
    best->ahead_seen = false;
    best->ahead_fetched = true;
    best->last_use = ++p->access_count;
    p->resident = after;
    p->c.prefetches++;
    p->c.h2d_bytes += best->size;
    p->real_long += (double)best->size;
    *block = best->id;
    return 0;
}

void swap_ahead_init(struct swap_ahead *a)
{
    *a = (struct swap_ahead){.horizon = SWAP_AHEAD_START};
}

void swap_ahead_used(struct swap_ahead *a, bool late)
{
    if (late)
        a->late = true;
    else
        a->early = true;
}

void swap_ahead_end_launch(struct swap_ahead *a)
{
    if (a->late) {
        uint32_t step = a->horizon / 2 ? a->horizon / 2 : 1;
        a->horizon = a->horizon + step < SWAP_AHEAD_MAX ? a->horizon + step : SWAP_AHEAD_MAX;
        a->early_run = 0;
    } else if (a->early && ++a->early_run >= SWAP_AHEAD_SHRINK_AFTER) {
        if (a->horizon > 1) a->horizon--;
        a->early_run = 0;
    }
    a->late = a->early = false;
}
