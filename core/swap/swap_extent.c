/* swap_extent: see swap_extent.h. A sorted array per block: a binary
 * search per lookup, an insert moves the tail (starts are few: a block's
 * distinct tensor offsets, learned once). */
#include "swap_extent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void swap_extent_init(struct swap_extent *x, uint64_t size)
{
    *x = (struct swap_extent){.size = size};
}

void swap_extent_fini(struct swap_extent *x)
{
    free(x->starts);
    swap_extent_init(x, x->size);
}

/* The position of the first start above off (upper) or at least off. */
static uint32_t search(const struct swap_extent *x, uint64_t off, bool upper)
{
    uint32_t lo = 0, hi = x->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (upper ? x->starts[mid] <= off : x->starts[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int swap_extent_add(struct swap_extent *x, uint64_t off)
{
    if (off >= x->size) return -EINVAL;
    uint32_t at = search(x, off, false);
    if (at < x->n && x->starts[at] == off) return 0;
    if (x->n == SWAP_EXTENT_MAX_STARTS) {
        x->full = true;
        return -ENOSPC;
    }
    if (x->n == x->cap) {
        uint32_t cap = x->cap ? 2 * x->cap : 8;
        if (cap > SWAP_EXTENT_MAX_STARTS) cap = SWAP_EXTENT_MAX_STARTS;
        uint64_t *a = realloc(x->starts, cap * sizeof(*a));
        if (!a) return -ENOMEM;
        x->starts = a;
        x->cap = cap;
    }
    memmove(x->starts + at + 1, x->starts + at, (x->n - at) * sizeof(*x->starts));
    x->starts[at] = off;
    x->n++;
    return 0;
}

uint64_t swap_extent_next(const struct swap_extent *x, uint64_t off)
{
    uint32_t at = search(x, off, true);
    return at < x->n ? x->starts[at] : x->size;
}
