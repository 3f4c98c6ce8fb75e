/* process: this process's side of IPC -- its attachment to the registry,
 * its holder slot, its fork state, its counters and its queue of retired
 * records -- in one struct (ipc_proc), and what reads or sets that state:
 * attaching, the registry lock, fork detection, "is this block ours".
 * Hand-off expiry and recycling are limbo's (limbo.h).
 *
 * Locks (ipc.c's invariants): the local mutex (local.h), then the registry
 * lock; the host's operations (host.h) are called with neither held. This
 * file calls nothing of ipc.c or limbo.c: they call it. */
#ifndef PROCESS_H
#define PROCESS_H

#include "ipcshim.h"
#include "local.h"
#include "registry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ipc_proc.state. */
enum { PROC_IDLE, PROC_ACTIVE, PROC_OFF };

/* Blocks retired by a free (limbo_free_into), recycled at this process's
 * next registry round trip (an export's, a collect's) or once
 * PROC_RECYCLE_BATCH of them wait. */
struct proc_recycle {
    uint32_t block;
    uint64_t generation;
};
#define PROC_RECYCLE_BATCH 64

/* The counters behind ipcshim_stats (ipc_stats): relaxed atomics. */
struct proc_stats {
    uint64_t exports, opens, closes, frees_deferred, frees_reclaimed, bytes_reclaimed;
    uint64_t handoffs_expired, longest_limbo_ns;
    uint64_t limbo_left, limbo_left_bytes; /* limbo when ipc_shutdown let go of it */
};

/* Everything this process knows of IPC beyond its local tables (local.h).
 * Each field says who writes it and how it is read. */
struct ipc_process {
    /* ipc_init ran (once, before the first export or open; read anywhere). */
    bool initialised;
    /* The registry, attached lazily (process_ready_locked, local lock). */
    struct registry reg;
    /* PROC_*: written under the local lock with a release store; read
     * with an acquire load anywhere (ipc_active, the collector's kick). */
    int state;
    /* ipc_shutdown ran: set once under the local lock, release store;
     * ipc_stats reads it without the lock (acquire). */
    bool shut;
    /* Our holder slot (REG_NONE until attached) and the nonce our records
     * carry: written under the local lock; read relaxed by the collector. */
    uint32_t self;
    uint64_t self_nonce;
    /* When the last full sweep, collect and limbo sweep ran (CLOCK_MONOTONIC;
     * relaxed atomics, any thread: a stale value only shifts a sweep). */
    uint64_t last_sweep_ns, last_collect_ns, last_limbo_sweep_ns;
    /* Our holder's wake word as last claimed for a collect (wake_claim in
     * limbo.c: a CAS, so one thread, a program thread or the collector,
     * collects each value; any thread, no lock). */
    uint32_t wake_seen;
    /* collector_start was called (local lock). */
    bool collector_asked;
    /* The record our last open took, a prefetch hint (local lock). */
    uint32_t open_guess;
    /* Fork detection (process_forked): a MADV_WIPEONFORK page, else our pid.
     * Set at ipc_init and in the fork child's reset. */
    volatile uint8_t *fork_canary;
    pid_t canary_pid;
    /* Retired records waiting to be recycled (local lock). */
    struct proc_recycle *recycles;
    size_t nrecycles, recycles_cap;
    /* free_limbo (limbo.c) calls between taking their victims and the real
     * frees (seq_cst atomics; pairs with ipc_collect_pressure's wait). */
    int frees_in_flight;
    /* The exit leak report was gathered (atomic exchange: once). */
    int leaks_reported;
    struct proc_stats st;
};

extern struct ipc_process ipc_proc;

#define STAT_ADD(field, n) __atomic_fetch_add(&ipc_proc.st.field, (n), __ATOMIC_RELAXED)

/* ipc_init's once-only part: the fork canary and the leak report's
 * settings. */
void process_init(void);

/* Tracking is on: attached, not shut down, not disabled. Lock-free. */
bool process_active(void);

/* Tracking is off for good in this process (release store). */
void process_turn_off(void);

/* Attach lazily and take a holder slot. 0, -ENODEV (not tracking) or
 * -ENOSPC (no holder slot). Local lock held. */
int process_ready_locked(void);

/* The registry lock. False when it is not to be had: unusable (tracking is
 * then turned off for good), or held past IPCSHIM_LOCK_WAIT by another
 * process -- a stopped one -- (tracking stays on; this one operation goes on
 * without the registry: an open or export untracked, a free or a lease drop
 * deferred and retried later, never anything unsafe). */
bool process_lock_registry(void);

/* True in a child that has not dealt with its fork yet (local lock held). */
bool process_forked(void);
/* If process_forked(): abandon the parent's tables (local lock held). */
void process_check_fork(void);
/* Resets what a fork child must not inherit; consistent: whether the
 * local tables are whole (the atfork handlers ran). Local lock held. */
void process_after_fork(bool consistent);

/* Active, attached and not a fork child: what every background path
 * checks before it touches the registry. Local lock held. */
bool process_attached_locked(void);

/* Is b a record this process exported with this generation? */
bool process_owns(const struct reg_block *b, uint64_t generation);

/* IPCSHIM_HANDOFF_TIMEOUT in nanoseconds. */
uint64_t process_timeout_ns(void);

#endif
