/* ipc: cross-process reference counts and limbo for exported device memory.
 *
 * This is the interface the shim drives; everything behind it is core
 * (registry.h, leases, limbo, collector). The shim calls the real CUDA
 * function where a result says so, and nothing else: the decisions are here.
 *
 * Conventions: functions return 0 or a positive IPC_* decision, or a negative
 * errno. Pointers and contexts are opaque 64-bit values. "Untracked" (PASS)
 * is always a safe answer: the shim then behaves as if it were not loaded.
 * No function here waits on another process for longer than
 * IPCSHIM_LOCK_WAIT (a holder stopped inside the registry lock; then the call
 * goes on without the registry, safely), except ipc_shutdown (bounded by
 * IPCSHIM_EXIT_WAIT).
 * Thread-safe throughout. */
#ifndef IPC_H
#define IPC_H

#include "ipc_handle.h" /* struct ipc_handle, IPC_HANDLE_BYTES, IPC_KIND_* */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ipcshim_stats;

/* Decisions returned to the shim. */
enum {
    IPC_PASS = 1, /* not ours: do the real call and nothing more */
    IPC_DONE,     /* answered here: return success without the real call */
    IPC_REAL,     /* do the real call, then the matching *_finish / commit */
};

/* Start IPC tracking in this process, once the host has installed its
 * free_block (host_set, host.h: without it nothing is tracked). Cheap,
 * idempotent; the registry is attached lazily on the first export or open.
 * Must precede all else. Registers no process hook: the host registers
 * those below. */
void ipc_init(void);

/* ---- process hooks: the host registers them (core registers none) ----
 * The host runs these as steps of its one fork chain (the shim's init.c),
 * registered once when it calls ipc_init: prepare holds the local
 * mutex across fork() so that the child inherits whole tables; parent
 * releases it; child re-initialises the locks and forgets the parent's
 * holder slot, threads and counters (its next ipc call attaches anew). A
 * child made without them (a raw clone) is detected and starts over too,
 * abandoning tables that may be mid-update. */
void ipc_fork_prepare(void);
void ipc_fork_parent(void);
void ipc_fork_child(void);

/* The host must call this at library unload, after its other exit work: a
 * destructor of priority 101, the lowest a program may use, which runs
 * after the library's other destructors and, in the dynamic linker's
 * order, after the program's own destructors (the program is finalised
 * before the libraries it did not load). It runs ipc_shutdown for every
 * process that attached (import-only ones included: the shim's own exit
 * hook is registered at the first export); no-op otherwise, and after an
 * earlier ipc_shutdown (an atexit hook's). */
void ipc_unload(void);

/* The program's own _exit (or _Exit): no atexit hook or destructor will
 * run, so ipc_unload runs here, in the process that attached only: not in
 * a vfork child, which shares its parent's memory (and so its tables and
 * holder slot) under another pid. */
void ipc_exit_now(void);

/* True once the registry is attached and usable in this process. */
bool ipc_active(void);

/* After a successful real get-handle on an allocation [base, base+size) in
 * context ctx of device: record the block (or find the same allocation's
 * record) and count one pending hand-off. 0; -ENOSPC when the registry is
 * full and -ENODEV when it is unavailable (the export stays untracked and
 * works as without the shim; logged once). */
int ipc_export(const struct ipc_handle *h, uint64_t base, uint64_t size, int device, uint64_t ctx);

/* ipc_export with the allocation's identity (the driver's BUFFER_ID, never
 * reused in a process; 0 when unknown): kept with the export's local
 * record and handed to the host's free_block with a deferred free, which
 * checks it so that it never frees another allocation that took the same
 * address after a context reset freed this one. kind: IPC_KIND_* (h is a
 * pool's export data for IPC_KIND_POOL), shown by the reports. */
int ipc_export_identity(const struct ipc_handle *h, uint64_t base, uint64_t size, int device,
                        uint64_t ctx, uint64_t identity, int kind);

/* A pending import, between ipc_open_begin and commit/abort. */
struct ipc_open {
    uint32_t block, lease;
    uint64_t generation;
    uint64_t ctx;
    struct ipc_handle handle;
    uint32_t flags;    /* core's own: e.g. whether this open claimed a hand-off */
    unsigned map_hash; /* core's own: the mapping's key hash (local_map_hash) */
};

/* Before the real open of h in context ctx.
 *   IPC_DONE: *ptr is the answer (the same handle already open in this
 *     context, now counted once more; or this process's own export, whose
 *     original pointer is returned without calling the driver). A cached
 *     re-open succeeds even after the exporter died, as NVIDIA's driver's
 *     does (docs/gpu-validation.md, 2026-11-26).
 *   IPC_REAL: a lease is held in the OPENING state; do the real open, then
 *     ipc_open_commit(t, ptr) if it succeeded or ipc_open_abort(t) if not.
 *   IPC_PASS: a handle the shim does not track (exporter not under the
 *     shim, registry unavailable): open it for real, nothing else.
 *   -ENOENT: a tracked block its exporter freed with nothing holding it;
 *   -EOWNERDEAD: a tracked block whose exporter died: fail the open.
 * Concurrent opens of one handle in one process return one pointer. */
int ipc_open_begin(const struct ipc_handle *h, uint64_t ctx, struct ipc_open *t, uint64_t *ptr);
/* ipc_open_begin for a pool import (cudaMemPoolImportPointer) of the
 * allocation exported as h: the same decisions, except that an import of
 * this process's own export is IPC_PASS (CUDA answers it), since the
 * program's free of that pointer would be indistinguishable from the
 * export's own free. */
int ipc_import_begin(const struct ipc_handle *h, uint64_t ctx, struct ipc_open *t, uint64_t *ptr);
/* ipc_import_begin through pool, the importer's pool handle the program
 * passed (0: not checked, as ipc_import_begin). A repeat import in the same
 * context is answered here only through the pool of the first import: any
 * other pool (NULL, another imported pool) is IPC_PASS, so that the driver
 * gives its own answer (NVIDIA's refuses both) and nothing is counted. */
int ipc_import_pool_begin(const struct ipc_handle *h, uint64_t ctx, uint64_t pool,
                          struct ipc_open *t, uint64_t *ptr);
void ipc_open_commit(struct ipc_open *t, uint64_t ptr);
void ipc_open_abort(struct ipc_open *t);

/* A pending last close, between ipc_close_begin and ipc_close_finish. */
struct ipc_close {
    uint32_t block, lease;
    uint64_t generation;
    uint64_t ptr, ctx;
};

/* Before the real close of ptr.
 *   IPC_DONE: not the last local close (or a close of an own export):
 *     the count was dropped; return success.
 *   IPC_REAL: the last local close: synchronize t->ctx if
 *     IPCSHIM_CLOSE_SYNC, do the real close, then ipc_close_finish(t),
 *     which drops the lease and wakes the exporter.
 *   IPC_PASS: a pointer the shim did not open: pass it through (the driver
 *     gives its own error for a double close or a garbage pointer). */
int ipc_close_begin(uint64_t ptr, struct ipc_close *t);
/* ipc_close_begin for a free of ptr that may end a pool import (the shim
 * asks before ipc_free when ipc_free_passes says no): the same decisions
 * for a pointer imported with ipc_import_begin; IPC_PASS for any other
 * pointer (then it is the free of an allocation: ipc_free). Legacy opens
 * are never ended by a free, nor pool imports by ipc_close_begin. */
int ipc_unimport_begin(uint64_t ptr, struct ipc_close *t);
void ipc_close_finish(struct ipc_close *t);
/* The real close failed: CUDA says the mapping is still open, so it stays
 * open here too (its count and lease are kept). */
void ipc_close_abort(struct ipc_close *t);

/* Context ctx is gone (destroyed, or a primary context reset or released
 * for the last time): the driver unmapped every legacy open and pool import
 * made in it. Forgets each of those mappings (a later open or import of the
 * same handle asks the driver again) and drops its share of this process's
 * lease, waking the exporter when that ends the lease. Mappings whose handle
 * keep(handle) says to keep stay (keep may be NULL), and so do mappings an
 * open or close is in flight on. Returns the number forgotten. */
int ipc_context_gone(uint64_t ctx, bool (*keep)(const struct ipc_handle *h));

/* Before the real free of ptr.
 *   IPC_PASS: not an exported allocation base: free it for real. This is
 *     the hot path: a few nanoseconds when the process exports nothing.
 *   IPC_DONE: a block with live leases or unclaimed hand-offs: it is now in
 *     limbo and will be freed through the host (host.h); report success.
 *   IPC_REAL: an exported block nothing holds: its record is retired (no
 *     open can succeed any more) and goes back to the table at this
 *     process's next registry round trip; free it for real.
 *   -EINVAL: a second free of a block already in limbo: fail it as the
 *     driver fails a double free; nothing is freed.
 * Also collects this process's limbo when it is not empty. */
int ipc_free(uint64_t ptr);

/* True when a free of ptr is certainly IPC_PASS: no export of this process
 * and no pool import (ipc_unimport_begin) can be at ptr. A few relaxed
 * loads, no lock (while limbo waits, every 1024th such free of a thread
 * also looks whether a collect is due): the caller may then free for real
 * without ipc_free (the hot path of every untracked free). */
bool ipc_free_passes(uint64_t ptr);

/* Moves this process's export record at base to new_base, a pseudo
 * address (IPC_LEDGER_ADDRESS and up) that nothing else uses, so that base
 * can be exported anew while the record lives on (in limbo): VMM memory,
 * whose address the program may map another allocation at while the
 * driver keeps the old one for its importers. Later calls (ipc_free, limbo)
 * name the record by new_base. 0, -ENOENT (no export at base), -EEXIST
 * (new_base taken), or -EBUSY (not moved). */
int ipc_export_move(uint64_t base, uint64_t new_base);

/* True when this process has blocks in limbo (a relaxed load, no lock). */
bool ipc_limbo_pending(void);

/* True when base is an export of this process that the program freed and
 * that waits in limbo: as far as the program knows, freed memory. */
bool ipc_in_limbo(uint64_t base);

/* Free every limbo block of this process that nothing holds any more
 * (no live lease, no unclaimed unexpired hand-off), after sweeping dead
 * holders. Returns the number of blocks freed. */
int ipc_collect(void);

/* Under memory pressure (an allocation failed): expire this process's
 * oldest unclaimed hand-offs early, then ipc_collect(). Leases never expire.
 * Returns the number of blocks freed; the shim retries the allocation once
 * if it is > 0. */
int ipc_collect_pressure(void);

/* Counters for ipcshim_stats(): fills the ipc part of *out. */
void ipc_stats(struct ipcshim_stats *out);

/* One check of the leak watch (leak.h): dead exporters' blocks held too
 * long, limbo or open mappings growing. The watch thread's check (given to
 * leak_watch_start); takes the local lock. */
void ipc_leak_check(void);

/* At exit of a process that opened but never exported (its atexit hook):
 * the leak report (leak.h) of what it still maps, printed before anything
 * is released (ipc_shutdown, from the library's last destructor, then
 * releases its leases and slot). No-op in a process that exported
 * (ipc_shutdown reports there) and after the first call. */
void ipc_report_leaks(void);

/* At process exit: wait up to IPCSHIM_EXIT_WAIT for every block this
 * process exported -- freed or not -- that a live importer still maps
 * (unclaimed hand-offs only for the first second), collecting as importers
 * close; then print the leak report (leak.h), orphan what is still held,
 * drop our leases and release our holder slot. Idempotent; also run by
 * ipc_unload for every attached process, import-only ones included. */
void ipc_shutdown(void);

#endif
