/* init: the shim's lifecycle, at the top of the shim. The start-up order
 * and every process hook (constructor, atfork, atexit, destructors) are here
 * and nowhere else, and nothing below calls up into this file: what the
 * files below need of it, they are given (hooks.h) by the constructor.
 *
 * Start-up is lazy and runs once: the first entry point (or ipcshim_* call)
 * runs resolve_once_slow (resolve.c: the real dlsym, the options, the real
 * functions, whether this process tracks), which ends with the start hook,
 * start_up: memory and core (ipc_init), the fork chain, host swap, the
 * unwinder. Nothing initialises on the side.
 *
 * The hooks, in the order they are registered:
 *  1. constructor (at load): finds the next syscall and pidfd_* (pidfd.c,
 *     whose interposers call the kernel directly until then), notes that
 *     libc is initialised, for the dlsym door (resolve.c), which may run
 *     earlier than any other code here, and gives the files below their
 *     hooks (hooks.h): an entry before it (another library's constructor)
 *     passes through untracked;
 *  2. pthread_atfork, at start-up right after ipc_init, in every process:
 *     the one fork chain (prefork, postfork_parent, postfork_child below).
 *     Every subsystem's fork state is a step of it, in one fixed order;
 *     none keeps a pid of its own to compare or an atfork hook of its own.
 *  3. atexit: flush the host swap trace, at start-up when IPCSHIM_TRACE
 *     opened one;
 *  4. atexit: ipc_shutdown, at the first tracked export (memory.c and
 *     vmm.c call the first_export hook);
 *  5. atexit: the importer's leak report (ipc_report_leaks), at the first
 *     tracked open (the first_open hook);
 *  5b. atexit: host swap's mover thread stops (swap_stop_mover), at its
 *     start (the mover_started hook), after the CUDA driver's cuInit
 *     registered its teardown, which so runs after it: the mover never
 *     calls the driver while it goes away;
 *  6. destructor (default priority): host swap's refused exports, the VMM
 *     ledger's exit report (vmm.c) and the IPCSHIM_STATS report;
 *  7. destructor(101): ipc_unload;
 *  8. _exit and _Exit, interposed: a program that leaves through them (a
 *     fork child's usual way out, Python's os._exit) runs no atexit hook
 *     and no destructor, so without 8 its holder stayed in the registry
 *     until someone swept it, and a pipeline whose processes all ended so
 *     left its registry behind. 8 runs ipc_exit_now (ipc_unload in the
 *     process that attached), then the real _exit.
 *
 * At exit, atexit handlers run newest first, all before the destructors.
 * 4 and 5 are registered lazily on purpose: the CUDA runtime registers its
 * own teardown when it initialises, before any export or open, so it runs
 * after them, and the shutdown (which waits for importers and frees limbo
 * for real) runs while CUDA still works. The trace (3) is flushed after
 * them. Then the loader runs the destructors: the program's own first (the
 * program is finalised before the libraries it did not load), then the
 * library's by priority.
 * 101, the lowest a program may use, makes ipc_unload the library's last
 * word: the exit report (6) runs before it, and it releases what an
 * import-only process (which never registered 4) still holds. ipc_shutdown
 * is idempotent: whichever of 4 and 7 comes first does the work. */
#include "api.h"
#include "entry.h"
#include "fdpass.h"
#include "hooks.h"
#include "host_swap.h"
#include "memory.h"
#include "pidfd.h"
#include "resolve.h"
#include "unwind.h"
#include "vmm.h"
#include "ipc.h"
#include "sys.h"

#include <pthread.h>
#include <stdlib.h>

typedef void (*exit_fn)(int);
static exit_fn real_exit_fn; /* libc's _exit, resolved at load (8) */

static void start_up(void);
static void at_first_export(void);
static void at_first_open(void);
static void at_mover_start(void);
static const struct shim_hooks hooks = {
    .start = start_up,
    .first_export = at_first_export,
    .first_open = at_first_open,
    .context_gone = swap_context_gone,
    .context_ending = swap_context_ending,
    .mover_started = at_mover_start,
};

/* 1. Runs after libc's initialiser (this library depends on libc). */
__attribute__((constructor)) static void init_at_load(void)
{
    pidfd_resolve_at_load();
    /* 8's libc _exit, now: at _exit time a lookup could be inside a signal
     * handler (and see pidfd.c's trap: no lookup that may allocate). */
    __atomic_store_n(&real_exit_fn, (exit_fn)resolve_next_libc("_exit"), __ATOMIC_RELEASE);
    resolve_note_libc_ready();
    hooks_set(&hooks);
}

/* 3. Newest-first order puts it after the shutdown and leak report. */
static void flush_trace_at_exit(void)
{
    swap_flush_trace();
}

/* 2. The fork chain. prefork takes the locks held across fork, outermost
 * first: core's local lock (the child inherits whole tables) and fdpass's
 * exported set (a leaf). The parent step drops them in reverse; the child
 * step resets each subsystem in reverse: fdpass (closes the parent's
 * listening socket, forgets its exports), the VMM tables (forgotten: not
 * the child's), host swap (off: its engine works in the parent's CUDA
 * context), then core's per-process state (its holder slot is taken again
 * at its next ipc call). shim_tracking is fixed before start-up is
 * published, so each step sees the same answer. */
static void prefork(void)
{
    if (shim_tracking()) ipc_fork_prepare();
    fdpass_prefork();
}
static void postfork_parent(void)
{
    fdpass_postfork_parent();
    if (shim_tracking()) ipc_fork_parent();
}
static void postfork_child(void)
{
    fdpass_postfork_child();
    vmm_postfork_child();
    swap_postfork_child();
    if (shim_tracking()) ipc_fork_child();
}

/* The start hook: runs inside resolve_once_slow (under its pthread_once),
 * before resolve_done is published: every entry point waits for it. */
static void start_up(void)
{
    memory_init(); /* ipc_init when tracking (resolve.c decided it) */
    /* 2: right after ipc_init (once: start-up runs once) */
    pthread_atfork(prefork, postfork_parent, postfork_child);
    swap_init();
    /* 3: right after swap_init opened the trace */
    if (swap_trace_opened()) atexit(flush_trace_at_exit);
    unwind_init();
}

/* 4. Runs before the CUDA runtime's own teardown, which registered its exit
 * handler before the first export and so runs after this one. */
static void shutdown_at_exit(void)
{
    ipc_shutdown();
}
static void register_shutdown(void)
{
    atexit(shutdown_at_exit);
}
static void at_first_export(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_shutdown);
}

/* 5. An importer's exit hook: the leak report, before the library's last
 * destructor releases its leases (ipc_shutdown). */
static void report_leaks_at_exit(void)
{
    ipc_report_leaks();
}
static void register_leak_report(void)
{
    atexit(report_leaks_at_exit);
}
static void at_first_open(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_leak_report);
}

/* 5b. The mover is told to stop and joined (bounded) before the driver's
 * own exit handler, registered earlier, tears the driver down. */
static void stop_mover_at_exit(void)
{
    swap_stop_mover();
}
static void register_mover_stop(void)
{
    atexit(stop_mover_at_exit);
}
static void at_mover_start(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_mover_stop);
}

/* 6. Host swap's refused exports, if any (whatever IPCSHIM_STATS says), the
 * VMM mappings and imports left, then the IPCSHIM_STATS report. */
__attribute__((destructor)) static void report_at_exit(void)
{
    swap_warn_refused();
    vmm_report_exit();
    api_report_stats();
}

/* 7. The library's last destructor (see the top of the file). */
__attribute__((destructor(101))) static void unload_at_exit(void)
{
    ipc_unload();
}

/* 8. The program's _exit. Trap: _exit is async-signal-safe and is called
 * from signal handlers; one that interrupted this thread inside the shim
 * (shim_depth) may have left a lock of ours held by this very thread, so
 * then nothing is released (a sweep does it later, as for a kill). */
static __attribute__((noreturn)) void exit_now(int status)
{
    if (__atomic_load_n(&shim_depth, __ATOMIC_RELAXED) == 0) ipc_exit_now();
    exit_fn next = __atomic_load_n(&real_exit_fn, __ATOMIC_ACQUIRE);
    if (next) next(status);
    for (;;) /* none found at load: what libc's _exit does */
        sys_call6(SYS_exit_group, status, 0, 0, 0, 0, 0);
}
SHIM_EXPORT void _exit(int status)
{
    exit_now(status);
}
SHIM_EXPORT void _Exit(int status)
{
    exit_now(status);
}
