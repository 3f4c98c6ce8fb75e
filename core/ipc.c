/* ipc: the lifecycle of exported blocks (export, open, close, a context's
 * end, free, shutdown) implementing ipc.h on top of the shared registry
 * (registry.h), this process's indexes (local.c) and state (process.c); the
 * deferred frees, collects and the collector's work are limbo.c's.
 *
 * What it decides, in short (the rules of the shared fields, who writes
 * which with which ordering, and the block's and lease's state machines are
 * core/registry.h's protocol table; every seq_cst site here names its
 * other half there):
 * - A block's reference count is its held bitmap; an importer sets and
 *   clears its own bit without the registry lock, behind a lease record.
 * - A block is really freed only by its exporter: by the program's own free
 *   when nothing holds it (IPC_REAL), or from limbo through the host
 *   (limbo.c) once no holder and no unclaimed hand-off remain.
 * - Locks: the local mutex, then the registry lock; the host is called with
 *   neither held. Opens, closes and the common free take only the local
 *   mutex.
 * - Hand-offs: every ipc_export adds one pending hand-off (the handle is on
 *   its way); the first lease of another process claims it; they expire
 *   IPCSHIM_HANDOFF_TIMEOUT after the last export (IPCSHIM_HANDOFF=window
 *   re-arms them: registry_leases.c, registry_blocks.c). */
#include "ipc.h"
#include "callsite.h"
#include "collector.h"
#include "leak.h"
#include "limbo.h"
#include "local.h"
#include "log.h"
#include "options.h"
#include "process.h"
#include "registry.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    TICKET_CLAIMED = 1, /* ipc_open.flags: this open claimed a hand-off */
};

/* ---- process hooks (registered by the host: ipc.h) ---- */

void ipc_fork_prepare(void)
{
    local_lock();
}

void ipc_fork_parent(void)
{
    local_unlock();
}

void ipc_fork_child(void)
{
    /* The prepare handler held the local mutex across fork, so the tables
     * are consistent; local_reset re-initialises the mutex itself. Taking a
     * holder slot waits for the next ipc call: a child that only execs
     * never touches the registry (our descriptors are O_CLOEXEC). */
    local_reinit_locks();
    process_after_fork(true);
}

/* The last word at exit, for every process that attached (import-only ones
 * included: the shim's own exit hook is registered at the first export).
 * ipc_shutdown is idempotent: an earlier call (the shim's atexit hook)
 * wins. */
void ipc_unload(void)
{
    if (ipc_proc.initialised && __atomic_load_n(&ipc_proc.state, __ATOMIC_ACQUIRE) == PROC_ACTIVE)
        ipc_shutdown();
}

void ipc_exit_now(void)
{
    if (ipc_proc.initialised && ipc_proc.canary_pid == getpid()) ipc_unload();
}

static void init_once(void)
{
    process_init();
    __atomic_store_n(&ipc_proc.initialised, true, __ATOMIC_RELEASE);
}

void ipc_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_once);
}

bool ipc_active(void)
{
    return process_active();
}

static struct reg_lease *ticket_lease(uint32_t lease, uint32_t block, uint64_t generation);

/* ---- export ---- */

static int export_try(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                      uint64_t ctx, uint64_t identity, int kind, bool retry, uint32_t cs);

int ipc_export(const struct ipc_handle *h, uint64_t base, uint64_t size, int device, uint64_t ctx)
{
    return export_try(h, base, size, device, ctx, 0, IPC_KIND_LEGACY, true, callsite_capture());
}

int ipc_export_identity(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                        uint64_t ctx, uint64_t identity, int kind)
{
    return export_try(h, base, size, device, ctx, identity, kind, true, callsite_capture());
}

enum { EXPORT_NEW, EXPORT_AGAIN, EXPORT_OFF };

/* A base this process exported before (e): the same allocation exported
 * again counts one more hand-off (EXPORT_AGAIN); otherwise e goes, letting
 * its record go if it is still ours (a new allocation at a base we never
 * saw freed), and the export is a new one (EXPORT_NEW). EXPORT_OFF: the
 * registry lock is out of reach. Local lock held. */
static int export_seen(struct local_export *e, const struct ipc_handle *h, uint64_t now,
                       uint64_t identity)
{
    bool again = false;
    if (!process_lock_registry()) return EXPORT_OFF;
    limbo_drain_recycles();
    struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
    if (!e->in_limbo && !memcmp(e->handle.bytes, h->bytes, IPC_HANDLE_BYTES) &&
        process_owns(b, e->generation) && b->state == BLOCK_LIVE) {
        /* The same allocation exported again: one more hand-off. */
        /* pairs with reg_block_retire's seq_cst load of pending */
        if (__atomic_fetch_add(&b->pending, 1, __ATOMIC_SEQ_CST) == 0) b->first_export_ns = now;
        b->last_export_ns = now;
        again = true;
        if (identity) e->identity = identity;
        leak_note_reexport(e);
    } else if (process_owns(b, e->generation)) {
        reg_block_let_go(&ipc_proc.reg,
                         e->block); /* a new allocation at a base we never saw freed */
    }
    registry_unlock(&ipc_proc.reg);
    if (again) {
        STAT_ADD(exports, 1);
        return EXPORT_AGAIN;
    }
    local_export_del(e);
    return EXPORT_NEW;
}

/* Adds ne, the new record of block idx, to the local tables; out of
 * memory, gives the block back. 0 or -ENOMEM. Local lock held. */
static int export_add(struct local_export *ne, uint32_t idx)
{
    if (local_export_add(ne) == 0) return 0;
    local_export_free(ne);
    if (process_lock_registry()) {
        reg_block_recycle(&ipc_proc.reg, idx);
        registry_unlock(&ipc_proc.reg);
    }
    return -ENOMEM;
}

/* ipc_export, with one retry after shedding this process's own unclaimed
 * hand-offs when the table is full; cs: the export's call site. */
static int export_try(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                      uint64_t ctx, uint64_t identity, int kind, bool retry, uint32_t cs)
{
    local_export_prefetch(base);
    local_lock();
    int rc = process_ready_locked();
    if (rc) {
        local_unlock();
        return rc == -ENOSPC ? -ENOSPC : -ENODEV;
    }
    /* The record it will take: the last one recycled before it, else the
     * free list's head. */
    reg_prefetch_create(&ipc_proc.reg,
                        ipc_proc.nrecycles ? ipc_proc.recycles[ipc_proc.nrecycles - 1].block
                                           : reg_block_next_free(&ipc_proc.reg),
                        h);
    uint64_t now = reg_now_ns();
    /* The filter first: a base never exported (or freed since) is not
     * looked for. */
    struct local_export *e = local_maybe_export(base) ? local_export_find(base) : NULL;
    int seen = e ? export_seen(e, h, now, identity) : EXPORT_NEW;
    if (seen == EXPORT_OFF) goto off;
    if (seen == EXPORT_AGAIN) {
        local_unlock();
        return 0;
    }
    struct local_export *ne = local_export_new();
    if (!ne) {
        local_unlock();
        LOG_ONCE(LOG_WARN, "out of memory: an export is not tracked");
        return -ENOMEM;
    }
    if (!process_lock_registry()) {
        local_export_free(ne);
        goto off;
    }
    limbo_drain_recycles();
    uint32_t idx = reg_block_create(&ipc_proc.reg, h, base, size, device, ipc_proc.self, now, kind);
    uint64_t gen = idx != REG_NONE ? ipc_proc.reg.blocks[idx].generation : 0;
    size_t shed = idx == REG_NONE && retry ? limbo_shed_unclaimed(true) : 0;
    registry_unlock(&ipc_proc.reg);
    if (idx == REG_NONE) {
        local_export_free(ne);
        local_unlock();
        if (shed && limbo_collect(LIMBO_SWEEP_ALL) > 0)
            return export_try(h, base, size, device, ctx, identity, kind, false, cs);
        LOG_ONCE(LOG_WARN,
                 "registry %s is full (IPCSHIM_MAX_BLOCKS=%u): new exports are not "
                 "tracked",
                 ipc_proc.reg.name, ipc_proc.reg.limit_blocks);
        return -ENOSPC;
    }
    ne->base = base;
    ne->size = size;
    ne->ctx = ctx;
    ne->device = device;
    ne->identity = identity;
    ne->block = idx;
    ne->generation = gen;
    ne->handle = *h;
    leak_note_export(ne, now, cs);
    if (export_add(ne, idx) != 0) {
        local_unlock();
        LOG_ONCE(LOG_WARN, "out of memory: an export is not tracked");
        return -ENOMEM;
    }
    STAT_ADD(exports, 1);
    if (!ipc_proc.collector_asked && options_get()->collector) {
        ipc_proc.collector_asked = true; /* once, not a locked exchange per export */
        collector_start(limbo_collector_step, limbo_collector_kick);
    }
    local_unlock();
    log_msg(LOG_DEBUG, "export of 0x%llx (%llu bytes, device %d): block %u",
            (unsigned long long)base, (unsigned long long)size, device, idx);
    leak_watch_start(ipc_leak_check);
    return 0;
off:
    local_unlock();
    return -ENODEV;
}

/* ---- open ---- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#define SETTLE_SPINS 4096

/* The block's state once no exporter is deciding about it (RETIRING), or
 * BLOCK_FREE if it is no longer generation `gen`. The exporter decides in a
 * few instructions and without the registry lock: a short spin, then the
 * CPU is yielded (it may be waiting for ours), for at most
 * IPCSHIM_LOCK_WAIT, as for a lock a stopped process holds; then RETIRING
 * (undecided: the caller passes). An exporter that dies deciding is swept
 * (the state changes). Local lock held. */
static uint32_t settle_state(struct reg_block *b, uint64_t gen)
{
    uint64_t deadline = 0;
    for (int spin = 0;; spin++) {
        /* pairs with the CAS to RETIRING in reg_block_retire (Dekker with reg_hold in
         * reg_lease_begin) */
        uint32_t s = __atomic_load_n(&b->state, __ATOMIC_SEQ_CST);
        /* pairs with reg_block_create's release store of state, after the generation */
        if (__atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) != gen) return BLOCK_FREE;
        if (s != BLOCK_RETIRING) return s;
        if (spin < SETTLE_SPINS) {
            cpu_relax();
            continue;
        }
        uint64_t now = reg_now_ns();
        if (!deadline) deadline = now + options_get()->lock_wait * 1000000ull;
        if (now >= deadline) return BLOCK_RETIRING;
        sched_yield();
    }
}

/* Claims one pending hand-off of b, if any (importers race for them). */
static bool claim_handoff(struct reg_block *b)
{
    uint32_t p = __atomic_load_n(&b->pending, __ATOMIC_RELAXED);
    while (p > 0)
        /* pairs with expire_handoffs' exchange and reg_block_retire's load of pending */
        if (__atomic_compare_exchange_n(&b->pending, &p, p - 1, true, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED))
            return true;
    return false;
}

/* Our lease slot for a new lease: a spare one, or a new chunk of them,
 * claimed without the lock (the table grows without it too), under it only
 * when the table is full. REG_NONE when nothing is to be had or the lock
 * is out of reach. Local lock held. */
static uint32_t take_lease_slot(void)
{
    uint32_t li = reg_lease_take(&ipc_proc.reg);
    if (li != REG_NONE) return li;
    int rc = reg_lease_claim(&ipc_proc.reg);
    if (rc == -EAGAIN) {
        if (!process_lock_registry()) return REG_NONE;
        rc = reg_lease_grow(&ipc_proc.reg);
        registry_unlock(&ipc_proc.reg);
    }
    if (rc < 0) {
        LOG_ONCE(LOG_WARN,
                 "registry %s has no free lease (IPCSHIM_MAX_LEASES=%u): opens are not tracked",
                 ipc_proc.reg.name, ipc_proc.reg.max_leases);
        return REG_NONE;
    }
    return reg_lease_take(&ipc_proc.reg);
}

/* Fills the ticket and the pending mapping of an open that goes ahead. */
static void open_ticket(struct ipc_open *t, struct local_map *nm, const struct ipc_handle *h,
                        uint64_t ctx, uint32_t bi, uint32_t li, uint64_t gen, uint32_t flags)
{
    memset(t, 0, sizeof *t);
    t->block = bi;
    t->lease = li;
    t->generation = gen;
    t->ctx = ctx;
    t->handle = *h;
    t->flags = flags;
    nm->block = bi;
    nm->lease = li;
    nm->generation = gen;
}

/* The open without the registry lock: find the block, prove its exporter
 * alive from shared memory, and count ourselves in (our lease record, then
 * our bit; a second context's open only counts up our lease). False when
 * only the locked path can decide; else *rc: IPC_REAL, -ENOENT /
 * -EOWNERDEAD (the driver would refuse) or IPC_PASS. Local lock held. */
static bool open_lockfree(const struct ipc_handle *h, uint32_t hash, uint64_t ctx,
                          struct ipc_open *t, struct local_map *nm, uint32_t cs, int *rc)
{
    uint64_t gen;
    uint32_t bi = reg_block_lookup(&ipc_proc.reg, h, hash, &gen);
    struct reg_block *b = reg_block_at(&ipc_proc.reg, bi);
    if (!b) return false;
    uint32_t exporter = __atomic_load_n(&b->exporter, __ATOMIC_RELAXED);
    uint64_t exporter_nonce = __atomic_load_n(&b->exporter_nonce, __ATOMIC_RELAXED);
    if (exporter == ipc_proc.self || !reg_holder_current(&ipc_proc.reg, exporter, exporter_nonce))
        return false; /* our own export, or a stale record: the locked path decides */
    struct local_lease *ll = local_lease_find(bi);
    if (ll && ll->generation == gen && ticket_lease(ll->lease, bi, gen)) {
        /* Held already from another context: our bit is set, so the block
         * cannot be retired; one more open on our lease. */
        struct reg_lease *l = &ipc_proc.reg.leases[ll->lease];
        __atomic_store_n(&l->count, l->count + 1, __ATOMIC_RELAXED);
        open_ticket(t, nm, h, ctx, bi, ll->lease, gen, 0);
        leak_note_open(nm, &ipc_proc.reg, b, cs);
        return *rc = IPC_REAL, true;
    }
    if (ll) local_lease_del(ll); /* of an earlier generation */
    uint32_t li = take_lease_slot();
    if (li == REG_NONE) return *rc = IPC_PASS, true;
    bool first = reg_lease_begin(&ipc_proc.reg, li, bi, gen);
    uint32_t s = settle_state(b, gen);
    if ((s != BLOCK_LIVE && s != BLOCK_LIMBO) || local_lease_add(bi, gen, li) != 0) {
        reg_lease_end(&ipc_proc.reg, li); /* not LIMBO: nobody to wake */
        *rc = s == BLOCK_ORPHANED ? -EOWNERDEAD : s == BLOCK_RETIRED ? -ENOENT : IPC_PASS;
        return s != BLOCK_FREE;
    }
    uint32_t flags = 0;
    if (first && claim_handoff(b)) {
        __atomic_fetch_add(&b->claimed, 1, __ATOMIC_RELAXED);
        flags |= TICKET_CLAIMED;
    }
    open_ticket(t, nm, h, ctx, bi, li, gen, flags);
    leak_note_open(nm, &ipc_proc.reg, b, cs);
    ipc_proc.open_guess = bi;
    return *rc = IPC_REAL, true;
}

/* The open under the registry lock, for what the lock-free path leaves:
 * handles it does not find, our own exports, records of dead exporters.
 * Local lock held. */
static int open_locked(const struct ipc_handle *h, uint32_t hash, uint64_t ctx, struct ipc_open *t,
                       struct local_map *nm, uint32_t cs, uint64_t *ptr)
{
    if (!process_lock_registry()) return IPC_PASS;
    int result;
    uint32_t bi = reg_block_find(&ipc_proc.reg, h);
    struct reg_block *b = reg_block_at(&ipc_proc.reg, bi);
    if (!b) {
        registry_unlock(&ipc_proc.reg);
        return IPC_PASS;
    }
    result = b->state == BLOCK_ORPHANED ? -EOWNERDEAD : -ENOENT;
    if (b->state != BLOCK_LIVE && b->state != BLOCK_LIMBO) goto unlock;
    if (b->exporter == ipc_proc.self && b->exporter_nonce == ipc_proc.self_nonce) {
        struct local_export *e = local_export_find(b->base);
        result = IPC_PASS;
        if (nm->kind == IPC_KIND_LEGACY && e && e->block == bi && e->generation == b->generation) {
            if (e->in_limbo) {
                result = -ENOENT; /* the program freed it already */
            } else {
                e->own_opens++;
                *ptr = b->base;
                STAT_ADD(opens, 1);
                result = IPC_DONE;
            }
        }
        goto unlock;
    }
    struct reg_holder *ex = reg_holder_at(&ipc_proc.reg, b->exporter);
    result = -EOWNERDEAD;
    if (!ex || ex->nonce != b->exporter_nonce || ex->state != HOLDER_ACTIVE) {
        reg_block_let_go(&ipc_proc.reg, bi); /* its exporter's slot moved on: a stale record */
        goto unlock;
    }
    /* Found here although the lock-free lookup missed it (a concurrent
     * change of its hash chain): the lock-free path can take it now, as
     * records change only under the lock we hold. */
    registry_unlock(&ipc_proc.reg);
    return open_lockfree(h, hash, ctx, t, nm, cs, &result) ? result : IPC_PASS;
unlock:
    registry_unlock(&ipc_proc.reg);
    return result;
}

static int open_begin(const struct ipc_handle *h, uint64_t ctx, uint8_t kind, uint64_t pool,
                      struct ipc_open *t, uint64_t *ptr)
{
    if (options_get()->disable) return IPC_PASS;
    uint32_t cs = callsite_capture();
    local_lock();
    if (process_ready_locked() != 0) {
        local_unlock();
        return IPC_PASS;
    }
    /* Hints, whose lines move while the local tables are searched. */
    uint32_t hash = reg_handle_hash(h);
    reg_prefetch_open(&ipc_proc.reg, ipc_proc.open_guess, hash);
    unsigned map_hash = local_map_hash(h, ctx);
    struct local_map *m;
    while ((m = local_map_find(h, ctx, map_hash)) && m->pending) {
        local_wait();
        if (ipc_proc.shut) { /* ipc_shutdown ran meanwhile and emptied the tables */
            local_unlock();
            return IPC_PASS;
        }
    }
    if (m && (m->kind != kind || (m->pool && pool != m->pool))) {
        /* The same bytes through the other door, or a pool import through
         * another pool than the first: the driver answers (not counted). */
        local_unlock();
        return IPC_PASS;
    }
    if (m) {
        /* A handle this context has open opens again, the same pointer, even
         * after its exporter died: NVIDIA's driver does (H100, driver 580,
         * docs/gpu-validation.md 2026-11-26), and refusing would fail a call
         * that succeeds without the shim. The mapping stays until closed.
         * The driver counts legacy opens (each needs its close) but not pool
         * imports: one free ends every import of a pointer, and a second
         * free is refused (H200, probe pool-import-pointer-twice); counting
         * those would keep the lease, and the exporter's free, forever. */
        if (kind != IPC_KIND_POOL) {
            m->count++;
            leak_note_reopen(m);
        }
        *ptr = m->ptr;
        STAT_ADD(opens, 1);
        local_unlock();
        return IPC_DONE;
    }
    /* Publish a pending mapping first so that a concurrent open of the same
     * handle in this context waits for ours instead of opening it twice. */
    struct local_map *nm = local_map_new();
    if (!nm) {
        local_unlock();
        return IPC_PASS;
    }
    nm->key.handle = *h;
    nm->key.ctx = ctx;
    nm->kind = kind;
    nm->pool = pool;
    nm->pending = true;
    if (local_map_add(nm, map_hash) != 0) {
        local_map_del(nm);
        local_unlock();
        return IPC_PASS;
    }
    int result;
    if (!open_lockfree(h, hash, ctx, t, nm, cs, &result))
        result = open_locked(h, hash, ctx, t, nm, cs, ptr);
    if (result != IPC_REAL) {
        local_map_del(nm);
        local_broadcast();
    } else {
        t->map_hash = map_hash;
    }
    local_unlock();
    return result;
}

int ipc_open_begin(const struct ipc_handle *h, uint64_t ctx, struct ipc_open *t, uint64_t *ptr)
{
    return open_begin(h, ctx, IPC_KIND_LEGACY, 0, t, ptr);
}

int ipc_import_begin(const struct ipc_handle *h, uint64_t ctx, struct ipc_open *t, uint64_t *ptr)
{
    return open_begin(h, ctx, IPC_KIND_POOL, 0, t, ptr);
}

int ipc_import_pool_begin(const struct ipc_handle *h, uint64_t ctx, uint64_t pool,
                          struct ipc_open *t, uint64_t *ptr)
{
    return open_begin(h, ctx, IPC_KIND_POOL, pool, t, ptr);
}

/* Is t's lease still ours and on t's block? */
static struct reg_lease *ticket_lease(uint32_t lease, uint32_t block, uint64_t generation)
{
    struct reg_lease *l = reg_lease_at(&ipc_proc.reg, lease);
    if (!l || l->holder != ipc_proc.self || l->block != block || l->block_gen != generation ||
        /* pairs with the release stores of intent in reg_lease_begin and reg_lease_end */
        __atomic_load_n(&l->intent, __ATOMIC_ACQUIRE) == LEASE_FREE)
        return NULL;
    return l;
}

/* One open fewer on our lease; the last one ends it (our bit cleared).
 * give_back: an aborted open that claimed a hand-off returns it first, so
 * the exporter never sees the block free of both. Returns the exporter to
 * wake, or REG_NONE. Local lock held. */
static uint32_t release_lease(uint32_t lease, uint32_t block, uint64_t generation, bool give_back)
{
    struct reg_lease *l = ticket_lease(lease, block, generation);
    if (!l) return REG_NONE;
    if (l->count > 1) {
        __atomic_store_n(&l->count, l->count - 1, __ATOMIC_RELAXED);
        uint32_t closing = LEASE_CLOSING;
        /* pairs with the sweeps' LOAD_STATE of intent (registry.h, a lease's intents) */
        __atomic_compare_exchange_n(&l->intent, &closing, LEASE_OPEN, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
        return REG_NONE;
    }
    struct reg_block *b = reg_block_at(&ipc_proc.reg, block);
    if (give_back && b && __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) == generation) {
        uint32_t s = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
        /* RETIRING too: our bit is set, so that retire goes back to LIMBO
         * and must find the hand-off there (tests/model/lease.pml). */
        if (s == BLOCK_LIVE || s == BLOCK_LIMBO || s == BLOCK_RETIRING)
            /* pairs with reg_block_retire's seq_cst load of pending: made before reg_lease_end
             * clears our bit */
            __atomic_fetch_add(&b->pending, 1, __ATOMIC_SEQ_CST);
    }
    struct local_lease *ll = local_lease_find(block);
    if (ll && ll->lease == lease) local_lease_del(ll);
    uint32_t wake = reg_lease_end(&ipc_proc.reg, lease);
    /* The last holder of a dead exporter's block recycles it (rare: the
     * lock is worth taking). */
    if (b && __atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == BLOCK_ORPHANED &&
        !reg_block_held(&ipc_proc.reg, block) && process_lock_registry()) {
        reg_block_unheld(&ipc_proc.reg, block, generation);
        registry_unlock(&ipc_proc.reg);
    }
    return wake;
}

void ipc_open_commit(struct ipc_open *t, uint64_t ptr)
{
    local_lock();
    struct local_map *m = local_map_find(&t->handle, t->ctx, t->map_hash);
    if (m && m->pending && m->block == t->block && m->generation == t->generation) {
        m->pending = false;
        m->count = 1;
        if (local_map_set_ptr(m, ptr) != 0)
            LOG_ONCE(LOG_WARN, "out of memory: an opened mapping cannot be closed cleanly");
        /* Our own lease: nobody else writes its intent while we live. */
        struct reg_lease *l = ticket_lease(t->lease, t->block, t->generation);
        uint32_t opening = LEASE_OPENING;
        if (l) /* pairs with the sweeps' LOAD_STATE of intent (registry.h, a lease's intents) */
            __atomic_compare_exchange_n(&l->intent, &opening, LEASE_OPEN, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
        STAT_ADD(opens, 1);
        local_broadcast();
        log_msg(LOG_DEBUG, "open of block %u: mapped at 0x%llx", t->block, (unsigned long long)ptr);
    }
    local_unlock();
    leak_watch_start(ipc_leak_check);
}

void ipc_open_abort(struct ipc_open *t)
{
    uint32_t wake = REG_NONE;
    local_lock();
    struct local_map *m = local_map_find(&t->handle, t->ctx, t->map_hash);
    if (m && m->pending && m->block == t->block && m->generation == t->generation) {
        local_map_del(m);
        local_broadcast();
    }
    if (ipc_proc.state == PROC_ACTIVE && ipc_proc.self != REG_NONE && !process_forked())
        wake = release_lease(t->lease, t->block, t->generation, t->flags & TICKET_CLAIMED);
    local_unlock();
    if (wake != REG_NONE) registry_wake(&ipc_proc.reg, wake);
}

/* ---- close ---- */

/* The last close of m begins: t filled, m pending (opens of its handle wait
 * for the real close). Local lock held. */
static void close_ticket(struct local_map *m, struct ipc_close *t)
{
    memset(t, 0, sizeof *t);
    t->block = m->block;
    t->lease = m->lease;
    t->generation = m->generation;
    t->ptr = m->ptr;
    t->ctx = m->key.ctx;
    struct reg_lease *l = ticket_lease(m->lease, m->block, m->generation);
    uint32_t open = LEASE_OPEN;
    if (l && __atomic_load_n(&l->count, __ATOMIC_RELAXED) == 1)
        /* pairs with the sweeps' LOAD_STATE of intent (registry.h, a lease's intents) */
        __atomic_compare_exchange_n(&l->intent, &open, LEASE_CLOSING, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
    m->pending = true;
}

static int close_begin(uint64_t ptr, uint8_t kind, struct ipc_close *t)
{
    if (!ipc_active()) return IPC_PASS;
    int result = IPC_PASS;
    local_lock();
    process_check_fork();
    struct local_map *m = local_map_find_ptr(ptr);
    if (m && m->kind != kind) {
        /* A legacy open is not let go of by a free, nor a pool import by a
         * close: CUDA answers such a call itself. */
    } else if (m && m->pending) {
        /* being opened or closed by another thread: not ours to count */
    } else if (m && m->count > 1) {
        m->count--;
        STAT_ADD(closes, 1);
        result = IPC_DONE;
    } else if (m) {
        close_ticket(m, t);
        result = IPC_REAL;
    } else if (kind == IPC_KIND_LEGACY) {
        struct local_export *e = local_export_find(ptr);
        if (e && e->own_opens > 0) {
            e->own_opens--;
            STAT_ADD(closes, 1);
            result = IPC_DONE;
        }
    }
    local_unlock();
    return result;
}

int ipc_close_begin(uint64_t ptr, struct ipc_close *t)
{
    return close_begin(ptr, IPC_KIND_LEGACY, t);
}

int ipc_unimport_begin(uint64_t ptr, struct ipc_close *t)
{
    /* An exporter's free (the usual tracked free) asks without the lock. */
    if (!local_has_pool_imports()) return IPC_PASS;
    return close_begin(ptr, IPC_KIND_POOL, t);
}

/* The mapping t closes, still pending in the local table (local lock held). */
static struct local_map *closing_map(const struct ipc_close *t)
{
    struct local_map *m = local_map_find_ptr(t->ptr);
    return m && m->pending && m->block == t->block && m->generation == t->generation ? m : NULL;
}

void ipc_close_abort(struct ipc_close *t)
{
    local_lock();
    struct local_map *m = closing_map(t);
    if (m) {
        m->pending = false;
        struct reg_lease *l = ipc_active() ? ticket_lease(t->lease, t->block, t->generation) : NULL;
        uint32_t closing = LEASE_CLOSING;
        if (l) /* pairs with the sweeps' LOAD_STATE of intent (registry.h, a lease's intents) */
            __atomic_compare_exchange_n(&l->intent, &closing, LEASE_OPEN, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
        local_broadcast();
    }
    local_unlock();
}

void ipc_close_finish(struct ipc_close *t)
{
    uint32_t wake = REG_NONE;
    local_lock();
    struct local_map *m = closing_map(t);
    if (m) {
        local_map_del(m);
        local_broadcast();
    }
    if (ipc_active() && ipc_proc.self != REG_NONE && !process_forked())
        wake = release_lease(t->lease, t->block, t->generation, false);
    local_unlock();
    if (wake != REG_NONE) registry_wake(&ipc_proc.reg, wake);
    STAT_ADD(closes, 1);
}
/* ---- context teardown ---- */

int ipc_context_gone(uint64_t ctx, bool (*keep)(const struct ipc_handle *h))
{
    int forgotten = 0;
    struct ipc_close t;
    while (ctx && ipc_active()) { /* one mapping a round: its last close, minus the real one */
        local_lock();
        struct local_map *m = local_maps();
        while (m && (m->key.ctx != ctx || m->pending || (keep && keep(&m->key.handle))))
            m = m->hh.next;
        if (m) close_ticket(m, &t);
        local_unlock();
        if (!m) break;
        ipc_close_finish(&t); /* drops the lease, wakes the exporter */
        forgotten++;
    }
    if (forgotten)
        LOG_RATE(LOG_INFO, "context %#llx is gone: %d mapping(s) the driver unmapped forgotten",
                 (unsigned long long)ctx, forgotten);
    return forgotten;
}

/* ---- free ---- */

bool ipc_free_passes(uint64_t ptr)
{
    if (!local_has_exports()) return true;
    if (local_maybe_export(ptr)) return false;
    if (local_limbo_pending()) limbo_collect_on_untracked_free();
    return true;
}

int ipc_free(uint64_t ptr)
{
    /* The hot path: a process that never exported, or a pointer that was
     * never an export base, passes without a lock (two or three relaxed
     * loads, and a counter while something waits in limbo). */
    if (ipc_free_passes(ptr)) return IPC_PASS;
    int result = IPC_PASS;
    local_lock();
    process_check_fork();
    struct local_export *e = local_export_find(ptr);
    if (e && ipc_proc.state == PROC_ACTIVE) reg_prefetch_free(&ipc_proc.reg, e->block);
    if (e && e->in_limbo) {
        LOG_RATE(LOG_WARN, "0x%llx freed twice; the second free fails as the driver's would",
                 (unsigned long long)ptr);
        result = -EINVAL;
    } else if (e && ipc_proc.state == PROC_ACTIVE && limbo_free_needs_no_lock(e)) {
        result = limbo_free_into(e, false) ? IPC_REAL : IPC_DONE;
    } else if (e && (ipc_proc.state != PROC_ACTIVE || !process_lock_registry())) {
        if (ipc_proc.state == PROC_ACTIVE) {
            /* The lock is held past IPCSHIM_LOCK_WAIT (a stopped process):
             * defer the free here; collect() moves it into limbo later. */
            e->lock_deferred = true;
            local_limbo_add(e);
            STAT_ADD(frees_deferred, 1);
        } else {
            /* Tracked, but the registry became unusable: importers may still
             * hold the block and nothing can tell. Keep it (a leak, logged)
             * rather than free memory someone may read. */
            LOG_RATE(LOG_WARN, "registry unusable: exported block 0x%llx is kept, not freed",
                     (unsigned long long)ptr);
        }
        result = IPC_DONE;
    } else if (e) {
        struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
        if (!process_owns(b, e->generation) || b->state != BLOCK_LIVE) {
            local_export_del(e);
        } else {
            limbo_drain_recycles();
            /* The precise clock only for a hand-off that may expire now; the
             * limbo stamp is for reports and stats. */
            if (__atomic_load_n(&b->pending, __ATOMIC_RELAXED))
                limbo_expire_handoffs(e, b, reg_now_ns(), false);
            result = limbo_free_into(e, true) ? IPC_REAL : IPC_DONE;
        }
        registry_unlock(&ipc_proc.reg);
    }
    size_t limbo = local_limbo_count();
    uint64_t since = limbo ? reg_now_ns() - ipc_proc.last_collect_ns : 0;
    local_unlock();
    if (limbo && limbo > options_get()->limbo_warn)
        LOG_ONCE(LOG_WARN,
                 "limbo holds %zu blocks (more than IPCSHIM_LIMBO_WARN): importers are "
                 "slow to close them, or hand-offs are never claimed",
                 limbo);
    if (result == IPC_DONE) limbo_collector_kick(); /* a new deadline to wait for */
    if (limbo && (result != IPC_PASS || since > LIMBO_FREE_COLLECT_INTERVAL_NS))
        limbo_collect(LIMBO_SWEEP_DUE);
    return result;
}

/* ---- stats and shutdown ---- */

void ipc_stats(struct ipcshim_stats *out)
{
    limbo_collect_if_woken(); /* the counters then include it */
    out->exports = __atomic_load_n(&ipc_proc.st.exports, __ATOMIC_RELAXED);
    out->opens = __atomic_load_n(&ipc_proc.st.opens, __ATOMIC_RELAXED);
    out->closes = __atomic_load_n(&ipc_proc.st.closes, __ATOMIC_RELAXED);
    out->frees_deferred = __atomic_load_n(&ipc_proc.st.frees_deferred, __ATOMIC_RELAXED);
    out->frees_reclaimed = __atomic_load_n(&ipc_proc.st.frees_reclaimed, __ATOMIC_RELAXED);
    out->bytes_reclaimed = __atomic_load_n(&ipc_proc.st.bytes_reclaimed, __ATOMIC_RELAXED);
    out->handoffs_expired = __atomic_load_n(&ipc_proc.st.handoffs_expired, __ATOMIC_RELAXED);
    out->longest_limbo_ns = __atomic_load_n(&ipc_proc.st.longest_limbo_ns, __ATOMIC_RELAXED);
    /* Without the local lock: a program (or its metrics thread) polling
     * its stats must not hold up the collector, which takes that lock. */
    bool done = __atomic_load_n(&ipc_proc.shut, __ATOMIC_ACQUIRE);
    out->limbo_blocks = done ? ipc_proc.st.limbo_left : local_limbo_count();
    out->limbo_bytes = done ? ipc_proc.st.limbo_left_bytes : local_limbo_bytes();
}

void ipc_leak_check(void)
{
    local_lock();
    bool ok = process_attached_locked();
    if (ok)
        leak_check_locked(&ipc_proc.reg, ipc_proc.self); /* reads only: no registry lock (leak.h) */
    local_unlock();
    if (ok) leak_check_flush();
}

void ipc_report_leaks(void)
{
    if (local_has_exports()) return; /* ipc_shutdown reports, after its exit wait */
    leak_watch_stop();
    if (__atomic_exchange_n(&ipc_proc.leaks_reported, 1, __ATOMIC_ACQ_REL)) return;
    struct leak_report *leaks = NULL;
    local_lock();
    if (process_attached_locked() && process_lock_registry()) {
        leaks = leak_gather(&ipc_proc.reg, ipc_proc.self);
        registry_unlock(&ipc_proc.reg);
    }
    local_unlock();
    leak_print(leaks);
}

/* At exit: wait for what others still hold (limbo_exit_wait), then report
 * what is left, orphan it, and release our holder slot (importers' too). */
void ipc_shutdown(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return;
    collector_stop();
    leak_watch_stop();
    local_lock();
    bool attached = process_attached_locked();
    local_unlock();
    if (attached) limbo_exit_wait();
    struct leak_report *leaks = NULL;
    local_lock();
    if (attached && !process_forked() && ipc_proc.state == PROC_ACTIVE && process_lock_registry()) {
        limbo_drain_recycles();
        if (!__atomic_exchange_n(&ipc_proc.leaks_reported, 1, __ATOMIC_ACQ_REL))
            leaks = leak_gather(&ipc_proc.reg,
                                ipc_proc.self); /* what is still held, for the exit report */
        /* Our leases go, waking their exporters; our blocks are orphaned
         * (or recycled when nothing holds them) and the slot is freed:
         * work for our own records only (our chunks and our list of
         * exports), no table scan. */
        reg_holder_drop_leases(&ipc_proc.reg, ipc_proc.self);
        reg_holder_release(&ipc_proc.reg, ipc_proc.self);
        (void)registry_remove_if_unused(&ipc_proc.reg); /* the last one out leaves nothing behind */
        registry_unlock(&ipc_proc.reg);
    }
    ipc_proc.st.limbo_left = local_limbo_count(); /* IPCSHIM_STATS, printed after this, agrees */
    ipc_proc.st.limbo_left_bytes = local_limbo_bytes();
    /* Published after limbo_left: ipc_stats reads them without the lock. */
    __atomic_store_n(&ipc_proc.shut, true, __ATOMIC_RELEASE);
    local_reset(true);
    local_broadcast(); /* opens waiting on a pending mapping give up */
    local_unlock();
    leak_print(leaks);
}

int ipc_export_move(uint64_t base, uint64_t new_base)
{
    local_lock();
    struct local_export *e = local_export_find(base);
    int rc = !e ? -ENOENT : local_export_find(new_base) ? -EEXIST : local_export_move(e, new_base);
    local_unlock();
    return rc;
}
