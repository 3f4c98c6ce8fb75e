/* ipc: the lifecycle of exported blocks (export, open, close, free, collect,
 * shutdown) implementing ipc.h on top of the shared registry (registry.c)
 * and this process's indexes (local.c).
 *
 * Invariants:
 * - A block's reference count is the number of holders whose bit is set in
 *   its held bitmap (registry.h). An importer sets and clears its own bit
 *   without the registry lock, behind a lease record it writes first and
 *   frees last, so a death anywhere in between is repaired by clearing the
 *   dead holder's bits; there is no bare counter to get wrong.
 * - A block is really freed only by its exporter: by the program's own free
 *   when nothing holds it (IPC_REAL), or from limbo through device_ops once
 *   it has no holder and no unclaimed unexpired hand-off. It is marked
 *   RETIRED before that free, without the registry lock (reg_block_retire:
 *   a RETIRING step that an importer setting its bit at the same moment
 *   waits out), so no open can succeed on it afterwards, and recycled
 *   (generation bumped) after, lazily: at this process's next registry
 *   round trip, or once RECYCLE_BATCH records wait.
 * - Locks: the local mutex, then the registry lock; device_ops is called with
 *   neither held. Opens, closes and the common free (nothing pending) take
 *   only the local mutex; the registry lock is for creating and recycling
 *   records, for expiring hand-offs and for recovery.
 * - An open proves the exporter alive from shared memory alone (its holder
 *   slot still active with the nonce the block recorded). The sweeps (at
 *   most a second apart in any process that collects) invalidate a dead
 *   holder's slot; until then an open of a dead exporter's handle reaches
 *   the driver, which refuses it (the exporter's memory went with it), and
 *   the lease is dropped at once: nothing is mapped that could be freed.
 *
 * Hand-off rule. Every ipc_export adds one pending hand-off to the block:
 * the handle is on its way to an importer. The first lease another process
 * creates on the block claims one (pending--; an aborted open gives it
 * back). A block in limbo is not freed while a hand-off is pending; pending
 * hand-offs expire IPCSHIM_HANDOFF_TIMEOUT after the block's last export
 * (stats.handoffs_expired), or earlier in ipc_collect_pressure (those older
 * than a second first, then all). With IPCSHIM_HANDOFF=window, a block in
 * limbo that loses its last lease is re-armed with one pending hand-off for
 * another timeout, so importers that receive the handle later are covered
 * too (registry.c: reg_lease_end, reg_block_unheld). */
#include "ipc.h"
#include "callsite.h"
#include "collector.h"
#include "ipcshim.h"
#include "leak.h"
#include "local.h"
#include "log.h"
#include "options.h"
#include "registry.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum { S_IDLE, S_ACTIVE, S_OFF };

enum {
    TICKET_CLAIMED = 1, /* ipc_open.flags: this open claimed a hand-off */
};

#define SWEEP_INTERVAL_NS 1000000000ull      /* full dead-holder sweep from background paths */
#define FREE_COLLECT_INTERVAL_NS 50000000ull /* collect on untracked frees at most this often */
#define PRESSURE_AGE_NS 1000000000ull
#define IDLE_WAIT_NS 10000000000ull
/* Catch importers that die without closing: while limbo waits, the
 * collector sweeps the holders of its limbo blocks this often (SWEEP_LIMBO),
 * so a killed importer's memory comes back within about this long. */
#define LIMBO_POLL_NS 200000000ull

static const struct device_ops *ops;
static struct registry reg;
static int state = S_IDLE;
static bool shut;
static uint32_t self = REG_NONE;
static uint64_t self_nonce;
static uint64_t last_sweep_ns, last_collect_ns, last_limbo_sweep_ns;
static bool collector_asked;           /* collector_start called (local lock) */
static uint32_t open_guess = REG_NONE; /* the record our last open took (local lock) */
static volatile uint8_t *fork_canary;
static pid_t canary_pid;

static struct {
    uint64_t exports, opens, closes, frees_deferred, frees_reclaimed, bytes_reclaimed;
    uint64_t handoffs_expired, longest_limbo_ns;
    uint64_t limbo_left, limbo_left_bytes; /* limbo when ipc_shutdown let go of it */
} st;

#define STAT_ADD(field, n) __atomic_fetch_add(&st.field, (n), __ATOMIC_RELAXED)

/* Blocks retired by a free (free_into_limbo), recycled at this process's
 * next registry round trip (an export's, a collect's) or once
 * RECYCLE_BATCH of them wait. Local lock. */
static struct recycle {
    uint32_t block;
    uint64_t generation;
} * recycles;
static size_t nrecycles, recycles_cap;

#define RECYCLE_BATCH 64

static void recycle_later(uint32_t block, uint64_t generation)
{
    if (nrecycles == recycles_cap) {
        size_t cap = recycles_cap ? recycles_cap * 2 : 16;
        struct recycle *p = realloc(recycles, cap * sizeof *p);
        if (!p) return; /* the record stays RETIRED until its exporter's exit: a leak of a slot */
        recycles = p, recycles_cap = cap;
    }
    recycles[nrecycles++] = (struct recycle){block, generation};
}

static bool own_block(const struct reg_block *b, uint64_t generation);

/* Local and registry locks held. */
static void drain_recycles(void)
{
    for (size_t i = 0; i < nrecycles; i++) {
        struct reg_block *b = reg_block_at(&reg, recycles[i].block);
        if (own_block(b, recycles[i].generation) && b->state == BLOCK_RETIRED)
            reg_block_recycle(&reg, recycles[i].block);
    }
    nrecycles = 0;
}

static uint64_t timeout_ns(void)
{
    return options_get()->handoff_timeout * 1000000ull;
}

/* ---- fork ---- */

static void after_fork(bool consistent)
{
    local_reset(consistent);
    collector_after_fork();
    collector_asked = false;
    leak_after_fork();
    memset(&st, 0, sizeof st);
    self = REG_NONE;
    nrecycles = 0; /* the parent's records */
    last_sweep_ns = last_collect_ns = last_limbo_sweep_ns = 0;
    canary_pid = getpid();
    if (fork_canary) *fork_canary = 1;
    if (state == S_ACTIVE && !shut && registry_reopen_fd(&reg) != 0) {
        LOG_ONCE(LOG_WARN, "fork child cannot reopen the registry; not tracking");
        state = S_OFF;
    }
}

/* True in a child that has not dealt with its fork yet. The canary page is
 * MADV_WIPEONFORK: it reads 0 in any child created without the atfork
 * handlers (raw clone), with no syscall on the hot path. Where that advice
 * is unsupported we compare getpid() instead. Local lock held. */
static bool forked(void)
{
    if (fork_canary) return *fork_canary == 0;
    return canary_pid && getpid() != canary_pid;
}

static void check_fork(void)
{
    /* The tables may be mid-update (no atfork handler ran): abandon them. */
    if (forked()) after_fork(false);
}

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
    after_fork(true);
}

static void init_once(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && madvise(p, 4096, MADV_WIPEONFORK) == 0) {
        fork_canary = p;
        *fork_canary = 1;
    } else if (p != MAP_FAILED) {
        munmap(p, 4096);
    }
    canary_pid = getpid();
    leak_init();
}

void ipc_init(const struct device_ops *o)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    ops = o;
    pthread_once(&once, init_once);
}

bool ipc_active(void)
{
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == S_ACTIVE && !shut &&
           !options_get()->disable;
}

static void turn_off(void)
{
    __atomic_store_n(&state, S_OFF, __ATOMIC_RELEASE);
}

/* The registry lock. False when it is not to be had: unusable (tracking is
 * then turned off for good), or held past IPCSHIM_LOCK_WAIT by another
 * process -- a stopped one -- (tracking stays on; this one operation goes on
 * without the registry: an open or export untracked, a free or a lease drop
 * deferred and retried later, never anything unsafe). */
static bool lock_registry(void)
{
    int rc = registry_lock(&reg);
    if (rc == 0) return true;
    if (rc != -ETIMEDOUT) turn_off();
    return false;
}

static struct reg_lease *ticket_lease(uint32_t lease, uint32_t block, uint64_t generation);

static uint64_t new_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof n, GRND_NONBLOCK) != sizeof n)
        n = reg_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&n;
    return n | 1; /* never 0: a zeroed record has nonce 0 */
}

enum { REMOVED_RETRIES = 3 };
static int attach_locked(const struct options *opt);

/* Attach lazily and take a holder slot. 0, -ENODEV (not tracking) or
 * -ENOSPC (no holder slot). Local lock held. */
static int ready_locked(void)
{
    const struct options *opt = options_get();
    if (opt->disable || shut || !ops) return -ENODEV;
    check_fork();
    if (state == S_OFF) return -ENODEV;
    /* A registry removed by its last user while we attached: once more, on
     * the new file (REMOVED_RETRIES times at most: then untracked). */
    for (int tries = 0;; tries++) {
        bool fresh = self == REG_NONE; /* only a slot taken now asks */
        int rc = attach_locked(opt);
        if (rc || !fresh || !registry_removing(&reg)) return rc;
        if (tries == REMOVED_RETRIES) {
            LOG_ONCE(LOG_WARN, "registry %s keeps being removed as we attach; not tracking",
                     reg.name);
            turn_off();
            return -ENODEV;
        }
        if (lock_registry()) {
            reg_holder_release(&reg, self);
            registry_unlock(&reg);
        }
        registry_close(&reg);
        self = REG_NONE;
        __atomic_store_n(&state, S_IDLE, __ATOMIC_RELEASE);
    }
}

/* ready_locked's attach: the registry, then a holder slot. */
static int attach_locked(const struct options *opt)
{
    if (state == S_IDLE) {
        struct reg_caps caps;
        registry_caps_from_options(opt, &caps);
        if (registry_open(&reg, opt->domain, &caps) != 0) {
            turn_off();
            return -ENODEV;
        }
        __atomic_store_n(&state, S_ACTIVE, __ATOMIC_RELEASE);
    }
    if (self == REG_NONE) {
        /* Once per process: the leases of holders that died since the last
         * sweep (or of this very pid before an exec) go now. */
        if (reg_sweep_dead(&reg, REG_NONE) < 0 && state != S_ACTIVE) return -ENODEV;
        self_nonce = new_nonce();
        /* Without the lock (many processes start at once); under it only
         * when no slot is FREE (one in a corrupt state may be reused). */
        self = reg_holder_claim(&reg, self_nonce);
        if (self == REG_NONE) {
            if (!lock_registry()) return -ENODEV;
            self = reg_holder_attach(&reg, self_nonce);
            registry_unlock(&reg);
        }
        if (self == REG_NONE) {
            LOG_ONCE(LOG_WARN,
                     "registry %s has no free holder slot (IPCSHIM_MAX_HOLDERS); "
                     "not tracking for now",
                     reg.name);
            return -ENOSPC;
        }
        log_msg(LOG_DEBUG, "attached to %s as holder %u", reg.name, self);
    }
    return 0;
}

/* Is b a record this process exported with this generation? */
static bool own_block(const struct reg_block *b, uint64_t generation)
{
    return b && b->generation == generation && b->exporter == self &&
           b->exporter_nonce == self_nonce && b->state != BLOCK_FREE;
}

/* Expires b's pending hand-offs if due (or now, if force); e is b's export
 * record. Local and registry locks held. */
static void expire_handoffs(const struct local_export *e, struct reg_block *b, uint64_t now,
                            bool force)
{
    if (!__atomic_load_n(&b->pending, __ATOMIC_RELAXED) ||
        (!force && now < b->last_export_ns + timeout_ns()))
        return;
    /* Importers claim hand-offs without the lock: take them all at once. */
    uint32_t n = __atomic_exchange_n(&b->pending, 0, __ATOMIC_SEQ_CST);
    if (!n) return;
    STAT_ADD(handoffs_expired, n);
    leak_note_expired(b, e);
    b->expired += n;
    LOG_ONCE(LOG_INFO,
             "a hand-off expired unclaimed (block of %llu bytes); "
             "further expiries are counted in stats only",
             (unsigned long long)b->size);
}

enum sweep_mode {
    SWEEP_DUE,   /* every holder, at most once a second (SWEEP_INTERVAL_NS) */
    SWEEP_ALL,   /* every holder, now */
    SWEEP_MINE,  /* the holders of our own blocks, now (exit) */
    SWEEP_LIMBO, /* the holders of our blocks in limbo, now (the collector's poll) */
};

/* ---- export ---- */

static int export_try(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                      uint64_t ctx, uint64_t identity, int kind, bool retry, uint32_t cs);
static int collect(enum sweep_mode how);
static size_t shed_unclaimed_n(bool all);

int ipc_export(const struct ipc_handle *h, uint64_t base, uint64_t size, int device, uint64_t ctx)
{
    return export_try(h, base, size, device, ctx, 0, IPC_KIND_LEGACY, true, callsite_capture());
}

int ipc_export_identity(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                        uint64_t ctx, uint64_t identity, int kind)
{
    return export_try(h, base, size, device, ctx, identity, kind, true, callsite_capture());
}

/* ipc_export, with one retry after shedding this process's own unclaimed
 * hand-offs when the table is full; cs: the export's call site. */
static int export_try(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                      uint64_t ctx, uint64_t identity, int kind, bool retry, uint32_t cs)
{
    local_export_prefetch(base);
    local_lock();
    int rc = ready_locked();
    if (rc) {
        local_unlock();
        return rc == -ENOSPC ? -ENOSPC : -ENODEV;
    }
    /* The record it will take: the last one recycled before it, else the
     * free list's head. */
    reg_prefetch_create(&reg, nrecycles ? recycles[nrecycles - 1].block : reg_block_next_free(&reg),
                        h);
    uint64_t now = reg_now_ns();
    /* The filter first: a base never exported (or freed since) is not
     * looked for. */
    struct local_export *e = local_maybe_export(base) ? local_export_find(base) : NULL;
    if (e) {
        bool again = false;
        if (!lock_registry()) goto off;
        drain_recycles();
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (!e->in_limbo && !memcmp(e->handle.bytes, h->bytes, IPC_HANDLE_BYTES) &&
            own_block(b, e->generation) && b->state == BLOCK_LIVE) {
            /* The same allocation exported again: one more hand-off. */
            if (__atomic_fetch_add(&b->pending, 1, __ATOMIC_SEQ_CST) == 0) b->first_export_ns = now;
            b->last_export_ns = now;
            again = true;
            if (identity) e->identity = identity;
            leak_note_reexport(e);
        } else if (own_block(b, e->generation)) {
            reg_block_let_go(&reg, e->block); /* a new allocation at a base we never saw freed */
        }
        registry_unlock(&reg);
        if (again) {
            STAT_ADD(exports, 1);
            local_unlock();
            return 0;
        }
        local_export_del(e);
    }
    struct local_export *ne = local_export_new();
    if (!ne) {
        local_unlock();
        LOG_ONCE(LOG_WARN, "out of memory: an export is not tracked");
        return -ENOMEM;
    }
    if (!lock_registry()) {
        local_export_free(ne);
        goto off;
    }
    drain_recycles();
    uint32_t idx = reg_block_create(&reg, h, base, size, device, self, now, kind);
    uint64_t gen = idx != REG_NONE ? reg.blocks[idx].generation : 0;
    size_t shed = idx == REG_NONE && retry ? shed_unclaimed_n(true) : 0;
    registry_unlock(&reg);
    if (idx == REG_NONE) {
        local_export_free(ne);
        local_unlock();
        if (shed && collect(SWEEP_ALL) > 0)
            return export_try(h, base, size, device, ctx, identity, kind, false, cs);
        LOG_ONCE(LOG_WARN,
                 "registry %s is full (IPCSHIM_MAX_BLOCKS=%u): new exports are not "
                 "tracked",
                 reg.name, reg.limit_blocks);
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
    if (local_export_add(ne) != 0) {
        local_export_free(ne);
        if (lock_registry()) {
            reg_block_recycle(&reg, idx);
            registry_unlock(&reg);
        }
        local_unlock();
        LOG_ONCE(LOG_WARN, "out of memory: an export is not tracked");
        return -ENOMEM;
    }
    STAT_ADD(exports, 1);
    if (!collector_asked && options_get()->collector) {
        collector_asked = true; /* once, not a locked exchange per export */
        collector_start();
    }
    local_unlock();
    leak_watch_start();
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

/* The lock-free path could not decide: ask again under the registry lock. */
#define ASK_LOCKED 1000
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
        uint32_t s = __atomic_load_n(&b->state, __ATOMIC_SEQ_CST);
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
    uint32_t li = reg_lease_take(&reg);
    if (li != REG_NONE) return li;
    int rc = reg_lease_claim(&reg);
    if (rc == -EAGAIN) {
        if (!lock_registry()) return REG_NONE;
        rc = reg_lease_grow(&reg);
        registry_unlock(&reg);
    }
    if (rc < 0) {
        LOG_ONCE(LOG_WARN,
                 "registry %s has no free lease (IPCSHIM_MAX_LEASES=%u): opens are not tracked",
                 reg.name, reg.max_leases);
        return REG_NONE;
    }
    return reg_lease_take(&reg);
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
 * our bit; a second context's open only counts up our lease). IPC_REAL,
 * -ENOENT / -EOWNERDEAD (the driver would refuse), IPC_PASS, or ASK_LOCKED.
 * Local lock held. */
static int open_lockfree(const struct ipc_handle *h, uint32_t hash, uint64_t ctx,
                         struct ipc_open *t, struct local_map *nm, uint32_t cs)
{
    uint64_t gen;
    uint32_t bi = reg_block_lookup(&reg, h, hash, &gen);
    struct reg_block *b = reg_block_at(&reg, bi);
    if (!b) return ASK_LOCKED;
    uint32_t exporter = __atomic_load_n(&b->exporter, __ATOMIC_RELAXED);
    uint64_t exporter_nonce = __atomic_load_n(&b->exporter_nonce, __ATOMIC_RELAXED);
    if (exporter == self || !reg_holder_current(&reg, exporter, exporter_nonce))
        return ASK_LOCKED; /* our own export, or a stale record: the locked path decides */
    struct local_lease *ll = local_lease_find(bi);
    if (ll && ll->generation == gen && ticket_lease(ll->lease, bi, gen)) {
        /* Held already from another context: our bit is set, so the block
         * cannot be retired; one more open on our lease. */
        struct reg_lease *l = &reg.leases[ll->lease];
        __atomic_store_n(&l->count, l->count + 1, __ATOMIC_RELAXED);
        open_ticket(t, nm, h, ctx, bi, ll->lease, gen, 0);
        leak_note_open(nm, &reg, b, cs);
        return IPC_REAL;
    }
    if (ll) local_lease_del(ll); /* of an earlier generation */
    uint32_t li = take_lease_slot();
    if (li == REG_NONE) return IPC_PASS;
    bool first = reg_lease_begin(&reg, li, bi, gen);
    uint32_t s = settle_state(b, gen);
    if ((s != BLOCK_LIVE && s != BLOCK_LIMBO) || local_lease_add(bi, gen, li) != 0) {
        reg_lease_end(&reg, li); /* not LIMBO: nobody to wake */
        if (s == BLOCK_ORPHANED) return -EOWNERDEAD;
        if (s == BLOCK_RETIRED) return -ENOENT;
        return s == BLOCK_FREE ? ASK_LOCKED : IPC_PASS;
    }
    uint32_t flags = 0;
    if (first && claim_handoff(b)) {
        __atomic_fetch_add(&b->claimed, 1, __ATOMIC_RELAXED);
        flags |= TICKET_CLAIMED;
    }
    open_ticket(t, nm, h, ctx, bi, li, gen, flags);
    leak_note_open(nm, &reg, b, cs);
    open_guess = bi;
    return IPC_REAL;
}

/* The open under the registry lock, for what the lock-free path leaves:
 * handles it does not find, our own exports, records of dead exporters.
 * Local lock held. */
static int open_locked(const struct ipc_handle *h, uint32_t hash, uint64_t ctx, struct ipc_open *t,
                       struct local_map *nm, uint32_t cs, uint64_t *ptr)
{
    if (!lock_registry()) return IPC_PASS;
    int result;
    uint32_t bi = reg_block_find(&reg, h);
    struct reg_block *b = reg_block_at(&reg, bi);
    if (!b) {
        registry_unlock(&reg);
        return IPC_PASS;
    }
    result = b->state == BLOCK_ORPHANED ? -EOWNERDEAD : -ENOENT;
    if (b->state != BLOCK_LIVE && b->state != BLOCK_LIMBO) goto unlock;
    if (b->exporter == self && b->exporter_nonce == self_nonce) {
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
    struct reg_holder *ex = reg_holder_at(&reg, b->exporter);
    result = -EOWNERDEAD;
    if (!ex || ex->nonce != b->exporter_nonce || ex->state != HOLDER_ACTIVE) {
        reg_block_let_go(&reg, bi); /* its exporter's slot moved on: a stale record */
        goto unlock;
    }
    /* Found here although the lock-free lookup missed it (a concurrent
     * change of its hash chain): the lock-free path can take it now, as
     * records change only under the lock we hold. */
    registry_unlock(&reg);
    result = open_lockfree(h, hash, ctx, t, nm, cs);
    return result == ASK_LOCKED ? IPC_PASS : result;
unlock:
    registry_unlock(&reg);
    return result;
}

static int open_begin(const struct ipc_handle *h, uint64_t ctx, uint8_t kind, struct ipc_open *t,
                      uint64_t *ptr)
{
    if (options_get()->disable) return IPC_PASS;
    uint32_t cs = callsite_capture();
    local_lock();
    if (ready_locked() != 0) {
        local_unlock();
        return IPC_PASS;
    }
    /* Hints, whose lines move while the local tables are searched. */
    uint32_t hash = reg_handle_hash(h);
    reg_prefetch_open(&reg, open_guess, hash);
    unsigned map_hash = local_map_hash(h, ctx);
    struct local_map *m;
    while ((m = local_map_find(h, ctx, map_hash)) && m->pending) {
        local_wait();
        if (shut) { /* ipc_shutdown ran meanwhile and emptied the tables */
            local_unlock();
            return IPC_PASS;
        }
    }
    if (m && m->kind != kind) {
        local_unlock(); /* the same bytes through the other door: not ours */
        return IPC_PASS;
    }
    if (m) {
        /* A handle this context has open opens again, the same pointer, even
         * after its exporter died: NVIDIA's driver does (H100, driver 580,
         * docs/gpu-validation.md 2026-11-26), and refusing would fail a call
         * that succeeds without the shim. The mapping stays until closed. */
        m->count++;
        leak_note_reopen(m);
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
    nm->pending = true;
    if (local_map_add(nm, map_hash) != 0) {
        local_map_del(nm);
        local_unlock();
        return IPC_PASS;
    }
    int result = open_lockfree(h, hash, ctx, t, nm, cs);
    if (result == ASK_LOCKED) result = open_locked(h, hash, ctx, t, nm, cs, ptr);
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
    return open_begin(h, ctx, IPC_KIND_LEGACY, t, ptr);
}

int ipc_import_begin(const struct ipc_handle *h, uint64_t ctx, struct ipc_open *t, uint64_t *ptr)
{
    return open_begin(h, ctx, IPC_KIND_POOL, t, ptr);
}

/* Is t's lease still ours and on t's block? */
static struct reg_lease *ticket_lease(uint32_t lease, uint32_t block, uint64_t generation)
{
    struct reg_lease *l = reg_lease_at(&reg, lease);
    if (!l || l->holder != self || l->block != block || l->block_gen != generation ||
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
        __atomic_compare_exchange_n(&l->intent, &closing, LEASE_OPEN, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
        return REG_NONE;
    }
    struct reg_block *b = reg_block_at(&reg, block);
    if (give_back && b && __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) == generation) {
        uint32_t s = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
        /* RETIRING too: our bit is set, so that retire goes back to LIMBO
         * and must find the hand-off there (tests/model/lease.pml). */
        if (s == BLOCK_LIVE || s == BLOCK_LIMBO || s == BLOCK_RETIRING)
            __atomic_fetch_add(&b->pending, 1, __ATOMIC_SEQ_CST);
    }
    struct local_lease *ll = local_lease_find(block);
    if (ll && ll->lease == lease) local_lease_del(ll);
    uint32_t wake = reg_lease_end(&reg, lease);
    /* The last holder of a dead exporter's block recycles it (rare: the
     * lock is worth taking). */
    if (b && __atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == BLOCK_ORPHANED &&
        !reg_block_held(&reg, block) && lock_registry()) {
        reg_block_unheld(&reg, block, generation);
        registry_unlock(&reg);
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
        if (l)
            __atomic_compare_exchange_n(&l->intent, &opening, LEASE_OPEN, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
        STAT_ADD(opens, 1);
        local_broadcast();
    }
    local_unlock();
    leak_watch_start();
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
    if (state == S_ACTIVE && self != REG_NONE && !forked())
        wake = release_lease(t->lease, t->block, t->generation, t->flags & TICKET_CLAIMED);
    local_unlock();
    if (wake != REG_NONE) registry_wake(&reg, wake);
}

/* ---- close ---- */

static int close_begin(uint64_t ptr, uint8_t kind, struct ipc_close *t)
{
    if (!ipc_active()) return IPC_PASS;
    int result = IPC_PASS;
    local_lock();
    check_fork();
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
        memset(t, 0, sizeof *t);
        t->block = m->block;
        t->lease = m->lease;
        t->generation = m->generation;
        t->ptr = ptr;
        t->ctx = m->key.ctx;
        struct reg_lease *l = ticket_lease(m->lease, m->block, m->generation);
        uint32_t open = LEASE_OPEN;
        if (l && __atomic_load_n(&l->count, __ATOMIC_RELAXED) == 1)
            __atomic_compare_exchange_n(&l->intent, &open, LEASE_CLOSING, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
        m->pending = true; /* opens of this handle wait for the real close */
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
        if (l)
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
    if (ipc_active() && self != REG_NONE && !forked())
        wake = release_lease(t->lease, t->block, t->generation, false);
    local_unlock();
    if (wake != REG_NONE) registry_wake(&reg, wake);
    STAT_ADD(closes, 1);
}

/* ---- collect ---- */

struct victim {
    uint64_t base, size, ctx, generation, limbo_since, identity;
    uint32_t block;
    int device;
};

/* Sweeps the dead among the holders of our own blocks only: what exit
 * needs (they would keep it waiting), in work proportional to our own
 * records whatever the domain holds. The liveness checks run without any
 * lock. */
static void note_holders(const struct local_export *e, uint8_t *cand, bool *any)
{
    if (!own_block(reg_block_at(&reg, e->block), e->generation)) return;
    for (uint32_t h = reg_block_next_holder(&reg, e->block, 0); h != REG_NONE;
         h = reg_block_next_holder(&reg, e->block, h + 1))
        if (h != self) cand[h] = 1, *any = true;
}

/* Sweeps the dead among the holders of our blocks (limbo_only: of our
 * blocks in limbo, a walk of the limbo list, not of every export).
 * Returns how many were swept. */
static int sweep_holders_of_ours(bool limbo_only)
{
    uint8_t *cand = calloc(reg.max_holders, 1);
    if (!cand) return 0;
    bool any = false;
    local_lock();
    struct local_export *e, *tmp;
    if (limbo_only) {
        DL_FOREACH(local_limbo_head(), e) note_holders(e, cand, &any);
    } else {
        HASH_ITER(hh, local_exports(), e, tmp) note_holders(e, cand, &any);
    }
    local_unlock();
    int swept = any ? reg_sweep_among(&reg, cand) : 0;
    free(cand);
    return swept;
}

static int free_limbo(void);

/* free_limbo calls between taking their victims and the real frees. */
static int frees_in_flight;

/* Frees what can be freed from this process's limbo and sweeps the dead as
 * `how` says (the sweep's liveness checks run before any lock is taken:
 * reg_sweep_dead). A due sweep comes after the frees, which it would
 * otherwise delay by a syscall or two per holder, and is followed by
 * another round only when it released someone. Returns the number freed. */
static int collect(enum sweep_mode how)
{
    uint64_t now = reg_now_ns();
    uint32_t me = __atomic_load_n(&self, __ATOMIC_RELAXED);
    bool can = ipc_active() && me != REG_NONE && !forked();
    if (can && how == SWEEP_MINE) sweep_holders_of_ours(false);
    if (can && how == SWEEP_ALL) reg_sweep_dead(&reg, me);
    int n = free_limbo();
    /* At most once a poll period: a close's wake frees at once, and its
     * sweep would only cost the syscalls of the other holders' checks. */
    if (can && how == SWEEP_LIMBO && local_limbo_pending() &&
        now - __atomic_load_n(&last_limbo_sweep_ns, __ATOMIC_RELAXED) >= LIMBO_POLL_NS / 2) {
        __atomic_store_n(&last_limbo_sweep_ns, now, __ATOMIC_RELAXED);
        if (sweep_holders_of_ours(true) > 0) n += free_limbo();
    }
    if (can && (how == SWEEP_DUE || how == SWEEP_LIMBO) &&
        now - __atomic_load_n(&last_sweep_ns, __ATOMIC_RELAXED) > SWEEP_INTERVAL_NS) {
        __atomic_store_n(&last_sweep_ns, now, __ATOMIC_RELAXED);
        if (reg_sweep_dead(&reg, me) > 0) n += free_limbo();
    }
    return n;
}

/* Frees what can be freed from this process's limbo now. Returns the
 * number freed. */
static int free_limbo(void)
{
    uint64_t now = reg_now_ns();
    local_lock();
    check_fork();
    if (state != S_ACTIVE || shut || self == REG_NONE) {
        local_unlock();
        return 0;
    }
    last_collect_ns = now;
    size_t cap = local_limbo_count();
    if (!cap && !nrecycles) {
        local_unlock();
        return 0;
    }
    struct victim *v = cap ? calloc(cap, sizeof *v) : NULL;
    size_t n = 0;
    if ((cap && !v) || !lock_registry()) {
        free(v);
        local_unlock();
        return 0;
    }
    drain_recycles();
    struct local_export *e, *tmp;
    DL_FOREACH_SAFE(local_limbo_head(), e, tmp)
    {
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (e->lock_deferred && own_block(b, e->generation) && b->state == BLOCK_LIVE) {
            /* Freed while the lock was out of reach: into limbo now. */
            e->lock_deferred = false;
            b->limbo_since_ns = now;
            b->state = BLOCK_LIMBO;
        }
        if (!own_block(b, e->generation) || b->state != BLOCK_LIMBO) {
            local_export_del(e); /* no longer ours to free */
            continue;
        }
        expire_handoffs(e, b, now, false);
        /* Held or awaited: not worth a RETIRING round (which importers
         * opening it would wait out). */
        if (n == cap || __atomic_load_n(&b->pending, __ATOMIC_RELAXED) ||
            reg_block_held(&reg, e->block) || !reg_block_retire(&reg, e->block))
            continue;
        /* RETIRED: from here on no open can succeed. */
        v[n++] = (struct victim){.base = e->base,
                                 .size = e->size,
                                 .ctx = e->ctx,
                                 .generation = e->generation,
                                 .limbo_since = b->limbo_since_ns,
                                 .identity = e->identity,
                                 .block = e->block,
                                 .device = e->device};
        local_export_del(e);
    }
    /* Counted before the locks go: whoever collects next and finds
     * nothing knows frees are on their way (ipc_collect_pressure). */
    if (n) __atomic_add_fetch(&frees_in_flight, 1, __ATOMIC_SEQ_CST);
    registry_unlock(&reg);
    local_unlock();
    if (!n) {
        free(v);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = ops->free_block(v[i].base, v[i].device, v[i].ctx, v[i].identity);
        if (rc)
            LOG_RATE(LOG_WARN, "deferred free of 0x%llx failed (%d)", (unsigned long long)v[i].base,
                     rc);
    }
    now = reg_now_ns();
    local_lock();
    if (!shut && !forked())
        for (size_t i = 0; i < n; i++)
            recycle_later(v[i].block, v[i].generation);
    local_unlock();
    for (size_t i = 0; i < n; i++) {
        uint64_t spent = now - v[i].limbo_since;
        STAT_ADD(frees_reclaimed, 1);
        STAT_ADD(bytes_reclaimed, v[i].size);
        uint64_t longest = __atomic_load_n(&st.longest_limbo_ns, __ATOMIC_RELAXED);
        while (spent > longest &&
               !__atomic_compare_exchange_n(&st.longest_limbo_ns, &longest, spent, false,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    __atomic_sub_fetch(&frees_in_flight, 1, __ATOMIC_SEQ_CST); /* done and counted */
    free(v);
    return (int)n;
}

int ipc_collect(void)
{
    if (!ipc_active()) return 0;
    return collect(SWEEP_ALL);
}

/* Expires pending hand-offs of our limbo blocks exported before `before`. */
static void expire_limbo_older_than(uint64_t before)
{
    local_lock();
    if (ipc_active() && self != REG_NONE && !forked() && lock_registry()) {
        struct local_export *e;
        DL_FOREACH(local_limbo_head(), e)
        {
            struct reg_block *b = reg_block_at(&reg, e->block);
            if (own_block(b, e->generation) && b->state == BLOCK_LIMBO &&
                b->last_export_ns <= before)
                expire_handoffs(e, b, 0, true);
        }
        registry_unlock(&reg);
    }
    local_unlock();
}

int ipc_collect_pressure(void)
{
    if (!ipc_active()) return 0;
    uint64_t before = __atomic_load_n(&st.frees_reclaimed, __ATOMIC_RELAXED);
    uint64_t now = reg_now_ns();
    expire_limbo_older_than(now > PRESSURE_AGE_NS ? now - PRESSURE_AGE_NS : 0);
    int n = collect(SWEEP_ALL);
    if (n <= 0) {
        expire_limbo_older_than(UINT64_MAX);
        n = collect(SWEEP_ALL);
    }
    /* Trap: the collector thread may have taken what we came for (a
     * hand-off we just expired) and be freeing it right now; our collect
     * then finds nothing. Its frees count as ours once they are done. */
    thread_wait_stopped(&frees_in_flight, 1000);
    uint64_t others = __atomic_load_n(&st.frees_reclaimed, __ATOMIC_RELAXED) - before;
    return n > 0 ? n : (int)(others > INT32_MAX ? INT32_MAX : others);
}

/* ---- fair share ---- */

/* A process's share of the block table for blocks that only unclaimed
 * hand-offs keep (freed by the program, opened by nobody yet). */
static size_t unclaimed_share(void)
{
    size_t share = reg.limit_blocks / 8;
    return share < 16 ? 16 : share > 2048 ? 2048 : share;
}

/* Fair share: when this process's limbo outgrows its share, the oldest of
 * its blocks that only unclaimed hand-offs keep lose them now (down to half
 * the share), so that a program exporting handles nobody opens cannot fill
 * the table and leave every other program unprotected. The next collect
 * frees them. Blocks somebody opened (leases) are never touched. all: every
 * such block (the table is full). Local and registry locks held. */
static size_t shed_unclaimed_n(bool all)
{
    size_t n = local_limbo_count(), share = unclaimed_share(), shed = 0;
    if (!all && n <= share) return 0;
    struct local_export *e;
    DL_FOREACH(local_limbo_head(), e)
    {
        if (!all && n - shed <= share / 2) break;
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (!own_block(b, e->generation) || b->state != BLOCK_LIMBO ||
            !__atomic_load_n(&b->pending, __ATOMIC_RELAXED) || reg_block_held(&reg, e->block))
            continue;
        expire_handoffs(e, b, 0, true);
        shed++;
    }
    if (shed)
        LOG_RATE(LOG_WARN,
                 "this process holds more than its share (%zu) of registry %s with hand-offs "
                 "nobody claimed; %zu expired early",
                 share, reg.name, shed);
    return shed;
}

static void shed_unclaimed(void)
{
    (void)shed_unclaimed_n(false);
}

/* ---- free ---- */

/* An untracked free while limbo waits: every 1024th free of a thread looks
 * whether a collect is due (for processes without the collector thread);
 * the others cost a thread-local increment. */
static void collect_on_untracked_free(void)
{
    static __thread unsigned frees
        __attribute__((tls_model("initial-exec"))); /* no __tls_get_addr */
    if ((++frees & 1023) != 0) return;
    uint64_t last = __atomic_load_n(&last_collect_ns, __ATOMIC_RELAXED);
    if (reg_now_ns() - last > FREE_COLLECT_INTERVAL_NS) collect(SWEEP_DUE);
}

/* The common free needs no registry lock: a live block of ours with no
 * hand-off pending. Only this process moves its block LIVE -> LIMBO ->
 * RETIRING -> RETIRED or back to LIMBO (importers add and drop their bits
 * and hand-offs with atomics either way; a repair turns RETIRING back into
 * LIMBO with a CAS, and then the retire answers "held"). A pending
 * hand-off may be due to expire, which needs the lock. Local lock held. */
static bool free_needs_no_lock(const struct local_export *e)
{
    const struct reg_block *b = reg_block_at(&reg, e->block);
    return own_block(b, e->generation) &&
           __atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == BLOCK_LIVE &&
           !__atomic_load_n(&b->pending, __ATOMIC_RELAXED);
}

/* The program freed e's live block: into limbo, then out of it at once if
 * nobody holds it and no hand-off is pending (importers see LIMBO as LIVE).
 * IPC_REAL (retired, and queued for recycling) or IPC_DONE (in limbo).
 * locked: whether the registry lock is held. Local lock held. */
static int free_into_limbo(struct local_export *e, bool locked)
{
    struct reg_block *b = reg_block_at(&reg, e->block);
    uint64_t now = reg_coarse_ns(), exported = b->last_export_ns;
    b->limbo_since_ns = now < exported ? exported : now; /* never before the export */
    __atomic_store_n(&b->state, BLOCK_LIMBO, __ATOMIC_SEQ_CST);
    if (reg_block_retire(&reg, e->block)) {
        /* Recycled lazily, in a batch: nothing can open it any more, and
         * only this process could export its base again, once the real
         * free that follows has run. */
        recycle_later(e->block, e->generation);
        if (nrecycles >= RECYCLE_BATCH && (locked || lock_registry())) {
            drain_recycles();
            if (!locked) registry_unlock(&reg);
        }
        local_export_del(e);
        return IPC_REAL;
    }
    local_limbo_add(e);
    STAT_ADD(frees_deferred, 1);
    if (local_limbo_count() > unclaimed_share() && (locked || lock_registry())) {
        shed_unclaimed();
        if (!locked) registry_unlock(&reg);
    }
    return IPC_DONE;
}

bool ipc_free_passes(uint64_t ptr)
{
    if (!local_has_exports()) return true;
    if (local_maybe_export(ptr)) return false;
    if (local_limbo_pending()) collect_on_untracked_free();
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
    check_fork();
    struct local_export *e = local_export_find(ptr);
    if (e && state == S_ACTIVE) reg_prefetch_free(&reg, e->block);
    if (e && e->in_limbo) {
        LOG_RATE(LOG_WARN, "0x%llx freed twice; the second free fails as the driver's would",
                 (unsigned long long)ptr);
        result = -EINVAL;
    } else if (e && state == S_ACTIVE && free_needs_no_lock(e)) {
        result = free_into_limbo(e, false);
    } else if (e && (state != S_ACTIVE || !lock_registry())) {
        if (state == S_ACTIVE) {
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
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (!own_block(b, e->generation) || b->state != BLOCK_LIVE) {
            local_export_del(e);
        } else {
            drain_recycles();
            /* The precise clock only for a hand-off that may expire now; the
             * limbo stamp is for reports and stats. */
            if (__atomic_load_n(&b->pending, __ATOMIC_RELAXED))
                expire_handoffs(e, b, reg_now_ns(), false);
            result = free_into_limbo(e, true);
        }
        registry_unlock(&reg);
    }
    size_t limbo = local_limbo_count();
    uint64_t since = limbo ? reg_now_ns() - last_collect_ns : 0;
    local_unlock();
    if (limbo && limbo > options_get()->limbo_warn)
        LOG_ONCE(LOG_WARN,
                 "limbo holds %zu blocks (more than IPCSHIM_LIMBO_WARN): importers are "
                 "slow to close them, or hand-offs are never claimed",
                 limbo);
    if (result == IPC_DONE) ipc_collector_kick(); /* a new deadline to wait for */
    if (limbo && (result != IPC_PASS || since > FREE_COLLECT_INTERVAL_NS)) collect(SWEEP_DUE);
    return result;
}

/* ---- collector thread ---- */

/* Time until the next hand-off of our limbo expires, clamped so that an
 * importer that dies without closing is noticed within a poll period. */
static uint64_t next_wait_ns(uint64_t now)
{
    uint64_t wait = local_limbo_count() ? LIMBO_POLL_NS : IDLE_WAIT_NS;
    struct local_export *e;
    DL_FOREACH(local_limbo_head(), e)
    {
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (!b || !__atomic_load_n(&b->pending, __ATOMIC_RELAXED)) continue;
        uint64_t due = __atomic_load_n(&b->last_export_ns, __ATOMIC_RELAXED) + timeout_ns();
        uint64_t left = due > now ? due - now : 0;
        if (left < wait) wait = left;
    }
    return wait < 1000000 ? 1000000 : wait;
}

void ipc_collector_step(void)
{
    local_lock();
    uint32_t me = self;
    bool ok = state == S_ACTIVE && !shut && me != REG_NONE && !forked();
    uint32_t seen = ok ? __atomic_load_n(&reg.holders[me].wake, __ATOMIC_SEQ_CST) : 0;
    uint64_t wait = ok ? next_wait_ns(reg_now_ns()) : 0;
    local_unlock();
    if (!ok) {
        struct timespec s = {0, 100000000};
        nanosleep(&s, NULL);
        return;
    }
    /* `seen` was read before collecting and before waiting: a wake that
     * lands in between changes the word, so FUTEX_WAIT returns at once. */
    collect(SWEEP_DUE);
    if (collector_stopping()) return;
    registry_wait(&reg, me, seen, wait);
    if (!collector_stopping()) collect(local_limbo_pending() ? SWEEP_LIMBO : SWEEP_DUE);
}

void ipc_collector_kick(void)
{
    uint32_t me = __atomic_load_n(&self, __ATOMIC_RELAXED);
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == S_ACTIVE && me != REG_NONE)
        registry_wake(&reg, me);
}

/* ---- stats and shutdown ---- */

void ipc_stats(struct ipcshim_stats *out)
{
    out->exports = __atomic_load_n(&st.exports, __ATOMIC_RELAXED);
    out->opens = __atomic_load_n(&st.opens, __ATOMIC_RELAXED);
    out->closes = __atomic_load_n(&st.closes, __ATOMIC_RELAXED);
    out->frees_deferred = __atomic_load_n(&st.frees_deferred, __ATOMIC_RELAXED);
    out->frees_reclaimed = __atomic_load_n(&st.frees_reclaimed, __ATOMIC_RELAXED);
    out->bytes_reclaimed = __atomic_load_n(&st.bytes_reclaimed, __ATOMIC_RELAXED);
    out->handoffs_expired = __atomic_load_n(&st.handoffs_expired, __ATOMIC_RELAXED);
    out->longest_limbo_ns = __atomic_load_n(&st.longest_limbo_ns, __ATOMIC_RELAXED);
    /* Without the local lock: a program (or its metrics thread) polling
     * its stats must not hold up the collector, which takes that lock. */
    bool done = __atomic_load_n(&shut, __ATOMIC_ACQUIRE);
    out->limbo_blocks = done ? st.limbo_left : local_limbo_count();
    out->limbo_bytes = done ? st.limbo_left_bytes : local_limbo_bytes();
}

void ipc_leak_check(void)
{
    local_lock();
    bool ok = state == S_ACTIVE && !shut && self != REG_NONE && !forked();
    if (ok) leak_check_locked(&reg, self); /* reads only: no registry lock (leak.h) */
    local_unlock();
    if (ok) leak_check_flush();
}

static int leaks_reported;

void ipc_report_leaks(void)
{
    if (local_has_exports()) return; /* ipc_shutdown reports, after its exit wait */
    leak_watch_stop();
    if (__atomic_exchange_n(&leaks_reported, 1, __ATOMIC_ACQ_REL)) return;
    struct leak_report *leaks = NULL;
    local_lock();
    if (state == S_ACTIVE && !shut && self != REG_NONE && !forked() && lock_registry()) {
        leaks = leak_gather(&reg, self);
        registry_unlock(&reg);
    }
    local_unlock();
    leak_print(leaks);
}

#define EXIT_HANDOFF_GRACE_NS 1000000000ull /* at exit, unclaimed hand-offs wait this long */

/* Our exports (freed or not) that a live importer still maps -- or, with
 * handoffs, whose handle is still on its way to one -- : what exit waits
 * for. Dead importers' leases are swept on the way. What is left at the end
 * is told by the leak report (leak.h). Local and registry locks held. */
static size_t held_by_others(bool handoffs)
{
    size_t held = 0;
    struct local_export *e, *tmp;
    HASH_ITER(hh, local_exports(), e, tmp)
    {
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (!own_block(b, e->generation) || (b->state != BLOCK_LIVE && b->state != BLOCK_LIMBO))
            continue;
        if (reg_block_held(&reg, e->block) ||
            (handoffs && __atomic_load_n(&b->pending, __ATOMIC_RELAXED)))
            held++;
    }
    return held;
}

/* At exit: hand-offs nobody claimed are waited for only briefly
 * (EXIT_HANDOFF_GRACE_NS: a consumer at the other end of a pipe opens within
 * it), then dropped, so limbo kept only by them goes. Then wait, up to
 * IPCSHIM_EXIT_WAIT, for every block of ours -- freed or not -- that a live
 * importer still maps: the driver frees an exiting process's memory, and
 * the importer would read whatever comes next. Then report what is left,
 * orphan it, and release our holder slot (importers' too). */
void ipc_shutdown(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return;
    collector_stop();
    leak_watch_stop();
    local_lock();
    bool attached = state == S_ACTIVE && !shut && self != REG_NONE && !forked();
    local_unlock();
    if (attached) {
        uint64_t start = reg_now_ns(), wait_ns = options_get()->exit_wait * 1000000ull;
        uint64_t deadline = start + wait_ns;
        uint64_t grace_end =
            start + (wait_ns < EXIT_HANDOFF_GRACE_NS ? wait_ns : EXIT_HANDOFF_GRACE_NS);
        uint64_t expired0 = __atomic_load_n(&st.handoffs_expired, __ATOMIC_RELAXED);
        for (;;) {
            uint32_t seen = __atomic_load_n(&reg.holders[self].wake, __ATOMIC_SEQ_CST);
            uint64_t now = reg_now_ns();
            /* After the grace, every round (IPCSHIM_HANDOFF=window re-arms a
             * hand-off at a last close). */
            if (now >= grace_end) expire_limbo_older_than(UINT64_MAX);
            collect(SWEEP_MINE);
            local_lock();
            size_t held = state == S_ACTIVE ? held_by_others(now < grace_end) : 0;
            local_unlock();
            now = reg_now_ns();
            if (!held || now >= deadline) break;
            uint64_t wait = deadline - now;
            if (wait > 100000000) wait = 100000000;
            registry_wait(&reg, self, seen, wait);
        }
        uint64_t expired = __atomic_load_n(&st.handoffs_expired, __ATOMIC_RELAXED) - expired0;
        if (expired)
            log_msg(LOG_INFO, "exit: %llu hand-offs nobody claimed were dropped, not waited for",
                    (unsigned long long)expired);
    }
    struct leak_report *leaks = NULL;
    local_lock();
    if (attached && !forked() && state == S_ACTIVE && lock_registry()) {
        drain_recycles();
        if (!__atomic_exchange_n(&leaks_reported, 1, __ATOMIC_ACQ_REL))
            leaks = leak_gather(&reg, self); /* what is still held, for the exit report */
        /* Our leases go, waking their exporters; our blocks are orphaned
         * (or recycled when nothing holds them) and the slot is freed:
         * work for our own records only (our chunks and our list of
         * exports), no table scan. */
        reg_holder_drop_leases(&reg, self);
        reg_holder_release(&reg, self);
        (void)registry_remove_if_unused(&reg); /* the last one out leaves nothing behind */
        registry_unlock(&reg);
    }
    st.limbo_left = local_limbo_count(); /* IPCSHIM_STATS, printed after this, agrees */
    st.limbo_left_bytes = local_limbo_bytes();
    /* Published after limbo_left: ipc_stats reads them without the lock. */
    __atomic_store_n(&shut, true, __ATOMIC_RELEASE);
    local_reset(true);
    local_broadcast(); /* opens waiting on a pending mapping give up */
    local_unlock();
    leak_print(leaks);
}

/* The last word at exit, for every process that attached (import-only ones
 * included: the shim's own exit hook is registered at the first export).
 * Lowest priority: it runs after the library's other destructors; in the
 * dynamic linker's order, after the program's own destructors (the program
 * is finalised before the libraries it did not load). ipc_shutdown is
 * idempotent: an earlier call (the shim's atexit hook) wins. */
void ipc_unload(void)
{
    if (ops && __atomic_load_n(&state, __ATOMIC_ACQUIRE) == S_ACTIVE) ipc_shutdown();
}

bool ipc_limbo_pending(void)
{
    return local_limbo_pending();
}

bool ipc_in_limbo(uint64_t base)
{
    if (!local_limbo_pending()) return false;
    local_lock();
    struct local_export *e = local_export_find(base);
    bool freed = e && e->in_limbo;
    local_unlock();
    return freed;
}
