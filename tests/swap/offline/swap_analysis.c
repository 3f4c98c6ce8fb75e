/* swap_analysis: measurements of a trace for the offline tools (the
 * working set, the peak of live bytes a budget is set from;
 * swap_offline.h). */
#include "swap_offline.h"

#include <errno.h>
#include <stdlib.h>

#include "uthash_wrap.h"

/* Distinct-block byte sums over a span of events, with a stamp per block. */
struct ws_entry {
    uint64_t id;
    uint64_t iter_stamp, launch_stamp;
    UT_hash_handle hh;
};

uint64_t swap_trace_working_set(const struct swap_trace *t, unsigned warmup, uint64_t *max_launch)
{
    struct ws_entry *tab = NULL, *w, *tmp;
    uint64_t iters = 1;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].kind == SWAP_EV_ITER) iters++;
    /* a trailing I closes the last iteration; no events follow it */
    if (t->n && t->ev[t->n - 1].kind == SWAP_EV_ITER) iters--;
    if (warmup >= iters) warmup = 0;
    uint64_t iter = 0, launch = 0, ws = 0, cur_ws = 0, cur_launch = 0, best_launch = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct swap_event *e = &t->ev[i];
        if (e->kind == SWAP_EV_ITER) {
            if (iter >= warmup && cur_ws > ws) ws = cur_ws;
            iter++;
            cur_ws = 0;
        } else if (e->kind == SWAP_EV_LAUNCH) {
            launch++;
            cur_launch = 0;
        } else if (e->kind == SWAP_EV_ACCESS) {
            HASH_FIND(hh, tab, &e->block, sizeof(e->block), w);
            if (!w) {
                w = calloc(1, sizeof(*w));
                if (!w) break;
                w->id = e->block;
                w->iter_stamp = w->launch_stamp = UINT64_MAX;
                HASH_ADD(hh, tab, id, sizeof(w->id), w);
                if (!UTH_ADDED(w, hh)) {
                    free(w);
                    break;
                }
            }
            if (w->iter_stamp != iter) {
                w->iter_stamp = iter;
                cur_ws += e->bytes;
            }
            if (w->launch_stamp != launch) {
                w->launch_stamp = launch;
                cur_launch += e->bytes;
                if (cur_launch > best_launch) best_launch = cur_launch;
            }
        }
    }
    if (iter >= warmup && cur_ws > ws) ws = cur_ws;
    HASH_ITER(hh, tab, w, tmp)
    {
        HASH_DEL(tab, w);
        free(w);
    }
    if (max_launch) *max_launch = best_launch;
    return ws;
}

/* Blocks alive while swap_trace_peak_live walks a trace. */
struct live {
    uint64_t id, size;
    UT_hash_handle hh;
};

uint64_t swap_trace_peak_live(const struct swap_trace *t)
{
    struct live *tab = NULL, *l, *tmp;
    uint64_t cur = 0, peak = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct swap_event *e = &t->ev[i];
        if (e->kind != SWAP_EV_ACCESS && e->kind != SWAP_EV_FREE) continue;
        HASH_FIND(hh, tab, &e->block, sizeof(e->block), l);
        if (e->kind == SWAP_EV_FREE) {
            if (l) {
                cur -= l->size;
                HASH_DEL(tab, l);
                free(l);
            }
            continue;
        }
        if (!l) {
            if (!(l = calloc(1, sizeof(*l)))) {
                peak = 0;
                break;
            }
            l->id = e->block;
            HASH_ADD(hh, tab, id, sizeof(l->id), l);
        }
        cur = cur - l->size + e->bytes;
        l->size = e->bytes;
        if (cur > peak) peak = cur;
    }
    HASH_ITER(hh, tab, l, tmp)
    {
        HASH_DEL(tab, l);
        free(l);
    }
    return peak;
}
