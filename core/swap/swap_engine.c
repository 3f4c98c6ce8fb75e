/* swap_engine: budget accounting, victims and fetches ahead for host swap,
 * over the host's move (swap_engine.h, host.h). The shim keeps only
 * the hooks (allocation, free, launch scan, copies) and the CUDA moves. */
#include "swap_engine.h"

#include <errno.h>
#include <stdlib.h>

struct swap_engine {
    struct swap_ops ops;
    enum swap_policy_kind kind;
    uint64_t budget;
    struct swap_index *index;
    struct swap_policy *policies[SWAP_ENGINE_MAX_DEVICES];
    struct swap_ahead ahead[SWAP_ENGINE_MAX_DEVICES]; /* fetch-ahead horizons */
    uint64_t touched; /* bit d: device d's policy was used by the current launch */
    struct swap_engine_counts c;
};

int swap_engine_create(enum swap_policy_kind kind, uint64_t budget, const struct swap_ops *ops,
                       struct swap_engine **out)
{
    if (!out) return -EINVAL;
    *out = NULL;
    if (!budget || !ops || !ops->move || kind > SWAP_POLICY_HISTORY) return -EINVAL;
    struct swap_engine *e = calloc(1, sizeof(*e));
    if (!e) return -ENOMEM;
    e->ops = *ops;
    e->kind = kind;
    e->budget = budget;
    int rc = swap_index_create(&e->index);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void swap_engine_destroy(struct swap_engine *e)
{
    if (!e) return;
    for (int d = 0; d < SWAP_ENGINE_MAX_DEVICES; d++)
        swap_policy_destroy(e->policies[d]);
    swap_index_destroy(e->index);
    free(e);
}

/* Device d's policy, created on first use; NULL on -ENOMEM or a bad d. */
static struct swap_policy *policy_of(struct swap_engine *e, int d)
{
    if (d < 0 || d >= SWAP_ENGINE_MAX_DEVICES) return NULL;
    if (!e->policies[d]) {
        if (swap_policy_create(e->kind, e->budget, &e->policies[d])) return NULL;
        swap_ahead_init(&e->ahead[d]);
    }
    return e->policies[d];
}

int swap_engine_add(struct swap_engine *e, uint64_t base, uint64_t size, int device,
                    uint64_t charge_unit)
{
    if (!e || !size || device < 0 || device >= SWAP_ENGINE_MAX_DEVICES || !charge_unit)
        return -EINVAL;
    struct swap_block b = {.base = base,
                           .size = size,
                           .device = device,
                           .charge = (size + charge_unit - 1) / charge_unit * charge_unit};
    return swap_index_insert(e->index, &b);
}

int swap_engine_remove(struct swap_engine *e, uint64_t base, struct swap_block *out)
{
    struct swap_block b;
    int rc = swap_index_remove(e->index, base, &b);
    if (rc) return rc;
    struct swap_policy *p =
        b.device >= 0 && b.device < SWAP_ENGINE_MAX_DEVICES ? e->policies[b.device] : NULL;
    if (p) swap_policy_free(p, b.base);
    if (out) *out = b;
    return 0;
}

struct swap_block *swap_engine_find(const struct swap_engine *e, uint64_t addr)
{
    return swap_index_find(e->index, addr);
}

struct swap_index *swap_engine_index(struct swap_engine *e)
{
    return e->index;
}

/* Move b to device (or the host, -1) through the table; the note follows
 * only a successful move. placing: b is new (nothing to copy); dirty: an
 * eviction that must write the device copy back. */
static bool move(struct swap_engine *e, struct swap_block *b, int device, uint64_t stream,
                 bool placing, bool dirty, unsigned more)
{
    unsigned flags =
        (placing ? HOST_MOVE_NEW : 0) | (dirty && device < 0 ? HOST_MOVE_DIRTY : 0) | more;
    if (device < 0) b->ahead = false;
    if (e->ops.move(e->ops.ctx, b->base, b->size, device, stream, flags)) {
        e->c.move_failures++;
        return false;
    }
    if (placing)
        e->c.created_bytes += b->charge;
    else if (device < 0)
        e->c.to_host_bytes += b->charge;
    else
        e->c.to_device_bytes += b->charge;
    b->on_device = device >= 0;
    return true;
}

/* The victims of decision d that are on their device, to the host; false
 * when a move failed (that victim stays on its device). */
static bool evict_victims(struct swap_engine *e, const struct swap_decision *d, uint64_t stream)
{
    bool ok = true;
    for (size_t i = 0; i < d->n_evict; i++) {
        struct swap_block *v = swap_index_find(e->index, d->evict[i].block);
        if (v && v->base == d->evict[i].block && v->on_device)
            ok &= move(e, v, -1, stream, false, d->evict[i].writeback, 0);
    }
    return ok;
}

int swap_engine_access(struct swap_engine *e, struct swap_block *b, bool is_write, bool by_copy,
                       uint64_t stream)
{
    if (!e || !b) return -EINVAL;
    struct swap_policy *p = policy_of(e, b->device);
    if (!p) return -ENOMEM;
    e->touched |= 1ULL << b->device;
    struct swap_decision d;
    int rc = by_copy ? swap_policy_copy(p, b->base, b->charge, is_write, &d)
                     : swap_policy_access(p, b->base, b->charge, is_write, &d);
    if (rc == -ENOSPC) e->c.overflows++;
    if (rc) return rc;
    if (d.predicted) {
        e->c.ahead_missed++;
        swap_ahead_used(&e->ahead[b->device], true);
    }
    if (!by_copy) b->ahead = false;
    evict_victims(e, &d, stream);
    if (d.to_host) {
        /* A new block the copy creates on the host: put it there first, so
         * that the driver does not create it on the device. */
        move(e, b, -1, stream, true, false, 0);
    } else if ((!by_copy || d.first_touch) && !b->on_device) {
        /* The policy now counts b as resident: placing it keeps the
         * guarantee (a new block a copy creates goes there before it). */
        move(e, b, b->device, stream, d.first_touch, false, 0);
    }
    return 0;
}

int swap_engine_fetch_ahead(struct swap_engine *e, uint64_t stream)
{
    if (!e) return -EINVAL;
    int fetched = 0;
    for (int dev = 0; dev < SWAP_ENGINE_MAX_DEVICES; dev++) {
        struct swap_policy *p = e->policies[dev];
        for (unsigned k = 0; p && k < SWAP_AHEAD_PER_LAUNCH; k++) {
            uint64_t id;
            struct swap_decision d;
            int rc = swap_policy_prefetch(p, e->ahead[dev].horizon, &id, &d);
            if (rc == -ENOENT) break;
            if (rc) return rc;
            /* a victim left on the device: do not add the block beside it
             * (the launch that needs it fetches it on demand) */
            if (!evict_victims(e, &d, stream)) continue;
            struct swap_block *b = swap_index_find(e->index, id);
            if (!b || b->base != id || b->on_device) continue;
            if (move(e, b, b->device, stream, false, false, HOST_MOVE_AHEAD)) {
                b->ahead = true;
                e->c.ahead_bytes += b->charge;
                fetched++;
            }
        }
    }
    return fetched;
}

void swap_engine_ahead_feedback(struct swap_engine *e, int device, bool late)
{
    if (!e || device < 0 || device >= SWAP_ENGINE_MAX_DEVICES || !e->policies[device]) return;
    if (late)
        e->c.ahead_late++;
    else
        e->c.ahead_early++;
    swap_ahead_used(&e->ahead[device], late);
}

uint32_t swap_engine_horizon(const struct swap_engine *e, int device)
{
    if (!e || device < 0 || device >= SWAP_ENGINE_MAX_DEVICES || !e->policies[device]) return 0;
    return e->ahead[device].horizon;
}

void swap_engine_end_launch(struct swap_engine *e)
{
    for (int d = 0; d < SWAP_ENGINE_MAX_DEVICES && e->touched; d++)
        if (e->touched & (1ULL << d)) {
            swap_policy_next_launch(e->policies[d]);
            swap_ahead_end_launch(&e->ahead[d]);
            e->touched &= ~(1ULL << d);
        }
}

void swap_engine_counters(const struct swap_engine *e, struct swap_counters *policy,
                          struct swap_engine_counts *own)
{
    if (policy) {
        *policy = (struct swap_counters){0};
        for (int d = 0; d < SWAP_ENGINE_MAX_DEVICES; d++) {
            if (!e->policies[d]) continue;
            struct swap_counters c;
            swap_policy_counters(e->policies[d], &c);
            policy->h2d_bytes += c.h2d_bytes, policy->d2h_bytes += c.d2h_bytes;
            policy->faults += c.faults, policy->first_touches += c.first_touches;
            policy->evictions += c.evictions, policy->dirty_evictions += c.dirty_evictions;
            policy->overflows += c.overflows, policy->launches += c.launches;
            policy->prefetches += c.prefetches;
            policy->prefetches_unused += c.prefetches_unused;
        }
    }
    if (own) *own = e->c;
}

uint64_t swap_engine_placed_bytes(const struct swap_engine *e, int device)
{
    uint64_t n = 0;
    for (size_t i = 0;; i++) {
        const struct swap_block *b = swap_index_at(e->index, i);
        if (!b) break;
        if (b->device == device && b->on_device) n += b->charge;
    }
    return n;
}

uint64_t swap_engine_resident_bytes(const struct swap_engine *e, int device)
{
    if (device < 0 || device >= SWAP_ENGINE_MAX_DEVICES || !e->policies[device]) return 0;
    return swap_policy_resident_bytes(e->policies[device]);
}
