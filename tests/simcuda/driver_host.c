/*
 * driver_host.c: pinned host memory: cuMemHostAlloc (plain page-aligned
 * memory, recorded so that pointer queries and copies know it) and
 * cuMemHostRegister (the program's own memory, recorded, never freed here).
 * Each record belongs to the context current at its creation and goes with
 * it (driver_ctx.c).
 */
#include "driver_internal.h"

#include <stdlib.h>

/* ---- host memory ---- */

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    ENTER();
    if (!pp || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct host_alloc *h = calloc(1, sizeof(*h));
    void *p = NULL;
    if (!h || posix_memalign(&p, 4096, bytesize) != 0) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->ptr = p;
    h->size = bytesize;
    h->ctx = c;
    pthread_mutex_lock(&sim_drv_lock);
    h->id = sim_drv_next_id++;
    sim_drv_hash_oom = 0;
    HASH_ADD_PTR(sim_drv_host, ptr, h);
    int oom = sim_drv_hash_oom;
    pthread_mutex_unlock(&sim_drv_lock);
    if (oom) {
        free(p);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    ENTER();
    struct host_alloc *h = NULL;
    pthread_mutex_lock(&sim_drv_lock);
    if (p) HASH_FIND_PTR(sim_drv_host, &p, h);
    if (h && !h->registered) HASH_DEL(sim_drv_host, h);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!h || h->registered) return CUDA_ERROR_INVALID_VALUE;
    free(h->ptr);
    free(h);
    return CUDA_SUCCESS;
}

/* Page-locks the program's own [p, p + bytesize): afterwards it counts as
 * pinned host memory, as cuMemHostAlloc's does. A range that overlaps one
 * registered or allocated already is refused as the driver refuses it. */
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    ENTER();
    if (!p || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct host_alloc *h = calloc(1, sizeof(*h)), *o, *tmp;
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    h->ptr = p;
    h->size = bytesize;
    h->ctx = c;
    h->registered = true;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sim_drv_lock);
    HASH_ITER(hh, sim_drv_host, o, tmp)
    {
        if ((uintptr_t)p < (uintptr_t)o->ptr + o->size &&
            (uintptr_t)o->ptr < (uintptr_t)p + bytesize)
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (r == CUDA_SUCCESS) {
        h->id = sim_drv_next_id++;
        sim_drv_hash_oom = 0;
        HASH_ADD_PTR(sim_drv_host, ptr, h);
        if (sim_drv_hash_oom) r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    if (r != CUDA_SUCCESS) free(h);
    return r;
}

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    ENTER();
    struct host_alloc *h = NULL;
    pthread_mutex_lock(&sim_drv_lock);
    if (p) HASH_FIND_PTR(sim_drv_host, &p, h);
    if (h && h->registered) HASH_DEL(sim_drv_host, h);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!h || !h->registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    free(h);
    return CUDA_SUCCESS;
}

/* The device's address of pinned host memory: with unified addressing, the
 * host address itself. */
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    ENTER();
    if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    if (sim_drv_classify((CUdeviceptr)(uintptr_t)p, &pi) != PTR_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
