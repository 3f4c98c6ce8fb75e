/*
 * driver_internal.h: what the parts of the simulated driver (libcuda.so.1)
 * share: the per-process registry of contexts, streams and events, the
 * tables of IPC mappings and pinned host memory, the process-local lock
 * that guards them, and the helpers every entry point uses (ENTER, the
 * current context, handle and pointer checks, fault injection, counters).
 * Internal to the library (hidden visibility): the exported set is the cu*
 * entry points and simcuda.h's extras only.
 *
 * driver.c owns the process state (it defines everything declared here that
 * is not a function of another part) and its lifecycle: the fork handler,
 * the destructor, cuInit. The parts, one concept each:
 *   driver_device.c   devices and their attributes
 *   driver_ctx.c      contexts, the per-thread current-context stack,
 *                     primary contexts, profiling
 *   driver_stream.c   streams and events
 *   driver_mem.c      pointers (classify, check_range), device memory,
 *                     pointer attributes, the legacy 32-bit allocators
 *   driver_host.c     pinned and registered host memory
 *   driver_copy.c     copies and sets
 *   driver_managed.c  managed memory: prefetch and advice
 *   driver_ipc.c      legacy IPC (memory and event handles), the table of
 *                     IPC mappings shared with pool imports
 *   driver_module.c   modules, functions, kernel launches and their log
 *   driver_pool.c, driver_pool_ipc.c  stream-ordered pools (driver_pool.h)
 * Shared state lives in sim_state.c (sim_state.h).
 *
 * Lock order: sim_drv_lock (process-local) before the machine mutex; most
 * paths take only one of them. Every handle a caller passes in (context,
 * stream, event, module, function) is looked up in the registry before it
 * is dereferenced.
 */
#ifndef SIM_DRIVER_INTERNAL_H
#define SIM_DRIVER_INTERNAL_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "sim_state.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* uthash, wrapped once: out of memory sets sim_drv_hash_oom (every table is
 * changed under sim_drv_lock) instead of exiting. */
SIM_INTERNAL extern int sim_drv_hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (sim_drv_hash_oom = 1)
#include <uthash.h>

/* ---- helpers for driver_pool.c and driver_pool_ipc.c ---- */

/* ENTER as a function: CUDA_SUCCESS once cuInit attached the machine. */
SIM_INTERNAL CUresult sim_drv_enter(void);
/* The device and context id of stream s (NULL, LEGACY, PER_THREAD: the
 * current context). INVALID_CONTEXT / INVALID_HANDLE. */
SIM_INTERNAL CUresult sim_drv_stream_ctx(CUstream s, unsigned *dev, uint64_t *ctx_id);
/* Consumes one injected allocation failure; true when the call must fail. */
SIM_INTERNAL int sim_drv_fault_alloc(void);
SIM_INTERNAL void sim_drv_count_alloc(void);
/* This process's handle of the pool with machine-wide id pool_id on device
 * dev (0: the default pool), and that pool's handle types (driver_pool.c). */
SIM_INTERNAL CUmemoryPool sim_pool_handle(unsigned dev, uint64_t pool_id);
SIM_INTERNAL unsigned long long sim_pool_handle_types(uint64_t pool_id);
/* Whether that pool has been exported by cuMemPoolExportToShareableHandle
 * in this process (NVIDIA's driver exports no pointer before: H200, 2026-11-26). */
SIM_INTERNAL int sim_pool_exported(uint64_t pool_id);
/* This context's (ctx_id) pool import of allocation (dev, index, serial):
 * its pointer, or 0 when there is none (driver_ipc.c). */
SIM_INTERNAL CUdeviceptr sim_drv_import_existing(unsigned dev, uint32_t index, uint64_t serial,
                                                 uint64_t ctx_id);
/* Pool imports (driver_pool_ipc.c), kept with the IPC opens: records one
 * import in context ctx_id (import_add_locked; 0, 1 when this context had
 * imported it already: the same pointer, uncounted, the caller's row to
 * give back; -1 when out of memory) and releases one at base pointer p
 * (import_drop; 0, or -1 when none). */
SIM_INTERNAL int sim_drv_import_add(unsigned dev, uint32_t index, uint64_t serial, uint64_t ctx_id,
                                    CUdeviceptr ptr, uint64_t size, CUmemoryPool pool, uint32_t row,
                                    CUdeviceptr *out);
SIM_INTERNAL int sim_drv_import_free(CUdeviceptr p);
SIM_INTERNAL void sim_drv_count_pool_export(void);

/* ---- registry of contexts, streams and events ---- */

enum obj_kind { OBJ_CTX = 1, OBJ_STREAM, OBJ_EVENT, OBJ_MODULE, OBJ_FUNCTION };

struct obj {
    void *key; /* the object's own address: the handle given to the caller */
    int kind;
    UT_hash_handle hh;
};

struct sim_ctx {
    struct obj o;
    unsigned dev;
    uint64_t id; /* unique in the process; tags allocations made in it */
    unsigned flags;
    int primary;
    struct sim_ctx *next; /* list of live contexts */
};

struct sim_stream {
    struct obj o;
    struct sim_ctx *ctx;
    unsigned flags;
    int priority;
};

struct sim_event {
    struct obj o;
    struct sim_ctx *ctx;
    unsigned flags;
    int recorded;
    struct timespec when;
    uint64_t serial;
    CUstream stream; /* where it was last recorded */
    uint64_t after;  /* the queued kernel it follows there (driver_queue.c), 0: none */
};

/* An IPC mapping opened in this process: a legacy open (cuIpcOpenMemHandle,
 * closed by cuIpcCloseMemHandle) or a pool import (cuMemPoolImportPointer,
 * freed by cuMemFree/cuMemFreeAsync; kind SIM_MAP_POOL, `pool` its imported
 * pool, `buffer_id` its own CU_POINTER_ATTRIBUTE_BUFFER_ID). */
struct import {
    struct {
        uint32_t dev;
        uint32_t index;
        uint64_t serial;
        uint64_t ctx_id;
        uint64_t kind; /* enum sim_map_kind */
    } key;
    CUdeviceptr ptr;
    uint64_t size;
    unsigned count;
    uint32_t row; /* the latest open's row in the machine's table (a hint for the close) */
    struct sim_ctx *ctx;
    CUmemoryPool pool;
    uint64_t buffer_id;
    int32_t owner_pid; /* the exporter at the first open (a re-open after its death) */
    uint64_t owner_start;
    UT_hash_handle hh;
};

struct host_alloc {
    void *ptr;
    size_t size;
    struct sim_ctx *ctx;
    uint64_t id;
    bool registered; /* the program's memory (cuMemHostRegister): never freed here */
    UT_hash_handle hh;
};

/* The process state, defined in driver.c. All guarded by sim_drv_lock but
 * the counters (relaxed atomics) and sim_drv_deinit (set once, at exit). */
SIM_INTERNAL extern pthread_mutex_t sim_drv_lock;
SIM_INTERNAL extern struct obj *sim_drv_objs;     /* all streams, events, live contexts */
SIM_INTERNAL extern struct sim_ctx *sim_drv_ctxs; /* live contexts (primary ones included) */
SIM_INTERNAL extern struct sim_ctx sim_drv_primary[SIM_MAX_DEVICES];
SIM_INTERNAL extern unsigned sim_drv_primary_refs[SIM_MAX_DEVICES];
SIM_INTERNAL extern unsigned sim_drv_primary_flags[SIM_MAX_DEVICES];
SIM_INTERNAL extern struct import *sim_drv_imports;
SIM_INTERNAL extern struct host_alloc *sim_drv_host;
SIM_INTERNAL extern uint64_t sim_drv_next_id; /* context ids, event serials, host ids */
SIM_INTERNAL extern unsigned sim_drv_gen;     /* bumped in a fork child: stale TLS stacks */
SIM_INTERNAL extern int sim_drv_deinit;       /* set by the destructor */
SIM_INTERNAL extern unsigned long sim_drv_launch_count; /* launches so far (driver_module.c) */

struct sim_drv_counters {
    uint64_t allocs, ipc_gets, ipc_opens, ipc_closes, pool_exports, pool_imports;
};
SIM_INTERNAL extern struct sim_drv_counters sim_drv_counts;

/* A sticky error of this process (driver_queue.c), 0 while none. */
SIM_INTERNAL extern CUresult sim_drv_sticky;

#define ENTER()                                                                                    \
    do {                                                                                           \
        if (!sim_attached())                                                                       \
            return sim_drv_deinit ? CUDA_ERROR_DEINITIALIZED : CUDA_ERROR_NOT_INITIALIZED;         \
        if (sim_drv_sticky) return sim_drv_sticky;                                                 \
    } while (0)

/* One more of counter *c (relaxed). */
SIM_INTERNAL void sim_drv_count(uint64_t *c);
/* Consumes one injected failure of `kind`; true when the call must fail. */
SIM_INTERNAL int sim_drv_fault(enum simcuda_fault kind);
/* The registered object with handle key of `kind`, or NULL. Caller holds
 * sim_drv_lock. */
SIM_INTERNAL struct obj *sim_drv_obj_find(const void *key, int kind);
/* Adds o (caller holds sim_drv_lock). Returns 0, or -1 when out of memory. */
SIM_INTERNAL int sim_drv_obj_add(struct obj *o, int kind);
/* A hash step for the IPC handles' check words and the device UUIDs. */
SIM_INTERNAL uint64_t sim_drv_mix(uint64_t h, uint64_t v);
/* Reads the one record of len bytes that an exported shareable handle (a
 * POSIX fd passed as os_handle, as cuda.h passes it) holds. 0, or -1 for
 * anything else: not an fd, not a regular file of exactly len bytes (a
 * pipe, socket or terminal is refused before any read, so it never
 * blocks). */
SIM_INTERNAL int sim_drv_fd_record(void *os_handle, void *rec, size_t len);

/* ---- contexts (driver_ctx.c) and devices (driver_device.c) ---- */

SIM_INTERNAL int sim_drv_valid_device(CUdevice d);
/* The live context with handle c, or NULL. Caller holds sim_drv_lock. */
SIM_INTERNAL struct sim_ctx *sim_drv_ctx_lookup_locked(CUcontext c);
/* The live context with id `id`, or NULL. Caller holds sim_drv_lock. */
SIM_INTERNAL struct sim_ctx *sim_drv_ctx_by_id_locked(uint64_t id);
/* The calling thread's current context, validated; NULL if none. Takes
 * sim_drv_lock. */
SIM_INTERNAL struct sim_ctx *sim_drv_current_ctx(void);

/* ---- streams and events (driver_stream.c) ---- */

/* Validates a stream handle: the special streams and registered ones. */
SIM_INTERNAL CUresult sim_drv_check_stream(CUstream s);
/* Validates an event handle; copies the event to *copy_out when given. */
SIM_INTERNAL CUresult sim_drv_check_event(CUevent e, struct sim_event *copy_out);
/* Registers a new event of the current context. */
SIM_INTERNAL CUresult sim_drv_event_new(CUevent *phEvent, unsigned int Flags);

/* ---- pointers (driver_mem.c) ---- */

enum ptr_kind { PTR_NONE = 0, PTR_DEVICE, PTR_IMPORT, PTR_HOST, PTR_FOREIGN };

/* What a pointer refers to, from this process's point of view. */
struct ptr_info {
    enum ptr_kind kind;
    unsigned dev;
    CUdeviceptr base;
    uint64_t size;
    uint64_t serial; /* BUFFER_ID */
    uint32_t flags;  /* SIM_F_* */
    struct sim_ctx *ctx;
    uint64_t pool_id;                /* PTR_DEVICE, SIM_F_POOL: its pool's machine-wide id */
    CUmemoryPool pool;               /* PTR_IMPORT of a pool import: the imported pool */
    unsigned long long handle_types; /* SIM_F_VMM: the allocation's requested handle types */
    unsigned access; /* SIM_F_VMM: the mapping's CU_MEM_ACCESS_FLAGS_* for its device */
};

enum access { ANY_MEMORY = 0, DEVICE_ONLY = 1, DEVICE_OR_PINNED = 2 };

/* Classifies p (driver_mem.c); takes sim_drv_lock, no machine mutex. */
SIM_INTERNAL enum ptr_kind sim_drv_classify(CUdeviceptr p, struct ptr_info *out);
/* Checks that [p, p + n) may be accessed in `mode` (driver_mem.c). */
SIM_INTERNAL CUresult sim_drv_check_range(CUdeviceptr p, size_t n, enum access mode);

/* ---- VMM memory (driver_vmm.c) ---- */

/* Fills *out (kind PTR_DEVICE, flags SIM_F_VMM, base and size of the one
 * mapping) when p lies in a VMM mapping of this process; returns 1, else 0.
 * Caller holds sim_drv_lock. */
SIM_INTERNAL int sim_drv_vmm_classify_locked(CUdeviceptr p, struct ptr_info *out);
/* Checks [p, p + n) (p in a VMM mapping) against this process's adjacent
 * mappings: CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE (not all mapped) or
 * CUDA_ERROR_ILLEGAL_ADDRESS (a mapping without access). Takes sim_drv_lock. */
SIM_INTERNAL CUresult sim_drv_vmm_check_range(CUdeviceptr p, size_t n);
/* Forgets this process's VMM tables in a fork child. */
SIM_INTERNAL void sim_drv_vmm_fork_child(void);

/* ---- host-located VMM memory (driver_vmm_host.c) ---- */

/* Whether loc is a host location (HOST, HOST_NUMA, HOST_NUMA_CURRENT). */
SIM_INTERNAL int sim_drv_vmm_host_location(const CUmemLocation *loc);
/* Checks the rest of a host-located CUmemAllocationProp. */
SIM_INTERNAL CUresult sim_drv_vmm_host_check(const CUmemAllocationProp *prop);
/* A new host memory file of size bytes, or -1. */
SIM_INTERNAL int sim_drv_vmm_host_create(size_t size);
/* Maps [offset, offset + size) of the file at `at` (replacing what is
 * there); MAP_FAILED on failure. */
SIM_INTERNAL void *sim_drv_vmm_host_map(int fd, size_t offset, size_t size, CUdeviceptr at);

/* ---- builtin kernels (driver_kernels.c) ---- */

/* What a builtin kernel's launch passed (its parameters, taken at launch). */
struct sim_builtin_args {
    uint64_t ptr;   /* the words it works on */
    uint64_t count; /* how many 32-bit words */
    uint32_t value;
};
struct sim_kernel;
/* The builtin a kernel of this name is (SIM_BUILTIN_*), 0 for none. */
SIM_INTERNAL int sim_drv_builtin_of(const char *name);
/* Whether cuFuncGetParamInfo refuses builtin b (its layout is hidden). */
SIM_INTERNAL int sim_drv_builtin_opaque(int b);
/* Reads builtin b's parameters from a launch's params or extra buffer
 * (layout k). Returns 0, or -1 when they cannot be read. */
SIM_INTERNAL int sim_drv_builtin_args(int b, const struct sim_kernel *k, void **params,
                                      void **extra, struct sim_builtin_args *out);
/* Runs builtin b on the memory as mapped now. Returns CUDA_SUCCESS, or
 * CUDA_ERROR_ILLEGAL_ADDRESS when its range is not valid device memory (the
 * kernel faulted). Takes sim_drv_lock (range checks). */
SIM_INTERNAL CUresult sim_drv_builtin_run(int b, const struct sim_builtin_args *a);
/* Writes n elements of `width` (1, 2 or 4) bytes of value at dst. */
SIM_INTERNAL void sim_drv_fill(CUdeviceptr dst, unsigned value, unsigned width, size_t n);

/* The parameter layout of a live function of a loaded module, NULL for
 * any other handle (driver_module.c). Takes sim_drv_lock. */
SIM_INTERNAL const struct sim_kernel *sim_drv_function_layout(CUfunction f);

/* ---- queued work (driver_queue.c) ---- */

/* Work issued on stream s is queued when s is held or still has queued
 * work (stream order); each of these returns 1 when it queued the work (its
 * effect comes at completion), 0 when the caller does it now. All take
 * sim_drv_lock. A kernel launch (builtin b with args, or 0): its parameter
 * words are recorded as what it may touch. */
SIM_INTERNAL int sim_drv_queue_launch(CUstream s, const struct sim_kernel *k, int builtin,
                                      const struct sim_builtin_args *args, void **params,
                                      void **extra);
/* An asynchronous copy of n bytes; stage: take the source's bytes now (a
 * pageable source, which the driver stages before returning). */
SIM_INTERNAL int sim_drv_queue_copy(CUstream s, CUdeviceptr dst, CUdeviceptr src, size_t n,
                                    int stage);
/* An asynchronous set of n elements of `width` bytes. */
SIM_INTERNAL int sim_drv_queue_set(CUstream s, CUdeviceptr dst, unsigned value, unsigned width,
                                   size_t n);
/* cuStreamWaitEvent: s's later work waits for stream `on`'s work up to
 * sequence upto (an event's `after`). Takes sim_drv_lock. */
SIM_INTERNAL void sim_drv_queue_wait(CUstream s, CUstream on, uint64_t upto);
/* The host waits for stream s's queued work (all streams' with
 * sync_all; s's up to `upto` with sync_upto), and what it depends on:
 * it completes now. Take sim_drv_lock; effects run without it. */
SIM_INTERNAL void sim_drv_queue_sync(CUstream s);
SIM_INTERNAL void sim_drv_queue_sync_all(void);
SIM_INTERNAL void sim_drv_queue_sync_upto(CUstream s, uint64_t upto);
/* Whether no stream is held and nothing is queued (a hint read without
 * the lock: the common case stays off it). */
SIM_INTERNAL int sim_drv_queue_idle(void);
/* Whether stream s has queued work. Takes sim_drv_lock. */
SIM_INTERNAL int sim_drv_queue_busy(CUstream s);
/* The sequence number of the last work queued on s, 0 when none (what an
 * event recorded there now follows). Caller holds sim_drv_lock. */
SIM_INTERNAL uint64_t sim_drv_queue_tail_locked(CUstream s);
/* Whether every work queued on s up to sequence `upto` has completed.
 * Caller holds sim_drv_lock. */
SIM_INTERNAL int sim_drv_queue_done_locked(CUstream s, uint64_t upto);
/* The mappings [lo, lo + size) of the reservation that starts at res are
 * being unmapped: if queued work may touch them (a kernel's pointer into
 * the reservation at or before them, a copy or set overlapping them), the
 * context faults (driver_queue.c). Caller holds sim_drv_lock. */
SIM_INTERNAL void sim_drv_queue_unmapped_locked(CUdeviceptr res, size_t res_size, CUdeviceptr lo,
                                                size_t size);
/* Drops all queued work and holds (a context's end). Caller holds
 * sim_drv_lock. */
SIM_INTERNAL void sim_drv_queue_drop_locked(void);
/* Forgets queued work and holds in a fork child. */
SIM_INTERNAL void sim_drv_queue_fork_child(void);

#endif /* SIM_DRIVER_INTERNAL_H */
