/* swap_policy_internal: the eviction policy's state (swap_policy.c), shared
 * with its fetch ahead (swap_ahead.c) and nothing else. The design is at
 * the top of swap_policy.c; what each field means is said here. */
#ifndef SWAP_POLICY_INTERNAL_H
#define SWAP_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "swap.h"
#include "uthash_wrap.h"

/* Converging (see "Robustness"): after following one shadow for this many
 * periods, the real cache evicts first what that shadow does not hold. */
#define CONVERGE_PERIODS 2

/* Fetch ahead only while the real cache's long-window cost is at most this
 * share of what its own rule would have cost without fetching ahead (the
 * SH_NOAHEAD cache). On the committed traces (swap-real --ahead N),
 * fetching ahead within 1 / 4 launches: 1.01 puts 77 / 65 % of the fetches
 * ahead and moves at most 2.6 / 3.2 % more than on demand on one row
 * (lstm-train at 2x), 0.4 / 0.8 % more in all; with no check, up to
 * 12 / 21 % more on one row (seq2seq-attn-train, resnet18-phases at 2x),
 * 1.5 / 3.9 % in all. Against the followed shadow instead of SH_NOAHEAD
 * (the two settle apart on many traces) only 51 / 45 % went ahead. */
#define AHEAD_MARGIN 1.01

/* How the real cache and each shadow rank victims: recency, reverse
 * recency, prediction from the period, prediction asking a trusted anchor
 * first (swap_history_predict_use), prediction from the period or a
 * block's own rhythm where that comes sooner (see "Next use"). */
enum rank { RANK_LRU, RANK_MRU, RANK_PREDICT, RANK_ANCHOR, RANK_RHYTHM };

/* Shadow caches of the history kind (see "Robustness"): what each way of
 * ranking alone would have kept resident. lru first, mru second, then the
 * predictions, each under a clean weight (see "Ranking"). */
#define SH_N 11
enum { SH_LRU, SH_MRU, SH_FIRST_PREDICT };
/* One more cache beside the shadows: the real cache's own rule (the
 * followed ranking, converging) without fetch ahead, the reference of
 * swap_policy_prefetch's cost check. Never an expert, never followed. */
#define SH_NOAHEAD SH_N
#define SH_ALL (SH_N + 1)
struct shadow_kind {
    enum rank how;
    double clean_weight;
};
extern const struct shadow_kind policy_shadows[SH_N];

struct blk {
    uint64_t id;
    uint64_t size;
    uint64_t last_use;   /* access counter at its latest access (lru order) */
    uint64_t pin_launch; /* launch of its latest access: pinned while == now */
    uint64_t gap;        /* launches between its two latest accesses (0: one so far) */
    uint64_t wide_gap;   /* the latest of its gaps over one launch (0: none yet) */
    uint32_t burst;      /* how many of its latest gaps in a row were one launch */
    uint64_t next_use;   /* min: true next use after its latest access */
    bool resident, dirty, has_host;
    /* history: its predictions (from the period, anchored) as of launch
     * pred_at - 1 (0: none yet); see predicted() */
    uint64_t pred_at, pred_next[2];
    bool pred_dies[2], pred_no_past; /* no_past: of the period's prediction */
    /* history: the shadow caches (shadows[] below), see "Robustness" */
    bool s_res[SH_ALL], s_dirty[SH_ALL], s_host[SH_ALL];
    /* fetch ahead: a scan saw it coming since its last access; the launch
     * (+ 1) in which a fetch ahead last evicted it (0: none) */
    bool ahead_seen, ahead_fetched; /* fetched: ahead, not accessed since */
    bool wakes_by_copy;             /* its latest first access after an idle launch was a copy */
    uint64_t ahead_out;
    UT_hash_handle hh;
};

struct cand {
    struct blk *b;  /* NULL once next_victim took it */
    double score;   /* larger = evict first */
    uint32_t order; /* position when scored: the last tie-break */
};

struct swap_policy {
    struct swap_params prm;
    double clean_weight;
    uint64_t resident; /* bytes */
    uint64_t now;      /* current launch */
    uint64_t access_count;
    struct blk *blocks;
    struct swap_history *hist;
    struct swap_counters c;
    struct swap_evict *evict;
    size_t evict_cap;
    struct cand *cand;
    size_t cand_cap;
    uint64_t pinned_resident; /* bytes of the current launch's blocks on the device */
    size_t cand_n;            /* scored by the last rank_victims */
    size_t cand_best;         /* among them, the first victim (when cand_n > 0) */
    size_t cand_taken;        /* victims next_victim gave since */
    /* history: shadow caches, their resident bytes and their recent cost
     * (bytes they would have moved, decayed per launch) */
    uint64_t s_resident[SH_ALL];
    double s_cost[SH_ALL];
    double s_long[SH_ALL]; /* the same over a window of at least two periods */
    int expert;            /* the prediction shadow judged best over s_long */
    double decay;
    int follow;            /* the shadow whose ranking the real cache follows */
    uint64_t follow_since; /* the launch from which it has followed that one */
    uint64_t last_period;  /* the history's period after the previous launch */
    double real_long;      /* the real cache's bytes moved, decayed as s_long */
    double ahead_margin;   /* swap_policy_prefetch: see AHEAD_MARGIN */
};

/* Whether b was accessed in the current launch (never a victim). */
bool policy_pinned(const struct swap_policy *p, const struct blk *b);
/* *arr grown to hold need elements of elem bytes (*cap updated). 0 or -ENOMEM. */
int policy_grow(void **arr, size_t *cap, size_t need, size_t elem);
/* History's prediction of b's next use by `how` (*dies: predicted freed first). */
uint64_t policy_predicted(struct swap_policy *p, struct blk *b, enum rank how, bool *dies);
/* Scores the candidate victims into p->cand (swap_policy.c says which); how
 * many, or -ENOMEM. Take them in order with policy_next_victim. */
int policy_rank_victims(struct swap_policy *p, const struct blk *self, int which, int not_held_by,
                        enum rank how, double clean_weight);
/* The next victim of the last ranking, or NULL when none is left. */
struct blk *policy_next_victim(struct swap_policy *p);

#endif
