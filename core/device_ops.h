/* device_ops: the only CUDA work core may ask for, supplied by the shim.
 *
 * Core never calls CUDA or dl*; when it must act on a device outside an
 * entry point (a deferred free from the collector thread or at exit), it
 * calls through this table. Every function returns 0 or a negative errno,
 * may be called from any thread, and is never called with the registry lock
 * or any core lock held. */
#ifndef DEVICE_OPS_H
#define DEVICE_OPS_H

#include <stdint.h>

struct device_ops {
    /* Really free the allocation at base, which lives in context ctx on
     * device, if it is still the allocation of that identity (the driver's
     * BUFFER_ID noted at export, never reused in a process; 0: unknown, not
     * checked). -EINVAL if the driver refused. */
    int (*free_block)(uint64_t base, int device, uint64_t ctx, uint64_t identity);
};

#endif
