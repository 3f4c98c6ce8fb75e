/*
 * driver_managed.c: managed memory's prefetch and advice
 * (cuMemPrefetchAsync, cuMemAdvise, their _v2 and _ptsz forms). Allocation
 * is driver_mem.c's; residency, migration and eviction are sim_state.c's
 * (sim_managed_move_locked); faults on launch are driver_module.c's.
 */
#include "driver_internal.h"

#include <string.h>

/* ---- managed memory: prefetch and advice ---- */

/* Residency is per allocation: a prefetch or advice on any part of an
 * allocation applies to all of it. The range [p, p + count) must lie in
 * managed allocations of this process (allocation after allocation; each
 * one's 512-byte rounding counts as part of it). */

enum managed_op { OP_MOVE, OP_ADVISE };

struct advice {
    CUmem_advise what;
    int where; /* SIM_HOST or a device */
};

/* A CUmemLocation as SIM_HOST or a device ordinal; -3 if invalid.
 * *bad is the error to report then. */
static int location_of(CUmemLocation loc, CUresult *bad)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (sim_drv_valid_device(loc.id)) return loc.id;
        *bad = CUDA_ERROR_INVALID_DEVICE;
        return -3;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return SIM_HOST;
    default:
        *bad = CUDA_ERROR_INVALID_VALUE;
        return -3;
    }
}

/* A legacy CUdevice destination (CU_DEVICE_CPU = the host) as a location. */
static CUmemLocation legacy_location(CUdevice d)
{
    CUmemLocation loc;
    memset(&loc, 0, sizeof(loc));
    loc.type = d == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = d == CU_DEVICE_CPU ? 0 : d;
    if (d != CU_DEVICE_CPU && !sim_drv_valid_device(d)) loc.id = -1; /* invalid device */
    return loc;
}

static void advise_locked(struct sim_alloc *a, const struct advice *adv)
{
    uint32_t bit = adv->where == SIM_HOST ? SIM_ACCESS_HOST : 1u << adv->where;
    switch (adv->what) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
        a->flags |= SIM_F_READ_MOSTLY;
        break;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
        a->flags &= ~(uint32_t)SIM_F_READ_MOSTLY;
        break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        a->preferred = adv->where;
        break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        a->preferred = SIM_NOWHERE;
        break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
        a->accessed_by |= bit;
        break;
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
        a->accessed_by &= ~bit;
        break;
    }
}

/* Checks that [p, p + count) is managed memory of this process, then moves
 * (OP_MOVE, to `to`) or advises every allocation in it, under one hold of
 * the machine mutex. */
static CUresult managed_apply(CUdeviceptr p, size_t count, enum managed_op op, int to,
                              const struct advice *adv)
{
    uint64_t off;
    if (count == 0 || sim_window_of((uintptr_t)p, &off) != SIM_POOL_MANAGED ||
        count > sim_m->managed_capacity - off)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t end = off + count;
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    for (int pass = 0; pass < 2 && r == CUDA_SUCCESS; pass++) {
        for (uint64_t pos = off; pos < end;) {
            uint32_t i = sim_find_locked(SIM_POOL_MANAGED, pos);
            struct sim_alloc *a = i == SIM_NO_INDEX ? NULL : sim_entry(i);
            if (!a || !sim_is_mine(a) || !(a->flags & SIM_F_MANAGED)) {
                r = CUDA_ERROR_INVALID_VALUE;
                break;
            }
            if (pass == 1) {
                if (op == OP_MOVE)
                    (void)sim_managed_move_locked(i, to); /* refused: stays, as pages do */
                else
                    advise_locked(a, adv);
            }
            pos = a->offset + a->rsize;
        }
    }
    sim_unlock();
    return r;
}

static CUresult prefetch(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                         unsigned int flags, CUstream hStream)
{
    ENTER();
    if (!sim_drv_current_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = sim_drv_check_stream(hStream);
    if (r != CUDA_SUCCESS) return r;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    int to = location_of(location, &r);
    if (to == -3) return r;
    return managed_apply(devPtr, count, OP_MOVE, to, NULL);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                       unsigned int flags, CUstream hStream)
{
    return prefetch(devPtr, count, location, flags, hStream);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                            CUmemLocation location, unsigned int flags,
                                            CUstream hStream)
{
    return prefetch(devPtr, count, location, flags, hStream);
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                    CUstream hStream)
{
    return prefetch(devPtr, count, legacy_location(dstDevice), 0, hStream);
}

CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                         CUstream hStream)
{
    return prefetch(devPtr, count, legacy_location(dstDevice), 0, hStream);
}

/* Advice is recorded (simcuda_managed_residency shows it) but changes no
 * fault, migration or eviction decision. */
CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                CUmemLocation location)
{
    ENTER();
    struct advice adv = {advice, SIM_HOST};
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        break; /* the location is ignored */
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
        adv.where = location_of(location, &r);
        if (adv.where == -3) return r;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return managed_apply(devPtr, count, OP_ADVISE, 0, &adv);
}

CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    return cuMemAdvise_v2(devPtr, count, advice, legacy_location(device));
}
