/*
 * driver_kernels.c: the few kernels the simulator runs. Kernels are
 * recorded, never executed (driver_module.c), except those of a loaded
 * module whose entry has one of the names below: they do what their PTX
 * (simcuda.h, SIMCUDA_BUILTIN_PTX) does on a device, on the memory as it
 * is mapped when they complete (at once, or when their queued launch
 * completes: driver_queue.c), so that a test can see whether a kernel's
 * effect reached the bytes it meant. A range that is not valid device
 * memory then is a fault (CUDA_ERROR_ILLEGAL_ADDRESS, sticky).
 *
 *   simcuda_add_u32(u32 *p, u64 count, u32 value): p[i] += value, i < count
 *   simcuda_add_u32_opaque(...): the same, but cuFuncGetParamInfo refuses
 *       it (CUDA_ERROR_NOT_SUPPORTED), as for a function whose module
 *       carries no parameter information: an interposer cannot know what
 *       its launches touch.
 */
#include "driver_internal.h"
#include "sim_image.h"

#include <string.h>

enum { SIM_BUILTIN_NONE, SIM_BUILTIN_ADD, SIM_BUILTIN_ADD_OPAQUE };

int sim_drv_builtin_of(const char *name)
{
    if (!name || strncmp(name, "simcuda_", 8)) return SIM_BUILTIN_NONE;
    if (!strcmp(name, "simcuda_add_u32")) return SIM_BUILTIN_ADD;
    if (!strcmp(name, "simcuda_add_u32_opaque")) return SIM_BUILTIN_ADD_OPAQUE;
    return SIM_BUILTIN_NONE;
}

int sim_drv_builtin_opaque(int b)
{
    return b == SIM_BUILTIN_ADD_OPAQUE;
}

/* Parameter i of the launch (size bytes at most) into out; 0 or -1. */
static int param(const struct sim_kernel *k, void **params, void **extra, unsigned i, void *out,
                 size_t size)
{
    if (!k || i >= k->nparams || k->params[i].size < size) return -1;
    if (params) {
        if (!params[i]) return -1;
        memcpy(out, params[i], size);
        return 0;
    }
    const uint8_t *buf = NULL;
    size_t n = 0;
    for (unsigned j = 0; extra && j < 64 && extra[j] != CU_LAUNCH_PARAM_END; j += 2) {
        if (extra[j] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[j + 1];
        if (extra[j] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[j + 1])
            n = *(const size_t *)extra[j + 1];
    }
    if (!buf || k->params[i].offset + size > n) return -1;
    memcpy(out, buf + k->params[i].offset, size);
    return 0;
}

int sim_drv_builtin_args(int b, const struct sim_kernel *k, void **params, void **extra,
                         struct sim_builtin_args *out)
{
    memset(out, 0, sizeof(*out));
    if (!b) return -1;
    if (param(k, params, extra, 0, &out->ptr, 8) || param(k, params, extra, 1, &out->count, 8) ||
        param(k, params, extra, 2, &out->value, 4))
        return -1;
    return 0;
}

CUresult sim_drv_builtin_run(int b, const struct sim_builtin_args *a)
{
    if (!b || !a->count) return CUDA_SUCCESS;
    if (a->count > SIZE_MAX / 4 || a->ptr % 4 ||
        sim_drv_check_range(a->ptr, a->count * 4, DEVICE_OR_PINNED) != CUDA_SUCCESS)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    uint32_t *p = (uint32_t *)(uintptr_t)a->ptr;
    for (uint64_t i = 0; i < a->count; i++)
        p[i] += a->value;
    return CUDA_SUCCESS;
}
