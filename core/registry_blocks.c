/* registry_blocks: the block table. Records and their life (create,
 * recycle, orphan, let go, retire; the state machine is in registry.h),
 * the held bitmaps (hold, unhold: the importers' lock-free half), the
 * lock-free lookup and the prefetch hints of the IPC cycle, and the
 * derived structures -- hash chains, free list, exporters' lists -- with
 * registry_repair, which rebuilds them from the primary records (and gives
 * the lease chunks of holders that are gone back: registry_chunks.c). The
 * table grows (doubling) under the lock; the lock-free paths only read what
 * registry_refresh said is in use. */
#include "registry_internal.h"
#include "log.h"
#include "options.h"
#include "uthash_wrap.h"

#include <errno.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h> /* prefetch_write */
#endif

/* The handle's bucket: the project's word-at-a-time hash (uthash_wrap.h),
 * 8 multiplies where FNV took 64 steps. Part of the segment's format: every
 * process of an ABI must bucket alike. */
static uint32_t bucket_of(const struct registry *r, const uint8_t *handle)
{
    return uth_hash_words(handle, IPC_HANDLE_BYTES) & (r->nbuckets - 1);
}

uint32_t reg_handle_hash(const struct ipc_handle *h)
{
    return uth_hash_words(h->bytes, IPC_HANDLE_BYTES);
}

/* Puts block bi at the head of holder's list. */
static void list_push(struct registry *r, uint32_t bi, uint32_t holder)
{
    uint32_t *head = &r->export_heads[holder];
    struct reg_block *b = &r->blocks[bi];
    b->exp_on = holder + 1;
    b->exp_prev = 0;
    b->exp_next = *head <= r->max_blocks ? *head : 0;
    if (b->exp_next) r->blocks[b->exp_next - 1].exp_prev = bi + 1;
    *head = bi + 1;
}

/* Takes block bi off the list it is on, if any. Links out of range (a
 * corrupt segment) are dropped, never followed. */
static void list_unlink(struct registry *r, uint32_t bi)
{
    struct reg_block *b = &r->blocks[bi];
    uint32_t on = b->exp_on, prev = b->exp_prev, next = b->exp_next;
    b->exp_on = b->exp_prev = b->exp_next = 0;
    if (!on || on > r->max_holders) return;
    if (prev > r->max_blocks) prev = 0;
    if (next > r->max_blocks) next = 0;
    if (prev)
        r->blocks[prev - 1].exp_next = next;
    else if (r->export_heads[on - 1] == bi + 1)
        r->export_heads[on - 1] = next;
    if (next) r->blocks[next - 1].exp_prev = prev;
}

static bool listed(uint32_t state)
{
    return state == BLOCK_LIVE || state == BLOCK_LIMBO || state == BLOCK_RETIRING ||
           state == BLOCK_RETIRED;
}

/* Rebuilds the free list and the hash chains from the blocks' states.
 * Lock-free readers that walk a chain meanwhile may miss their block: they
 * then ask under the lock. */
static void rebuild_index(struct registry *r)
{
    struct reg_header *h = r->hdr;
    for (uint32_t i = 0; i < r->nbuckets; i++)
        __atomic_store_n(&r->buckets[i], REG_NONE, __ATOMIC_RELAXED);
    h->block_free = REG_NONE;
    for (uint32_t k = 0; k < r->max_holders; k++)
        r->export_heads[k] = 0;
    for (uint32_t i = r->max_blocks; i-- > 0;) {
        struct reg_block *b = &r->blocks[i];
        /* An exporter deciding (it retires without the lock), or one that
         * died deciding: limbo until it says otherwise. A CAS: its own
         * answer may land first. */
        uint32_t retiring = BLOCK_RETIRING;
        /* pairs with the CAS from RETIRING in reg_block_retire */
        __atomic_compare_exchange_n(&b->state, &retiring, BLOCK_LIMBO, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED);
        if (b->state > BLOCK_RETIRING) b->state = BLOCK_FREE;
        b->exp_on = b->exp_prev = b->exp_next = 0;
        if (listed(b->state) && b->exporter < r->max_holders) list_push(r, i, b->exporter);
        if (b->state == BLOCK_FREE) {
            b->hash_next = h->block_free;
            h->block_free = i;
        } else {
            uint32_t bk = bucket_of(r, b->handle);
            b->hash_next = r->buckets[bk];
            /* pairs with the acquire load of the bucket in reg_block_lookup */
            __atomic_store_n(&r->buckets[bk], i, __ATOMIC_RELEASE);
        }
    }
}

/* Doubles the block table (up to its capacity): reserves the new records,
 * bitmaps and buckets first, then publishes them. False when it cannot
 * grow (at capacity, or no space: logged once). Lock held. */
static bool grow_blocks(struct registry *r)
{
    registry_refresh(r); /* an attacher may have raised the bound */
    uint32_t old = r->max_blocks, cap = r->limit_blocks;
    if (old >= cap) return false;
    uint32_t want = old > cap / 2 ? cap : old * 2, nb = reg_buckets_within(r->cap_buckets, want);
    int fd = registry_fd(r);
    int err = fd < 0 ? EBADF : 0;
    if (!err)
        err =
            reg_reserve_records(fd, reg_off_of(r, r->blocks), sizeof(struct reg_block), old, want);
    if (!err)
        err = reg_reserve_records(fd, reg_off_of(r, r->held), r->held_words * sizeof(uint64_t), old,
                                  want);
    if (!err)
        err = reg_reserve_records(fd, reg_off_of(r, r->buckets), sizeof(uint32_t), r->nbuckets, nb);
    if (err) {
        LOG_ONCE(LOG_WARN, "registry %s cannot grow past %u blocks (%s)", r->name, old,
                 strerror(err));
        return false;
    }
    /* pairs with registry_refresh's acquire loads (after the reservation) */
    __atomic_store_n(&r->hdr->blocks_now, want, __ATOMIC_RELEASE);
    if (nb > r->nbuckets) __atomic_store_n(&r->hdr->nbuckets_now, nb, __ATOMIC_RELEASE);
    registry_refresh(r);
    rebuild_index(r);
    log_msg(LOG_DEBUG, "registry %s grew to %u blocks", r->name, want);
    return true;
}

void registry_repair(struct registry *r)
{
    /* A last process out that died deciding (registry_remove_if_unused):
     * the file is still here and in use again.
     * pairs with registry_removing's load (attachers stop backing off) */
    __atomic_store_n(&r->hdr->removing, 0, __ATOMIC_SEQ_CST);
    rebuild_index(r);
    /* Bits of holders that are not active any more; blocks nobody can ever
     * release. (Active holders' bits are their own, changed without the
     * lock: left alone.) */
    for (uint32_t i = 0; i < r->max_blocks; i++) {
        struct reg_block *b = &r->blocks[i];
        uint64_t *held = reg_block_held_words(r, i);
        for (uint32_t w = 0; w < r->held_words; w++) {
            uint64_t bits = __atomic_load_n(&held[w], __ATOMIC_RELAXED), gone = 0;
            for (uint64_t m = bits; m; m &= m - 1) {
                uint32_t hi = w * 64 + (uint32_t)__builtin_ctzll(m);
                if (hi >= r->max_holders || r->holders[hi].state != HOLDER_ACTIVE) gone |= m & -m;
            }
            /* pairs with reg_block_held's loads, as reg_unhold's clear does */
            if (gone) __atomic_fetch_and(&held[w], ~gone, __ATOMIC_SEQ_CST);
        }
        if (b->state == BLOCK_FREE) continue;
        struct reg_holder *o = reg_holder_at(r, b->exporter);
        bool exporter_gone = !o || o->state != HOLDER_ACTIVE || o->nonce != b->exporter_nonce;
        if (exporter_gone && b->state != BLOCK_ORPHANED) reg_block_orphan(r, i);
        if (b->state == BLOCK_ORPHANED && !reg_block_held(r, i)) reg_block_recycle(r, i);
    }
    /* Chunks of holders that are gone, and leases that name nothing (last:
     * recycling above may have freed their block). */
    reg_chunks_repair(r);
}

static bool handle_equal(const struct reg_block *b, const struct ipc_handle *hd)
{
    return !memcmp(b->handle, hd->bytes, IPC_HANDLE_BYTES);
}

uint32_t reg_block_find(struct registry *r, const struct ipc_handle *hd)
{
    uint32_t best = REG_NONE, idx = r->buckets[bucket_of(r, hd->bytes)];
    for (uint32_t steps = 0; idx != REG_NONE && steps < r->max_blocks; steps++) {
        struct reg_block *b = reg_block_at(r, idx);
        if (!b) break;
        if (b->state != BLOCK_FREE && handle_equal(b, hd)) {
            if (b->state == BLOCK_LIVE || b->state == BLOCK_LIMBO) return idx;
            if (best == REG_NONE) best = idx;
        }
        idx = b->hash_next;
    }
    return best;
}

/* The handle bytes compared word by word with relaxed atomic loads: a
 * writer may be refilling the record (the generation check decides). */
static bool handle_equal_racy(const struct reg_block *b, const struct ipc_handle *hd)
{
    const uint64_t *w = (const uint64_t *)(const void *)b->handle;
    for (int i = 0; i < IPC_HANDLE_BYTES / 8; i++) {
        uint64_t x;
        memcpy(&x, hd->bytes + i * 8, sizeof x);
        if (__atomic_load_n(&w[i], __ATOMIC_RELAXED) != x) return false;
    }
    return true;
}

uint32_t reg_block_lookup(struct registry *r, const struct ipc_handle *hd, uint32_t hash,
                          uint64_t *gen)
{
    /* pairs with the release stores of buckets in create, recycle, rebuild_index */
    uint32_t idx = __atomic_load_n(&r->buckets[hash & (r->nbuckets - 1)], __ATOMIC_ACQUIRE);
    for (uint32_t steps = 0; idx != REG_NONE && steps < r->max_blocks; steps++) {
        struct reg_block *b = reg_block_at(r, idx);
        if (!b) return REG_NONE;
        /* state is stored last by the creator (release): after an acquire
         * load of a live state, the handle and generation are its own. */
        uint32_t s1 = LOAD_STATE(b->state);
        uint64_t g1 = __atomic_load_n(&b->generation, __ATOMIC_RELAXED);
        if ((s1 == BLOCK_LIVE || s1 == BLOCK_LIMBO || s1 == BLOCK_RETIRING) &&
            handle_equal_racy(b, hd)) {
            /* pairs with reg_block_create's release store of state */
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            /* Recycling stores FREE first and re-creating bumps the
             * generation: unchanged, the handle compared was this record's. */
            if (__atomic_load_n(&b->generation, __ATOMIC_RELAXED) == g1 &&
                LOAD_STATE(b->state) != BLOCK_FREE) {
                *gen = g1;
                return idx;
            }
            return REG_NONE;
        }
        idx = __atomic_load_n(&b->hash_next, __ATOMIC_RELAXED);
    }
    return REG_NONE;
}

#define prefetch_read(p) __builtin_prefetch((p), 0)

/* A prefetch for writing: the line comes exclusive, so that the atomic
 * that needs it does not wait a second time for the other CPU to drop its
 * copy. Trap: on x86-64, GCC compiles __builtin_prefetch(p, 1) to a read
 * prefetch unless built for a CPU with PREFETCHW, so the instruction is
 * issued here when CPUID reports it (checked once; a read prefetch
 * otherwise). */
#if defined(__x86_64__)
static int has_prefetchw = -1; /* unknown; racy first checks agree */
static inline void prefetch_write(const volatile void *p)
{
    int has = __atomic_load_n(&has_prefetchw, __ATOMIC_RELAXED);
    if (__builtin_expect(has < 0, 0)) {
        unsigned a, b, c = 0, d;
        has = __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & bit_PRFCHW);
        __atomic_store_n(&has_prefetchw, has, __ATOMIC_RELAXED);
    }
    if (has)
        __asm__ volatile("prefetchw %0" : : "m"(*(const volatile char *)p));
    else
        __builtin_prefetch((const void *)p, 0);
}
#else
#define prefetch_write(p) __builtin_prefetch((p), 1)
#endif

void reg_prefetch_free(struct registry *r, uint32_t idx)
{
    if (idx >= r->max_blocks) return;
    /* For reading, though the state's CASes write it: prefetching it for
     * writing made the free slower (+140 against +96 ns while lines moved
     * slowly, 10-20 ns in the fast state; docs/performance.md). */
    prefetch_read(&r->blocks[idx].generation);
    prefetch_read(reg_block_held_words(r, idx));
}

void reg_prefetch_create(struct registry *r, uint32_t idx, const struct ipc_handle *hd)
{
    prefetch_write(&r->buckets[bucket_of(r, hd->bytes)]);
    if (idx >= r->max_blocks) return;
    struct reg_block *b = &r->blocks[idx];
    if (LOAD_STATE(b->state) != BLOCK_FREE) /* recycled first: unlinked from its bucket */
        prefetch_write(&r->buckets[bucket_of(r, b->handle)]);
    prefetch_write(b->handle);
    prefetch_write(&b->generation);
    prefetch_read(reg_block_held_words(r, idx));
}

void reg_prefetch_open(struct registry *r, uint32_t guess, uint32_t hash)
{
    if (!r->base) return;
    prefetch_read(&r->buckets[hash & (r->nbuckets - 1)]);
    if (guess >= r->max_blocks) return;
    struct reg_block *b = &r->blocks[guess];
    prefetch_read(b->handle);
    prefetch_write(&b->generation); /* the hand-off's claim */
    if (r->self_slot < r->max_holders)
        prefetch_write(reg_block_held_words(r, guess) + r->self_slot / 64); /* our bit */
}

uint32_t reg_block_next_free(struct registry *r)
{
    return __atomic_load_n(&r->hdr->block_free, __ATOMIC_RELAXED);
}

/* Empties block idx's held bitmap, storing only into words that are not
 * zero already: a store moves the line from the last importer's CPU. */
static void clear_held(struct registry *r, uint32_t idx)
{
    uint64_t *held = reg_block_held_words(r, idx);
#pragma GCC unroll 8 /* every export and free runs it: 8 words by default */
    for (uint32_t w = 0; w < r->held_words; w++)
        /* pairs with reg_block_held's loads (under the lock: no bit can be set meanwhile) */
        if (__atomic_load_n(&held[w], __ATOMIC_SEQ_CST))
            __atomic_store_n(&held[w], 0, __ATOMIC_SEQ_CST); /* the same pair */
}

/* Pops the free-list head, growing the table when it is empty, repairing
 * once if it does not point at a free record. */
static uint32_t pop_free_block(struct registry *r)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        uint32_t idx = r->hdr->block_free;
        if (idx == REG_NONE && grow_blocks(r)) idx = r->hdr->block_free;
        if (idx == REG_NONE) return REG_NONE;
        if (idx < r->max_blocks && r->blocks[idx].state == BLOCK_FREE) {
            r->hdr->block_free = r->blocks[idx].hash_next;
            return idx;
        }
        LOG_RATE(LOG_WARN, "registry %s: free list corrupt; rebuilding", r->name);
        registry_repair(r);
    }
    return REG_NONE;
}

uint32_t reg_block_create(struct registry *r, const struct ipc_handle *hd, uint64_t base,
                          uint64_t size, int device, uint32_t exporter, uint64_t now, int kind)
{
    REG_ASSERT_LOCKED(r);
    struct reg_holder *o = reg_holder_at(r, exporter);
    if (!o) return REG_NONE;
    uint32_t idx = pop_free_block(r);
    if (idx == REG_NONE) return REG_NONE;
    struct reg_block *b = &r->blocks[idx];
    __atomic_store_n(&b->generation, b->generation + 1, __ATOMIC_RELAXED);
    memcpy(b->handle, hd->bytes, IPC_HANDLE_BYTES);
    b->base = base;
    b->size = size;
    b->device = device;
    b->exporter = exporter;
    b->exporter_nonce = o->nonce;
    __atomic_store_n(&b->pending, 1, __ATOMIC_RELAXED);
    b->first_export_ns = b->last_export_ns = now;
    b->limbo_since_ns = 0;
    b->exporter_pid = o->pid, b->claimed = b->expired = 0, b->orphaned_ns = 0; /* observability */
    clear_held(r, idx); /* nobody yet (a free record may hold garbage) */
    b->rules = (options_get()->handoff == HANDOFF_WINDOW ? BLOCK_RULE_HANDOFF_WINDOW : 0) |
               (kind == IPC_KIND_POOL  ? BLOCK_KIND_POOL
                : kind == IPC_KIND_VMM ? BLOCK_KIND_VMM
                                       : 0);
    memcpy(b->exporter_comm, o->comm, sizeof b->exporter_comm);
    list_push(r, idx, exporter);
    uint32_t bk = bucket_of(r, b->handle);
    b->hash_next = r->buckets[bk];
    /* pairs with the acquire load of the bucket in reg_block_lookup */
    __atomic_store_n(&r->buckets[bk], idx, __ATOMIC_RELEASE);
    reg_test_delay();
    /* pairs with reg_block_lookup's acquire loads of state: the record is written */
    STORE_STATE(b->state, BLOCK_LIVE);
    return idx;
}

void reg_block_recycle(struct registry *r, uint32_t idx)
{
    REG_ASSERT_LOCKED(r);
    struct reg_block *b = reg_block_at(r, idx);
    if (!b) return;
    /* pairs with reg_block_lookup's re-check of state and generation */
    STORE_STATE(b->state, BLOCK_FREE);
    reg_test_delay();
    list_unlink(r, idx);
    clear_held(r, idx);
    uint32_t *link = &r->buckets[bucket_of(r, b->handle)];
    for (uint32_t steps = 0; *link != REG_NONE && steps < r->max_blocks; steps++) {
        struct reg_block *c = reg_block_at(r, *link);
        if (!c) {
            *link = REG_NONE;
            break;
        }
        if (*link == idx) {
            /* Lock-free readers standing on idx keep following its old
             * link (into the chain they were on) until it is reused. */
            /* pairs with reg_block_lookup's acquire load of the bucket */
            __atomic_store_n(link, c->hash_next, __ATOMIC_RELEASE);
            break;
        }
        link = &c->hash_next;
    }
    __atomic_store_n(&b->pending, 0, __ATOMIC_RELAXED);
    b->hash_next = r->hdr->block_free;
    r->hdr->block_free = idx;
}

void reg_block_orphan(struct registry *r, uint32_t idx)
{
    REG_ASSERT_LOCKED(r);
    struct reg_block *b = reg_block_at(r, idx);
    if (!b) return;
    b->orphaned_ns = reg_now_ns();
    STORE_STATE(b->state, BLOCK_ORPHANED);
    list_unlink(r, idx);
}

uint32_t reg_block_leases(struct registry *r, uint32_t idx)
{
    if (idx >= r->max_blocks) return 0;
    const uint64_t *held = reg_block_held_words(r, idx);
    uint32_t n = 0;
    for (uint32_t w = 0; w < r->held_words; w++)
        /* pairs with reg_hold's fetch_or and reg_unhold's fetch_and */
        n += (uint32_t)__builtin_popcountll(__atomic_load_n(&held[w], __ATOMIC_SEQ_CST));
    return n;
}

bool reg_block_held(struct registry *r, uint32_t idx)
{
    if (idx >= r->max_blocks) return false;
    const uint64_t *held = reg_block_held_words(r, idx);
#pragma GCC unroll 8 /* every free runs it: 8 words by default */
    for (uint32_t w = 0; w < r->held_words; w++)
        /* pairs with reg_hold's fetch_or (Dekker in reg_block_retire) */
        if (__atomic_load_n(&held[w], __ATOMIC_SEQ_CST)) return true;
    return false;
}

uint32_t reg_block_next_holder(struct registry *r, uint32_t idx, uint32_t from)
{
    if (idx >= r->max_blocks) return REG_NONE;
    const uint64_t *held = reg_block_held_words(r, idx);
    for (uint32_t w = from / 64; w < r->held_words; w++) {
        uint64_t m = __atomic_load_n(&held[w], __ATOMIC_RELAXED);
        if (w == from / 64) m &= ~0ull << (from % 64);
        if (m) {
            uint32_t h = w * 64 + (uint32_t)__builtin_ctzll(m);
            return h < r->max_holders ? h : REG_NONE;
        }
    }
    return REG_NONE;
}

bool reg_hold(struct registry *r, uint32_t block, uint32_t holder)
{
    if (block >= r->max_blocks || holder >= r->max_holders) return false;
    uint64_t bit = 1ull << (holder % 64);
    /* pairs with reg_block_retire's reg_block_held; the importer then loads
     * state (settle_state in ipc.c) */
    uint64_t old =
        __atomic_fetch_or(&reg_block_held_words(r, block)[holder / 64], bit, __ATOMIC_SEQ_CST);
    return !(old & bit);
}

bool reg_unhold(struct registry *r, uint32_t block, uint32_t holder)
{
    if (block >= r->max_blocks || holder >= r->max_holders) return false;
    /* pairs with reg_block_held's loads (reg_block_retire, reg_block_unheld) */
    __atomic_fetch_and(&reg_block_held_words(r, block)[holder / 64], ~(1ull << (holder % 64)),
                       __ATOMIC_SEQ_CST);
    return !reg_block_held(r, block);
}

bool reg_block_retire(struct registry *r, uint32_t idx)
{
    struct reg_block *b = reg_block_at(r, idx);
    uint32_t limbo = BLOCK_LIMBO;
    /* pairs with settle_state's seq_cst load of state (ipc.c; Dekker with reg_hold) */
    if (!b || !__atomic_compare_exchange_n(&b->state, &limbo, BLOCK_RETIRING, false,
                                           __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return false;
    /* Dekker with the importer (reg_hold, then a load of state; all
     * seq-cst): one of the two sees the other's store, so either we see its
     * bit or it sees RETIRING and waits for our answer. The load of pending
     * pairs with the give-back fetch_add of release_lease (ipc.c), made
     * before its bit is cleared, and with reg_block_limbo_unheld's CAS. */
    bool free_now = !reg_block_held(r, idx) && __atomic_load_n(&b->pending, __ATOMIC_SEQ_CST) == 0;
    if (free_now)
        reg_test_delay(); /* a death here leaves RETIRING: swept like all the dead's blocks */
    /* A CAS, not a store: a repair (rebuild_index) may have turned RETIRING
     * into LIMBO meanwhile, and an importer may have taken LIMBO for LIVE
     * and its bit come too late for us: then it stays in limbo. */
    uint32_t retiring = BLOCK_RETIRING;
    /* pairs with rebuild_index's CAS from RETIRING to LIMBO */
    return __atomic_compare_exchange_n(&b->state, &retiring, free_now ? BLOCK_RETIRED : BLOCK_LIMBO,
                                       false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED) &&
           free_now;
}

/* A LIMBO block that lost its last holder: under the window rule (ipc.c),
 * the exporter's, one hand-off is re-armed (its times are advisory: the
 * exporter reads them under its lock). Returns the exporter, to wake. No
 * lock needed: atomics only. */
uint32_t reg_block_limbo_unheld(struct reg_block *b)
{
    uint32_t none = 0;
    /* pairs with reg_block_retire's seq_cst load of pending */
    if ((b->rules & BLOCK_RULE_HANDOFF_WINDOW) &&
        __atomic_compare_exchange_n(&b->pending, &none, 1, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED)) {
        uint64_t now = reg_now_ns();
        __atomic_store_n(&b->first_export_ns, now, __ATOMIC_RELAXED);
        __atomic_store_n(&b->last_export_ns, now, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&b->exporter, __ATOMIC_RELAXED);
}

uint32_t reg_block_unheld(struct registry *r, uint32_t bi, uint64_t generation)
{
    struct reg_block *b = reg_block_at(r, bi);
    if (!b || b->generation != generation || reg_block_held(r, bi)) return REG_NONE;
    uint32_t state = LOAD_STATE(b->state);
    if (state == BLOCK_ORPHANED) {
        reg_block_recycle(r, bi);
        return REG_NONE;
    }
    return reg_waits_on_holders(state) ? reg_block_limbo_unheld(b) : REG_NONE;
}

void reg_block_let_go(struct registry *r, uint32_t idx)
{
    REG_ASSERT_LOCKED(r);
    struct reg_block *b = reg_block_at(r, idx);
    if (!b) return;
    if (b->state == BLOCK_RETIRED || !reg_block_held(r, idx))
        reg_block_recycle(r, idx);
    else
        reg_block_orphan(r, idx);
}

void reg_holder_let_go(struct registry *r, uint32_t idx)
{
    REG_ASSERT_LOCKED(r);
    if (idx >= r->max_holders) return;
    uint32_t *head = &r->export_heads[idx];
    for (uint32_t steps = 0, first; (first = *head) != 0; steps++) {
        uint32_t i = first - 1;
        if (i >= r->max_blocks || r->blocks[i].exp_on != idx + 1 || steps > r->max_blocks) {
            /* A corrupt list: the table, as before there were lists. */
            *head = 0;
            for (uint32_t k = 0; k < r->max_blocks; k++)
                if (r->blocks[k].exporter == idx && listed(r->blocks[k].state))
                    reg_block_let_go(r, k);
            return;
        }
        reg_block_let_go(r, i); /* takes it off the list */
    }
}
