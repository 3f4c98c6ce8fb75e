/* swap_pool: the VMM engine's device memory and mappings (swap_vmm.c,
 * swap_mover.c): the per-device pool of physical chunks, created once and
 * never released, each kept with the write-back event its next user must
 * wait for; the write-back events; and the two mappings a block's range
 * takes (its chunks, its host copy). Under swap_lock, but the mapping
 * helpers, which touch nothing shared (the mover calls them without it). */
#include "swap_vmm_internal.h"
#include "resolve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Pinned memory on device dev, no shareable handle type. */
CUmemAllocationProp vmm_device_prop(int dev)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    return p;
}

/* Map handle at [va, va + size) with device read/write access. */
CUresult vmm_map_rw(uint64_t va, uint64_t size, CUmemGenericAllocationHandle h, int dev)
{
    CUresult r = real_cuMemMap((CUdeviceptr)va, size, 0, h, 0);
    if (r != CUDA_SUCCESS) return r;
    CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = real_cuMemSetAccess((CUdeviceptr)va, size, &a, 1);
    if (r != CUDA_SUCCESS) real_cuMemUnmap((CUdeviceptr)va, size);
    return r;
}

/* ---- the chunk pool ----------------------------------------------------- */

void vmm_chunks_give(int dev, size_t n, const CUmemGenericAllocationHandle *in,
                     const CUevent *in_ev, CUevent ev);

/* n chunks of device d into out (from the pool, else new), with in
 * out_ev the write-back event each must wait for before it is written
 * (NULL: none). 0 or -ENOMEM (none taken). */
int vmm_chunks_take(int dev, size_t n, CUmemGenericAllocationHandle *out, CUevent *out_ev)
{
    struct vdev *d = &vmm_devs[dev];
    size_t i = 0;
    for (; i < n && d->npool; i++) {
        --d->npool;
        out[i] = d->pool[d->npool], out_ev[i] = d->pool_ev[d->npool];
    }
    CUmemAllocationProp p = vmm_device_prop(dev);
    for (; i < n; i++) {
        out_ev[i] = NULL;
        if (real_cuMemCreate(&out[i], d->gran, &p, 0) != CUDA_SUCCESS) break;
        vmm_counts.chunks++;
    }
    if (i == n) return 0;
    vmm_chunks_give(dev, i, out, out_ev, NULL);
    return -ENOMEM;
}

/* Give n chunks back to the pool (kept for reuse; never released), each
 * with its event to wait for: in_ev[i], or ev when in_ev is NULL. */
void vmm_chunks_give(int dev, size_t n, const CUmemGenericAllocationHandle *in,
                     const CUevent *in_ev, CUevent ev)
{
    struct vdev *d = &vmm_devs[dev];
    if (d->npool + n > d->cap) {
        size_t cap = d->cap ? d->cap : 16;
        while (cap < d->npool + n)
            cap *= 2;
        CUmemGenericAllocationHandle *p = realloc(d->pool, cap * sizeof *p);
        if (p) d->pool = p;
        CUevent *e = p ? realloc(d->pool_ev, cap * sizeof *e) : NULL;
        if (e) d->pool_ev = e;
        if (!p || !e) {
            for (size_t i = 0; i < n; i++)
                real_cuMemRelease(in[i]); /* no room to keep it: let it go */
            return;
        }
        d->cap = cap;
    }
    memcpy(d->pool + d->npool, in, n * sizeof *in);
    for (size_t i = 0; i < n; i++)
        d->pool_ev[d->npool + i] = in_ev ? in_ev[i] : ev;
    d->npool += n;
}

/* Map b's device chunks at its range (nothing mapped there now). */
CUresult vmm_map_chunks(struct vmm_block *b)
{
    uint64_t g = vmm_devs[b->device].gran, n = b->size / g, i = 0;
    CUresult r = CUDA_SUCCESS;
    for (; i < n; i++)
        if ((r = real_cuMemMap((CUdeviceptr)(b->base + i * g), g, 0, b->chunks[i], 0)) !=
            CUDA_SUCCESS)
            break;
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->device},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = real_cuMemSetAccess((CUdeviceptr)b->base, b->size, &a, 1);
    }
    if (r != CUDA_SUCCESS && i) real_cuMemUnmap((CUdeviceptr)b->base, i * g);
    return r;
}

/* A write-back event of device d (one per victim while its remap is
 * pending), or NULL when none can be made. */
CUevent vmm_ev_get(struct vdev *d)
{
    if (d->nfree_ev) return d->free_ev[--d->nfree_ev];
    CUevent ev = NULL;
    if (real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return NULL;
    return ev;
}

/* ev is no longer used by a block or a pooled chunk: kept for the next victim. */
void vmm_ev_put(struct vdev *d, CUevent ev)
{
    if (d->nfree_ev == d->free_ev_cap) {
        size_t cap = d->free_ev_cap ? d->free_ev_cap * 2 : 16;
        CUevent *p = realloc(d->free_ev, cap * sizeof *p);
        if (!p) {
            real_cuEventDestroy_v2(ev);
            return;
        }
        d->free_ev = p, d->free_ev_cap = cap;
    }
    d->free_ev[d->nfree_ev++] = ev;
}
