/* swap_extent: the extents of kernel accesses learned online, per block
 * (docs/swap.md, "learned extents"). A launch says where a kernel's
 * pointers point, never how far it reads; the rule: a kernel access runs
 * from its pointer to the next start seen so far in the same block (the
 * pointers of kernels, copies and sets, kept for the block's life), or to
 * the block's end. Copies and sets carry their own size. A short extent is
 * only a prediction: the shim still orders and dirties everything from the
 * pointer to the block's end (shim/swap/swap_vmm_parts.c).
 *
 * Memory is bounded: at most SWAP_EXTENT_MAX_STARTS starts per block (8
 * bytes each). Past the bound a new start is not recorded, so extents stay
 * longer than they would be: more bytes fetched, never a wrong one. Pure
 * logic, no locking (the caller serialises). */
#ifndef SWAP_EXTENT_H
#define SWAP_EXTENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SWAP_EXTENT_MAX_STARTS 4096u

/* One block's starts, sorted, distinct, each below size. */
struct swap_extent {
    uint64_t size;
    uint64_t *starts;
    uint32_t n, cap;
    bool full; /* a start was dropped at the bound */
};

/* An empty learner for a block of size bytes (no allocation yet). */
void swap_extent_init(struct swap_extent *x, uint64_t size);
/* Frees the starts; x is empty again (its size kept). */
void swap_extent_fini(struct swap_extent *x);

/* Record a start at offset off (once). 0; -EINVAL (off >= size); -ENOSPC
 * (the bound is reached: not recorded, x->full set); -ENOMEM (not
 * recorded). Every error leaves x as it was but for x->full. */
int swap_extent_add(struct swap_extent *x, uint64_t off);

/* The lowest start above off, or the block's size when there is none: the
 * end of a kernel access from off. */
uint64_t swap_extent_next(const struct swap_extent *x, uint64_t off);

#endif
