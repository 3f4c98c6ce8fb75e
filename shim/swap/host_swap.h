/* host_swap.h: the shim side of host swap (docs/swap.md), defined in
 * shim/swap/host_swap.c and used by memory.c, api.c and init.c; core/swap/swap.h is core's
 * side. The launch, copy and set entry points (do_<name> in host_swap.c) are
 * declared by symbols.h like every other logic entry.
 *
 * Off by default; when off, each hook costs one predictable branch on
 * swap_enabled. When on, allocations of at least swap_min_bytes come from
 * managed memory and are registered in the block index; launches, copies
 * and sets that touch them are reported to the policy, whose decisions are
 * applied with prefetches and advice. */
#ifndef SHIM_HOST_SWAP_H
#define SHIM_HOST_SWAP_H

#include "symbols.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern bool swap_enabled;
extern uint64_t swap_min_bytes;

/* Read the options and turn swap on if they ask for it and the real managed
 * memory functions exist; called once at start-up (init.c). */
void swap_init(void);
/* The fork chain's child step (init.c): swap is off in a fork child. */
void swap_postfork_child(void);

/* True when swap_init opened an IPCSHIM_TRACE file: init.c then registers
 * swap_flush_trace to run at exit. */
bool swap_trace_opened(void);
/* Flush the trace file (swap_lock taken). */
void swap_flush_trace(void);

/* True when an allocation of `size` bytes should be swappable. */
static inline bool swap_wants(size_t size)
{
    return __builtin_expect(swap_enabled, 0) && size >= swap_min_bytes && size;
}

/* Allocate a swappable block through each door. Returns true with the
 * VMM-backed or managed block in *ptr and registered; false when the caller should make an
 * ordinary allocation instead (managed allocation failed: logged once). */
bool swap_alloc_runtime(void **ptr, size_t size);
bool swap_alloc_driver(CUdeviceptr *ptr, size_t size);

/* Before the real free of ptr: unregister it if it is a swappable block.
 * True when it was a VMM-backed block, which this call freed: the caller
 * reports success and makes no real free. */
bool swap_on_free_slow(uint64_t ptr);
static inline bool swap_on_free(uint64_t ptr)
{
    return __builtin_expect(swap_enabled, 0) && swap_on_free_slow(ptr);
}

/* The context ctx ended (shim/context.c): its VMM-backed blocks are
 * forgotten, without a driver call. */
void swap_context_gone(uint64_t ctx);
/* Before a context ends (0: the call that would have ended it failed):
 * the VMM engine's mover finishes its job of it (swap_vmm_context_ending). */
void swap_context_ending(uint64_t ctx);
/* At exit: the VMM engine's mover thread stops (swap_vmm_stop_mover). */
void swap_stop_mover(void);

/* Before a real export of ptr: true (and one clear log line) when ptr lies in
 * a managed swappable block, which cannot be exported; the caller fails the
 * call. A VMM-backed block is pinned on the device for the export instead
 * (false: the caller passes the call on, and shim/vmm.c's legacy export of
 * VMM memory serves it). */
bool swap_refuses_export_slow(uint64_t ptr, const char *call);
static inline bool swap_refuses_export(uint64_t ptr, const char *call)
{
    return __builtin_expect(swap_enabled, 0) && swap_refuses_export_slow(ptr, call);
}

/* Host-swap figures for the IPCSHIM_STATS exit report (nothing when off). */
void swap_report(void);

/* At exit, whatever IPCSHIM_STATS says: one warning when host swap refused
 * exports (easy to miss in a program that ignores return codes). */
void swap_warn_refused(void);

#endif
