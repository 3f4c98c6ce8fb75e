/* swap_pack: rewrites of a trace into the units an engine moves
 * (swap_model.h): blocks packed in allocation order into units of a fixed
 * size (swap_model_pack), and a PyTorch program's tensors placed in the
 * caching allocator's segments (swap_model_segments), with each kernel
 * access's chunks from the trace or as the shim would learn them
 * (swap_model_segments_extent). Both keep every L, F of a unit and I in
 * place; a unit's accesses in one launch are merged into one, at the
 * position of its first member's access (learned extents: the launch's
 * SWAP_MODEL_EV_UNSEEN events after them). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "swap_extent.h"
#include "swap_model.h"
#include "uthash_wrap.h"

#define MIB (1024ULL * 1024ULL)

/* A live block of the input: the unit that holds it. */
struct member {
    uint64_t block, unit;
    UT_hash_handle hh;
};

/* One unit access of the current launch. */
struct pending {
    uint64_t unit, bytes;
    bool write, copy;
};

struct rewriter {
    struct swap_trace *out;
    struct member *live;
    struct pending *p;
    size_t n_p, cap_p;
};

static int rw_access(struct rewriter *w, uint64_t unit, uint64_t bytes, const struct swap_event *e)
{
    for (size_t i = 0; i < w->n_p; i++) {
        if (w->p[i].unit != unit) continue;
        w->p[i].write |= e->is_write;
        w->p[i].copy &= e->is_copy;
        return 0;
    }
    if (w->n_p == w->cap_p) {
        size_t cap = w->cap_p ? 2 * w->cap_p : 32;
        struct pending *a = realloc(w->p, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        w->p = a;
        w->cap_p = cap;
    }
    w->p[w->n_p++] = (struct pending){unit, bytes, e->is_write, e->is_copy};
    return 0;
}

static int rw_flush(struct rewriter *w)
{
    int rc = 0;
    for (size_t i = 0; i < w->n_p && !rc; i++)
        rc = swap_trace_push(w->out, (struct swap_event){.kind = SWAP_EV_ACCESS,
                                                         .block = w->p[i].unit,
                                                         .bytes = w->p[i].bytes,
                                                         .is_write = w->p[i].write,
                                                         .is_copy = w->p[i].copy});
    w->n_p = 0;
    return rc;
}

static struct member *rw_find(struct rewriter *w, uint64_t block)
{
    struct member *m;
    HASH_FIND(hh, w->live, &block, sizeof(block), m);
    return m;
}

static int rw_add(struct rewriter *w, uint64_t block, uint64_t unit)
{
    struct member *m = calloc(1, sizeof(*m));
    if (!m) return -ENOMEM;
    m->block = block;
    m->unit = unit;
    HASH_ADD(hh, w->live, block, sizeof(m->block), m);
    if (!UTH_ADDED(m, hh)) {
        free(m);
        return -ENOMEM;
    }
    return 0;
}

static void rw_fini(struct rewriter *w)
{
    struct member *m, *tmp;
    HASH_ITER(hh, w->live, m, tmp)
    {
        HASH_DEL(w->live, m);
        free(m);
    }
    free(w->p);
}

/* ---- packing in allocation order ----------------------------------------- */

struct unit {
    uint64_t size, used, alive;
};

int swap_model_pack(const struct swap_trace *in, uint64_t unit_bytes, struct swap_trace *out)
{
    if (!in || !out || !unit_bytes) return -EINVAL;
    struct rewriter w = {.out = out};
    struct unit *u = NULL;
    size_t n_u = 0, cap_u = 0;
    uint64_t open = 0; /* the unit new blocks go into; ids are index + 1 */
    int rc = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const struct swap_event *e = &in->ev[i];
        if (e->kind == SWAP_EV_ACCESS) {
            struct member *m = rw_find(&w, e->block);
            if (!m) {
                uint64_t id;
                if (e->bytes < unit_bytes && open && u[open - 1].used + e->bytes <= unit_bytes) {
                    id = open;
                } else {
                    if (n_u == cap_u) {
                        size_t cap = cap_u ? 2 * cap_u : 64;
                        struct unit *a = realloc(u, cap * sizeof(*a));
                        if (!a) {
                            rc = -ENOMEM;
                            break;
                        }
                        u = a;
                        cap_u = cap;
                    }
                    uint64_t size = e->bytes < unit_bytes
                                        ? unit_bytes
                                        : (e->bytes + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
                    u[n_u++] = (struct unit){.size = size};
                    id = n_u;
                    if (e->bytes < unit_bytes) {
                        /* the old open unit takes no more blocks */
                        if (open && !u[open - 1].alive) {
                            rc = rw_flush(&w);
                            if (!rc)
                                rc = swap_trace_push(
                                    out, (struct swap_event){.kind = SWAP_EV_FREE, .block = open});
                        }
                        open = id;
                    }
                }
                u[id - 1].used += e->bytes;
                u[id - 1].alive++;
                if (!rc) rc = rw_add(&w, e->block, id);
                if (rc) break;
                m = rw_find(&w, e->block);
            }
            rc = rw_access(&w, m->unit, u[m->unit - 1].size, e);
        } else if (e->kind == SWAP_EV_FREE) {
            struct member *m = rw_find(&w, e->block);
            if (!m) continue;
            uint64_t id = m->unit;
            HASH_DEL(w.live, m);
            free(m);
            if (--u[id - 1].alive == 0 && id != open) {
                /* freed after this launch's accesses to it: flush first */
                rc = rw_flush(&w);
                if (!rc)
                    rc = swap_trace_push(out,
                                         (struct swap_event){.kind = SWAP_EV_FREE, .block = id});
            }
        } else {
            rc = rw_flush(&w);
            if (!rc) rc = swap_trace_push(out, *e);
        }
    }
    if (!rc) rc = rw_flush(&w);
    free(u);
    rw_fini(&w);
    if (rc) swap_trace_fini(out);
    return rc;
}

/* ---- PyTorch's caching allocator ------------------------------------------ */

#define PT_MIN_BLOCK 512ULL
#define PT_SMALL_SIZE (1 * MIB)
#define PT_SMALL_BUFFER (2 * MIB)
#define PT_LARGE_BUFFER (20 * MIB)
#define PT_MIN_LARGE_ALLOC (10 * MIB)
#define PT_ROUND_LARGE (2 * MIB)

/* A piece of a segment, free or held by a tensor; a segment's pieces are
 * a list in address order. */
struct piece {
    uint64_t seg, off, size;
    bool free;
    struct piece *prev, *next;
};

struct segment {
    uint64_t size;
    bool small;
    struct piece *first;
    struct swap_extent starts; /* SWAP_MODEL_EXTENT_LEARNED: the starts seen in it */
};

/* SWAP_MODEL_EXTENT_LEARNED: the current launch's accesses, placed, kept
 * until its end so that every start pointer of the launch is known before
 * any extent is taken; and the chunks after the learned extents. */
struct placed {
    uint64_t seg, off, bytes;
    bool write, copy;
};

struct unseen {
    uint64_t unit, bytes;
    bool write;
};

struct launch_buf {
    struct placed *a;
    size_t n, cap;
    struct unseen *u;
    size_t n_u, cap_u;
};

static int placed_push(struct launch_buf *l, struct placed a)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        struct placed *b = realloc(l->a, cap * sizeof(*b));
        if (!b) return -ENOMEM;
        l->a = b;
        l->cap = cap;
    }
    l->a[l->n++] = a;
    return 0;
}

/* A chunk after a learned extent, merged with the launch's others. */
static int unseen_add(struct launch_buf *l, uint64_t unit, uint64_t bytes, uint64_t chunk_bytes,
                      bool write)
{
    for (size_t i = 0; i < l->n_u; i++) {
        if (l->u[i].unit != unit) continue;
        l->u[i].bytes += bytes;
        if (l->u[i].bytes > chunk_bytes) l->u[i].bytes = chunk_bytes;
        l->u[i].write |= write;
        return 0;
    }
    if (l->n_u == l->cap_u) {
        size_t cap = l->cap_u ? 2 * l->cap_u : 32;
        struct unseen *b = realloc(l->u, cap * sizeof(*b));
        if (!b) return -ENOMEM;
        l->u = b;
        l->cap_u = cap;
    }
    l->u[l->n_u++] = (struct unseen){unit, bytes, write};
    return 0;
}

/* The launch's accesses in learned extents (swap_model.h), then its
 * SWAP_MODEL_EV_UNSEEN events for the chunks no extent of the launch
 * covers. -ENOMEM. */
static int learned_flush(struct rewriter *w, struct launch_buf *l, struct segment *sg,
                         uint64_t chunk)
{
    int rc = 0;
    for (size_t i = 0; i < l->n && !rc; i++) {
        rc = swap_extent_add(&sg[l->a[i].seg].starts, l->a[i].off);
        if (rc == -ENOSPC) rc = 0; /* the bound: longer extents, as in the shim */
    }
    for (size_t i = 0; i < l->n && !rc; i++) {
        const struct placed *a = &l->a[i];
        const struct segment *seg = &sg[a->seg];
        uint64_t last = (seg->size - 1) / chunk;
        uint64_t c0 = a->off / chunk, c1 = (a->off + a->bytes - 1) / chunk;
        uint64_t end = a->copy ? c1 : (swap_extent_next(&seg->starts, a->off) - 1) / chunk;
        struct swap_event e = {.kind = SWAP_EV_ACCESS, .is_write = a->write, .is_copy = a->copy};
        for (uint64_t c = a->copy ? c0 : 0; c <= last && !rc; c++) {
            uint64_t lo = c * chunk, hi = lo + chunk < seg->size ? lo + chunk : seg->size;
            uint64_t unit = (a->seg + 1) << 24 | c;
            if (c >= c0 && c <= end) {
                rc = rw_access(w, unit, hi - lo, &e);
            } else if (!a->copy) {
                uint64_t s = a->off > lo ? a->off : lo;
                uint64_t t = a->off + a->bytes < hi ? a->off + a->bytes : hi;
                rc = unseen_add(l, unit, t > s ? t - s : 0, hi - lo, a->write);
            }
        }
    }
    size_t n_u = 0;
    for (size_t i = 0; i < l->n_u; i++) { /* a chunk another extent covers is seen */
        bool seen = false;
        for (size_t k = 0; k < w->n_p && !seen; k++)
            seen = w->p[k].unit == l->u[i].unit;
        if (!seen) l->u[n_u++] = l->u[i];
    }
    if (!rc) rc = rw_flush(w);
    for (size_t i = 0; i < n_u && !rc; i++)
        rc = swap_trace_push(w->out, (struct swap_event){.kind = SWAP_MODEL_EV_UNSEEN,
                                                         .block = l->u[i].unit,
                                                         .bytes = l->u[i].bytes,
                                                         .is_write = l->u[i].write});
    l->n = l->n_u = 0;
    return rc;
}

/* A live tensor: its piece. */
struct tensor {
    uint64_t block;
    struct piece *piece;
    UT_hash_handle hh;
};

int swap_model_segments(const struct swap_trace *in, uint64_t chunk, struct swap_trace *out)
{
    return swap_model_segments_extent(in, chunk, SWAP_MODEL_EXTENT_TRUE, out);
}

int swap_model_segments_extent(const struct swap_trace *in, uint64_t chunk,
                               enum swap_model_extent extent, struct swap_trace *out)
{
    if (!in || !out || (extent != SWAP_MODEL_EXTENT_TRUE && extent != SWAP_MODEL_EXTENT_LEARNED))
        return -EINVAL;
    bool learned = extent == SWAP_MODEL_EXTENT_LEARNED && chunk;
    struct launch_buf lb = {0};
    struct rewriter w = {.out = out};
    struct segment *sg = NULL;
    size_t n_sg = 0, cap_sg = 0;
    struct tensor *live = NULL;
    int rc = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const struct swap_event *e = &in->ev[i];
        if (e->kind == SWAP_EV_ACCESS) {
            struct tensor *t;
            HASH_FIND(hh, live, &e->block, sizeof(e->block), t);
            if (!t) {
                uint64_t size = (e->bytes + PT_MIN_BLOCK - 1) / PT_MIN_BLOCK * PT_MIN_BLOCK;
                bool small = size <= PT_SMALL_SIZE;
                struct piece *best = NULL;
                for (size_t k = 0; k < n_sg; k++) {
                    if (sg[k].small != small) continue;
                    for (struct piece *p = sg[k].first; p; p = p->next)
                        if (p->free && p->size >= size && (!best || p->size < best->size)) best = p;
                }
                if (!best) {
                    if (n_sg == cap_sg) {
                        size_t cap = cap_sg ? 2 * cap_sg : 64;
                        struct segment *a = realloc(sg, cap * sizeof(*a));
                        if (!a) {
                            rc = -ENOMEM;
                            break;
                        }
                        sg = a;
                        cap_sg = cap;
                    }
                    uint64_t ss = small                       ? PT_SMALL_BUFFER
                                  : size < PT_MIN_LARGE_ALLOC ? PT_LARGE_BUFFER
                                                              : (size + PT_ROUND_LARGE - 1) /
                                                                    PT_ROUND_LARGE * PT_ROUND_LARGE;
                    if (!(best = calloc(1, sizeof(*best)))) {
                        rc = -ENOMEM;
                        break;
                    }
                    *best = (struct piece){.seg = n_sg, .size = ss, .free = true};
                    sg[n_sg] = (struct segment){.size = ss, .small = small, .first = best};
                    swap_extent_init(&sg[n_sg++].starts, ss);
                }
                uint64_t rest = best->size - size;
                if (small ? rest >= PT_MIN_BLOCK : rest > PT_SMALL_SIZE) {
                    struct piece *r = calloc(1, sizeof(*r));
                    if (!r) {
                        rc = -ENOMEM;
                        break;
                    }
                    *r = (struct piece){.seg = best->seg,
                                        .off = best->off + size,
                                        .size = rest,
                                        .free = true,
                                        .prev = best,
                                        .next = best->next};
                    if (best->next) best->next->prev = r;
                    best->next = r;
                    best->size = size;
                }
                best->free = false;
                if (!(t = calloc(1, sizeof(*t)))) {
                    rc = -ENOMEM;
                    break;
                }
                t->block = e->block;
                t->piece = best;
                HASH_ADD(hh, live, block, sizeof(t->block), t);
                if (!UTH_ADDED(t, hh)) {
                    free(t);
                    rc = -ENOMEM;
                    break;
                }
            }
            uint64_t seg = t->piece->seg;
            if (!chunk) {
                rc = rw_access(&w, seg + 1, sg[seg].size, e);
                continue;
            }
            if (learned) {
                rc = placed_push(
                    &lb, (struct placed){seg, t->piece->off, e->bytes, e->is_write, e->is_copy});
                continue;
            }
            uint64_t c0 = t->piece->off / chunk, c1 = (t->piece->off + e->bytes - 1) / chunk;
            for (uint64_t c = c0; c <= c1 && !rc; c++) {
                uint64_t bytes =
                    sg[seg].size - c * chunk < chunk ? sg[seg].size - c * chunk : chunk;
                rc = rw_access(&w, (seg + 1) << 24 | c, bytes, e);
            }
        } else if (e->kind == SWAP_EV_FREE) {
            struct tensor *t;
            HASH_FIND(hh, live, &e->block, sizeof(e->block), t);
            if (!t) continue;
            struct piece *p = t->piece;
            HASH_DEL(live, t);
            free(t);
            p->free = true;
            if (p->next && p->next->free) {
                struct piece *n = p->next;
                p->size += n->size;
                p->next = n->next;
                if (n->next) n->next->prev = p;
                free(n);
            }
            if (p->prev && p->prev->free) {
                struct piece *q = p->prev;
                q->size += p->size;
                q->next = p->next;
                if (p->next) p->next->prev = q;
                free(p);
            }
        } else {
            rc = learned ? learned_flush(&w, &lb, sg, chunk) : rw_flush(&w);
            if (!rc) rc = swap_trace_push(out, *e);
        }
    }
    if (!rc) rc = learned ? learned_flush(&w, &lb, sg, chunk) : rw_flush(&w);
    free(lb.a);
    free(lb.u);
    struct tensor *t, *tmp;
    HASH_ITER(hh, live, t, tmp)
    {
        HASH_DEL(live, t);
        free(t);
    }
    for (size_t k = 0; k < n_sg; k++) {
        struct piece *p = sg[k].first;
        while (p) {
            struct piece *n = p->next;
            free(p);
            p = n;
        }
        swap_extent_fini(&sg[k].starts);
    }
    free(sg);
    rw_fini(&w);
    if (rc) swap_trace_fini(out);
    return rc;
}
