/*
 * driver.c: the simulated driver's process state and its lifecycle: the
 * definitions of what driver_internal.h shares (the registry of contexts,
 * streams and events, the tables of IPC mappings and pinned host memory,
 * their lock, the counters), the fork handler, the destructor, cuInit (the
 * machine's options from the environment, the driver's helper thread), the
 * version and the error table, the helpers driver_pool.c uses, and the
 * test-only extras of simcuda.h. The cu* entry points live in the
 * driver_*.c files listed in driver_internal.h; shared state (devices,
 * allocations, ownership, managed residency) lives in sim_state.c.
 *
 * Every handle a caller passes in (context, stream, event) is looked up in a
 * registry before it is dereferenced, and every device pointer is checked
 * against the allocation table, so bad input yields an error code, never a
 * crash. Lock order: sim_drv_lock (process-local) before the machine mutex;
 * most paths take only one of them.
 *
 * cuda.h is included with __CUDA_API_VERSION_INTERNAL, as NVIDIA builds its
 * driver, so the legacy names (cuMemAlloc with 32-bit pointers, cuCtxDestroy)
 * and the _v2/_ptds/_ptsz names all have their own prototypes and can all be
 * defined and exported.
 */
#include "driver_internal.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_DRIVER_VERSION 13000

int sim_drv_hash_oom;
pthread_mutex_t sim_drv_lock = PTHREAD_MUTEX_INITIALIZER;
struct obj *sim_drv_objs;
struct sim_ctx *sim_drv_ctxs;
struct sim_ctx sim_drv_primary[SIM_MAX_DEVICES];
unsigned sim_drv_primary_refs[SIM_MAX_DEVICES];
unsigned sim_drv_primary_flags[SIM_MAX_DEVICES];
struct import *sim_drv_imports;
struct host_alloc *sim_drv_host;
uint64_t sim_drv_next_id = 1;
unsigned sim_drv_gen = 1;
int sim_drv_deinit;
unsigned long sim_drv_launch_count;
struct sim_drv_counters sim_drv_counts;

static int g_driver_thread; /* started (start_driver_thread) */
static unsigned g_faults[SIMCUDA_FAULT_COUNT];

void sim_drv_count(uint64_t *c)
{
    __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* Consumes one injected failure of `kind`; true when the call must fail. */
int sim_drv_fault(enum simcuda_fault kind)
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
    pthread_mutex_init(&sim_drv_lock, NULL);
    sim_drv_objs = NULL;
    sim_drv_ctxs = NULL;
    sim_drv_imports = NULL;
    sim_drv_host = NULL;
    sim_drv_vmm_fork_child();
    sim_drv_queue_fork_child();
    memset(sim_drv_primary_refs, 0, sizeof(sim_drv_primary_refs));
    memset(g_faults, 0, sizeof(g_faults));
    memset(&sim_drv_counts, 0, sizeof(sim_drv_counts));
    sim_drv_launch_count = 0;
    g_driver_thread = 0; /* not in the child: its cuInit starts one */
    sim_drv_gen++;
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
    sim_drv_deinit = 1;
    sim_detach();
}

struct obj *sim_drv_obj_find(const void *key, int kind)
{
    struct obj *o = NULL;
    if (!key) return NULL;
    HASH_FIND_PTR(sim_drv_objs, &key, o);
    return o && o->kind == kind ? o : NULL;
}

/* Adds o (caller holds sim_drv_lock). Returns 0, or -1 when out of memory. */
int sim_drv_obj_add(struct obj *o, int kind)
{
    o->key = o;
    o->kind = kind;
    sim_drv_hash_oom = 0;
    HASH_ADD_PTR(sim_drv_objs, key, o);
    return sim_drv_hash_oom ? -1 : 0;
}

uint64_t sim_drv_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

int sim_drv_fd_record(void *os_handle, void *rec, size_t len)
{
    uintptr_t h = (uintptr_t)os_handle;
    struct stat st;
    if (h > INT32_MAX || fstat((int)h, &st) < 0 || !S_ISREG(st.st_mode) ||
        st.st_size != (off_t)len || pread((int)h, rec, len, 0) != (ssize_t)len)
        return -1;
    return 0;
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

/* Once per process (a fork child's own); caller holds sim_drv_lock. */
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
    if (sim_drv_deinit) return CUDA_ERROR_DEINITIALIZED;
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
    pthread_mutex_lock(&sim_drv_lock);
    int rc = sim_attach(name, ndev, capacity, managed, max_allocs);
    if (rc == SIM_OK) {
        static const char *const fail_env[SIMCUDA_FAULT_COUNT] = {
            SIMCUDA_ENV_FAIL_ALLOC,     SIMCUDA_ENV_FAIL_IPC_GET,    SIMCUDA_ENV_FAIL_IPC_OPEN,
            SIMCUDA_ENV_FAIL_IPC_CLOSE, SIMCUDA_ENV_FAIL_LAUNCH,     SIMCUDA_ENV_FAIL_VMM_SHAREABLE,
            SIMCUDA_ENV_FAIL_VMM_HOST,  SIMCUDA_ENV_FAIL_PARAM_INFO, SIMCUDA_ENV_FAIL_VMM_MAP};
        for (int k = 0; k < SIMCUDA_FAULT_COUNT; k++)
            g_faults[k] = env_uint(fail_env[k], 0, 0, UINT_MAX);
        start_driver_thread();
    }
    pthread_mutex_unlock(&sim_drv_lock);
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
        c = sim_drv_current_ctx();
        if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    } else {
        pthread_mutex_lock(&sim_drv_lock);
        struct sim_stream *st = (struct sim_stream *)sim_drv_obj_find(s, OBJ_STREAM);
        c = st ? st->ctx : NULL;
        pthread_mutex_unlock(&sim_drv_lock);
        if (!c) return CUDA_ERROR_INVALID_HANDLE;
    }
    *dev = c->dev;
    *ctx_id = c->id;
    return CUDA_SUCCESS;
}

int sim_drv_fault_alloc(void)
{
    return sim_drv_fault(SIMCUDA_FAULT_ALLOC);
}

void sim_drv_count_alloc(void)
{
    sim_drv_count(&sim_drv_counts.allocs);
}

void sim_drv_count_pool_export(void)
{
    sim_drv_count(&sim_drv_counts.pool_exports);
}

/* ---- test-only extras (simcuda.h) ---- */

SIMCUDA_API void simcuda_stats(struct simcuda_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (!sim_attached()) return;
    out->proc_allocs = __atomic_load_n(&sim_drv_counts.allocs, __ATOMIC_RELAXED);
    out->proc_ipc_gets = __atomic_load_n(&sim_drv_counts.ipc_gets, __ATOMIC_RELAXED);
    out->proc_ipc_opens = __atomic_load_n(&sim_drv_counts.ipc_opens, __ATOMIC_RELAXED);
    out->proc_ipc_closes = __atomic_load_n(&sim_drv_counts.ipc_closes, __ATOMIC_RELAXED);
    out->proc_pool_exports = __atomic_load_n(&sim_drv_counts.pool_exports, __ATOMIC_RELAXED);
    out->proc_pool_imports = __atomic_load_n(&sim_drv_counts.pool_imports, __ATOMIC_RELAXED);
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
