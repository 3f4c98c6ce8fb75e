/*
 * driver_pool.h: the memory pools of one process, shared by driver_pool.c
 * (pools, stream-ordered allocation) and driver_pool_ipc.c (pool IPC).
 * Internal to libcuda (hidden visibility).
 *
 * A CUmemoryPool is a process-local handle: the address of a struct
 * sim_mempool. Every handle a caller passes in is looked up in this
 * process's registry (the default pools, then the list of created and
 * imported ones) before it is dereferenced. Pool records are never freed: a
 * destroyed pool stays in the list, marked dead, so a stale handle is
 * refused and never aliases a newer pool. The list is guarded by a
 * process-local mutex; a record's attributes are plain fields (a program
 * that races two calls on one pool gets one of the two values, as with the
 * real driver).
 */
#ifndef DRIVER_POOL_H
#define DRIVER_POOL_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "sim_state.h"

enum sim_pool_kind {
    SIM_POOL_DEFAULT = 0, /* a device's default pool (id 0) */
    SIM_POOL_CREATED = 1, /* cuMemPoolCreate: allocates, may be IPC capable */
    SIM_POOL_IMPORTED = 2 /* cuMemPoolImportFromShareableHandle: imports pointers only */
};

struct sim_mempool {
    uint32_t magic;
    unsigned dev;
    enum sim_pool_kind kind;
    int dead;    /* destroyed (cuMemPoolDestroy): refused by every call */
    uint64_t id; /* machine-wide: 0 for default pools, a machine serial otherwise; an imported
                    pool has the id of the pool it imports */
    unsigned long long handle_types;       /* CUmemAllocationHandleType bits it was created with */
    uint64_t max_size;                     /* 0: no limit but the device */
    unsigned char access[SIM_MAX_DEVICES]; /* CUmemAccess_flags per device (stored, no effect) */
    uint64_t release_threshold;
    int follow_events, opportunistic, internal_deps;
    uint64_t used_high; /* highest sim_pool_usage seen at an allocation or query */
    int exported;       /* cuMemPoolExportToShareableHandle succeeded once: its pointers export */
    struct sim_mempool *next;
};

/* The live (not destroyed) pool behind handle h, or NULL when h is no live
 * pool of this process. */
SIM_INTERNAL struct sim_mempool *sim_pool_find(CUmemoryPool h);

/* Adds a new pool of `kind` on device dev with id `id` to this process's
 * list (defaults as for cuMemPoolCreate: access read-write from dev, reuse
 * flags on). Returns it, or NULL when out of memory. */
SIM_INTERNAL struct sim_mempool *sim_pool_add(enum sim_pool_kind kind, unsigned dev, uint64_t id,
                                              unsigned long long handle_types);

#endif /* DRIVER_POOL_H */
