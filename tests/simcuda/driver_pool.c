/*
 * driver_pool.c: the stream-ordered allocator of the simulated driver
 * (cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync, with _ptsz
 * twins) and the one memory pool per device it draws from
 * (cuDeviceGetDefaultMemPool, cuDeviceGetMemPool, cuMemPoolTrimTo,
 * cuMemPoolSet/GetAttribute). Kept out of driver.c so that file stays easy
 * to merge; it reaches driver.c's per-process state through the sim_drv_*
 * helpers declared there.
 *
 * Semantics (NVIDIA's driver API reference, "Stream Ordered Memory
 * Allocator"; what the simulator does differently is marked):
 * - an asynchronous allocation comes from the pool current to the stream's
 *   device (here always that device's default pool: cuDeviceSetMemPool and
 *   cuMemPoolCreate are not simulated) and belongs to the stream's context;
 * - it is ordinary device memory of that device (copies, sets, launches,
 *   cuMemGetInfo, cuMemFree all see it), flagged SIM_F_POOL: legacy IPC
 *   refuses it (cuIpcGetMemHandle: CUDA_ERROR_INVALID_VALUE, as users of the
 *   real driver report, openucx/ucx#10065) and
 *   CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE answers its pool;
 * - cuMemFreeAsync frees "after the work queued on the stream". The
 *   simulator runs every operation synchronously, so that work is done when
 *   the call is made: the block is released at once (simulator choice; the
 *   real driver returns it to the pool when the stream reaches the free). It
 *   also takes cuMemAlloc memory, as NVIDIA's programming guide allows;
 * - the pool never caches freed memory (simulator choice): reserved ==
 *   used, cuMemPoolTrimTo has nothing to trim and succeeds, the release
 *   threshold is stored and reported but changes nothing.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "sim_state.h"

#include <string.h>

#define POOL_MAGIC 0x4c4f4f50u /* "POOL" */

/* Shared with driver.c (declared there too). */
SIM_INTERNAL CUresult sim_drv_enter(void);
SIM_INTERNAL CUresult sim_drv_stream_ctx(CUstream s, unsigned *dev, uint64_t *ctx_id);
SIM_INTERNAL int sim_drv_fault_alloc(void);
SIM_INTERNAL void sim_drv_count_alloc(void);
SIM_INTERNAL CUmemoryPool sim_pool_of_device(unsigned dev);

/* A device's default pool, per process (a CUmemoryPool is a process-local
 * handle). Attributes only; the memory is the device's. */
struct sim_mempool {
    uint32_t magic;
    unsigned dev;
    uint64_t release_threshold;
    int follow_events, opportunistic, internal_deps;
    uint64_t used_high; /* highest sim_pool_usage seen at an allocation */
};

static struct sim_mempool g_pools[SIM_MAX_DEVICES];

CUmemoryPool sim_pool_of_device(unsigned dev)
{
    if (dev >= SIM_MAX_DEVICES) return NULL;
    struct sim_mempool *p = &g_pools[dev];
    if (p->magic != POOL_MAGIC) {
        /* Defaults of the real default pool: every reuse policy on, release
         * threshold 0. Benign race: every thread writes the same values. */
        p->dev = dev;
        p->follow_events = p->opportunistic = p->internal_deps = 1;
        __atomic_store_n(&p->magic, POOL_MAGIC, __ATOMIC_RELEASE);
    }
    return (CUmemoryPool)p;
}

/* The pool behind handle h, or NULL when h is no pool of this process. */
static struct sim_mempool *pool_lookup(CUmemoryPool h)
{
    for (unsigned d = 0; d < SIM_MAX_DEVICES; d++)
        if ((void *)h == (void *)&g_pools[d] && g_pools[d].magic == POOL_MAGIC) return &g_pools[d];
    return NULL;
}

/* ---- pools ---- */

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || (unsigned)dev >= sim_m->ndev) return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = sim_pool_of_device((unsigned)dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return cuDeviceGetDefaultMemPool(pool, dev); /* no cuDeviceSetMemPool here */
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    (void)minBytesToKeep;
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    return pool_lookup(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* nothing cached */
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = pool_lookup(pool);
    if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        p->follow_events = *(int *)value != 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        p->opportunistic = *(int *)value != 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->internal_deps = *(int *)value != 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->release_threshold = *(cuuint64_t *)value;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* Documented: may only be reset, to 0 (then it restarts from now). */
        if (*(cuuint64_t *)value != 0) return CUDA_ERROR_INVALID_VALUE;
        p->used_high = sim_pool_usage(p->dev);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE; /* the CURRENT counters are read-only */
    }
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = pool_lookup(pool);
    if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
    uint64_t used = sim_pool_usage(p->dev);
    if (used > p->used_high) p->used_high = used;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        *(int *)value = p->follow_events;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        *(int *)value = p->opportunistic;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->internal_deps;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = p->release_threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: /* nothing cached: reserved == used */
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = used;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = p->used_high;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation ---- */

/* Allocates from pool (NULL: the stream's device's default pool). */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    unsigned dev;
    uint64_t ctx_id;
    if ((r = sim_drv_stream_ctx(s, &dev, &ctx_id)) != CUDA_SUCCESS) return r;
    struct sim_mempool *p =
        pool ? pool_lookup(pool) : (struct sim_mempool *)sim_pool_of_device(dev);
    if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (sim_drv_fault_alloc()) return CUDA_ERROR_OUT_OF_MEMORY;
    uint8_t *win = sim_window(p->dev); /* the pool's device, which may differ from the stream's */
    if (!win) return CUDA_ERROR_OPERATING_SYSTEM;
    uint32_t index;
    uint64_t offset;
    int rc = sim_alloc(p->dev, bytesize, ctx_id, SIM_F_POOL, p->dev, &index, &offset);
    if (rc != SIM_OK) return rc == SIM_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)(win + offset);
    sim_drv_count_alloc();
    uint64_t used = sim_pool_usage(p->dev);
    if (used > p->used_high) p->used_high = used;
    return CUDA_SUCCESS;
}

/* Frees at once: all simulated work is already done (see the top). */
static CUresult free_async(CUdeviceptr dptr, CUstream s)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    unsigned dev;
    uint64_t ctx_id;
    if ((r = sim_drv_stream_ctx(s, &dev, &ctx_id)) != CUDA_SUCCESS) return r;
    uint64_t off;
    int pool = sim_window_of((uintptr_t)dptr, &off);
    if (!dptr || pool < 0 || (unsigned)pool == SIM_POOL_MANAGED) return CUDA_ERROR_INVALID_VALUE;
    return sim_free((unsigned)pool, off) == SIM_OK ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
    if (!pool) { /* NULL is no pool (alloc_async reads NULL as "the stream's default") */
        CUresult r = sim_drv_enter();
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    }
    return alloc_async(dptr, bytesize, pool, hStream);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream)
{
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}
