/*
 * driver_copy.c: copies and sets, every variant (_v2, _ptds/_ptsz, legacy
 * 32-bit, Async). The work is done when the call returns, unless an
 * asynchronous call's stream has queued work (driver_queue.c). Both ends of a copy and the target
 * of a set are checked against this process's allocations, mappings and pinned memory
 * (sim_drv_check_range) before a byte moves.
 */
#include "driver_internal.h"

#include <string.h>

/* ---- copies and sets ---- */

/* Copies n bytes; dst_dev/src_dev: that side must be device memory. A
 * synchronous copy (async 0) first waits for the legacy stream's queued
 * work; an asynchronous one on a stream with queued work (driver_queue.c)
 * is queued, except into pageable host memory, which the driver completes
 * before returning; from pageable host memory the driver syncs the stream
 * and stages the bytes before returning, and the queued copy carries them. */
static CUresult copy(CUdeviceptr dst, int dst_dev, CUdeviceptr src, int src_dev, size_t n,
                     CUstream s, int async)
{
    ENTER();
    CUresult r = sim_drv_check_stream(s);
    if (r != CUDA_SUCCESS) return r;
    if (n == 0) return CUDA_SUCCESS;
    if ((r = sim_drv_check_range(dst, n, dst_dev ? DEVICE_ONLY : ANY_MEMORY)) != CUDA_SUCCESS ||
        (r = sim_drv_check_range(src, n, src_dev ? DEVICE_ONLY : ANY_MEMORY)) != CUDA_SUCCESS)
        return r;
    if (!sim_drv_queue_idle()) {
        struct ptr_info pi;
        int to_pageable = sim_drv_classify(dst, &pi) == PTR_NONE;
        int from_pageable = sim_drv_classify(src, &pi) == PTR_NONE;
        if (!async || to_pageable || from_pageable) sim_drv_queue_sync(s);
        if (async && !to_pageable && sim_drv_queue_copy(s, dst, src, n, from_pageable))
            return CUDA_SUCCESS;
    }
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

#define H(p) ((CUdeviceptr)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, 0, src, 0, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, 0, src, 0, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(dst, 0, src, 0, ByteCount, hStream, 1);
}
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                    CUstream hStream)
{
    return copy(dst, 0, src, 0, ByteCount, hStream, 1);
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, hStream, 1);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, hStream, 1);
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, hStream, 1);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, hStream, 1);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, hStream, 1);
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, hStream, 1);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                              unsigned int ByteCount)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, NULL, 0);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, hStream, 1);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, hStream, 1);
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, hStream, 1);
}

/* A 2D copy, row by row (each row one piece of queued work when it
 * queues), with copy()'s rules for the whole copy. Arrays are not
 * simulated. */
static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream s, int async)
{
    ENTER();
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (p->Height > 1 && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? H(p->srcHost) : p->srcDevice;
    CUdeviceptr dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? H(p->dstHost) : p->dstDevice;
    src += p->srcY * p->srcPitch + p->srcXInBytes;
    dst += p->dstY * p->dstPitch + p->dstXInBytes;
    int src_dev = p->srcMemoryType == CU_MEMORYTYPE_DEVICE;
    int dst_dev = p->dstMemoryType == CU_MEMORYTYPE_DEVICE;
    for (size_t r = 0; r < p->Height; r++) { /* every row checked before a byte moves */
        CUresult e;
        if ((e = sim_drv_check_range(dst + r * p->dstPitch, p->WidthInBytes,
                                     dst_dev ? DEVICE_ONLY : ANY_MEMORY)) != CUDA_SUCCESS ||
            (e = sim_drv_check_range(src + r * p->srcPitch, p->WidthInBytes,
                                     src_dev ? DEVICE_ONLY : ANY_MEMORY)) != CUDA_SUCCESS)
            return e;
    }
    CUresult e = sim_drv_check_stream(s);
    if (e != CUDA_SUCCESS || !p->WidthInBytes) return e;
    int to_pageable = 0, from_pageable = 0;
    if (!sim_drv_queue_idle()) { /* as copy() does, once for the whole copy */
        struct ptr_info pi;
        to_pageable = sim_drv_classify(dst, &pi) == PTR_NONE;
        from_pageable = sim_drv_classify(src, &pi) == PTR_NONE;
        if (!async || to_pageable || from_pageable) sim_drv_queue_sync(s);
    }
    for (size_t r = 0; r < p->Height; r++) {
        CUdeviceptr d = dst + r * p->dstPitch, f = src + r * p->srcPitch;
        if (async && !to_pageable && sim_drv_queue_copy(s, d, f, p->WidthInBytes, from_pageable))
            continue;
        memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)f, p->WidthInBytes);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, NULL, 0);
}
CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, NULL, 0);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy2d(pCopy, hStream, 1);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy2d(pCopy, hStream, 1);
}

void sim_drv_fill(CUdeviceptr dst, unsigned value, unsigned width, size_t n)
{
    if (width == 1) {
        memset((void *)(uintptr_t)dst, (int)(value & 0xff), n);
    } else if (width == 2) {
        uint16_t *p = (uint16_t *)(uintptr_t)dst;
        for (size_t i = 0; i < n; i++)
            p[i] = (uint16_t)value;
    } else {
        uint32_t *p = (uint32_t *)(uintptr_t)dst;
        for (size_t i = 0; i < n; i++)
            p[i] = value;
    }
}

/* Fills n elements of `width` bytes at dst with `value`; queued behind an
 * asynchronous set's stream's queued work, after the legacy stream's for a
 * synchronous one. */
static CUresult set(CUdeviceptr dst, unsigned value, unsigned width, size_t n, CUstream s,
                    int async)
{
    ENTER();
    CUresult r = sim_drv_check_stream(s);
    if (r != CUDA_SUCCESS) return r;
    if (dst % width) return CUDA_ERROR_INVALID_VALUE;
    if (n == 0) return CUDA_SUCCESS;
    if (n > SIZE_MAX / width ||
        (r = sim_drv_check_range(dst, n * width, DEVICE_OR_PINNED)) != CUDA_SUCCESS)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    if (!async)
        sim_drv_queue_sync(s);
    else if (sim_drv_queue_set(s, dst, value, width, n))
        return CUDA_SUCCESS;
    sim_drv_fill(dst, value, width, n);
    return CUDA_SUCCESS;
}

#define DEFINE_SETS(BITS, T, W)                                                                    \
    CUresult CUDAAPI cuMemsetD##BITS##_v2(CUdeviceptr dstDevice, T v, size_t N)                    \
    {                                                                                              \
        return set(dstDevice, v, W, N, NULL, 0);                                                   \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS##_v2_ptds(CUdeviceptr dstDevice, T v, size_t N)               \
    {                                                                                              \
        return set(dstDevice, v, W, N, NULL, 0);                                                   \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS(CUdeviceptr_v1 dstDevice, T v, unsigned int N)                \
    {                                                                                              \
        return set(dstDevice, v, W, N, NULL, 0);                                                   \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS##Async(CUdeviceptr dstDevice, T v, size_t N, CUstream s)      \
    {                                                                                              \
        return set(dstDevice, v, W, N, s, 1);                                                      \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS##Async_ptsz(CUdeviceptr dstDevice, T v, size_t N, CUstream s) \
    {                                                                                              \
        return set(dstDevice, v, W, N, s, 1);                                                      \
    }
DEFINE_SETS(8, unsigned char, 1)
DEFINE_SETS(16, unsigned short, 2)
DEFINE_SETS(32, unsigned int, 4)

/* A 2D set: Height rows of Width elements of `width` bytes, rows `pitch`
 * bytes apart (unused when Height is 1), each row one set() piece of
 * queued work when it queues. Every row is checked before a byte moves; the
 * start and, for more than one row, the pitch must be element-aligned, and
 * the pitch at least a row's bytes. */
static CUresult set2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned width, size_t w,
                      size_t h, CUstream s, int async)
{
    ENTER();
    CUresult r = sim_drv_check_stream(s);
    if (r != CUDA_SUCCESS) return r;
    if (h == 1) pitch = 0;
    if (dst % width || pitch % width) return CUDA_ERROR_INVALID_VALUE;
    if (w == 0 || h == 0) return CUDA_SUCCESS;
    if (w > SIZE_MAX / width || (h > 1 && pitch < w * width) ||
        (h > 1 && pitch > (SIZE_MAX - w * width) / (h - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < h; i++)
        if ((r = sim_drv_check_range(dst + i * pitch, w * width, DEVICE_OR_PINNED)) != CUDA_SUCCESS)
            return r;
    if (!async) sim_drv_queue_sync(s);
    for (size_t i = 0; i < h; i++) {
        CUdeviceptr d = dst + i * pitch;
        if (!async || !sim_drv_queue_set(s, d, value, width, w)) sim_drv_fill(d, value, width, w);
    }
    return CUDA_SUCCESS;
}

#define DEFINE_SETS2D(BITS, T, W)                                                                  \
    CUresult CUDAAPI cuMemsetD2D##BITS##_v2(CUdeviceptr dstDevice, size_t dstPitch, T v,           \
                                            size_t Width, size_t Height)                           \
    {                                                                                              \
        return set2d(dstDevice, dstPitch, v, W, Width, Height, NULL, 0);                           \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD2D##BITS##_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, T v,      \
                                                 size_t Width, size_t Height)                      \
    {                                                                                              \
        return set2d(dstDevice, dstPitch, v, W, Width, Height, NULL, 0);                           \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD2D##BITS##Async(CUdeviceptr dstDevice, size_t dstPitch, T v,         \
                                              size_t Width, size_t Height, CUstream s)             \
    {                                                                                              \
        return set2d(dstDevice, dstPitch, v, W, Width, Height, s, 1);                              \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD2D##BITS##Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, T v,    \
                                                   size_t Width, size_t Height, CUstream s)        \
    {                                                                                              \
        return set2d(dstDevice, dstPitch, v, W, Width, Height, s, 1);                              \
    }
DEFINE_SETS2D(8, unsigned char, 1)
DEFINE_SETS2D(16, unsigned short, 2)
DEFINE_SETS2D(32, unsigned int, 4)
