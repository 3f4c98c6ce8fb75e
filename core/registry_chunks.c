/* registry_chunks: the lease table's chunks and who owns each. A chunk of
 * lease slots belongs to one holder (its owner word, claimed with a CAS,
 * without the lock), which alone writes its slots while it lives; the
 * table grows without the lock too, published with a CAS on the header's
 * count. A repair gives back the chunks of holders that are not active
 * and frees the leases that name nothing (reg_chunks_repair). The protocol
 * is in registry.h's table. */
#include "registry_internal.h"
#include "log.h"

#include <errno.h>
#include <string.h>

/* A chunk's owner word holds the holder index + 1, 0 when no holder owns
 * it: the zero pages a growth adds are unowned chunks from the start, so
 * the chunk table grows without the lock (grow_chunks). */
uint32_t reg_chunk_owner_of(const struct registry *r, uint32_t c)
{
    /* pairs with own_chunk's CAS and reg_chunk_disown's release store */
    return __atomic_load_n(&r->chunk_owner[c], __ATOMIC_ACQUIRE) - 1; /* 0 - 1 = REG_NONE */
}

/* Gives chunk c back (after its leases are freed). */
void reg_chunk_disown(struct registry *r, uint32_t c)
{
    /* pairs with reg_chunk_owner_of's acquire load and own_chunk's CAS */
    __atomic_store_n(&r->chunk_owner[c], 0, __ATOMIC_RELEASE);
}

/* Takes chunk c for holder if its owner is still `seen` (REG_NONE or a
 * holder that is not active). */
static bool own_chunk(struct registry *r, uint32_t c, uint32_t seen, uint32_t holder)
{
    uint32_t expect = seen + 1;
    /* pairs with reg_chunk_disown's release store (the slots were freed before) */
    return __atomic_compare_exchange_n(&r->chunk_owner[c], &expect, holder + 1, false,
                                       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

uint32_t reg_chunk_owner(const struct registry *r, uint32_t c)
{
    return c < r->nchunks ? reg_chunk_owner_of(r, c) : REG_NONE;
}

/* Doubles the lease chunk table (up to its capacity), without the lock:
 * the new records and owner words are reserved (zero pages: unowned, FREE
 * leases; reserving what another grower reserved changes nothing), then
 * published with a CAS, which a concurrent grower may have done first.
 * False when it cannot grow (at capacity, or no space: logged once). */
static bool grow_chunks(struct registry *r)
{
    registry_refresh(r);
    uint32_t old = r->nchunks, cap = r->limit_chunks;
    if (old >= cap) return false;
    uint32_t want = old > cap / 2 ? cap : old * 2;
    int fd = registry_fd(r);
    int err = fd < 0 ? EBADF : 0;
    if (!err)
        err = reg_reserve_records(fd, reg_off_of(r, r->leases),
                                  r->lease_chunk * sizeof(struct reg_lease), old, want);
    if (!err)
        err = reg_reserve_records(fd, reg_off_of(r, r->chunk_owner), sizeof(uint32_t), old, want);
    if (err) {
        LOG_ONCE(LOG_WARN, "registry %s cannot grow past %u leases (%s)", r->name,
                 old * r->lease_chunk, strerror(err));
        return false;
    }
    uint32_t seen = old;
    /* pairs with registry_refresh's acquire load of chunks_now */
    __atomic_compare_exchange_n(&r->hdr->chunks_now, &seen, want, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    registry_refresh(r);
    return r->nchunks > old;
}

/* Frees every slot of chunk c and names holder in them (its new owner, or
 * REG_NONE). */
static void reset_chunk(struct registry *r, uint32_t c, uint32_t holder)
{
    for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
        r->leases[li].intent = LEASE_FREE;
        r->leases[li].count = 0;
        r->leases[li].holder = holder;
    }
}

/* A chunk for holder, marked as its own: an unowned one, or (locked) one
 * whose owner is not an active holder -- a corrupt or hostile owner: a
 * chunk is claimed only by an attached holder and given back by its sweep,
 * so its leases name nobody. The table grows when none is found. REG_NONE
 * when full. */
uint32_t reg_chunk_claim(struct registry *r, uint32_t holder, bool locked)
{
    registry_refresh(r); /* another process may have grown the table */
    for (uint32_t c = 0;; c++) {
        if (c == r->nchunks && !grow_chunks(r)) return REG_NONE;
        uint32_t owner = reg_chunk_owner_of(r, c);
        if (owner != REG_NONE &&
            (!locked ||
             (owner < r->max_holders && LOAD_STATE(r->holders[owner].state) == HOLDER_ACTIVE)))
            continue;
        /* Only ours once the CAS says so. An unowned chunk's slots are all
         * FREE (a sweep or an exit frees every lease of a chunk before
         * giving it back) and nobody else writes them. */
        if (!own_chunk(r, c, owner, holder)) continue;
        reset_chunk(r, c, holder);
        /* One of the last quarter: grow now, before anyone finds none. */
        if (c >= r->nchunks - r->nchunks / 4) (void)grow_chunks(r);
        return c;
    }
}

/* A lease that names a live block of its own generation, owned by an
 * active holder's chunk. */
static bool lease_valid(struct registry *r, uint32_t li)
{
    struct reg_lease *l = &r->leases[li];
    uint32_t owner = reg_chunk_owner_of(r, li / r->lease_chunk);
    struct reg_block *b = reg_block_at(r, l->block);
    struct reg_holder *o = reg_holder_at(r, owner);
    return l->intent >= LEASE_OPENING && l->intent <= LEASE_CLOSING && b &&
           b->state != BLOCK_FREE && b->generation == l->block_gen && o &&
           o->state == HOLDER_ACTIVE && l->holder == owner && l->count > 0;
}

void reg_chunks_repair(struct registry *r)
{
    for (uint32_t c = 0; c < r->nchunks; c++) {
        uint32_t owner = reg_chunk_owner_of(r, c);
        struct reg_holder *o = reg_holder_at(r, owner);
        /* An unowned chunk is left alone: a lock-free claimer may be taking
         * it right now (and its slots are FREE already). One of a holder
         * that is not active is emptied before it is given back. */
        if (owner == REG_NONE || (o && o->state == HOLDER_ACTIVE)) continue;
        reset_chunk(r, c, REG_NONE);
        reg_chunk_disown(r, c);
    }
    for (uint32_t i = 0; i < r->max_leases; i++)
        if (r->leases[i].intent != LEASE_FREE && !lease_valid(r, i)) {
            r->leases[i].intent = LEASE_FREE;
            r->leases[i].count = 0;
        }
}
