/* swap_min: offline replay of a trace through the policies, with Belady's
 * MIN fed the true next uses, and a fractional lower bound. Replay only: the
 * shim never links against the future.
 *
 * Why MIN is "an offline schedule between two bounds" and not the optimum
 * is explained at the top of swap_policy.c. In short: min here is a feasible
 * schedule with perfect knowledge of the future (an upper bound on the
 * optimum), and swap_replay_lower_bound() gives bytes no schedule can beat
 * in host->device traffic. */
#include "swap_offline.h"

#include <errno.h>
#include <stdlib.h>

#include "uthash_wrap.h"

struct next_entry {
    uint64_t id;
    uint64_t next; /* next access: logical time (min) or event index (bound) */
    UT_hash_handle hh;
};

static void next_table_free(struct next_entry **tab)
{
    struct next_entry *e, *tmp;
    HASH_ITER(hh, *tab, e, tmp)
    {
        HASH_DEL(*tab, e);
        free(e);
    }
}

/* For every access event i: when the same block is next accessed by a
 * kernel (copies need no residency: swap_policy_copy), measured in
 * launches (by_launch) or in event indices, SWAP_NEVER if it is freed first
 * or never accessed again. Scans backwards. */
static int next_uses(const struct swap_trace *t, bool by_launch, uint64_t **out)
{
    uint64_t *next = malloc((t->n ? t->n : 1) * sizeof(*next));
    if (!next) return -ENOMEM;
    uint64_t launches = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].kind == SWAP_EV_LAUNCH) launches++;
    struct next_entry *tab = NULL, *e;
    int rc = 0;
    uint64_t now = launches; /* launch of event i, counted down */
    for (size_t i = t->n; i-- > 0;) {
        const struct swap_event *ev = &t->ev[i];
        next[i] = SWAP_NEVER;
        if (ev->kind == SWAP_EV_LAUNCH) {
            now--;
            continue;
        }
        if (ev->kind != SWAP_EV_ACCESS && ev->kind != SWAP_EV_FREE) continue;
        HASH_FIND(hh, tab, &ev->block, sizeof(ev->block), e);
        if (!e) {
            if (!(e = calloc(1, sizeof(*e)))) {
                rc = -ENOMEM;
                break;
            }
            e->id = ev->block;
            e->next = SWAP_NEVER;
            HASH_ADD(hh, tab, id, sizeof(e->id), e);
            if (!UTH_ADDED(e, hh)) {
                free(e);
                rc = -ENOMEM;
                break;
            }
        }
        if (ev->kind == SWAP_EV_FREE) {
            /* by launch (min): the time it dies, flagged (swap_policy.c ranks
             * a dead block by it); by event (the bound): never needed again */
            e->next = by_launch ? now | SWAP_DEAD_BIT : SWAP_NEVER;
        } else {
            next[i] = e->next;
            if (!ev->is_copy) e->next = by_launch ? now : i;
        }
    }
    next_table_free(&tab);
    if (rc) {
        free(next);
        return rc;
    }
    *out = next;
    return 0;
}

int swap_replay_next_uses(const struct swap_trace *t, uint64_t **out)
{
    return next_uses(t, true, out);
}

/* Per-iteration snapshots of the counters, turned into steady-state means. */
struct snaps {
    struct swap_counters *c;
    size_t n, cap;
};

static int snap_push(struct snaps *s, const struct swap_counters *c)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct swap_counters *a = realloc(s->c, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        s->c = a;
        s->cap = cap;
    }
    s->c[s->n++] = *c;
    return 0;
}

static void steady(const struct snaps *s, unsigned warmup, struct swap_replay_result *r)
{
    size_t n = s->n, lo, hi;
    if (n >= (size_t)warmup + 2) {
        lo = warmup;
        hi = n - 1;
    } else if (n > warmup) {
        lo = warmup;
        hi = n;
    } else {
        lo = 0;
        hi = n;
    }
    r->iterations = n;
    for (size_t i = 0; i < n && i < SWAP_REPLAY_ITERS; i++)
        r->iter_bytes[i] = s->c[i].h2d_bytes + s->c[i].d2h_bytes -
                           (i ? s->c[i - 1].h2d_bytes + s->c[i - 1].d2h_bytes : 0);
    r->steady_iterations = hi - lo;
    if (hi <= lo) return;
    struct swap_counters zero = {0};
    const struct swap_counters *a = lo ? &s->c[lo - 1] : &zero, *b = &s->c[hi - 1];
    double k = (double)(hi - lo);
    r->steady_h2d = (double)(b->h2d_bytes - a->h2d_bytes) / k;
    r->steady_d2h = (double)(b->d2h_bytes - a->d2h_bytes) / k;
    r->steady_bytes = r->steady_h2d + r->steady_d2h;
}

/* Trailing events after the last I (or a trace without I) form one more
 * iteration if they hold anything. */
static bool open_iteration(const struct swap_trace *t)
{
    return t->n && t->ev[t->n - 1].kind != SWAP_EV_ITER;
}

static int replay_once(const struct swap_trace *t, const struct swap_params *prm,
                       const uint64_t *next, double clean_weight, unsigned warmup,
                       struct swap_replay_result *r)
{
    struct swap_policy *p;
    int rc = swap_policy_create_params(prm, &p);
    if (rc) return rc;
    if (clean_weight > 0) swap_policy_set_clean_weight(p, clean_weight);
    struct snaps s = {0};
    struct swap_counters c;
    for (size_t i = 0; i < t->n && !rc; i++) {
        const struct swap_event *e = &t->ev[i];
        struct swap_decision d;
        switch (e->kind) {
        case SWAP_EV_ACCESS:
            if (next)
                rc = swap_policy_access_known(p, e->block, e->bytes, e->is_write, e->is_copy,
                                              next[i], &d);
            else if (e->is_copy)
                rc = swap_policy_copy(p, e->block, e->bytes, e->is_write, &d);
            else
                rc = swap_policy_access(p, e->block, e->bytes, e->is_write, &d);
            if (rc == -ENOSPC) rc = 0;
            break;
        case SWAP_EV_LAUNCH:
            swap_policy_next_launch(p);
            for (unsigned k = 0; prm->ahead_horizon && k < SWAP_AHEAD_PER_LAUNCH; k++) {
                uint64_t block;
                rc = swap_policy_prefetch(p, prm->ahead_horizon, &block, &d);
                if (rc) break;
            }
            if (rc == -ENOENT) rc = 0;
            break;
        case SWAP_EV_FREE:
            swap_policy_free(p, e->block);
            break;
        case SWAP_EV_ITER:
            swap_policy_counters(p, &c);
            rc = snap_push(&s, &c);
            break;
        }
    }
    swap_policy_counters(p, &c);
    if (!rc && open_iteration(t)) rc = snap_push(&s, &c);
    if (!rc) {
        *r = (struct swap_replay_result){.total = c, .clean_weight = clean_weight};
        steady(&s, warmup, r);
    }
    free(s.c);
    swap_policy_destroy(p);
    return rc;
}

/* What the MIN family is judged by: the whole run with warm-up 0 (warm-up
 * counts), else the steady state. */
static double cost(const struct swap_replay_result *r, unsigned warmup)
{
    return warmup ? r->steady_bytes : (double)(r->total.h2d_bytes + r->total.d2h_bytes);
}

/* MIN fed next[] (one next use per event), under each clean weight of the
 * family (see swap_policy.c, "The MIN bound": from plain Belady, 1, to
 * strongly write-back-averse, 8); the cheapest run into r. */
static int replay_min_family(const struct swap_trace *t, const struct swap_params *prm,
                             const uint64_t *next, unsigned warmup, struct swap_replay_result *r)
{
    static const double weights[] = {1.0, 1.5, 2.0, 3.0, 4.0, 8.0};
    int rc = 0;
    for (size_t k = 0; k < sizeof(weights) / sizeof(weights[0]) && !rc; k++) {
        struct swap_replay_result one;
        rc = replay_once(t, prm, next, weights[k], warmup, &one);
        if (!rc && (k == 0 || cost(&one, warmup) < cost(r, warmup))) *r = one;
    }
    return rc;
}

int swap_replay(const struct swap_trace *t, const struct swap_params *prm, unsigned warmup,
                struct swap_replay_result *r)
{
    if (!t || !prm || !r) return -EINVAL;
    if (prm->kind != SWAP_POLICY_MIN) return replay_once(t, prm, NULL, 0, warmup, r);
    uint64_t *next;
    int rc = next_uses(t, true, &next);
    if (!rc) rc = replay_min_family(t, prm, next, warmup, r);
    free(next);
    return rc;
}

/* ---- the previous iteration as the future -------------------------------- */

/* One block's kernel accesses and frees in one iteration: offsets in
 * launches from the iteration's start, in order, a free flagged with
 * SWAP_DEAD_BIT. */
struct past_entry {
    uint64_t id;
    uint64_t *at;
    size_t n, cap;
    UT_hash_handle hh;
};

static void past_free(struct past_entry **tab)
{
    struct past_entry *e, *tmp;
    HASH_ITER(hh, *tab, e, tmp)
    {
        HASH_DEL(*tab, e);
        free(e->at);
        free(e);
    }
}

static int past_note(struct past_entry **tab, uint64_t id, uint64_t at)
{
    struct past_entry *e;
    HASH_FIND(hh, *tab, &id, sizeof(id), e);
    if (!e) {
        if (!(e = calloc(1, sizeof(*e)))) return -ENOMEM;
        e->id = id;
        HASH_ADD(hh, *tab, id, sizeof(e->id), e);
        if (!UTH_ADDED(e, hh)) {
            free(e);
            return -ENOMEM;
        }
    }
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 4;
        uint64_t *a = realloc(e->at, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        e->at = a;
        e->cap = cap;
    }
    e->at[e->n++] = at;
    return 0;
}

/* The next use the previous iteration `prev` (of `len` launches) predicts
 * for block id accessed at offset `off` of an iteration that started at
 * launch `start` (see swap_replay_past). */
static uint64_t past_predict(struct past_entry *prev, uint64_t len, uint64_t id, uint64_t start,
                             uint64_t off)
{
    struct past_entry *e;
    HASH_FIND(hh, prev, &id, sizeof(id), e);
    if (!e) return SWAP_NEVER;
    for (size_t k = 0; k < e->n; k++) {
        uint64_t at = e->at[k] & ~SWAP_DEAD_BIT;
        if (at < off || (at == off && !(e->at[k] & SWAP_DEAD_BIT))) continue;
        return (start + at) | (e->at[k] & SWAP_DEAD_BIT);
    }
    return (start + len + (e->at[0] & ~SWAP_DEAD_BIT)) | (e->at[0] & SWAP_DEAD_BIT);
}

int swap_replay_past(const struct swap_trace *t, const struct swap_params *prm,
                     struct swap_replay_result *r)
{
    if (!t || !prm || !r || prm->kind != SWAP_POLICY_MIN) return -EINVAL;
    uint64_t *next;
    int rc = next_uses(t, true, &next);
    if (rc) return rc;
    struct past_entry *prev = NULL, *cur = NULL;
    uint64_t now = 0, start = 0, len = 0, iter = 0;
    for (size_t i = 0; i < t->n && !rc; i++) {
        const struct swap_event *e = &t->ev[i];
        if (e->kind == SWAP_EV_LAUNCH) {
            now++;
        } else if (e->kind == SWAP_EV_ITER) {
            past_free(&prev);
            prev = cur;
            cur = NULL;
            len = now - start;
            start = now;
            iter++;
        } else if (e->kind == SWAP_EV_FREE) {
            rc = past_note(&cur, e->block, (now - start) | SWAP_DEAD_BIT);
        } else if (e->kind == SWAP_EV_ACCESS) {
            if (iter) next[i] = past_predict(prev, len, e->block, start, now - start);
            if (!e->is_copy) rc = past_note(&cur, e->block, now - start);
        }
    }
    past_free(&prev);
    past_free(&cur);
    if (!rc) rc = replay_min_family(t, prm, next, 0, r);
    free(next);
    return rc;
}

/* ---- fractional lower bound --------------------------------------------- */

struct lb_block {
    uint64_t id;
    uint64_t seen;     /* largest size seen: bytes below it have content */
    uint64_t resident; /* bytes on the device, possibly a part */
    uint64_t next;     /* event index of the next access */
    UT_hash_handle hh;
};

static int by_next_desc(const void *x, const void *y)
{
    const struct lb_block *a = *(struct lb_block *const *)x, *b = *(struct lb_block *const *)y;
    return a->next < b->next ? 1 : a->next > b->next ? -1 : 0;
}

/* Room for missing more bytes within budget: evicts bytes of the blocks of
 * tab other than b, furthest next use first, partially when that suffices,
 * and lowers *total. *cand is scratch space, grown here (*cap entries).
 * Returns 0, or -ENOMEM. */
static int lb_make_room(struct lb_block *tab, const struct lb_block *b, uint64_t missing,
                        uint64_t budget, uint64_t *total, struct lb_block ***cand, size_t *cap)
{
    size_t n = 0, cnt = HASH_COUNT(tab);
    if (cnt > *cap) {
        struct lb_block **a = realloc(*cand, cnt * sizeof(*a));
        if (!a) return -ENOMEM;
        *cand = a;
        *cap = cnt;
    }
    struct lb_block **c = *cand;
    for (struct lb_block *o = tab; o; o = o->hh.next)
        if (o != b && o->resident) c[n++] = o;
    qsort(c, n, sizeof(*c), by_next_desc);
    for (size_t k = 0; k<n && * total + missing> budget; k++) {
        uint64_t take = *total + missing - budget;
        if (take > c[k]->resident) take = c[k]->resident;
        c[k]->resident -= take;
        *total -= take;
    }
    return 0;
}

/* Belady on bytes: an access makes all its bytes resident, fetching those
 * that were evicted (bytes never seen before are first touches); room is
 * made by evicting the bytes whose next access is furthest, partially if
 * that suffices. With unit pages (bytes) this is optimal in pages fetched,
 * and allowing partial blocks and dropping the "whole launch at once"
 * constraint only relaxes the real problem, hence a lower bound. */
int swap_replay_lower_bound(const struct swap_trace *t, uint64_t budget, unsigned warmup,
                            struct swap_replay_result *r)
{
    if (!t || !r || budget == 0) return -EINVAL;
    uint64_t *next;
    int rc = next_uses(t, false, &next);
    if (rc) return rc;
    struct lb_block *tab = NULL, *b, *tmp, **cand = NULL;
    size_t ncand_cap = 0;
    struct snaps s = {0};
    struct swap_counters c = {0};
    uint64_t total = 0;
    for (size_t i = 0; i < t->n && !rc; i++) {
        const struct swap_event *e = &t->ev[i];
        if (e->kind == SWAP_EV_ITER) {
            rc = snap_push(&s, &c);
            continue;
        }
        if (e->kind != SWAP_EV_ACCESS && e->kind != SWAP_EV_FREE) continue;
        /* A copy needs no residency: leaving it out only relaxes the
         * problem (a block first written by a copy is then created by its
         * first kernel access, for free). */
        if (e->kind == SWAP_EV_ACCESS && e->is_copy) continue;
        HASH_FIND(hh, tab, &e->block, sizeof(e->block), b);
        if (e->kind == SWAP_EV_FREE) {
            if (b) {
                total -= b->resident;
                HASH_DEL(tab, b);
                free(b);
            }
            continue;
        }
        if (!b) {
            if (!(b = calloc(1, sizeof(*b)))) {
                rc = -ENOMEM;
                break;
            }
            b->id = e->block;
            HASH_ADD(hh, tab, id, sizeof(b->id), b);
            if (!UTH_ADDED(b, hh)) {
                free(b);
                rc = -ENOMEM;
                break;
            }
        }
        b->next = next[i];
        if (e->bytes > budget || b->resident >= e->bytes) continue;
        uint64_t missing = e->bytes - b->resident;
        uint64_t cold = e->bytes > b->seen ? e->bytes - b->seen : 0;
        if (total + missing > budget &&
            (rc = lb_make_room(tab, b, missing, budget, &total, &cand, &ncand_cap)))
            break;
        c.h2d_bytes += missing - cold;
        if (e->bytes > b->seen) b->seen = e->bytes;
        b->resident = e->bytes;
        total += missing;
    }
    if (!rc && open_iteration(t)) rc = snap_push(&s, &c);
    if (!rc) {
        *r = (struct swap_replay_result){.total = c};
        steady(&s, warmup, r);
    }
    HASH_ITER(hh, tab, b, tmp)
    {
        HASH_DEL(tab, b);
        free(b);
    }
    free(cand);
    free(s.c);
    free(next);
    return rc;
}
