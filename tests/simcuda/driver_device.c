/*
 * driver_device.c: the simulated devices as the driver API shows them:
 * ordinals, names, UUIDs (derived from the machine's id), total memory, PCI
 * ids, peer access and the attribute table (an H100-like device: compute
 * capability 9.0, unified addressing, managed memory, memory pools with
 * POSIX file descriptor handles; attributes not listed answer 0). How many
 * devices and how much memory come from cuInit's options (driver.c).
 */
#include "driver_internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

int sim_drv_valid_device(CUdevice d)
{
    return sim_m && d >= 0 && (unsigned)d < sim_m->ndev;
}

/* ---- devices ---- */

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    ENTER();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = (int)sim_m->ndev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTER();
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "SimCUDA Device %d", dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    ENTER();
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    uint64_t a = sim_drv_mix(sim_m->machine_id, (uint64_t)dev), b = sim_drv_mix(a, 0x5349u);
    memcpy(uuid->bytes, &a, 8);
    memcpy(uuid->bytes + 8, &b, 8);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER();
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = sim_m->capacity;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t v;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceTotalMem_v2(&v, dev);
    if (r == CUDA_SUCCESS) *bytes = v > UINT_MAX ? UINT_MAX : (unsigned int)v;
    return r;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ENTER();
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    int v = 0; /* attributes not listed: 0 (feature absent) */
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        v = 9;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        v = 132;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        v = 64;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        v = INT_MAX;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
        v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        v = 49152;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        v = 232448;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        v = 233472;
        break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        v = INT_MAX;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        v = 2048;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        v = 1755000;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        v = 2619000;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        v = 5120;
        break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        v = 52428800;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        v = 512;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        v = 3;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
        v = CU_COMPUTEMODE_DEFAULT;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        v = dev + 1;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: /* driver_pool.c */
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: /* driver_pool_ipc.c */
        v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: /* driver_vmm.c */
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: /* driver_vmm_host.c */
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
        v = 0;
        break;
    default:
        break;
    }
    *pi = v;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    ENTER();
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", (unsigned)dev + 1);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    ENTER();
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev) || !sim_drv_valid_device(peerDev))
        return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}
