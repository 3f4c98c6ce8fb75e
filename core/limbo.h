/* limbo: this process's freed exports that others still hold, and the work
 * that ends them -- the deferred frees, the dead-holder sweeps, the fair
 * share of unclaimed hand-offs, the collector thread's step and the exit
 * wait (ipc.h's collect, free and shutdown are built on these).
 *
 * A block the program freed while an importer held it (or while a hand-off
 * was pending) waits here, state LIMBO, on the local limbo list (local.h).
 * It leaves when nothing holds it any more: marked RETIRED (no open can
 * succeed), freed through the host (host.h) with no lock held, and queued
 * for recycling (below). Only this process moves its own blocks LIVE ->
 * LIMBO -> RETIRING -> RETIRED; importers add and drop their bits and
 * hand-offs with atomics either way.
 *
 * Locks: the local mutex, then the registry lock; each function says which
 * it expects. Nothing here calls ipc.c. */
#ifndef LIMBO_H
#define LIMBO_H

#include "local.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct reg_block;

/* Queue a retired record for recycling (local lock held). */
void limbo_recycle_later(uint32_t block, uint64_t generation);
/* Recycle the queued records (local and registry locks held). */
void limbo_drain_recycles(void);

/* Expires b's pending hand-offs if due (or now, if force); e is b's export
 * record. Local and registry locks held. */
void limbo_expire_handoffs(const struct local_export *e, struct reg_block *b, uint64_t now,
                           bool force);

/* Frees collect at most this often while limbo waits (ipc_free, and every
 * 1024th untracked free of a thread). */
#define LIMBO_FREE_COLLECT_INTERVAL_NS 50000000ull

enum limbo_sweep {
    LIMBO_SWEEP_DUE,   /* every holder, at most once a second */
    LIMBO_SWEEP_ALL,   /* every holder, now */
    LIMBO_SWEEP_MINE,  /* the holders of our own blocks, now (exit) */
    LIMBO_SWEEP_LIMBO, /* the holders of our blocks in limbo, now (the collector's poll) */
};

/* Frees what can be freed from this process's limbo and sweeps the dead as
 * `how` says. Returns the number freed. No lock held. */
int limbo_collect(enum limbo_sweep how);

/* ipc_collect_pressure: expire this process's oldest unclaimed hand-offs
 * early, then collect. Returns the number of blocks freed (by this call,
 * or by the collector thread meanwhile). No lock held. */
int limbo_collect_pressure(void);

/* An untracked free while limbo waits: collects at once when an importer's
 * last close woke us since a program thread last looked
 * (limbo_collect_if_woken); else every 1024th free of a thread looks
 * whether a collect is due (for processes without the collector thread).
 * No lock held. */
void limbo_collect_on_untracked_free(void);

/* On a program thread that is already running (ipcshim_stats, an untracked
 * free): if blocks wait in limbo and an importer's last close woke this
 * process since a program thread last looked, free what can be freed now,
 * without waiting for the collector thread to be scheduled. Two relaxed
 * loads when nothing woke us, one when limbo is empty. No lock held. */
void limbo_collect_if_woken(void);

/* True when the program's free of e's block needs no registry lock: a live
 * block of ours with no hand-off pending. Local lock held. */
bool limbo_free_needs_no_lock(const struct local_export *e);

/* The program freed e's live block: into limbo, then out of it at once if
 * nobody holds it and no hand-off is pending (importers see LIMBO as LIVE).
 * True when it was retired (and queued for recycling): the real free
 * follows; false when it stays in limbo. locked: whether the registry lock
 * is held. Local lock held. */
bool limbo_free_into(struct local_export *e, bool locked);

/* Fair share: expire the unclaimed hand-offs of the oldest of our limbo
 * blocks that only they keep (all: every such block; else only when limbo
 * outgrew the share, down to half of it). Returns how many lost theirs.
 * Local and registry locks held. */
size_t limbo_shed_unclaimed(bool all);

/* Expires pending hand-offs of our limbo blocks exported before `before`.
 * No lock held. */
void limbo_expire_older_than(uint64_t before);

/* The collector thread's step (collector.h): wait on this holder's futex
 * word until a last close wakes it or the next hand-off expires, then
 * collect. */
void limbo_collector_step(void);
/* Wakes this process's collector now (from any thread; no lock needed). */
void limbo_collector_kick(void);

/* ipc_shutdown's wait: hand-offs nobody claimed are waited for only
 * briefly, then dropped; then, up to IPCSHIM_EXIT_WAIT, every block of ours
 * -- freed or not -- that a live importer still maps is waited for,
 * collecting as importers close. No lock held; the process attached. */
void limbo_exit_wait(void);

#endif
