/* swap_vmm_view: the program's view of the VMM-backed swappable blocks
 * (shim/swap/swap_vmm_view.c): each live block's range as cudaMalloc would have
 * given it, for pointer queries (shim/query.c) from any thread, without
 * swap_lock, which is held across real launches. shim/swap/swap_vmm.c lists a
 * block before its allocation returns and unlists it when it goes. */
#ifndef SHIM_SWAP_VMM_VIEW_H
#define SHIM_SWAP_VMM_VIEW_H

#include "symbols.h"

#include <stdbool.h>
#include <stdint.h>

/* A live block as the program sees it: what cudaMalloc would have given. */
struct swap_vmm_range {
    uint64_t base, size; /* the size the program asked for */
    int device;
    CUcontext ctx;      /* the context current at its allocation */
    uint64_t buffer_id; /* its host copy's BUFFER_ID: one for its life; 0: unknown */
};

/* The block whose [base, base + size) holds ptr, into *out: true, or false
 * at the cost of one load when ptr is in no block's 2 MiB granules. Any
 * thread, without swap_lock (its own leaf lock: it waits for no call). */
bool swap_vmm_query(uint64_t ptr, struct swap_vmm_range *out);

/* List and count r. 0 or -ENOMEM. Under swap_lock. */
int swap_vmm_view_add(const struct swap_vmm_range *r);
/* Uncount and unlist the range at base, if listed. Under swap_lock. */
void swap_vmm_view_remove(uint64_t base);
/* The BUFFER_ID the driver gives the allocation mapped at p (a block's
 * host copy: one for the block's life), or 0. */
uint64_t swap_vmm_view_buffer_id(uint64_t p);

#endif
