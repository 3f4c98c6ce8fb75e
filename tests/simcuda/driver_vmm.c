/*
 * driver_vmm.c: the virtual memory management API (cuMemCreate,
 * cuMemAddressReserve, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease,
 * cuMemAddressFree, cuMemRetainAllocationHandle, the property and
 * granularity queries, cuMemExportToShareableHandle and
 * cuMemImportFromShareableHandle with POSIX fds), as PyTorch's
 * expandable_segments, vLLM's sleep mode, torch_memory_saver and NCCL's
 * cuMem path use it.
 *
 * - Physical memory: cuMemCreate takes an allocation in the machine's table
 *   (SIM_F_VMM, charged to its device like any other, shown by
 *   cuMemGetInfo) and maps nothing. It has no owner: each process holding a
 *   handle or a mapping of it holds one row in the machine's table of opens
 *   (sim_state.h, "VMM memory"), and it is freed when no process holds it
 *   and no exported fd of it is open anywhere (NVIDIA's cuMemRelease: "The
 *   memory allocation will be freed when all outstanding mappings to the
 *   memory are unmapped and when all outstanding references to the handle
 *   (including it's shareable counterparts) are also released").
 * - Virtual addresses: cuMemAddressReserve reserves a PROT_NONE range of
 *   this process; cuMemMap puts a second mapping of the device file's pages
 *   there (mremap of the device window with old size 0, MAP_SHARED), so two
 *   processes that map one allocation see the same bytes; cuMemUnmap puts
 *   the PROT_NONE reservation back.
 * - Access: a mapping starts with no access (NVIDIA: cuMemSetAccess must be
 *   called before use); copies and sets on it fail with
 *   CUDA_ERROR_ILLEGAL_ADDRESS until then (a guess, README "VMM").
 * - Export: a POSIX fd is a new open file description of the machine's one
 *   VMM fd file, as NVIDIA's driver hands out a new open of /dev/nvidiactl
 *   (one inode for every allocation): the description's position names the
 *   allocation's record (magic, ABI, machine id, index, serial, size, check
 *   word), and it holds a read OFD lock on that record; the allocation
 *   stays alive while any such description is open (sim_map.c,
 *   vmm_fd_alive). Import finds the allocation from the description (its
 *   position), never from the file's identity.
 * - Host-located memory (a HOST, HOST_NUMA or HOST_NUMA_CURRENT location):
 *   driver_vmm_host.c; here only the branches that pick it.
 * This process's handles, reservations and mappings are process-local
 * tables under sim_drv_lock (lock order: sim_drv_lock, then the machine
 * mutex, which only create, import, export and the last release take).
 * Pointer queries find mappings with sim_drv_vmm_classify_locked.
 */
#include "driver_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define VMM_GRANULARITY (2ull << 20) /* minimum = recommended, as on NVIDIA's GPUs */
#define VMM_FD_MAGIC 0x564d4953u     /* "SIMV": the record behind an exported fd */
#define VMM_HANDLE_TAG 0x5600000000000000ull
#define VMM_KNOWN_TYPES                                                                            \
    (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |                         \
     CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC)

/* One allocation this process holds: a handle value, its references
 * (create, retain, import: refs) and its mappings (maps). The row is
 * dropped when both are 0. */
struct vmm_handle {
    CUmemGenericAllocationHandle h;
    unsigned dev;
    uint32_t index, row;
    uint64_t serial, offset, size;
    unsigned refs, maps;
    unsigned long long types; /* requestedHandleTypes */
    int host_fd;              /* host-located: its memory (driver_vmm_host.c); else -1 */
    int loc_type;             /* its CU_MEM_LOCATION_TYPE_*, and id */
    int loc_id;
    UT_hash_handle hh;
};

/* A reserved range, or a mapping (kind 1) in one. */
struct vmm_range {
    CUdeviceptr va;
    size_t size;
    int mapping;
    struct vmm_handle *hd; /* mappings: their allocation */
    uint64_t off;          /* mappings: offset in it */
    unsigned char access[SIM_MAX_DEVICES];
    UT_hash_handle hh;
};

/* What an exported fd's file holds. 48 bytes. */
struct vmm_record {
    uint32_t magic;
    uint16_t abi;
    uint16_t device;
    uint32_t index;
    uint32_t zero;
    uint64_t machine_id;
    uint64_t serial;
    uint64_t size;
    uint64_t check;
};

static struct vmm_handle *g_handles;
/* Reservations and mappings. Only ever iterated, never looked up by key
 * (a mapping at its reservation's base repeats the key). */
static struct vmm_range *g_ranges;
static uint64_t g_next_handle = 1;

void sim_drv_vmm_fork_child(void)
{
    /* The child holds no row: its copies of the tables name nothing. */
    g_handles = NULL;
    g_ranges = NULL;
}

static uint64_t record_check(const struct vmm_record *r)
{
    uint64_t c = sim_drv_mix(r->machine_id,
                             ((uint64_t)r->magic << 32) | ((uint64_t)r->abi << 16) | r->device);
    c = sim_drv_mix(c, ((uint64_t)r->index << 32) | r->zero);
    c = sim_drv_mix(c, r->serial);
    return sim_drv_mix(c, r->size);
}

/* A live handle of this process (refs > 0), or NULL. Caller holds sim_drv_lock. */
static struct vmm_handle *handle_find(CUmemGenericAllocationHandle h)
{
    struct vmm_handle *hd = NULL;
    HASH_FIND(hh, g_handles, &h, sizeof(h), hd);
    return hd && hd->refs > 0 ? hd : NULL;
}

/* Forgets hd once nothing of this process refers to it, dropping its row.
 * Caller holds sim_drv_lock. */
static void handle_put(struct vmm_handle *hd)
{
    if (hd->refs > 0 || hd->maps > 0) return;
    HASH_DEL(g_handles, hd);
    if (hd->host_fd >= 0)
        close(hd->host_fd);
    else
        sim_vmm_drop(hd->index, hd->serial, hd->row);
    free(hd);
}

/* A new handle record for a hold just taken; on failure drops the hold.
 * Caller holds sim_drv_lock. */
static CUresult handle_new(unsigned dev, uint32_t index, uint64_t serial, uint64_t offset,
                           uint64_t size, uint32_t row, unsigned long long types,
                           CUmemGenericAllocationHandle *out)
{
    struct vmm_handle *hd = calloc(1, sizeof(*hd));
    if (hd) {
        hd->h = VMM_HANDLE_TAG | g_next_handle++;
        hd->dev = dev, hd->index = index, hd->row = row, hd->serial = serial;
        hd->offset = offset, hd->size = size, hd->refs = 1, hd->types = types;
        hd->host_fd = -1, hd->loc_type = CU_MEM_LOCATION_TYPE_DEVICE, hd->loc_id = (int)dev;
        sim_drv_hash_oom = 0;
        HASH_ADD(hh, g_handles, h, sizeof(hd->h), hd);
        if (!sim_drv_hash_oom) {
            *out = hd->h;
            return CUDA_SUCCESS;
        }
        free(hd);
    }
    sim_vmm_drop(index, serial, row);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* The reservation or mapping (mapping = 1) containing p, or NULL. Caller
 * holds sim_drv_lock. */
static struct vmm_range *range_at(CUdeviceptr p, int mapping)
{
    struct vmm_range *r, *tmp;
    HASH_ITER(hh, g_ranges, r, tmp)
    {
        if (r->mapping == mapping && p >= r->va && p - r->va < r->size) return r;
    }
    return NULL;
}

/* Whether [p, p + n) is exactly a run of adjacent mappings (every byte
 * mapped, the first starting at p, the last ending at p + n). Caller holds
 * sim_drv_lock. */
static int mapped_run(CUdeviceptr p, size_t n)
{
    CUdeviceptr at = p;
    while (at - p < n) {
        struct vmm_range *m = range_at(at, 1);
        if (!m || m->va != at || m->size > n - (at - p)) return 0;
        at += m->size;
    }
    return n > 0;
}

/* ---- properties ---- */

/* Checks a CUmemAllocationProp: pinned device memory of a device of the
 * machine, handle types none or POSIX fd (WIN32 and FABRIC: NOT_SUPPORTED,
 * as a device without them answers). */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    if (sim_drv_vmm_host_location(&prop->location)) return sim_drv_vmm_host_check(prop);
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
    if (!sim_drv_valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
    unsigned long long t = (unsigned long long)prop->requestedHandleTypes;
    if (t & ~(unsigned long long)VMM_KNOWN_TYPES) return CUDA_ERROR_INVALID_VALUE;
    if (t & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    ENTER();
    if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop);
    if (r != CUDA_SUCCESS) return r;
    *granularity = VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    ENTER();
    if (!prop) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_handle *hd = handle_find(handle);
    if (hd) {
        memset(prop, 0, sizeof(*prop));
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->location.type = (CUmemLocationType)hd->loc_type;
        prop->location.id = hd->loc_id;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)hd->types;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return hd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- physical memory ---- */

/* size: a non-zero multiple of the granularity; flags 0. Needs no current
 * context (the allocation belongs to no context). Takes the machine lock. */
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    ENTER();
    if (!handle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop);
    if (r != CUDA_SUCCESS) return r;
    if (size == 0 || size % VMM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        sim_drv_fault(SIMCUDA_FAULT_VMM_SHAREABLE))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (sim_drv_fault_alloc()) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_drv_vmm_host_location(&prop->location)) {
        if (sim_drv_fault(SIMCUDA_FAULT_VMM_HOST)) return CUDA_ERROR_NOT_SUPPORTED;
        int fd = sim_drv_vmm_host_create(size);
        if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
        uint64_t serial = sim_new_serial(); /* its BUFFER_ID, unique like any other */
        pthread_mutex_lock(&sim_drv_lock);
        r = handle_new(0, 0, serial, 0, size, 0, CU_MEM_HANDLE_TYPE_NONE, handle);
        struct vmm_handle *hd = r == CUDA_SUCCESS ? handle_find(*handle) : NULL;
        if (hd) {
            hd->host_fd = fd;
            hd->loc_type = prop->location.type;
            hd->loc_id =
                prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? prop->location.id : 0;
        }
        pthread_mutex_unlock(&sim_drv_lock);
        if (!hd) close(fd);
        return hd ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    unsigned dev = (unsigned)prop->location.id;
    if (!sim_window(dev)) return CUDA_ERROR_OPERATING_SYSTEM;
    uint32_t index, row;
    uint64_t offset, serial;
    pthread_mutex_lock(&sim_drv_lock);
    int rc = sim_vmm_create(dev, size, &index, &offset, &serial, &row);
    if (rc == SIM_OK)
        r = handle_new(dev, index, serial, offset, size, row,
                       (unsigned long long)prop->requestedHandleTypes, handle);
    else
        r = rc == SIM_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&sim_drv_lock);
    if (r == CUDA_SUCCESS) sim_drv_count(&sim_drv_counts.allocs);
    return r;
}

/* One reference less; an unknown or already released handle:
 * CUDA_ERROR_INVALID_VALUE. The allocation goes when nothing holds it. */
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER();
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_handle *hd = handle_find(handle);
    if (hd) {
        hd->refs--;
        handle_put(hd);
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return hd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* addr: any address inside a mapping; returns that allocation's handle
 * (the value it was created or imported with) with one more reference. */
CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    ENTER();
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_range *m = range_at((CUdeviceptr)(uintptr_t)addr, 1);
    if (m) {
        m->hd->refs++;
        *handle = m->hd->h;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- virtual addresses ---- */

/* size: a non-zero multiple of the granularity; alignment 0 (the
 * granularity) or a power of two; addr: a hint, honoured when that range is
 * free and aligned; flags 0. */
CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    ENTER();
    if (!ptr || flags != 0 || size == 0 || size % VMM_GRANULARITY || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > VMM_GRANULARITY ? alignment : VMM_GRANULARITY;
    if (size > SIZE_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
    int prot = PROT_NONE, fl = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    uint8_t *p = MAP_FAILED;
    if (addr && addr % align == 0) {
        p = mmap((void *)(uintptr_t)addr, size, prot, fl | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && (CUdeviceptr)(uintptr_t)p != addr) {
            munmap(p, size); /* a kernel without MAP_FIXED_NOREPLACE placed it elsewhere */
            p = MAP_FAILED;
        }
    }
    if (p == MAP_FAILED) {
        uint8_t *q = mmap(NULL, size + align, prot, fl, -1, 0);
        if (q == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
        uintptr_t a = ((uintptr_t)q + align - 1) & ~(uintptr_t)(align - 1);
        if (a > (uintptr_t)q) munmap(q, a - (uintptr_t)q);
        if ((uintptr_t)q + size + align > a + size)
            munmap((void *)(a + size), (uintptr_t)q + size + align - (a + size));
        p = (uint8_t *)a;
    }
    struct vmm_range *r = calloc(1, sizeof(*r));
    pthread_mutex_lock(&sim_drv_lock);
    if (r) {
        r->va = (CUdeviceptr)(uintptr_t)p;
        r->size = size;
        sim_drv_hash_oom = 0;
        HASH_ADD(hh, g_ranges, va, sizeof(r->va), r);
        if (sim_drv_hash_oom) {
            free(r);
            r = NULL;
        }
    }
    pthread_mutex_unlock(&sim_drv_lock);
    if (!r) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Exactly a reserved range (its base and size) with nothing mapped in it;
 * anything else: CUDA_ERROR_INVALID_VALUE. */
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    ENTER();
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_range *res = range_at(ptr, 0), *m, *tmp;
    int busy = 0;
    if (res && res->va == ptr && res->size == size) {
        HASH_ITER(hh, g_ranges, m, tmp)
        {
            if (m->mapping && m->va >= res->va && m->va - res->va < res->size) busy = 1;
        }
        if (!busy) {
            HASH_DEL(g_ranges, res);
            munmap((void *)(uintptr_t)res->va, res->size);
            free(res);
            r = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}

/* Maps [offset, offset + size) of the allocation at [ptr, ptr + size),
 * which must lie in one reservation and overlap no mapping; sizes and
 * offsets multiples of the granularity; flags 0. No access until
 * cuMemSetAccess. */
CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    ENTER();
    if (flags != 0 || size == 0 || size % VMM_GRANULARITY || offset % VMM_GRANULARITY ||
        ptr % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_drv_fault(SIMCUDA_FAULT_VMM_MAP)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_handle *hd = handle_find(handle);
    struct vmm_range *res = range_at(ptr, 0), *m, *tmp;
    int ok = hd && res && offset <= hd->size && size <= hd->size - offset &&
             size <= res->size - (ptr - res->va);
    if (ok) {
        HASH_ITER(hh, g_ranges, m, tmp)
        {
            if (m->mapping && m->va < ptr + size && ptr < m->va + m->size) ok = 0;
        }
    }
    uint8_t *win = ok && hd->host_fd < 0 ? sim_window(hd->dev) : NULL;
    struct vmm_range *nm = win || (ok && hd->host_fd >= 0) ? calloc(1, sizeof(*nm)) : NULL;
    if (nm) {
        /* A second mapping of the device file's pages (old size 0 on a
         * shared mapping), in place of the reservation's; host-located
         * memory maps its own file. */
        void *at = hd->host_fd >= 0 ? sim_drv_vmm_host_map(hd->host_fd, offset, size, ptr)
                                    : mremap(win + hd->offset + offset, 0, size,
                                             MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(uintptr_t)ptr);
        if (at == MAP_FAILED) {
            free(nm);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            nm->va = ptr, nm->size = size, nm->mapping = 1, nm->hd = hd, nm->off = offset;
            sim_drv_hash_oom = 0; /* (keys repeat: a mapping at its reservation's base) */
            HASH_ADD(hh, g_ranges, va, sizeof(nm->va), nm);
            if (sim_drv_hash_oom) {
                mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
                free(nm);
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                hd->maps++;
                r = CUDA_SUCCESS;
            }
        }
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}

/* [ptr, ptr + size) must be exactly one or more whole adjacent mappings
 * (NVIDIA: a sub-range of a mapping cannot be unmapped); anything else:
 * CUDA_ERROR_INVALID_VALUE, nothing unmapped. The reservation stays. */
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER();
    pthread_mutex_lock(&sim_drv_lock);
    int ok = mapped_run(ptr, size);
    struct vmm_range *res = ok ? range_at(ptr, 0) : NULL;
    if (res)
        sim_drv_queue_unmapped_locked(res->va, res->size, ptr, size); /* queued work on it dies */
    CUdeviceptr at = ptr;
    while (ok && at - ptr < size) {
        struct vmm_range *m = range_at(at, 1);
        at += m->size;
        mmap((void *)(uintptr_t)m->va, m->size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        HASH_DEL(g_ranges, m);
        m->hd->maps--;
        handle_put(m->hd);
        free(m);
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Sets the access of devices desc[0..count) to [ptr, ptr + size), which
 * must be exactly a run of whole mappings. Flags NONE, READ, READWRITE;
 * READ is recorded but not enforced (README "VMM"). */
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    ENTER();
    if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
        if (!sim_drv_valid_device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&sim_drv_lock);
    int ok = mapped_run(ptr, size);
    for (CUdeviceptr at = ptr; ok && at - ptr < size;) {
        struct vmm_range *m = range_at(at, 1);
        for (size_t i = 0; i < count; i++)
            m->access[desc[i].location.id] = (unsigned char)desc[i].flags;
        at += m->size;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                CUdeviceptr ptr)
{
    ENTER();
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(location->id)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_range *m = range_at(ptr, 1);
    if (m) *flags = m->access[location->id];
    pthread_mutex_unlock(&sim_drv_lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- shareable handles ---- */

/* POSIX fd only, and only for an allocation created with that handle type
 * (else CUDA_ERROR_INVALID_VALUE); flags 0. Each call gives a new fd (no
 * FD_CLOEXEC), which keeps the allocation alive while it is open anywhere;
 * the caller owns it. Takes the machine lock. */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    ENTER();
    if (!shareableHandle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_handle *hd = handle_find(handle);
    if (hd && handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
        (hd->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        struct vmm_record rec;
        memset(&rec, 0, sizeof(rec));
        rec.magic = VMM_FD_MAGIC;
        rec.abi = SIM_ABI;
        rec.device = (uint16_t)hd->dev;
        rec.index = hd->index;
        rec.machine_id = sim_m->machine_id;
        rec.serial = hd->serial;
        rec.size = hd->size;
        rec.check = record_check(&rec);
        int fd = sim_vmm_fd_open(hd->index, hd->serial, &rec, sizeof(rec));
        if (fd >= 0 && fcntl(fd, F_SETFD, 0) == 0) {
            *(int *)shareableHandle = fd;
            r = CUDA_SUCCESS;
        } else {
            if (fd >= 0) close(fd);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}

/* The record that fd (osHandle) names: the machine's VMM fd file (the same
 * inode), at the description's position. 0, or -1 for any other fd (never
 * blocks: a pipe or socket fails the inode check first). */
static int fd_record(void *os_handle, struct vmm_record *rec)
{
    uintptr_t h = (uintptr_t)os_handle;
    char name[192];
    struct stat st, mine;
    if (h > INT32_MAX || fstat((int)h, &st) < 0) return -1;
    sim_vmm_file_name(name, sizeof(name));
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    int same = fstat(fd, &mine) == 0 && mine.st_dev == st.st_dev && mine.st_ino == st.st_ino;
    close(fd);
    off_t at = same ? lseek((int)h, 0, SEEK_CUR) : -1;
    if (at < 0 || at % SIM_VMM_RECORD ||
        pread((int)h, rec, sizeof(*rec), at) != (ssize_t)sizeof(*rec))
        return -1;
    return 0;
}

/* osHandle is the fd itself, cast to a pointer. Anything but an exported
 * fd of a live VMM allocation of this machine (another file, a pipe, a
 * closed fd, a forged record): CUDA_ERROR_INVALID_VALUE; a handle type
 * other than POSIX fd: CUDA_ERROR_NOT_SUPPORTED for WIN32/FABRIC (no such
 * handles here), CUDA_ERROR_INVALID_VALUE otherwise. The fd stays the
 * caller's. A process that already holds the allocation gets its handle
 * again, with one more reference. Takes the machine lock. */
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    ENTER();
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return (shHandleType & VMM_KNOWN_TYPES) ? CUDA_ERROR_NOT_SUPPORTED
                                                : CUDA_ERROR_INVALID_VALUE;
    struct vmm_record rec;
    if (fd_record(osHandle, &rec) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (rec.magic != VMM_FD_MAGIC || rec.abi != SIM_ABI || rec.machine_id != sim_m->machine_id ||
        rec.check != record_check(&rec) || rec.zero != 0 || rec.device >= sim_m->ndev ||
        rec.index >= sim_m->max_allocs || rec.serial == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_drv_lock);
    struct vmm_handle *hd, *tmp;
    HASH_ITER(hh, g_handles, hd, tmp)
    {
        if (hd->index == rec.index && hd->serial == rec.serial) break;
    }
    if (hd) {
        hd->refs++;
        *handle = hd->h;
        r = CUDA_SUCCESS;
    } else {
        unsigned dev;
        uint64_t offset, size;
        uint32_t row;
        int rc = sim_vmm_hold(rec.index, rec.serial, &dev, &offset, &size, &row);
        if (rc == SIM_OK && (dev != rec.device || size != rec.size)) {
            sim_vmm_drop(rec.index, rec.serial, row);
            rc = SIM_EINVAL;
        }
        if (rc == SIM_OK)
            r = handle_new(dev, rec.index, rec.serial, offset, size, row,
                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, handle);
        else if (rc == SIM_ENOMEM)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}

/* ---- pointers ---- */

int sim_drv_vmm_classify_locked(CUdeviceptr p, struct ptr_info *out)
{
    if (!g_ranges) return 0;
    struct vmm_range *m = range_at(p, 1);
    if (!m) return 0;
    out->kind = PTR_DEVICE;
    out->dev = m->hd->dev;
    out->base = m->va;
    out->size = m->size;
    out->serial = m->hd->serial;
    out->flags = SIM_F_VMM;
    out->ctx = NULL;
    out->handle_types = m->hd->types;
    out->access = m->access[m->hd->dev];
    return 1;
}

CUresult sim_drv_vmm_check_range(CUdeviceptr p, size_t n)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sim_drv_lock);
    CUdeviceptr at = p, end = p + n;
    while (r == CUDA_SUCCESS && at < end) {
        struct vmm_range *m = range_at(at, 1);
        if (!m)
            r = CUDA_ERROR_INVALID_VALUE; /* runs past the mapped range */
        else if (m->access[m->hd->dev] == CU_MEM_ACCESS_FLAGS_PROT_NONE)
            r = CUDA_ERROR_ILLEGAL_ADDRESS;
        else
            at = m->va + m->size;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}
