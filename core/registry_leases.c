/* registry_leases: lease records, the importer's side of a hold. An
 * importer takes a slot of its own chunks (a process-local spare list),
 * writes the record and then sets its bit (reg_lease_begin), and clears the
 * bit before it frees the record (reg_lease_end), all without the lock; the
 * lock-held calls create, find and drop any holder's lease (tests, sweeps).
 * The protocol and the lease's state machine are in registry.h. */
#include "registry_internal.h"

#include <errno.h>
#include <stdlib.h>

/* Frees lease li (a dead holder's, or one the lock-held API drops): its
 * bit cleared first, then the record. Returns whether the block is now held
 * by nobody. */
bool reg_lease_free(struct registry *r, uint32_t li)
{
    struct reg_lease *l = &r->leases[li];
    bool empty = false;
    struct reg_block *b = reg_block_at(r, l->block);
    if (b && l->holder < r->max_holders) empty = reg_unhold(r, l->block, l->holder);
    reg_test_delay();
    STORE_STATE(l->intent, LEASE_FREE);
    l->count = 0;
    return empty;
}

uint32_t reg_lease_take(struct registry *r)
{
    return r->nspare ? r->spare[--r->nspare] : REG_NONE;
}

/* Adds a slot to our spare list (growing it). False when out of memory. */
static bool spare_push(struct registry *r, uint32_t li)
{
    if (r->nspare == r->spare_cap) {
        uint32_t cap = r->spare_cap ? r->spare_cap * 2 : 64;
        uint32_t *p = realloc(r->spare, cap * sizeof *p);
        if (!p) return false;
        r->spare = p, r->spare_cap = cap;
    }
    r->spare[r->nspare++] = li;
    return true;
}

/* Our spare list gets chunk c's slots. */
static void spare_chunk(struct registry *r, uint32_t c)
{
    for (uint32_t li = (c + 1) * r->lease_chunk; li-- > c * r->lease_chunk;)
        if (!spare_push(r, li)) break; /* out of memory: fewer spares, nothing wrong */
}

/* reg_lease_claim and reg_lease_grow. */
static int claim_for_self(struct registry *r, bool locked)
{
    if (r->self_slot == REG_NONE) return -ENOSPC;
    uint32_t c = reg_chunk_claim(r, r->self_slot, locked);
    if (c == REG_NONE) return locked ? -ENOSPC : -EAGAIN;
    spare_chunk(r, c);
    return 0;
}

int reg_lease_claim(struct registry *r)
{
    return claim_for_self(r, false);
}

int reg_lease_grow(struct registry *r)
{
    return claim_for_self(r, true);
}

bool reg_lease_begin(struct registry *r, uint32_t li, uint32_t block, uint64_t generation)
{
    struct reg_lease *l = &r->leases[li];
    l->block = block;
    l->block_gen = generation;
    l->holder = reg_chunk_owner_of(r, li / r->lease_chunk);
    l->count = 1;
    l->open_ns = reg_coarse_ns(); /* for reports: how long it is held */
    /* pairs with the sweeps' LOAD_STATE of intent (reg_holder_drop_leases) */
    STORE_STATE(l->intent, LEASE_OPENING); /* before the bit: a sweep finds it */
    reg_test_delay();
    return reg_hold(r, block, l->holder);
}

uint32_t reg_lease_end(struct registry *r, uint32_t li)
{
    struct reg_lease *l = reg_lease_at(r, li);
    if (!l) return REG_NONE;
    uint32_t bi = l->block;
    uint64_t gen = l->block_gen;
    /* pairs with the sweeps' LOAD_STATE of intent; the bit is cleared after */
    STORE_STATE(l->intent, LEASE_CLOSING);
    bool empty = reg_unhold(r, bi, l->holder);
    reg_test_delay();
    __atomic_store_n(&l->count, 0, __ATOMIC_RELAXED);
    STORE_STATE(l->intent, LEASE_FREE);
    (void)spare_push(r, li); /* out of memory: the slot idles until exit */
    if (!empty) return REG_NONE;
    struct reg_block *b = reg_block_at(r, bi);
    /* pairs with reg_block_create's release store of state, after the generation */
    if (!b || __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) != gen ||
        !reg_waits_on_holders(LOAD_STATE(b->state)))
        return REG_NONE;
    return reg_block_limbo_unheld(b);
}

uint32_t reg_lease_find(struct registry *r, uint32_t block, uint32_t holder)
{
    struct reg_block *b = reg_block_at(r, block);
    if (!b) return REG_NONE;
    for (uint32_t c = 0; c < r->nchunks; c++) {
        if (reg_chunk_owner_of(r, c) != holder) continue;
        for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
            struct reg_lease *l = &r->leases[li];
            if (LOAD_STATE(l->intent) != LEASE_FREE && l->block == block &&
                l->block_gen == b->generation && b->state != BLOCK_FREE)
                return li;
        }
    }
    return REG_NONE;
}

uint32_t reg_lease_create(struct registry *r, uint32_t block, uint32_t holder)
{
    struct reg_block *b = reg_block_at(r, block);
    if (!b || !reg_holder_at(r, holder)) return REG_NONE;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t c = 0; c < r->nchunks; c++) {
            if (reg_chunk_owner_of(r, c) != holder) continue;
            for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
                if (LOAD_STATE(r->leases[li].intent) != LEASE_FREE) continue;
                if (holder == r->self_slot) /* not handed out twice by reg_lease_take */
                    for (uint32_t k = 0; k < r->nspare; k++)
                        if (r->spare[k] == li) r->spare[k] = r->spare[--r->nspare];
                reg_lease_begin(r, li, block, b->generation);
                return li;
            }
        }
        if (pass == 0 && reg_chunk_claim(r, holder, true) == REG_NONE) return REG_NONE;
    }
    return REG_NONE;
}

uint32_t reg_lease_drop(struct registry *r, uint32_t idx)
{
    struct reg_lease *l = reg_lease_at(r, idx);
    if (!l || l->intent == LEASE_FREE) return REG_NONE;
    uint32_t bi = l->block;
    uint64_t gen = l->block_gen;
    reg_lease_free(r, idx);
    if (reg_chunk_owner_of(r, idx / r->lease_chunk) == r->self_slot && r->self_slot != REG_NONE)
        (void)spare_push(r, idx);
    return reg_block_unheld(r, bi, gen);
}
