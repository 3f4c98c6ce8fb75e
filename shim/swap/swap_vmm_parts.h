/* swap_vmm_parts: the VMM-backed swappable allocations as the program made
 * them (shim/swap/swap_vmm_parts.c, docs/swap.md "Parts"). An allocation larger
 * than IPCSHIM_SWAP_PART_BYTES is one reservation whose parts (that size,
 * the last one shorter) are independent blocks of the VMM engine
 * (swap_vmm.h: each its own host copy, chunks, events, state), each
 * registered in the swap engine, so that the policy sees and moves parts;
 * a smaller one is one block. What stays whole: the program's view
 * (pointer queries answer the whole allocation), the free, the export, the
 * context's end. Everything here runs under host_swap.c's swap_lock. */
#ifndef SHIM_SWAP_VMM_PARTS_H
#define SHIM_SWAP_VMM_PARTS_H

#include "swap_extent.h"
#include "swap_index.h"
#include "swap_vmm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One allocation. Written here only (under swap_lock) but for starts and
 * unseen_write, which host_swap.c keeps (under swap_lock). */
struct vmm_alloc {
    uint64_t base, size; /* the reservation: the size asked, rounded up to the granularity */
    uint64_t asked;      /* the size the program asked for */
    uint64_t part;       /* bytes per part (the last one may be shorter); size when whole */
    uint64_t staging;    /* the parts' host copies' second mapping, one reservation */
    CUcontext ctx;
    int device;
    struct swap_extent starts; /* kernels' and copies' start offsets seen (learned extents) */
    bool *unseen_write;        /* per part: written by work its policy was not told of */
    size_t n;
    struct vmm_block *parts[];
};

/* An allocation has at most this many parts (larger ones, larger parts). */
#define SWAP_VMM_MAX_PARTS 32

/* A new allocation of size bytes on dev in context ctx, in parts of part
 * bytes (rounded up to the granularity, and to size / SWAP_VMM_MAX_PARTS;
 * 0: one block), each part a block
 * made by swap_vmm_block_make and listed in the view as one range of size
 * bytes. 0 and *out, or a negative errno with nothing left behind (the
 * caller falls back to managed memory). */
int swap_vmm_alloc(size_t size, uint64_t part, CUdevice dev, CUcontext ctx, struct vmm_alloc **out);

/* The allocation whose reservation holds ptr, or NULL. */
struct vmm_alloc *swap_vmm_alloc_find(uint64_t ptr);

/* The part of a holding offset off (below a->size). */
static inline size_t swap_vmm_alloc_part(const struct vmm_alloc *a, uint64_t off)
{
    return (size_t)(off / a->part);
}

/* The bytes of part k the program asked for (what the engine indexes). */
uint64_t swap_vmm_alloc_part_asked(const struct vmm_alloc *a, size_t k);

/* The program frees a (swap_vmm_free_parts); a is gone. 0 or -EIO. */
int swap_vmm_alloc_free(struct vmm_alloc *a);

/* A legacy export of a: the whole allocation made one exportable device
 * allocation (swap_vmm_pin_parts). 0 or a negative errno, a unchanged. */
int swap_vmm_alloc_pin(struct vmm_alloc *a);

/* The context ctx ended: its allocations are forgotten, after
 * swap_vmm_context_gone forgot their blocks. */
void swap_vmm_alloc_forget(CUcontext ctx);

/* Allocations of more than one part, live: the launch scan looks for
 * learned extents only while there are some. */
size_t swap_vmm_parted_live(void);

/* The parts of parted allocations a launch may touch past the learned
 * extents of its pointers: ordered like the parts it touches, never
 * reported to the policy. */
#define SWAP_UNSEEN_MAX 256
struct swap_unseen {
    struct vmm_alloc *a[SWAP_UNSEEN_MAX];
    uint32_t k[SWAP_UNSEEN_MAX]; /* part k of a[i] */
    size_t n;
    bool overflow; /* more: the launch counts as touching every block */
};

/* THE RULE of learned extents (core/swap/swap_extent.h), for one launch
 * whose parameters are args (params[0..n), swap_index_scan_args) or the
 * packed buffer in extra (either may be NULL), after t was filled from
 * them by the index scan: every pointer into a parted allocation is a
 * start, all recorded before any extent is taken; a pointer's access runs
 * to the next start seen in its allocation, or to its end: those parts are
 * added to t (reported to the policy), and every other part of the
 * allocation, before the pointer too (a kernel may index either way),
 * goes to o (ordered and dirtied, not reported: a missed
 * prediction is slow, never wrong). x is the engine's index. */
void swap_vmm_launch_extents(const struct swap_index *x, void *const *args,
                             const struct swap_param *params, size_t n, void **extra,
                             struct swap_touch *t, struct swap_unseen *o);

/* After the policy's moves for the launch: each part of o now on its
 * device is marked written (unseen_write: kernels count as writing what
 * they touch), so that its eviction writes it back. */
void swap_vmm_unseen_written(const struct swap_index *x, const struct swap_unseen *o);

#endif
