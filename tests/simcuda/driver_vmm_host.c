/*
 * driver_vmm_host.c: host-located VMM memory. cuMemCreate with a location
 * of type HOST, HOST_NUMA or HOST_NUMA_CURRENT makes physical memory in
 * host RAM that cuMemMap puts at a device address and cuMemSetAccess opens
 * to a device, as NVIDIA's driver does from CUDA 12.2 on (device
 * attributes 141, HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, and 145,
 * HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, both 1 on the H200 of
 * ../../shared/probes/README.md, `vmmhost`, where a kernel read and wrote
 * it at 49.5 GB/s).
 *
 * Here: an anonymous memory file of the process (memfd), mapped shared at
 * the device address, so copies through the address and a second mapping
 * of the same allocation see the same bytes. It is not charged to any
 * device (cuMemGetInfo does not change), belongs to this process only (no
 * shareable handle types: CUDA_ERROR_NOT_SUPPORTED, a guess; the real
 * driver's support for fds of host-located memory is not measured), and is
 * freed with the last handle and mapping, like device-located VMM memory.
 */
#include "driver_internal.h"

#include <sys/mman.h>
#include <unistd.h>

int sim_drv_vmm_host_location(const CUmemLocation *loc)
{
    return loc->type == CU_MEM_LOCATION_TYPE_HOST || loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
           loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

CUresult sim_drv_vmm_host_check(const CUmemAllocationProp *prop)
{
    /* one host NUMA node, 0 */
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id != 0)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long t = (unsigned long long)prop->requestedHandleTypes;
    if (t != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

int sim_drv_vmm_host_create(size_t size)
{
    int fd = memfd_create("simcuda-vmm-host", MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

void *sim_drv_vmm_host_map(int fd, size_t offset, size_t size, CUdeviceptr at)
{
    return mmap((void *)(uintptr_t)at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                (off_t)offset);
}
