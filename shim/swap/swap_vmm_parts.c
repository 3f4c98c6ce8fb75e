/* swap_vmm_parts: see swap_vmm_parts.h. The allocations are a sorted array
 * of pointers (lookups by any address in them: a binary search; allocations
 * are rare next to lookups). A part's block never outlives its allocation:
 * both go together at the free, and at a context's end swap_vmm.c forgets
 * the blocks before the allocations are forgotten here. */
#include "swap_vmm_parts.h"
#include "swap_vmm_view.h"
#include "log.h"
#include "resolve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct vmm_alloc **allocs; /* sorted by base, non-overlapping */
static size_t nallocs, cap_allocs, parted;

/* The position of the first allocation whose base is above ptr. */
static size_t after(uint64_t ptr)
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (allocs[mid]->base <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct vmm_alloc *swap_vmm_alloc_find(uint64_t ptr)
{
    size_t at = after(ptr);
    if (!at) return NULL;
    struct vmm_alloc *a = allocs[at - 1];
    return ptr - a->base < a->size ? a : NULL;
}

uint64_t swap_vmm_alloc_part_asked(const struct vmm_alloc *a, size_t k)
{
    uint64_t off = k * a->part;
    return a->asked - off < a->part ? a->asked - off : a->part;
}

size_t swap_vmm_parted_live(void)
{
    return parted;
}

/* Take a out of the array; its memory stays the caller's. */
static void unlist(struct vmm_alloc *a)
{
    size_t at = after(a->base);
    if (!at || allocs[at - 1] != a) return;
    memmove(allocs + at - 1, allocs + at, (nallocs - at) * sizeof *allocs);
    nallocs--;
    parted -= a->n > 1;
}

static void alloc_delete(struct vmm_alloc *a)
{
    swap_extent_fini(&a->starts);
    free(a->unseen_write);
    free(a);
}

int swap_vmm_alloc(size_t asked, uint64_t part, CUdevice dev, CUcontext ctx, struct vmm_alloc **out)
{
    uint64_t g = swap_vmm_granularity(dev);
    if (!g || !asked || !out) return -ENOTSUP;
    uint64_t size = (asked + g - 1) / g * g;
    part = part ? (part + g - 1) / g * g : size;
    /* At most SWAP_VMM_MAX_PARTS parts: a launch reports at most 64
     * blocks (swap_touch); past that its parts would be read over the link. */
    uint64_t least = (size / SWAP_VMM_MAX_PARTS + g - 1) / g * g;
    if (part < least) part = least;
    if (part > size) part = size;
    size_t n = (size_t)((size + part - 1) / part), made = 0;
    struct vmm_alloc *a = calloc(1, sizeof *a + n * sizeof a->parts[0]);
    CUdeviceptr va = 0, staging = 0;
    if (!a || !(a->unseen_write = calloc(n, sizeof *a->unseen_write))) goto fail;
    if (nallocs == cap_allocs) {
        size_t cap = cap_allocs ? 2 * cap_allocs : 16;
        struct vmm_alloc **p = realloc(allocs, cap * sizeof *p);
        if (!p) goto fail;
        allocs = p, cap_allocs = cap;
    }
    if (real_cuMemAddressReserve(&va, size, g, 0, 0) != CUDA_SUCCESS ||
        real_cuMemAddressReserve(&staging, size, g, 0, 0) != CUDA_SUCCESS) {
        LOG_ONCE(LOG_WARN, "swap: cuMemAddressReserve refused a VMM-backed block; such blocks "
                           "use managed memory instead");
        goto fail;
    }
    for (; made < n; made++) {
        uint64_t off = made * part, len = size - off < part ? size - off : part;
        if (swap_vmm_block_make(va + off, staging + off, len, dev, ctx, &a->parts[made])) break;
    }
    struct swap_vmm_range view = {.base = va,
                                  .size = asked,
                                  .device = dev,
                                  .ctx = ctx,
                                  .buffer_id = swap_vmm_view_buffer_id(staging)};
    if (made < n || swap_vmm_view_add(&view)) goto fail;
    a->base = va, a->size = size, a->asked = asked, a->part = part, a->staging = staging;
    a->ctx = ctx, a->device = dev, a->n = n;
    swap_extent_init(&a->starts, size);
    size_t at = after(va);
    memmove(allocs + at + 1, allocs + at, (nallocs - at) * sizeof *allocs);
    allocs[at] = a;
    nallocs++;
    parted += n > 1;
    *out = a;
    return 0;
fail:
    if (made) {
        swap_vmm_free_parts(a->parts, made, size); /* the reservations go too */
    } else {
        if (staging) real_cuMemAddressFree(staging, size);
        if (va) real_cuMemAddressFree(va, size);
    }
    if (a) free(a->unseen_write);
    free(a);
    return -ENOMEM;
}

int swap_vmm_alloc_free(struct vmm_alloc *a)
{
    if (!a) return -EINVAL;
    swap_vmm_view_remove(a->base);
    unlist(a);
    int rc = swap_vmm_free_parts(a->parts, a->n, a->size);
    alloc_delete(a);
    return rc;
}

int swap_vmm_alloc_pin(struct vmm_alloc *a)
{
    return a ? swap_vmm_pin_parts(a->parts, a->n) : -EINVAL;
}

void swap_vmm_alloc_forget(CUcontext ctx)
{
    for (size_t i = nallocs; i-- > 0;) {
        struct vmm_alloc *a = allocs[i];
        if (a->ctx != ctx) continue;
        unlist(a);
        alloc_delete(a);
    }
}

/* ---- learned extents of a launch ----------------------------------------- */

#define PTRS_MAX 64

/* A launch's pointer into a parted allocation. */
struct part_ptr {
    struct vmm_alloc *a;
    uint64_t off;
};

/* The pointers into parted allocations among the 8-byte words of
 * [p, p + size), appended to out[n..max). The new n. */
static size_t part_ptrs(const unsigned char *p, size_t size, struct part_ptr *out, size_t n)
{
    for (size_t o = 0; o + 8 <= size && n < PTRS_MAX; o += 8) {
        uint64_t w;
        memcpy(&w, p + o, 8); /* the host copy need not be aligned */
        struct vmm_alloc *a = swap_vmm_alloc_find(w);
        if (a && a->n > 1 && w - a->base < a->asked && !swap_vmm_pinned(a->parts[0]))
            out[n++] = (struct part_ptr){a, w - a->base};
    }
    return n;
}

/* Part k of a into o once (unless already there); overflow past the room. */
static void unseen_add(struct swap_unseen *o, struct vmm_alloc *a, size_t k)
{
    for (size_t m = 0; m < o->n; m++)
        if (o->a[m] == a && o->k[m] == k) return;
    if (o->n == SWAP_UNSEEN_MAX) {
        o->overflow = true;
        return;
    }
    o->a[o->n] = a, o->k[o->n++] = (uint32_t)k;
}

void swap_vmm_launch_extents(const struct swap_index *x, void *const *args,
                             const struct swap_param *params, size_t np, void **extra,
                             struct swap_touch *t, struct swap_unseen *o)
{
    struct part_ptr pp[PTRS_MAX];
    size_t n = 0;
    for (size_t i = 0; args && i < np; i++)
        if (args[params[i].index]) n = part_ptrs(args[params[i].index], params[i].size, pp, n);
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
        if (extra[i] != CU_LAUNCH_PARAM_BUFFER_POINTER) continue;
        for (size_t j = 0; extra[j] != CU_LAUNCH_PARAM_END && j < 64; j += 2)
            if (extra[j] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[j + 1])
                n = part_ptrs(extra[i + 1], *(size_t *)extra[j + 1], pp, n);
    }
    if (n == PTRS_MAX) o->overflow = true; /* pointers left unread: their parts are unknown */
    for (size_t i = 0; i < n; i++)
        swap_extent_add(&pp[i].a->starts, pp[i].off); /* not recorded (the bound): longer */
    for (size_t i = 0; i < n; i++) {
        struct vmm_alloc *a = pp[i].a;
        size_t k = swap_vmm_alloc_part(a, pp[i].off);
        size_t end = swap_vmm_alloc_part(a, swap_extent_next(&a->starts, pp[i].off) - 1);
        for (size_t j = k + 1; j <= end && j < a->n; j++)
            swap_index_touch(x, a->base + j * a->part, t);
        for (size_t j = 0; j < a->n; j++) /* a kernel may index either way from its pointer */
            if (j < k || j > end) unseen_add(o, a, j);
    }
    /* a part reported for one pointer is not unseen for another */
    size_t kept = 0;
    for (size_t m = 0; m < o->n; m++) {
        const struct swap_block *b = swap_index_find(x, o->a[m]->base + o->k[m] * o->a[m]->part);
        bool reported = false;
        for (size_t i = 0; i < t->n && !reported; i++)
            reported = t->block[i] == b;
        if (!reported) o->a[kept] = o->a[m], o->k[kept++] = o->k[m];
    }
    o->n = kept;
}

void swap_vmm_unseen_written(const struct swap_index *x, const struct swap_unseen *o)
{
    for (size_t m = 0; m < o->n; m++) {
        struct vmm_alloc *a = o->a[m];
        const struct swap_block *b = swap_index_find(x, a->base + o->k[m] * a->part);
        if (b && b->on_device) a->unseen_write[o->k[m]] = true;
    }
}
