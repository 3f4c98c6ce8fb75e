/* swap_history: the bounded-memory access recorder behind the history policy.
 *
 * Four structures, all bounded:
 * - an event ring: the last max_events accesses (logical time, block, bytes,
 *   read/write). Each event links to the previous event of the same block by
 *   sequence number, so a block's recent accesses are a short walk away; a
 *   link whose slot has since been overwritten is detected by the sequence
 *   number stored in the slot and ends the walk.
 * - a launch ring: one 64-bit signature per completed launch (a hash of the
 *   ordered (block, read/write) list it touched; sizes are left out so that
 *   shape jitter does not change it), for the last max_launches launches;
 *   and beside it a loose signature, the same with each block first
 *   accessed in that launch since its allocation hashed by its size instead
 *   (see "Loose signatures" below).
 * - a uthash table with one fixed-size record per live block (its latest
 *   event), kept after a free while its events are in the ring (a free is
 *   an event of its own).
 * - a context table (anchors): two slots per launch of the launch ring,
 *   each the latest launch that ended one context (a launch's signature
 *   after its predecessor's); lossy: a colliding context overwrites.
 * Memory is therefore capacities x record sizes + live blocks x record size,
 * whatever the length of the run.
 *
 * Period detection and next-use prediction are explained at the top of
 * swap_policy.c; this file implements them. */
#include "swap.h"

#include <errno.h>
#include <stdlib.h>

#include "uthash_wrap.h"

#define NO_SEQ UINT64_MAX
/* A repeat may land this many launches early or late (an extra kernel here,
 * a missing one there) and still count as a match. */
#define PHASE_SLACK 4
/* Share of launches that must repeat at the candidate period. */
#define MATCH_MIN 0.6
/* A longer candidate replaces a shorter one only if it matches this much better. */
#define MATCH_BETTER 0.01
/* Candidate periods verified per detection, at most. */
#define MAX_CANDIDATES 32
/* The fewest launches a period is verified on. */
#define MIN_WINDOW 16
/* A walk longer than this means the block is used many times per period: hot. */
#define MAX_WALK 64
/* Anchors (see swap_policy.c, "Anchors"): this many consecutive launches
 * must find their context at the same distance back before that distance
 * is trusted. */
#define ANCHOR_RUN 8
/* Loose signatures: what a block new in its launch hashes as, beside its
 * size (so that it never equals an id's hash by design). */
#define LOOSE_TAG 0x5bd1e9955bd1e995ULL

struct hist_event {
    uint64_t seq; /* which write of this slot; a link to another seq is stale */
    uint64_t time;
    uint64_t block;
    uint64_t bytes;
    uint64_t prev_seq; /* the same block's previous event, or NO_SEQ */
    uint8_t is_write;
    uint8_t is_free; /* the block was freed (not an access) */
};

struct hist_block {
    uint64_t id;
    uint64_t last_seq;
    uint64_t bytes; /* size at its latest access */
    bool retired;   /* freed; the past stays for an allocation reusing the id */
    uint64_t born;  /* launch of the first access of its current allocation */
    UT_hash_handle hh;
};

struct hist_ctx {
    uint64_t key, time;
};

struct swap_history {
    struct hist_event *ev;
    uint32_t ev_cap;
    uint64_t ev_count; /* events ever recorded; the next seq */
    uint64_t *sig;     /* sig[t % sig_cap] for completed launches t */
    uint32_t sig_cap;
    uint64_t now;     /* current launch; launches < now are complete */
    uint64_t cur_sig; /* signature of the current launch so far */
    uint64_t *loose;  /* loose[t % sig_cap]: loose signatures, as sig */
    uint64_t cur_loose;
    struct hist_block *blocks;
    uint64_t period;      /* 0 = none learned */
    uint64_t shift;       /* the period as seen at the latest launch (phase-corrected) */
    uint64_t next_detect; /* launch at which to (re)detect */
    uint64_t retired;     /* retired records */
    uint64_t sweep_at;    /* sweep the retired records when there are this many */
    /* anchors: context (two consecutive signatures) -> latest launch that
     * ended it, an open table of ctx_cap slots (a power of two; anchor_of) */
    struct hist_ctx *ctx;
    uint64_t ctx_cap;
    uint64_t anchor;     /* distance back to the latest launch's context, 0 = none */
    uint64_t anchor_run; /* consecutive launches with about that distance */
    uint64_t ashift;     /* a trusted anchor distance other than the period's, 0 = none */
    uint64_t miss_run;   /* consecutive launches matched neither near a period back nor by
                          * re-anchoring (swap_history_miss_run) */
};

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

int swap_history_create(uint32_t max_events, uint32_t max_launches, struct swap_history **out)
{
    if (!out) return -EINVAL;
    *out = NULL;
    struct swap_history *h = calloc(1, sizeof(*h));
    if (!h) return -ENOMEM;
    h->ev_cap = max_events ? max_events : SWAP_HISTORY_DEFAULT_EVENTS;
    h->sig_cap = max_launches ? max_launches : SWAP_HISTORY_DEFAULT_LAUNCHES;
    h->ev = calloc(h->ev_cap, sizeof(*h->ev));
    h->sig = calloc(h->sig_cap, sizeof(*h->sig));
    h->loose = calloc(h->sig_cap, sizeof(*h->loose));
    h->ctx_cap = 16;
    while (h->ctx_cap < 2 * (uint64_t)h->sig_cap)
        h->ctx_cap *= 2;
    h->ctx = calloc(h->ctx_cap, sizeof(*h->ctx));
    if (!h->ev || !h->sig || !h->loose || !h->ctx) {
        swap_history_destroy(h);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < h->ev_cap; i++)
        h->ev[i].seq = NO_SEQ;
    h->sweep_at = 1024;
    *out = h;
    return 0;
}

void swap_history_destroy(struct swap_history *h)
{
    if (!h) return;
    struct hist_block *b, *tmp;
    HASH_ITER(hh, h->blocks, b, tmp)
    {
        HASH_DEL(h->blocks, b);
        free(b);
    }
    free(h->ev);
    free(h->sig);
    free(h->loose);
    free(h->ctx);
    free(h);
}

static const struct hist_event *event_at(const struct swap_history *h, uint64_t seq)
{
    if (seq == NO_SEQ) return NULL;
    const struct hist_event *e = &h->ev[seq % h->ev_cap];
    return e->seq == seq ? e : NULL;
}

int swap_history_record(struct swap_history *h, uint64_t block, uint64_t bytes, bool is_write)
{
    struct hist_block *b;
    HASH_FIND(hh, h->blocks, &block, sizeof(block), b);
    if (!b) {
        b = calloc(1, sizeof(*b));
        if (!b) return -ENOMEM;
        b->id = block;
        b->last_seq = NO_SEQ;
        b->born = h->now;
        HASH_ADD(hh, h->blocks, id, sizeof(b->id), b);
        if (!UTH_ADDED(b, hh)) {
            free(b);
            return -ENOMEM;
        }
    }
    if (b->retired) {
        /* A new allocation at a freed block's id: the same role (a caching
         * allocator hands the same address to the same tensor every
         * iteration) continues its past; another size is another role. */
        b->retired = false;
        b->born = h->now;
        h->retired--;
        if (b->bytes != bytes) b->last_seq = NO_SEQ;
    }
    b->bytes = bytes;
    uint64_t seq = h->ev_count++;
    struct hist_event *e = &h->ev[seq % h->ev_cap];
    *e = (struct hist_event){.seq = seq,
                             .time = h->now,
                             .block = block,
                             .bytes = bytes,
                             .prev_seq = b->last_seq,
                             .is_write = is_write};
    b->last_seq = seq;
    uint64_t id_part = block * 2 + (is_write ? 1 : 0);
    h->cur_sig = mix64(h->cur_sig ^ mix64(id_part));
    uint64_t loose_part =
        b->born == h->now ? (bytes * 2 + (is_write ? 1 : 0)) ^ LOOSE_TAG : id_part;
    h->cur_loose = mix64(h->cur_loose ^ mix64(loose_part));
    return 0;
}

static const struct hist_event *event_at(const struct swap_history *h, uint64_t seq);

void swap_history_forget(struct swap_history *h, uint64_t block)
{
    struct hist_block *b;
    HASH_FIND(hh, h->blocks, &block, sizeof(block), b);
    if (!b) return;
    if (b->retired) h->retired--;
    HASH_DEL(h->blocks, b);
    free(b);
}

/* Drop the retired records whose past has left the event ring: at most
 * ev_cap retired records can still have one, so the table stays bounded. */
static void sweep_retired(struct swap_history *h)
{
    struct hist_block *b, *tmp;
    HASH_ITER(hh, h->blocks, b, tmp)
    {
        if (b->retired && !event_at(h, b->last_seq)) swap_history_forget(h, b->id);
    }
    h->sweep_at = h->retired * 2 > 1024 ? h->retired * 2 : 1024;
}

void swap_history_retire(struct swap_history *h, uint64_t block)
{
    struct hist_block *b;
    HASH_FIND(hh, h->blocks, &block, sizeof(block), b);
    if (!b || b->retired) return;
    /* The free enters the block's chain: one period later, the same role
     * is predicted to die then (swap_history_predict_use). */
    uint64_t seq = h->ev_count++;
    h->ev[seq % h->ev_cap] = (struct hist_event){.seq = seq,
                                                 .time = h->now,
                                                 .block = block,
                                                 .bytes = b->bytes,
                                                 .prev_seq = b->last_seq,
                                                 .is_free = 1};
    b->last_seq = seq;
    b->retired = true;
    if (++h->retired >= h->sweep_at) sweep_retired(h);
}

uint64_t swap_history_now(const struct swap_history *h)
{
    return h->now;
}
uint64_t swap_history_period(const struct swap_history *h)
{
    return h->period;
}

uint64_t swap_history_miss_run(const struct swap_history *h)
{
    return h->miss_run;
}

size_t swap_history_memory(const struct swap_history *h)
{
    size_t n = sizeof(*h) + (size_t)h->ev_cap * sizeof(*h->ev) +
               (size_t)h->sig_cap * (sizeof(*h->sig) + sizeof(*h->loose)) +
               (size_t)h->ctx_cap * sizeof(*h->ctx);
    n += (size_t)HASH_COUNT(h->blocks) * sizeof(struct hist_block);
    if (h->blocks) n += HASH_OVERHEAD(hh, h->blocks);
    return n;
}

/* Oldest launch whose signature is still in the ring. */
static uint64_t oldest_launch(const struct swap_history *h)
{
    return h->now > h->sig_cap ? h->now - h->sig_cap : 0;
}

/* Logical time of the oldest event still in the ring (now if none). */
static uint64_t oldest_event_time(const struct swap_history *h)
{
    if (h->ev_count == 0) return h->now;
    uint64_t seq = h->ev_count > h->ev_cap ? h->ev_count - h->ev_cap : 0;
    return h->ev[seq % h->ev_cap].time;
}

/* Launch t's entry in `ring` (h->sig or h->loose), if t is a completed
 * launch still in the ring. */
static bool sig_at(const struct swap_history *h, const uint64_t *ring, uint64_t t, uint64_t *out)
{
    if (t >= h->now || t < oldest_launch(h)) return false;
    *out = ring[t % h->sig_cap];
    return true;
}

/* Signature of a launch known to be in the ring. */
static uint64_t sig_of(const struct swap_history *h, uint64_t t)
{
    return h->sig[t % h->sig_cap];
}

/* How far a repeat at period P may land from its place: PHASE_SLACK, less
 * for short periods so that the search never reaches the launch itself. */
static uint64_t slack(uint64_t P)
{
    return P / 2 < PHASE_SLACK ? (P ? (P - 1) / 2 : 0) : PHASE_SLACK;
}

/* Time of a launch with signature s in `ring` (h->sig or h->loose) within
 * slack(P) of target, closest first; false if none. */
static bool find_near(const struct swap_history *h, const uint64_t *ring, uint64_t s,
                      uint64_t target, uint64_t P, uint64_t *found)
{
    for (uint64_t d = 0; d <= slack(P); d++) {
        uint64_t v;
        if (sig_at(h, ring, target - d, &v) && v == s && target >= d) {
            *found = target - d;
            return true;
        }
        if (d && sig_at(h, ring, target + d, &v) && v == s) {
            *found = target + d;
            return true;
        }
    }
    return false;
}

/* Share of the last `window` launches whose signature recurs about P
 * launches earlier. Gives up (returns 0) once more than max_miss miss. */
static double match_share(const struct swap_history *h, uint64_t P, uint64_t window,
                          uint64_t max_miss)
{
    uint64_t last = h->now - 1, miss = 0, dummy;
    for (uint64_t i = last - window + 1; i <= last; i++) {
        if (!find_near(h, h->sig, sig_of(h, i), i - P, P, &dummy) && ++miss > max_miss) return 0.0;
    }
    return 1.0 - (double)miss / (double)window;
}

/* Launches that must be retained before period P can be verified: one
 * period and a quarter of the next (at least MIN_WINDOW launches), so that
 * a loop is learned early in its second repetition: warm-up counts. */
static uint64_t needed(uint64_t P)
{
    uint64_t w = P / 4 > MIN_WINDOW ? P / 4 : MIN_WINDOW;
    return P + (w < P ? w : P) + PHASE_SLACK;
}

/* Verify candidate P against the recent launches (see swap_policy.c): it
 * is kept if it beats the best so far under the rules there. */
static void try_candidate(const struct swap_history *h, uint64_t P, uint64_t n, uint64_t *best_p,
                          double *best)
{
    uint64_t window = n - P - PHASE_SLACK;
    if (window > n / 2) window = n / 2;
    double floor = *best > 0 ? *best + MATCH_BETTER : MATCH_MIN;
    if (floor > 1.0) return;
    uint64_t max_miss = (uint64_t)((1.0 - floor) * (double)window);
    double share = match_share(h, P, window, max_miss);
    if (share >= floor) {
        *best = share;
        *best_p = P;
    }
}

/* Whether a check of period P can run: the launch ring holds enough
 * launches (n) and the event ring reaches back far enough (covered). */
static bool verifiable(uint64_t P, uint64_t n, uint64_t covered)
{
    return needed(P) <= n && P + PHASE_SLACK + 1 <= covered;
}

/* Whether detect_period keeps the current period although the check did
 * not pass it, best_p being what passed instead (0: nothing): a trusted
 * anchor still finds the launches about a period back, and best_p, if
 * any, is about a multiple of the period. An inner loop whose count varies
 * from one iteration to the next (a decoder run for as many steps as the
 * batch's target length) moves an iteration's launches further from the
 * last one's than the check's +-4, while the anchors follow them; two or
 * more iterations back, lengths may happen to add up (seq2seq-attn-train
 * took 4,735 launches, two iterations, at launch 17,094, and moved more
 * than lru in the two iterations after). A multiple that beats a period
 * which passes (a full step under gradient accumulation) still wins. */
static bool keep_anchored_period(const struct swap_history *h, uint64_t best_p, uint64_t n,
                                 uint64_t covered)
{
    uint64_t P = h->period, a = h->anchor;
    if (!P || best_p == P || !a || h->anchor_run < ANCHOR_RUN || a + P / 4 < P || a > P + P / 4 ||
        !verifiable(P, n, covered))
        return false;
    if (best_p) {
        uint64_t k = (best_p + P / 2) / P, off = best_p > k * P ? best_p - k * P : k * P - best_p;
        if (best_p <= P + P / 2 || k < 2 || off > best_p / 10) return false;
    }
    uint64_t window = n - P - PHASE_SLACK;
    if (window > n / 2) window = n / 2;
    return match_share(h, P, window, (uint64_t)((1.0 - MATCH_MIN) * (double)window)) < MATCH_MIN;
}

/* Learn the period. Candidates: the current period, if any (so that one
 * odd launch does not make it forgotten), and the distances back to earlier
 * launches with the latest launch's signature. Verified shortest first; a
 * longer one replaces a shorter one only if it repeats clearly better
 * (accumulation: the micro-batch repeats, the optimizer step only once per
 * full period). */
static void detect_period(struct swap_history *h)
{
    uint64_t first = oldest_launch(h), last = h->now - 1, s = sig_of(h, last);
    uint64_t n = h->now - first;
    uint64_t covered = h->now - oldest_event_time(h); /* launches the event ring reaches back */
    uint64_t cand[MAX_CANDIDATES + 1];
    int nc = 0;
    for (uint64_t t = last; t-- > first && nc < MAX_CANDIDATES;) {
        if (sig_of(h, t) != s) continue;
        uint64_t P = last - t;
        if (!verifiable(P, n, covered)) break;
        cand[nc++] = P;
    }
    uint64_t best_p = 0;
    double best = 0.0;
    bool current_done = !h->period || !verifiable(h->period, n, covered);
    for (int i = 0; i <= nc; i++) {
        uint64_t P = i < nc ? cand[i] : UINT64_MAX;
        if (!current_done && h->period <= P) {
            current_done = true;
            if (h->period < P) try_candidate(h, h->period, n, &best_p, &best);
        }
        if (i < nc) try_candidate(h, P, n, &best_p, &best);
    }
    if (keep_anchored_period(h, best_p, n, covered)) best_p = h->period;
    if (best_p != h->period) h->shift = best_p;
    h->period = best_p;
}

/* Whether context slot c still answers for launch `last`: in the rings,
 * and no further back than half the launch ring (the longest period
 * swap.h promises to learn). An empty slot (key 0) never does. */
static bool ctx_usable(const struct swap_history *h, const struct hist_ctx *c, uint64_t last)
{
    return c->key && c->time >= oldest_launch(h) && c->time >= oldest_event_time(h) &&
           2 * (last - c->time) <= h->sig_cap;
}

/* Anchor of launch `last` (just completed): how far back the same context
 * (its signature after its predecessor's) last ended, 0 if never or no
 * longer usable; then records this occurrence.
 * Trap: signatures hash block addresses, which the driver places somewhere
 * else in every run. A table that lost a context to a colliding one (as a
 * direct-mapped one did) made the same program move other bytes in other
 * runs (2026-11-27 H100: 1 run in 4). So a context is looked for in
 * CTX_PROBE slots from its home and takes a stale one, or the oldest only
 * when all are usable: at most sig_cap / 2 contexts are usable at once, in
 * 2 * sig_cap slots, so in practice none is lost and the answers depend on
 * the order of accesses alone. */
#define CTX_PROBE 16
static uint64_t anchor_of(struct swap_history *h, uint64_t last)
{
    uint64_t key = mix64(sig_of(h, last) ^ mix64(last ? sig_of(h, last - 1) + 1 : 0)) | 1;
    struct hist_ctx *found = NULL, *stale = NULL, *oldest = NULL;
    for (uint64_t i = 0; i < CTX_PROBE && !found; i++) {
        struct hist_ctx *c = &h->ctx[(key + i) & (h->ctx_cap - 1)];
        if (c->key == key)
            found = c;
        else if (!stale && !ctx_usable(h, c, last))
            stale = c;
        else if (!oldest || c->time < oldest->time)
            oldest = c;
    }
    uint64_t dist = found && ctx_usable(h, found, last) ? last - found->time : 0;
    struct hist_ctx *slot = found ? found : stale ? stale : oldest;
    *slot = (struct hist_ctx){.key = key, .time = last};
    return dist;
}

/* Loose signatures. A caching allocator settles after a step or two: in
 * the first iteration it gives some activations other addresses than in
 * all later ones (dcgan-train: 28 of its second iteration's 120 launches
 * touch the same blocks as the first's, 103-107 between later ones), so by
 * id most launches of the second iteration do not recur one iteration
 * back, and an anchor formed only in the third. Whether launch `last`
 * recurs about d launches back with the blocks new in it taken by size:
 * such a launch counts neither for an anchor at d nor against it. Loose
 * signatures never propose a distance (the same shapes recur every layer:
 * signing every block by size learned periods of one layer). */
static bool loose_recurs(const struct swap_history *h, uint64_t last, uint64_t d)
{
    uint64_t at;
    return last >= d && find_near(h, h->loose, h->loose[last % h->sig_cap], last - d, d, &at);
}

void swap_history_next_launch(struct swap_history *h)
{
    h->sig[h->now % h->sig_cap] = h->cur_sig;
    h->loose[h->now % h->sig_cap] = h->cur_loose;
    h->cur_sig = 0;
    h->cur_loose = 0;
    h->now++;
    uint64_t last = h->now - 1;
    /* Anchors: a run of launches that all recur at about the same distance
     * back is a repetition, before a period can be verified (a period is
     * adopted from it) and when an iteration's length changes (the shift
     * follows it). */
    uint64_t a = anchor_of(h, last), cand = h->anchor, raw = a;
    if (a && cand && a + slack(cand) >= cand && a <= cand + slack(cand)) {
        if (h->anchor_run < 2 * ANCHOR_RUN) h->anchor_run++;
        h->anchor = a; /* follows an inserted or dropped launch */
    } else if (cand && loose_recurs(h, last, cand)) {
        /* the same launch but for where new blocks were put: no evidence */
    } else if (h->anchor_run > 0) {
        h->anchor_run--; /* an odd launch (or one that recurs elsewhere) */
    } else {
        h->anchor = a;
        h->anchor_run = a ? 1 : 0;
    }
    a = h->anchor;
    bool anchored = a && h->anchor_run >= ANCHOR_RUN;
    if (h->now >= h->next_detect) {
        detect_period(h);
        h->next_detect = h->now + (h->period ? (h->period > 16 ? h->period : 16) : 8);
    }
    if (anchored && !h->period) {
        h->period = a;
        h->next_detect = h->now + a + (a / 4 > MIN_WINDOW ? a / 4 : MIN_WINDOW);
    }
    /* Phase correction: where did the launch just completed occur one period
     * ago? An inserted or dropped kernel shifts the rest of the period by one;
     * an anchored run moves it by its distance, if that is within a quarter
     * of the period (a shorter repetition inside the period, a micro-batch
     * under gradient accumulation, must not replace it). */
    h->ashift = 0;
    if (anchored && a + h->period / 4 >= h->period && a <= h->period + h->period / 4) {
        h->shift = a;
        h->miss_run = 0;
    } else if (h->period) {
        if (anchored) h->ashift = a;
        uint64_t at;
        if (last >= h->period &&
            find_near(h, h->sig, sig_of(h, last), last - h->period, h->period, &at)) {
            h->shift = last - at;
            h->miss_run = 0;
        } else if (raw && 2 * raw >= h->period && raw <= 2 * h->period) {
            /* Re-anchor: the launch's context last ended raw launches ago,
             * about a period back (an inner loop ran more or fewer times
             * than one period ago): follow from there at once. */
            h->shift = raw;
            h->miss_run = 0;
        } else if (anchored) {
            h->miss_run = 0; /* recurs at the trusted anchor: the anchored predictions match */
        } else {
            h->miss_run++;
        }
    } else {
        h->miss_run = 0; /* no prediction: ranked by recency anyway */
    }
}

/* Earliest event of the block at or after now - shift, in the last period:
 * its time + shift, and whether that event is the block's free. With a
 * trusted anchor at another distance (a repetition inside the period, or
 * across a phase), the anchor's window is asked first and the period's
 * only for a block the anchor's window did not see. */
static uint64_t predict_event(const struct swap_history *h, uint64_t block, bool accesses_only,
                              bool anchored, bool *dies, bool *no_past)
{
    bool ignored;
    if (!no_past) no_past = &ignored;
    *dies = false;
    *no_past = false;
    if (!h->period) return SWAP_NEVER;
    struct hist_block *b;
    HASH_FIND(hh, h->blocks, &block, sizeof(block), b);
    if (!b) return SWAP_NEVER;
    uint64_t from = h->now >= h->shift ? h->now - h->shift : 0;
    uint64_t afrom = anchored && h->ashift && h->now >= h->ashift ? h->now - h->ashift : SWAP_NEVER;
    uint64_t lo = afrom < from ? afrom : from;
    uint64_t earliest = SWAP_NEVER, aearliest = SWAP_NEVER;
    bool adies = false;
    int steps = 0;
    const struct hist_event *e;
    for (e = event_at(h, b->last_seq); e && e->time >= lo; e = event_at(h, e->prev_seq)) {
        if (accesses_only && e->is_free) continue;
        if (e->time >= from) {
            earliest = e->time;
            *dies = e->is_free;
        }
        if (afrom != SWAP_NEVER && e->time >= afrom) {
            aearliest = e->time;
            adies = e->is_free;
        }
        if (++steps > MAX_WALK) {
            *dies = false;
            return h->now + 1;
        }
    }
    /* The chain ended inside the window: nothing of the block before it. */
    *no_past = !e && earliest != SWAP_NEVER;
    if (aearliest != SWAP_NEVER) {
        *dies = adies;
        return aearliest + h->ashift;
    }
    return earliest == SWAP_NEVER ? SWAP_NEVER : earliest + h->shift;
}

uint64_t swap_history_predict(const struct swap_history *h, uint64_t block)
{
    bool dies;
    return predict_event(h, block, true, false, &dies, NULL);
}

uint64_t swap_history_predict_use(const struct swap_history *h, uint64_t block, bool anchored,
                                  bool *dies, bool *no_past)
{
    return predict_event(h, block, false, anchored, dies, no_past);
}
