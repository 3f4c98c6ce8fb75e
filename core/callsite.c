/* callsite: see callsite.h. One static-sized table, mapped on first use:
 * slots of raw return addresses keyed by a hash of them. The hash word is
 * the publication point: 0 free, 1 being written, else the hash (always
 * >= 2), stored with release after the frames are written.
 *
 * A per-thread memo spares the unwinding when the shim's entry point marked
 * where the program's call returns to (callsite_mark): keyed by that return
 * address and the stack word holding it, it keeps the id of the stack
 * captured there and, for each outer frame of the program, the stack word
 * that held its return address. When every one of those words still holds
 * the same return address, the program reached the entry point through the
 * same calls, so the capture would give the same frames: its id is the
 * answer. The words read lie between the marked one and the top of this
 * thread's own stack (pthread_getattr_np), mapped while the thread runs on
 * it; a mark outside that stack (a signal stack, a coroutine's) is never
 * memoised.
 *
 * Under valgrind see callsite_valgrind() in callsite.h: the capture runs
 * with memcheck's reports off (QUIET), or without the memo (BLIND). */
#include "callsite.h"
#include "host.h"

#include <execinfo.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef HAVE_VALGRIND_MEMCHECK_H
#include <valgrind/memcheck.h>
#define VG_QUIET_BEGIN() VALGRIND_DISABLE_ERROR_REPORTING
#define VG_QUIET_END() VALGRIND_ENABLE_ERROR_REPORTING
#define VG_DEFINED(p, len) (void)VALGRIND_MAKE_MEM_DEFINED(p, len)
#else
#define VG_QUIET_BEGIN() ((void)0)
#define VG_QUIET_END() ((void)0)
#define VG_DEFINED(p, len) ((void)(p), (void)(len))
#endif

/* Raw frames taken: the program's depth plus room for ours and CUDA's. */
#define EXTRA_FRAMES 8
#define RAW_MAX (CALLSITE_MAX_DEPTH + EXTRA_FRAMES)
#define TABLE_SLOTS 4096u /* a power of two */
#define PROBES 16

struct slot {
    uint64_t hash; /* 0 free, 1 being written, else published */
    uint32_t n;
    void *pc[RAW_MAX];
};

static unsigned depth;
static struct slot *table;
static int valgrind_mode = -1; /* enum callsite_valgrind; -1 until decided */

/* The memo (see the top of this file). */
#define MEMO_SETS 8 /* a power of two; two entries each */
struct memo_entry {
    void *ra;          /* key: the program's return address ... */
    void *const *slot; /* ... and the stack word that held it */
    uint32_t id;       /* the interned stack captured there */
    unsigned depth, nchecks;
    void *const *at[RAW_MAX]; /* stack words that held the outer frames' return addresses */
    void *pc[RAW_MAX];        /* those return addresses */
};
struct memo {
    uintptr_t stack_lo, stack_hi; /* this thread's stack; 0, 0 when unknown */
    uint64_t hits;
    struct memo_entry e[MEMO_SETS][2];
    uint8_t next[MEMO_SETS]; /* the entry of the set to fill next */
};
static __thread struct {
    void *ra;
    void *const *slot;
} mark __attribute__((tls_model("initial-exec")));
static __thread struct memo *memo __attribute__((tls_model("initial-exec")));
static pthread_key_t memo_key;
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;
static bool memo_key_ok;

static void memo_free(void *m)
{
    memo = NULL;
    free(m);
}

static void memo_key_create(void)
{
    memo_key_ok = pthread_key_create(&memo_key, memo_free) == 0;
}

void callsite_mark(void *ra, void *const *slot)
{
    mark.ra = ra && slot && *slot == ra ? ra : NULL;
    mark.slot = slot;
}

uint64_t callsite_memo_hits(void)
{
    return memo ? memo->hits : 0;
}

/* This thread's memo, made on first use (NULL when it cannot be). */
static struct memo *memo_get(void)
{
    if (__builtin_expect(memo != NULL, 1)) return memo;
    pthread_once(&memo_once, memo_key_create);
    struct memo *m;
    if (!memo_key_ok || !(m = calloc(1, sizeof *m))) return NULL;
    if (pthread_setspecific(memo_key, m) != 0) {
        free(m);
        return NULL;
    }
    pthread_attr_t attr;
    void *lo;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        if (pthread_attr_getstack(&attr, &lo, &size) == 0)
            m->stack_lo = (uintptr_t)lo, m->stack_hi = (uintptr_t)lo + size;
        pthread_attr_destroy(&attr);
    }
    return memo = m;
}

/* The set of the mark: its two entries (one helper called from two places
 * in turn keeps both). */
static unsigned memo_set(void *ra, void *const *slot)
{
    uintptr_t k = (uintptr_t)ra ^ ((uintptr_t)slot >> 3);
    k ^= k >> 17;
    return (unsigned)((k * 0x9E3779B97F4A7C15ull) >> 32) & (MEMO_SETS - 1);
}

/* The memo reads words of the program's frames that AddressSanitizer may
 * have poisoned (the redzones between their locals): plain reads of mapped
 * stack, never of an object. */
#define READS_FOREIGN_STACK __attribute__((no_sanitize_address))

/* Does the memoised stack still lie under the mark? */
READS_FOREIGN_STACK static bool memo_holds(const struct memo_entry *e, void *ra, void *const *slot,
                                           unsigned d)
{
    if (e->ra != ra || e->slot != slot || e->depth != d) return false;
    for (unsigned i = 0; i < e->nchecks; i++)
        if (*(void *const volatile *)e->at[i] != e->pc[i]) return false;
    return true;
}

/* Memoise id for the mark, from the frames the unwinder gave (pcs[0] the
 * innermost after callsite_capture): the mark's return address is one of
 * them; each frame outside it is looked for upwards on the stack, from the
 * marked word to the top of the thread's stack. */
READS_FOREIGN_STACK static void memo_fill(struct memo *m, struct memo_entry *e, void *ra,
                                          void *const *slot, unsigned d, void *const *pcs, int n,
                                          uint32_t id)
{
    e->ra = NULL; /* invalid until complete */
    uintptr_t s = (uintptr_t)slot;
    if (!m->stack_hi || s < m->stack_lo || s >= m->stack_hi) return;
    int k = 0;
    while (k < n && pcs[k] != ra)
        k++;
    if (k == n) return;
    void *const *p = slot + 1, *const *end = (void *const *)(m->stack_hi & ~(uintptr_t)7);
    unsigned c = 0;
    for (int i = k + 1; i < n; i++, p++) {
        while (p < end && *p != pcs[i])
            p++;
        if (p == end) return;
        e->at[c] = p;
        e->pc[c++] = pcs[i];
    }
    e->nchecks = c;
    e->depth = d;
    e->id = id;
    e->slot = slot;
    e->ra = ra;
}

enum callsite_valgrind callsite_valgrind(void)
{
    int m = __atomic_load_n(&valgrind_mode, __ATOMIC_ACQUIRE);
    if (m >= 0) return (enum callsite_valgrind)m;
    /* valgrind preloads its vgpreload_core-ARCH.so into every program it
     * runs, and memcheck its vgpreload_memcheck-ARCH.so too. */
    const char *pre = secure_getenv("LD_PRELOAD");
#ifdef HAVE_VALGRIND_MEMCHECK_H
    m = RUNNING_ON_VALGRIND ? CALLSITE_VALGRIND_QUIET : CALLSITE_NATIVE;
#else
    m = pre && strstr(pre, "vgpreload_") ? CALLSITE_VALGRIND_BLIND : CALLSITE_NATIVE;
#endif
    /* A tool that checks no memory: the native path (when the preload list
     * says so; without it, memcheck is assumed). */
    if (m != CALLSITE_NATIVE && pre && strstr(pre, "vgpreload_core") &&
        !strstr(pre, "vgpreload_memcheck"))
        m = CALLSITE_NATIVE;
    __atomic_store_n(&valgrind_mode, m, __ATOMIC_RELEASE);
    return (enum callsite_valgrind)m;
}

void callsite_init(unsigned d)
{
    if (d > CALLSITE_MAX_DEPTH) d = CALLSITE_MAX_DEPTH;
    (void)callsite_valgrind(); /* decided before a capture can run */
    if (d && !__atomic_load_n(&table, __ATOMIC_ACQUIRE)) {
        void *p = mmap(NULL, TABLE_SLOTS * sizeof(struct slot), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return;
        void *none = NULL;
        if (!__atomic_compare_exchange_n(&table, &none, p, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            munmap(p, TABLE_SLOTS * sizeof(struct slot));
        void *warm[2];
        (void)backtrace(warm, 2); /* loads the unwinder now, not on a hot path */
    }
    __atomic_store_n(&depth, d, __ATOMIC_RELEASE);
}

static uint64_t hash_pcs(void *const *pc, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uintptr_t)pc[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    return h < 2 ? h + 2 : h;
}

static uint32_t intern(struct slot *t, void *const *pcs, int n);

/* The capture proper, at depth d, memoised under the mark (ra, at) unless ra
 * is NULL. Inlined: the unwinder's first frame must be callsite_capture. */
static inline __attribute__((always_inline)) uint32_t capture(struct slot *t, unsigned d, void *ra,
                                                              void *const *at, bool quiet)
{
    struct memo *m = ra ? memo_get() : NULL;
    struct memo_entry *e = NULL;
    if (m) {
        unsigned set = memo_set(ra, at);
        for (int w = 0; w < 2; w++)
            if (memo_holds(&m->e[set][w], ra, at, d)) {
                m->hits++;
                return m->e[set][w].id;
            }
        e = &m->e[set][m->next[set]];
        m->next[set] ^= 1;
    }
    void *pc[RAW_MAX];
    host_unwind_fn *fast = host_unwind(); /* the host's (host.h), else glibc's */
    int n = fast ? fast(pc, (int)(d + EXTRA_FRAMES)) : backtrace(pc, (int)(d + EXTRA_FRAMES));
    if (n <= 1) return 0;
    /* Kept in the table and the memo, read by reports outside the quiet. */
    if (quiet) VG_DEFINED(pc, (size_t)n * sizeof *pc);
    /* pc[0] is this function: not part of the call site. */
    uint32_t id = intern(t, pc + 1, n - 1);
    if (e && id) memo_fill(m, e, ra, at, d, pc + 1, n - 1, id);
    return id;
}

uint32_t callsite_capture(void)
{
    unsigned d = __atomic_load_n(&depth, __ATOMIC_ACQUIRE);
    struct slot *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!d || !t) return 0;
    int vg = __atomic_load_n(&valgrind_mode, __ATOMIC_RELAXED); /* set before depth */
    if (__builtin_expect(vg == CALLSITE_NATIVE, 1)) return capture(t, d, mark.ra, mark.slot, false);
    /* Under valgrind (callsite.h). QUIET: the memo's scan and libunwind
     * compare or pass on stack words the program never wrote, so no report
     * of this thread's meanwhile; a comparison may leave the id undefined in
     * memcheck's eyes (a cmov on such a word), but every id is one the table
     * gave. BLIND: no memo, no scan. */
    bool quiet = vg == CALLSITE_VALGRIND_QUIET;
    if (quiet) VG_QUIET_BEGIN();
    uint32_t id = capture(t, d, quiet ? mark.ra : NULL, mark.slot, quiet);
    if (quiet) {
        VG_DEFINED(&id, sizeof id);
        VG_QUIET_END();
    }
    return id;
}

/* The id of the stack pcs[0..n), interned; 0 when the table is crowded. */
static uint32_t intern(struct slot *t, void *const *pcs, int n)
{
    uint64_t h = hash_pcs(pcs, n);
    for (uint32_t k = 0; k < PROBES; k++) {
        uint32_t i = (uint32_t)(h + k) & (TABLE_SLOTS - 1);
        struct slot *s = &t[i];
        uint64_t cur = __atomic_load_n(&s->hash, __ATOMIC_ACQUIRE);
        if (cur == 0) {
            uint64_t zero = 0;
            if (__atomic_compare_exchange_n(&s->hash, &zero, 1, false, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED)) {
                s->n = (uint32_t)n;
                memcpy(s->pc, pcs, (size_t)n * sizeof(void *));
                __atomic_store_n(&s->hash, h, __ATOMIC_RELEASE);
                return i + 1;
            }
            cur = __atomic_load_n(&s->hash, __ATOMIC_ACQUIRE);
        }
        if (cur == h && s->n == (uint32_t)n && !memcmp(s->pc, pcs, (size_t)n * sizeof(void *)))
            return i + 1;
    }
    return 0; /* table crowded: no call site rather than a wait */
}

/* Is this backtrace_symbols() line one of ours or CUDA's (not the program's)? */
static bool foreign_frame(const char *line)
{
    const char *paren = strchr(line, '(');
    size_t len = paren ? (size_t)(paren - line) : strlen(line);
    const char *base = line;
    for (size_t i = 0; i < len; i++)
        if (line[i] == '/') base = line + i + 1;
    size_t blen = (size_t)(line + len - base);
    static const char *const ours[] = {"libipcshim", "libcuda.", "libcudart", "libsimcuda"};
    for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
        if (blen >= strlen(ours[i]) && !strncmp(base, ours[i], strlen(ours[i]))) return true;
    return false;
}

/* "/path/mod(sym+0x1f) [0x..]" -> "sym+0x1f (mod)", or "mod+0x1234" without
 * a symbol. */
static void tidy_frame(const char *line, char *out, size_t len)
{
    const char *paren = strchr(line, '('), *close = paren ? strchr(paren, ')') : NULL;
    size_t mlen = paren ? (size_t)(paren - line) : strlen(line);
    const char *mod = line;
    for (size_t i = 0; i < mlen; i++)
        if (line[i] == '/') mod = line + i + 1;
    int modlen = (int)(line + mlen - mod);
    if (paren && close && close > paren + 1 && paren[1] != '+')
        snprintf(out, len, "%.*s (%.*s)", (int)(close - paren - 1), paren + 1, modlen, mod);
    else if (paren && close && paren[1] == '+')
        snprintf(out, len, "%.*s%.*s", modlen, mod, (int)(close - paren - 1), paren + 1);
    else
        snprintf(out, len, "%s", line);
}

static const struct slot *slot_of(uint32_t id)
{
    struct slot *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!t || id == 0 || id > TABLE_SLOTS) return NULL;
    const struct slot *s = &t[id - 1];
    return __atomic_load_n(&s->hash, __ATOMIC_ACQUIRE) >= 2 ? s : NULL;
}

const char *callsite_format(uint32_t id, char *buf, size_t len)
{
    const struct slot *s = slot_of(id);
    unsigned d = __atomic_load_n(&depth, __ATOMIC_RELAXED);
    char **sym = s ? backtrace_symbols(s->pc, (int)s->n) : NULL;
    size_t used = 0;
    unsigned shown = 0;
    if (len) buf[0] = 0;
    for (uint32_t i = 0; sym && i < s->n && shown < d && used + 1 < len; i++) {
        if (shown == 0 && foreign_frame(sym[i])) continue;
        char frame[256];
        tidy_frame(sym[i], frame, sizeof frame);
        int w = snprintf(buf + used, len - used, "%s%s", shown ? " < " : "", frame);
        if (w < 0) break;
        used += (size_t)w;
        shown++;
    }
    free(sym);
    if (!shown) snprintf(buf, len, "unknown");
    return buf;
}

const char *callsite_function(uint32_t id, char *buf, size_t len)
{
    const struct slot *s = slot_of(id);
    char **sym = s ? backtrace_symbols(s->pc, (int)s->n) : NULL;
    if (len) buf[0] = 0;
    for (uint32_t i = 0; sym && i < s->n; i++) {
        if (foreign_frame(sym[i])) continue;
        const char *p = strchr(sym[i], '('), *e = p ? strpbrk(p, "+)") : NULL;
        if (p && e && e > p + 1) snprintf(buf, len, "%.*s", (int)(e - p - 1), p + 1);
        break;
    }
    free(sym);
    return buf;
}
