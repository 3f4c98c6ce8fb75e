/* callsite: see callsite.h. One static-sized table, mapped on first use:
 * slots of raw return addresses keyed by a hash of them. The hash word is
 * the publication point: 0 free, 1 being written, else the hash (always
 * >= 2), stored with release after the frames are written. */
#include "callsite.h"

#include <execinfo.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
static int (*unwinder)(void **, int);

void callsite_set_unwinder(int (*fn)(void **, int))
{
    __atomic_store_n(&unwinder, fn, __ATOMIC_RELEASE);
}

void callsite_init(unsigned d)
{
    if (d > CALLSITE_MAX_DEPTH) d = CALLSITE_MAX_DEPTH;
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

uint32_t callsite_capture(void)
{
    unsigned d = __atomic_load_n(&depth, __ATOMIC_ACQUIRE);
    struct slot *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!d || !t) return 0;
    void *pc[RAW_MAX];
    int (*fast)(void **, int) = __atomic_load_n(&unwinder, __ATOMIC_ACQUIRE);
    int n = fast ? fast(pc, (int)(d + EXTRA_FRAMES)) : backtrace(pc, (int)(d + EXTRA_FRAMES));
    if (n <= 1) return 0;
    /* pc[0] is this function: not part of the call site. */
    uint64_t h = hash_pcs(pc + 1, n - 1);
    for (uint32_t k = 0; k < PROBES; k++) {
        uint32_t i = (uint32_t)(h + k) & (TABLE_SLOTS - 1);
        struct slot *s = &t[i];
        uint64_t cur = __atomic_load_n(&s->hash, __ATOMIC_ACQUIRE);
        if (cur == 0) {
            uint64_t zero = 0;
            if (__atomic_compare_exchange_n(&s->hash, &zero, 1, false, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED)) {
                s->n = (uint32_t)(n - 1);
                memcpy(s->pc, pc + 1, (size_t)(n - 1) * sizeof(void *));
                __atomic_store_n(&s->hash, h, __ATOMIC_RELEASE);
                return i + 1;
            }
            cur = __atomic_load_n(&s->hash, __ATOMIC_ACQUIRE);
        }
        if (cur == h && s->n == (uint32_t)(n - 1) &&
            !memcmp(s->pc, pc + 1, (size_t)(n - 1) * sizeof(void *)))
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
