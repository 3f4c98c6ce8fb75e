/* ipc: the lifecycle of exported blocks (export, open, close, free, collect,
 * shutdown) implementing ipc.h on top of the shared registry (registry.c)
 * and this process's indexes (local.c).
 *
 * Invariants:
 * - A block's reference count is the number of leases on it from live
 *   holders, derived by walking its lease chain; there is no bare counter.
 * - A block is really freed only by its exporter: by the program's own free
 *   when nothing holds it (IPC_REAL), or from limbo through device_ops once
 *   it has no live lease and no unclaimed unexpired hand-off. It is marked
 *   RETIRED under the registry lock before that free, so no open can succeed
 *   on it afterwards, and recycled (generation bumped) after.
 * - Locks: the local mutex, then the registry lock; device_ops is called with
 *   neither held.
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
 * too (registry.c, reg_lease_drop). */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

enum { S_IDLE, S_ACTIVE, S_OFF };

enum {
    TICKET_CLAIMED = 1, /* ipc_open.flags: this open claimed a hand-off */
};

#define SWEEP_INTERVAL_NS 1000000000ull      /* full dead-holder sweep from background paths */
#define FREE_COLLECT_INTERVAL_NS 50000000ull /* collect on untracked frees at most this often */
#define PRESSURE_AGE_NS 1000000000ull
#define IDLE_WAIT_NS 10000000000ull
#define LIMBO_POLL_NS 1000000000ull /* catch importers that die without closing */

static const struct device_ops *ops;
static struct registry reg;
static int state = S_IDLE;
static bool shut;
static uint32_t self = REG_NONE;
static uint64_t self_nonce;
static uint64_t last_sweep_ns, last_collect_ns;
static volatile uint8_t *fork_canary;
static pid_t canary_pid;

static struct {
    uint64_t exports, opens, closes, frees_deferred, frees_reclaimed, bytes_reclaimed;
    uint64_t handoffs_expired, longest_limbo_ns;
    uint64_t limbo_left, limbo_left_bytes; /* limbo when ipc_shutdown let go of it */
} st;

#define STAT_ADD(field, n) __atomic_fetch_add(&st.field, (n), __ATOMIC_RELAXED)

static uint64_t timeout_ns(void)
{
    return options_get()->handoff_timeout * 1000000ull;
}

/* ---- fork ---- */

static void after_fork(bool consistent)
{
    local_reset(consistent);
    collector_after_fork();
    leak_after_fork();
    memset(&st, 0, sizeof st);
    self = REG_NONE;
    last_sweep_ns = last_collect_ns = 0;
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

static void atfork_prepare(void)
{
    local_lock();
}
static void atfork_parent(void)
{
    local_unlock();
}
static void atfork_child(void)
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
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
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

/* Lease drops (a last close, an aborted open) that could not get the
 * registry lock: a lock-free stack, retried under the lock by later calls. */
struct deferred_drop {
    uint32_t lease, block;
    uint64_t generation;
    bool give_back; /* an aborted open that claimed a hand-off */
    struct deferred_drop *next;
};
static struct deferred_drop *drops;

static void defer_drop(uint32_t lease, uint32_t block, uint64_t generation, bool give_back)
{
    struct deferred_drop *d = malloc(sizeof *d);
    if (!d) return; /* the lease stays until this process exits (a leak) */
    *d = (struct deferred_drop){lease, block, generation, give_back, NULL};
    d->next = __atomic_load_n(&drops, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&drops, &d->next, d, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
    }
}

static struct reg_lease *ticket_lease(uint32_t lease, uint32_t block, uint64_t generation);

/* One lease drop: a count down, or the lease itself. Registry lock held.
 * Returns the exporter to wake, or REG_NONE. */
static uint32_t drop_one(uint32_t lease, uint32_t block, uint64_t generation, bool give_back)
{
    struct reg_lease *l = ticket_lease(lease, block, generation);
    if (!l) return REG_NONE;
    if (l->count > 1) {
        l->count--;
        uint32_t closing = LEASE_CLOSING;
        __atomic_compare_exchange_n(&l->intent, &closing, LEASE_OPEN, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
        return REG_NONE;
    }
    struct reg_block *b = reg_block_at(&reg, block);
    if (give_back && b && b->generation == generation &&
        (b->state == BLOCK_LIVE || b->state == BLOCK_LIMBO))
        b->pending++; /* give the hand-off back */
    return reg_lease_drop(&reg, lease);
}

/* Retries the deferred lease drops. Registry lock held. */
static void retry_drops(void)
{
    struct deferred_drop *d = __atomic_exchange_n(&drops, NULL, __ATOMIC_ACQUIRE);
    while (d) {
        struct deferred_drop *next = d->next;
        uint32_t wake = drop_one(d->lease, d->block, d->generation, d->give_back);
        if (wake != REG_NONE) registry_wake(&reg, wake);
        free(d);
        d = next;
    }
}

static uint32_t cap32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static uint64_t new_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof n, GRND_NONBLOCK) != sizeof n)
        n = reg_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&n;
    return n | 1; /* never 0: a zeroed record has nonce 0 */
}

/* Attach lazily and take a holder slot. 0, -ENODEV (not tracking) or
 * -ENOSPC (no holder slot). Local lock held. */
static int ready_locked(void)
{
    const struct options *opt = options_get();
    if (opt->disable || shut || !ops) return -ENODEV;
    check_fork();
    if (state == S_OFF) return -ENODEV;
    if (state == S_IDLE) {
        struct reg_caps caps = {cap32(opt->max_holders), cap32(opt->max_blocks),
                                cap32(opt->max_leases)};
        if (registry_open(&reg, opt->domain, &caps) != 0) {
            turn_off();
            return -ENODEV;
        }
        __atomic_store_n(&state, S_ACTIVE, __ATOMIC_RELEASE);
    }
    if (self == REG_NONE) {
        if (!lock_registry()) return -ENODEV;
        self_nonce = new_nonce();
        self = reg_holder_attach(&reg, self_nonce);
        registry_unlock(&reg);
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
    if (!b->pending || (!force && now < b->last_export_ns + timeout_ns())) return;
    STAT_ADD(handoffs_expired, b->pending);
    leak_note_expired(b, e);
    b->expired += b->pending;
    LOG_ONCE(LOG_INFO,
             "a hand-off expired unclaimed (block of %llu bytes); "
             "further expiries are counted in stats only",
             (unsigned long long)b->size);
    b->pending = 0;
}

/* A record of ours that is stale or unwanted: orphan it, or recycle it if
 * nothing holds it. Registry lock held. */
static void let_go(uint32_t idx)
{
    struct reg_block *b = reg_block_at(&reg, idx);
    if (!b) return;
    if (b->lease_head == REG_NONE)
        reg_block_recycle(&reg, idx);
    else
        b->state = BLOCK_ORPHANED, b->orphaned_ns = reg_now_ns();
}

/* ---- export ---- */

static int export_try(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                      uint64_t ctx, bool retry, uint32_t cs);
static int collect(bool full);
static size_t shed_unclaimed_n(bool all);

int ipc_export(const struct ipc_handle *h, uint64_t base, uint64_t size, int device, uint64_t ctx)
{
    return export_try(h, base, size, device, ctx, true, callsite_capture());
}

/* ipc_export, with one retry after shedding this process's own unclaimed
 * hand-offs when the table is full; cs: the export's call site. */
static int export_try(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                      uint64_t ctx, bool retry, uint32_t cs)
{
    local_lock();
    int rc = ready_locked();
    if (rc) {
        local_unlock();
        return rc == -ENOSPC ? -ENOSPC : -ENODEV;
    }
    uint64_t now = reg_now_ns();
    struct local_export *e = local_export_find(base);
    if (e) {
        bool again = false;
        if (!lock_registry()) goto off;
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (!e->in_limbo && !memcmp(e->handle.bytes, h->bytes, IPC_HANDLE_BYTES) &&
            own_block(b, e->generation) && b->state == BLOCK_LIVE) {
            /* The same allocation exported again: one more hand-off. */
            if (b->pending++ == 0) b->first_export_ns = now;
            b->last_export_ns = now;
            again = true;
            leak_note_reexport(e);
        } else if (own_block(b, e->generation)) {
            let_go(e->block); /* a new allocation at a base we never saw freed */
        }
        registry_unlock(&reg);
        if (again) {
            STAT_ADD(exports, 1);
            local_unlock();
            return 0;
        }
        local_export_del(e);
    }
    struct local_export *ne = calloc(1, sizeof *ne);
    if (!ne) {
        local_unlock();
        LOG_ONCE(LOG_WARN, "out of memory: an export is not tracked");
        return -ENOMEM;
    }
    if (!lock_registry()) {
        free(ne);
        goto off;
    }
    uint32_t idx = reg_block_create(&reg, h, base, size, device, self, now);
    uint64_t gen = idx != REG_NONE ? reg.blocks[idx].generation : 0;
    size_t shed = idx == REG_NONE && retry ? shed_unclaimed_n(true) : 0;
    registry_unlock(&reg);
    if (idx == REG_NONE) {
        free(ne);
        local_unlock();
        if (shed && collect(true) > 0) return export_try(h, base, size, device, ctx, false, cs);
        LOG_ONCE(LOG_WARN,
                 "registry %s is full (IPCSHIM_MAX_BLOCKS=%u): new exports are not "
                 "tracked",
                 reg.name, reg.max_blocks);
        return -ENOSPC;
    }
    ne->base = base;
    ne->size = size;
    ne->ctx = ctx;
    ne->device = device;
    ne->block = idx;
    ne->generation = gen;
    ne->handle = *h;
    leak_note_export(ne, now, cs);
    if (local_export_add(ne) != 0) {
        free(ne);
        if (lock_registry()) {
            reg_block_recycle(&reg, idx);
            registry_unlock(&reg);
        }
        local_unlock();
        LOG_ONCE(LOG_WARN, "out of memory: an export is not tracked");
        return -ENOMEM;
    }
    STAT_ADD(exports, 1);
    if (options_get()->collector) collector_start();
    local_unlock();
    leak_watch_start();
    return 0;
off:
    local_unlock();
    return -ENODEV;
}

/* ---- open ---- */

/* For a cached re-open: is the block this process mapped still its
 * exporter's, and the exporter alive? Read without the registry lock (one
 * record, fixed-width fields; a torn answer only refuses or allows one
 * re-open of a mapping the process holds anyway). */
static bool block_still_exported(uint32_t block, uint64_t generation)
{
    struct reg_block *b = reg_block_at(&reg, block);
    if (!b) return true; /* not ours to judge: keep CUDA's answer (success) */
    if (__atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) != generation) return false;
    uint32_t state = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
    if (state == BLOCK_ORPHANED) return false;
    return reg_holder_alive_quick(&reg, __atomic_load_n(&b->exporter, __ATOMIC_ACQUIRE));
}

int ipc_open_begin(const struct ipc_handle *h, uint64_t ctx, struct ipc_open *t, uint64_t *ptr)
{
    if (options_get()->disable) return IPC_PASS;
    uint32_t cs = callsite_capture();
    local_lock();
    if (ready_locked() != 0) {
        local_unlock();
        return IPC_PASS;
    }
    struct local_map *m;
    while ((m = local_map_find(h, ctx)) && m->pending) {
        local_wait();
        if (shut) { /* ipc_shutdown ran meanwhile and emptied the tables */
            local_unlock();
            return IPC_PASS;
        }
    }
    if (m) {
        /* CUDA refuses to open a dead exporter's handle again, so a cached
         * re-open must too (the mapping itself stays until it is closed). */
        if (!block_still_exported(m->block, m->generation)) {
            local_unlock();
            return -EOWNERDEAD;
        }
        m->count++;
        leak_note_reopen(m);
        *ptr = m->ptr;
        STAT_ADD(opens, 1);
        local_unlock();
        return IPC_DONE;
    }
    /* Publish a pending mapping first so that a concurrent open of the same
     * handle in this context waits for ours instead of opening it twice. */
    struct local_map *nm = calloc(1, sizeof *nm);
    if (!nm) {
        local_unlock();
        return IPC_PASS;
    }
    nm->key.handle = *h;
    nm->key.ctx = ctx;
    nm->pending = true;
    if (local_map_add(nm) != 0) {
        free(nm);
        local_unlock();
        return IPC_PASS;
    }
    int result = IPC_PASS;
    if (!lock_registry()) goto out;
    uint32_t bi = reg_block_find(&reg, h);
    struct reg_block *b = reg_block_at(&reg, bi);
    if (!b) goto unlock;
    result = b->state == BLOCK_ORPHANED ? -EOWNERDEAD : -ENOENT;
    if (b->state != BLOCK_LIVE && b->state != BLOCK_LIMBO) goto unlock;
    if (b->exporter == self && b->exporter_nonce == self_nonce) {
        struct local_export *e = local_export_find(b->base);
        result = IPC_PASS;
        if (e && e->block == bi && e->generation == b->generation) {
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
    if (!ex || ex->nonce != b->exporter_nonce) {
        let_go(bi); /* its exporter's slot moved on: a stale record */
        goto unlock;
    }
    /* One syscall on the open path: an unheld lock byte means the exporter
     * is dead for sure. A reused pid behind a held byte (a fork child that
     * kept the descriptor) is left to the full rule in the sweeps; an open
     * of freed memory then fails in the driver and the lease is dropped. */
    if (!reg_holder_alive_quick(&reg, b->exporter)) {
        reg_holder_sweep(&reg, b->exporter);
        goto unlock;
    }
    uint32_t flags = 0;
    uint32_t li = reg_lease_find(&reg, bi, self);
    if (li != REG_NONE) {
        reg.leases[li].count++;
    } else {
        li = reg_lease_create(&reg, bi, self);
        if (li == REG_NONE) {
            LOG_ONCE(LOG_WARN,
                     "registry %s has no free lease (IPCSHIM_MAX_LEASES=%u): opens "
                     "are not tracked",
                     reg.name, reg.max_leases);
            result = IPC_PASS;
            goto unlock;
        }
        if (b->pending) {
            b->pending--;
            b->claimed++;
            flags |= TICKET_CLAIMED;
        }
    }
    memset(t, 0, sizeof *t);
    t->block = bi;
    t->lease = li;
    t->generation = b->generation;
    t->ctx = ctx;
    t->handle = *h;
    t->flags = flags;
    nm->block = bi;
    nm->lease = li;
    nm->generation = b->generation;
    leak_note_open(nm, &reg, b, cs);
    result = IPC_REAL;
unlock:
    registry_unlock(&reg);
out:
    if (result != IPC_REAL) {
        local_map_del(nm);
        local_broadcast();
    }
    local_unlock();
    return result;
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

void ipc_open_commit(struct ipc_open *t, uint64_t ptr)
{
    local_lock();
    struct local_map *m = local_map_find(&t->handle, t->ctx);
    if (m && m->pending && m->block == t->block && m->generation == t->generation) {
        m->pending = false;
        m->count = 1;
        if (local_map_set_ptr(m, ptr) != 0)
            LOG_ONCE(LOG_WARN, "out of memory: an opened mapping cannot be closed cleanly");
        /* Our own lease: nobody else writes its intent while we live, so this
         * needs no registry lock (one lock round trip per open). */
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
    struct local_map *m = local_map_find(&t->handle, t->ctx);
    if (m && m->pending && m->block == t->block && m->generation == t->generation) {
        local_map_del(m);
        local_broadcast();
    }
    if (state == S_ACTIVE && self != REG_NONE) {
        if (lock_registry()) {
            wake = drop_one(t->lease, t->block, t->generation, t->flags & TICKET_CLAIMED);
            retry_drops();
            registry_unlock(&reg);
        } else if (state == S_ACTIVE) {
            defer_drop(t->lease, t->block, t->generation, t->flags & TICKET_CLAIMED);
        }
    }
    local_unlock();
    if (wake != REG_NONE) registry_wake(&reg, wake);
}

/* ---- close ---- */

int ipc_close_begin(uint64_t ptr, struct ipc_close *t)
{
    if (!ipc_active()) return IPC_PASS;
    int result = IPC_PASS;
    local_lock();
    check_fork();
    struct local_map *m = local_map_find_ptr(ptr);
    if (m && m->pending) {
        m = NULL; /* being opened or closed by another thread: not ours to count */
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
    } else {
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
    local_unlock();
    if (!ipc_active()) return;
    if (!lock_registry()) {
        if (ipc_active()) defer_drop(t->lease, t->block, t->generation, false);
        STAT_ADD(closes, 1);
        return;
    }
    wake = drop_one(t->lease, t->block, t->generation, false);
    retry_drops();
    registry_unlock(&reg);
    if (wake != REG_NONE) registry_wake(&reg, wake);
    STAT_ADD(closes, 1);
}

/* ---- collect ---- */

struct victim {
    uint64_t base, size, ctx, generation, limbo_since;
    uint32_t block;
    int device;
};

/* Sweeps the dead holders among the block's leases. alive (max_holders
 * bytes, or NULL) remembers holders found alive during one collect, so a
 * long limbo costs one liveness check per importer, not per lease.
 * Registry lock held. */
static void sweep_lease_holders(uint32_t bi, uint8_t *alive)
{
    struct reg_block *b = reg_block_at(&reg, bi);
    /* Each sweep edits the chain, so start over after one; bounded. */
    for (uint32_t rounds = 0; b && rounds < reg.max_holders; rounds++) {
        bool swept = false;
        uint32_t li = b->lease_head;
        for (uint32_t steps = 0; li != REG_NONE && steps < reg.max_leases; steps++) {
            struct reg_lease *l = reg_lease_at(&reg, li);
            if (!l) break;
            bool known =
                l->holder == self || (alive && l->holder < reg.max_holders && alive[l->holder]);
            if (!known && reg_holder_alive(&reg, l->holder)) {
                if (alive && l->holder < reg.max_holders) alive[l->holder] = 1;
                known = true;
            }
            if (!known) {
                if (reg_holder_at(&reg, l->holder) && reg.holders[l->holder].state == HOLDER_ACTIVE)
                    reg_holder_sweep(&reg, l->holder);
                else
                    reg_lease_drop(&reg, li); /* a lease of a free slot */
                swept = true;
                break;
            }
            li = l->next;
        }
        if (!swept) return;
    }
}

/* Frees what can be freed from this process's limbo. full: sweep every dead
 * holder now, not at most once a second. Returns the number freed. */
static int collect(bool full)
{
    local_lock();
    check_fork();
    if (state != S_ACTIVE || shut || self == REG_NONE) {
        local_unlock();
        return 0;
    }
    uint64_t now = reg_now_ns();
    last_collect_ns = now;
    size_t cap = local_limbo_count();
    bool sweep = full || now - last_sweep_ns > SWEEP_INTERVAL_NS;
    if (!cap && !sweep) {
        local_unlock();
        return 0;
    }
    struct victim *v = cap ? calloc(cap, sizeof *v) : NULL;
    uint8_t *alive = cap ? calloc(reg.max_holders, 1) : NULL;
    size_t n = 0;
    if ((cap && !v) || !lock_registry()) {
        free(v);
        free(alive);
        local_unlock();
        return 0;
    }
    retry_drops();
    if (sweep) {
        reg_sweep_dead(&reg, self);
        last_sweep_ns = now;
    }
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
        sweep_lease_holders(e->block, alive);
        if (b->lease_head != REG_NONE || b->pending || n == cap) continue;
        b->state = BLOCK_RETIRED; /* from here on no open can succeed */
        v[n++] = (struct victim){e->base,           e->size,  e->ctx,   e->generation,
                                 b->limbo_since_ns, e->block, e->device};
        local_export_del(e);
    }
    registry_unlock(&reg);
    local_unlock();
    free(alive);
    if (!n) {
        free(v);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = ops->free_block(v[i].base, v[i].device, v[i].ctx);
        if (rc)
            LOG_RATE(LOG_WARN, "deferred free of 0x%llx failed (%d)", (unsigned long long)v[i].base,
                     rc);
    }
    now = reg_now_ns();
    if (lock_registry()) {
        for (size_t i = 0; i < n; i++) {
            struct reg_block *b = reg_block_at(&reg, v[i].block);
            if (b && b->generation == v[i].generation && b->state == BLOCK_RETIRED)
                reg_block_recycle(&reg, v[i].block);
        }
        registry_unlock(&reg);
    }
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
    free(v);
    return (int)n;
}

int ipc_collect(void)
{
    if (!ipc_active()) return 0;
    return collect(true);
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
    uint64_t now = reg_now_ns();
    expire_limbo_older_than(now > PRESSURE_AGE_NS ? now - PRESSURE_AGE_NS : 0);
    int n = collect(true);
    if (n > 0) return n;
    expire_limbo_older_than(UINT64_MAX);
    return collect(true);
}

/* ---- fair share ---- */

/* A process's share of the block table for blocks that only unclaimed
 * hand-offs keep (freed by the program, opened by nobody yet). */
static size_t unclaimed_share(void)
{
    size_t share = reg.max_blocks / 8;
    return share < 16 ? 16 : share;
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
        if (!own_block(b, e->generation) || b->state != BLOCK_LIMBO || !b->pending ||
            b->lease_head != REG_NONE)
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

int ipc_free_begin(uint64_t ptr)
{
    /* The hot path: a process that never exported, or a pointer that was
     * never an export base while nothing waits in limbo, passes without a
     * lock (two or three relaxed loads). */
    if (!local_has_exports()) return IPC_PASS;
    if (!local_maybe_export(ptr) && !local_limbo_pending()) return IPC_PASS;
    int result = IPC_PASS;
    local_lock();
    check_fork();
    struct local_export *e = local_export_find(ptr);
    if (e && e->in_limbo) {
        LOG_RATE(LOG_WARN, "0x%llx freed twice; the second free fails as the driver's would",
                 (unsigned long long)ptr);
        result = -EINVAL;
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
        uint64_t now = reg_now_ns();
        if (!own_block(b, e->generation) || b->state != BLOCK_LIVE) {
            local_export_del(e);
        } else {
            expire_handoffs(e, b, now, false);
            if (b->lease_head != REG_NONE || b->pending) {
                b->limbo_since_ns = now;
                b->state = BLOCK_LIMBO;
                local_limbo_add(e);
                STAT_ADD(frees_deferred, 1);
                shed_unclaimed();
                result = IPC_DONE;
            } else {
                b->state = BLOCK_RETIRED;
                if (local_retiring_add(ptr, e->block, e->generation) != 0)
                    reg_block_recycle(&reg, e->block); /* out of memory: recycle early */
                local_export_del(e);
                result = IPC_REAL;
            }
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
    if (limbo && (result != IPC_PASS || since > FREE_COLLECT_INTERVAL_NS)) collect(false);
    return result;
}

void ipc_free_finish(uint64_t ptr)
{
    uint32_t bi;
    uint64_t gen;
    if (!local_has_exports()) return;
    local_lock();
    bool found = local_retiring_take(ptr, &bi, &gen);
    if (found && ipc_active() && lock_registry()) {
        struct reg_block *b = reg_block_at(&reg, bi);
        if (own_block(b, gen) && b->state == BLOCK_RETIRED) reg_block_recycle(&reg, bi);
        registry_unlock(&reg);
    }
    local_unlock();
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
    collect(false);
    if (collector_stopping()) return;
    registry_wait(&reg, me, seen, wait);
    if (!collector_stopping()) collect(false);
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
    local_lock();
    out->limbo_blocks = shut ? st.limbo_left : local_limbo_count();
    out->limbo_bytes = shut ? st.limbo_left_bytes : local_limbo_bytes();
    local_unlock();
}

void ipc_leak_check(void)
{
    local_lock();
    bool ok = state == S_ACTIVE && !shut && self != REG_NONE && !forked() && lock_registry();
    if (ok) {
        leak_check_locked(&reg, self);
        registry_unlock(&reg);
    }
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
    uint8_t *alive = calloc(reg.max_holders, 1);
    struct local_export *e, *tmp;
    HASH_ITER(hh, local_exports(), e, tmp)
    {
        struct reg_block *b = reg_block_at(&reg, e->block);
        if (!own_block(b, e->generation) || (b->state != BLOCK_LIVE && b->state != BLOCK_LIMBO))
            continue;
        sweep_lease_holders(e->block, alive);
        if (b->lease_head == REG_NONE && !(handoffs && b->pending)) continue;
        held++;
    }
    free(alive);
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
            collect(true);
            size_t held = 0;
            local_lock();
            if (state == S_ACTIVE && lock_registry()) {
                held = held_by_others(now < grace_end);
                registry_unlock(&reg);
            } else if (state == S_ACTIVE) {
                held = 1; /* the lock is out of reach: keep waiting, bounded */
            }
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
        retry_drops();
        held_by_others(false); /* sweeps dead importers' leases: the report names live ones */
        if (!__atomic_exchange_n(&leaks_reported, 1, __ATOMIC_ACQ_REL))
            leaks = leak_gather(&reg, self); /* what is still held, for the exit report */
        /* Our leases go, waking their exporters; our blocks are orphaned
         * (or recycled when nothing holds them); the slot is freed. */
        reg_holder_sweep(&reg, self);
        reg_holder_release(&reg, self);
        registry_unlock(&reg);
    }
    st.limbo_left = local_limbo_count(); /* IPCSHIM_STATS, printed after this, agrees */
    st.limbo_left_bytes = local_limbo_bytes();
    shut = true;
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
__attribute__((destructor(101))) static void ipc_at_unload(void)
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
