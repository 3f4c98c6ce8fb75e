/*
 * driver_pool.c: the stream-ordered allocator of the simulated driver
 * (cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync, with _ptsz
 * twins) and the memory pools it draws from: each device's default pool
 * and pools made with cuMemPoolCreate (cuDeviceGetDefaultMemPool,
 * cuDevice{Get,Set}MemPool, cuMemPoolCreate, cuMemPoolDestroy,
 * cuMemPoolTrimTo, cuMemPoolSet/GetAttribute, cuMemPoolSet/GetAccess).
 * Sharing pools between processes is driver_pool_ipc.c. Kept out of
 * driver.c so that file stays easy to merge; it reaches the driver's
 * per-process state through the sim_drv_* helpers of driver_internal.h.
 *
 * Semantics (NVIDIA's driver API reference, "Stream Ordered Memory
 * Allocator"; what the simulator does differently is marked):
 * - an asynchronous allocation comes from the pool current to the stream's
 *   device (its default pool unless cuDeviceSetMemPool chose another) or,
 *   with cuMemAllocFromPoolAsync, from the pool given, and belongs to the
 *   stream's context; it remembers its pool (the pool's machine-wide id in
 *   the shared allocation table);
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
 *   threshold is stored and reported but changes nothing;
 * - cuMemPoolDestroy of a pool with allocations outstanding returns at
 *   once; the allocations stay valid until freed (NVIDIA: "the resources
 *   associated with the pool will be released automatically once there are
 *   no more outstanding allocations"); as nothing is cached, each free
 *   gives its memory back at once.
 */
#include "driver_pool.h"
#include "driver_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAGIC 0x4c4f4f50u /* "POOL" */

/* Each device's default pool, per process (a CUmemoryPool is a
 * process-local handle), made on first use. */
static struct sim_mempool g_pools[SIM_MAX_DEVICES];
/* Created and imported pools, newest first (never freed: see
 * driver_pool.h), and each device's current pool (NULL: its default). */
static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_mempool *g_list;
static struct sim_mempool *g_current[SIM_MAX_DEVICES]; /* written under g_pool_lock, atomically */

static void pool_fork_child(void)
{
    /* The child must cuInit again and holds none of the parent's pools
     * (their allocations are the parent's): forget them (leaking the
     * copies), as driver.c forgets contexts. */
    pthread_mutex_init(&g_pool_lock, NULL);
    g_list = NULL;
    memset(g_current, 0, sizeof(g_current));
}

__attribute__((constructor)) static void pool_init(void)
{
    pthread_atfork(NULL, NULL, pool_fork_child);
}

static void pool_defaults(struct sim_mempool *p, unsigned dev)
{
    /* Every reuse policy on, release threshold 0, read-write access from
     * its own device only (cuMemPoolCreate: "By default, the pool's memory
     * will be accessible from the device it is allocated on"). */
    p->dev = dev;
    p->follow_events = p->opportunistic = p->internal_deps = 1;
    memset(p->access, CU_MEM_ACCESS_FLAGS_PROT_NONE, sizeof(p->access));
    p->access[dev] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

static struct sim_mempool *default_pool(unsigned dev)
{
    if (dev >= SIM_MAX_DEVICES) return NULL;
    struct sim_mempool *p = &g_pools[dev];
    if (__atomic_load_n(&p->magic, __ATOMIC_ACQUIRE) != POOL_MAGIC) {
        /* Benign race: every thread writes the same values. */
        pool_defaults(p, dev);
        __atomic_store_n(&p->magic, POOL_MAGIC, __ATOMIC_RELEASE);
    }
    return p;
}

struct sim_mempool *sim_pool_find(CUmemoryPool h)
{
    if (!h) return NULL;
    for (unsigned d = 0; d < SIM_MAX_DEVICES; d++)
        if ((void *)h == (void *)&g_pools[d])
            return __atomic_load_n(&g_pools[d].magic, __ATOMIC_ACQUIRE) == POOL_MAGIC ? &g_pools[d]
                                                                                      : NULL;
    struct sim_mempool *p;
    pthread_mutex_lock(&g_pool_lock);
    for (p = g_list; p && (void *)p != (void *)h; p = p->next) {
    }
    if (p && p->dead) p = NULL;
    pthread_mutex_unlock(&g_pool_lock);
    return p;
}

struct sim_mempool *sim_pool_add(enum sim_pool_kind kind, unsigned dev, uint64_t id,
                                 unsigned long long handle_types)
{
    struct sim_mempool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    pool_defaults(p, dev);
    p->kind = kind;
    p->id = id;
    p->handle_types = handle_types;
    p->magic = POOL_MAGIC;
    pthread_mutex_lock(&g_pool_lock);
    p->next = g_list;
    g_list = p;
    pthread_mutex_unlock(&g_pool_lock);
    return p;
}

/* The created pool with machine-wide id `id` (destroyed ones too: their
 * allocations may be outstanding), or NULL. */
static struct sim_mempool *created_by_id(uint64_t id)
{
    struct sim_mempool *p;
    pthread_mutex_lock(&g_pool_lock);
    for (p = g_list; p && !(p->kind == SIM_POOL_CREATED && p->id == id); p = p->next) {
    }
    pthread_mutex_unlock(&g_pool_lock);
    return p;
}

CUmemoryPool sim_pool_handle(unsigned dev, uint64_t pool_id)
{
    return (CUmemoryPool)(pool_id ? created_by_id(pool_id) : default_pool(dev));
}

unsigned long long sim_pool_handle_types(uint64_t pool_id)
{
    struct sim_mempool *p = pool_id ? created_by_id(pool_id) : NULL;
    return p ? p->handle_types : 0;
}

int sim_pool_exported(uint64_t pool_id)
{
    struct sim_mempool *p = pool_id ? created_by_id(pool_id) : NULL;
    return p ? __atomic_load_n(&p->exported, __ATOMIC_ACQUIRE) : 0;
}

/* Bytes in use from pool p in this process (imported pools: 0, see README). */
static uint64_t pool_usage(struct sim_mempool *p)
{
    if (p->kind == SIM_POOL_IMPORTED) return 0;
    uint64_t used = sim_pool_usage(p->dev, p->id);
    if (used > p->used_high) p->used_high = used;
    return used;
}

/* ---- pools ---- */

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || (unsigned)dev >= sim_m->ndev) return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = (CUmemoryPool)default_pool((unsigned)dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUresult r = cuDeviceGetDefaultMemPool(pool, dev);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&g_pool_lock);
    if (g_current[dev]) *pool = (CUmemoryPool)g_current[dev];
    pthread_mutex_unlock(&g_pool_lock);
    return CUDA_SUCCESS;
}

/* "The memory pool must be local to the specified device"; imported pools
 * "may not be used in cuDeviceSetMemPool" (INVALID_VALUE, the code is a
 * guess). */
CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (dev < 0 || (unsigned)dev >= sim_m->ndev) return CUDA_ERROR_INVALID_DEVICE;
    struct sim_mempool *p = sim_pool_find(pool);
    if (!p || p->kind == SIM_POOL_IMPORTED || p->dev != (unsigned)dev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_pool_lock);
    __atomic_store_n(&g_current[dev], p->kind == SIM_POOL_DEFAULT ? NULL : p, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_pool_lock);
    return CUDA_SUCCESS;
}

/* Device memory of one device, with no IPC handle or a POSIX file
 * descriptor; what the simulator has no model for (host or managed pools,
 * other handle types) is CUDA_ERROR_NOT_SUPPORTED, malformed properties are
 * CUDA_ERROR_INVALID_VALUE. Takes the machine lock once, for the pool's
 * machine-wide id. */
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!pool || !props || props->win32SecurityAttributes) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(props->reserved); i++)
        if (props->reserved[i]) return CUDA_ERROR_INVALID_VALUE;
    if (props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED) return CUDA_ERROR_NOT_SUPPORTED;
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    switch (props->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (props->location.id < 0 || (unsigned)props->location.id >= sim_m->ndev)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct sim_mempool *p = sim_pool_add(SIM_POOL_CREATED, (unsigned)props->location.id,
                                         sim_new_serial(), props->handleTypes);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->max_size = props->maxSize;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* Returns at once, also with allocations outstanding (they stay valid until
 * freed); the pool can no longer be used; a device whose current pool it
 * was gets its default pool back. Default pools cannot be destroyed. */
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = sim_pool_find(pool);
    if (!p || p->kind == SIM_POOL_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_pool_lock);
    int was_live = !p->dead;
    p->dead = 1;
    if (g_current[p->dev] == p) __atomic_store_n(&g_current[p->dev], NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_pool_lock);
    return was_live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    (void)minBytesToKeep;
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    return sim_pool_find(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* nothing cached */
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = sim_pool_find(pool);
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
        p->used_high = 0;
        pool_usage(p);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE; /* the CURRENT counters are read-only */
    }
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = sim_pool_find(pool);
    if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
    uint64_t used = pool_usage(p);
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

/* The device a location names, or -1 (only devices are simulated). */
static int access_device(const CUmemLocation *loc)
{
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE || loc->id < 0 || (unsigned)loc->id >= sim_m->ndev)
        return -1;
    return loc->id;
}

/* Stored and answered; access is never enforced (every process can touch
 * every byte of the simulated devices). All descriptors are checked before
 * any is applied. */
CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = sim_pool_find(pool);
    if (!p || (count && !map)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUmemAccess_flags f = map[i].flags;
        if (access_device(&map[i].location) < 0 ||
            (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++)
        p->access[access_device(&map[i].location)] = (unsigned char)map[i].flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                    CUmemLocation *location)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = sim_pool_find(memPool);
    if (!p || !flags || !location) return CUDA_ERROR_INVALID_VALUE;
    int d = access_device(location);
    if (d < 0) return CUDA_ERROR_INVALID_VALUE;
    *flags = (CUmemAccess_flags)p->access[d];
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation ---- */

/* Stream capture (graphs) is not simulated: no stream is ever capturing.
 * Here because stream-ordered allocators ask it before they allocate
 * (cuda.core's pool resources do). */
static CUresult is_capturing(CUstream s, CUstreamCaptureStatus *status)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    unsigned dev;
    uint64_t ctx_id;
    if ((r = sim_drv_stream_ctx(s, &dev, &ctx_id)) != CUDA_SUCCESS) return r;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus);
}

/* Allocates from pool (NULL: the current pool of the stream's device). */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    unsigned dev;
    uint64_t ctx_id;
    if ((r = sim_drv_stream_ctx(s, &dev, &ctx_id)) != CUDA_SUCCESS) return r;
    struct sim_mempool *p = NULL;
    if (pool) {
        p = sim_pool_find(pool);
    } else {
        p = __atomic_load_n(&g_current[dev], __ATOMIC_ACQUIRE); /* set under g_pool_lock */
        if (!p) p = default_pool(dev);
    }
    /* Imported pools "do not support creating new allocations" (the code is
     * a guess). */
    if (!p || p->kind == SIM_POOL_IMPORTED || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (sim_drv_fault_alloc()) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t rsize = (bytesize + SIM_GRANULE - 1) / SIM_GRANULE * SIM_GRANULE;
    if (p->max_size && (rsize > p->max_size || pool_usage(p) > p->max_size - rsize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint8_t *win = sim_window(p->dev); /* the pool's device, which may differ from the stream's */
    if (!win) return CUDA_ERROR_OPERATING_SYSTEM;
    uint32_t index;
    uint64_t offset;
    int rc = sim_alloc_pool(p->dev, bytesize, ctx_id, p->id, &index, &offset);
    if (rc != SIM_OK) return rc == SIM_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)(win + offset);
    sim_drv_count_alloc();
    pool_usage(p);
    return CUDA_SUCCESS;
}

/* Frees at once: all simulated work is already done (see the top). A pool
 * import is released in this process only (driver_pool_ipc.c). */
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
    if (sim_free((unsigned)pool, off) == SIM_OK) return CUDA_SUCCESS;
    return sim_drv_import_free(dptr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
    if (!pool) { /* NULL is no pool (alloc_async reads NULL as "the stream's current") */
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
