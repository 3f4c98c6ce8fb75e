/* swap: the pure-logic half of host swap. An access history recorder and an
 * eviction policy that keeps a process's device-resident bytes under a budget.
 *
 * The caller (the shim, later; the replay tools now) reports, for every
 * launch, each swappable block the launch touches, in order, then ticks to
 * the next launch. Logical time is the launch index: it starts at 0 and
 * advances by one per swap_policy_next_launch(). A memcpy or memset counts as
 * a launch of its own. For each access the policy answers which blocks to
 * evict first and whether the accessed block must be copied in.
 *
 * Cost model (what "bytes moved" counts):
 * - A block's first access ever is a first touch: it is created on the device,
 *   nothing is copied.
 * - An access to a block that is not resident is a fault: it is copied
 *   host->device (size bytes) and becomes resident and clean.
 * - A write makes a resident block dirty (the device copy is newer).
 * - Evicting a dirty block copies it device->host (size bytes); evicting a
 *   clean block costs nothing (its host copy is current). Either way the
 *   host copy is current afterwards.
 * - Blocks already accessed in the current launch are pinned: a kernel needs
 *   all of its blocks at once, so they are never chosen as victims.
 * - resident bytes <= budget always holds after every call.
 *
 * Everything returns 0 or a negative errno. No locking inside: the caller
 * serialises calls on one policy (the shim holds its swap lock). No CUDA, no
 * dl*: libc and uthash only. */
#ifndef SWAP_H
#define SWAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A logical time that never comes: "no next use predicted". */
#define SWAP_NEVER UINT64_MAX

/* ---- access history ---------------------------------------------------- */

/* Bounded-memory access recorder: a ring of the last events (logical time,
 * block, bytes, read/write), a ring of per-launch signatures, and one
 * fixed-size record per live block. It learns the period of the launch
 * sequence and predicts each block's next use from it (see swap_history.c). */
struct swap_history;

/* Defaults for the two ring capacities (0 in create() picks them). */
#define SWAP_HISTORY_DEFAULT_EVENTS (1u << 16)
#define SWAP_HISTORY_DEFAULT_LAUNCHES (1u << 13)

/* Create a recorder holding at most max_events accesses and max_launches
 * launch signatures (0 = default). A period longer than half the retained
 * launches (or events) cannot be learned. -EINVAL, -ENOMEM. */
int swap_history_create(uint32_t max_events, uint32_t max_launches, struct swap_history **out);
void swap_history_destroy(struct swap_history *h);

/* Record one access of the current launch. -ENOMEM if a new block record
 * cannot be allocated (the history is left as it was). */
int swap_history_record(struct swap_history *h, uint64_t block, uint64_t bytes, bool is_write);

/* Close the current launch (its signature enters the ring) and start the
 * next; re-learns the period from time to time. Never fails. */
void swap_history_next_launch(struct swap_history *h);

/* Drop a block's record, so that a new block at the same id starts with no
 * past. */
void swap_history_forget(struct swap_history *h, uint64_t block);

/* The block was freed. Its past stays, so that a new block of the same size
 * at the same id (a caching allocator reusing the address for the same
 * tensor next iteration) continues it; another size starts afresh. Retired
 * records whose events have all left the ring are dropped from time to
 * time, which keeps the memory bounded. */
void swap_history_retire(struct swap_history *h, uint64_t block);

/* The current launch's logical time. */
uint64_t swap_history_now(const struct swap_history *h);

/* The learned period in launches, 0 while none is learned. */
uint64_t swap_history_period(const struct swap_history *h);
/* Consecutive completed launches that recurred neither about a period ago
 * (phase-corrected) nor by re-anchoring on their context: the prediction
 * has stopped matching for this many launches (0 while it matches). */
uint64_t swap_history_miss_run(const struct swap_history *h);

/* Predicted logical time of the block's next access, >= now: now means
 * "later in this launch". SWAP_NEVER when the block was not accessed during
 * the last period (the pattern does not use it); now + 1 for a block used
 * more than 64 times in the last period (hot; the walk stops there). Only
 * meaningful while swap_history_period() != 0. */
uint64_t swap_history_predict(const struct swap_history *h, uint64_t block);

/* The same, with two refinements for the policy. The block's free counts
 * as an event: if, one period ago, the block's role was freed before it was
 * accessed again, *dies is set and the time returned is when it is
 * predicted to be freed (a dead block: dropping it clean costs nothing,
 * and a dirty one need not be written back if it stays until then). With
 * anchored, a trusted anchor (the recent launches recur together at some
 * other distance than the period: a phase, a micro-batch) is asked first,
 * the period only for a block the anchor's window did not see. *no_past
 * (no_past may be NULL) is set when the history holds no event of the block before the window
 * searched: a new address, whose prediction (its first access + the
 * period) only says that it comes back next period. */
uint64_t swap_history_predict_use(const struct swap_history *h, uint64_t block, bool anchored,
                                  bool *dies, bool *no_past);

/* Bytes the recorder holds (rings + block records): bounded by the ring
 * capacities plus a fixed amount per live block. */
size_t swap_history_memory(const struct swap_history *h);

/* ---- eviction policy --------------------------------------------------- */

enum swap_policy_kind {
    SWAP_POLICY_LRU,     /* evict the least recently used block */
    SWAP_POLICY_HISTORY, /* evict the furthest predicted next use; LRU until a period is learned */
    SWAP_POLICY_MIN, /* replay only: furthest known next use, given by swap_policy_access_known() */
};

struct swap_params {
    enum swap_policy_kind kind;
    uint64_t budget_bytes;   /* device-resident bytes allowed, > 0 */
    uint32_t history_events; /* history ring capacities (HISTORY only), 0 = default */
    uint32_t history_launches;
    /* Replay tools only (swap_replay): after every launch, fetch ahead
     * within this many launches (swap_policy_prefetch, at most
     * SWAP_AHEAD_PER_LAUNCH blocks); 0 = none. The policy itself never
     * fetches ahead unasked. */
    uint32_t ahead_horizon;
};

struct swap_counters {
    uint64_t h2d_bytes;     /* fetched host->device */
    uint64_t d2h_bytes;     /* written back device->host (dirty evictions) */
    uint64_t faults;        /* accesses that needed a fetch */
    uint64_t first_touches; /* first accesses (no copy) */
    uint64_t evictions;     /* all evictions */
    uint64_t dirty_evictions;
    uint64_t overflows;  /* accesses refused with -ENOSPC */
    uint64_t launches;   /* completed launches */
    uint64_t prefetches; /* fetches ahead (swap_policy_prefetch); their bytes are in h2d_bytes */
    uint64_t prefetches_unused; /* of those, evicted or freed before any access */
};

/* One block to evict before the access. */
struct swap_evict {
    uint64_t block;
    uint64_t bytes;
    bool writeback; /* dirty: copy device->host first; else just drop the device copy */
};

/* The answer to one access. evict points into the policy and stays valid
 * until the next call on it. Evictions come first, in order, then the fetch. */
struct swap_decision {
    const struct swap_evict *evict;
    size_t n_evict;
    bool fetch;       /* copy the block host->device */
    bool first_touch; /* first access: create on the device, nothing to copy */
    bool to_host;     /* swap_policy_copy of a new block with no room: create it on the host */
    /* fetch on demand of a block that a fetch-ahead scan since its last
     * access saw coming within its horizon but did not fetch: the launch
     * waits for a copy the prediction expected (swap_ahead_used, late) */
    bool predicted;
};

struct swap_policy;

/* Create a policy with the default history sizes. -EINVAL (budget 0, unknown
 * kind), -ENOMEM. */
int swap_policy_create(enum swap_policy_kind kind, uint64_t budget_bytes, struct swap_policy **out);
int swap_policy_create_params(const struct swap_params *params, struct swap_policy **out);
void swap_policy_destroy(struct swap_policy *p);

/* Report that the current launch accesses block (size bytes, its current
 * size; a changed size counts as a reallocation at the same id). Fills *out.
 * -EINVAL: size 0, or kind MIN (use swap_policy_access_known).
 * -ENOSPC: the block cannot fit even after evicting every unpinned block (it
 *   is larger than the budget, or this launch's pinned blocks fill it); it
 *   is left non-resident and nothing is evicted (the access still enters the
 *   history and the overflow count), and the caller leaves it to the
 *   hardware's demand paging.
 * -ENOMEM: no memory for a new block record. */
int swap_policy_access(struct swap_policy *p, uint64_t block, uint64_t size, bool is_write,
                       struct swap_decision *out);

/* The same for a copy or set (cudaMemcpy*, cudaMemset*), which works
 * wherever the block is: a block that is not resident stays where it is
 * (nothing fetched, nothing evicted, a write keeps its host copy current);
 * a new block is created on the device if it fits without an eviction
 * (first_touch), else on the host (to_host). A resident block counts as
 * used. Never -ENOSPC. */
int swap_policy_copy(struct swap_policy *p, uint64_t block, uint64_t size, bool is_write,
                     struct swap_decision *out);

/* Replay only, for kind MIN: swap_policy_access (swap_policy_copy when
 * by_copy), with the logical time of this block's next kernel access after
 * this one (SWAP_NEVER if none) known from the trace; or, with
 * SWAP_DEAD_BIT set, the time the block is freed with no access before
 * (dead). */
#define SWAP_DEAD_BIT (1ULL << 63)
int swap_policy_access_known(struct swap_policy *p, uint64_t block, uint64_t size, bool is_write,
                             bool by_copy, uint64_t next_use, struct swap_decision *out);

/* The block was freed: it leaves the device budget without a write-back.
 * -ENOENT if the policy never saw it. */
int swap_policy_free(struct swap_policy *p, uint64_t block);

/* The current launch is complete; unpins its blocks and advances time. */
void swap_policy_next_launch(struct swap_policy *p);

void swap_policy_counters(const struct swap_policy *p, struct swap_counters *out);
uint64_t swap_policy_resident_bytes(const struct swap_policy *p);
bool swap_policy_is_resident(const struct swap_policy *p, uint64_t block);

/* The policy's history (HISTORY kind), NULL otherwise. */
const struct swap_history *swap_policy_history(const struct swap_policy *p);

/* Replay only: rank clean blocks as if their next use were w times further
 * away (default 2; 1 = plain furthest-next-use). See swap_policy.c. */
void swap_policy_set_clean_weight(struct swap_policy *p, double w);

/* ---- fetch ahead -------------------------------------------------------- */

/* A fetch ahead: the block history predicts next in the coming launches,
 * fetched now so that its copy runs beside the launches before its use.
 * Call it between launches (after swap_policy_next_launch, before the next
 * launch's accesses), up to SWAP_AHEAD_PER_LAUNCH times.
 *
 * *block: the non-resident block (with a host copy) whose predicted next use
 * is the earliest within [now, now + horizon); out: the victims that make
 * its room, taken in the policy's victim order among the blocks whose
 * predicted next use is later than the block's (never one needed sooner;
 * a block predicted dead only when clean, or dirty and dying after that
 * use; never a pinned block), then out->fetch. The block becomes resident
 * and clean and counts its bytes as h2d (a fetch, only earlier, counted in
 * prefetches too); it does not enter the history (no access happened), and
 * ranks as just used for lru. A block evicted by a fetch ahead is not a
 * candidate again in the same launch, nor is a block whose latest first
 * access after an idle launch was a copy (a copy works where the block
 * is: its predicted use needs no fetch). Only for the history kind, while
 * a period is learned, the real cache follows a prediction (not lru, not
 * mru: the prediction is then proving cheaper), and the real cache has
 * recently moved no more than it would have without fetching ahead (a
 * cache beside the shadows replays the real one's rule without it;
 * swap_policy_set_ahead_margin); SWAP_NEVER and blocks predicted dead
 * are never fetched. Predictions from the period (asking a trusted anchor
 * first where the followed ranking does), victims in the followed
 * ranking's order.
 * Cost: one pass over the policy's blocks to find the block (their
 * predictions are computed once per launch and cached, as for victims),
 * and one to rank victims when there is no free room: at most
 * 2 x SWAP_AHEAD_PER_LAUNCH passes per launch and device.
 * 0; -ENOENT: nothing to fetch ahead (no candidate, or no room without
 * evicting a block needed sooner; nothing changed); -EINVAL (horizon 0). */
int swap_policy_prefetch(struct swap_policy *p, uint32_t horizon, uint64_t *block,
                         struct swap_decision *out);

/* At most this many fetches ahead per device and launch. */
#define SWAP_AHEAD_PER_LAUNCH 4

/* The adaptive horizon, shared by the engine and the timing model: how
 * many launches before its predicted use a block's fetch may start. It
 * starts at SWAP_AHEAD_START launches; a launch that had to wait for a
 * block fetched ahead (its copy not complete when the launch was
 * submitted), or that fetched on demand a block the prediction saw coming
 * (swap_decision.predicted), grows it by half (at least one launch), up to
 * SWAP_AHEAD_MAX; after SWAP_AHEAD_SHRINK_AFTER launches in a row whose
 * blocks fetched ahead all arrived early, it shrinks by one launch, down to
 * 1. A launch changes it at most once (swap_ahead_end_launch). Growing fast
 * and shrinking slowly: a late fetch stalls the device, an early one only
 * holds room a little sooner. */
#define SWAP_AHEAD_START 2
#define SWAP_AHEAD_MAX 32
#define SWAP_AHEAD_SHRINK_AFTER 16
struct swap_ahead {
    uint32_t horizon;   /* launches, 1..SWAP_AHEAD_MAX */
    uint32_t early_run; /* launches in a row with only early arrivals */
    bool late, early;   /* the current launch's feedback so far */
};
void swap_ahead_init(struct swap_ahead *a);
/* A block fetched ahead was used by the current launch (late: the launch
 * waited for its copy), or a predicted block was fetched on demand (late). */
void swap_ahead_used(struct swap_ahead *a, bool late);
/* The current launch is complete: apply its feedback (above). */
void swap_ahead_end_launch(struct swap_ahead *a);

/* Replay only: fetch ahead while the real cache's recent cost is at most m
 * times what it would have moved without fetching ahead (default 1.01; a
 * large m: always). See AHEAD_MARGIN in swap_policy.c. */
void swap_policy_set_ahead_margin(struct swap_policy *p, double m);

const char *swap_policy_kind_name(enum swap_policy_kind kind);
/* "lru", "history", "min" -> kind; -EINVAL otherwise. */
int swap_policy_kind_parse(const char *name, enum swap_policy_kind *out);

#endif
