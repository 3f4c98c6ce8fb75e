/* entry: the interposed entry points, generated from symbols.def.
 *
 * Each interposed function exists twice: the exported symbol (the runtime or
 * driver door) and a static twin handed out by the resolver door
 * (cuGetProcAddress, dlsym by handle). Both count the call for their door and
 * run the same do_<name>. An entry reached while this thread is already
 * inside the shim (the runtime calling the driver under a runtime-door
 * operation, or core's own CUDA calls) goes straight to the real function
 * uncounted, so one operation counts once, at the door it entered.
 *
 * The resolver door's own entry points are here too (dlsym, and the
 * do_ functions of cuGetProcAddress): resolve.c says which entry point to
 * hand out, this file hands out its twin. */
#include "entry.h"
#include "callsite.h"
#include "resolve.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <stdlib.h>

__thread int shim_depth __attribute__((tls_model("initial-exec")));

/* Call counters, per thread so that counting costs no locked instruction on
 * the hot path. A thread's table joins the list on its first counted call;
 * when the thread exits its counts move into `retired` and the table goes. */
struct counts {
    long long n[SYM_COUNT][DOOR_COUNT];
    struct counts *next;
};
static __thread struct counts *thread_counts __attribute__((tls_model("initial-exec")));
static struct counts *all_counts, retired;
static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t counts_key;
static pthread_once_t counts_once = PTHREAD_ONCE_INIT;
static struct counts fallback; /* when a table cannot be had: shared, racy */

static void retire_counts(void *p)
{
    struct counts *c = p;
    thread_counts = NULL; /* runs in the exiting thread itself */
    pthread_mutex_lock(&counts_lock);
    for (struct counts **pp = &all_counts; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    for (int id = 0; id < SYM_COUNT; id++)
        for (int d = 0; d < DOOR_COUNT; d++)
            retired.n[id][d] += c->n[id][d];
    pthread_mutex_unlock(&counts_lock);
    free(c);
}

static void make_counts_key(void)
{
    pthread_key_create(&counts_key, retire_counts);
}

static struct counts *join_counts(void)
{
    struct counts *c = calloc(1, sizeof *c);
    pthread_once(&counts_once, make_counts_key);
    if (!c || pthread_setspecific(counts_key, c)) {
        free(c);
        return &fallback;
    }
    pthread_mutex_lock(&counts_lock);
    c->next = all_counts;
    all_counts = c;
    pthread_mutex_unlock(&counts_lock);
    return thread_counts = c;
}

static inline void count_call(enum symbol_id id, enum door door)
{
    struct counts *c = thread_counts;
    if (__builtin_expect(!c, 0)) c = join_counts();
    __atomic_store_n(&c->n[id][door], c->n[id][door] + 1, __ATOMIC_RELAXED);
}

static const char *const names[SYM_COUNT] = {
#define RUNTIME(ret, name, params, args) #name,
#define RUNTIME_PASS(ret, name, params, args) #name,
#define DRIVER(ret, name, base, ver, params, args) #name,
#define DRIVER_PASS(ret, name, base, ver, params, args) #name,
#include "symbols.def"
};

#define UNPAREN(...) __VA_ARGS__

/* The resolver itself must redirect even when reached from inside the shim:
 * the real runtime resolves the driver lazily, often inside the first
 * runtime-door call, and would otherwise cache the real driver forever. */
#define RUNS_NESTED(name)                                                                          \
    (SYM_##name == SYM_cuGetProcAddress || SYM_##name == SYM_cuGetProcAddress_v2)

/* The entry points that capture a call site (exports and opens, legacy and
 * pool) mark where the program's call returns to, and the stack word holding
 * it (this function's frame record: __builtin_frame_address gives it one),
 * so that a call site seen before is known again without unwinding
 * (callsite.h). */
#define MARKS_CALLSITE(name)                                                                       \
    (SYM_##name == SYM_cudaIpcGetMemHandle || SYM_##name == SYM_cudaIpcOpenMemHandle ||            \
     SYM_##name == SYM_cuIpcGetMemHandle || SYM_##name == SYM_cuIpcOpenMemHandle ||                \
     SYM_##name == SYM_cuIpcOpenMemHandle_v2 || SYM_##name == SYM_cudaMemPoolExportPointer ||      \
     SYM_##name == SYM_cudaMemPoolImportPointer || SYM_##name == SYM_cuMemPoolExportPointer ||     \
     SYM_##name == SYM_cuMemPoolImportPointer || SYM_##name == SYM_cuMemCreate ||                  \
     SYM_##name == SYM_cuMemMap || SYM_##name == SYM_cuMemImportFromShareableHandle)

/* One entry point: fname, reached through door, running do_##name.
 * Trap (the hot path): fname itself does only the nested check, so that a
 * call passed straight through (the runtime's driver calls under a
 * runtime-door operation) costs a few instructions and no saved registers;
 * everything else happens in enter_##fname, reached by a tail call. The
 * call-site mark stays in fname: its return address and the stack word
 * holding it are the program's only there. */
#define ENTRY(kind, linkage, ret, name, fname, door, params, args)                                 \
    static __attribute__((noinline)) ret enter_##fname params                                      \
    {                                                                                              \
        resolve_all();                                                                             \
        if (shim_depth == 0) count_call(SYM_##name, door);                                         \
        shim_depth++;                                                                              \
        ret result = do_##name args;                                                               \
        shim_depth--;                                                                              \
        return result;                                                                             \
    }                                                                                              \
    linkage ret fname params                                                                       \
    {                                                                                              \
        if (shim_depth > 0 && !RUNS_NESTED(name)) return CALL_REAL_##kind(name, args);             \
        if (!MARKS_CALLSITE(name)) return enter_##fname args;                                      \
        callsite_mark(__builtin_return_address(0), (void *const *)__builtin_frame_address(0) + 1); \
        ret result = enter_##fname args;                                                           \
        callsite_mark(NULL, NULL);                                                                 \
        return result;                                                                             \
    }

/* Pass-through entry points get a generated do_<name>. */
#define RUNTIME_PASS(ret, name, params, args)                                                      \
    static ret do_##name params                                                                    \
    {                                                                                              \
        return CALL_REAL_RUNTIME(name, args);                                                      \
    }
#define DRIVER_PASS(ret, name, base, ver, params, args)                                            \
    static ret do_##name params                                                                    \
    {                                                                                              \
        return CALL_REAL_DRIVER(name, args);                                                       \
    }
#include "symbols.def"

#define RUNTIME(ret, name, params, args)                                                           \
    ENTRY(RUNTIME, SHIM_EXPORT, ret, name, name, DOOR_RUNTIME, params, args)                       \
    ENTRY(RUNTIME, static, ret, name, via_resolver_##name, DOOR_RESOLVER, params, args)
#define RUNTIME_PASS(ret, name, params, args) RUNTIME(ret, name, params, args)
#define DRIVER(ret, name, base, ver, params, args)                                                 \
    ENTRY(DRIVER, SHIM_EXPORT, ret, name, name, DOOR_DRIVER, params, args)                         \
    ENTRY(DRIVER, static, ret, name, via_resolver_##name, DOOR_RESOLVER, params, args)
#define DRIVER_PASS(ret, name, base, ver, params, args) DRIVER(ret, name, base, ver, params, args)
#include "symbols.def"

static void *const via_resolver[SYM_COUNT] = {
#define RUNTIME(ret, name, params, args) (void *)via_resolver_##name,
#define RUNTIME_PASS(ret, name, params, args) (void *)via_resolver_##name,
#define DRIVER(ret, name, base, ver, params, args) (void *)via_resolver_##name,
#define DRIVER_PASS(ret, name, base, ver, params, args) (void *)via_resolver_##name,
#include "symbols.def"
};

/* ---- the resolver door ---- */

/* The dlsym door: resolve.c's answer, or the resolver twin of the entry
 * point it names. EARLY_SAFE and noinline: see resolve_dlsym. */
SHIM_EXPORT EARLY_SAFE __attribute__((noinline)) void *dlsym(void *handle, const char *name)
{
    int id;
    void *p = resolve_dlsym(handle, name, __builtin_return_address(0), &id);
    return id >= 0 ? via_resolver[id] : p;
}

static void *redirect(const char *symbol, void *real, int cudaVersion, cuuint64_t flags)
{
    int id = resolve_redirect(symbol, real, cudaVersion, flags);
    return id >= 0 ? via_resolver[id] : real;
}

CUresult do_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUresult r = CALL_REAL_DRIVER(cuGetProcAddress, (symbol, pfn, cudaVersion, flags));
    if (r == CUDA_SUCCESS && pfn) *pfn = redirect(symbol, *pfn, cudaVersion, flags);
    return r;
}

CUresult do_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status)
{
    CUresult r = CALL_REAL_DRIVER(cuGetProcAddress_v2, (symbol, pfn, cudaVersion, flags, status));
    if (r == CUDA_SUCCESS && pfn) *pfn = redirect(symbol, *pfn, cudaVersion, flags);
    return r;
}

/* ---- call counts ---- */

const char *entry_name(enum symbol_id id)
{
    return names[id];
}

/* Calls of id through door from every thread, the exited ones too. counts_lock held. */
static long long calls_locked(enum symbol_id id, enum door door)
{
    long long n = retired.n[id][door] + __atomic_load_n(&fallback.n[id][door], __ATOMIC_RELAXED);
    for (struct counts *c = all_counts; c; c = c->next)
        n += __atomic_load_n(&c->n[id][door], __ATOMIC_RELAXED);
    return n;
}

void entry_calls_by_door(long long out[DOOR_COUNT])
{
    memset(out, 0, DOOR_COUNT * sizeof *out);
    pthread_mutex_lock(&counts_lock);
    for (int id = 0; id < SYM_COUNT; id++)
        for (int d = 0; d < DOOR_COUNT; d++)
            out[d] += calls_locked(id, d);
    pthread_mutex_unlock(&counts_lock);
}

long long entry_calls(enum symbol_id id, enum door door)
{
    pthread_mutex_lock(&counts_lock);
    long long n = calls_locked(id, door);
    pthread_mutex_unlock(&counts_lock);
    return n;
}
