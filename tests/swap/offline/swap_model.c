/* swap_model: the timing model of swap_model.h. One pass over the trace:
 * each access goes to a fresh policy as the replay tools do (swap_min.c),
 * its decisions are collected per launch, and at the launch's L they are
 * timed. Each resource keeps the time it is next free; work on one
 * resource runs in the order the policy decided it (no reordering), so
 * the model is a list schedule, not an optimiser. */
#include "swap_model.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "uthash_wrap.h"

#define KIB 1024ULL
#define MIB (1024ULL * 1024ULL)

/* Sources of the defaults:
 * - pinned_*: ../shared/probes/README.md, `PROBE bw`, H200 driver
 *   580.159.04, best of 3 over 512 MiB, cudaMemcpyAsync in chunks of the
 *   given size (the table of issue 45).
 * - managed_*: docs/swap.md "Where the time goes", tests/gpu/swap_probes.cu
 *   on the 2026-11-27 H100 (four runs): the middle of each measured range,
 *   cuMemPrefetchAsync of whole blocks.
 * - remap: `PROBE remap`, unmap + map + set access, 2 MiB and 64 MiB;
 *   map_chunk_us its map alone at 2 MiB.
 * - host_read_gbps: `PROBE vmmhost`, a kernel reading HOST_NUMA memory.
 * - device_gbps: the H200's HBM3e peak (NVIDIA's data sheet, 4.8 TB/s);
 *   device_share 0.5 and kernel_min_us 2 are stated estimates, not
 *   measurements.
 * - submit_us 5: train (tests/e2e/progs/train.cu, 48 layers) runs 196
 *   launches, copies and sets an iteration at 840-1014 it/s without a
 *   budget on the H100 and H200 (docs/gpu-validation.md): 5.0-6.1 us each;
 *   its kernels are too small to be bound by memory. Calibrated on the
 *   unlimited runs, so the model's unlimited figure for that program is
 *   not a prediction. */
void swap_model_default_rates(struct swap_model_rates *r)
{
    static const uint64_t bw_sizes[] = {256 * KIB, 1 * MIB, 2 * MIB, 16 * MIB, 64 * MIB};
    static const double d2h[] = {39.1, 49.5, 52.0, 54.8, 54.4};
    static const double h2d[] = {34.6, 47.3, 50.7, 54.4, 54.1};
    static const double both[] = {26.3, 40.2, 43.3, 47.2, 44.4};
    static const uint64_t mg_sizes[] = {256 * KIB, 2 * MIB, 16 * MIB};
    static const double mg_d2h[] = {3.25, 8.25, 9.4};
    static const double mg_h2d[] = {4.65, 16.15, 36.65};
    memset(r, 0, sizeof(*r));
    for (size_t i = 0; i < 5; i++) {
        r->pinned_d2h.size[i] = r->pinned_h2d.size[i] = r->pinned_both.size[i] = bw_sizes[i];
        r->pinned_d2h.gbps[i] = d2h[i];
        r->pinned_h2d.gbps[i] = h2d[i];
        r->pinned_both.gbps[i] = both[i];
    }
    r->pinned_d2h.n = r->pinned_h2d.n = r->pinned_both.n = 5;
    for (size_t i = 0; i < 3; i++) {
        r->managed_d2h.size[i] = r->managed_h2d.size[i] = mg_sizes[i];
        r->managed_d2h.gbps[i] = mg_d2h[i];
        r->managed_h2d.gbps[i] = mg_h2d[i];
    }
    r->managed_d2h.n = r->managed_h2d.n = 3;
    r->remap_size[0] = 2 * MIB;
    r->remap_size[1] = 64 * MIB;
    r->remap_us[0] = 27.4 + 44.6 + 73.5;
    r->remap_us[1] = 36.1 + 170.7 + 859.0;
    r->host_read_gbps = 49.5;
    r->device_gbps = 4800;
    r->device_share = 0.5;
    r->kernel_min_us = 2;
    r->submit_us = 5;
    r->map_chunk_us = 44.6;
}

static double curve_gbps(const struct swap_model_curve *c, uint64_t bytes)
{
    if (!c->n) return 1;
    if (bytes <= c->size[0]) return c->gbps[0];
    for (size_t i = 1; i < c->n; i++) {
        if (bytes > c->size[i]) continue;
        double a = log2((double)c->size[i - 1]), b = log2((double)c->size[i]);
        double f = (log2((double)bytes) - a) / (b - a);
        return c->gbps[i - 1] + f * (c->gbps[i] - c->gbps[i - 1]);
    }
    return c->gbps[c->n - 1];
}

double swap_model_curve_seconds(const struct swap_model_curve *c, uint64_t bytes)
{
    return (double)bytes / (curve_gbps(c, bytes) * 1e9);
}

double swap_model_remap_seconds(const struct swap_model_rates *r, uint64_t bytes)
{
    double s0 = (double)r->remap_size[0], s1 = (double)r->remap_size[1];
    double b = bytes < r->remap_size[0] ? s0 : (double)bytes;
    double us = r->remap_us[0] + (b - s0) * (r->remap_us[1] - r->remap_us[0]) / (s1 - s0);
    return us * 1e-6;
}

double swap_model_launch_estimate(const struct swap_model_rates *r, uint64_t bytes, int copy)
{
    if (copy) return swap_model_curve_seconds(&r->pinned_h2d, bytes);
    double s = (double)bytes / (r->device_share * r->device_gbps * 1e9);
    double floor = r->kernel_min_us * 1e-6;
    return s > floor ? s : floor;
}

double swap_model_bound(const struct swap_model_iter *unlimited, const struct swap_model_iter *off)
{
    double b = unlimited->seconds;
    if (off->h2d_link_seconds > b) b = off->h2d_link_seconds;
    if (off->d2h_link_seconds > b) b = off->d2h_link_seconds;
    return b;
}

void swap_model_result_fini(struct swap_model_result *r)
{
    free(r->it);
    memset(r, 0, sizeof(*r));
}

/* ---- the replay ---------------------------------------------------------- */

struct blk {
    uint64_t id;
    double last_end;       /* end of the last launch that touched it */
    double dev_ready;      /* its device copy is mapped and current from then */
    double host_ready;     /* its host copy is mapped and current from then */
    uint64_t device_bytes; /* VMM: what it holds of the room (swap_model.h) */
    bool remap_pending;    /* built_remaps_serial: host_ready not known yet */
    bool unseen_dirty;     /* written by a SWAP_MODEL_EV_UNSEEN access while resident */
    bool ahead;            /* built_ahead: fetched ahead, no launch has used it since */
    uint64_t bytes;        /* its size at its latest access */
    UT_hash_handle hh;
};

/* OP_USE: a resident block; OP_HOST: a copy or set of a block that is on
 * the host (it works there); OP_OVERFLOW: a launch's block that did not
 * fit, read over the link. */
enum op_kind { OP_EVICT, OP_FETCH, OP_FIRST, OP_OVERFLOW, OP_USE, OP_HOST };

struct op {
    uint64_t block, bytes;
    uint8_t kind;
    bool writeback; /* OP_EVICT */
    bool unseen;    /* from SWAP_MODEL_EV_UNSEEN: bytes is what is read, never managed */
    bool predicted; /* OP_FETCH: swap_decision.predicted */
};

struct state {
    const struct swap_model_params *p;
    const struct swap_model_rates *r;
    struct blk *blocks;
    struct op *ops;
    size_t n_ops, cap_ops;
    uint64_t launch_bytes; /* kernel accesses' bytes this launch */
    uint64_t copy_bytes;   /* copy or set accesses' bytes this launch */
    uint64_t launch;       /* index of the current launch */
    double host, queue, h2d, d2h;
    double mover[SWAP_MODEL_MOVERS_MAX];
    unsigned movers;
    /* SWAP_MODEL_BUILT, not mover_fifo: each mover's jobs still to end,
     * sorted, at most MOVER_SPANS a mover (mover_place) */
    struct span {
        double start, end;
    } * spans;
    unsigned n_spans[SWAP_MODEL_MOVERS_MAX];
    double last_end; /* end of the latest launch */
    /* Room (swap_model.h): the device's bytes in use change by d at t;
     * changes at or before min(h2d, queue), which no later query starts
     * before, are folded into occ_base. Sorted by t. */
    struct occ {
        double t;
        int64_t d;
    } * occ;
    size_t n_occ, cap_occ;
    int64_t occ_base, capacity;
    struct swap_model_result *res;
    size_t cap_it;
    /* SWAP_MODEL_BUILT with built_remaps_serial: one remap at a time, in
     * the order the threads ask (remap_free: when the current one ends);
     * the mover's requests not served yet, sorted by the time they ask */
    double remap_free;
    struct swap_ahead ahead;  /* built_ahead: the horizon */
    struct blk **ahead_remap; /* built_ahead: the victims of one fetch ahead */
    size_t cap_ahead_remap;
    struct pending {
        double arrival, secs;
        uint64_t block;
    } * pending;
    size_t n_pending, cap_pending;
};

static struct blk *blk_get(struct state *s, uint64_t id)
{
    struct blk *b;
    HASH_FIND(hh, s->blocks, &id, sizeof(id), b);
    if (b) return b;
    if (!(b = calloc(1, sizeof(*b)))) return NULL;
    b->id = id;
    HASH_ADD(hh, s->blocks, id, sizeof(b->id), b);
    if (!UTH_ADDED(b, hh)) {
        free(b);
        return NULL;
    }
    return b;
}

static int op_push(struct state *s, struct op o)
{
    if (s->n_ops == s->cap_ops) {
        size_t cap = s->cap_ops ? 2 * s->cap_ops : 64;
        struct op *a = realloc(s->ops, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        s->ops = a;
        s->cap_ops = cap;
    }
    s->ops[s->n_ops++] = o;
    return 0;
}

static struct swap_model_iter *iter_cur(struct state *s)
{
    struct swap_model_result *r = s->res;
    if (r->iterations == 0 || r->iterations > s->cap_it) return NULL;
    return &r->it[r->iterations - 1];
}

static int iter_open(struct state *s)
{
    struct swap_model_result *r = s->res;
    if (r->iterations == s->cap_it) {
        size_t cap = s->cap_it ? 2 * s->cap_it : 16;
        struct swap_model_iter *a = realloc(r->it, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        r->it = a;
        s->cap_it = cap;
    }
    memset(&r->it[r->iterations++], 0, sizeof(r->it[0]));
    return 0;
}

/* A copy of bytes starting no earlier than start on the engine whose free
 * time is *mine, while the other engine is busy until other: the part that
 * overlaps the other engine's known work runs at the both-ways rate, the
 * rest at the one-way rate. Returns the end. */
static double copy_end(const struct state *s, const struct swap_model_curve *one, double start,
                       double other, uint64_t bytes)
{
    double both = curve_gbps(&s->r->pinned_both, bytes) * 1e9;
    double alone = curve_gbps(one, bytes) * 1e9;
    double t = start, left = (double)bytes;
    if (other > t) {
        double can = (other - t) * both;
        if (can >= left) return t + left / both;
        left -= can;
        t = other;
    }
    return t + left / alone;
}

static void count_move(struct state *s, bool to_device, uint64_t bytes)
{
    struct swap_model_iter *it = iter_cur(s);
    double link = swap_model_curve_seconds(&s->r->pinned_both, bytes);
    if (to_device) {
        s->res->h2d_bytes += bytes;
        it->h2d_bytes += bytes;
        it->h2d_link_seconds += link;
    } else {
        s->res->d2h_bytes += bytes;
        it->d2h_bytes += bytes;
        it->d2h_link_seconds += link;
    }
}

static double launch_device_seconds(struct state *s)
{
    const struct swap_model_params *p = s->p;
    if (p->launch_ns && s->launch < p->n_launch_ns) return (double)p->launch_ns[s->launch] * 1e-9;
    s->res->estimated_launches++;
    double k = s->launch_bytes ? swap_model_launch_estimate(s->r, s->launch_bytes, 0) : 0;
    double c = s->copy_bytes ? swap_model_launch_estimate(s->r, s->copy_bytes, 1) : 0;
    double d = k + c;
    double floor = s->r->kernel_min_us * 1e-6;
    return d > floor ? d : floor;
}

/* The earliest time from t0 on at which bytes more fit on the device
 * from then on, given every change already planned. */
static double room_at(struct state *s, double t0, uint64_t bytes)
{
    int64_t total = s->occ_base;
    for (size_t i = 0; i < s->n_occ; i++)
        total += s->occ[i].d;
    /* walk the intervals from the last: [t_i, t_i+1) holds occ */
    int64_t occ = total, worst = total, need = (int64_t)bytes;
    if (worst + need > s->capacity) { /* never fits: take the last change */
        s->res->room_overruns++;
        return s->n_occ && s->occ[s->n_occ - 1].t > t0 ? s->occ[s->n_occ - 1].t : t0;
    }
    for (size_t i = s->n_occ; i-- > 0;) {
        if (s->occ[i].t <= t0) break;
        occ -= s->occ[i].d; /* the interval before change i */
        if (occ > worst) worst = occ;
        if (worst + need > s->capacity) return s->occ[i].t;
    }
    return t0;
}

static int occ_add(struct state *s, double t, int64_t d)
{
    double horizon = s->h2d < s->queue ? s->h2d : s->queue;
    size_t k = 0;
    while (k < s->n_occ && s->occ[k].t <= horizon)
        s->occ_base += s->occ[k++].d;
    if (k) {
        memmove(s->occ, s->occ + k, (s->n_occ - k) * sizeof(*s->occ));
        s->n_occ -= k;
    }
    if (s->n_occ == s->cap_occ) {
        size_t cap = s->cap_occ ? 2 * s->cap_occ : 64;
        struct occ *a = realloc(s->occ, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        s->occ = a;
        s->cap_occ = cap;
    }
    size_t i = s->n_occ;
    while (i > 0 && s->occ[i - 1].t > t)
        i--;
    if (i > 0 && s->occ[i - 1].t == t) { /* one change per instant: no empty interval */
        s->occ[i - 1].d += d;
        return 0;
    }
    memmove(s->occ + i + 1, s->occ + i, (s->n_occ - i) * sizeof(*s->occ));
    s->occ[i] = (struct occ){t, d};
    s->n_occ++;
    return 0;
}

/* A block freed: its pending remap is dropped (the shim would free it). */
static void mover_forget(struct state *s, uint64_t id)
{
    for (size_t i = 0; i < s->n_pending; i++) {
        if (s->pending[i].block != id) continue;
        memmove(s->pending + i, s->pending + i + 1, (s->n_pending - i - 1) * sizeof(*s->pending));
        s->n_pending--;
        return;
    }
}

/* A block freed: its room comes back when the last launch that used it
 * ends, and its id may come back as a new block. */
static int block_freed(struct state *s, uint64_t id)
{
    struct blk *b;
    HASH_FIND(hh, s->blocks, &id, sizeof(id), b);
    if (!b) return 0;
    int rc = 0;
    if (b->device_bytes) {
        double t = b->last_end > b->dev_ready ? b->last_end : b->dev_ready;
        rc = occ_add(s, t, -(int64_t)b->device_bytes);
    }
    if (b->remap_pending) mover_forget(s, id);
    HASH_DEL(s->blocks, b);
    free(b);
    return rc;
}

#define MOVER_SPANS 256

/* The earliest start from ready of a job of secs on mover m that keeps
 * clear of its jobs placed before (their spans); *at: where its span goes. */
static double mover_fit(struct state *s, unsigned m, double ready, double secs, unsigned *at)
{
    struct span *sp = s->spans + (size_t)m * MOVER_SPANS;
    unsigned n = s->n_spans[m], i = 0, old = 0;
    /* no job to come is ready before the host's time: spans ended by then go */
    while (old < n && sp[old].end <= s->host)
        old++;
    if (old) memmove(sp, sp + old, (n - old) * sizeof(*sp)), n = s->n_spans[m] = n - old;
    double t = ready;
    for (; i < n; i++) {
        if (t + secs <= sp[i].start) break;
        if (sp[i].end > t) t = sp[i].end;
    }
    *at = i;
    return t;
}

/* Ready first (SWAP_MODEL_BUILT, not mover_fifo): the job runs on the
 * mover where it can start earliest, in an idle stretch before a job
 * placed earlier (one that waits for its events) when it ends before that
 * one starts, else after the mover's last job. Its end. */
static double mover_place(struct state *s, double ready, double secs)
{
    unsigned best = 0, at = 0;
    double t = mover_fit(s, 0, ready, secs, &at);
    for (unsigned m = 1; m < s->movers; m++) {
        unsigned a;
        double u = mover_fit(s, m, ready, secs, &a);
        if (u < t) t = u, best = m, at = a;
    }
    struct span *sp = s->spans + (size_t)best * MOVER_SPANS;
    unsigned n = s->n_spans[best];
    if (n == MOVER_SPANS) { /* full: after its last job, which grows to hold it */
        if (sp[n - 1].end > t) t = sp[n - 1].end;
        sp[n - 1].end = t + secs;
        return t + secs;
    }
    memmove(sp + at + 1, sp + at, (n - at) * sizeof(*sp));
    sp[at] = (struct span){t, t + secs};
    s->n_spans[best] = n + 1;
    return t + secs;
}

/* A remap of secs on the first mover free from ready; its end. Under
 * SWAP_MODEL_BUILT the movers serve ready work first (mover_place) unless
 * params.mover_fifo. */
static double mover_run(struct state *s, double ready, double secs)
{
    if (s->spans) return mover_place(s, ready, secs);
    unsigned m = 0;
    for (unsigned i = 1; i < s->movers; i++)
        if (s->mover[i] < s->mover[m]) m = i;
    double start = s->mover[m] > ready ? s->mover[m] : ready;
    s->mover[m] = start + secs;
    return s->mover[m];
}

/* A remap of a range of bytes that may start at ready; its end. */
static double remap_end(struct state *s, double ready, uint64_t bytes)
{
    return mover_run(s, ready, swap_model_remap_seconds(s->r, bytes));
}

/* Today's engine: the launch's stream does the moves, one after the other,
 * then the launch. */
static int time_managed(struct state *s, double submit, double device, double *end)
{
    double t = submit > s->queue ? submit : s->queue;
    for (size_t i = 0; i < s->n_ops; i++) {
        const struct op *o = &s->ops[i];
        switch (o->kind) {
        case OP_EVICT:
            t += swap_model_curve_seconds(&s->r->managed_d2h, o->bytes);
            count_move(s, false, o->bytes);
            break;
        case OP_FETCH:
            t += swap_model_curve_seconds(&s->r->managed_h2d, o->bytes);
            count_move(s, true, o->bytes);
            break;
        case OP_OVERFLOW: /* demand paging, at the smallest block's migration rate */
            t += (double)o->bytes / (s->r->managed_h2d.gbps[0] * 1e9);
            break;
        default:
            break;
        }
    }
    *end = t + device;
    return 0;
}

/* The planned engine (swap_model.h). With unit SWAP_MODEL_UNIT_SMALL_MANAGED
 * the blocks under 2 MiB move as SWAP_MODEL_MANAGED moves them, on the
 * launch's stream (mt) before the launch. */
static int time_vmm(struct state *s, double submit, double device, double *end)
{
    const struct swap_model_params *p = s->p;
    double ready = submit, extra = 0;
    double mt = submit > s->queue ? submit : s->queue;
    double horizon = s->h2d < s->queue ? s->h2d : s->queue;
    int rc = 0;
    for (size_t i = 0; i < s->n_ops && !rc; i++) {
        const struct op *o = &s->ops[i];
        struct blk *b = blk_get(s, o->block);
        if (!b) return -ENOMEM;
        bool managed = !o->unseen && p->unit == SWAP_MODEL_UNIT_SMALL_MANAGED && o->bytes < 2 * MIB;
        switch (o->kind) {
        case OP_EVICT:
            if (managed) {
                mt += swap_model_curve_seconds(&s->r->managed_d2h, o->bytes);
                count_move(s, false, o->bytes);
                b->host_ready = mt;
                b->device_bytes = 0;
                rc = occ_add(s, mt, -(int64_t)o->bytes);
                break;
            }
            double rs;
            if (o->writeback) {
                double cs = s->d2h > b->last_end ? s->d2h : b->last_end;
                if (b->dev_ready > cs) cs = b->dev_ready;
                double ce = copy_end(s, &s->r->pinned_d2h, cs, s->h2d, o->bytes);
                s->d2h = ce;
                rs = ce;
                count_move(s, false, o->bytes);
            } else {
                rs = b->last_end > b->dev_ready ? b->last_end : b->dev_ready;
            }
            b->host_ready = remap_end(s, rs, o->bytes);
            b->device_bytes = 0;
            rc = occ_add(s, b->host_ready, -(int64_t)o->bytes);
            break;
        case OP_FETCH: {
            double cs = managed ? mt : s->h2d;
            if (b->host_ready > cs) cs = b->host_ready;
            cs = room_at(s, cs, o->bytes);
            rc = occ_add(s, cs, (int64_t)o->bytes);
            b->device_bytes = o->bytes;
            count_move(s, true, o->bytes);
            if (managed) {
                mt = cs + swap_model_curve_seconds(&s->r->managed_h2d, o->bytes);
                b->dev_ready = mt;
                break;
            }
            double ce = copy_end(s, &s->r->pinned_h2d, cs, s->d2h, o->bytes);
            s->h2d = ce;
            b->dev_ready = remap_end(s, ce, o->bytes);
            break;
        }
        case OP_FIRST: /* mapped when allocated (see swap_model.h): room only */
            b->dev_ready = room_at(s, horizon, o->bytes);
            b->device_bytes = o->bytes;
            rc = occ_add(s, b->dev_ready, (int64_t)o->bytes);
            break;
        case OP_OVERFLOW:
            if (b->host_ready > ready) ready = b->host_ready;
            if (managed) /* demand paging, at the smallest block's migration rate */
                extra += (double)o->bytes / (s->r->managed_h2d.gbps[0] * 1e9);
            else
                extra += (double)o->bytes / (s->r->host_read_gbps * 1e9);
            break;
        case OP_HOST:
            if (b->host_ready > ready) ready = b->host_ready;
            break;
        case OP_USE:
            break;
        }
        if (o->kind == OP_USE || o->kind == OP_FETCH || o->kind == OP_FIRST) {
            if (b->dev_ready > ready) ready = b->dev_ready;
        }
    }
    if (rc) return rc;
    if (mt > ready) ready = mt;
    double start = ready > s->queue ? ready : s->queue;
    *end = start + device + extra;
    return 0;
}

/* With built_remaps_serial (swap_model.h): the driver runs one remap at a
 * time, first come first served. The host asks at its own time, which
 * only grows; the mover asks when a write-back ends, which may lie ahead
 * of the host, so its requests wait in s->pending until the host asks
 * later than they do, or needs their end. */
static void serve_one(struct state *s)
{
    struct pending q = s->pending[0];
    memmove(s->pending, s->pending + 1, (s->n_pending - 1) * sizeof(*s->pending));
    s->n_pending--;
    double start = s->remap_free > q.arrival ? s->remap_free : q.arrival;
    s->remap_free = start + q.secs;
    struct blk *b;
    HASH_FIND(hh, s->blocks, &q.block, sizeof(q.block), b);
    if (b && b->remap_pending) {
        b->host_ready = s->remap_free;
        b->remap_pending = false;
    }
}

/* The mover's remap of block b, asked at arrival. -ENOMEM. */
static int mover_request(struct state *s, struct blk *b, double arrival, double secs)
{
    if (s->n_pending == s->cap_pending) {
        size_t cap = s->cap_pending ? 2 * s->cap_pending : 16;
        struct pending *a = realloc(s->pending, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        s->pending = a;
        s->cap_pending = cap;
    }
    size_t i = s->n_pending;
    while (i > 0 && s->pending[i - 1].arrival > arrival)
        i--;
    memmove(s->pending + i + 1, s->pending + i, (s->n_pending - i) * sizeof(*s->pending));
    s->pending[i] = (struct pending){arrival, secs, b->id};
    s->n_pending++;
    b->remap_pending = true;
    return 0;
}

/* A remap of secs by the host thread from h under SWAP_MODEL_BUILT; its
 * end (a wait for the mover's remaps counted as a wait in moves). */
static double host_remap(struct state *s, double h, double secs)
{
    if (!s->p->built_async || !s->p->built_remaps_serial) return h + secs;
    while (s->n_pending && s->pending[0].arrival <= h)
        serve_one(s);
    double start = s->remap_free > h ? s->remap_free : h;
    s->res->host_evict_wait_seconds += start - h;
    s->remap_free = start + secs;
    return s->remap_free;
}

/* The VMM engine as built (swap_model.h, SWAP_MODEL_BUILT): the host
 * thread, from s->host, does the moves one after the other, then submits
 * the launch. */
static int time_built(struct state *s, double device, double *end)
{
    const struct swap_model_params *p = s->p;
    double h = s->host, ready = 0, extra = 0, mt = 0;
    /* async: when the chunks of the evictions decided since the last
     * fetch or first touch are free for the next one to take */
    double handover = 0;
    int rc = 0;
    for (size_t i = 0; i < s->n_ops && !rc; i++) {
        const struct op *o = &s->ops[i];
        struct blk *b = blk_get(s, o->block);
        if (!b) return -ENOMEM;
        while (b->remap_pending) /* its host_ready, before anyone reads it */
            serve_one(s);
        bool managed = !o->unseen && p->unit == SWAP_MODEL_UNIT_SMALL_MANAGED && o->bytes < 2 * MIB;
        /* a fetch's remap: one cuMemMap per 2 MiB chunk */
        uint64_t chunks = (o->bytes + 2 * MIB - 1) / (2 * MIB);
        double map = swap_model_remap_seconds(s->r, o->bytes) +
                     (double)(chunks ? chunks - 1 : 0) * s->r->map_chunk_us * 1e-6;
        if (managed && (o->kind == OP_EVICT || o->kind == OP_FETCH)) {
            /* on the launch's stream before the launch, as SWAP_MODEL_VMM's */
            double t = mt > s->queue ? mt : s->queue;
            if (h > t) t = h;
            bool in = o->kind == OP_FETCH;
            mt = t +
                 swap_model_curve_seconds(in ? &s->r->managed_h2d : &s->r->managed_d2h, o->bytes);
            count_move(s, in, o->bytes);
            if (in)
                b->dev_ready = mt;
            else
                b->host_ready = mt;
            continue;
        }
        switch (o->kind) {
        case OP_EVICT: {
            /* the host waits for the victim's events (its fetch copy among them) */
            double wait = p->built_wait == SWAP_MODEL_WAIT_LAST_USE ? b->last_end : s->queue;
            if (b->dev_ready > wait) wait = b->dev_ready;
            if (p->built_async) {
                /* ordered on the device: the write-back (or, clean, the
                 * next copy into its chunks) waits for the victim's
                 * events; the mover remaps its range after that */
                double ev = wait > h ? wait : h;
                if (o->writeback) {
                    double cs = s->d2h > ev ? s->d2h : ev;
                    ev = s->d2h = copy_end(s, &s->r->pinned_d2h, cs, s->h2d, o->bytes);
                    count_move(s, false, o->bytes);
                }
                if (ev > handover) handover = ev;
                if (p->built_remaps_serial) {
                    rc = mover_request(s, b, ev, swap_model_remap_seconds(s->r, o->bytes));
                } else {
                    b->host_ready = remap_end(s, ev, o->bytes);
                }
                break;
            }
            if (o->writeback) {
                double cs = h > s->d2h ? h : s->d2h;
                if (wait > cs) cs = wait;
                s->d2h = copy_end(s, &s->r->pinned_d2h, cs, s->h2d, o->bytes);
                count_move(s, false, o->bytes);
                wait = s->d2h;
            }
            if (wait > h) {
                s->res->host_evict_wait_seconds += wait - h;
                h = wait;
            }
            h += swap_model_remap_seconds(s->r, o->bytes);
            s->res->host_remap_seconds += swap_model_remap_seconds(s->r, o->bytes);
            b->host_ready = h;
            break;
        }
        case OP_FETCH: {
            if (b->host_ready > h) {
                s->res->host_evict_wait_seconds += b->host_ready - h;
                h = b->host_ready;
            }
            h = host_remap(s, h, map);
            s->res->host_remap_seconds += map;
            double cs = h > s->h2d ? h : s->h2d;
            if (handover > cs) cs = handover; /* async: into the victims' chunks */
            handover = 0;
            s->h2d = copy_end(s, &s->r->pinned_h2d, cs, s->d2h, o->bytes);
            count_move(s, true, o->bytes);
            b->dev_ready = s->h2d;
            break;
        }
        case OP_FIRST: /* a new block starts host-backed: a remap, nothing copied */
            b->dev_ready = h;
            if (managed) break; /* managed memory: no chunks taken */
            h = host_remap(s, h, map);
            s->res->host_remap_seconds += map;
            b->dev_ready = h > handover ? h : handover;
            handover = 0;
            break;
        case OP_OVERFLOW:
            /* async: the launch may not be submitted before the range maps
             * the host copy (its chunks may hold another block by now) */
            if (p->built_async && !managed && b->host_ready > h) {
                s->res->host_evict_wait_seconds += b->host_ready - h;
                h = b->host_ready;
            }
            if (b->host_ready > ready) ready = b->host_ready;
            extra += (double)o->bytes /
                     ((managed ? s->r->managed_h2d.gbps[0] : s->r->host_read_gbps) * 1e9);
            break;
        case OP_HOST: /* async: as OP_OVERFLOW */
            if (p->built_async && !managed && b->host_ready > h) {
                s->res->host_evict_wait_seconds += b->host_ready - h;
                h = b->host_ready;
            }
            if (b->host_ready > ready) ready = b->host_ready;
            break;
        case OP_USE:
            /* built_ahead: the host's feedback, late when the launch
             * waited for the copy: it ended after both the launch's
             * submission and the end of the launch before it */
            if (b->ahead) swap_ahead_used(&s->ahead, b->dev_ready > (h > s->queue ? h : s->queue));
            break;
        }
        if (o->kind == OP_FETCH && o->predicted) swap_ahead_used(&s->ahead, true);
        if (o->kind != OP_HOST) b->ahead = false;
        if (o->kind == OP_USE || o->kind == OP_FETCH || o->kind == OP_FIRST) {
            if (b->dev_ready > ready) ready = b->dev_ready;
        }
    }
    s->host = h + s->r->submit_us * 1e-6;
    double start = s->host > s->queue ? s->host : s->queue;
    if (ready > start) start = ready;
    if (mt > start) start = mt;
    *end = start + device + extra;
    return rc;
}

/* built_ahead (swap_model.h): after a launch is submitted, the engine's
 * fetches ahead (swap_engine_fetch_ahead: the policy's prefetch decisions
 * within the horizon), executed by the mover thread from the host's time
 * on: each victim as an async eviction (its write-back ordered on the
 * device after its events, then its remap to the host copy), then the
 * block's remap to device chunks and its copy on the host->device engine,
 * which waits for the victims' write-backs (their chunks). A block on the
 * managed path migrates on the launch's stream, as on demand. */
static int fetch_ahead(struct state *s, struct swap_policy *pol)
{
    const struct swap_model_params *p = s->p;
    double h = s->host;
    for (unsigned k = 0; k < SWAP_AHEAD_PER_LAUNCH; k++) {
        uint64_t id;
        struct swap_decision d;
        int rc = swap_policy_prefetch(pol, s->ahead.horizon, &id, &d);
        if (rc == -ENOENT) return 0;
        if (rc) return rc;
        if (d.n_evict > s->cap_ahead_remap) {
            struct blk **a = realloc(s->ahead_remap, d.n_evict * sizeof(*a));
            if (!a) return -ENOMEM;
            s->ahead_remap = a;
            s->cap_ahead_remap = d.n_evict;
        }
        double handover = 0;
        size_t n_remap = 0;
        for (size_t i = 0; i < d.n_evict; i++) {
            struct blk *v = blk_get(s, d.evict[i].block);
            if (!v) return -ENOMEM;
            uint64_t bytes = d.evict[i].bytes;
            v->ahead = false;
            if (p->unit == SWAP_MODEL_UNIT_SMALL_MANAGED && bytes < 2 * MIB) {
                double t = s->queue > h ? s->queue : h;
                s->queue = t + swap_model_curve_seconds(&s->r->managed_d2h, bytes);
                count_move(s, false, bytes);
                v->host_ready = s->queue;
                continue;
            }
            double ev = p->built_wait == SWAP_MODEL_WAIT_LAST_USE ? v->last_end : s->queue;
            if (v->dev_ready > ev) ev = v->dev_ready;
            if (h > ev) ev = h;
            if (d.evict[i].writeback) {
                double cs = s->d2h > ev ? s->d2h : ev;
                ev = s->d2h = copy_end(s, &s->r->pinned_d2h, cs, s->h2d, bytes);
                count_move(s, false, bytes);
            }
            if (ev > handover) handover = ev;
            v->host_ready = ev; /* its remap, below, after the block's map */
            s->ahead_remap[n_remap++] = v;
        }
        struct blk *b = blk_get(s, id);
        if (!b) return -ENOMEM;
        b->ahead = true;
        uint64_t bytes = b->bytes;
        if (p->unit == SWAP_MODEL_UNIT_SMALL_MANAGED && bytes < 2 * MIB) {
            double t = s->queue > h ? s->queue : h;
            if (b->host_ready > t) t = b->host_ready;
            s->queue = t + swap_model_curve_seconds(&s->r->managed_h2d, bytes);
            count_move(s, true, bytes);
            b->dev_ready = s->queue;
            continue;
        }
        uint64_t chunks = (bytes + 2 * MIB - 1) / (2 * MIB);
        double map = swap_model_remap_seconds(s->r, bytes) +
                     (double)(chunks ? chunks - 1 : 0) * s->r->map_chunk_us * 1e-6;
        double rs = b->host_ready > h ? b->host_ready : h;
        double re = mover_run(s, rs, map);
        double cs = re > s->h2d ? re : s->h2d;
        if (handover > cs) cs = handover;
        s->h2d = copy_end(s, &s->r->pinned_h2d, cs, s->d2h, bytes);
        count_move(s, true, bytes);
        b->dev_ready = s->h2d;
        /* the victims' ranges to their host copies, once their events (and
         * write-backs) are done: the block's map took their chunks at once,
         * as the host's does with async evictions */
        for (size_t i = 0; i < n_remap; i++) {
            struct blk *v = s->ahead_remap[i];
            v->host_ready = mover_run(s, v->host_ready, swap_model_remap_seconds(s->r, v->bytes));
        }
    }
    return 0;
}

/* Time the current launch: its submission, its moves, its run. */
static int launch_done(struct state *s)
{
    const struct swap_model_params *p = s->p;
    double device = launch_device_seconds(s), end = 0;
    int rc = 0;
    if (p->engine != SWAP_MODEL_BUILT) s->host += s->r->submit_us * 1e-6;
    if (p->engine == SWAP_MODEL_BUILT)
        rc = time_built(s, device, &end);
    else if (p->engine == SWAP_MODEL_VMM)
        rc = time_vmm(s, s->host, device, &end);
    else
        rc = time_managed(s, s->host, device, &end);
    if (rc) return rc;
    s->queue = end;
    s->last_end = end;
    /* a copy or set alone: the host waits for it (the trace does not tell
     * a synchronous copy from an asynchronous one; a program's copies to
     * and from pageable memory are synchronous) */
    if (s->copy_bytes && !s->launch_bytes && end > s->host) s->host = end;
    for (size_t i = 0; i < s->n_ops; i++) {
        const struct op *o = &s->ops[i];
        if (o->kind == OP_EVICT) continue;
        struct blk *b = blk_get(s, o->block);
        if (!b) return -ENOMEM;
        b->last_end = end;
    }
    struct swap_model_iter *it = iter_cur(s);
    it->launches++;
    s->res->launches++;
    s->n_ops = 0;
    s->launch_bytes = s->copy_bytes = 0;
    s->launch++;
    return 0;
}

static void link_read(struct state *s, uint64_t bytes)
{
    s->res->link_read_bytes += bytes;
    iter_cur(s)->link_read_bytes += bytes;
}

/* A SWAP_MODEL_EV_UNSEEN access (swap_model.h): the policy is not told.
 * Resident, the launch waits for the chunk's moves as for its own blocks
 * and a write makes it dirty for its next eviction; on the host, the
 * launch reads its bytes over the link, as an overflow's. */
static int access_unseen(struct state *s, struct swap_policy *pol, const struct swap_event *e)
{
    if (pol && swap_policy_is_resident(pol, e->block)) {
        struct blk *b = blk_get(s, e->block);
        if (!b) return -ENOMEM;
        if (e->is_write) b->unseen_dirty = true;
        return op_push(s, (struct op){.block = e->block, .kind = OP_USE, .unseen = true});
    }
    if (!pol) return 0;
    link_read(s, e->bytes);
    return op_push(
        s, (struct op){.block = e->block, .bytes = e->bytes, .kind = OP_OVERFLOW, .unseen = true});
}

static int access(struct state *s, struct swap_policy *pol, const struct swap_event *e,
                  uint64_t next)
{
    if (e->is_copy)
        s->copy_bytes += e->bytes;
    else
        s->launch_bytes += e->bytes;
    if (s->p->built_ahead) {
        struct blk *b = blk_get(s, e->block);
        if (!b) return -ENOMEM;
        b->bytes = e->bytes;
    }
    if (!pol) return op_push(s, (struct op){.block = e->block, .bytes = e->bytes, .kind = OP_USE});
    struct swap_decision d;
    int rc;
    if (!s->p->built_ahead) d.predicted = false;
    if (s->p->kind == SWAP_POLICY_MIN)
        rc = swap_policy_access_known(pol, e->block, e->bytes, e->is_write, e->is_copy, next, &d);
    else if (e->is_copy)
        rc = swap_policy_copy(pol, e->block, e->bytes, e->is_write, &d);
    else
        rc = swap_policy_access(pol, e->block, e->bytes, e->is_write, &d);
    if (rc == -ENOSPC) {
        s->res->overflows++;
        link_read(s, e->bytes);
        return op_push(s, (struct op){.block = e->block, .bytes = e->bytes, .kind = OP_OVERFLOW});
    }
    if (rc) return rc;
    for (size_t i = 0; i < d.n_evict && !rc; i++) {
        struct blk *b;
        HASH_FIND(hh, s->blocks, &d.evict[i].block, sizeof(d.evict[i].block), b);
        bool unseen_dirty = b && b->unseen_dirty;
        if (b) b->unseen_dirty = false;
        rc = op_push(s, (struct op){.block = d.evict[i].block,
                                    .bytes = d.evict[i].bytes,
                                    .kind = OP_EVICT,
                                    .writeback = d.evict[i].writeback || unseen_dirty});
    }
    if (rc) return rc;
    uint8_t kind = OP_USE;
    if (d.fetch)
        kind = OP_FETCH;
    else if (d.first_touch)
        kind = OP_FIRST;
    else if (e->is_copy && !swap_policy_is_resident(pol, e->block))
        kind = OP_HOST;
    return op_push(s, (struct op){.block = e->block,
                                  .bytes = e->bytes,
                                  .kind = kind,
                                  .predicted = s->p->built_ahead && d.predicted});
}

/* Each launch's device time in t as the model takes it (recorded or
 * estimated), in nanoseconds: what a rewritten trace keeps, since its
 * units' sizes are not the bytes its kernels touch. *estimated: how many
 * were estimated. -ENOMEM. */
static int launch_durations(const struct swap_trace *t, const struct swap_model_params *p,
                            const struct swap_model_rates *r, uint64_t **out, size_t *n,
                            uint64_t *estimated)
{
    struct swap_model_result res = {0};
    struct state s = {.p = p, .r = r, .res = &res};
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    bool open = false;
    for (size_t i = 0; i <= t->n; i++) {
        bool last = i == t->n;
        if (!last && t->ev[i].kind == SWAP_EV_ACCESS) {
            if (t->ev[i].is_copy)
                s.copy_bytes += t->ev[i].bytes;
            else
                s.launch_bytes += t->ev[i].bytes;
            open = true;
            continue;
        }
        if (last ? !open : t->ev[i].kind != SWAP_EV_LAUNCH) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 1024;
            uint64_t *a = realloc(*out, cap * sizeof(*a));
            if (!a) {
                free(*out);
                *out = NULL;
                return -ENOMEM;
            }
            *out = a;
        }
        (*out)[(*n)++] = (uint64_t)llround(launch_device_seconds(&s) * 1e9);
        s.launch++;
        s.launch_bytes = s.copy_bytes = 0;
        open = false;
    }
    *estimated = res.estimated_launches;
    return 0;
}

/* The run on a rewritten trace (params.segments, SWAP_MODEL_UNIT_PACK),
 * with the original's launch durations. */
static int run_rewritten(const struct swap_trace *t, const struct swap_model_params *p,
                         struct swap_model_result *r)
{
    struct swap_model_rates defaults;
    swap_model_default_rates(&defaults);
    const struct swap_model_rates *rates = p->rates ? p->rates : &defaults;
    struct swap_trace seg = {0}, packed = {0};
    const struct swap_trace *cur = t;
    uint64_t *ns = NULL, estimated = 0;
    size_t n = 0;
    int rc = launch_durations(t, p, rates, &ns, &n, &estimated);
    if (!rc && p->segments) {
        rc = swap_model_segments_extent(cur, p->chunk, p->extent, &seg);
        cur = &seg;
    }
    if (!rc && p->unit == SWAP_MODEL_UNIT_PACK) {
        rc = swap_model_pack(cur, p->unit_bytes, &packed);
        cur = &packed;
    }
    if (!rc) {
        struct swap_model_params q = *p;
        q.segments = false;
        if (q.unit == SWAP_MODEL_UNIT_PACK) q.unit = SWAP_MODEL_UNIT_BLOCK;
        q.launch_ns = ns;
        q.n_launch_ns = n;
        rc = swap_model_run(cur, &q, r);
        if (!rc) r->estimated_launches = estimated;
    }
    swap_trace_fini(&seg);
    swap_trace_fini(&packed);
    free(ns);
    return rc;
}

int swap_model_run(const struct swap_trace *t, const struct swap_model_params *p,
                   struct swap_model_result *r)
{
    if (!t || !p || !r) return -EINVAL;
    if (p->engine != SWAP_MODEL_NONE && p->engine != SWAP_MODEL_MANAGED &&
        p->engine != SWAP_MODEL_VMM && p->engine != SWAP_MODEL_BUILT)
        return -EINVAL;
    bool vmm = p->engine == SWAP_MODEL_VMM || p->engine == SWAP_MODEL_BUILT;
    if ((p->engine == SWAP_MODEL_BUILT && p->unit == SWAP_MODEL_UNIT_PACK && !p->unit_bytes) ||
        (p->extent != SWAP_MODEL_EXTENT_TRUE && p->unit == SWAP_MODEL_UNIT_PACK))
        return -EINVAL;
    if (p->built_ahead && (p->engine != SWAP_MODEL_BUILT || !p->built_async ||
                           p->built_remaps_serial || p->kind != SWAP_POLICY_HISTORY))
        return -EINVAL;
    if (p->engine == SWAP_MODEL_VMM &&
        (p->movers > SWAP_MODEL_MOVERS_MAX || (p->headroom && p->headroom >= p->budget) ||
         (p->unit == SWAP_MODEL_UNIT_PACK && !p->unit_bytes)))
        return -EINVAL;
    if ((p->engine != SWAP_MODEL_NONE && p->segments) || (vmm && p->unit == SWAP_MODEL_UNIT_PACK))
        return run_rewritten(t, p, r);
    struct swap_model_rates defaults;
    swap_model_default_rates(&defaults);
    struct state s = {.p = p, .r = p->rates ? p->rates : &defaults, .res = r};
    memset(r, 0, sizeof(*r));
    struct swap_policy *pol = NULL;
    uint64_t *next = NULL;
    int rc = 0;
    s.movers = p->movers ? p->movers : 1;
    if (s.movers > SWAP_MODEL_MOVERS_MAX) return -EINVAL;
    if (p->engine == SWAP_MODEL_BUILT && !p->mover_fifo &&
        !(s.spans = calloc((size_t)s.movers * MOVER_SPANS, sizeof(*s.spans))))
        return -ENOMEM;
    swap_ahead_init(&s.ahead);
    s.capacity = (int64_t)p->budget;
    if (p->engine != SWAP_MODEL_NONE) {
        uint64_t room = p->engine == SWAP_MODEL_VMM ? p->headroom : 0;
        struct swap_params prm = {.kind = p->kind, .budget_bytes = p->budget - room};
        rc = swap_policy_create_params(&prm, &pol);
        if (!rc && p->clean_weight > 0) swap_policy_set_clean_weight(pol, p->clean_weight);
        if (!rc && p->ahead_margin > 0) swap_policy_set_ahead_margin(pol, p->ahead_margin);
        if (!rc && p->kind == SWAP_POLICY_MIN) rc = swap_replay_next_uses(t, &next);
    }
    if (!rc) rc = iter_open(&s);
    double iter_start = 0;
    for (size_t i = 0; i < t->n && !rc; i++) {
        const struct swap_event *e = &t->ev[i];
        switch (e->kind) {
        case SWAP_EV_ACCESS:
            rc = access(&s, pol, e, next ? next[i] : SWAP_NEVER);
            break;
        case SWAP_MODEL_EV_UNSEEN:
            rc = access_unseen(&s, pol, e);
            break;
        case SWAP_EV_LAUNCH:
            rc = launch_done(&s);
            if (pol) swap_policy_next_launch(pol);
            if (!rc && pol && p->built_ahead) {
                swap_ahead_end_launch(&s.ahead);
                rc = fetch_ahead(&s, pol);
            }
            break;
        case SWAP_EV_FREE:
            if (pol) swap_policy_free(pol, e->block);
            rc = block_freed(&s, e->block);
            break;
        case SWAP_EV_ITER:
            iter_cur(&s)->seconds = s.last_end - iter_start;
            iter_start = s.last_end;
            rc = iter_open(&s);
            break;
        }
    }
    /* accesses after the last L form a launch of their own */
    if (!rc && s.n_ops) {
        rc = launch_done(&s);
    }
    if (!rc) {
        struct swap_model_iter *it = iter_cur(&s);
        if (it->launches || r->iterations == 1)
            it->seconds = s.last_end - iter_start;
        else
            r->iterations--; /* the trace ended with an I line */
        r->seconds = s.last_end;
    }
    struct blk *b, *tmp;
    HASH_ITER(hh, s.blocks, b, tmp)
    {
        HASH_DEL(s.blocks, b);
        free(b);
    }
    free(s.ops);
    free(s.occ);
    free(s.pending);
    free(s.ahead_remap);
    free(s.spans);
    free(next);
    if (pol) swap_policy_destroy(pol);
    if (rc) swap_model_result_fini(r);
    return rc;
}

int swap_model_offline(const struct swap_trace *t, uint64_t budget,
                       const struct swap_model_rates *rates, struct swap_model_result *r,
                       const char **which)
{
    /* swap_min.c's family of clean weights */
    static const double weights[] = {1.0, 1.5, 2.0, 3.0, 4.0, 8.0};
    struct {
        enum swap_policy_kind kind;
        double w;
    } runs[8];
    size_t n = 0;
    for (size_t k = 0; k < sizeof(weights) / sizeof(weights[0]); k++)
        runs[n].kind = SWAP_POLICY_MIN, runs[n++].w = weights[k];
    runs[n].kind = SWAP_POLICY_HISTORY, runs[n++].w = 0;
    runs[n].kind = SWAP_POLICY_LRU, runs[n++].w = 0;
    bool have = false;
    memset(r, 0, sizeof(*r));
    for (size_t k = 0; k < n; k++) {
        struct swap_model_params p = {.engine = SWAP_MODEL_VMM,
                                      .kind = runs[k].kind,
                                      .budget = budget,
                                      .clean_weight = runs[k].w,
                                      .rates = rates};
        struct swap_model_result one;
        int rc = swap_model_run(t, &p, &one);
        if (rc) {
            swap_model_result_fini(r);
            return rc;
        }
        if (!have || one.h2d_bytes + one.d2h_bytes < r->h2d_bytes + r->d2h_bytes) {
            swap_model_result_fini(r);
            *r = one;
            have = true;
            if (which) *which = swap_policy_kind_name(runs[k].kind);
        } else {
            swap_model_result_fini(&one);
        }
    }
    return 0;
}
