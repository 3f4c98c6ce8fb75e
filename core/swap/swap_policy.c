/* swap_policy: keeps device-resident bytes under a budget by choosing which
 * blocks to evict to host memory. Three kinds share one engine (block table,
 * residency, dirty bits, pinning, counters) and differ only in how victims
 * are ranked:
 *
 *   lru      least recently used first.
 *   history  furthest predicted next use first, the prediction coming from
 *            the access history's learned period and anchors; lru (or mru)
 *            until one is learned or where recency proves cheaper.
 *   min      furthest known next use first (Belady's MIN); the replay tool
 *            passes the true next use with every access. Replay only.
 *
 * Invariants: resident bytes <= budget after every call; blocks accessed in
 * the current launch (pinned) are never victims; a victim is written back
 * iff it is dirty; a block's host copy is current once it has been evicted.
 *
 * How history predicts (swap_history.c implements it)
 * ---------------------------------------------------
 * Every completed launch gets a signature: a hash of the ordered list of
 * (block, read/write) it touched. A training loop repeats the same sequence
 * of signatures every iteration, so the sequence has a period P. To learn it,
 * take as candidates the current period (if any, so that one odd launch
 * does not erase it) and the distances back to earlier occurrences of the
 * latest launch's signature; a candidate passes if at least 60% of the
 * recent launches (at most half the retained window; at least a quarter of
 * a period, so a loop is learned early in its second repetition: warm-up
 * counts) find their own signature about P launches earlier (within +-4
 * launches, so that an inserted or dropped kernel does not break the match;
 * less for periods under 8, so that a launch never matches itself).
 * The shortest passing candidate wins unless a longer one matches clearly
 * better: with gradient accumulation the micro-batch repeats but the
 * optimizer only once per full step, so the full step matches ~100% and the
 * micro-batch ~85-95%. The threshold is low (60%) because real loops are
 * not exact: a mixture of experts routes data-dependent token counts, so
 * its activations change size (and id) every step; a wrong period is
 * caught by the shadows below. Detection runs every 8 launches until a
 * period is found, then every period to confirm or replace it. A period
 * that fails the check is kept while a trusted anchor (below) still finds
 * its launches about a period back and nothing but a multiple of it
 * passes: an inner loop whose count varies moves an iteration's launches
 * beyond the +-4, and several iterations back lengths may add up alike
 * (keep_anchored_period in swap_history.c).
 *
 * Anchors: learning without waiting a period. A launch's context is its
 * signature after its predecessor's; a table remembers where each context
 * last ended, so every launch knows how far back it last occurred (its
 * anchor). When 8 launches (net of odd ones: a launch that agrees adds one,
 * one that does not takes one away, one that agrees only once the blocks new
 * in it are taken by size, an allocator that placed them elsewhere, neither:
 * "Loose signatures" in swap_history.c) recur at about the same distance,
 * that distance is trusted: it becomes the period if none is known yet (a
 * loop is learned 8 launches into its second pass instead of a quarter of a
 * period in), and it replaces the period's shift while it lies within a
 * quarter of the period (an iteration that grew or shrank: an optimizer
 * creates its state in step 0, so step 0 is shorter than the next ones, and
 * the +-4 phase correction cannot follow that). A trusted anchor at another
 * distance (the previous training step across an evaluation pass, a
 * micro-batch inside an accumulation step) is kept as a second opinion: the
 * anchored predictions ask its window first and the period's only for blocks
 * it did not see; whether that beats the period alone is left to the shadows
 * below. An anchor reaches back at most half the launch ring.
 * Re-anchoring: a launch that recurs neither about a period back nor at a
 * trusted anchor is looked up by its context alone; if that last ended
 * between half a period and two periods ago, the shift moves there at once
 * (an inner loop that ran more or fewer times than one iteration ago).
 *
 * Freed blocks keep their past (swap_history_retire): a caching allocator
 * gives the same address to the same tensor every iteration, so a new block
 * of the same size at a freed block's id continues its chain of events; an
 * activation freed at the end of backward is predicted from what its
 * predecessor did one period ago. The free itself enters the chain: if
 * one period ago the role was freed before its next access, the block is
 * predicted dead (swap_history_predict_use) and ranked as MIN ranks a dead
 * block (below): a clean one is dropped first, a dirty one is kept until
 * it dies rather than written back for nothing.
 *
 * Robustness (phases, interleaving, shuffles). Prediction from the past is
 * only as good as the repetition. So the history kind also replays every
 * access in eleven shadow caches, at no cost to the device: one ranked by
 * recency alone (what lru would hold), one by reverse recency (mru: evict the
 * most recently used unpinned block), and nine by prediction alone: from the
 * period, anchored (above), or from the period or a block's own rhythm where
 * that comes sooner ("Next use"), each under clean weights 1, 2 and 4
 * ("Ranking": which weight is best depends on how many blocks a workload
 * writes, and differs between traces by up to 30% of the traffic). Each
 * counts the bytes it would have moved, decayed by 1 - 1/SHADOW_WINDOW per
 * launch (a window of ~256 launches), and once more over a window of two
 * periods. The prediction shadow with the lowest two-period cost is the
 * expert (comparing whole iterations: over a shorter window two rankings that
 * cost the same per iteration alternate, and each switch costs the moves
 * between their contents). Before a period is known, the real cache ranks its
 * victims as the expert does while the expert's recent cost is strictly below
 * the recency shadow's; as mru from when the mru shadow costs under 0.8x
 * every other (a loop larger than the budget: this is what makes warm-up
 * cheap) while it costs under 0.9x; else by recency. When a period is first
 * learned, the prediction shadows (which ranked by recency until then)
 * restart from the real cache's contents and costs, so the real cache follows
 * a prediction from that launch on instead of after a window (warm-up
 * counts). From then on the long window alone decides: the real cache follows
 * the expert where the expert's two-period cost is below the lru shadow's,
 * else lru; never mru. (It once also followed the short window, which flips
 * by phase: mru through a decoder loop, a prediction through backward, lru
 * after, and every switch paid for the moves between contents; on
 * seq2seq-attn-train at 1.5x the real cache moved more than lru.) When the
 * pattern changes (an evaluation pass, a second model, a shuffled order)
 * history degrades to lru once the expert's long-window cost rises above
 * lru's, and returns to prediction once the new pattern has been learned and
 * proves cheaper; and at the latest after FALLBACK_RUN launches in a row that
 * the prediction did not match (none of the above found them a period back),
 * the real cache follows lru until one matches again. Cost: a few bits of
 * state per block and a victim ranking per shadow eviction. On the recorded
 * real traces (docs/swap.md) history moves at most 1 % more than lru, and far
 * less where the loop repeats.
 *
 * Converging. Following a shadow's ranking is not holding its contents: the
 * real cache arrives at a shadow with what it kept under another ranking
 * (or before a period was known), and a greedy schedule's steady state
 * depends on the state it starts from (on dcgan-train at 2x the real cache
 * moved 130 MiB an iteration following a shadow that moved 116). So once
 * the real cache has followed one shadow for CONVERGE_PERIODS periods, its
 * victims are first the blocks it holds and that shadow does not (in the
 * ranking's order), then the ranking's: it converges to the shadow's
 * contents, and then pays what the shadow was measured to cost. Not
 * earlier: right after a switch that would evict at once everything the
 * two rankings disagree on (tried: 28 of the 45 rows of swap-real within
 * 1.10x the offline schedule instead of 37).
 *
 * Next use. If the pattern repeats with period P, what block b does next is
 * what it did one period ago: its predicted next use is t + P, where t is
 * the earliest access of b at or after now - P (found by walking b's chain of
 * events in the ring). t = now - P means "later in this very launch" and
 * gives the lowest score. No access in the last period means the pattern
 * does not use b: predicted never, evicted first. P is phase-corrected at
 * every launch: if the launch just completed matched a launch P +- d ago,
 * the shift d is applied to the predictions until the next correction (or
 * a trusted anchor sets it). Own gap: where b's latest access came g
 * launches after the one before it, and its latest access + g is still
 * ahead and sooner than the period's prediction, that is the prediction
 * (the rhythm shadows; whether it beats the period alone is the shadows'
 * to judge: it does on a decoder loop, it does not where gaps alternate,
 * a weight read in forward and again soon in backward). A block
 * in a burst (read by three or more launches in a row: the three kernels
 * of a decoder step that use the output projection) has for g the gap
 * before the burst: its rhythm is the step's, not the burst's one launch.
 * An inner loop whose count differs from one period ago (a decoder run for
 * as many steps as the batch's target length), or a phase met for the
 * first time (an evaluation pass that re-reads each layer's weights within
 * a few launches), is predicted by the blocks' own rhythm where the
 * period's alignment is off; a block whose gap has passed is predicted by
 * the period alone. A block with no past (the history holds no access of
 * it before the last period: an address new since then, which a caching
 * allocator hands out in the second iteration and a decoder whenever its
 * lengths change) gets from the period only "back in a period", from its
 * first access; in the rhythm shadows it is predicted back after
 * IDLE_FACTOR times the launches it has been idle where that is sooner:
 * an activation written in forward and idle since stays ahead of a block
 * idle for longer (seq2seq-attn-train's second iteration at 1.5x: 255 MiB
 * instead of 351, the offline schedule 194).
 *
 * Ranking. The victim is the block with the largest
 *     score = (next_use - now) * (dirty ? 1 : CLEAN_WEIGHT)
 * A dirty victim costs a write-back now and a fetch later (2x its size); a
 * clean one only the fetch, so a clean block is treated as if its next use
 * were CLEAN_WEIGHT times further away (2 was the best single weight over
 * the generated traces; history's shadows try 1, 2 and 4). Size enters
 * through the greedy order: victims are taken in score order until the
 * access fits; with weight 1 that is the byte-level form of Belady's rule,
 * optimal in fetched bytes when a block may be partly resident (the lower
 * bound below).
 *
 * The MIN bound with variable sizes. With equal sizes and no write-backs,
 * furthest-next-use is optimal (Belady). With variable sizes, or with
 * write-back costs, the offline optimum is NP-hard (generalised caching,
 * Chrobak et al.; with write-back costs even for unit sizes: local register
 * allocation, Farach-Colton & Liberatore). So the replay's "min" is an
 * offline schedule, not a proof: it runs this engine with the true next
 * uses under clean weights 1 (plain Belady), 1.5, 2, 3, 4 and 8 and keeps
 * the cheapest (in steady state, or over the whole run with warm-up 0). A
 * block freed before its next use is dead: MIN drops it for free when
 * clean, and ranks a dirty one by the time it dies, its write-back costing
 * like a clean block's refetch. Each is a feasible schedule, so min is an
 * upper bound on the true optimum, and history/min < 1 is possible (a
 * greedy schedule's steady state depends on the state it starts from). The
 * replay also prints a lower bound (swap_min.c): the host->device bytes of
 * fractional byte-level Belady, which no schedule can go below. The
 * optimum's total therefore lies between lb(h2d) and min; on the generated
 * training traces min's own h2d is within ~10% of lb(h2d), and the rest of
 * min is write-backs of blocks that the loop writes every iteration. */
#include "swap_policy_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "uthash_wrap.h"

#define NOT_PINNED UINT64_MAX
/* See "Ranking" above. */
#define CLEAN_WEIGHT 2.0
/* Shadow costs decay by 1 - 1/SHADOW_WINDOW per launch (see "Robustness"). */
#define SHADOW_WINDOW 256.0
/* The real cache starts following the mru shadow only when it costs less
 * than this share of every other: mru is right for loops larger than the
 * budget and wrong nearly everywhere else, so it must win clearly. */
#define MRU_MARGIN 0.8
/* ... and keeps following it while it costs less than this share: each
 * switch between mru and lru pays for the moves between their contents
 * (transformer-varlen-train's first iteration at 2x switched 14 times
 * between launches 297 and 435, and moved more than lru alone). */
#define MRU_STAY 0.9
/* Bounded fallback (see "Robustness"): after this many consecutive launches
 * that the prediction did not match (swap_history_miss_run), the real cache
 * follows lru until one matches again, whatever the shadows' costs say. */
#define FALLBACK_RUN 64
/* Next use: in the rhythm shadows, a block with no past is predicted back
 * after this many times the launches it has been idle, where that is
 * sooner than the period's guess. 3 to 8 put the same 50 of swap-real's 54
 * rows within 1.10x of the offline schedule; 2 puts 49; 1 moves 1.3 % more
 * than lru on resnet18-phases at 1.25x. */
#define IDLE_FACTOR 4
const struct shadow_kind policy_shadows[SH_N] = {
    {RANK_LRU, 0},       {RANK_MRU, 0},      {RANK_PREDICT, 2.0}, {RANK_PREDICT, 1.0},
    {RANK_PREDICT, 4.0}, {RANK_ANCHOR, 2.0}, {RANK_ANCHOR, 1.0},  {RANK_ANCHOR, 4.0},
    {RANK_RHYTHM, 2.0},  {RANK_RHYTHM, 1.0}, {RANK_RHYTHM, 4.0},
};

int swap_policy_create_params(const struct swap_params *prm, struct swap_policy **out)
{
    if (!out) return -EINVAL;
    *out = NULL;
    if (!prm || prm->budget_bytes == 0 || prm->kind > SWAP_POLICY_MIN) return -EINVAL;
    struct swap_policy *p = calloc(1, sizeof(*p));
    if (!p) return -ENOMEM;
    p->prm = *prm;
    p->clean_weight = CLEAN_WEIGHT;
    p->ahead_margin = AHEAD_MARGIN;
    p->decay = 1.0 - 1.0 / SHADOW_WINDOW;
    p->expert = SH_FIRST_PREDICT;
    if (prm->kind == SWAP_POLICY_HISTORY) {
        int rc = swap_history_create(prm->history_events, prm->history_launches, &p->hist);
        if (rc) {
            free(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

int swap_policy_create(enum swap_policy_kind kind, uint64_t budget_bytes, struct swap_policy **out)
{
    struct swap_params prm = {.kind = kind, .budget_bytes = budget_bytes};
    return swap_policy_create_params(&prm, out);
}

void swap_policy_destroy(struct swap_policy *p)
{
    if (!p) return;
    struct blk *b, *tmp;
    HASH_ITER(hh, p->blocks, b, tmp)
    {
        HASH_DEL(p->blocks, b);
        free(b);
    }
    swap_history_destroy(p->hist);
    free(p->evict);
    free(p->cand);
    free(p);
}

void swap_policy_set_clean_weight(struct swap_policy *p, double w)
{
    p->clean_weight = w;
}

void swap_policy_set_ahead_margin(struct swap_policy *p, double m)
{
    p->ahead_margin = m;
}

bool policy_pinned(const struct swap_policy *p, const struct blk *b)
{
    return b->pin_launch == p->now;
}

/* What b adds to p->pinned_resident: its size while it is on the device
 * and pinned. */
static uint64_t pin_charge(const struct swap_policy *p, const struct blk *b)
{
    return b->resident && policy_pinned(p, b) ? b->size : 0;
}

int policy_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *a = realloc(*arr, n * elem);
    if (!a) return -ENOMEM;
    *arr = a;
    *cap = n;
    return 0;
}

/* Victim order, a total one: the larger score; on a tie (e.g. all "never")
 * the older last use; then the order scored. */
static int victim_order(const void *x, const void *y)
{
    const struct cand *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->b->last_use != b->b->last_use) return a->b->last_use < b->b->last_use ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* History's prediction for an unpinned block, computed once per launch:
 * the history changes during a launch only by this launch's accesses, whose
 * blocks are pinned (never ranked), and its shifts only between launches,
 * so the nine prediction shadows share one walk per block and launch.
 * how: RANK_PREDICT, RANK_ANCHOR or RANK_RHYTHM (the period's prediction,
 * or the block's own latest gap where that comes sooner: "Next use"). */
uint64_t policy_predicted(struct swap_policy *p, struct blk *b, enum rank how, bool *dies)
{
    bool anchored = how == RANK_ANCHOR;
    if (b->pred_at != p->now + 1) {
        for (int a = 0; a < 2; a++)
            b->pred_next[a] = swap_history_predict_use(p->hist, b->id, a, &b->pred_dies[a],
                                                       a ? NULL : &b->pred_no_past);
        b->pred_at = p->now + 1;
    }
    *dies = b->pred_dies[anchored];
    uint64_t next = b->pred_next[anchored];
    if (how != RANK_RHYTHM) return next;
    /* In a burst (read by three or more launches in a row) the rhythm is
     * the gap before the burst. */
    uint64_t gap = b->burst >= 2 && b->wide_gap ? b->wide_gap : b->gap;
    uint64_t again = b->pin_launch + gap;
    if (gap && again > p->now && again < next) {
        *dies = false;
        next = again;
    }
    /* A block with no past: see "Next use". */
    uint64_t idle = b->pin_launch < p->now ? p->now - b->pin_launch : 0;
    uint64_t back = p->now + IDLE_FACTOR * idle;
    if (b->pred_no_past && back < next) {
        *dies = false;
        next = back;
    }
    return next;
}

/* Appends candidate b to p->cand (room made by the caller), keeping
 * p->cand_best the first victim so far: the first call of next_victim then
 * needs no scan. */
static void add_cand(struct swap_policy *p, size_t *n, struct blk *b, double score)
{
    p->cand[*n] = (struct cand){.b = b, .score = score, .order = (uint32_t)*n};
    if (*n == 0 || victim_order(&p->cand[*n], &p->cand[p->cand_best]) < 0) p->cand_best = *n;
    (*n)++;
}

/* Scores every unpinned block other than self that is resident in cache
 * `which` (-1: the real one; else a shadow), and not in shadow not_held_by
 * (-1: wherever; see "Converging"), into p->cand, by `how` (clean_weight:
 * see "Ranking"); returns how many, or -ENOMEM. Take the victims in order
 * with next_victim. */
int policy_rank_victims(struct swap_policy *p, const struct blk *self, int which, int not_held_by,
                        enum rank how, double clean_weight)
{
    size_t n = 0;
    if (policy_grow((void **)&p->cand, &p->cand_cap, HASH_COUNT(p->blocks), sizeof(*p->cand)))
        return -ENOMEM;
    for (struct blk *b = p->blocks; b; b = b->hh.next) {
        bool res = which < 0 ? b->resident : b->s_res[which];
        if (!res || b == self || policy_pinned(p, b)) continue;
        if (not_held_by >= 0 && b->s_res[not_held_by]) continue;
        bool dirty = which < 0 ? b->dirty : b->s_dirty[which];
        double score;
        if (how == RANK_LRU) {
            score = -(double)b->last_use;
        } else if (how == RANK_MRU) {
            score = (double)b->last_use;
        } else if (p->prm.kind == SWAP_POLICY_MIN && b->next_use != SWAP_NEVER &&
                   (b->next_use & SWAP_DEAD_BIT)) {
            /* Dead (freed before any use): dropping it clean is free; a
             * dirty one costs one write-back, like a clean block's refetch,
             * and frees room only until the free. */
            double dist = (double)((b->next_use & ~SWAP_DEAD_BIT) - p->now);
            score = dirty ? dist * clean_weight : 2e30;
        } else {
            bool dies = false;
            uint64_t next =
                p->prm.kind == SWAP_POLICY_MIN ? b->next_use : policy_predicted(p, b, how, &dies);
            if (dies) {
                /* Predicted to be freed before its next use: as MIN's dead. */
                double dist = (double)(next - p->now);
                add_cand(p, &n, b, dirty ? dist * clean_weight : 2e30);
                continue;
            }
            double dist = next == SWAP_NEVER ? 1e30 : (double)(next - p->now);
            score = dirty ? dist : dist * clean_weight;
            if (next == SWAP_NEVER && !dirty) score = 2e30; /* free to drop */
        }
        add_cand(p, &n, b, score);
    }
    p->cand_n = n;
    p->cand_taken = 0;
    return (int)n;
}

/* The next victim of the last rank_victims, best first, or NULL when none
 * is left. Most accesses evict one or two blocks, so the first few are
 * found by a scan each (sorting every resident block per access took 40 %
 * of train's CPU at 1.5x); an access that needs more sorts what is left.
 * victim_order is total, so either way gives the same victims in the same
 * order, whatever the C library's qsort. */
#define SCANNED_VICTIMS 8
struct blk *policy_next_victim(struct swap_policy *p)
{
    if (p->cand_taken == SCANNED_VICTIMS) {
        size_t left = 0;
        for (size_t i = 0; i < p->cand_n; i++)
            if (p->cand[i].b) p->cand[left++] = p->cand[i];
        qsort(p->cand, left, sizeof(*p->cand), victim_order);
        p->cand_n = left;
    }
    struct cand *best = NULL;
    if (p->cand_taken >= SCANNED_VICTIMS) {
        size_t i = p->cand_taken - SCANNED_VICTIMS;
        if (i < p->cand_n) best = &p->cand[i];
    } else if (p->cand_taken == 0) {
        if (p->cand_n) best = &p->cand[p->cand_best]; /* found as they were scored */
    } else {
        for (size_t i = 0; i < p->cand_n; i++) {
            struct cand *c = &p->cand[i];
            if (c->b && (!best || victim_order(c, best) < 0)) best = c;
        }
    }
    if (!best) return NULL;
    p->cand_taken++;
    struct blk *v = best->b;
    best->b = NULL;
    return v;
}

/* A copy or set works wherever its block is (the copy engines reach host
 * memory): one of a block that is not resident moves nothing and evicts
 * nothing, and the block stays where it is, on the host. A block that has
 * never been anywhere is created on the device if it fits as it is, else on
 * the host (out->to_host: the caller places it there before the copy, so
 * that the driver does not). A kernel access then fetches it as any other.
 * after: the cache's resident bytes with the block in; for the real cache
 * and every shadow alike. */
static bool copy_stays_on_host(const struct swap_policy *p, bool resident, bool on_host,
                               uint64_t after)
{
    return !resident && (on_host || after > p->prm.budget_bytes);
}

/* Replays one access in shadow cache k (no decision, only its cost). */
static int shadow_access(struct swap_policy *p, int k, struct blk *b, uint64_t size, bool is_write,
                         bool by_copy)
{
    uint64_t old = b->s_res[k] ? b->size : 0;
    uint64_t after = p->s_resident[k] - old + size;
    if (by_copy && copy_stays_on_host(p, b->s_res[k], b->s_host[k], after)) {
        b->s_host[k] = true;
        return 0;
    }
    /* SH_NOAHEAD ranks as the real cache does (make_room) */
    int rk = k == SH_NOAHEAD ? p->follow : k, converge = -1;
    uint64_t period = swap_history_period(p->hist);
    if (k == SH_NOAHEAD && period && p->now - p->follow_since >= CONVERGE_PERIODS * period)
        converge = p->follow;
    for (int pass = converge >= 0 ? 0 : 1; pass < 2 && after > p->prm.budget_bytes; pass++) {
        enum rank how = policy_shadows[rk].how;
        if (how >= RANK_PREDICT && !period) how = RANK_LRU;
        int n = policy_rank_victims(p, b, k, pass == 0 ? converge : -1, how,
                                    policy_shadows[rk].clean_weight);
        if (n < 0) return n;
        for (struct blk *v; after > p->prm.budget_bytes && (v = policy_next_victim(p));) {
            if (v->s_dirty[k]) {
                p->s_cost[k] += (double)v->size;
                p->s_long[k] += (double)v->size;
            }
            v->s_res[k] = v->s_dirty[k] = false;
            v->s_host[k] = true;
            after -= v->size;
        }
    }
    if (after > p->prm.budget_bytes) return 0; /* overflow: left to demand paging */
    if (!b->s_res[k] && b->s_host[k]) {
        p->s_cost[k] += (double)size;
        p->s_long[k] += (double)size;
    }
    p->s_resident[k] = after;
    b->s_res[k] = true;
    b->s_dirty[k] = b->s_dirty[k] || is_write;
    return 0;
}

/* The block with this id; a new one (not resident, not pinned, of this
 * size) when there is none. NULL when out of memory. */
static struct blk *blk_find_or_add(struct swap_policy *p, uint64_t block, uint64_t size)
{
    struct blk *b;
    HASH_FIND(hh, p->blocks, &block, sizeof(block), b);
    if (b) return b;
    b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    b->id = block;
    b->size = size;
    b->pin_launch = NOT_PINNED;
    HASH_ADD(hh, p->blocks, id, sizeof(b->id), b);
    if (!UTH_ADDED(b, hh)) {
        free(b);
        return NULL;
    }
    return b;
}

/* Evicts the real cache's victims for b (ranked as the followed shadow
 * ranks them) until *after, the resident bytes once b is in, fits the
 * budget; fills out's eviction list. -ENOSPC (counted) when even every
 * unpinned block would not make room: nothing is evicted. -ENOMEM. */
static int make_room(struct swap_policy *p, const struct blk *b, uint64_t *after,
                     struct swap_decision *out)
{
    /* What evictions could free: every resident block but b and the
     * current launch's. */
    uint64_t movable =
        p->resident - p->pinned_resident - (b->resident && !policy_pinned(p, b) ? b->size : 0);
    if (*after - movable > p->prm.budget_bytes) {
        p->c.overflows++;
        return -ENOSPC;
    }
    enum rank how = RANK_LRU;
    double cw = p->clean_weight;
    int converge = -1;
    if (p->prm.kind == SWAP_POLICY_MIN) how = RANK_PREDICT;
    if (p->prm.kind == SWAP_POLICY_HISTORY) {
        how = policy_shadows[p->follow].how;
        cw = policy_shadows[p->follow].clean_weight;
        uint64_t period = swap_history_period(p->hist);
        if (how >= RANK_PREDICT && !period) how = RANK_LRU;
        if (period && p->now - p->follow_since >= CONVERGE_PERIODS * period) converge = p->follow;
    }
    /* Converging: first the blocks the followed shadow does not hold, in
     * the ranking's order; then, if that was not enough, all of them. */
    for (int pass = converge >= 0 ? 0 : 1; pass < 2 && *after > p->prm.budget_bytes; pass++) {
        int n = policy_rank_victims(p, b, -1, pass == 0 ? converge : -1, how, cw);
        if (n < 0) return n;
        if (policy_grow((void **)&p->evict, &p->evict_cap, out->n_evict + (size_t)n,
                        sizeof(*p->evict)))
            return -ENOMEM;
        out->evict = p->evict;
        for (struct blk *v; *after > p->prm.budget_bytes && (v = policy_next_victim(p));) {
            p->evict[out->n_evict++] =
                (struct swap_evict){.block = v->id, .bytes = v->size, .writeback = v->dirty};
            p->c.evictions++;
            if (v->dirty) {
                p->c.dirty_evictions++;
                p->c.d2h_bytes += v->size;
                p->real_long += (double)v->size;
            }
            v->resident = false;
            v->dirty = false;
            v->has_host = true;
            if (v->ahead_fetched) p->c.prefetches_unused++;
            v->ahead_fetched = false;
            *after -= v->size;
        }
    }
    return 0;
}

static int access_common(struct swap_policy *p, uint64_t block, uint64_t size, bool is_write,
                         bool by_copy, uint64_t next_use, struct swap_decision *out)
{
    if (!p || !out || size == 0) return -EINVAL;
    *out = (struct swap_decision){.evict = p->evict};
    if (p->hist) {
        int rc = swap_history_record(p->hist, block, size, is_write);
        if (rc) return rc;
    }
    struct blk *b = blk_find_or_add(p, block, size);
    if (!b) return -ENOMEM;
    uint64_t charged = pin_charge(p, b);
    if (p->hist) {
        for (int k = SH_LRU; k < SH_ALL; k++) {
            int rc = shadow_access(p, k, b, size, is_write, by_copy);
            if (rc) return rc;
        }
    }
    /* Bytes this access adds to the resident total (a resident block may
     * have been reallocated larger at the same id). */
    uint64_t old = b->resident ? b->size : 0;
    uint64_t after = p->resident - old + size;
    bool on_host = by_copy && copy_stays_on_host(p, b->resident, b->has_host, after);
    if (on_host) {
        out->to_host = !b->has_host;
        b->has_host = true; /* a copy there keeps the host copy current */
        after = p->resident;
    } else if (after > p->prm.budget_bytes) {
        int rc = make_room(p, b, &after, out);
        if (rc) return rc;
    }
    if (!on_host && !b->resident) {
        if (b->has_host) {
            out->fetch = true;
            out->predicted = !by_copy && b->ahead_seen;
            p->c.faults++;
            p->c.h2d_bytes += size;
            p->real_long += (double)size;
        } else {
            out->first_touch = true;
            p->c.first_touches++;
        }
    }
    if (!on_host) {
        b->resident = true;
        b->dirty = b->dirty || is_write;
    }
    p->resident = after;
    b->size = size;
    b->last_use = ++p->access_count;
    if (b->pin_launch != p->now) {
        b->gap = b->pin_launch == NOT_PINNED ? 0 : p->now - b->pin_launch;
        if (b->gap != 1) b->wakes_by_copy = by_copy;
        b->burst = b->gap == 1 ? b->burst + 1 : 0;
        if (b->gap > 1) b->wide_gap = b->gap;
    }
    b->pin_launch = p->now;
    b->next_use = next_use;
    if (!by_copy) b->ahead_seen = b->ahead_fetched = false;
    p->pinned_resident = p->pinned_resident - charged + pin_charge(p, b);
    return 0;
}

int swap_policy_access(struct swap_policy *p, uint64_t block, uint64_t size, bool is_write,
                       struct swap_decision *out)
{
    if (p && p->prm.kind == SWAP_POLICY_MIN) return -EINVAL;
    return access_common(p, block, size, is_write, false, SWAP_NEVER, out);
}

int swap_policy_copy(struct swap_policy *p, uint64_t block, uint64_t size, bool is_write,
                     struct swap_decision *out)
{
    if (p && p->prm.kind == SWAP_POLICY_MIN) return -EINVAL;
    return access_common(p, block, size, is_write, true, SWAP_NEVER, out);
}

int swap_policy_access_known(struct swap_policy *p, uint64_t block, uint64_t size, bool is_write,
                             bool by_copy, uint64_t next_use, struct swap_decision *out)
{
    if (!p || p->prm.kind != SWAP_POLICY_MIN) return -EINVAL;
    return access_common(p, block, size, is_write, by_copy, next_use, out);
}

int swap_policy_free(struct swap_policy *p, uint64_t block)
{
    if (!p) return -EINVAL;
    if (p->hist) swap_history_retire(p->hist, block);
    struct blk *b;
    HASH_FIND(hh, p->blocks, &block, sizeof(block), b);
    if (!b) return -ENOENT;
    if (b->resident) p->resident -= b->size;
    if (b->ahead_fetched) p->c.prefetches_unused++;
    p->pinned_resident -= pin_charge(p, b);
    for (int k = SH_LRU; k < SH_ALL; k++)
        if (b->s_res[k]) p->s_resident[k] -= b->size;
    HASH_DEL(p->blocks, b);
    free(b);
    return 0;
}

/* A period was just learned: until now every prediction shadow ranked by
 * recency, so its state and cost are lru's, while the real cache may have
 * followed mru. Each prediction shadow restarts from what the real cache
 * holds, charged what the real cache was charged, so that from here on
 * they compare what following each prediction would add to what was done:
 * the real cache follows a prediction from the first launch it has one. */
static void shadows_restart(struct swap_policy *p)
{
    int f = p->follow;
    for (int k = SH_FIRST_PREDICT; k < SH_ALL; k++) {
        p->s_cost[k] = p->s_cost[f];
        p->s_long[k] = p->s_long[f];
        p->s_resident[k] = p->resident;
    }
    p->real_long = p->s_long[f]; /* from here the fetch-ahead check compares like with like */
    for (struct blk *b = p->blocks; b; b = b->hh.next)
        for (int k = SH_FIRST_PREDICT; k < SH_ALL; k++) {
            b->s_res[k] = b->resident;
            b->s_dirty[k] = b->dirty;
            b->s_host[k] = b->has_host;
        }
}

void swap_policy_next_launch(struct swap_policy *p)
{
    if (!p) return;
    p->now++;
    p->pinned_resident = 0; /* nothing is pinned in a new launch */
    p->c.launches++;
    if (p->hist) {
        swap_history_next_launch(p->hist);
        uint64_t period = swap_history_period(p->hist);
        if (period && !p->last_period) shadows_restart(p);
        p->last_period = period;
        for (int k = SH_LRU; k < SH_ALL; k++)
            p->s_cost[k] *= p->decay;
        double lw = 2.0 * (double)swap_history_period(p->hist);
        if (lw < SHADOW_WINDOW) lw = SHADOW_WINDOW;
        for (int k = SH_LRU; k < SH_ALL; k++)
            p->s_long[k] *= 1.0 - 1.0 / lw;
        p->real_long *= 1.0 - 1.0 / lw;
        /* The prediction shadow that cost least over the long window (ties:
         * the current one). With a period known, the real cache follows it
         * where it has cost less than lru over that window, else lru: the
         * long window alone decides (the short one flips by phase, and each
         * switch pays for the moves between contents). Before a period, by
         * the short window: the expert while it has recently cost less than
         * recency, mru while that costs clearly less than every other (see
         * "Robustness"). */
        for (int k = SH_FIRST_PREDICT; k < SH_N; k++)
            if (p->s_long[k] < p->s_long[p->expert]) p->expert = k;
        int follow = p->follow;
        if (period) {
            p->follow = p->s_long[p->expert] < p->s_long[SH_LRU] ? p->expert : SH_LRU;
        } else {
            p->follow = p->s_cost[p->expert] < p->s_cost[SH_LRU] ? p->expert : SH_LRU;
            bool mru = true;
            double margin = follow == SH_MRU ? MRU_STAY : MRU_MARGIN;
            for (int k = 0; k < SH_N; k++)
                if (k != SH_MRU && !(p->s_cost[SH_MRU] < margin * p->s_cost[k])) mru = false;
            if (mru) p->follow = SH_MRU;
        }
        if (swap_history_miss_run(p->hist) >= FALLBACK_RUN) p->follow = SH_LRU;
        if (p->follow != follow) p->follow_since = p->now;
    }
}

void swap_policy_counters(const struct swap_policy *p, struct swap_counters *out)
{
    *out = p->c;
}
uint64_t swap_policy_resident_bytes(const struct swap_policy *p)
{
    return p->resident;
}

bool swap_policy_is_resident(const struct swap_policy *p, uint64_t block)
{
    struct blk *b;
    HASH_FIND(hh, p->blocks, &block, sizeof(block), b);
    return b && b->resident;
}

const struct swap_history *swap_policy_history(const struct swap_policy *p)
{
    return p->hist;
}

static const char *const kind_names[] = {"lru", "history", "min"};

const char *swap_policy_kind_name(enum swap_policy_kind kind)
{
    return kind <= SWAP_POLICY_MIN ? kind_names[kind] : "?";
}

int swap_policy_kind_parse(const char *name, enum swap_policy_kind *out)
{
    for (int k = 0; k <= SWAP_POLICY_MIN; k++)
        if (name && strcmp(name, kind_names[k]) == 0) {
            *out = (enum swap_policy_kind)k;
            return 0;
        }
    return -EINVAL;
}
