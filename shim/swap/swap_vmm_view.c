/* swap_vmm_view: the program's view of the VMM-backed swappable blocks,
 * for pointer queries from any thread (swap_vmm_view.h). shim/swap/swap_vmm.c
 * lists and unlists blocks; shim/query.c asks. */
#include "swap_vmm_view.h"
#include "resolve.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The program's view of the blocks, for pointer queries from any thread
 * (swap_vmm_query), which must not take swap_lock (held across real
 * launches): the live blocks' ranges, sorted by base, under ranges_lock, a
 * leaf lock (no call is made while it is held); and a counting filter over
 * the 2 MiB granules those ranges cover, read without it, so that a pointer
 * in no block costs one load. Both change together under ranges_lock (and
 * swap_lock): before the block's allocation returns, and when it goes. */
#define GRANULE_SHIFT 21
#define GRANULE_SLOTS 16384u
static uint32_t granule_filter[GRANULE_SLOTS];
static pthread_rwlock_t ranges_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct swap_vmm_range *ranges;
static size_t nranges, ranges_cap;

static uint32_t *granule_slot(uint64_t addr)
{
    uint64_t x = addr >> GRANULE_SHIFT;
    x ^= x >> 17;
    x *= 0xed5ad4bbu;
    x ^= x >> 11;
    return &granule_filter[x % GRANULE_SLOTS];
}

/* Count r's granules in the filter (delta 1) or uncount them (-1). */
static void granules_count(const struct swap_vmm_range *r, int delta)
{
    for (uint64_t g = r->base >> GRANULE_SHIFT; g <= (r->base + r->size - 1) >> GRANULE_SHIFT; g++)
        __atomic_add_fetch(granule_slot(g << GRANULE_SHIFT), (uint32_t)delta, __ATOMIC_RELEASE);
}

/* The index of the first range whose base is above ptr. ranges_lock held. */
static size_t ranges_after(uint64_t ptr)
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ranges[mid].base <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int swap_vmm_view_add(const struct swap_vmm_range *r)
{
    pthread_rwlock_wrlock(&ranges_lock);
    if (nranges == ranges_cap) {
        size_t cap = ranges_cap ? ranges_cap * 2 : 64;
        struct swap_vmm_range *p = realloc(ranges, cap * sizeof *p);
        if (!p) {
            pthread_rwlock_unlock(&ranges_lock);
            return -ENOMEM;
        }
        ranges = p, ranges_cap = cap;
    }
    size_t i = ranges_after(r->base);
    memmove(ranges + i + 1, ranges + i, (nranges - i) * sizeof *ranges);
    ranges[i] = *r;
    nranges++;
    granules_count(r, 1);
    pthread_rwlock_unlock(&ranges_lock);
    return 0;
}

void swap_vmm_view_remove(uint64_t base)
{
    pthread_rwlock_wrlock(&ranges_lock);
    size_t i = ranges_after(base);
    if (i > 0 && ranges[i - 1].base == base) {
        granules_count(&ranges[i - 1], -1);
        memmove(ranges + i - 1, ranges + i, (nranges - i) * sizeof *ranges);
        nranges--;
    }
    pthread_rwlock_unlock(&ranges_lock);
}

bool swap_vmm_query(uint64_t ptr, struct swap_vmm_range *out)
{
    if (!__atomic_load_n(granule_slot(ptr), __ATOMIC_ACQUIRE)) return false;
    pthread_rwlock_rdlock(&ranges_lock);
    size_t i = ranges_after(ptr);
    bool found = i > 0 && ptr - ranges[i - 1].base < ranges[i - 1].size;
    if (found) *out = ranges[i - 1];
    pthread_rwlock_unlock(&ranges_lock);
    return found;
}

uint64_t swap_vmm_view_buffer_id(uint64_t p)
{
    unsigned long long id = 0;
    CUpointer_attribute what = CU_POINTER_ATTRIBUTE_BUFFER_ID;
    void *into[] = {&id};
    if (!REAL(cuPointerGetAttributes) ||
        real_cuPointerGetAttributes(1, &what, into, (CUdeviceptr)p) != CUDA_SUCCESS)
        return 0;
    return id;
}
