/* host: the one door through which core asks the program it lives in (the
 * shim, or a test) for work core cannot do itself: device work and stack
 * unwinding. Core never calls CUDA or dl*; the host hands it this table.
 *
 * The contract, once for every operation here:
 * - it returns 0 or a negative errno (unwind: backtrace()'s contract, the
 *   number of frames written);
 * - it may be called from any thread, the collector's and the exit path's
 *   included;
 * - core calls it with none of its locks held (neither the local mutex nor
 *   the registry lock), except a swap engine's move, which runs under the
 *   lock its caller serialises the engine with (swap_engine.h);
 * - a member left NULL is something the host cannot do: core does without
 *   (no free_block: IPC is not tracked, as before ipc_init; no unwind:
 *   glibc's backtrace()).
 *
 * Time is not asked of the host, and nothing substitutes another clock:
 * every stamp and deadline of the registry protocol is CLOCK_MONOTONIC read
 * by reg_now_ns (or reg_coarse_ns, for stamps only: registry.h). The other
 * reads serve one purpose each: the wall clock for a timed lock's absolute
 * deadline (registry_lock.c) and for the dates a report prints (the
 * segment's creation, inspect.c's snapshot), and CLOCK_MONOTONIC for the
 * log's rate window and the leak watch's 1 s timed wait. */
#ifndef HOST_H
#define HOST_H

#include <stdint.h>

/* Really free the allocation at base, which lives in context ctx on device,
 * if it is still the allocation of that identity (the driver's BUFFER_ID
 * noted at export, never reused in a process; 0: unknown, not checked).
 * -EINVAL if the driver refused. */
typedef int host_free_block_fn(uint64_t base, int device, uint64_t ctx, uint64_t identity);

/* Move [base, base + size) to device (>= 0) or to the host (-1), on stream
 * (an opaque handle passed through); ctx is the engine's (swap_ops.ctx).
 * flags say what the bytes need (a backing that copies uses them; managed
 * memory, which the driver migrates itself, ignores both):
 *   HOST_MOVE_NEW    the block is new: nothing to copy, its bytes are
 *                    undefined (placing it);
 *   HOST_MOVE_DIRTY  to the host: the device copy is newer than the host's
 *                    (write it back); without it the host copy is current;
 *   HOST_MOVE_AHEAD  a fetch ahead of its use: the caller does not wait
 *                    for it.
 * 0, or a negative errno: the block stays where it was. A swap engine takes
 * it per engine (swap_engine_create), not from the table: each engine may
 * carry its own context (the unit tests' record their moves). */
#define HOST_MOVE_NEW 1u
#define HOST_MOVE_DIRTY 2u
#define HOST_MOVE_AHEAD 4u /* a fetch ahead of its use: the caller does not wait for it */
typedef int host_move_fn(void *ctx, uint64_t base, uint64_t size, int device, uint64_t stream,
                         unsigned flags);

/* backtrace()'s contract (libunwind's unw_backtrace, which the shim may
 * load: shim/unwind.c): fill pcs with at most max return addresses,
 * innermost first, the caller's own frame included; return how many. */
typedef int host_unwind_fn(void **pcs, int max);

struct host {
    host_free_block_fn *free_block; /* deferred frees out of limbo (limbo.c) */
    host_unwind_fn *unwind;         /* call sites (callsite.c); NULL: glibc's */
};

/* Installs the members of *h that are not NULL; the others keep what an
 * earlier call installed (each part of the host installs what it provides,
 * at its start-up: shim/memory.c the device work, shim/unwind.c the
 * unwinder). Call before core may use a member (the first export or open).
 * Each member is published with one release store. */
void host_set(const struct host *h);

/* The installed operations (acquire loads; NULL where none). */
host_free_block_fn *host_free_block(void);
host_unwind_fn *host_unwind(void);

#endif
