/* query: the pointer queries (cuMemGetAddressRange, cuPointerGetAttribute,
 * cuPointerGetAttributes, cudaPointerGetAttributes), through every door. A
 * pointer inside a VMM-backed swappable block (shim/swap/swap_vmm.c) gets the
 * answers of the cudaMalloc that block replaced, whether its range maps
 * device chunks or its host copy at the moment: the block's base and the
 * size the program asked for, device memory of its device and context, not
 * managed, legacy-IPC capable (the shim exports it), no host pointer, one
 * buffer id for its whole life. Every other attribute, and every other
 * pointer, is the driver's answer untouched; a pointer in no such block
 * costs one branch while host swap is off, one load while it is on.
 * Managed swappable blocks (small ones, IPCSHIM_SWAP_ENGINE=managed) are
 * managed memory and answer as such. */
#include "host_swap.h"
#include "resolve.h"
#include "swap_vmm_view.h"

/* The VMM-backed block holding ptr, into *r. */
static inline bool block_of(uint64_t ptr, struct swap_vmm_range *r)
{
    return __builtin_expect(swap_enabled, 0) && swap_vmm_query(ptr, r);
}

/* Write block r's answer (a cudaMalloc's) for attribute a of ptr into data:
 * true, or false for an attribute left to the driver. Trap: booleans are
 * written as their first byte only, over what the driver wrote, so that the
 * answer reads the same whether the caller passed a byte or an int (the
 * driver's own width is not documented). */
static bool block_attribute(void *data, CUpointer_attribute a, uint64_t ptr,
                            const struct swap_vmm_range *r)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)r->base;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = (size_t)r->size;
        return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
        return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = r->device;
        return true;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = r->ctx;
        return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = (CUdeviceptr)ptr;
        return true;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = NULL;
        return true;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned char *)data = 0;
        return true;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned char *)data = 1;
        return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        if (!r->buffer_id) return false;
        *(unsigned long long *)data = r->buffer_id;
        return true;
    default:
        return false;
    }
}

CUresult do_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct swap_vmm_range r;
    /* Answered here, without the driver: a remap on another thread may have
     * the range unmapped for a moment. */
    if (!block_of(dptr, &r)) return CALL_REAL_DRIVER(cuMemGetAddressRange_v2, (pbase, psize, dptr));
    if (pbase) *pbase = (CUdeviceptr)r.base;
    if (psize) *psize = (size_t)r.size;
    return CUDA_SUCCESS;
}

CUresult do_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult res = CALL_REAL_DRIVER(cuPointerGetAttribute, (data, attribute, ptr));
    struct swap_vmm_range r;
    if (!data || !block_of(ptr, &r)) return res;
    /* Device memory has no host pointer (cuPointerGetAttribute's docs). */
    if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER) return CUDA_ERROR_INVALID_VALUE;
    /* Ours are answered even when the driver refused (a range being remapped). */
    if (block_attribute(data, attribute, ptr, &r)) return CUDA_SUCCESS;
    return res;
}

CUresult do_cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                   void **data, CUdeviceptr ptr)
{
    CUresult res = CALL_REAL_DRIVER(cuPointerGetAttributes, (numAttributes, attributes, data, ptr));
    struct swap_vmm_range r;
    if (res != CUDA_SUCCESS || !block_of(ptr, &r)) return res;
    for (unsigned int i = 0; i < numAttributes; i++)
        block_attribute(data[i], attributes[i], ptr, &r);
    return res;
}

cudaError_t do_cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    cudaError_t res = CALL_REAL_RUNTIME(cudaPointerGetAttributes, (attributes, ptr));
    struct swap_vmm_range r;
    if (res != cudaSuccess || !attributes || !block_of((uint64_t)(uintptr_t)ptr, &r)) return res;
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = r.device;
    attributes->devicePointer = (void *)ptr;
    attributes->hostPointer = NULL;
    return res;
}
