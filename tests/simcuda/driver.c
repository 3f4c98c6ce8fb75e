/*
 * driver.c: the cu* entry points of the simulated driver.
 *
 * Per-process state lives here: contexts (a per-thread current-context
 * stack), streams and events (all work is synchronous, so they only need to
 * exist), pinned host allocations (plain memory), the table of opened IPC
 * mappings, modules and functions (kernel names and parameter layouts
 * parsed from the image by sim_image.c; code is never run), the
 * kernel-launch log, the fault-injection counters. Shared state (devices,
 * allocations, ownership, managed residency) lives in sim_state.c.
 *
 * Managed memory: a launch whose parameters point into a managed allocation
 * that is not resident on the launch's device counts a fault and migrates
 * it there (sim_managed_move_locked), as a GPU's first touch would. The
 * parameters are read with the function's layout (cuFuncGetParamInfo's
 * answer); without a layout only an `extra` parameter buffer can be read,
 * because kernelParams gives pointers but no sizes.
 *
 * Every handle a caller passes in (context, stream, event) is looked up in a
 * registry before it is dereferenced, and every device pointer is checked
 * against the allocation table, so bad input yields an error code, never a
 * crash. Lock order: g_lock (process-local) before the machine mutex; most
 * paths take only one of them.
 *
 * cuda.h is included with __CUDA_API_VERSION_INTERNAL, as NVIDIA builds its
 * driver, so the legacy names (cuMemAlloc with 32-bit pointers, cuCtxDestroy)
 * and the _v2/_ptds/_ptsz names all have their own prototypes and can all be
 * defined and exported.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>

#include "sim_image.h"
#include "sim_state.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (g_hash_oom = 1)
static int g_hash_oom;
#include <uthash.h>

#define SIM_DRIVER_VERSION 13000
#define CTX_STACK_MAX 64
#define LAUNCH_LOG 1024
#define HANDLE_MAGIC_MEM 0x4d4d4953u /* "SIMM" */
#define HANDLE_MAGIC_EVT 0x454d4953u /* "SIME" */

/* Shared with driver_pool.c (stream-ordered allocation and pools). */
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
/* Pool imports (driver_pool_ipc.c), kept with the IPC opens: records one
 * import in context ctx_id (import_add_locked; 0, or -1 when out of memory)
 * and releases one at base pointer p (import_drop; 0, or -1 when none). */
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
};

/* Modules belong to the process, not to a context, and are never freed:
 * cuModuleUnload marks a module and its functions dead (later use is
 * CUDA_ERROR_INVALID_HANDLE), so a stale handle is always safe to look at. */
struct sim_module {
    struct obj o;
    struct sim_image img;
    struct sim_function **funcs; /* by kernel index, made on first get */
    int dead;
};

struct sim_function {
    struct obj o;
    struct sim_module *mod;
    const struct sim_kernel *k; /* in mod->img */
    int dead;
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

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct obj *g_objs;     /* all streams, events, live contexts */
static struct sim_ctx *g_ctxs; /* live contexts (primary ones included) */
static struct sim_ctx g_primary[SIM_MAX_DEVICES];
static unsigned g_primary_refs[SIM_MAX_DEVICES];
static unsigned g_primary_flags[SIM_MAX_DEVICES];
static struct import *g_imports;
static struct host_alloc *g_host;
static uint64_t g_next_id = 1; /* context ids, event serials, host ids */
static unsigned g_gen = 1;     /* bumped in a fork child: stale TLS stacks */
static int g_deinit;           /* set by the destructor */
static int g_driver_thread;    /* started (start_driver_thread) */

static __thread CUcontext t_stack[CTX_STACK_MAX];
static __thread int t_depth;
static __thread unsigned t_gen;

static struct simcuda_launch g_launches[LAUNCH_LOG];
static unsigned long g_launch_count;

static unsigned g_faults[SIMCUDA_FAULT_COUNT];

static struct {
    uint64_t allocs, ipc_gets, ipc_opens, ipc_closes, pool_exports, pool_imports;
} g_counts;
static uint64_t g_next_import_id;      /* pool imports' BUFFER_IDs: SIM_IMPORT_ID_BIT | n */
#define SIM_IMPORT_ID_BIT (1ull << 63) /* never a serial: distinct from every allocation's */

static void count(uint64_t *c)
{
    __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* Consumes one injected failure of `kind`; true when the call must fail. */
static int fault(enum simcuda_fault kind)
{
    unsigned n = __atomic_load_n(&g_faults[kind], __ATOMIC_RELAXED);
    while (n > 0) {
        if (__atomic_compare_exchange_n(&g_faults[kind], &n, n - 1, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

static void driver_fork_child(void)
{
    /* The child inherits copies of the parent's objects; none of them is
     * valid in the child (as with real CUDA). Drop them (leaking the copies)
     * and require a new cuInit. */
    pthread_mutex_init(&g_lock, NULL);
    g_objs = NULL;
    g_ctxs = NULL;
    g_imports = NULL;
    g_host = NULL;
    memset(g_primary_refs, 0, sizeof(g_primary_refs));
    memset(g_faults, 0, sizeof(g_faults));
    memset(&g_counts, 0, sizeof(g_counts));
    g_launch_count = 0;
    g_driver_thread = 0; /* not in the child: its cuInit starts one */
    g_gen++;
}

__attribute__((constructor)) static void driver_init(void)
{
    pthread_atfork(NULL, NULL, driver_fork_child);
}

__attribute__((destructor)) static void driver_fini(void)
{
    /* Normal exit releases this process's allocations (poisoning exported
     * ones) and, for the last process out, removes the machine's files;
     * later calls report CUDA_ERROR_DEINITIALIZED. */
    g_deinit = 1;
    sim_detach();
}

#define ENTER()                                                                                    \
    do {                                                                                           \
        if (!sim_attached())                                                                       \
            return g_deinit ? CUDA_ERROR_DEINITIALIZED : CUDA_ERROR_NOT_INITIALIZED;               \
    } while (0)

static struct obj *obj_find(const void *key, int kind)
{
    struct obj *o = NULL;
    if (!key) return NULL;
    HASH_FIND_PTR(g_objs, &key, o);
    return o && o->kind == kind ? o : NULL;
}

/* Adds o (caller holds g_lock). Returns 0, or -1 when out of memory. */
static int obj_add(struct obj *o, int kind)
{
    o->key = o;
    o->kind = kind;
    g_hash_oom = 0;
    HASH_ADD_PTR(g_objs, key, o);
    return g_hash_oom ? -1 : 0;
}

static struct sim_ctx *ctx_lookup_locked(CUcontext c)
{
    return (struct sim_ctx *)obj_find(c, OBJ_CTX);
}

/* The calling thread's current context, validated; NULL if none. */
static struct sim_ctx *current_ctx(void)
{
    if (t_gen != g_gen) {
        t_gen = g_gen;
        t_depth = 0;
    }
    if (t_depth == 0) return NULL;
    pthread_mutex_lock(&g_lock);
    struct sim_ctx *c = ctx_lookup_locked(t_stack[t_depth - 1]);
    pthread_mutex_unlock(&g_lock);
    return c;
}

static int valid_device(CUdevice d)
{
    return sim_m && d >= 0 && (unsigned)d < sim_m->ndev;
}

/* Validates a stream handle: the special streams and registered ones. */
static CUresult check_stream(CUstream s)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    struct obj *o = obj_find(s, OBJ_STREAM);
    pthread_mutex_unlock(&g_lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* ---- initialisation, version, errors ---- */

static unsigned env_uint(const char *name, unsigned dflt, unsigned lo, unsigned hi)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "simcuda[%d]: ignoring %s=%s (want %u..%u)\n", (int)getpid(), name, s, lo,
                hi);
        return dflt;
    }
    return (unsigned)v;
}

/* NVIDIA's driver starts helper threads of its own once initialised (they
 * show in `ps -T`, e.g. "cuda-EvtHandlr"), so a CUDA program is never
 * single-threaded. That matters to timings: glibc takes its locks without
 * atomics while a process has one thread, and the first pthread_create
 * ends that for good. This one sleeps with every signal blocked.
 * SIMCUDA_DRIVER_THREAD=0 leaves the process single-threaded. */
static void *driver_thread(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* Once per process (a fork child's own); caller holds g_lock. */
static void start_driver_thread(void)
{
    if (g_driver_thread || !env_uint(SIMCUDA_ENV_DRIVER_THREAD, 1, 0, 1)) return;
    g_driver_thread = 1;
    pthread_attr_t attr;
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited: no host signal lands there */
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_create(&t, &attr, driver_thread, NULL) == 0)
        pthread_setname_np(t, "cuda-EvtHandlr");
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (g_deinit) return CUDA_ERROR_DEINITIALIZED;
    if (sim_attached()) return CUDA_SUCCESS;
    const char *name = getenv(SIMCUDA_ENV_MACHINE);
    if (!name || !*name) name = "default";
    unsigned ndev = env_uint(SIMCUDA_ENV_DEVICES, 1, 1, SIM_MAX_DEVICES);
    uint64_t capacity = 1ull << 30;
    const char *mem = getenv(SIMCUDA_ENV_DEVICE_MEMORY);
    if (mem && *mem) {
        uint64_t v;
        if (sim_parse_size(mem, &v) == 0 && v >= SIM_GRANULE && v <= SIM_MAX_CAPACITY)
            capacity = v;
        else
            fprintf(stderr, "simcuda[%d]: ignoring %s=%s (want 512..256G)\n", (int)getpid(),
                    SIMCUDA_ENV_DEVICE_MEMORY, mem);
    }
    uint64_t managed = capacity > SIM_MAX_CAPACITY / 4 ? SIM_MAX_CAPACITY : capacity * 4;
    const char *mm = getenv(SIMCUDA_ENV_MANAGED_MEMORY);
    if (mm && *mm) {
        uint64_t v;
        if (sim_parse_size(mm, &v) == 0 && v >= SIM_GRANULE && v <= SIM_MAX_CAPACITY)
            managed = v;
        else
            fprintf(stderr, "simcuda[%d]: ignoring %s=%s (want 512..256G)\n", (int)getpid(),
                    SIMCUDA_ENV_MANAGED_MEMORY, mm);
    }
    uint32_t max_allocs = SIM_DEFAULT_ALLOCS;
    const char *ma = getenv(SIMCUDA_ENV_MAX_ALLOCS);
    if (ma && *ma) {
        uint64_t v;
        if (sim_parse_size(ma, &v) == 0 && v >= 1 && v <= SIM_MAX_ALLOCS)
            max_allocs = (uint32_t)v;
        else
            fprintf(stderr, "simcuda[%d]: ignoring %s=%s (want 1..16M)\n", (int)getpid(),
                    SIMCUDA_ENV_MAX_ALLOCS, ma);
    }
    pthread_mutex_lock(&g_lock);
    int rc = sim_attach(name, ndev, capacity, managed, max_allocs);
    if (rc == SIM_OK) {
        static const char *const fail_env[SIMCUDA_FAULT_COUNT] = {
            SIMCUDA_ENV_FAIL_ALLOC, SIMCUDA_ENV_FAIL_IPC_GET, SIMCUDA_ENV_FAIL_IPC_OPEN,
            SIMCUDA_ENV_FAIL_IPC_CLOSE, SIMCUDA_ENV_FAIL_LAUNCH};
        for (int k = 0; k < SIMCUDA_FAULT_COUNT; k++)
            g_faults[k] = env_uint(fail_env[k], 0, 0, UINT_MAX);
        start_driver_thread();
    }
    pthread_mutex_unlock(&g_lock);
    if (rc == SIM_OK) return CUDA_SUCCESS;
    return rc == SIM_EINVAL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OPERATING_SYSTEM;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

#define ERROR_TABLE                                                                                \
    ERR(CUDA_SUCCESS, "no error")                                                                  \
    ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                              \
    ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                 \
    ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                        \
    ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                          \
    ERR(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled")                                         \
    ERR(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized")                           \
    ERR(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started")                           \
    ERR(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped")                           \
    ERR(CUDA_ERROR_STUB_LIBRARY, "stub library")                                                   \
    ERR(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "call requires newer driver")                       \
    ERR(CUDA_ERROR_DEVICE_UNAVAILABLE, "device unavailable")                                       \
    ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                \
    ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                       \
    ERR(CUDA_ERROR_DEVICE_NOT_LICENSED, "device not licensed")                                     \
    ERR(CUDA_ERROR_INVALID_IMAGE, "invalid image")                                                 \
    ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                      \
    ERR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                             \
    ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")                                  \
    ERR(CUDA_ERROR_UNMAP_FAILED, "unmap failed")                                                   \
    ERR(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped")                                             \
    ERR(CUDA_ERROR_ALREADY_MAPPED, "already mapped")                                               \
    ERR(CUDA_ERROR_NO_BINARY_FOR_GPU, "no binary for gpu")                                         \
    ERR(CUDA_ERROR_ALREADY_ACQUIRED, "already acquired")                                           \
    ERR(CUDA_ERROR_NOT_MAPPED, "not mapped")                                                       \
    ERR(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "not mapped as array")                                     \
    ERR(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "not mapped as pointer")                                 \
    ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "ecc uncorrectable")                                         \
    ERR(CUDA_ERROR_UNSUPPORTED_LIMIT, "unsupported limit")                                         \
    ERR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use")                               \
    ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access unsupported")                             \
    ERR(CUDA_ERROR_INVALID_PTX, "invalid ptx")                                                     \
    ERR(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid graphics context")                           \
    ERR(CUDA_ERROR_NVLINK_UNCORRECTABLE, "nvlink uncorrectable")                                   \
    ERR(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "jit compiler not found")                               \
    ERR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "unsupported ptx version")                             \
    ERR(CUDA_ERROR_JIT_COMPILATION_DISABLED, "jit compilation disabled")                           \
    ERR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "unsupported exec affinity")                         \
    ERR(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "unsupported devside sync")                           \
    ERR(CUDA_ERROR_CONTAINED, "contained")                                                         \
    ERR(CUDA_ERROR_INVALID_SOURCE, "invalid source")                                               \
    ERR(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                               \
    ERR(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found")               \
    ERR(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object init failed")                         \
    ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")       \
    ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                      \
    ERR(CUDA_ERROR_ILLEGAL_STATE, "illegal state")                                                 \
    ERR(CUDA_ERROR_LOSSY_QUERY, "lossy query")                                                     \
    ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                            \
    ERR(CUDA_ERROR_NOT_READY, "device not ready")                                                  \
    ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")                    \
    ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "launch out of resources")                             \
    ERR(CUDA_ERROR_LAUNCH_TIMEOUT, "launch timeout")                                               \
    ERR(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch incompatible texturing")                 \
    ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access already enabled")                     \
    ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access not enabled")                             \
    ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active")                               \
    ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                                   \
    ERR(CUDA_ERROR_ASSERT, "assert")                                                               \
    ERR(CUDA_ERROR_TOO_MANY_PEERS, "too many peers")                                               \
    ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "host memory already registered")               \
    ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "host memory not registered")                       \
    ERR(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error")                                   \
    ERR(CUDA_ERROR_ILLEGAL_INSTRUCTION, "illegal instruction")                                     \
    ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                                       \
    ERR(CUDA_ERROR_INVALID_ADDRESS_SPACE, "invalid address space")                                 \
    ERR(CUDA_ERROR_INVALID_PC, "invalid pc")                                                       \
    ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                                    \
    ERR(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative launch too large")                   \
    ERR(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory leak")                                       \
    ERR(CUDA_ERROR_NOT_PERMITTED, "not permitted")                                                 \
    ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                       \
    ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not ready")                                           \
    ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system driver mismatch")                               \
    ERR(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "compat not supported on device")               \
    ERR(CUDA_ERROR_MPS_CONNECTION_FAILED, "mps connection failed")                                 \
    ERR(CUDA_ERROR_MPS_RPC_FAILURE, "mps rpc failure")                                             \
    ERR(CUDA_ERROR_MPS_SERVER_NOT_READY, "mps server not ready")                                   \
    ERR(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "mps max clients reached")                             \
    ERR(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "mps max connections reached")                     \
    ERR(CUDA_ERROR_MPS_CLIENT_TERMINATED, "mps client terminated")                                 \
    ERR(CUDA_ERROR_CDP_NOT_SUPPORTED, "cdp not supported")                                         \
    ERR(CUDA_ERROR_CDP_VERSION_MISMATCH, "cdp version mismatch")                                   \
    ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "stream capture unsupported")                       \
    ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "stream capture invalidated")                       \
    ERR(CUDA_ERROR_STREAM_CAPTURE_MERGE, "stream capture merge")                                   \
    ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "stream capture unmatched")                           \
    ERR(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "stream capture unjoined")                             \
    ERR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "stream capture isolation")                           \
    ERR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "stream capture implicit")                             \
    ERR(CUDA_ERROR_CAPTURED_EVENT, "captured event")                                               \
    ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "stream capture wrong thread")                     \
    ERR(CUDA_ERROR_TIMEOUT, "timeout")                                                             \
    ERR(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "graph exec update failure")                         \
    ERR(CUDA_ERROR_EXTERNAL_DEVICE, "external device")                                             \
    ERR(CUDA_ERROR_INVALID_CLUSTER_SIZE, "invalid cluster size")                                   \
    ERR(CUDA_ERROR_FUNCTION_NOT_LOADED, "function not loaded")                                     \
    ERR(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type")                                 \
    ERR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration")               \
    ERR(CUDA_ERROR_KEY_ROTATION, "key rotation")                                                   \
    ERR(CUDA_ERROR_UNKNOWN, "unknown error")

static int error_index(CUresult e)
{
#define ERR(code, text) code,
    static const CUresult codes[] = {ERROR_TABLE};
#undef ERR
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (codes[i] == e) return (int)i;
    return -1;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
#define ERR(code, text) text,
    static const char *const texts[] = {ERROR_TABLE};
#undef ERR
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : texts[i];
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
#define ERR(code, text) #code,
    static const char *const names[] = {ERROR_TABLE};
#undef ERR
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : names[i];
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- devices ---- */

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
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
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "SimCUDA Device %d", dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    ENTER();
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    uint64_t a = mix(sim_m->machine_id, (uint64_t)dev), b = mix(a, 0x5349u);
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
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
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
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
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
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 0;
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
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", (unsigned)dev + 1);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    ENTER();
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev) || !valid_device(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

/* Registers a new context (caller holds g_lock). */
static struct sim_ctx *ctx_new_locked(unsigned dev, unsigned flags)
{
    struct sim_ctx *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->dev = dev;
    c->flags = flags;
    c->id = g_next_id++;
    if (obj_add(&c->o, OBJ_CTX) < 0) {
        free(c);
        return NULL;
    }
    c->next = g_ctxs;
    g_ctxs = c;
    return c;
}

/* Unregisters context c and everything created in it: streams, events,
 * host allocations, IPC mappings; then releases its device allocations.
 * Caller holds nothing. */
static void ctx_teardown(struct sim_ctx *c)
{
    pthread_mutex_lock(&g_lock);
    HASH_DEL(g_objs, &c->o);
    for (struct sim_ctx **pp = &g_ctxs; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    struct obj *o, *tmp;
    HASH_ITER(hh, g_objs, o, tmp)
    {
        struct sim_ctx *owner = o->kind == OBJ_STREAM  ? ((struct sim_stream *)o)->ctx
                                : o->kind == OBJ_EVENT ? ((struct sim_event *)o)->ctx
                                                       : NULL;
        if (owner == c) {
            HASH_DEL(g_objs, o);
            free(o);
        }
    }
    struct import *im, *itmp;
    HASH_ITER(hh, g_imports, im, itmp)
    {
        if (im->ctx == c) {
            HASH_DEL(g_imports, im);
            free(im);
        }
    }
    struct host_alloc *h, *htmp;
    HASH_ITER(hh, g_host, h, htmp)
    {
        if (h->ctx == c) {
            HASH_DEL(g_host, h);
            if (!h->registered) free(h->ptr);
            free(h);
        }
    }
    uint64_t id = c->id;
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < t_depth; i++) /* drop it from this thread's stack */
        if (t_stack[i] == (CUcontext)c) {
            memmove(&t_stack[i], &t_stack[i + 1], (size_t)(t_depth - i - 1) * sizeof(CUcontext));
            t_depth--;
            i--;
        }
    sim_free_ctx(id);
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    (void)current_ctx(); /* resets a stale stack */
    if (t_depth >= CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    struct sim_ctx *c = ctx_new_locked((unsigned)dev, flags);
    pthread_mutex_unlock(&g_lock);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = (CUcontext)c; /* a new context is pushed current */
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray)) return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams; /* affinity and CIG parameters are accepted and ignored */
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct sim_ctx *c = ctx_lookup_locked(ctx);
    pthread_mutex_unlock(&g_lock);
    if (!c || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    ctx_teardown(c);
    free(c);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)current_ctx();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    ENTER();
    (void)current_ctx();
    if (ctx) {
        pthread_mutex_lock(&g_lock);
        struct sim_ctx *c = ctx_lookup_locked(ctx);
        pthread_mutex_unlock(&g_lock);
        if (!c) return CUDA_ERROR_INVALID_CONTEXT;
        if (t_depth == 0)
            t_stack[t_depth++] = ctx;
        else
            t_stack[t_depth - 1] = ctx;
    } else if (t_depth > 0) {
        t_depth--;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTER();
    (void)current_ctx();
    pthread_mutex_lock(&g_lock);
    struct sim_ctx *c = ctx_lookup_locked(ctx);
    pthread_mutex_unlock(&g_lock);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_depth >= CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    ENTER();
    (void)current_ctx();
    if (t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = t_stack[--t_depth];
    if (pctx) *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

/* Context `ctx`, or the current one when ctx is NULL. */
static struct sim_ctx *ctx_or_current(CUcontext ctx)
{
    if (!ctx) return current_ctx();
    pthread_mutex_lock(&g_lock);
    struct sim_ctx *c = ctx_lookup_locked(ctx);
    pthread_mutex_unlock(&g_lock);
    return c;
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    ENTER();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = ctx_or_current(ctx);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *device = (CUdevice)c->dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    ENTER();
    return ctx_or_current(ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
    ENTER();
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    ENTER();
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx_or_current(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    ENTER();
    if (!ctxId) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = ctx_or_current(ctx);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    ENTER();
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5;
    return CUDA_SUCCESS;
}

/* ---- primary contexts ---- */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    struct sim_ctx *c = &g_primary[dev];
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_primary_refs[dev] == 0) {
        /* (Re)activate: same handle, fresh id. */
        memset(c, 0, sizeof(*c));
        c->dev = (unsigned)dev;
        c->flags = g_primary_flags[dev];
        c->primary = 1;
        c->id = g_next_id++;
        if (obj_add(&c->o, OBJ_CTX) < 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            c->next = g_ctxs;
            g_ctxs = c;
        }
    }
    if (r == CUDA_SUCCESS) {
        g_primary_refs[dev]++;
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* Deactivates primary context dev, releasing everything made in it. */
static void primary_reset(CUdevice dev)
{
    pthread_mutex_lock(&g_lock);
    int active = g_primary_refs[dev] > 0;
    g_primary_refs[dev] = 0;
    pthread_mutex_unlock(&g_lock);
    if (active) ctx_teardown(&g_primary[dev]);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER();
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    unsigned refs = g_primary_refs[dev];
    if (refs > 1) g_primary_refs[dev]--;
    pthread_mutex_unlock(&g_lock);
    if (refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (refs == 1) primary_reset(dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    ENTER();
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    *flags = g_primary_flags[dev];
    *active = g_primary_refs[dev] > 0;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    ENTER();
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    g_primary_flags[dev] = flags;
    g_primary[dev].flags = flags;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    ENTER();
    if (valid_device(dev) && g_primary_refs[dev] > 0)
        return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE; /* the pre-11.0 rule */
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    ENTER();
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    primary_reset(dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

/* ---- pointers ---- */

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
    uint64_t pool_id;  /* PTR_DEVICE, SIM_F_POOL: its pool's machine-wide id */
    CUmemoryPool pool; /* PTR_IMPORT of a pool import: the imported pool */
};

static struct sim_ctx *ctx_by_id_locked(uint64_t id)
{
    for (struct sim_ctx *c = g_ctxs; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* Classifies p: an allocation of this process (PTR_DEVICE), an IPC mapping
 * open in this process (PTR_IMPORT, even if the exporter has since freed
 * it), pinned host memory (PTR_HOST), somewhere in a device window that is
 * not ours (PTR_FOREIGN), or unknown (PTR_NONE: pageable host memory).
 * Takes no machine mutex: what it reads is this process's own (README,
 * "Which calls take the machine lock"). */
static enum ptr_kind classify(CUdeviceptr p, struct ptr_info *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t off;
    int dev = sim_window_of((uintptr_t)p, &off);
    if (dev >= 0) {
        uint8_t *win = sim_window((unsigned)dev);
        uint64_t ctx_id = 0;
        struct sim_own own;
        if (win && sim_own_find((unsigned)dev, off, &own) == 0) {
            out->kind = PTR_DEVICE;
            out->dev = (own.flags & SIM_F_MANAGED) ? own.home : (unsigned)dev;
            out->base = (CUdeviceptr)(uintptr_t)(win + own.offset);
            out->size = own.size;
            out->serial = own.serial;
            out->flags = own.flags;
            out->pool_id = own.pool_id;
            ctx_id = own.ctx_id;
        }
        pthread_mutex_lock(&g_lock);
        if (out->kind == PTR_DEVICE) {
            out->ctx = ctx_by_id_locked(ctx_id);
        } else {
            struct import *im, *tmp;
            HASH_ITER(hh, g_imports, im, tmp)
            {
                if (p >= im->ptr && p - im->ptr < im->size) {
                    out->kind = PTR_IMPORT;
                    out->dev = im->key.dev;
                    out->base = im->ptr;
                    out->size = im->size;
                    out->serial = im->pool ? im->buffer_id : im->key.serial;
                    out->ctx = im->ctx;
                    out->pool = im->pool;
                    break;
                }
            }
            if (out->kind == PTR_NONE) out->kind = PTR_FOREIGN;
        }
        pthread_mutex_unlock(&g_lock);
        return out->kind;
    }
    pthread_mutex_lock(&g_lock);
    struct host_alloc *h, *tmp;
    HASH_ITER(hh, g_host, h, tmp)
    {
        if ((uintptr_t)p >= (uintptr_t)h->ptr && (uintptr_t)p - (uintptr_t)h->ptr < h->size) {
            out->kind = PTR_HOST;
            out->base = (CUdeviceptr)(uintptr_t)h->ptr;
            out->size = h->size;
            out->serial = h->id;
            out->ctx = h->ctx;
            out->dev = h->ctx ? h->ctx->dev : 0;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return out->kind;
}

enum access { ANY_MEMORY = 0, DEVICE_ONLY = 1, DEVICE_OR_PINNED = 2 };

/* Checks that [p, p + n) may be accessed. ANY_MEMORY also accepts unknown
 * (pageable host) memory, DEVICE_OR_PINNED accepts cuMemHostAlloc memory,
 * DEVICE_ONLY only device memory (own or imported). A range inside a device
 * window that is not wholly inside one of our allocations or mappings is
 * always refused. */
static CUresult check_range(CUdeviceptr p, size_t n, enum access mode)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    switch (classify(p, &pi)) {
    case PTR_DEVICE:
    case PTR_IMPORT:
        break;
    case PTR_HOST:
        if (mode == DEVICE_ONLY) return CUDA_ERROR_INVALID_VALUE;
        break;
    case PTR_NONE:
        return mode == ANY_MEMORY ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (n > pi.size || p - pi.base > pi.size - n) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---- device memory ---- */

/* Ordinary allocations come from the current device's pool, managed ones
 * (flags SIM_F_MANAGED) from the managed pool, resident on the host. */
static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytesize, uint32_t flags)
{
    ENTER();
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fault(SIMCUDA_FAULT_ALLOC)) return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned pool = (flags & SIM_F_MANAGED) ? SIM_POOL_MANAGED : c->dev;
    uint8_t *win = sim_window(pool);
    if (!win) return CUDA_ERROR_OPERATING_SYSTEM;
    uint32_t index;
    uint64_t offset;
    int rc = sim_alloc(pool, bytesize, c->id, flags, c->dev, &index, &offset);
    if (rc != SIM_OK) return rc == SIM_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)(win + offset);
    count(&g_counts.allocs);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return mem_alloc(dptr, bytesize, 0);
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(dptr, bytesize, SIM_F_MANAGED);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    ENTER();
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + SIM_GRANULE - 1) / SIM_GRANULE * SIM_GRANULE;
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = mem_alloc(dptr, pitch * Height, 0);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    return r;
}

/* Needs no current context: like NVIDIA's driver (unified addressing), the
 * pointer names its allocation and so its owning context. numba frees its
 * pending deallocations after popping every context. */
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER();
    uint64_t off;
    int dev = sim_window_of((uintptr_t)dptr, &off);
    if (!dptr || dev < 0) return CUDA_ERROR_INVALID_VALUE;
    if (sim_free((unsigned)dev, off) == SIM_OK) return CUDA_SUCCESS;
    return sim_drv_import_free(dptr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
    ENTER();
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    sim_sweep_locked();
    /* Managed memory resident on the device occupies it too. */
    uint64_t used = sim_m->dev[c->dev].used + sim_m->dev[c->dev].managed;
    sim_unlock();
    if (free) *free = sim_m->capacity - used;
    if (total) *total = sim_m->capacity;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    ENTER();
    struct ptr_info pi;
    enum ptr_kind k = classify(dptr, &pi);
    if (k != PTR_DEVICE && k != PTR_IMPORT) return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = pi.base;
    if (psize) *psize = pi.size;
    return CUDA_SUCCESS;
}

/* Writes attribute `attr` of the pointer described by pi (kind PTR_NONE:
 * the neutral value cuPointerGetAttributes reports for unknown memory).
 * Boolean attributes are written as one byte. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr p,
                                  const struct ptr_info *pi)
{
    int known = pi->kind == PTR_DEVICE || pi->kind == PTR_IMPORT || pi->kind == PTR_HOST;
    int device = pi->kind == PTR_DEVICE || pi->kind == PTR_IMPORT;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = known ? (CUcontext)pi->ctx : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = device ? CU_MEMORYTYPE_DEVICE : known ? CU_MEMORYTYPE_HOST : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = known ? p : 0;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: /* pinned and managed memory */
        *(void **)data = pi->kind == PTR_HOST || (known && (pi->flags & SIM_F_MANAGED))
                             ? (void *)(uintptr_t)p
                             : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned char *)data = known;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned char *)data =
            pi->kind == PTR_DEVICE && !(pi->flags & (SIM_F_MANAGED | SIM_F_POOL));
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned char *)data = known && (pi->flags & SIM_F_MANAGED) != 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned char *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = known ? pi->serial : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = known ? (int)pi->dev : -2;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = known ? pi->base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = known ? pi->size : 0;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: /* those of its pool (driver_pool.c) */
        *(unsigned long long *)data = pi->kind == PTR_DEVICE && (pi->flags & SIM_F_POOL)
                                          ? sim_pool_handle_types(pi->pool_id)
                                          : 0;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = known ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: /* driver_pool.c; an import's: its imported pool */
        *(void **)data = pi->kind == PTR_DEVICE && (pi->flags & SIM_F_POOL)
                             ? (void *)sim_pool_handle(pi->dev, pi->pool_id)
                         : pi->kind == PTR_IMPORT ? (void *)pi->pool
                                                  : NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    ENTER();
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    enum ptr_kind k = classify(ptr, &pi);
    if (k == PTR_NONE || k == PTR_FOREIGN) return CUDA_ERROR_INVALID_VALUE;
    if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER && k != PTR_HOST &&
        !(pi.flags & SIM_F_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(data, attribute, ptr, &pi);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    ENTER();
    if (numAttributes == 0 || !attributes || !data) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    if (classify(ptr, &pi) == PTR_FOREIGN) pi.kind = PTR_NONE;
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i]) return CUDA_ERROR_INVALID_VALUE;
        CUresult r = pointer_attribute(data[i], attributes[i], ptr, &pi);
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

/* ---- host memory ---- */

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    ENTER();
    if (!pp || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct host_alloc *h = calloc(1, sizeof(*h));
    void *p = NULL;
    if (!h || posix_memalign(&p, 4096, bytesize) != 0) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->ptr = p;
    h->size = bytesize;
    h->ctx = c;
    pthread_mutex_lock(&g_lock);
    h->id = g_next_id++;
    g_hash_oom = 0;
    HASH_ADD_PTR(g_host, ptr, h);
    int oom = g_hash_oom;
    pthread_mutex_unlock(&g_lock);
    if (oom) {
        free(p);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    ENTER();
    struct host_alloc *h = NULL;
    pthread_mutex_lock(&g_lock);
    if (p) HASH_FIND_PTR(g_host, &p, h);
    if (h && !h->registered) HASH_DEL(g_host, h);
    pthread_mutex_unlock(&g_lock);
    if (!h || h->registered) return CUDA_ERROR_INVALID_VALUE;
    free(h->ptr);
    free(h);
    return CUDA_SUCCESS;
}

/* Page-locks the program's own [p, p + bytesize): afterwards it counts as
 * pinned host memory, as cuMemHostAlloc's does. A range that overlaps one
 * registered or allocated already is refused as the driver refuses it. */
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    ENTER();
    if (!p || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct host_alloc *h = calloc(1, sizeof(*h)), *o, *tmp;
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    h->ptr = p;
    h->size = bytesize;
    h->ctx = c;
    h->registered = true;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    HASH_ITER(hh, g_host, o, tmp)
    {
        if ((uintptr_t)p < (uintptr_t)o->ptr + o->size &&
            (uintptr_t)o->ptr < (uintptr_t)p + bytesize)
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (r == CUDA_SUCCESS) {
        h->id = g_next_id++;
        g_hash_oom = 0;
        HASH_ADD_PTR(g_host, ptr, h);
        if (g_hash_oom) r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_lock);
    if (r != CUDA_SUCCESS) free(h);
    return r;
}

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    ENTER();
    struct host_alloc *h = NULL;
    pthread_mutex_lock(&g_lock);
    if (p) HASH_FIND_PTR(g_host, &p, h);
    if (h && h->registered) HASH_DEL(g_host, h);
    pthread_mutex_unlock(&g_lock);
    if (!h || !h->registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    free(h);
    return CUDA_SUCCESS;
}

/* The device's address of pinned host memory: with unified addressing, the
 * host address itself. */
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    ENTER();
    if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    if (classify((CUdeviceptr)(uintptr_t)p, &pi) != PTR_HOST) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Profiling: nothing to collect here; both succeed, as with no profiler
 * attached. */
CUresult CUDAAPI cuProfilerStart(void)
{
    ENTER();
    return current_ctx() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuProfilerStop(void)
{
    ENTER();
    return current_ctx() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- copies and sets (synchronous; streams are only validated) ---- */

/* Copies n bytes; dst_dev/src_dev: that side must be device memory. */
static CUresult copy(CUdeviceptr dst, int dst_dev, CUdeviceptr src, int src_dev, size_t n,
                     CUstream s)
{
    ENTER();
    CUresult r = check_stream(s);
    if (r != CUDA_SUCCESS) return r;
    if (n == 0) return CUDA_SUCCESS;
    if ((r = check_range(dst, n, dst_dev ? DEVICE_ONLY : ANY_MEMORY)) != CUDA_SUCCESS ||
        (r = check_range(src, n, src_dev ? DEVICE_ONLY : ANY_MEMORY)) != CUDA_SUCCESS)
        return r;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

#define H(p) ((CUdeviceptr)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, 0, src, 0, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, 0, src, 0, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(dst, 0, src, 0, ByteCount, hStream);
}
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                    CUstream hStream)
{
    return copy(dst, 0, src, 0, ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, hStream);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, hStream);
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, H(srcHost), 0, ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, hStream);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, hStream);
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream)
{
    return copy(H(dstHost), 0, srcDevice, 1, ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                              unsigned int ByteCount)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, NULL);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, hStream);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, hStream);
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, hStream);
}

/* Fills n elements of `width` bytes at dst with `value`. */
static CUresult set(CUdeviceptr dst, unsigned value, unsigned width, size_t n, CUstream s)
{
    ENTER();
    CUresult r = check_stream(s);
    if (r != CUDA_SUCCESS) return r;
    if (dst % width) return CUDA_ERROR_INVALID_VALUE;
    if (n == 0) return CUDA_SUCCESS;
    if (n > SIZE_MAX / width || (r = check_range(dst, n * width, DEVICE_OR_PINNED)) != CUDA_SUCCESS)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
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
    return CUDA_SUCCESS;
}

#define DEFINE_SETS(BITS, T, W)                                                                    \
    CUresult CUDAAPI cuMemsetD##BITS##_v2(CUdeviceptr dstDevice, T v, size_t N)                    \
    {                                                                                              \
        return set(dstDevice, v, W, N, NULL);                                                      \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS##_v2_ptds(CUdeviceptr dstDevice, T v, size_t N)               \
    {                                                                                              \
        return set(dstDevice, v, W, N, NULL);                                                      \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS(CUdeviceptr_v1 dstDevice, T v, unsigned int N)                \
    {                                                                                              \
        return set(dstDevice, v, W, N, NULL);                                                      \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS##Async(CUdeviceptr dstDevice, T v, size_t N, CUstream s)      \
    {                                                                                              \
        return set(dstDevice, v, W, N, s);                                                         \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##BITS##Async_ptsz(CUdeviceptr dstDevice, T v, size_t N, CUstream s) \
    {                                                                                              \
        return set(dstDevice, v, W, N, s);                                                         \
    }
DEFINE_SETS(8, unsigned char, 1)
DEFINE_SETS(16, unsigned short, 2)
DEFINE_SETS(32, unsigned int, 4)

/* ---- legacy 32-bit-pointer allocation entry points ---- */

/* Simulated device pointers are mapping addresses above 4 GiB: they never
 * fit a CUdeviceptr_v1, so the legacy allocators report NOT_SUPPORTED. The
 * legacy copy/set/free forms above accept 32-bit values (which then match no
 * allocation). */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    ENTER();
    (void)bytesize;
    return dptr ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes)
{
    ENTER();
    (void)pPitch, (void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
    return dptr ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr)
{
    return cuMemFree_v2(dptr);
}

CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        if (free) *free = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        if (total) *total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return r;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                      CUdeviceptr_v1 dptr)
{
    CUdeviceptr b;
    size_t s;
    CUresult r = cuMemGetAddressRange_v2(&b, &s, dptr);
    if (r == CUDA_SUCCESS) {
        if (b > UINT_MAX || s > UINT_MAX) return CUDA_ERROR_NOT_SUPPORTED;
        if (pbase) *pbase = (CUdeviceptr_v1)b;
        if (psize) *psize = (unsigned int)s;
    }
    return r;
}

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
        if (valid_device(loc.id)) return loc.id;
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
    if (d != CU_DEVICE_CPU && !valid_device(d)) loc.id = -1; /* invalid device */
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
    if (!current_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = check_stream(hStream);
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

/* ---- streams ---- */

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    ENTER();
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_stream *s = calloc(1, sizeof(*s));
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = c;
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    pthread_mutex_lock(&g_lock);
    int rc = obj_add(&s->o, OBJ_STREAM);
    pthread_mutex_unlock(&g_lock);
    if (rc < 0) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return cuStreamCreateWithPriority(phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct obj *o = obj_find(hStream, OBJ_STREAM);
    if (o) HASH_DEL(g_objs, o);
    pthread_mutex_unlock(&g_lock);
    if (!o) return CUDA_ERROR_INVALID_HANDLE;
    free(o);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    ENTER();
    return check_stream(hStream);
}
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    return cuStreamSynchronize(hStream);
}
CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    ENTER();
    return check_stream(hStream); /* all work is already complete */
}
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
    return cuStreamQuery(hStream);
}

static CUresult check_event(CUevent e, struct sim_event *copy_out)
{
    pthread_mutex_lock(&g_lock);
    struct sim_event *ev = (struct sim_event *)obj_find(e, OBJ_EVENT);
    if (ev && copy_out) *copy_out = *ev;
    pthread_mutex_unlock(&g_lock);
    return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    ENTER();
    CUresult r = check_stream(hStream);
    if (r != CUDA_SUCCESS) return r;
    (void)Flags;
    return check_event(hEvent, NULL);
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return cuStreamWaitEvent(hStream, hEvent, Flags);
}

/* ---- events ---- */

static CUresult event_new(CUevent *phEvent, unsigned int Flags)
{
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_event *e = calloc(1, sizeof(*e));
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = c;
    e->flags = Flags;
    pthread_mutex_lock(&g_lock);
    e->serial = g_next_id++;
    int rc = obj_add(&e->o, OBJ_EVENT);
    pthread_mutex_unlock(&g_lock);
    if (rc < 0) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    ENTER();
    const unsigned all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~all) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    return event_new(phEvent, Flags);
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    ENTER();
    CUresult r = check_stream(hStream);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&g_lock);
    struct sim_event *e = (struct sim_event *)obj_find(hEvent, OBJ_EVENT);
    if (e) {
        e->recorded = 1;
        clock_gettime(CLOCK_MONOTONIC, &e->when);
    }
    pthread_mutex_unlock(&g_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return cuEventRecord(hEvent, hStream);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    ENTER();
    return check_event(hEvent, NULL);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    ENTER();
    return check_event(hEvent, NULL);
}

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    ENTER();
    if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
    struct sim_event a, b;
    if (check_event(hStart, &a) != CUDA_SUCCESS || check_event(hEnd, &b) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((a.flags | b.flags) & CU_EVENT_DISABLE_TIMING || !a.recorded || !b.recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    double ms = (double)(b.when.tv_sec - a.when.tv_sec) * 1e3 +
                (double)(b.when.tv_nsec - a.when.tv_nsec) / 1e6;
    *pMilliseconds = (float)ms;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct obj *o = obj_find(hEvent, OBJ_EVENT);
    if (o) HASH_DEL(g_objs, o);
    pthread_mutex_unlock(&g_lock);
    if (!o) return CUDA_ERROR_INVALID_HANDLE;
    free(o);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

/* ---- helpers for driver_pool.c (stream-ordered allocation) ---- */

CUresult sim_drv_enter(void)
{
    ENTER();
    return CUDA_SUCCESS;
}

CUresult sim_drv_stream_ctx(CUstream s, unsigned *dev, uint64_t *ctx_id)
{
    struct sim_ctx *c = NULL;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        c = current_ctx();
        if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    } else {
        pthread_mutex_lock(&g_lock);
        struct sim_stream *st = (struct sim_stream *)obj_find(s, OBJ_STREAM);
        c = st ? st->ctx : NULL;
        pthread_mutex_unlock(&g_lock);
        if (!c) return CUDA_ERROR_INVALID_HANDLE;
    }
    *dev = c->dev;
    *ctx_id = c->id;
    return CUDA_SUCCESS;
}

int sim_drv_fault_alloc(void)
{
    return fault(SIMCUDA_FAULT_ALLOC);
}

void sim_drv_count_alloc(void)
{
    count(&g_counts.allocs);
}

void sim_drv_count_pool_export(void)
{
    count(&g_counts.pool_exports);
}

/* ---- IPC ---- */

/* Records one more open of `kind` of allocation (dev, index, serial) in
 * context c, mapped at ptr, from `row` of the machine's table (a second one
 * in the same context counts, and returns the same pointer). Returns the
 * mapping's pointer, or 0 when out of memory (the caller gives the row
 * back). Caller holds g_lock. */
/* This context's import of allocation (dev, index, serial), or NULL.
 * Caller holds g_lock. */
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
    HASH_FIND(hh, g_imports, &key.key, sizeof(key.key), im);
    return im;
}

static CUdeviceptr import_add_locked(struct sim_ctx *c, enum sim_map_kind kind, unsigned dev,
                                     uint32_t index, uint64_t serial, CUdeviceptr ptr,
                                     uint64_t size, CUmemoryPool pool, uint32_t row)
{
    struct import *im = import_find_locked(c, kind, dev, index, serial);
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
    g_hash_oom = 0;
    HASH_ADD(hh, g_imports, key, sizeof(im->key), im);
    if (g_hash_oom) {
        free(im);
        return 0;
    }
    return ptr;
}

/* One more open of an import this context has already (the same pointer)
 * whose exporter has died since, or 0 when there is none. Caller holds
 * g_lock. */
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
    struct sim_ctx *c = current_ctx();
    struct import *im, *tmp, *found = NULL;
    pthread_mutex_lock(&g_lock);
    HASH_ITER(hh, g_imports, im, tmp)
    {
        if (im->ptr == ptr && im->key.kind == kind && (!found || im->ctx == c)) found = im;
    }
    uint32_t index = found ? found->key.index : 0, row = found ? found->row : 0;
    uint64_t serial = found ? found->key.serial : 0, ctx_id = found ? found->key.ctx_id : 0;
    if (found && --found->count == 0) {
        HASH_DEL(g_imports, found);
        free(found);
    }
    pthread_mutex_unlock(&g_lock);
    if (!found) return -1;
    sim_map_del(index, serial, ctx_id, row);
    return 0;
}

int sim_drv_import_add(unsigned dev, uint32_t index, uint64_t serial, uint64_t ctx_id,
                       CUdeviceptr ptr, uint64_t size, CUmemoryPool pool, uint32_t row,
                       CUdeviceptr *out)
{
    pthread_mutex_lock(&g_lock);
    struct sim_ctx *c = ctx_by_id_locked(ctx_id);
    CUdeviceptr p =
        c ? import_add_locked(c, SIM_MAP_POOL, dev, index, serial, ptr, size, pool, row) : 0;
    pthread_mutex_unlock(&g_lock);
    if (!p) return -1;
    *out = p;
    count(&g_counts.pool_imports);
    return 0;
}

int sim_drv_import_free(CUdeviceptr p)
{
    return import_drop(p, SIM_MAP_POOL);
}

static uint64_t mem_handle_check(const struct mem_handle *h)
{
    uint64_t c = mix(h->machine_id, ((uint64_t)h->magic << 32) | h->abi);
    c = mix(c, ((uint64_t)h->device << 32) | h->index);
    c = mix(c, h->serial);
    c = mix(c, h->offset);
    return mix(c, h->size);
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    ENTER();
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    if (!current_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t off;
    int dev = sim_window_of((uintptr_t)dptr, &off);
    if (dev < 0) return CUDA_ERROR_INVALID_VALUE;
    if (fault(SIMCUDA_FAULT_IPC_GET)) return CUDA_ERROR_OUT_OF_MEMORY;
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
        count(&g_counts.ipc_gets);
    }
    return r;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
    ENTER();
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct mem_handle h;
    memcpy(&h, &handle, sizeof(h));
    if (h.magic != HANDLE_MAGIC_MEM || h.abi != SIM_ABI || h.machine_id != sim_m->machine_id ||
        h.check != mem_handle_check(&h) || h.device >= sim_m->ndev ||
        h.index >= sim_m->max_allocs || h.zero != 0 || h.pad != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fault(SIMCUDA_FAULT_IPC_OPEN)) return CUDA_ERROR_MAP_FAILED;
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
        pthread_mutex_lock(&g_lock);
        CUdeviceptr again = import_reopen_locked(c, SIM_MAP_IPC, h.device, h.index, h.serial);
        pthread_mutex_unlock(&g_lock);
        if (!again) return CUDA_ERROR_INVALID_VALUE;
        *pdptr = again;
        count(&g_counts.ipc_opens);
        return CUDA_SUCCESS;
    }
    }
    pthread_mutex_lock(&g_lock);
    CUdeviceptr p = import_add_locked(c, SIM_MAP_IPC, h.device, h.index, h.serial,
                                      (CUdeviceptr)(uintptr_t)(win + h.offset), h.size, NULL, row);
    pthread_mutex_unlock(&g_lock);
    if (!p) {
        sim_map_del(h.index, h.serial, c->id, row);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pdptr = p;
    count(&g_counts.ipc_opens);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    ENTER();
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (fault(SIMCUDA_FAULT_IPC_CLOSE)) return CUDA_ERROR_INVALID_CONTEXT;
    if (import_drop(dptr, SIM_MAP_IPC) < 0) return CUDA_ERROR_INVALID_VALUE;
    count(&g_counts.ipc_closes);
    return CUDA_SUCCESS;
}

static uint64_t evt_handle_check(const struct evt_handle *h)
{
    uint64_t c = mix(h->machine_id, ((uint64_t)h->magic << 32) | h->abi);
    c = mix(c, (uint64_t)h->pid);
    return mix(c, h->serial);
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    ENTER();
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    struct sim_event e;
    if (check_event(event, &e) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_HANDLE;
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
    return event_new(phEvent, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
}

/* ---- modules and functions: names and parameter layouts only ---- */

static CUresult module_load(CUmodule *module, const void *image)
{
    ENTER();
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    if (!current_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_module *m = calloc(1, sizeof(*m));
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    switch (sim_image_parse(image, &m->img)) {
    case SIM_IMAGE_OK:
        break;
    case SIM_IMAGE_NOT_AN_IMAGE:
        free(m);
        return CUDA_ERROR_INVALID_IMAGE;
    case SIM_IMAGE_NO_CODE:
        free(m);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    default:
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->funcs = calloc(m->img.nkernels + 1, sizeof(*m->funcs));
    pthread_mutex_lock(&g_lock);
    int rc = m->funcs ? obj_add(&m->o, OBJ_MODULE) : -1;
    pthread_mutex_unlock(&g_lock);
    if (rc < 0) {
        sim_image_free(&m->img);
        free(m->funcs);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

/* Accepts a fat binary, nvcc's fat-binary wrapper, an ELF cubin or PTX. */
CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    return module_load(module, image);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return module_load(module, fatCubin);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    ENTER();
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_lock);
    struct sim_module *m = (struct sim_module *)obj_find(hmod, OBJ_MODULE);
    if (m && !m->dead) {
        m->dead = 1;
        for (unsigned i = 0; i < m->img.nkernels; i++)
            if (m->funcs[i]) m->funcs[i]->dead = 1;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* One handle per (module, kernel): repeated gets return the same one. */
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    ENTER();
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    struct sim_module *m = (struct sim_module *)obj_find(hmod, OBJ_MODULE);
    const struct sim_kernel *k = m && !m->dead ? sim_image_find(&m->img, name) : NULL;
    if (!m || m->dead) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (!k) {
        r = CUDA_ERROR_NOT_FOUND;
    } else {
        size_t i = (size_t)(k - m->img.kernels);
        if (!m->funcs[i]) {
            struct sim_function *f = calloc(1, sizeof(*f));
            if (f) {
                f->mod = m;
                f->k = k;
                if (obj_add(&f->o, OBJ_FUNCTION) < 0) {
                    free(f);
                    f = NULL;
                }
            }
            m->funcs[i] = f;
        }
        if (m->funcs[i])
            *hfunc = (CUfunction)m->funcs[i];
        else
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* The layout of a live function of a loaded module (layouts are immutable
 * and never freed, so the pointer stays valid without the lock); NULL for
 * any other handle. *dead is set for a function of an unloaded module. */
static const struct sim_kernel *function_layout(CUfunction f, int *dead)
{
    pthread_mutex_lock(&g_lock);
    struct sim_function *fn = (struct sim_function *)obj_find(f, OBJ_FUNCTION);
    const struct sim_kernel *k = fn && !fn->dead ? fn->k : NULL;
    *dead = fn && fn->dead;
    pthread_mutex_unlock(&g_lock);
    return k;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    ENTER();
    int dead;
    const struct sim_kernel *k = function_layout(func, &dead);
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    if ((!paramOffset && !paramSize) || paramIndex >= k->nparams) return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset) *paramOffset = k->params[paramIndex].offset;
    if (paramSize) *paramSize = k->params[paramIndex].size;
    return CUDA_SUCCESS;
}

/* ---- kernels: recorded, never executed ---- */

#define TOUCH_MAX 256 /* distinct managed allocations looked at per launch */

struct touch_set {
    uint64_t off[TOUCH_MAX]; /* managed-pool offsets found in parameter words */
    unsigned n;
};

/* Notes the 8-byte words of [p, p + n) that sit at 8-aligned parameter
 * offsets (`base` is p's offset in the parameter block) and point into this
 * process's managed-pool window. */
static void scan_words(struct touch_set *t, const uint8_t *p, size_t n, size_t base)
{
    for (size_t j = (8 - base % 8) % 8; j + 8 <= n && t->n < TOUCH_MAX; j += 8) {
        uint64_t v, off;
        memcpy(&v, p + j, 8);
        if (v && sim_window_of((uintptr_t)v, &off) == SIM_POOL_MANAGED) t->off[t->n++] = off;
    }
}

/* The managed allocations a launch on device `dev` touches fault and
 * migrate there when not resident; resident ones count as used (LRU). */
static void launch_touch(unsigned dev, const struct sim_kernel *k, void **params, void **extra)
{
    struct touch_set t;
    t.n = 0;
    if (extra) {
        const uint8_t *buf = NULL;
        size_t size = 0;
        for (unsigned i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                size = *(const size_t *)extra[i + 1];
        }
        if (buf && size) scan_words(&t, buf, size, 0);
    } else if (params && k) {
        for (unsigned i = 0; i < k->nparams; i++)
            if (params[i]) scan_words(&t, params[i], k->params[i].size, k->params[i].offset);
    }
    if (t.n == 0) return;
    uint32_t seen[TOUCH_MAX];
    unsigned nseen = 0;
    sim_lock();
    for (unsigned w = 0; w < t.n; w++) {
        uint32_t i = sim_find_locked(SIM_POOL_MANAGED, t.off[w]);
        if (i == SIM_NO_INDEX || !sim_is_mine(sim_entry(i))) continue;
        unsigned s;
        for (s = 0; s < nseen && seen[s] != i; s++)
            ;
        if (s < nseen) continue; /* one touch per allocation per launch */
        seen[nseen++] = i;
        if (sim_entry(i)->resident != (int32_t)dev) {
            sim_counters.faults++;
            (void)sim_managed_move_locked(i, (int)dev);
        } else {
            sim_managed_touch_locked(i);
        }
    }
    sim_unlock();
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                       void **extra)
{
    ENTER();
    struct sim_ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    /* A function of a loaded module brings its layout; any other non-NULL
     * handle is accepted and recorded without one (the simulated runtime's
     * kernels whose image could not be loaded). */
    int dead;
    const struct sim_kernel *k = function_layout(f, &dead);
    if (dead) return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (params && extra))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_stream(s);
    if (r != CUDA_SUCCESS) return r;
    if (fault(SIMCUDA_FAULT_LAUNCH)) return CUDA_ERROR_LAUNCH_FAILED;
    launch_touch(c->dev, k, params, extra);
    pthread_mutex_lock(&g_lock);
    struct simcuda_launch *l = &g_launches[g_launch_count % LAUNCH_LOG];
    l->func = (void *)f;
    l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz;
    l->block[0] = bx, l->block[1] = by, l->block[2] = bz;
    l->shared_mem = shmem;
    l->stream = (void *)s;
    l->params = params;
    l->extra = extra;
    g_launch_count++;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                  kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    return cuLaunchKernelEx(config, f, kernelParams, extra);
}

/* ---- test-only extras (simcuda.h) ---- */

SIMCUDA_API unsigned long simcuda_launch_count(void)
{
    pthread_mutex_lock(&g_lock);
    unsigned long n = g_launch_count;
    pthread_mutex_unlock(&g_lock);
    return n;
}

SIMCUDA_API int simcuda_last_launch(unsigned back, struct simcuda_launch *out)
{
    int rc = -1;
    pthread_mutex_lock(&g_lock);
    if (out && back < LAUNCH_LOG && back < g_launch_count) {
        *out = g_launches[(g_launch_count - 1 - back) % LAUNCH_LOG];
        rc = 0;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

SIMCUDA_API void simcuda_stats(struct simcuda_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (!sim_attached()) return;
    out->proc_allocs = __atomic_load_n(&g_counts.allocs, __ATOMIC_RELAXED);
    out->proc_ipc_gets = __atomic_load_n(&g_counts.ipc_gets, __ATOMIC_RELAXED);
    out->proc_ipc_opens = __atomic_load_n(&g_counts.ipc_opens, __ATOMIC_RELAXED);
    out->proc_ipc_closes = __atomic_load_n(&g_counts.ipc_closes, __ATOMIC_RELAXED);
    out->proc_pool_exports = __atomic_load_n(&g_counts.pool_exports, __ATOMIC_RELAXED);
    out->proc_pool_imports = __atomic_load_n(&g_counts.pool_imports, __ATOMIC_RELAXED);
    out->proc_launches = simcuda_launch_count();
    sim_lock();
    out->proc_frees = sim_counters.frees;
    out->proc_poisoned_frees = sim_counters.poisoned_frees;
    out->proc_swept = sim_counters.swept;
    out->proc_last_free_ns = sim_counters.last_free_ns;
    sim_unlock();
    sim_machine_stats(out);
}

SIMCUDA_API void simcuda_managed_stats(struct simcuda_managed_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (sim_attached()) sim_managed_stats(out);
}

SIMCUDA_API void simcuda_managed_peaks(struct simcuda_managed_peaks *out)
{
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (sim_attached()) sim_managed_peaks(out);
}

SIMCUDA_API void simcuda_reset_counters(void)
{
    if (!sim_attached()) return;
    sim_lock();
    sim_counters.faults = 0;
    sim_counters.bytes_htod = sim_counters.bytes_dtoh = sim_counters.bytes_dtod = 0;
    sim_counters.migrations = sim_counters.evictions = sim_counters.refused = 0;
    sim_counters.fetches = 0;
    for (unsigned d = 0; d < sim_m->ndev && d < SIMCUDA_MAX_DEVICES; d++)
        sim_counters.peak_resident[d] = sim_m->dev[d].managed; /* the peak restarts from now */
    sim_unlock();
}

SIMCUDA_API int simcuda_managed_residency(const void *ptr, struct simcuda_residency *out)
{
    uint64_t off;
    struct simcuda_residency r;
    if (!sim_attached() || sim_window_of((uintptr_t)ptr, &off) != SIM_POOL_MANAGED ||
        sim_managed_query(off, &r) < 0)
        return SIMCUDA_NOWHERE;
    r.base += (uint64_t)(uintptr_t)sim_window(SIM_POOL_MANAGED);
    if (out) *out = r;
    return r.location;
}

SIMCUDA_API void simcuda_inject(enum simcuda_fault kind, unsigned n)
{
    if ((unsigned)kind < SIMCUDA_FAULT_COUNT)
        __atomic_store_n(&g_faults[kind], n, __ATOMIC_RELAXED);
}
