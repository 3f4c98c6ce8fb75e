/*
 * driver_ipc.c: legacy IPC: memory handles (cuIpcGetMemHandle,
 * cuIpcOpenMemHandle, cuIpcCloseMemHandle) and event handles, and this
 * process's table of IPC mappings (sim_drv_imports), which pool imports
 * (driver_pool_ipc.c) share through sim_drv_import_add/free. A handle is
 * 64 bytes naming the allocation by device, table index and serial, with a
 * check word; an open takes a row in the machine's table of IPC opens in
 * force (sim_state.h, "The table of IPC opens"), without the machine lock
 * in the common case, and a second open in the same context counts and
 * returns the same pointer.
 */
#include "driver_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HANDLE_MAGIC_MEM 0x4d4d4953u /* "SIMM" */
#define HANDLE_MAGIC_EVT 0x454d4953u /* "SIME" */

static uint64_t g_next_import_id;      /* pool imports' BUFFER_IDs: SIM_IMPORT_ID_BIT | n */
#define SIM_IMPORT_ID_BIT (1ull << 63) /* never a serial: distinct from every allocation's */

/* The wire format of CUipcMemHandle / CUipcEventHandle (64 bytes). */
struct mem_handle {
    uint32_t magic;
    uint16_t abi;
    uint16_t device;
    uint32_t index;
    uint32_t pad;
    uint64_t machine_id;
    uint64_t serial;
    uint64_t offset;
    uint64_t size;
    uint64_t check;
    uint64_t zero;
};
_Static_assert(sizeof(struct mem_handle) == CU_IPC_HANDLE_SIZE, "mem handle is 64 bytes");

struct evt_handle {
    uint32_t magic;
    uint32_t abi;
    uint64_t machine_id;
    int64_t pid;
    uint64_t serial;
    uint64_t check;
    uint64_t zero[3];
};
_Static_assert(sizeof(struct evt_handle) == CU_IPC_HANDLE_SIZE, "event handle is 64 bytes");

/* ---- IPC ---- */

/* This context's import of allocation (dev, index, serial), or NULL.
 * Caller holds sim_drv_lock. */
static struct import *import_find_locked(const struct sim_ctx *c, enum sim_map_kind kind,
                                         unsigned dev, uint32_t index, uint64_t serial)
{
    struct import key, *im = NULL;
    memset(&key, 0, sizeof(key));
    key.key.dev = dev;
    key.key.index = index;
    key.key.serial = serial;
    key.key.ctx_id = c->id;
    key.key.kind = kind;
    HASH_FIND(hh, sim_drv_imports, &key.key, sizeof(key.key), im);
    return im;
}

/* Records one more open of `kind` of allocation (dev, index, serial) in
 * context c, mapped at ptr, from `row` of the machine's table. A second
 * legacy open in the same context counts and returns the same pointer; a
 * second pool import returns the same pointer uncounted (NVIDIA's driver,
 * H200: one free ends both) and sets *repeat: the caller gives its row
 * back. Returns the mapping's pointer, or 0 when out of memory (the caller
 * gives the row back). Caller holds sim_drv_lock. */
static CUdeviceptr import_add_locked(struct sim_ctx *c, enum sim_map_kind kind, unsigned dev,
                                     uint32_t index, uint64_t serial, CUdeviceptr ptr,
                                     uint64_t size, CUmemoryPool pool, uint32_t row, bool *repeat)
{
    struct import *im = import_find_locked(c, kind, dev, index, serial);
    *repeat = im && kind == SIM_MAP_POOL;
    if (*repeat) return im->ptr;
    if (im) {
        im->count++;
        im->row = row;
        return im->ptr;
    }
    if (!(im = calloc(1, sizeof(*im)))) return 0;
    im->key.dev = dev;
    im->key.index = index;
    im->key.serial = serial;
    im->key.ctx_id = c->id;
    im->key.kind = kind;
    im->ptr = ptr;
    im->size = size;
    im->count = 1;
    im->row = row;
    im->ctx = c;
    im->pool = pool;
    im->owner_pid = __atomic_load_n(&sim_entry(index)->owner_pid, __ATOMIC_RELAXED);
    im->owner_start = __atomic_load_n(&sim_entry(index)->owner_start, __ATOMIC_RELAXED);
    if (kind == SIM_MAP_POOL) im->buffer_id = SIM_IMPORT_ID_BIT | ++g_next_import_id;
    sim_drv_hash_oom = 0;
    HASH_ADD(hh, sim_drv_imports, key, sizeof(im->key), im);
    if (sim_drv_hash_oom) {
        free(im);
        return 0;
    }
    return ptr;
}

/* One more open of an import this context has already (the same pointer)
 * whose exporter has died since, or 0 when there is none. Caller holds
 * sim_drv_lock. */
static CUdeviceptr import_reopen_locked(struct sim_ctx *c, enum sim_map_kind kind, unsigned dev,
                                        uint32_t index, uint64_t serial)
{
    struct import *im = import_find_locked(c, kind, dev, index, serial);
    if (!im || sim_proc_alive(im->owner_pid, im->owner_start)) return 0;
    im->count++;
    return im->ptr;
}

/* Drops one open of `kind` at base pointer ptr (the current context's if
 * several contexts opened it); the last one unmaps it here; its row goes
 * back to the machine (releasing a kept block at its last open). Returns 0,
 * or -1 when ptr is no such mapping of this process. */
static int import_drop(CUdeviceptr ptr, enum sim_map_kind kind)
{
    struct sim_ctx *c = sim_drv_current_ctx();
    struct import *im, *tmp, *found = NULL;
    pthread_mutex_lock(&sim_drv_lock);
    HASH_ITER(hh, sim_drv_imports, im, tmp)
    {
        if (im->ptr == ptr && im->key.kind == kind && (!found || im->ctx == c)) found = im;
    }
    uint32_t index = found ? found->key.index : 0, row = found ? found->row : 0;
    uint64_t serial = found ? found->key.serial : 0, ctx_id = found ? found->key.ctx_id : 0;
    if (found && --found->count == 0) {
        HASH_DEL(sim_drv_imports, found);
        free(found);
    }
    pthread_mutex_unlock(&sim_drv_lock);
    if (!found) return -1;
    sim_map_del(index, serial, ctx_id, row);
    return 0;
}

CUdeviceptr sim_drv_import_existing(unsigned dev, uint32_t index, uint64_t serial, uint64_t ctx_id)
{
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_ctx *c = sim_drv_ctx_by_id_locked(ctx_id);
    struct import *im = c ? import_find_locked(c, SIM_MAP_POOL, dev, index, serial) : NULL;
    CUdeviceptr p = im ? im->ptr : 0;
    pthread_mutex_unlock(&sim_drv_lock);
    return p;
}

int sim_drv_import_add(unsigned dev, uint32_t index, uint64_t serial, uint64_t ctx_id,
                       CUdeviceptr ptr, uint64_t size, CUmemoryPool pool, uint32_t row,
                       CUdeviceptr *out)
{
    bool repeat = false;
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_ctx *c = sim_drv_ctx_by_id_locked(ctx_id);
    CUdeviceptr p =
        c ? import_add_locked(c, SIM_MAP_POOL, dev, index, serial, ptr, size, pool, row, &repeat)
          : 0;
    pthread_mutex_unlock(&sim_drv_lock);
    if (!p) return -1;
    *out = p;
    if (repeat) return 1;
    sim_drv_count(&sim_drv_counts.pool_imports);
    return 0;
}

int sim_drv_import_free(CUdeviceptr p)
{
    return import_drop(p, SIM_MAP_POOL);
}

static uint64_t mem_handle_check(const struct mem_handle *h)
{
    uint64_t c = sim_drv_mix(h->machine_id, ((uint64_t)h->magic << 32) | h->abi);
    c = sim_drv_mix(c, ((uint64_t)h->device << 32) | h->index);
    c = sim_drv_mix(c, h->serial);
    c = sim_drv_mix(c, h->offset);
    return sim_drv_mix(c, h->size);
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    ENTER();
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_current_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t off;
    int dev = sim_window_of((uintptr_t)dptr, &off);
    if (dev < 0) return CUDA_ERROR_INVALID_VALUE;
    if (sim_drv_fault(SIMCUDA_FAULT_IPC_GET)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct mem_handle h;
    memset(&h, 0, sizeof(h));
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    uint32_t i = sim_find_locked((unsigned)dev, off);
    /* Legacy IPC exports cuMemAlloc memory only: managed and stream-ordered
     * pool memory are refused with INVALID_VALUE (README "IPC"). */
    if (i != SIM_NO_INDEX && sim_is_mine(sim_entry(i)) &&
        !(sim_entry(i)->flags & (SIM_F_MANAGED | SIM_F_POOL))) {
        struct sim_alloc *a = sim_entry(i);
        a->flags |= SIM_F_EXPORTED;
        h.magic = HANDLE_MAGIC_MEM;
        h.abi = SIM_ABI;
        h.device = (uint16_t)dev;
        h.index = i;
        h.machine_id = sim_m->machine_id;
        h.serial = a->serial;
        h.offset = a->offset;
        h.size = a->size;
        h.check = mem_handle_check(&h);
        r = CUDA_SUCCESS;
    }
    sim_unlock();
    if (r == CUDA_SUCCESS) {
        memcpy(pHandle, &h, sizeof(h));
        sim_drv_count(&sim_drv_counts.ipc_gets);
    }
    return r;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
    ENTER();
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct mem_handle h;
    memcpy(&h, &handle, sizeof(h));
    if (h.magic != HANDLE_MAGIC_MEM || h.abi != SIM_ABI || h.machine_id != sim_m->machine_id ||
        h.check != mem_handle_check(&h) || h.device >= sim_m->ndev ||
        h.index >= sim_m->max_allocs || h.zero != 0 || h.pad != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_drv_fault(SIMCUDA_FAULT_IPC_OPEN)) return CUDA_ERROR_MAP_FAILED;
    uint8_t *win = sim_window(h.device);
    if (!win) return CUDA_ERROR_MAP_FAILED;
    /* No machine lock here in the common case: the real driver does this in
     * the kernel (sim_state.h, "The table of IPC opens"). */
    uint32_t row = 0;
    switch (sim_map_open(h.index, h.serial, h.device, h.offset, c->id, SIM_MAP_IPC, &row)) {
    case SIM_OK:
        break;
    case SIM_EMINE:
        return CUDA_ERROR_INVALID_CONTEXT; /* the exporting process itself */
    case SIM_ENOMEM:
        return CUDA_ERROR_OUT_OF_MEMORY; /* machine-wide table of opens full */
    default: {
        /* Freed (kept ones too), reused or owner gone. A handle this context
         * has open already opens again, the same pointer, once its exporter
         * died: NVIDIA's driver did so after the exporter was SIGKILLed
         * (H100, driver 580, docs/gpu-validation.md 2026-11-26, probe
         * exporter-kill-while-mapped). After the exporter's own free it
         * stays refused (a guess, README "IPC"). */
        pthread_mutex_lock(&sim_drv_lock);
        CUdeviceptr again = import_reopen_locked(c, SIM_MAP_IPC, h.device, h.index, h.serial);
        pthread_mutex_unlock(&sim_drv_lock);
        if (!again) return CUDA_ERROR_INVALID_VALUE;
        *pdptr = again;
        sim_drv_count(&sim_drv_counts.ipc_opens);
        return CUDA_SUCCESS;
    }
    }
    bool repeat; /* never for a legacy open: those count */
    pthread_mutex_lock(&sim_drv_lock);
    CUdeviceptr p =
        import_add_locked(c, SIM_MAP_IPC, h.device, h.index, h.serial,
                          (CUdeviceptr)(uintptr_t)(win + h.offset), h.size, NULL, row, &repeat);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!p) {
        sim_map_del(h.index, h.serial, c->id, row);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pdptr = p;
    sim_drv_count(&sim_drv_counts.ipc_opens);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    ENTER();
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (sim_drv_fault(SIMCUDA_FAULT_IPC_CLOSE)) return CUDA_ERROR_INVALID_CONTEXT;
    if (import_drop(dptr, SIM_MAP_IPC) < 0) return CUDA_ERROR_INVALID_VALUE;
    sim_drv_count(&sim_drv_counts.ipc_closes);
    return CUDA_SUCCESS;
}

static uint64_t evt_handle_check(const struct evt_handle *h)
{
    uint64_t c = sim_drv_mix(h->machine_id, ((uint64_t)h->magic << 32) | h->abi);
    c = sim_drv_mix(c, (uint64_t)h->pid);
    return sim_drv_mix(c, h->serial);
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    ENTER();
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    struct sim_event e;
    if (sim_drv_check_event(event, &e) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_HANDLE;
    if (!(e.flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
    struct evt_handle h;
    memset(&h, 0, sizeof(h));
    h.magic = HANDLE_MAGIC_EVT;
    h.abi = SIM_ABI;
    h.machine_id = sim_m->machine_id;
    h.pid = getpid();
    h.serial = e.serial;
    h.check = evt_handle_check(&h);
    memcpy(pHandle, &h, sizeof(h));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    ENTER();
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    struct evt_handle h;
    memcpy(&h, &handle, sizeof(h));
    if (h.magic != HANDLE_MAGIC_EVT || h.abi != SIM_ABI || h.machine_id != sim_m->machine_id ||
        h.check != evt_handle_check(&h))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_drv_event_new(phEvent, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
}
