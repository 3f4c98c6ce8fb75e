/*
 * driver_pool_ipc.c: sharing stream-ordered pool memory between processes
 * (cuMemPoolExportToShareableHandle, cuMemPoolImportFromShareableHandle,
 * cuMemPoolExportPointer, cuMemPoolImportPointer), as cuda.core's
 * IPC-enabled DeviceMemoryResource, PyTorch, RAPIDS and UCX use it.
 *
 * Two phases, as in NVIDIA's programming guide ("Interprocess communication
 * support" of the stream-ordered allocator): share the pool, then share
 * allocations from it.
 * - The pool: a pool created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
 *   exports as a real file descriptor (a sealed memfd holding a small
 *   record: magic, ABI, the machine's id, the pool's machine-wide id, its
 *   device, a check word), so it crosses processes by SCM_RIGHTS or fork
 *   like NVIDIA's. Importing reads and checks the record and makes a
 *   process-local imported pool; the fd stays the caller's.
 * - An allocation: 64 bytes of export data (magic, ABI, device, table
 *   index, the machine's id, the pool's id, the allocation's serial, offset,
 *   size, a check word). The serial names the allocation machine-wide and is
 *   never reused, so the data of a freed allocation never opens a later one
 *   at the same address. Exporting marks the allocation exported (as
 *   cuIpcGetMemHandle does), so its release poisons it.
 * - Importing a pointer is a legacy IPC open in all but name: one row in the
 *   machine's table of IPC opens in force (kind SIM_MAP_POOL; no machine
 *   lock in the common case, see sim_state.h), and a record in driver_ipc.c's
 *   table of mappings, so copies, sets, pointer queries and context
 *   teardown treat it like an open mapping. It is this process's window
 *   base + the allocation's offset, so it differs between processes. The
 *   importer frees it with cuMemFree or cuMemFreeAsync, which unmaps it here
 *   and drops the row; the exporter's allocation is untouched. A second
 *   import of the same allocation in the same context returns the same
 *   pointer, not counted: one free ends both (NVIDIA's driver, H200).
 * - A pointer exports only once its pool has been exported (NVIDIA's
 *   driver refuses it before with CUDA_ERROR_INVALID_VALUE, H200).
 * - NVIDIA: "The imported memory must be freed from all importing processes
 *   before being freed in the exporting process." An exporter that frees
 *   first gets what legacy IPC gets under SIMCUDA_FREE_WHILE_MAPPED (the
 *   sim_owner_release_locked handshake in sim_map.c): poison (released and
 *   poisoned now) or keep (kept, charged, intact until the last import
 *   goes). Importer death, exporter exit or death: as for legacy IPC.
 */
#include "driver_pool.h"
#include "driver_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define POOL_FD_MAGIC 0x504d4953u  /* "SIMP": the record behind an exported pool's fd */
#define PTR_DATA_MAGIC 0x584d4953u /* "SIMX": CUmemPoolPtrExportData */

/* What an exported pool's file descriptor holds. 48 bytes. */
struct pool_record {
    uint32_t magic;
    uint16_t abi;
    uint16_t device;
    uint64_t machine_id;
    uint64_t pool_id;
    uint64_t handle_types;
    int64_t exporter_pid; /* informational */
    uint64_t check;
};

/* The wire format of CUmemPoolPtrExportData (64 bytes). */
struct ptr_data {
    uint32_t magic;
    uint16_t abi;
    uint16_t device;
    uint32_t index;
    uint32_t zero;
    uint64_t machine_id;
    uint64_t pool_id;
    uint64_t serial;
    uint64_t offset;
    uint64_t size;
    uint64_t check;
};
_Static_assert(sizeof(struct ptr_data) == sizeof(CUmemPoolPtrExportData),
               "pool export data is 64 bytes");

static uint64_t record_check(const struct pool_record *r)
{
    uint64_t c = sim_drv_mix(r->machine_id,
                             ((uint64_t)r->magic << 32) | ((uint64_t)r->abi << 16) | r->device);
    c = sim_drv_mix(c, r->pool_id);
    c = sim_drv_mix(c, r->handle_types);
    return sim_drv_mix(c, (uint64_t)r->exporter_pid);
}

static uint64_t data_check(const struct ptr_data *d)
{
    uint64_t c = sim_drv_mix(d->machine_id,
                             ((uint64_t)d->magic << 32) | ((uint64_t)d->abi << 16) | d->device);
    c = sim_drv_mix(c, ((uint64_t)d->index << 32) | d->zero);
    c = sim_drv_mix(c, d->pool_id);
    c = sim_drv_mix(c, d->serial);
    c = sim_drv_mix(c, d->offset);
    return sim_drv_mix(c, d->size);
}

/* ---- the pool ---- */

/* A new fd (no FD_CLOEXEC: like any handle the caller owns, it is the
 * caller's to keep from exec'd programs) on a sealed memfd holding the
 * pool's record. Takes no lock. */
CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = sim_pool_find(pool);
    /* Only a pool created with the handle type exports it (docs: "create a
     * mempool with a CUmemAllocationHandleType other than
     * CU_MEM_HANDLE_TYPE_NONE"); default and imported pools never do. */
    if (!handle_out || flags != 0 || !p || p->kind != SIM_POOL_CREATED ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    struct pool_record rec;
    memset(&rec, 0, sizeof(rec));
    rec.magic = POOL_FD_MAGIC;
    rec.abi = SIM_ABI;
    rec.device = (uint16_t)p->dev;
    rec.machine_id = sim_m->machine_id;
    rec.pool_id = p->id;
    rec.handle_types = p->handle_types;
    rec.exporter_pid = getpid();
    rec.check = record_check(&rec);
    int fd = memfd_create("simcuda-mempool", MFD_ALLOW_SEALING);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, &rec, sizeof(rec), 0) != (ssize_t)sizeof(rec) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)handle_out = fd;
    __atomic_store_n(&p->exported, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* handle is the fd itself, cast to a pointer ((void *)(uintptr_t)fd), as
 * NVIDIA's driver takes it. Anything but a simulator pool of this machine
 * (another file, a pipe, a socket, a closed fd, another machine's pool) is
 * CUDA_ERROR_INVALID_VALUE. Each call makes a new imported pool; the fd is
 * not closed. Takes no lock. */
CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                    CUmemAllocationHandleType handleType,
                                                    unsigned long long flags)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!pool_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    struct pool_record rec;
    if (sim_drv_fd_record(handle, &rec, sizeof rec) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (rec.magic != POOL_FD_MAGIC || rec.abi != SIM_ABI || rec.machine_id != sim_m->machine_id ||
        rec.check != record_check(&rec) || rec.device >= sim_m->ndev || rec.pool_id == 0 ||
        !(rec.handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_mempool *p =
        sim_pool_add(SIM_POOL_IMPORTED, rec.device, rec.pool_id, rec.handle_types);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* ---- allocations ---- */

/* Any pointer into a live allocation of this process from a pool created
 * with a shareable handle type (interior pointers export the whole
 * allocation, as cuIpcGetMemHandle does here). Default-pool, cuMemAlloc,
 * managed and imported memory, memory of a pool without a handle type, and
 * memory of a pool not yet exported by cuMemPoolExportToShareableHandle
 * (NVIDIA's driver refuses those too: probe pool-export-order, H200,
 * 2026-11-26): CUDA_ERROR_INVALID_VALUE. Takes the machine lock (it marks
 * the allocation exported, which other processes' imports and the owner's
 * free read). */
CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    if (!shareData_out) return CUDA_ERROR_INVALID_VALUE;
    uint64_t off;
    int dev = sim_window_of((uintptr_t)ptr, &off);
    struct sim_own own;
    if (dev < 0 || (unsigned)dev == SIM_POOL_MANAGED || sim_own_find((unsigned)dev, off, &own) ||
        !(own.flags & SIM_F_POOL) || own.pool_id == 0 ||
        !(sim_pool_handle_types(own.pool_id) & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
        !sim_pool_exported(own.pool_id))
        return CUDA_ERROR_INVALID_VALUE;
    struct ptr_data d;
    memset(&d, 0, sizeof(d));
    r = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_alloc *a = sim_entry(own.index);
    if (a->state == SIM_SLOT_LIVE && a->serial == own.serial && sim_is_mine(a) &&
        (a->flags & SIM_F_POOL) && a->pool_id == own.pool_id) {
        __atomic_fetch_or(&a->flags, SIM_F_EXPORTED, __ATOMIC_SEQ_CST);
        d.magic = PTR_DATA_MAGIC;
        d.abi = SIM_ABI;
        d.device = (uint16_t)dev;
        d.index = own.index;
        d.machine_id = sim_m->machine_id;
        d.pool_id = own.pool_id;
        d.serial = a->serial;
        d.offset = a->offset;
        d.size = a->size;
        d.check = data_check(&d);
        r = CUDA_SUCCESS;
    }
    sim_unlock();
    if (r == CUDA_SUCCESS) {
        memcpy(shareData_out, &d, sizeof(d));
        sim_drv_count_pool_export();
    }
    return r;
}

/* pool: an imported pool of this process that imports the data's pool.
 * Needs a current context (the import belongs to it, like an IPC open).
 * Forged, truncated or foreign data, a pool that does not match, an
 * allocation that is freed (kept ones too), reused or whose owner died, or
 * one of this process's own: CUDA_ERROR_INVALID_VALUE; the machine's table
 * of opens full: CUDA_ERROR_OUT_OF_MEMORY. No machine lock in the common
 * case (as cuIpcOpenMemHandle). */
CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                        CUmemPoolPtrExportData *shareData)
{
    CUresult r = sim_drv_enter();
    if (r != CUDA_SUCCESS) return r;
    struct sim_mempool *p = sim_pool_find(pool);
    if (!ptr_out || !shareData || !p || p->kind != SIM_POOL_IMPORTED)
        return CUDA_ERROR_INVALID_VALUE;
    struct ptr_data d;
    memcpy(&d, shareData, sizeof(d));
    if (d.magic != PTR_DATA_MAGIC || d.abi != SIM_ABI || d.machine_id != sim_m->machine_id ||
        d.check != data_check(&d) || d.zero != 0 || d.device >= sim_m->ndev ||
        d.index >= sim_m->max_allocs || d.serial == 0 || d.pool_id != p->id || d.device != p->dev)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned cdev;
    uint64_t ctx_id;
    if ((r = sim_drv_stream_ctx(NULL, &cdev, &ctx_id)) != CUDA_SUCCESS) return r;
    uint8_t *win = sim_window(d.device);
    if (!win) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Imported already in this context: the same pointer, not counted, so
     * its first free ends it and a second free is refused (NVIDIA's driver:
     * probe pool-import-pointer-twice, H200, 2026-11-26). */
    CUdeviceptr again = sim_drv_import_existing(d.device, d.index, d.serial, ctx_id);
    if (again) {
        *ptr_out = again;
        return CUDA_SUCCESS;
    }
    uint32_t row = 0;
    switch (sim_map_open(d.index, d.serial, d.device, d.offset, ctx_id, SIM_MAP_POOL, &row)) {
    case SIM_OK:
        break;
    case SIM_ENOMEM:
        return CUDA_ERROR_OUT_OF_MEMORY; /* machine-wide table of opens full */
    default:
        return CUDA_ERROR_INVALID_VALUE; /* freed, kept, reused, owner gone, or ours */
    }
    /* The open holds the allocation (or, in poison mode, a free that raced
     * it shows in the serial): it must be pool memory of the data's pool. */
    const struct sim_alloc *a = sim_entry(d.index);
    uint64_t size = __atomic_load_n(&a->size, __ATOMIC_SEQ_CST);
    int ok = (__atomic_load_n(&a->flags, __ATOMIC_SEQ_CST) & SIM_F_POOL) &&
             __atomic_load_n(&a->pool_id, __ATOMIC_SEQ_CST) == d.pool_id && size == d.size &&
             __atomic_load_n(&a->serial, __ATOMIC_SEQ_CST) == d.serial;
    CUdeviceptr out = 0;
    int added =
        ok ? sim_drv_import_add(d.device, d.index, d.serial, ctx_id,
                                (CUdeviceptr)(uintptr_t)(win + d.offset), size, pool, row, &out)
           : -1;
    if (added >= 0) {
        if (added == 1)
            sim_map_del(d.index, d.serial, ctx_id, row); /* a racing repeat: uncounted */
        *ptr_out = out;
        return CUDA_SUCCESS;
    }
    sim_map_del(d.index, d.serial, ctx_id, row);
    return ok ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}
