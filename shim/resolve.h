/* resolve: the real CUDA functions, found once at start-up and again while
 * a slot is empty, and the state start-up publishes (see resolve.c). */
#ifndef RESOLVE_H
#define RESOLVE_H

#include "symbols.h"

/* Real-function slots, filled by resolve.c; NULL when not found. */
#define RUNTIME(ret, name, params, args) extern ret(CUDARTAPI *real_##name) params;
#define RUNTIME_PASS(ret, name, params, args) extern ret(CUDARTAPI *real_##name) params;
#define RUNTIME_REAL(ret, name, params) extern ret(CUDARTAPI *real_##name) params;
#define DRIVER(ret, name, base, ver, params, args) extern ret(CUDAAPI *real_##name) params;
#define DRIVER_PASS(ret, name, base, ver, params, args) extern ret(CUDAAPI *real_##name) params;
#define DRIVER_REAL(ret, name, params) extern ret(CUDAAPI *real_##name) params;
#include "symbols.def"

/* The real function of an entry, looked for again while its slot is empty
 * (the program may load libcudart or libcuda after the shim's first call).
 * Every wrapper reaches its real function through these. */
#define REAL(name) (real_##name ? real_##name : (resolve_missing(), real_##name))
/* The real call, or each door's "not initialised" error when the real
 * function cannot be found even now. */
#define CALL_REAL_RUNTIME(name, args) (REAL(name) ? real_##name args : cudaErrorInitializationError)
#define CALL_REAL_DRIVER(name, args) (REAL(name) ? real_##name args : CUDA_ERROR_NOT_INITIALIZED)

/* The real dlsym (the shim interposes dlsym), found before anything else at
 * start-up, which goes no further without it. */
extern void *(*real_dlsym)(void *, const char *);

/* The first definition of a libc-level name in an object loaded after the
 * shim (what dlsym(RTLD_NEXT, name) answers from here), read from the
 * loaded objects' own symbol tables: it neither allocates, nor locks, nor
 * asks the loader, so it may run before any constructor and inside another
 * library's initialisation (an allocator's, under its own lock). NULL when
 * no such object defines name, or the shim is not in the main namespace. */
void *resolve_next_libc(const char *name);

/* Resolve every real function once, then run the start-up init.c gave
 * (hooks.h) once it has been given (thread-safe, idempotent, never fails:
 * missing functions stay NULL and one warning is logged). resolve_done is
 * set when both ran. The check is inline: it runs on every intercepted
 * call. */
extern int resolve_done;
void resolve_once_slow(void);
static inline void resolve_all(void)
{
    if (__builtin_expect(!__atomic_load_n(&resolve_done, __ATOMIC_ACQUIRE), 0)) resolve_once_slow();
}

/* Fill the real-function slots that are still empty, if the process has
 * loaded objects since they were last looked for (cheap otherwise). Runs
 * the start-up path first when it has not run yet. */
void resolve_missing(void);

/* The resolver door (entry.c hands out the entry points): the id of the
 * entry point to hand out for a real function pointer that the real
 * cuGetProcAddress returned for base name `symbol` at (cudaVersion, flags),
 * or -1 to hand out real itself (not interposed, or not NVIDIA's). */
int resolve_redirect(const char *symbol, void *real, int cudaVersion, cuuint64_t flags);

/* The dlsym door's answer for (handle, name) asked from `caller`, as the
 * loader would give it without the shim in between; *id is the entry point
 * to hand out instead (its resolver twin), or -1. It may run before
 * anything else in the shim: see resolve.c. */
void *resolve_dlsym(void *handle, const char *name, const void *caller, int *id);

/* What tracking needs: not IPCSHIM_DISABLE, and the driver has what
 * tracking uses. Decided by start-up and published with it (resolve_done):
 * false until start-up ran; read without a lock. */
extern bool resolve_tracking;
static inline bool shim_tracking(void)
{
    return resolve_tracking;
}

/* Called by init.c's constructor, after libc's own initialiser: from then
 * on the dlsym door may ask the loader by handle. */
void resolve_note_libc_ready(void);

#endif
