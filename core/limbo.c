/* limbo: the deferred frees of this process's exports, the sweeps that
 * find dead holders, the fair share of unclaimed hand-offs, the collector
 * thread's step and the exit wait (see limbo.h), and ipc.h's collect and
 * limbo queries. The per-process state it works on is ipc_proc
 * (process.h). */
#include "limbo.h"
#include "collector.h"
#include "host.h"
#include "leak.h"
#include "ipc_handle.h" /* IPC_LEDGER_ADDRESS */
#include "log.h"
#include "options.h"
#include "process.h"

#include <stdlib.h>
#include <time.h>

#define SWEEP_INTERVAL_NS 1000000000ull /* full dead-holder sweep from background paths */
#define PRESSURE_AGE_NS 1000000000ull
#define IDLE_WAIT_NS 10000000000ull

/* ---- recycling and hand-off expiry ---- */

void limbo_recycle_later(uint32_t block, uint64_t generation)
{
    if (ipc_proc.nrecycles == ipc_proc.recycles_cap) {
        size_t cap = ipc_proc.recycles_cap ? ipc_proc.recycles_cap * 2 : 16;
        struct proc_recycle *p = realloc(ipc_proc.recycles, cap * sizeof *p);
        if (!p) return; /* the record stays RETIRED until its exporter's exit: a leak of a slot */
        ipc_proc.recycles = p, ipc_proc.recycles_cap = cap;
    }
    ipc_proc.recycles[ipc_proc.nrecycles++] = (struct proc_recycle){block, generation};
}

void limbo_drain_recycles(void)
{
    for (size_t i = 0; i < ipc_proc.nrecycles; i++) {
        struct reg_block *b = reg_block_at(&ipc_proc.reg, ipc_proc.recycles[i].block);
        if (process_owns(b, ipc_proc.recycles[i].generation) && b->state == BLOCK_RETIRED)
            reg_block_recycle(&ipc_proc.reg, ipc_proc.recycles[i].block);
    }
    ipc_proc.nrecycles = 0;
}

void limbo_expire_handoffs(const struct local_export *e, struct reg_block *b, uint64_t now,
                           bool force)
{
    if (!__atomic_load_n(&b->pending, __ATOMIC_RELAXED) ||
        (!force && now < b->last_export_ns + process_timeout_ns()))
        return;
    /* Importers claim hand-offs without the lock: take them all at once. */
    /* pairs with claim_handoff's CAS and reg_block_retire's load of pending */
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

/* Catch importers that die without closing: while limbo waits, the
 * collector sweeps the holders of its limbo blocks this often (SWEEP_LIMBO),
 * so a killed importer's memory comes back within about this long. */
#define LIMBO_POLL_NS 200000000ull
#define EXIT_HANDOFF_GRACE_NS 1000000000ull /* at exit, unclaimed hand-offs wait this long */

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
    if (!process_owns(reg_block_at(&ipc_proc.reg, e->block), e->generation)) return;
    for (uint32_t h = reg_block_next_holder(&ipc_proc.reg, e->block, 0); h != REG_NONE;
         h = reg_block_next_holder(&ipc_proc.reg, e->block, h + 1))
        if (h != ipc_proc.self) cand[h] = 1, *any = true;
}

/* Sweeps the dead among the holders of our blocks (limbo_only: of our
 * blocks in limbo, a walk of the limbo list, not of every export).
 * Returns how many were swept. */
static int sweep_holders_of_ours(bool limbo_only)
{
    uint8_t *cand = calloc(ipc_proc.reg.max_holders, 1);
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
    int swept = any ? reg_sweep_among(&ipc_proc.reg, cand) : 0;
    free(cand);
    return swept;
}

static int free_limbo(void);

/* Frees what can be freed from this process's limbo and sweeps the dead as
 * `how` says (the sweep's liveness checks run before any lock is taken:
 * reg_sweep_dead). A due sweep comes after the frees, which it would
 * otherwise delay by a syscall or two per holder, and is followed by
 * another round only when it released someone. Returns the number freed. */
int limbo_collect(enum limbo_sweep how)
{
    uint64_t now = reg_now_ns();
    uint32_t me = __atomic_load_n(&ipc_proc.self, __ATOMIC_RELAXED);
    bool can = process_active() && me != REG_NONE && !process_forked();
    if (can && how == LIMBO_SWEEP_MINE) sweep_holders_of_ours(false);
    if (can && how == LIMBO_SWEEP_ALL) reg_sweep_dead(&ipc_proc.reg, me);
    int n = free_limbo();
    /* At most once a poll period: a close's wake frees at once, and its
     * sweep would only cost the syscalls of the other holders' checks. */
    if (can && how == LIMBO_SWEEP_LIMBO && local_limbo_pending() &&
        now - __atomic_load_n(&ipc_proc.last_limbo_sweep_ns, __ATOMIC_RELAXED) >=
            LIMBO_POLL_NS / 2) {
        __atomic_store_n(&ipc_proc.last_limbo_sweep_ns, now, __ATOMIC_RELAXED);
        if (sweep_holders_of_ours(true) > 0) n += free_limbo();
    }
    if (can && (how == LIMBO_SWEEP_DUE || how == LIMBO_SWEEP_LIMBO) &&
        now - __atomic_load_n(&ipc_proc.last_sweep_ns, __ATOMIC_RELAXED) > SWEEP_INTERVAL_NS) {
        __atomic_store_n(&ipc_proc.last_sweep_ns, now, __ATOMIC_RELAXED);
        if (reg_sweep_dead(&ipc_proc.reg, me) > 0) n += free_limbo();
    }
    return n;
}

/* Takes the victims of a collect: our limbo blocks that nothing holds or
 * awaits, marked RETIRED (from here on no open can succeed) and dropped
 * from the local tables; at most cap, into v. Local and registry locks
 * held. Returns how many. */
static size_t take_victims(struct victim *v, size_t cap, uint64_t now)
{
    size_t n = 0;
    struct local_export *e, *tmp;
    DL_FOREACH_SAFE(local_limbo_head(), e, tmp)
    {
        struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
        if (e->lock_deferred && process_owns(b, e->generation) && b->state == BLOCK_LIVE) {
            /* Freed while the lock was out of reach: into limbo now. */
            e->lock_deferred = false;
            b->limbo_since_ns = now;
            b->state = BLOCK_LIMBO;
        }
        if (!process_owns(b, e->generation) || b->state != BLOCK_LIMBO) {
            local_export_del(e); /* no longer ours to free */
            continue;
        }
        limbo_expire_handoffs(e, b, now, false);
        /* Held or awaited: not worth a RETIRING round (which importers
         * opening it would wait out). */
        if (n == cap || __atomic_load_n(&b->pending, __ATOMIC_RELAXED) ||
            reg_block_held(&ipc_proc.reg, e->block) || !reg_block_retire(&ipc_proc.reg, e->block))
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
    return n;
}

/* The real frees of the n victims, through the host, then their records
 * queued for recycling and the counters. No lock held. */
static void free_victims(const struct victim *v, size_t n)
{
    host_free_block_fn *free_block = host_free_block();
    for (size_t i = 0; i < n; i++) {
        int rc = free_block(v[i].base, v[i].device, v[i].ctx, v[i].identity);
        if (rc)
            LOG_RATE(LOG_WARN, "deferred free of 0x%llx failed (%d)", (unsigned long long)v[i].base,
                     rc);
    }
    uint64_t now = reg_now_ns();
    local_lock();
    if (!ipc_proc.shut && !process_forked())
        for (size_t i = 0; i < n; i++)
            limbo_recycle_later(v[i].block, v[i].generation);
    local_unlock();
    for (size_t i = 0; i < n; i++) {
        uint64_t spent = now - v[i].limbo_since;
        log_msg(LOG_DEBUG, "reclaimed 0x%llx (%llu bytes, block %u) after %.3f ms in limbo",
                (unsigned long long)v[i].base, (unsigned long long)v[i].size, v[i].block,
                (double)spent / 1e6);
        STAT_ADD(frees_reclaimed, 1);
        STAT_ADD(bytes_reclaimed, v[i].size);
        uint64_t longest = __atomic_load_n(&ipc_proc.st.longest_limbo_ns, __ATOMIC_RELAXED);
        while (spent > longest &&
               !__atomic_compare_exchange_n(&ipc_proc.st.longest_limbo_ns, &longest, spent, false,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
}

/* Frees what can be freed from this process's limbo now. Returns the
 * number freed. */
static int free_limbo(void)
{
    uint64_t now = reg_now_ns();
    local_lock();
    process_check_fork();
    if (ipc_proc.state != PROC_ACTIVE || ipc_proc.shut || ipc_proc.self == REG_NONE) {
        local_unlock();
        return 0;
    }
    ipc_proc.last_collect_ns = now;
    size_t cap = local_limbo_count();
    if (!cap && !ipc_proc.nrecycles) {
        local_unlock();
        return 0;
    }
    struct victim *v = cap ? calloc(cap, sizeof *v) : NULL;
    if ((cap && !v) || !process_lock_registry()) {
        free(v);
        local_unlock();
        return 0;
    }
    limbo_drain_recycles();
    size_t n = take_victims(v, cap, now);
    /* Counted before the locks go: whoever collects next and finds
     * nothing knows frees are on their way (ipc_collect_pressure).
     * pairs with thread_wait_stopped's load in ipc_collect_pressure */
    if (n) __atomic_add_fetch(&ipc_proc.frees_in_flight, 1, __ATOMIC_SEQ_CST);
    registry_unlock(&ipc_proc.reg);
    local_unlock();
    if (n) {
        free_victims(v, n);
        /* pairs with the same load: frees_reclaimed is counted by now */
        __atomic_sub_fetch(&ipc_proc.frees_in_flight, 1, __ATOMIC_SEQ_CST);
    }
    free(v);
    return (int)n;
}

/* Expires pending hand-offs of our limbo blocks exported before `before`. */
void limbo_expire_older_than(uint64_t before)
{
    local_lock();
    if (process_active() && ipc_proc.self != REG_NONE && !process_forked() &&
        process_lock_registry()) {
        struct local_export *e;
        DL_FOREACH(local_limbo_head(), e)
        {
            struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
            if (process_owns(b, e->generation) && b->state == BLOCK_LIMBO &&
                b->last_export_ns <= before)
                limbo_expire_handoffs(e, b, 0, true);
        }
        registry_unlock(&ipc_proc.reg);
    }
    local_unlock();
}

int limbo_collect_pressure(void)
{
    uint64_t before = __atomic_load_n(&ipc_proc.st.frees_reclaimed, __ATOMIC_RELAXED);
    uint64_t now = reg_now_ns();
    limbo_expire_older_than(now > PRESSURE_AGE_NS ? now - PRESSURE_AGE_NS : 0);
    int n = limbo_collect(LIMBO_SWEEP_ALL);
    if (n <= 0) {
        limbo_expire_older_than(UINT64_MAX);
        n = limbo_collect(LIMBO_SWEEP_ALL);
    }
    /* Trap: the collector thread may have taken what we came for (a
     * hand-off we just expired) and be freeing it right now; our collect
     * then finds nothing. Its frees count as ours once they are done. */
    thread_wait_stopped(&ipc_proc.frees_in_flight, 1000);
    uint64_t others = __atomic_load_n(&ipc_proc.st.frees_reclaimed, __ATOMIC_RELAXED) - before;
    return n > 0 ? n : (int)(others > INT32_MAX ? INT32_MAX : others);
}

/* ---- fair share ---- */

/* A process's share of the block table for blocks that only unclaimed
 * hand-offs keep (freed by the program, opened by nobody yet). */
static size_t unclaimed_share(void)
{
    size_t share = ipc_proc.reg.limit_blocks / 8;
    return share < 16 ? 16 : share > 2048 ? 2048 : share;
}

/* Fair share: when this process's limbo outgrows its share, the oldest of
 * its blocks that only unclaimed hand-offs keep lose them now (down to half
 * the share), so that a program exporting handles nobody opens cannot fill
 * the table and leave every other program unprotected. The next collect
 * frees them. Blocks somebody opened (leases) are never touched. all: every
 * such block (the table is full). Local and registry locks held. */
size_t limbo_shed_unclaimed(bool all)
{
    size_t n = local_limbo_count(), share = unclaimed_share(), shed = 0;
    if (!all && n <= share) return 0;
    struct local_export *e;
    DL_FOREACH(local_limbo_head(), e)
    {
        if (!all && n - shed <= share / 2) break;
        struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
        if (!process_owns(b, e->generation) || b->state != BLOCK_LIMBO ||
            !__atomic_load_n(&b->pending, __ATOMIC_RELAXED) ||
            reg_block_held(&ipc_proc.reg, e->block))
            continue;
        limbo_expire_handoffs(e, b, 0, true);
        shed++;
    }
    if (shed)
        LOG_RATE(LOG_WARN,
                 "this process holds more than its share (%zu) of registry %s with hand-offs "
                 "nobody claimed; %zu expired early",
                 share, ipc_proc.reg.name, shed);
    return shed;
}

static void shed_unclaimed(void)
{
    (void)limbo_shed_unclaimed(false);
}

/* ---- free ---- */

/* An untracked free while limbo waits: every 1024th free of a thread looks
 * whether a collect is due (for processes without the collector thread);
 * the others cost a thread-local increment. */
void limbo_collect_on_untracked_free(void)
{
    static __thread unsigned frees
        __attribute__((tls_model("initial-exec"))); /* no __tls_get_addr */
    limbo_collect_if_woken();
    if ((++frees & 1023) != 0) return;
    uint64_t last = __atomic_load_n(&ipc_proc.last_collect_ns, __ATOMIC_RELAXED);
    if (reg_now_ns() - last > LIMBO_FREE_COLLECT_INTERVAL_NS) limbo_collect(LIMBO_SWEEP_DUE);
}

/* Claims wake value `wake` for the caller's collect: true for exactly one
 * of the threads that saw it (a program thread in limbo_collect_if_woken,
 * or the collector), false when it was claimed already. Its collect starts
 * after the claim, so after every lease end the value counts; a later end
 * changes the value and is claimed anew. */
static bool wake_claim(uint32_t wake)
{
    uint32_t seen = __atomic_load_n(&ipc_proc.wake_seen, __ATOMIC_RELAXED);
    return seen != wake && __atomic_compare_exchange_n(&ipc_proc.wake_seen, &seen, wake, false,
                                                       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* The last close wakes the collector thread (registry_wake), which must
 * then get a CPU: on a loaded machine that is a scheduler's wake-up
 * latency, while a program thread that calls in is running already. Both
 * may collect the same wake; free_limbo takes its victims under the locks,
 * so each block is freed once. */
void limbo_collect_if_woken(void)
{
    if (!local_limbo_pending()) return;
    /* As limbo_collector_kick reads them: free_limbo checks again under
     * the local lock. */
    uint32_t me = __atomic_load_n(&ipc_proc.self, __ATOMIC_RELAXED);
    if (me == REG_NONE || __atomic_load_n(&ipc_proc.state, __ATOMIC_ACQUIRE) != PROC_ACTIVE) return;
    /* pairs with the fetch_add in registry_wake (the last close's wake) */
    uint32_t wake = __atomic_load_n(&ipc_proc.reg.holders[me].wake, __ATOMIC_ACQUIRE);
    if (wake_claim(wake)) free_limbo();
}

/* The common free needs no registry lock: a live block of ours with no
 * hand-off pending. Only this process moves its block LIVE -> LIMBO ->
 * RETIRING -> RETIRED or back to LIMBO (importers add and drop their bits
 * and hand-offs with atomics either way; a repair turns RETIRING back into
 * LIMBO with a CAS, and then the retire answers "held"). A pending
 * hand-off may be due to expire, which needs the lock. Local lock held. */
bool limbo_free_needs_no_lock(const struct local_export *e)
{
    const struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
    return process_owns(b, e->generation) &&
           /* pairs with reg_block_create's release store of state */
           __atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == BLOCK_LIVE &&
           !__atomic_load_n(&b->pending, __ATOMIC_RELAXED);
}

/* The program freed e's live block: into limbo, then out of it at once if
 * nobody holds it and no hand-off is pending (importers see LIMBO as LIVE).
 * True when retired (queued for recycling), false when in limbo. locked:
 * whether the registry lock is held. Local lock held. */
bool limbo_free_into(struct local_export *e, bool locked)
{
    struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
    uint64_t now = reg_coarse_ns(), exported = b->last_export_ns;
    b->limbo_since_ns = now < exported ? exported : now; /* never before the export */
    /* pairs with settle_state's seq_cst load in importers: LIMBO is held like LIVE */
    __atomic_store_n(&b->state, BLOCK_LIMBO, __ATOMIC_SEQ_CST);
    if (reg_block_retire(&ipc_proc.reg, e->block)) {
        /* Recycled lazily, in a batch: nothing can open it any more, and
         * only this process could export its base again, once the real
         * free that follows has run. */
        limbo_recycle_later(e->block, e->generation);
        if (ipc_proc.nrecycles >= PROC_RECYCLE_BATCH && (locked || process_lock_registry())) {
            limbo_drain_recycles();
            if (!locked) registry_unlock(&ipc_proc.reg);
        }
        local_export_del(e);
        return true;
    }
    local_limbo_add(e);
    STAT_ADD(frees_deferred, 1);
    log_msg(LOG_DEBUG, "free of 0x%llx deferred (block %u is open elsewhere or not yet claimed)",
            (unsigned long long)e->base, e->block);
    if (local_limbo_count() > unclaimed_share() && (locked || process_lock_registry())) {
        shed_unclaimed();
        if (!locked) registry_unlock(&ipc_proc.reg);
    }
    return false;
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
        struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
        if (!b || !__atomic_load_n(&b->pending, __ATOMIC_RELAXED)) continue;
        uint64_t due = __atomic_load_n(&b->last_export_ns, __ATOMIC_RELAXED) + process_timeout_ns();
        uint64_t left = due > now ? due - now : 0;
        if (left < wait) wait = left;
    }
    return wait < 1000000 ? 1000000 : wait;
}

void limbo_collector_step(void)
{
    local_lock();
    uint32_t me = ipc_proc.self;
    bool ok =
        ipc_proc.state == PROC_ACTIVE && !ipc_proc.shut && me != REG_NONE && !process_forked();
    /* pairs with the fetch_add in registry_wake: a wake after this load changes the word, so
     * FUTEX_WAIT returns at once */
    uint32_t seen = ok ? __atomic_load_n(&ipc_proc.reg.holders[me].wake, __ATOMIC_SEQ_CST) : 0;
    uint64_t wait = ok ? next_wait_ns(reg_now_ns()) : 0;
    local_unlock();
    if (!ok) {
        struct timespec s = {0, 100000000};
        nanosleep(&s, NULL);
        return;
    }
    /* `seen` was read before collecting and before waiting: a wake that
     * lands in between changes the word, so FUTEX_WAIT returns at once. */
    limbo_collect(LIMBO_SWEEP_DUE);
    if (collector_stopping()) return;
    uint64_t deadline = reg_now_ns() + wait;
    for (;;) {
        registry_wait(&ipc_proc.reg, me, seen, wait);
        if (collector_stopping()) return;
        uint32_t wake = __atomic_load_n(&ipc_proc.reg.holders[me].wake, __ATOMIC_ACQUIRE);
        if (wake == seen || wake_claim(wake)) break; /* due, or the wake is ours */
        /* A program thread that was running already took this wake
         * (limbo_collect_if_woken): sleep again, until the same deadline,
         * rather than meet it at the local lock. */
        seen = wake;
        uint64_t now = reg_now_ns();
        if (now >= deadline) break;
        wait = deadline - now;
    }
    limbo_collect(local_limbo_pending() ? LIMBO_SWEEP_LIMBO : LIMBO_SWEEP_DUE);
}

void limbo_collector_kick(void)
{
    uint32_t me = __atomic_load_n(&ipc_proc.self, __ATOMIC_RELAXED);
    if (__atomic_load_n(&ipc_proc.state, __ATOMIC_ACQUIRE) == PROC_ACTIVE && me != REG_NONE)
        registry_wake(&ipc_proc.reg, me);
}

/* ---- exit ---- */

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
        struct reg_block *b = reg_block_at(&ipc_proc.reg, e->block);
        if (!process_owns(b, e->generation) || (b->state != BLOCK_LIVE && b->state != BLOCK_LIMBO))
            continue;
        /* A ledger-only record (ipc_handle.h): the driver keeps that memory
         * for its importers; nothing to wait for. */
        if (e->base >= IPC_LEDGER_ADDRESS) continue;
        if (reg_block_held(&ipc_proc.reg, e->block) ||
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
 * the importer would read whatever comes next. */
void limbo_exit_wait(void)
{
    uint64_t start = reg_now_ns(), wait_ns = options_get()->exit_wait * 1000000ull;
    uint64_t deadline = start + wait_ns;
    uint64_t grace_end =
        start + (wait_ns < EXIT_HANDOFF_GRACE_NS ? wait_ns : EXIT_HANDOFF_GRACE_NS);
    uint64_t expired0 = __atomic_load_n(&ipc_proc.st.handoffs_expired, __ATOMIC_RELAXED);
    for (;;) {
        uint32_t seen =
            /* pairs with the fetch_add in registry_wake: a wake after this load changes the
             * word, so FUTEX_WAIT returns at once */
            __atomic_load_n(&ipc_proc.reg.holders[ipc_proc.self].wake, __ATOMIC_SEQ_CST);
        uint64_t now = reg_now_ns();
        /* After the grace, every round (IPCSHIM_HANDOFF=window re-arms a
         * hand-off at a last close). */
        if (now >= grace_end) limbo_expire_older_than(UINT64_MAX);
        limbo_collect(LIMBO_SWEEP_MINE);
        local_lock();
        size_t held = ipc_proc.state == PROC_ACTIVE ? held_by_others(now < grace_end) : 0;
        local_unlock();
        now = reg_now_ns();
        if (!held || now >= deadline) break;
        uint64_t wait = deadline - now;
        if (wait > 100000000) wait = 100000000;
        registry_wait(&ipc_proc.reg, ipc_proc.self, seen, wait);
    }
    uint64_t expired = __atomic_load_n(&ipc_proc.st.handoffs_expired, __ATOMIC_RELAXED) - expired0;
    if (expired)
        log_msg(LOG_INFO, "exit: %llu hand-offs nobody claimed were dropped, not waited for",
                (unsigned long long)expired);
}

/* ---- ipc.h's limbo calls ---- */

int ipc_collect(void)
{
    if (!process_active()) return 0;
    return limbo_collect(LIMBO_SWEEP_ALL);
}

int ipc_collect_pressure(void)
{
    if (!process_active()) return 0;
    return limbo_collect_pressure();
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
