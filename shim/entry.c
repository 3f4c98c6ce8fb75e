/* entry: the interposed entry points, generated from symbols.def.
 *
 * Each interposed function exists twice: the exported symbol (the runtime or
 * driver door) and a static twin handed out by the resolver door
 * (cuGetProcAddress, dlsym by handle). Both count the call for their door and
 * run the same do_<name>. An entry reached while this thread is already
 * inside the shim (the runtime calling the driver under a runtime-door
 * operation, or core's own CUDA calls) goes straight to the real function
 * uncounted, so one operation counts once, at the door it entered. */
#include "shim.h"

#include <stdatomic.h>

__thread int shim_depth __attribute__((tls_model("initial-exec")));

static atomic_llong calls[SYM_COUNT][DOOR_COUNT];

static const char *const names[SYM_COUNT] = {
#define RUNTIME(ret, name, params, args) #name,
#define RUNTIME_PASS(ret, name, params, args) #name,
#define DRIVER(ret, name, base, ver, params, args) #name,
#define DRIVER_PASS(ret, name, base, ver, params, args) #name,
#include "symbols.def"
};

#define UNPAREN(...) __VA_ARGS__
#define MISSING_RUNTIME cudaErrorInitializationError
#define MISSING_DRIVER CUDA_ERROR_NOT_INITIALIZED

/* The real call, or an error when the real function was never found. */
#define CALL_REAL_RUNTIME(name, args)                                                             \
    (real_##name || (resolve_runtime(), real_##name) ? real_##name args : MISSING_RUNTIME)
#define CALL_REAL_DRIVER(name, args) (real_##name ? real_##name args : MISSING_DRIVER)

/* The resolver itself must redirect even when reached from inside the shim:
 * the real runtime resolves the driver lazily, often inside the first
 * runtime-door call, and would otherwise cache the real driver forever. */
#define RUNS_NESTED(name) (SYM_##name == SYM_cuGetProcAddress || SYM_##name == SYM_cuGetProcAddress_v2)

/* One entry point: fname, reached through door, running do_##name. */
#define ENTRY(kind, linkage, ret, name, fname, door, params, args)                                \
    linkage ret fname params                                                                      \
    {                                                                                             \
        if (shim_depth > 0 && !RUNS_NESTED(name)) return CALL_REAL_##kind(name, args);            \
        resolve_all();                                                                            \
        if (shim_depth == 0)                                                                      \
            atomic_fetch_add_explicit(&calls[SYM_##name][door], 1, memory_order_relaxed);        \
        shim_depth++;                                                                             \
        ret result = do_##name args;                                                              \
        shim_depth--;                                                                             \
        return result;                                                                            \
    }

/* Pass-through entry points get a generated do_<name>. */
#define RUNTIME_PASS(ret, name, params, args)                                                     \
    static ret do_##name params { return CALL_REAL_RUNTIME(name, args); }
#define DRIVER_PASS(ret, name, base, ver, params, args)                                           \
    static ret do_##name params { return CALL_REAL_DRIVER(name, args); }
#include "symbols.def"

#define RUNTIME(ret, name, params, args)                                                          \
    ENTRY(RUNTIME, SHIM_EXPORT, ret, name, name, DOOR_RUNTIME, params, args)                      \
    ENTRY(RUNTIME, static, ret, name, via_resolver_##name, DOOR_RESOLVER, params, args)
#define RUNTIME_PASS(ret, name, params, args) RUNTIME(ret, name, params, args)
#define DRIVER(ret, name, base, ver, params, args)                                                \
    ENTRY(DRIVER, SHIM_EXPORT, ret, name, name, DOOR_DRIVER, params, args)                        \
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

static void *const exported[SYM_COUNT] = {
#define RUNTIME(ret, name, params, args) (void *)name,
#define RUNTIME_PASS(ret, name, params, args) (void *)name,
#define DRIVER(ret, name, base, ver, params, args) (void *)name,
#define DRIVER_PASS(ret, name, base, ver, params, args) (void *)name,
#include "symbols.def"
};

void *entry_via_resolver(enum symbol_id id) { return via_resolver[id]; }
void *entry_exported(enum symbol_id id) { return exported[id]; }
const char *entry_name(enum symbol_id id) { return names[id]; }

long long entry_calls(enum symbol_id id, enum door door)
{
    return atomic_load_explicit(&calls[id][door], memory_order_relaxed);
}
