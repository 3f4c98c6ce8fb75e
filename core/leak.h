/* leak: who holds what, since when, opened where -- the exit report.
 *
 * Like LeakSanitizer for exported device memory: when a process under the
 * shim exits with something outstanding, IPCSHIM_LEAK_REPORT=summary (the
 * default) logs one warning line; =full logs every item:
 *   - mappings this process opened and never closed (bytes, exporter pid and
 *     command, alive or dead and since when, how long held, opens and
 *     closes of the handle, the call site of the first open);
 *   - its exports nobody ever opened (hand-offs unclaimed or expired);
 *   - its blocks still in limbo, with the processes that still hold them.
 * Call sites come from callsite.h (captured at export and open only).
 *
 * ipc.c and limbo.c drive this module with one-line hooks; the bookkeeping lives in
 * fields of its local records (local.h) and of the registry records
 * (registry.h, ABI 2), so nothing here adds a table or a lookup to the
 * hot paths. leak_gather() runs with the local and registry locks held and
 * only copies; leak_print() formats and symbolizes after they are released. */
#ifndef LEAK_H
#define LEAK_H

#include <stdint.h>

struct registry;
struct reg_block;
struct local_export;
struct local_map;

enum { LEAK_REPORT_OFF, LEAK_REPORT_SUMMARY, LEAK_REPORT_FULL }; /* IPCSHIM_LEAK_REPORT */

/* Reads IPCSHIM_CALLSITE_DEPTH into callsite.h. Called from ipc_init. */
void leak_init(void);

/* A new export record e (first export of the block) at now, call site cs. */
void leak_note_export(struct local_export *e, uint64_t now, uint32_t cs);
/* The same allocation exported again. */
void leak_note_reexport(struct local_export *e);
/* A first open in this context of block b (registry lock held): m is the
 * pending mapping, cs the call site. */
void leak_note_open(struct local_map *m, const struct registry *r, const struct reg_block *b,
                    uint32_t cs);
/* The same handle opened again in this context (a cached mapping). */
void leak_note_reopen(struct local_map *m);
/* b's pending hand-offs expire now (local and registry locks held, before
 * they are added to b->expired): counts the blocks nobody ever opened and
 * keeps the first ones (e: b's export record, for size and call site) for
 * the full report. */
void leak_note_expired(const struct reg_block *b, const struct local_export *e);

/* ---- the watch: warnings while the program runs ----
 * A thread of this process (started on the first export or open when
 * IPCSHIM_DEAD_HOLD_WARN or IPCSHIM_GROWTH_CHECKS is on) checks once a
 * second, through the check it was started with (ipc_leak_check, which
 * takes the locks and calls leak_check_locked), and logs one warning line
 * when
 *   - this process has held a dead exporter's block longer than
 *     IPCSHIM_DEAD_HOLD_WARN (once per process);
 *   - its limbo, or its open mappings, grew at IPCSHIM_GROWTH_CHECKS
 *     consecutive checks (a leak in progress; again only after it grew as
 *     many more times), naming the processes that hold or export them. */
typedef void leak_check_fn(void);
/* Starts the thread once (later calls do nothing): it runs check() every
 * second, with no lock of this module held. */
void leak_watch_start(leak_check_fn *check);
/* Stops the thread (waits for it at most about 200 ms). */
void leak_watch_stop(void);
/* In a fork child: no thread there; start again on demand. */
void leak_after_fork(void);
/* One check; the local lock held (ipc_leak_check), not the registry's: it
 * only reads records (fixed-width fields; a torn read only words one
 * advisory warning wrong), and every process runs it every second. Lines
 * to log are kept until leak_check_flush(), called after the lock is
 * released. */
void leak_check_locked(struct registry *r, uint32_t self);
void leak_check_flush(void);

/* What this process holds or left held, copied out. Local and registry
 * locks held; self is our holder slot. NULL when the report is off (or out
 * of memory). */
struct leak_report *leak_gather(struct registry *r, uint32_t self);

/* Logs the report (summary or full, per IPCSHIM_LEAK_REPORT) when it has
 * items or exports nobody ever opened expired during the run, and frees
 * it. NULL is a no-op. No lock held. */
void leak_print(struct leak_report *lr);

#endif
