/* resolve: finding the real CUDA functions, and the resolver door.
 *
 * One start-up path (resolve_once) fills every real-function slot; a slot
 * still empty is looked for again (resolve_missing) whenever a wrapper needs
 * it and the process has loaded objects since, because programs load the
 * runtime late (Python extensions dlopen libcudart with RTLD_LOCAL, after a
 * driver-first library such as numba has already entered the shim).
 *
 * Real driver functions come from libcuda.so.1 by name; real runtime
 * functions from the next definition after the shim (RTLD_NEXT), or from a
 * loaded libcudart that is not in the global scope. The resolver door hands
 * out the shim's own entry points where a program asks for a driver or
 * runtime function by name: cuGetProcAddress(_v2), and dlsym on a library
 * handle. Redirection happens only after the real lookup succeeded and only
 * when it landed in NVIDIA's driver or runtime (a plugin's own cudaMalloc is
 * left alone), keeps the variant the real resolver chose (_v2, _ptsz), and
 * never hands out a real slot that points back into the shim. The door's
 * entry points themselves are entry.c's: this file says which to hand out.
 *
 * Start-up (resolve_once_slow) is resolution, then the start-up init.c gave
 * (hooks.h): init.c is above this file, and reached only through that. */
#include "resolve.h"
#include "hooks.h"
#include "log.h"
#include "options.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#define RUNTIME(ret, name, params, args) ret(CUDARTAPI *real_##name) params;
#define RUNTIME_PASS(ret, name, params, args) ret(CUDARTAPI *real_##name) params;
#define RUNTIME_REAL(ret, name, params) ret(CUDARTAPI *real_##name) params;
#define DRIVER(ret, name, base, ver, params, args) ret(CUDAAPI *real_##name) params;
#define DRIVER_PASS(ret, name, base, ver, params, args) ret(CUDAAPI *real_##name) params;
#define DRIVER_REAL(ret, name, params) ret(CUDAAPI *real_##name) params;
#include "symbols.def"

/* Per interposed entry: its resolver base name and variant version (0 for
 * runtime entries, which cuGetProcAddress never returns). */
static const struct {
    const char *base;
    int version;
    void **real;
} variants[SYM_COUNT] = {
#define RUNTIME(ret, name, params, args) {NULL, 0, (void **)&real_##name},
#define RUNTIME_PASS(ret, name, params, args) {NULL, 0, (void **)&real_##name},
#define DRIVER(ret, name, base, ver, params, args) {#base, ver, (void **)&real_##name},
#define DRIVER_PASS(ret, name, base, ver, params, args) {#base, ver, (void **)&real_##name},
#include "symbols.def"
};

/* The interposed names, for the dlsym door. */
static const char *const names[SYM_COUNT] = {
#define RUNTIME(ret, name, params, args) #name,
#define RUNTIME_PASS(ret, name, params, args) #name,
#define DRIVER(ret, name, base, ver, params, args) #name,
#define DRIVER_PASS(ret, name, base, ver, params, args) #name,
#include "symbols.def"
};

void *(*real_dlsym)(void *, const char *);
static pthread_once_t all_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long objects_seen; /* dlpi_adds when the slots were last filled */
int resolve_done;
bool resolve_tracking;
static int libc_ready; /* set by init.c's constructor (resolve_note_libc_ready) */

void resolve_note_libc_ready(void)
{
    __atomic_store_n(&libc_ready, 1, __ATOMIC_RELEASE);
}

EARLY_SAFE static const struct link_map *shim_link_map(void);

/* Finds the real dlsym (the shim interposes dlsym) without the loader: see
 * resolve_next_libc. Idempotent and lock-free, so it may run on the dlsym
 * door's first call, inside another library's initialisation. Only where
 * the shim is not in the main namespace (a dlmopen) does it ask the loader,
 * by version. */
EARLY_SAFE static void find_real_dlsym(void)
{
    if (__atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE)) return;
    void *(*p)(void *, const char *) = (void *(*)(void *, const char *))resolve_next_libc("dlsym");
    static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (unsigned i = 0; i < sizeof versions / sizeof *versions && !p && !shim_link_map(); i++)
        p = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&real_dlsym, p, __ATOMIC_RELEASE);
}

/* True if p lies in the shim itself (an entry point, its resolver twin, the
 * dlsym door): from the start of its ELF header to the end of its data. */
EARLY_SAFE static bool is_shim_function(const void *p)
{
    extern const char __ehdr_start[] __attribute__((visibility("hidden")));
    extern const char _end[] __attribute__((visibility("hidden")));
    return (const char *)p >= __ehdr_start && (const char *)p < _end;
}

/* String helpers for the dlsym door, which must not call libc's: a
 * sanitizer runtime intercepts strcmp and friends, and asks the door for the
 * real ones before its interceptors work. */
EARLY_SAFE static bool same_string(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}
EARLY_SAFE static bool starts_with(const char *s, const char *prefix)
{
    while (*prefix && *s == *prefix)
        s++, prefix++;
    return !*prefix;
}

/* True if p lies in NVIDIA's driver or runtime (or the simulator standing in
 * for them, which has the same file names). */
EARLY_SAFE static bool in_cuda_library(const void *p)
{
    Dl_info info;
    if (!dladdr(p, &info) || !info.dli_fname) return false;
    const char *base = info.dli_fname;
    for (const char *c = info.dli_fname; *c; c++)
        if (*c == '/') base = c + 1;
    return starts_with(base, "libcuda.so") || starts_with(base, "libcudart.so");
}

/* dl_iterate_phdr callbacks: the number of objects ever loaded, and the path
 * of a loaded libcudart. */
static int count_loaded(struct dl_phdr_info *info, size_t size, void *adds)
{
    *(unsigned long long *)adds =
        size >= offsetof(struct dl_phdr_info, dlpi_subs) ? info->dlpi_adds : 0;
    return 1;
}
static int find_cudart(struct dl_phdr_info *info, size_t size, void *path)
{
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libcudart.so")) {
        *(const char **)path = info->dlpi_name;
        return 1;
    }
    return 0;
}

static void *lookup_runtime(void *cudart, const char *name)
{
    void *p = real_dlsym(RTLD_NEXT, name);
    if ((!p || is_shim_function(p)) && cudart) p = real_dlsym(cudart, name);
    return p && !is_shim_function(p) ? p : NULL;
}

/* Fill the empty runtime slots. Caller holds resolve_lock. */
static void resolve_runtime(void)
{
    const char *path = NULL;
    void *cudart = NULL;
    dl_iterate_phdr(find_cudart, &path);
    if (path) cudart = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
#define RUNTIME(ret, name, params, args)                                                           \
    if (!real_##name) *(void **)&real_##name = lookup_runtime(cudart, #name);
#define RUNTIME_PASS(ret, name, params, args) RUNTIME(ret, name, params, args)
#define RUNTIME_REAL(ret, name, params) RUNTIME(ret, name, (), ())
#include "symbols.def"
    if (cudart) dlclose(cudart);
}

/* Fill the empty driver slots from libcuda.so.1. Caller holds resolve_lock. */
static void resolve_driver(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cuda) cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        LOG_ONCE(LOG_WARN,
                 "libcuda.so.1 not found (%s); driver calls fail with CUDA_ERROR_NOT_INITIALIZED",
                 dlerror());
        return;
    }
    void *p;
#define DRIVER(ret, name, base, ver, params, args)                                                 \
    if (!real_##name) {                                                                            \
        p = real_dlsym(cuda, #name);                                                               \
        *(void **)&real_##name = p && !is_shim_function(p) ? p : NULL;                             \
    }
#define DRIVER_PASS(ret, name, base, ver, params, args) DRIVER(ret, name, base, ver, params, args)
#define DRIVER_REAL(ret, name, params) DRIVER(ret, name, base, ver, params, args)
#include "symbols.def"
    /* cuda stays open: the slots point into it. */
}

static unsigned long long objects_loaded(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(count_loaded, &adds);
    return adds;
}

void resolve_missing(void)
{
    if (!__atomic_load_n(&resolve_done, __ATOMIC_ACQUIRE)) {
        resolve_once_slow();
        return;
    }
    unsigned long long adds = objects_loaded();
    if (adds && adds == __atomic_load_n(&objects_seen, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&resolve_lock);
    if (!adds || adds != objects_seen) {
        resolve_driver();
        resolve_runtime();
        __atomic_store_n(&objects_seen, adds, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&resolve_lock);
}

/* The first half of start-up: real dlsym, options, real functions. */
static void resolve_once(void)
{
    find_real_dlsym();
    options_get();
    if (!real_dlsym) {
        LOG_ONCE(LOG_ERROR,
                 "cannot find the real dlsym; every call fails with an initialization error");
        return;
    }
    pthread_mutex_lock(&resolve_lock);
    objects_seen = objects_loaded();
    resolve_driver();
    resolve_runtime();
    pthread_mutex_unlock(&resolve_lock);
}

/* The second half: whether this process tracks, then init.c's start-up
 * (memory and core, fork chain, host swap, unwinder), which reads it. */
static void start_once(void)
{
    resolve_tracking = !options_get()->disable && real_cuMemFree_v2 &&
                       real_cuPointerGetAttributes && real_cuCtxGetCurrent;
    hooks_start();
    __atomic_store_n(&resolve_done, 1, __ATOMIC_RELEASE);
}

void resolve_once_slow(void)
{
    static pthread_once_t start_ctl = PTHREAD_ONCE_INIT;
    pthread_once(&all_once, resolve_once);
    /* Trap: an entry before init.c's constructor (another library's
     * constructor) finds no start-up given: it passes through untracked,
     * and start-up runs at the first entry after the constructor. */
    if (real_dlsym && hooks_given()) pthread_once(&start_ctl, start_once);
}

int resolve_redirect(const char *symbol, void *real, int cudaVersion, cuuint64_t flags)
{
    if (!symbol || !real || is_shim_function(real)) return -1;
    /* The variant the real resolver chose, recognised by address. */
    for (int id = 0; id < SYM_COUNT; id++)
        if (variants[id].base && *variants[id].real == real) return id;
    /* Not a known address (the driver handed out an internal alias): choose
     * by name, version and flags the way the driver does. */
    bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    int best = -1;
    for (int id = 0; id < SYM_COUNT; id++) {
        int v = variants[id].version;
        if (!variants[id].base || strcmp(variants[id].base, symbol)) continue;
        if ((v < 0) != per_thread || (v < 0 ? -v : v) > cudaVersion) continue;
        if (best < 0 || abs(v) > abs(variants[best].version)) best = id;
    }
    if (best < 0 || !in_cuda_library(real)) return -1;
    /* The twin calls the exported variant (the same driver function under
     * its public address), or this alias when the driver exports none. */
    if (!*variants[best].real) *variants[best].real = real;
    return best;
}

/* The dynamic tables of a loaded object that object_symbol reads. */
struct elf_tables {
    const ElfW(Sym) * symtab;
    const char *strtab;
    const uint32_t *gnu, *sysv;
    const ElfW(Half) * versym;
};

/* m's tables, from its .dynamic section; false when it has no symbol or no
 * string table. Trap: the loader relocates the d_ptr entries of .dynamic in
 * place, except in read-only ones (the vDSO), where they are still offsets
 * from l_addr. */
EARLY_SAFE static bool dynamic_tables(const struct link_map *m, struct elf_tables *t)
{
    t->symtab = NULL, t->strtab = NULL, t->gnu = NULL, t->sysv = NULL, t->versym = NULL;
    if (!m->l_ld) return false;
    for (const ElfW(Dyn) *d = m->l_ld; d->d_tag != DT_NULL; d++) {
        ElfW(Addr) a = d->d_un.d_ptr;
        if (a < m->l_addr) a += m->l_addr;
        if (d->d_tag == DT_SYMTAB)
            t->symtab = (const ElfW(Sym) *)a;
        else if (d->d_tag == DT_STRTAB)
            t->strtab = (const char *)a;
        else if (d->d_tag == DT_GNU_HASH)
            t->gnu = (const uint32_t *)a;
        else if (d->d_tag == DT_HASH)
            t->sysv = (const uint32_t *)a;
        else if (d->d_tag == DT_VERSYM)
            t->versym = (const ElfW(Half) *)a;
    }
    return t->symtab && t->strtab;
}

/* The address of m's own definition of name, read from its dynamic symbol
 * table (the default version where there are several), or NULL when m does
 * not define it. No loader call: dlsym on a startup object's link_map
 * crashes (its lookup scope is built only by a dlopen of it), and a
 * sanitizer's runtime may ask before malloc works. Trap: an IFUNC's address
 * is what its resolver returns. */
EARLY_SAFE static void *object_symbol(const struct link_map *m, const char *name)
{
    struct elf_tables t;
    if (!dynamic_tables(m, &t)) return NULL;
    const ElfW(Sym) *found = NULL;
    /* Defined, global or weak, this name; a hidden (non-default) version
     * only when nothing better turns up. */
#define CONSIDER(i)                                                                                \
    do {                                                                                           \
        const ElfW(Sym) *s = &t.symtab[i];                                                         \
        if (s->st_shndx != SHN_UNDEF && ELF64_ST_BIND(s->st_info) != STB_LOCAL &&                  \
            same_string(t.strtab + s->st_name, name)) {                                            \
            if (!t.versym || !(t.versym[i] & 0x8000)) {                                            \
                found = s;                                                                         \
                goto done;                                                                         \
            }                                                                                      \
            if (!found) found = s;                                                                 \
        }                                                                                          \
    } while (0)
    if (t.gnu) {
        uint32_t h = 5381;
        for (const unsigned char *c = (const unsigned char *)name; *c; c++)
            h = h * 33 + *c;
        uint32_t nbuckets = t.gnu[0], symoffset = t.gnu[1], bloom_words = t.gnu[2];
        const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(t.gnu + 4) + bloom_words);
        const uint32_t *chain = buckets + nbuckets;
        for (uint32_t i = nbuckets ? buckets[h % nbuckets] : 0; i >= symoffset && i; i++) {
            uint32_t hash = chain[i - symoffset];
            if ((hash | 1) == (h | 1)) CONSIDER(i);
            if (hash & 1) break;
        }
    } else if (t.sysv) {
        uint32_t h = 0, g;
        for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
            h = (h << 4) + *c;
            if ((g = h & 0xf0000000u)) h ^= g >> 24;
            h &= ~g;
        }
        uint32_t nbuckets = t.sysv[0];
        const uint32_t *buckets = t.sysv + 2, *chain = buckets + nbuckets;
        for (uint32_t i = nbuckets ? buckets[h % nbuckets] : 0; i; i = chain[i])
            CONSIDER(i);
    }
#undef CONSIDER
done:
    if (!found) return NULL;
    void *address = (void *)(m->l_addr + found->st_value);
    switch (ELF64_ST_TYPE(found->st_info)) {
    case STT_GNU_IFUNC:
#if defined(__x86_64__)
        return ((void *(*)(void))address)(); /* x86-64 resolvers take no arguments */
#endif
    case STT_TLS: {
        /* Rare in RTLD_NEXT lookups: let the loader answer, by a handle
         * (not before libc is initialised: see dlsym). */
        if (!__atomic_load_n(&libc_ready, __ATOMIC_ACQUIRE)) return NULL;
        void *h = dlopen(m->l_name, RTLD_LAZY | RTLD_NOLOAD), *p = h ? real_dlsym(h, name) : NULL;
        if (h) dlclose(h);
        return p;
    }
    default:
        return address;
    }
}

/* The first definition of name in an object after `self` in the loader's
 * list (its load order), as the dynamic linker would bind RTLD_NEXT. The
 * vDSO is skipped: it defines time() and friends, but the loader never
 * binds to it. */
EARLY_SAFE static void *definition_after(const struct link_map *self, const char *name)
{
    ElfW(Addr) vdso = (ElfW(Addr))getauxval(AT_SYSINFO_EHDR);
    for (const struct link_map *m = self->l_next; m; m = m->l_next) {
        if (m->l_addr == vdso || !m->l_name || !m->l_name[0]) continue;
        void *p = object_symbol(m, name);
        if (p) return p;
    }
    return NULL;
}

/* The shim's own entry in the main namespace's list of loaded objects,
 * found by its dynamic section; NULL when it was loaded elsewhere (dlmopen).
 * Reads the list the loader publishes for debuggers: no lock, no call. */
EARLY_SAFE static const struct link_map *shim_link_map(void)
{
    extern ElfW(Dyn) _DYNAMIC[];
    for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next)
        if (m->l_ld == _DYNAMIC) return m;
    return NULL;
}

EARLY_SAFE void *resolve_next_libc(const char *name)
{
    const struct link_map *self = shim_link_map();
    return self ? definition_after(self, name) : NULL;
}

/* dlsym(RTLD_NEXT, name) answered for the object at `caller`, as the dynamic
 * linker would without the shim in between. */
EARLY_SAFE static void *next_definition(const void *caller, const char *name)
{
    Dl_info info;
    struct link_map *self = NULL;
    if (!dladdr1(caller, &info, (void **)&self, RTLD_DL_LINKMAP) || !self)
        return real_dlsym(RTLD_NEXT, name);
    return definition_after(self, name);
}

/* The dlsym door's answer. It may run before anything else in the shim (a
 * sanitizer runtime or another preloaded library looks up its functions
 * from its own constructor), so it touches nothing but the real dlsym until
 * it knows the answer is a CUDA function. RTLD_NEXT and RTLD_DEFAULT are
 * answered for the caller, not for the shim; RTLD_NEXT results are never
 * redirected (the caller is another interposer wrapping the next
 * definition). */
EARLY_SAFE void *resolve_dlsym(void *handle, const char *name, const void *caller, int *id)
{
    *id = -1;
    find_real_dlsym();
    if (!real_dlsym) return NULL;
    if (handle == RTLD_NEXT) return next_definition(caller, name);
    void *p = real_dlsym(handle, name);
    if (!p && handle == RTLD_DEFAULT && __atomic_load_n(&libc_ready, __ATOMIC_ACQUIRE)) {
        /* The caller's own local scope (a library dlopened RTLD_LOCAL sees
         * its dependencies through RTLD_DEFAULT; the shim does not). By a
         * handle: see object_symbol for why not by its link_map. Trap: a
         * dlopen before libc's own initialiser has run (a sanitizer asks
         * from the program's preinit_array) runs that initialiser with no
         * environment, and the program's environ stays NULL for good. */
        Dl_info info;
        struct link_map *self = NULL;
        if (dladdr1(caller, &info, (void **)&self, RTLD_DL_LINKMAP) && self && self->l_name &&
            self->l_name[0]) {
            void *h = dlopen(self->l_name, RTLD_LAZY | RTLD_NOLOAD);
            if (h) p = real_dlsym(h, name), dlclose(h);
        }
    }
    if (!p || (name[0] != 'c' && name[0] != '_') || is_shim_function(p)) return p;
    for (int i = 0; i < SYM_COUNT; i++) {
        if (!same_string(name, names[i])) continue;
        if (!in_cuda_library(p)) return p; /* a plugin's or stub's own function */
        if (!*variants[i].real) *variants[i].real = p;
        *id = i;
        return p;
    }
    return p;
}
