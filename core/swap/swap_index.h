/* swap_index: the live swappable blocks of a process, by address, and the
 * kernel-parameter scanner that finds which of them a launch touches.
 *
 * The index is a sorted array of non-overlapping [base, base + size) ranges:
 * containment lookups (one per 8-byte parameter word of every launch) are a
 * bounds check against the lowest and highest block, then a binary search.
 * Inserts and removes move the tail of the array (allocations are rare next
 * to launches). No locking inside: the shim holds its swap lock around every
 * call. Pure logic: no CUDA, no dl*. Everything returns 0 or a negative
 * errno. */
#ifndef SWAP_INDEX_H
#define SWAP_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct swap_block {
    uint64_t base;
    uint64_t size;   /* bytes the program asked for (lookups use this) */
    uint64_t charge; /* bytes charged to the device budget (size rounded up) */
    int device;      /* the device it was allocated on: its home for fetches */
    bool on_device;  /* the caller's note: last placed on its device */
    bool ahead;      /* the engine's note: fetched ahead, no launch has used it since
                      * (swap_engine_access clears it) */
};

struct swap_index;

int swap_index_create(struct swap_index **out); /* -ENOMEM */
void swap_index_destroy(struct swap_index *x);

/* Add a block. -EINVAL (size 0 or wraps), -EEXIST (overlaps a block),
 * -ENOMEM. */
int swap_index_insert(struct swap_index *x, const struct swap_block *b);

/* Remove the block whose base is `base` (into *out when not NULL). -ENOENT. */
int swap_index_remove(struct swap_index *x, uint64_t base, struct swap_block *out);

/* The block containing addr (interior addresses too), or NULL. The pointer
 * is valid until the next insert or remove; the caller may update the
 * block's on_device note through it. */
struct swap_block *swap_index_find(const struct swap_index *x, uint64_t addr);

size_t swap_index_count(const struct swap_index *x);

/* The i-th block in address order, NULL past the end (for walks). */
const struct swap_block *swap_index_at(const struct swap_index *x, size_t i);

/* One kernel parameter worth scanning: its offset in the parameter block
 * and its size. Only parameters at 8-aligned offsets of at least 8 bytes
 * can hold a pointer (a pointer's alignment is 8, and a by-value struct
 * holding one is aligned to 8 too). */
struct swap_param {
    uint32_t index; /* position in the argument array */
    uint32_t offset;
    uint32_t size;
};

/* Keep from a kernel's layout (offsets[i], sizes[i], i < n) the parameters
 * that may hold a pointer, in order, into out (room for n). Returns how many. */
size_t swap_param_filter(const uint64_t *offsets, const uint64_t *sizes, size_t n,
                         struct swap_param *out);

/* The set of distinct blocks one launch touches, in first-seen order. */
struct swap_touch {
    struct swap_block *block[64];
    size_t n;
    bool overflow; /* more than 64 distinct blocks: the rest are left to the hardware */
};

/* Scan the parameters of one launch: args[p->index] points to the value of
 * parameter p (the runtime's `args`, the driver's `kernelParams`); every
 * 8-byte word of it is looked up. Adds each block found once to *t. */
void swap_index_scan_args(const struct swap_index *x, void *const *args,
                          const struct swap_param *params, size_t n, struct swap_touch *t);

/* Scan a packed parameter buffer (the driver's CU_LAUNCH_PARAM_BUFFER_POINTER):
 * every 8-byte word at an 8-aligned offset. */
void swap_index_scan_buffer(const struct swap_index *x, const void *buf, size_t size,
                            struct swap_touch *t);

/* Add the block containing [addr, addr + bytes) (looked up by addr) to *t,
 * once. Returns the block or NULL. */
struct swap_block *swap_index_touch(const struct swap_index *x, uint64_t addr,
                                    struct swap_touch *t);

#endif
