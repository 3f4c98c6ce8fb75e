/* registry: create/attach/validate the shared segment, its robust lock and
 * repair, and the record-level operations on holders, blocks and leases.
 * See registry.h for the layout and the invariants; ipc.c decides when to
 * call what. Nothing here calls device_ops or waits on another process while
 * holding the lock, and the sweeps' liveness syscalls run before it is
 * taken (reg_find_dead). The segment grows under the lock (grow_blocks,
 * grow_chunks); the lock-free paths (lookup, hold, unhold, lease begin/end,
 * retire) only read what registry_refresh said is in use. */
#include "registry.h"
#include "liveness.h"
#include "log.h"
#include "options.h"
#include "uthash_wrap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h> /* prefetch_write */
#endif

_Static_assert(sizeof(pthread_mutex_t) <= 64, "the header reserves 64 bytes for the mutex");
_Static_assert(sizeof(struct reg_header) == 256, "header layout");
_Static_assert(sizeof(struct reg_holder) == 80, "holder layout");
_Static_assert(sizeof(struct reg_block) == 192, "block layout: three cache lines");
_Static_assert(offsetof(struct reg_block, generation) == 64 &&
                   offsetof(struct reg_block, first_export_ns) == 128,
               "block layout: the open's fields on one line");
_Static_assert(sizeof(struct reg_lease) == 32, "lease layout");

enum {
    MAX_HOLDERS_LIMIT = 1 << 16,
    MAX_BLOCKS_LIMIT = 1 << 24,
    MAX_LEASES_LIMIT = 1 << 24,
    LOCK_CHECK_MS = 200,   /* a contended lock re-checks its owner this often */
    LOCK_BOGUS_CHECKS = 2, /* ... and repairs after this many "not a holder" in a row */
    LOCK_PROBE_MS = 20,    /* the wait on a hold we already gave up on once */
    INITIAL_BLOCKS = 1024, /* in use at creation; the table doubles from there */
    INITIAL_CHUNKS = 32,   /* lease chunks at creation (1024 leases) */
};

unsigned registry_attach_wait_ms = 2000;

static int reserve_space(int fd, off_t offset, off_t len)
{
    return posix_fallocate(fd, offset, len);
}
int (*registry_reserve)(int fd, off_t offset, off_t len) = reserve_space;

/* IPCSHIM_TEST_DELAY_US: a pause at points inside critical sections, so that
 * crash tests can kill a process there (tests/crash). One load when unset. */
static inline void test_delay(void)
{
    uint64_t us = options_get()->test_delay_us;
    if (us) usleep((useconds_t)(us > 1000000 ? 1000000 : us));
}

/* The state/intent fields are the commit points of a record (registry.h):
 * a release store keeps the compiler and CPU from moving the field writes
 * that precede it after it, so a writer that dies mid-update never leaves a
 * record marked in use with half its fields written. */
#define STORE_STATE(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELEASE)
#define LOAD_STATE(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* A chunk's owner word holds the holder index + 1, 0 when no holder owns
 * it: the zero pages a growth adds are unowned chunks from the start, so
 * the chunk table grows without the lock (grow_chunks). */
static uint32_t owner_of(const struct registry *r, uint32_t c)
{
    return __atomic_load_n(&r->chunk_owner[c], __ATOMIC_ACQUIRE) - 1; /* 0 - 1 = REG_NONE */
}

/* Gives chunk c back (after its leases are freed). */
static void disown(struct registry *r, uint32_t c)
{
    __atomic_store_n(&r->chunk_owner[c], 0, __ATOMIC_RELEASE);
}

/* Takes chunk c for holder if its owner is still `seen` (REG_NONE or a
 * holder that is not active). */
static bool own_chunk(struct registry *r, uint32_t c, uint32_t seen, uint32_t holder)
{
    uint32_t expect = seen + 1;
    return __atomic_compare_exchange_n(&r->chunk_owner[c], &expect, holder + 1, false,
                                       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

uint32_t reg_chunk_owner(const struct registry *r, uint32_t c)
{
    return c < r->nchunks ? owner_of(r, c) : REG_NONE;
}

int registry_name(const char *domain, char *buf, size_t len)
{
    size_t n = domain ? strlen(domain) : 0;
    if (n < 1 || n > REG_DOMAIN_MAX) return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        char c = domain[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok) return -EINVAL;
    }
    int w = snprintf(buf, len, "/ipcshim-%u-%s", (unsigned)geteuid(), domain);
    return (w < 0 || (size_t)w >= len) ? -EINVAL : 0;
}

int registry_layout(const struct reg_caps *caps, struct reg_layout *out)
{
    return registry_layout_chunked(caps, 0, out);
}

int registry_layout_chunked(const struct reg_caps *caps, uint32_t given, struct reg_layout *out)
{
    if (!caps->max_holders || caps->max_holders > MAX_HOLDERS_LIMIT || !caps->max_blocks ||
        caps->max_blocks > MAX_BLOCKS_LIMIT || !caps->max_leases ||
        caps->max_leases > MAX_LEASES_LIMIT)
        return -EINVAL;
    uint32_t nb = 64;
    while (nb < caps->max_blocks)
        nb <<= 1;
    out->held_words = (caps->max_holders + 63) / 64;
    /* Chunks of REG_LEASE_CHUNK slots, smaller when the table is small for
     * its holders (every holder that opens anything owns a chunk): a
     * power of two, at least 1, at most max_leases / max_holders -- or the
     * one given (a registry's own, from its header). */
    uint32_t chunk = REG_LEASE_CHUNK;
    if (given) {
        if (given > REG_LEASE_CHUNK || (given & (given - 1))) return -EINVAL;
        chunk = given;
    } else {
        while (chunk > 1 && (uint64_t)chunk * caps->max_holders > caps->max_leases)
            chunk >>= 1;
    }
    out->lease_chunk = chunk;
    out->nchunks = (caps->max_leases + chunk - 1) / chunk;
    size_t off = sizeof(struct reg_header);
    out->locks = off;
    off += round_up(caps->max_holders, 64);
    out->holders = off;
    off += round_up((size_t)caps->max_holders * sizeof(struct reg_holder), 64);
    out->heads = off;
    off += round_up((size_t)caps->max_holders * sizeof(uint32_t), 64);
    out->blocks = off;
    off += round_up((size_t)caps->max_blocks * sizeof(struct reg_block), 64);
    out->held = off;
    off += round_up((size_t)caps->max_blocks * out->held_words * sizeof(uint64_t), 64);
    out->leases = off;
    off += (size_t)out->nchunks * chunk * sizeof(struct reg_lease);
    out->chunks = off;
    off += round_up((size_t)out->nchunks * sizeof(uint32_t), 64);
    out->buckets = off;
    off += round_up((size_t)nb * sizeof(uint32_t), 64);
    out->size = off;
    out->nbuckets = nb;
    return 0;
}

/* The options' defaults, from the one table (options.def). */
#define OPT(field, type, def, choices, help)                                                       \
    static const char __attribute__((unused)) default_##field[] = def;
#include "options.def"
#undef OPT

/* One bound: `v` asked by `var`, within [1, limit]. */
static uint32_t bound(const char *var, uint64_t v, uint32_t limit, const char *def, int *warned)
{
    if (v == 0) {
        uint64_t d = strtoull(def, NULL, 10);
        log_once(warned, LOG_WARN, "%s=0 is not a valid bound; using the default %s", var, def);
        v = d;
    }
    if (v > limit) {
        log_once(warned, LOG_WARN, "%s=%llu is more than a registry can hold; using %u", var,
                 (unsigned long long)v, (unsigned)limit);
        v = limit;
    }
    return (uint32_t)v;
}

/* The layout of a registry asked to hold `asked`: its capacities at least
 * the default bounds (the file is sparse: room costs nothing until it is
 * used), so that a later process can raise a bound that a creator set low;
 * holders as asked (they size each block's bitmap), and the lease chunk
 * that the asked bounds give, so that a small lease bound stays exact. */
static int registry_capacity(const struct reg_caps *asked, struct reg_caps *caps,
                             struct reg_layout *l)
{
    uint32_t floor_blocks = (uint32_t)strtoul(default_max_blocks, NULL, 10);
    uint32_t floor_leases = (uint32_t)strtoul(default_max_leases, NULL, 10);
    if (registry_layout(asked, l) != 0) return -EINVAL;
    *caps = *asked;
    if (caps->max_blocks < floor_blocks) caps->max_blocks = floor_blocks;
    if (caps->max_leases < floor_leases) caps->max_leases = floor_leases;
    return registry_layout_chunked(caps, l->lease_chunk, l);
}

void registry_caps_from_options(const struct options *opt, struct reg_caps *out)
{
    static int warned_holders, warned_blocks, warned_leases;
    out->max_holders = bound("IPCSHIM_MAX_HOLDERS", opt->max_holders, MAX_HOLDERS_LIMIT,
                             default_max_holders, &warned_holders);
    out->max_blocks = bound("IPCSHIM_MAX_BLOCKS", opt->max_blocks, MAX_BLOCKS_LIMIT,
                            default_max_blocks, &warned_blocks);
    out->max_leases = bound("IPCSHIM_MAX_LEASES", opt->max_leases, MAX_LEASES_LIMIT,
                            default_max_leases, &warned_leases);
}

void registry_set_views(struct registry *r, const struct reg_caps *caps, const struct reg_layout *l)
{
    r->hdr = (struct reg_header *)r->base;
    r->holders = (struct reg_holder *)(r->base + l->holders);
    r->export_heads = (uint32_t *)(r->base + l->heads);
    r->blocks = (struct reg_block *)(r->base + l->blocks);
    r->held = (uint64_t *)(r->base + l->held);
    r->leases = (struct reg_lease *)(r->base + l->leases);
    r->chunk_owner = (uint32_t *)(r->base + l->chunks);
    r->buckets = (uint32_t *)(r->base + l->buckets);
    r->max_holders = caps->max_holders;
    r->cap_blocks = caps->max_blocks;
    r->cap_chunks = l->nchunks;
    r->cap_buckets = l->nbuckets;
    r->held_words = l->held_words;
    r->lease_chunk = l->lease_chunk;
    r->lock_base = (off_t)l->locks;
    r->size = l->size;
    registry_refresh(r);
}

void registry_refresh(struct registry *r)
{
    struct reg_header *h = r->hdr;
    uint32_t b = __atomic_load_n(&h->blocks_now, __ATOMIC_ACQUIRE);
    uint32_t c = __atomic_load_n(&h->chunks_now, __ATOMIC_ACQUIRE);
    uint32_t nb = __atomic_load_n(&h->nbuckets_now, __ATOMIC_ACQUIRE);
    uint32_t lb = __atomic_load_n(&h->limit_blocks, __ATOMIC_ACQUIRE);
    uint32_t ll = __atomic_load_n(&h->limit_leases, __ATOMIC_ACQUIRE);
    r->max_blocks = b < r->cap_blocks ? b : r->cap_blocks;
    r->nchunks = c < r->cap_chunks ? c : r->cap_chunks;
    r->max_leases = r->nchunks * r->lease_chunk;
    /* The bounds, within the capacities whatever the header says. */
    uint32_t lc = (uint32_t)(((uint64_t)ll + r->lease_chunk - 1) / r->lease_chunk);
    r->limit_blocks = lb && lb < r->cap_blocks ? lb : r->cap_blocks;
    r->limit_chunks = lc && lc < r->cap_chunks ? lc : r->cap_chunks;
    /* A bucket count that is not a power of two within the reserved area
     * (corrupt) reads as the smallest, always reserved. */
    r->nbuckets = nb >= 64 && !(nb & (nb - 1)) && nb <= r->cap_buckets ? nb : 64;
}

/* Reserves the bytes of records [from, to) of an array at offset `at`
 * whose records are `each` bytes, with `reserve`. 0 or an errno. */
static int reserve_with(int (*reserve)(int, off_t, off_t), int fd, size_t at, size_t each,
                        uint32_t from, uint32_t to)
{
    if (to <= from) return 0;
    return reserve(fd, (off_t)(at + (size_t)from * each), (off_t)((size_t)(to - from) * each));
}

/* The same with registry_reserve. */
static int reserve_records(int fd, size_t at, size_t each, uint32_t from, uint32_t to)
{
    return reserve_with(registry_reserve, fd, at, each, from, to);
}

/* registry_reserve for bytes others may be using: fallocate(2) only.
 * posix_fallocate()'s fallback, where the file system has no fallocate,
 * writes a zero byte into every block that reads zero -- over whatever
 * another process stores there meanwhile. Such a file system is no tmpfs:
 * nothing is reserved there, as before. */
static int reserve_live(int fd, off_t offset, off_t len)
{
    if (registry_reserve != reserve_space) return registry_reserve(fd, offset, len); /* tests */
    if (fallocate(fd, 0, offset, len) == 0) return 0;
    return errno == EOPNOTSUPP || errno == ENOSYS ? 0 : errno;
}

/* Offsets of the arrays in r's segment (from its views). */
static size_t off_of(const struct registry *r, const void *p)
{
    return (size_t)((const uint8_t *)p - r->base);
}

static int init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int rc = pthread_mutexattr_init(&a);
    if (!rc) rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!rc) rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!rc) rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -rc;
}

/* Buckets for n blocks in a table of at most cap buckets: a power of two
 * >= n, at least 64. */
static uint32_t buckets_within(uint32_t cap, uint32_t n)
{
    uint32_t nb = 64;
    while (nb < n && nb < cap)
        nb <<= 1;
    return nb;
}

/* Reserves, with `reserve`, what a creator or an attacher touches of a
 * segment laid out by l: the header, lock bytes, holders and export heads
 * whole, and the first `blocks` block records and bitmaps, `chunks` lease
 * chunks and owner words, `buckets` hash buckets. 0 or an errno (ENOSPC).
 * Reserving bytes already reserved allocates nothing, so it succeeds on a
 * full file system too. */
static int reserve_in_use(int (*reserve)(int, off_t, off_t), int fd, const struct reg_layout *l,
                          uint32_t blocks, uint32_t chunks, uint32_t buckets)
{
    const size_t chunk = l->lease_chunk * sizeof(struct reg_lease);
    int err = reserve(fd, 0, (off_t)l->blocks);
    if (!err) err = reserve_with(reserve, fd, l->blocks, sizeof(struct reg_block), 0, blocks);
    if (!err) err = reserve_with(reserve, fd, l->held, l->held_words * sizeof(uint64_t), 0, blocks);
    if (!err) err = reserve_with(reserve, fd, l->leases, chunk, 0, chunks);
    if (!err) err = reserve_with(reserve, fd, l->chunks, sizeof(uint32_t), 0, chunks);
    if (!err) err = reserve_with(reserve, fd, l->buckets, sizeof(uint32_t), 0, buckets);
    return err;
}

static int create(struct registry *r, int fd, const struct reg_caps *asked)
{
    struct reg_caps capacity, *caps = &capacity;
    struct reg_layout l;
    if (registry_capacity(asked, caps, &l) != 0) return -EINVAL;
    /* As large as it may grow, but sparse: creation costs what is in use. */
    if (ftruncate(fd, (off_t)l.size) != 0) return -errno;
    uint32_t limit_chunks = (asked->max_leases + l.lease_chunk - 1) / l.lease_chunk;
    uint32_t b0 = asked->max_blocks < INITIAL_BLOCKS ? asked->max_blocks : INITIAL_BLOCKS;
    uint32_t c0 = limit_chunks < INITIAL_CHUNKS ? limit_chunks : INITIAL_CHUNKS;
    uint32_t nb0 = buckets_within(l.nbuckets, b0);
    /* Reserve the pages in use now, before the first touch of any of them
     * (registry_set_views already reads the header): a sparse file on a
     * full tmpfs maps fine and then kills the host with SIGBUS at the first
     * touch of a missing page, a read as much as a write. Growth reserves
     * before it touches, the same way. */
    int err = reserve_in_use(registry_reserve, fd, &l, b0, c0, nb0);
    if (err) return -err;
    void *p = mmap(NULL, l.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) return -errno;
    r->base = p;
    registry_set_views(r, caps, &l);
    struct reg_header *h = r->hdr;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* ABI before magic: an attacher that sees the magic sees the ABI too. */
    h->abi = REG_ABI;
    __atomic_store_n(&h->magic, REG_MAGIC, __ATOMIC_RELEASE);
    h->size = l.size;
    h->max_holders = caps->max_holders;
    h->max_blocks = caps->max_blocks;
    h->max_leases = caps->max_leases;
    h->nbuckets = l.nbuckets;
    h->held_words = l.held_words;
    h->lease_chunk = l.lease_chunk;
    h->limit_blocks = asked->max_blocks;
    h->limit_leases = asked->max_leases;
    h->blocks_now = b0;
    h->chunks_now = c0;
    h->nbuckets_now = nb0;
    registry_refresh(r);
    for (uint32_t c = 0; c < c0; c++)
        disown(r, c);
    h->creator_pid = (int32_t)getpid();
    h->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    int rc = init_mutex(&h->lock.mutex);
    if (rc) return rc;
    registry_repair(r); /* builds the free lists and empty hash buckets */
    /* Attachers read the header only after seeing ready (acquire). */
    __atomic_store_n(&h->ready, 1, __ATOMIC_RELEASE);
    return 0;
}

/* The lock's type word (glibc: __kind) as this process would create it; a
 * segment whose lock is of another type (corrupt, or not made by us) would
 * make glibc treat it as a mutex that never reports a dead owner. */
static bool lock_kind_ok(const pthread_mutex_t *m)
{
#ifdef __GLIBC__
    static int expected = -1;
    if (__atomic_load_n(&expected, __ATOMIC_RELAXED) < 0) {
        pthread_mutex_t t;
        if (init_mutex(&t) != 0) return true; /* cannot tell: let the lock decide */
        __atomic_store_n(&expected, t.__data.__kind & ~0x300, __ATOMIC_RELAXED);
        pthread_mutex_destroy(&t);
    }
    /* 0x300: glibc's lock-elision bits, never part of the type. */
    return (__atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED) & ~0x300) == expected;
#else
    (void)m;
    return true;
#endif
}

/* Reads the header with pread(): a mapping of a page the creator has not
 * reserved yet (it is between creating the file and reserving it, or a
 * hostile sparse file) would allocate it at the first touch, and kill us
 * with SIGBUS on a full tmpfs; a read of a hole allocates nothing. Works on
 * a read-only descriptor too (ipcshim-stat). 0 or an errno; a short file
 * reads as zeros past its end. */
static int read_header(int fd, struct reg_header *h)
{
    memset(h, 0, sizeof *h);
    for (size_t got = 0; got < sizeof *h;) {
        ssize_t n = pread(fd, (uint8_t *)h + got, sizeof *h - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) break;
        got += (size_t)n;
    }
    return 0;
}

/* registry_validate, leaving the header it read (and judged) in *h. */
static int validate(int fd, struct reg_caps *caps, struct reg_layout *l, struct reg_header *h,
                    char *why, size_t len)
{
    struct stat st;
    uint64_t deadline = reg_now_ns() + registry_attach_wait_ms * 1000000ull;
    int rc = 0, err;
#define REFUSE(code, ...)                                                                          \
    do {                                                                                           \
        rc = (code); /* before the message: errno is read first */                                 \
        snprintf(why, len, __VA_ARGS__);                                                           \
        goto out;                                                                                  \
    } while (0)
    /* The creator may still be between creating the file and publishing ready. */
    for (;;) {
        if (fstat(fd, &st) != 0) REFUSE(-errno, "cannot be examined (%s)", strerror(errno));
        if (st.st_uid != geteuid())
            REFUSE(-EUSERS, "is owned by uid %u, not us", (unsigned)st.st_uid);
        if (!S_ISREG(st.st_mode)) REFUSE(-EPERM, "is not a regular file");
        if (st.st_mode & 077)
            REFUSE(-EPERM, "has mode %o (group/other access)", (unsigned)(st.st_mode & 0777));
        if ((size_t)st.st_size >= sizeof *h) {
            if ((err = read_header(fd, h)) != 0) REFUSE(-err, "cannot be read (%s)", strerror(err));
            if (h->ready == 1) {
                /* Published (a release store, after every header field):
                 * read it again, after having seen ready, for the fields. */
                __atomic_thread_fence(__ATOMIC_ACQUIRE);
                if ((err = read_header(fd, h)) != 0)
                    REFUSE(-err, "cannot be read (%s)", strerror(err));
                break;
            }
            /* Magic and ABI sit at offsets every version keeps: a segment
             * that is neither blank nor ours is refused now, not waited on
             * (another version's `ready` may live elsewhere). */
            if (h->magic != 0 && (h->magic != REG_MAGIC || h->abi != REG_ABI)) break;
        }
        if (reg_now_ns() > deadline)
            REFUSE(-ETIMEDOUT, "was never initialised (its creator died?)");
        usleep(1000);
    }
    *caps = (struct reg_caps){h->max_holders, h->max_blocks, h->max_leases};
    if (h->magic != REG_MAGIC) REFUSE(-EPROTO, "has bad magic (not an ipcshim registry)");
    if (h->abi != REG_ABI)
        REFUSE(-EPROTO, "has a different ABI version (ABI %u; this release uses ABI %u)", h->abi,
               REG_ABI);
    if (registry_layout_chunked(caps, h->lease_chunk, l) != 0)
        REFUSE(-EPROTO, "has impossible capacities");
    if (h->size != l->size || h->nbuckets != l->nbuckets || h->held_words != l->held_words ||
        h->lease_chunk != l->lease_chunk || !h->limit_blocks ||
        h->limit_blocks > caps->max_blocks || !h->limit_leases ||
        h->limit_leases > caps->max_leases || !h->blocks_now || h->blocks_now > caps->max_blocks ||
        !h->chunks_now || h->chunks_now > l->nchunks || h->nbuckets_now < 64 ||
        h->nbuckets_now > l->nbuckets || (h->nbuckets_now & (h->nbuckets_now - 1)))
        REFUSE(-EPROTO, "has a header that does not add up");
    if ((uint64_t)st.st_size != l->size) REFUSE(-EPROTO, "has the wrong size");
    if (!lock_kind_ok(&h->lock.mutex))
        REFUSE(-EPROTO, "has a lock that is not a robust process-shared mutex");
#undef REFUSE
out:
    return rc;
}

int registry_validate(int fd, struct reg_caps *caps, struct reg_layout *l, char *why, size_t len)
{
    struct reg_header h;
    return validate(fd, caps, l, &h, why, len);
}

/* Raises *limit to want (at most cap), never lowering it: a CAS loop, so
 * that two attachers raising at once keep the larger. */
static void raise_limit(uint32_t *limit, uint32_t want, uint32_t cap)
{
    if (want > cap) want = cap;
    uint32_t seen = __atomic_load_n(limit, __ATOMIC_ACQUIRE);
    while (seen < want && !__atomic_compare_exchange_n(limit, &seen, want, false, __ATOMIC_ACQ_REL,
                                                       __ATOMIC_ACQUIRE)) {
    }
}

/* An attacher that asks for larger bounds raises them (within the
 * capacities; info lines say what changed and what could not). */
static void raise_bounds(struct registry *r, const struct reg_caps *want)
{
    uint32_t old_blocks = r->limit_blocks, old_leases = r->limit_chunks * r->lease_chunk;
    uint32_t cap_leases = r->cap_chunks * r->lease_chunk;
    raise_limit(&r->hdr->limit_blocks, want->max_blocks, r->cap_blocks);
    raise_limit(&r->hdr->limit_leases, want->max_leases, cap_leases);
    registry_refresh(r);
    uint32_t leases = r->limit_chunks * r->lease_chunk;
    if (r->limit_blocks > old_blocks || leases > old_leases)
        log_msg(LOG_INFO,
                "registry %s: bounds raised to this process's (blocks %u -> %u, leases %u -> %u)",
                r->name, old_blocks, r->limit_blocks, old_leases, leases);
    if (want->max_blocks > r->cap_blocks || want->max_leases > cap_leases ||
        want->max_holders > r->max_holders)
        LOG_ONCE(LOG_INFO,
                 "registry %s holds at most %u holders, %u blocks, %u leases (laid out by its "
                 "creator; this process asks %u, %u, %u): those apply",
                 r->name, r->max_holders, r->cap_blocks, cap_leases, want->max_holders,
                 want->max_blocks, want->max_leases);
}

/* Checks an existing segment and maps it. Logs why on refusal, except for
 * -EUSERS (a squatted name: the caller moves on to the next name). */
static int attach(struct registry *r, int fd, struct reg_caps caps_wanted)
{
    struct reg_caps caps;
    struct reg_layout l;
    struct reg_header h;
    char why[160];
    int rc = validate(fd, &caps, &l, &h, why, sizeof why);
    if (rc == -EUSERS) return rc;
    if (rc) {
        LOG_ONCE(LOG_ERROR, "registry %s %s; not using it (remove %s to reset it)", r->name, why,
                 r->path);
        return rc == -EPROTO || rc == -ETIMEDOUT ? rc : -EPERM;
    }
    /* What is in use was reserved by whoever put it in use, before its
     * first touch -- unless the file is not what it claims (made by a build
     * that did not reserve, or by hand): reserve it again before the
     * mapping is touched. That allocates nothing for bytes already
     * reserved, so a full file system refuses only a file with holes where
     * it claims records, and refusing beats SIGBUS. What grows later is
     * reserved by its grower before it is published. */
    int err = reserve_in_use(reserve_live, fd, &l, h.blocks_now, h.chunks_now, h.nbuckets_now);
    if (err) {
        LOG_ONCE(LOG_WARN,
                 "registry %s: cannot reserve the pages it has in use (%s); not tracking (calls "
                 "pass through as without the shim)",
                 r->name, strerror(err));
        return err == ENOSPC ? -ENOSPC : -EPERM;
    }
    void *p = mmap(NULL, l.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) return -errno;
    r->base = p;
    registry_set_views(r, &caps, &l);
    raise_bounds(r, &caps_wanted);
    return 0;
}

/* A directory only its owner can add names to: ours, no group/other write. */
static bool private_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
           !(st.st_mode & 022);
}

const char *registry_dir(char *buf, size_t len)
{
    const char *opt = options_get()->registry_dir;
    if (opt && !strcmp(opt, "private")) {
        snprintf(buf, len, "/run/user/%u", (unsigned)geteuid());
        if (!private_dir(buf)) {
            LOG_ONCE(LOG_WARN,
                     "IPCSHIM_REGISTRY_DIR=private: %s is not a private directory of yours; "
                     "using /dev/shm",
                     buf);
            snprintf(buf, len, "/dev/shm");
        }
    } else if (opt && *opt) {
        snprintf(buf, len, "%s", opt);
    } else {
        snprintf(buf, len, "/dev/shm");
    }
    return buf;
}

int registry_candidate(const char *domain, int i, char *path, size_t plen, char *name, size_t nlen)
{
    char base[96], dir[200], suffix[8] = "";
    if (registry_name(domain, base, sizeof base) != 0 || i < 0 || i >= REG_NAME_TRIES)
        return -EINVAL;
    if (i) snprintf(suffix, sizeof suffix, "~%d", i);
    registry_dir(dir, sizeof dir);
    int w = snprintf(path, plen, "%s%s%s", dir, base, suffix);
    if (w < 0 || (size_t)w >= plen) return -ENAMETOOLONG;
    /* Messages keep the shm-style name for the usual place. */
    if (!strcmp(dir, "/dev/shm"))
        snprintf(name, nlen, "%s%s", base, suffix);
    else
        snprintf(name, nlen, "%s", path);
    return 0;
}

/* The name at path is another user's (whatever it is: file, FIFO, link). */
static bool squatted(const char *path, uid_t *owner)
{
    struct stat st;
    if (lstat(path, &st) != 0 || st.st_uid == geteuid()) return false;
    *owner = st.st_uid;
    return true;
}

int registry_locate(const char *domain, char *path, size_t plen, char *name, size_t nlen)
{
    for (int i = 0; i < REG_NAME_TRIES; i++) {
        struct stat st;
        uid_t owner;
        int rc = registry_candidate(domain, i, path, plen, name, nlen);
        if (rc) return rc;
        if (lstat(path, &st) != 0) continue;
        if (!squatted(path, &owner)) return 0;
    }
    return -ENOENT;
}

void registry_unlink(const char *domain)
{
    char path[256], name[256];
    for (int i = 0; i < REG_NAME_TRIES; i++) {
        uid_t owner;
        if (registry_candidate(domain, i, path, sizeof path, name, sizeof name) == 0 &&
            !squatted(path, &owner))
            unlink(path);
    }
}

/* Opens (creating if needed) the registry at r->path. -EUSERS: the name is
 * another user's. */
static int open_at(struct registry *r, const struct reg_caps *caps)
{
    int rc = 0;
    uid_t owner;
    for (int tries = 0; tries < 3; tries++) {
        int fd = open(r->path, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            r->fd = fd;
            rc = create(r, fd, caps);
            if (rc) {
                unlink(r->path);
                if (rc == -ENOSPC)
                    LOG_ONCE(LOG_WARN,
                             "registry %s: no space for it (%s is full); not tracking (calls "
                             "pass through as without the shim)",
                             r->name, r->path);
            }
        } else if (errno == EEXIST) {
            fd = open(r->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0);
            if (fd < 0 && errno == ENOENT) continue; /* unlinked meanwhile: retry */
            if (fd < 0) {
                rc = -errno;
                if (squatted(r->path, &owner)) rc = -EUSERS;
            } else {
                r->fd = fd;
                rc = attach(r, fd, *caps);
            }
        } else {
            rc = -errno;
        }
        break;
    }
    return rc;
}

int registry_open(struct registry *r, const char *domain, const struct reg_caps *caps)
{
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->self_slot = REG_NONE;
    char first[96] = "";
    uid_t squatter = 0;
    if (registry_name(domain, r->name, sizeof r->name) != 0) {
        LOG_ONCE(LOG_ERROR, "IPCSHIM_DOMAIN=\"%s\" is not 1-64 of [A-Za-z0-9._-]; not tracking",
                 domain ? domain : "");
        return -EINVAL;
    }
    struct reg_layout l;
    if (registry_layout(caps, &l) != 0) {
        LOG_ONCE(LOG_ERROR, "registry capacities out of range (holders %u, blocks %u, leases %u)",
                 caps->max_holders, caps->max_blocks, caps->max_leases);
        return -EINVAL;
    }
    /* The first candidate that exists and is ours wins (everyone of the
     * user then meets there); else create at the first one not squatted. */
    int pick = -1, used = -1, rc = -EUSERS;
    for (int i = 0; i < REG_NAME_TRIES && pick < 0; i++) {
        uid_t owner;
        struct stat st;
        registry_candidate(domain, i, r->path, sizeof r->path, r->name, sizeof r->name);
        if (lstat(r->path, &st) == 0 && !squatted(r->path, &owner)) pick = i;
    }
    for (int i = pick < 0 ? 0 : pick; i < REG_NAME_TRIES; i++) {
        registry_candidate(domain, i, r->path, sizeof r->path, r->name, sizeof r->name);
        rc = open_at(r, caps);
        used = i;
        if (rc != -EUSERS) break;
        if (r->fd >= 0) close(r->fd);
        r->fd = -1;
    }
    /* Say which name is squatted, whether we found it so or met a
     * fallback that an earlier process of ours made. */
    for (int i = 0; i < used; i++) {
        char path[256], name[96];
        struct stat st;
        registry_candidate(domain, i, path, sizeof path, name, sizeof name);
        if (lstat(path, &st) == 0 && st.st_uid != geteuid()) {
            snprintf(first, sizeof first, "%s", name);
            squatter = st.st_uid;
            break;
        }
    }
    if (rc == 0) {
        struct stat st;
        if (fstat(r->fd, &st) == 0) r->dev = st.st_dev, r->ino = st.st_ino;
        if (first[0])
            LOG_ONCE(LOG_WARN,
                     "registry name %s is taken by uid %u (not you): protecting under %s "
                     "instead; to fix, have its owner or root remove it, or set "
                     "IPCSHIM_REGISTRY_DIR to a directory only you can write",
                     first, (unsigned)squatter, r->name);
        return 0;
    }
    if (rc == -EUSERS)
        LOG_ONCE(LOG_ERROR,
                 "registry %s and its %d fallback names are all taken by other users; not "
                 "tracking (set IPCSHIM_REGISTRY_DIR to a directory only you can write)",
                 first, REG_NAME_TRIES - 1);
    else if (rc != -EPERM && rc != -EPROTO && rc != -ETIMEDOUT && rc != -EINVAL && rc != -ENOSPC)
        LOG_ONCE(LOG_ERROR, "cannot open registry %s: %s; not tracking", r->name, strerror(-rc));
    if (r->base) munmap(r->base, r->size);
    if (r->fd >= 0) close(r->fd);
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->self_slot = REG_NONE;
    return rc;
}

void registry_close(struct registry *r)
{
    free(r->spare);
    if (r->base) munmap(r->base, r->size);
    if (r->pin) munmap(r->pin, 4096);
    struct stat st; /* close the number only while it is still ours */
    if (r->fd >= 0 && fstat(r->fd, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino)
        close(r->fd);
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->self_slot = REG_NONE;
}

bool registry_remove_if_unused(struct registry *r)
{
    __atomic_store_n(&r->hdr->removing, 1, __ATOMIC_SEQ_CST);
    int fd = registry_fd(r);
    bool used = fd < 0; /* cannot see the lock bytes: keep it */
    for (uint32_t i = 0; i < r->max_holders && !used; i++)
        used = __atomic_load_n(&r->holders[i].state, __ATOMIC_SEQ_CST) != HOLDER_FREE;
    /* A byte taken by an attacher still in take_slot (one call for all). */
    if (!used) used = liveness_range_state(fd, r->lock_base, (off_t)r->max_holders) != 0;
    struct stat st;
    if (!used && stat(r->path, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino &&
        unlink(r->path) == 0) {
        log_msg(LOG_DEBUG, "registry %s: removed (the last process out)", r->name);
        return true; /* `removing` stays set: whoever still maps it backs off */
    }
    __atomic_store_n(&r->hdr->removing, 0, __ATOMIC_SEQ_CST);
    return false;
}

bool registry_removing(struct registry *r)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* after the slot's ACTIVE store (take_slot) */
    return __atomic_load_n(&r->hdr->removing, __ATOMIC_SEQ_CST) != 0;
}

/* Opens the registry again by path; -1 unless it is still the same file. */
static int open_same(const struct registry *r)
{
    struct stat st;
    int fd = open(r->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || st.st_dev != r->dev || st.st_ino != r->ino) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Maps one page from fd so that fd's description -- and the OFD lock byte
 * taken through it -- lives as long as the mapping, whatever the program
 * does to its descriptors. The page (the header's, reserved by the creator
 * and again at attach) is never touched through this mapping. */
static void pin_description(struct registry *r, int fd)
{
    void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return;
    if (r->pin) munmap(r->pin, 4096);
    r->pin = p;
}

/* Serialises re-opening the descriptor: liveness checks run without the
 * registry lock (sweeps, cached re-opens), from any thread. Re-initialised
 * in a fork child (registry_reopen_fd). */
static pthread_mutex_t fd_mu = PTHREAD_MUTEX_INITIALIZER;

static int registry_fd_locked(struct registry *r);

int registry_reopen_fd(struct registry *r)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    fd_mu = fresh; /* a fork child: another thread may have held it */
    int fd = open_same(r);
    if (fd < 0) return -ESTALE; /* the segment was replaced since we mapped it */
    /* The inherited number may not even be ours any more; never close
     * something the program owns. The parent's description keeps its locks. */
    if (r->fd >= 0) {
        struct stat st;
        if (fstat(r->fd, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino) close(r->fd);
    }
    r->fd = fd;
    r->self_slot = REG_NONE; /* the parent's slot is not ours, nor its chunks */
    r->nspare = 0;
    pin_description(r, fd);
    return 0;
}

int registry_fd(struct registry *r)
{
    struct stat st;
    int fd = __atomic_load_n(&r->fd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino) return fd;
    pthread_mutex_lock(&fd_mu);
    fd = registry_fd_locked(r);
    pthread_mutex_unlock(&fd_mu);
    return fd;
}

static int registry_fd_locked(struct registry *r)
{
    struct stat st;
    if (r->fd >= 0 && fstat(r->fd, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino)
        return r->fd; /* another thread re-opened it meanwhile */
    /* The program closed our descriptor (closefrom) or put another file at
     * its number (dup2, a later open): the number is not ours any more. */
    int fd = open_same(r);
    LOG_ONCE(LOG_WARN, "registry %s: the program closed or replaced the shim's descriptor %d; %s",
             r->name, r->fd,
             fd >= 0 ? "re-opened it" : "cannot re-open it (liveness unknown: alive)");
    __atomic_store_n(&r->fd, fd, __ATOMIC_RELEASE);
    if (fd < 0) return -1;
    /* Our own lock byte lives on while a mapping of its description does
     * (the registry's own mapping, or the pin): find out, and re-take it if
     * it was lost, so that we never look dead to the others. */
    struct reg_holder *me = r->self_slot < r->max_holders ? &r->holders[r->self_slot] : NULL;
    if (me && !liveness_byte_locked(fd, r->lock_base + r->self_slot)) {
        if (LOAD_STATE(me->state) == HOLDER_ACTIVE && me->nonce == r->self_nonce &&
            liveness_lock_byte(fd, r->lock_base + r->self_slot) == 0) {
            pin_description(r, fd);
            log_msg(LOG_WARN, "registry %s: re-took this process's lock byte", r->name);
        } else {
            LOG_ONCE(LOG_ERROR,
                     "registry %s: this process lost its lock byte and was judged dead; its "
                     "leases were released",
                     r->name);
        }
    }
    return fd;
}

/* ---- lock and repair ---- */

enum { OWNER_HOLDER, OWNER_BOGUS };

static uint32_t own_pidns(void);

/* Is an active holder of this registry in another PID namespace? Then a
 * thread id in the lock word may be that namespace's, unknowable here. */
static bool foreign_holders(const struct registry *r)
{
    uint32_t mine = own_pidns();
    for (uint32_t i = 0; i < r->max_holders; i++) {
        const struct reg_holder *h = &r->holders[i];
        uint32_t ns = __atomic_load_n(&h->pidns, __ATOMIC_RELAXED);
        if (LOAD_STATE(h->state) == HOLDER_ACTIVE && ns && mine && ns != mine) return true;
    }
    return false;
}

/* Is the thread named by the lock word a possible holder of this registry?
 * A real owner maps the registry (it mapped it before locking); a thread
 * that no longer exists, or whose process does not map this file, can only
 * be named by a corrupt word -- unless holders of another PID namespace
 * share the registry (a pod sharing /dev/shm): their thread ids mean
 * nothing here, so no word is judged corrupt then (the wait stays bounded;
 * a real owner's death is still marked by the kernel). Unknown (/proc
 * unreadable) counts as a holder. */
static int owner_verdict(const struct registry *r, int tid)
{
    char path[40], line[512];
    if (tid <= 0 || foreign_holders(r)) return OWNER_HOLDER;
    snprintf(path, sizeof path, "/proc/%d/maps", tid); /* any thread id, not only processes */
    FILE *f = fopen(path, "re");
    if (!f) return errno == ENOENT || errno == ESRCH ? OWNER_BOGUS : OWNER_HOLDER;
    int verdict = OWNER_BOGUS;
    unsigned maj, min;
    unsigned long long ino;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 &&
            ino == (unsigned long long)r->ino && maj == major(r->dev) && min == minor(r->dev)) {
            verdict = OWNER_HOLDER;
            break;
        }
    }
    fclose(f);
    return verdict;
}

/* Makes a lock word that names a bogus owner look like a dead owner's, the
 * way the kernel marks the lock of a thread that died holding it: the next
 * locker gets EOWNERDEAD and repairs. A CAS: a word that changed meanwhile
 * (a real release or acquisition) is left alone. */
static bool mark_owner_dead(pthread_mutex_t *m, int word)
{
#ifdef __GLIBC__
    int dead = (word & FUTEX_WAITERS) | FUTEX_OWNER_DIED;
    if (!__atomic_compare_exchange_n(&m->__data.__lock, &word, dead, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return false;
    syscall(SYS_futex, &m->__data.__lock, FUTEX_WAKE, 1, NULL, NULL, 0);
    return true;
#else
    (void)m, (void)word;
    return false;
#endif
}

static int lock_word(pthread_mutex_t *m)
{
#ifdef __GLIBC__
    return __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED);
#else
    (void)m;
    return 0;
#endif
}

/* Waits for a contended lock, never without bound: a bogus owner is
 * repaired after LOCK_BOGUS_CHECKS checks that name the same one; a live
 * owner is waited for at most IPCSHIM_LOCK_WAIT per hold (and a hold we
 * already gave up on is only probed for LOCK_PROBE_MS). */
static int lock_slow(struct registry *r)
{
    pthread_mutex_t *m = &r->hdr->lock.mutex;
    uint64_t start = reg_now_ns(), bound = options_get()->lock_wait * 1000000ull;
    int strikes = 0, last = 0;
    int tid0 = lock_word(m) & FUTEX_TID_MASK;
    uint64_t since0 = __atomic_load_n(&r->hdr->lock_since_ns, __ATOMIC_RELAXED);
    if (tid0 && __atomic_load_n(&r->stuck_tid, __ATOMIC_RELAXED) == tid0 &&
        __atomic_load_n(&r->stuck_since, __ATOMIC_RELAXED) == since0 &&
        bound > LOCK_PROBE_MS * 1000000ull)
        bound = LOCK_PROBE_MS * 1000000ull;
    for (;;) {
        uint64_t now = reg_now_ns(), left = now - start < bound ? bound - (now - start) : 0;
        uint64_t step = left < LOCK_CHECK_MS * 1000000ull ? left : LOCK_CHECK_MS * 1000000ull;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += (time_t)(step / 1000000000ull);
        dl.tv_nsec += (long)(step % 1000000000ull);
        if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        int rc = pthread_mutex_timedlock(m, &dl);
        if (rc != ETIMEDOUT) return rc;
        int word = lock_word(m), owner = word & FUTEX_TID_MASK;
        /* This very thread never holds the lock while it waits for it (no
         * registry function locks twice): a word naming it is corrupt. */
        bool bogus =
            owner && (owner == (int)syscall(SYS_gettid) || owner_verdict(r, owner) == OWNER_BOGUS);
        if (bogus) {
            strikes = owner == last ? strikes + 1 : 1;
            last = owner;
            if (strikes >= LOCK_BOGUS_CHECKS && mark_owner_dead(m, word)) {
                log_msg(LOG_WARN,
                        "registry %s: its lock named thread %d, which is not a holder (it no "
                        "longer exists or does not map the registry): a corrupt lock word; "
                        "repairing",
                        r->name, owner);
                strikes = 0;
                continue;
            }
        } else {
            strikes = 0;
        }
        if (reg_now_ns() - start >= bound) {
            __atomic_store_n(&r->stuck_tid, owner, __ATOMIC_RELAXED);
            __atomic_store_n(&r->stuck_since,
                             __atomic_load_n(&r->hdr->lock_since_ns, __ATOMIC_RELAXED),
                             __ATOMIC_RELAXED);
            LOG_RATE(LOG_WARN,
                     "registry %s: its lock has been held by pid %d "
                     "(thread %d) for more than IPCSHIM_LOCK_WAIT (a stopped process?); going "
                     "on without it: opens and exports pass untracked, frees are deferred",
                     r->name, (int)liveness_tgid(owner), owner);
            return ETIMEDOUT;
        }
    }
}

/* What registry_lock does with the mutex's answer rc. */
static int locked(struct registry *r, int rc)
{
    if (rc == 0 || rc == EOWNERDEAD) {
        /* Reports and a hold's identity (lock_slow): a tick is enough. */
        __atomic_store_n(&r->hdr->lock_since_ns, reg_coarse_ns(), __ATOMIC_RELAXED);
        registry_refresh(r); /* another process may have grown it */
    }
    if (rc == 0) {
        test_delay();
        return 0;
    }
    if (rc == EOWNERDEAD) {
        /* The previous owner died inside a critical section. Its record
         * writes are either committed (state stored last) or invisible to
         * readers of state; the derived structures may be half-updated. */
        registry_repair(r);
        r->hdr->repairs++;
        pthread_mutex_consistent(&r->hdr->lock.mutex);
        log_msg(LOG_WARN, "registry %s: lock owner died; repaired", r->name);
        return 0;
    }
    if (rc == ETIMEDOUT) return -ETIMEDOUT;
    LOG_ONCE(LOG_ERROR, "registry %s lock is unusable (%s); not tracking", r->name, strerror(rc));
    return -ENOTRECOVERABLE;
}

int registry_lock(struct registry *r)
{
    int rc = pthread_mutex_trylock(&r->hdr->lock.mutex);
    if (rc == EBUSY) rc = lock_slow(r);
    return locked(r, rc);
}

void registry_unlock(struct registry *r)
{
    pthread_mutex_unlock(&r->hdr->lock.mutex);
}

/* The handle's bucket: the project's word-at-a-time hash (uthash_wrap.h),
 * 8 multiplies where FNV took 64 steps. Part of the segment's format: every
 * process of an ABI must bucket alike. */
static uint32_t bucket_of(const struct registry *r, const uint8_t *handle)
{
    return uth_hash_words(handle, IPC_HANDLE_BYTES) & (r->nbuckets - 1);
}

uint32_t reg_handle_hash(const struct ipc_handle *h)
{
    return uth_hash_words(h->bytes, IPC_HANDLE_BYTES);
}

/* A lease that names a live block of its own generation, owned by an
 * active holder's chunk. */
static bool lease_valid(struct registry *r, uint32_t li)
{
    struct reg_lease *l = &r->leases[li];
    uint32_t owner = owner_of(r, li / r->lease_chunk);
    struct reg_block *b = reg_block_at(r, l->block);
    struct reg_holder *o = reg_holder_at(r, owner);
    return l->intent >= LEASE_OPENING && l->intent <= LEASE_CLOSING && b &&
           b->state != BLOCK_FREE && b->generation == l->block_gen && o &&
           o->state == HOLDER_ACTIVE && l->holder == owner && l->count > 0;
}

/* ---- exporters' lists (derived, lock held; registry.h) ---- */

/* Puts block bi at the head of holder's list. */
static void list_push(struct registry *r, uint32_t bi, uint32_t holder)
{
    uint32_t *head = &r->export_heads[holder];
    struct reg_block *b = &r->blocks[bi];
    b->exp_on = holder + 1;
    b->exp_prev = 0;
    b->exp_next = *head <= r->max_blocks ? *head : 0;
    if (b->exp_next) r->blocks[b->exp_next - 1].exp_prev = bi + 1;
    *head = bi + 1;
}

/* Takes block bi off the list it is on, if any. Links out of range (a
 * corrupt segment) are dropped, never followed. */
static void list_unlink(struct registry *r, uint32_t bi)
{
    struct reg_block *b = &r->blocks[bi];
    uint32_t on = b->exp_on, prev = b->exp_prev, next = b->exp_next;
    b->exp_on = b->exp_prev = b->exp_next = 0;
    if (!on || on > r->max_holders) return;
    if (prev > r->max_blocks) prev = 0;
    if (next > r->max_blocks) next = 0;
    if (prev)
        r->blocks[prev - 1].exp_next = next;
    else if (r->export_heads[on - 1] == bi + 1)
        r->export_heads[on - 1] = next;
    if (next) r->blocks[next - 1].exp_prev = prev;
}

static bool listed(uint32_t state)
{
    return state == BLOCK_LIVE || state == BLOCK_LIMBO || state == BLOCK_RETIRING ||
           state == BLOCK_RETIRED;
}

/* Rebuilds the free list and the hash chains from the blocks' states.
 * Lock-free readers that walk a chain meanwhile may miss their block: they
 * then ask under the lock. */
static void rebuild_index(struct registry *r)
{
    struct reg_header *h = r->hdr;
    for (uint32_t i = 0; i < r->nbuckets; i++)
        __atomic_store_n(&r->buckets[i], REG_NONE, __ATOMIC_RELAXED);
    h->block_free = REG_NONE;
    for (uint32_t k = 0; k < r->max_holders; k++)
        r->export_heads[k] = 0;
    for (uint32_t i = r->max_blocks; i-- > 0;) {
        struct reg_block *b = &r->blocks[i];
        /* An exporter deciding (it retires without the lock), or one that
         * died deciding: limbo until it says otherwise. A CAS: its own
         * answer may land first. */
        uint32_t retiring = BLOCK_RETIRING;
        __atomic_compare_exchange_n(&b->state, &retiring, BLOCK_LIMBO, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED);
        if (b->state > BLOCK_RETIRING) b->state = BLOCK_FREE;
        b->exp_on = b->exp_prev = b->exp_next = 0;
        if (listed(b->state) && b->exporter < r->max_holders) list_push(r, i, b->exporter);
        if (b->state == BLOCK_FREE) {
            b->hash_next = h->block_free;
            h->block_free = i;
        } else {
            uint32_t bk = bucket_of(r, b->handle);
            b->hash_next = r->buckets[bk];
            __atomic_store_n(&r->buckets[bk], i, __ATOMIC_RELEASE);
        }
    }
}

/* Doubles the block table (up to its capacity): reserves the new records,
 * bitmaps and buckets first, then publishes them. False when it cannot
 * grow (at capacity, or no space: logged once). Lock held. */
static bool grow_blocks(struct registry *r)
{
    registry_refresh(r); /* an attacher may have raised the bound */
    uint32_t old = r->max_blocks, cap = r->limit_blocks;
    if (old >= cap) return false;
    uint32_t want = old > cap / 2 ? cap : old * 2, nb = buckets_within(r->cap_buckets, want);
    int fd = registry_fd(r);
    int err = fd < 0 ? EBADF : 0;
    if (!err) err = reserve_records(fd, off_of(r, r->blocks), sizeof(struct reg_block), old, want);
    if (!err)
        err = reserve_records(fd, off_of(r, r->held), r->held_words * sizeof(uint64_t), old, want);
    if (!err) err = reserve_records(fd, off_of(r, r->buckets), sizeof(uint32_t), r->nbuckets, nb);
    if (err) {
        LOG_ONCE(LOG_WARN, "registry %s cannot grow past %u blocks (%s)", r->name, old,
                 strerror(err));
        return false;
    }
    __atomic_store_n(&r->hdr->blocks_now, want, __ATOMIC_RELEASE);
    if (nb > r->nbuckets) __atomic_store_n(&r->hdr->nbuckets_now, nb, __ATOMIC_RELEASE);
    registry_refresh(r);
    rebuild_index(r);
    log_msg(LOG_DEBUG, "registry %s grew to %u blocks", r->name, want);
    return true;
}

/* Doubles the lease chunk table (up to its capacity), without the lock:
 * the new records and owner words are reserved (zero pages: unowned, FREE
 * leases; reserving what another grower reserved changes nothing), then
 * published with a CAS, which a concurrent grower may have done first.
 * False when it cannot grow (at capacity, or no space: logged once). */
static bool grow_chunks(struct registry *r)
{
    registry_refresh(r);
    uint32_t old = r->nchunks, cap = r->limit_chunks;
    if (old >= cap) return false;
    uint32_t want = old > cap / 2 ? cap : old * 2;
    int fd = registry_fd(r);
    int err = fd < 0 ? EBADF : 0;
    if (!err)
        err = reserve_records(fd, off_of(r, r->leases), r->lease_chunk * sizeof(struct reg_lease),
                              old, want);
    if (!err) err = reserve_records(fd, off_of(r, r->chunk_owner), sizeof(uint32_t), old, want);
    if (err) {
        LOG_ONCE(LOG_WARN, "registry %s cannot grow past %u leases (%s)", r->name,
                 old * r->lease_chunk, strerror(err));
        return false;
    }
    uint32_t seen = old;
    __atomic_compare_exchange_n(&r->hdr->chunks_now, &seen, want, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    registry_refresh(r);
    return r->nchunks > old;
}

/* Frees every slot of chunk c and names holder in them (its new owner, or
 * REG_NONE). */
static void reset_chunk(struct registry *r, uint32_t c, uint32_t holder)
{
    for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
        r->leases[li].intent = LEASE_FREE;
        r->leases[li].count = 0;
        r->leases[li].holder = holder;
    }
}

void registry_repair(struct registry *r)
{
    /* A last process out that died deciding (registry_remove_if_unused):
     * the file is still here and in use again. */
    __atomic_store_n(&r->hdr->removing, 0, __ATOMIC_SEQ_CST);
    rebuild_index(r);
    /* Bits of holders that are not active any more; blocks nobody can ever
     * release. (Active holders' bits are their own, changed without the
     * lock: left alone.) */
    for (uint32_t i = 0; i < r->max_blocks; i++) {
        struct reg_block *b = &r->blocks[i];
        uint64_t *held = reg_block_held_words(r, i);
        for (uint32_t w = 0; w < r->held_words; w++) {
            uint64_t bits = __atomic_load_n(&held[w], __ATOMIC_RELAXED), gone = 0;
            for (uint64_t m = bits; m; m &= m - 1) {
                uint32_t hi = w * 64 + (uint32_t)__builtin_ctzll(m);
                if (hi >= r->max_holders || r->holders[hi].state != HOLDER_ACTIVE) gone |= m & -m;
            }
            if (gone) __atomic_fetch_and(&held[w], ~gone, __ATOMIC_SEQ_CST);
        }
        if (b->state == BLOCK_FREE) continue;
        struct reg_holder *o = reg_holder_at(r, b->exporter);
        bool exporter_gone = !o || o->state != HOLDER_ACTIVE || o->nonce != b->exporter_nonce;
        if (exporter_gone && b->state != BLOCK_ORPHANED) reg_block_orphan(r, i);
        if (b->state == BLOCK_ORPHANED && !reg_block_held(r, i)) reg_block_recycle(r, i);
    }
    /* Chunks of holders that are gone, and leases that name nothing (last:
     * recycling above may have freed their block). */
    for (uint32_t c = 0; c < r->nchunks; c++) {
        uint32_t owner = owner_of(r, c);
        struct reg_holder *o = reg_holder_at(r, owner);
        /* An unowned chunk is left alone: a lock-free claimer may be taking
         * it right now (and its slots are FREE already). One of a holder
         * that is not active is emptied before it is given back. */
        if (owner == REG_NONE || (o && o->state == HOLDER_ACTIVE)) continue;
        reset_chunk(r, c, REG_NONE);
        disown(r, c);
    }
    for (uint32_t i = 0; i < r->max_leases; i++)
        if (r->leases[i].intent != LEASE_FREE && !lease_valid(r, i)) {
            r->leases[i].intent = LEASE_FREE;
            r->leases[i].count = 0;
        }
}

/* ---- holders ---- */

/* This process's PID namespace: the inode of /proc/self/ns/pid (fits 32
 * bits: the kernel numbers namespace inodes below 2^32), 0 when unknown. */
static uint32_t own_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* Takes slot i for this process if its lock byte is ours to take (the
 * arbiter: F_OFD_SETLK gives a byte to one description only, so two
 * attachers never get the same slot, with or without the registry lock).
 * The record is written, then published ACTIVE. */
static bool take_slot(struct registry *r, int fd, uint32_t i, const struct reg_holder *fields)
{
    struct reg_holder *h = &r->holders[i];
    /* Held by a description that outlived its holder (a fork child's
     * inherited copy), or by another attacher right now: not ours. */
    if (liveness_lock_byte(fd, r->lock_base + i) != 0) return false;
    test_delay(); /* a death here leaves the slot FREE: the byte goes with it */
    uint32_t state = LOAD_STATE(h->state);
    if (state == HOLDER_ACTIVE) { /* attached meanwhile, and gone again: a sweep's */
        liveness_unlock_byte(fd, r->lock_base + i);
        return false;
    }
    if (state != HOLDER_FREE)
        reg_holder_sweep(r, i); /* corrupt (lock held): what it claimed goes */
    h->pid = fields->pid;
    h->pidns = fields->pidns;
    h->start_time = fields->start_time;
    h->nonce = fields->nonce;
    h->attach_ns = reg_now_ns();
    memcpy(h->comm, fields->comm, sizeof h->comm);
    STORE_STATE(h->state, HOLDER_ACTIVE);
    r->self_slot = i;
    r->self_nonce = fields->nonce;
    return true;
}

/* reg_holder_claim (locked false: FREE slots only) and reg_holder_attach. */
static uint32_t attach_slot(struct registry *r, uint64_t nonce, bool locked)
{
    struct reg_holder me = {.pid = (int32_t)getpid(), .pidns = own_pidns(), .nonce = nonce};
    (void)liveness_start_time(me.pid, &me.start_time);
    if (prctl(PR_GET_NAME, me.comm) != 0) me.comm[0] = 0; /* observability */
    int fd = registry_fd(r);
    if (fd < 0) return REG_NONE;
    for (uint32_t i = 0; i < r->max_holders; i++) {
        uint32_t state = LOAD_STATE(r->holders[i].state);
        /* A state that is neither FREE nor ACTIVE is a corrupt record:
         * reused under the lock only (it must be swept first). */
        if (state == HOLDER_ACTIVE || (state != HOLDER_FREE && !locked)) continue;
        if (take_slot(r, fd, i, &me)) return i;
    }
    return REG_NONE;
}

uint32_t reg_holder_claim(struct registry *r, uint64_t nonce)
{
    return attach_slot(r, nonce, false);
}

uint32_t reg_holder_attach(struct registry *r, uint64_t nonce)
{
    return attach_slot(r, nonce, true);
}

void reg_holder_release(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    reg_holder_let_go(r, idx);
    STORE_STATE(h->state, HOLDER_FREE);
    if (r->self_slot == idx) r->self_slot = REG_NONE;
    int fd = registry_fd(r);
    if (fd >= 0) liveness_unlock_byte(fd, r->lock_base + idx);
}

/* A holder's lock byte is held (true) unless we know it is free. The
 * descriptor is believed at once only when it says "held" (a number the
 * program reused can make a dead holder look alive -- a leak -- but never
 * the reverse); "free" or an error is asked again through the verified
 * descriptor (registry_fd). So a live holder is never judged dead through
 * the wrong file, and the common case costs one fcntl, as before. */
static bool holder_byte_locked(struct registry *r, uint32_t idx)
{
    off_t off = r->lock_base + idx;
    if (r->fd >= 0 && liveness_byte_state(r->fd, off) == 1) return true;
    int fd = registry_fd(r);
    if (fd < 0) return true; /* unknown: alive */
    return liveness_byte_state(fd, off) != 0;
}

/* The pid and start-time rule applies only to a holder of our own PID
 * namespace (or of an unknown one: records of earlier builds); in another
 * namespace its pid names some other process here, so the lock decides. */
static bool same_pidns(const struct reg_holder *h)
{
    static uint32_t mine;
    if (!mine) mine = own_pidns();
    uint32_t theirs = __atomic_load_n(&h->pidns, __ATOMIC_RELAXED);
    return !theirs || !mine || theirs == mine;
}

bool reg_holder_alive(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h || LOAD_STATE(h->state) != HOLDER_ACTIVE) return false;
    if (!holder_byte_locked(r, idx)) return false;
    return !same_pidns(h) || liveness_pid_alive(h->pid, h->start_time);
}

bool reg_holder_alive_quick(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h || LOAD_STATE(h->state) != HOLDER_ACTIVE) return false;
    return holder_byte_locked(r, idx);
}

/* Frees lease li (a dead holder's, or one the lock-held API drops): its
 * bit cleared first, then the record. Returns whether the block is now held
 * by nobody. */
static bool free_lease(struct registry *r, uint32_t li)
{
    struct reg_lease *l = &r->leases[li];
    bool empty = false;
    struct reg_block *b = reg_block_at(r, l->block);
    if (b && l->holder < r->max_holders) empty = reg_unhold(r, l->block, l->holder);
    test_delay();
    STORE_STATE(l->intent, LEASE_FREE);
    l->count = 0;
    return empty;
}

/* Does the exporter of a block in this state wait for its holders to go?
 * RETIRING counts: an exporter whose retire saw our bit goes back to LIMBO
 * and sleeps, so the holder that clears the last bit meanwhile must wake it
 * (pairs with the CAS back to LIMBO in reg_block_retire; without it the free
 * waited for the collector's next poll: tests/model/lease.pml,
 * WAKE_RETIRING). A wake of an exporter that retired it anyway is spurious
 * and harmless. */
static bool waits_on_holders(uint32_t state)
{
    return state == BLOCK_LIMBO || state == BLOCK_RETIRING;
}

/* A LIMBO block that lost its last holder: under the window rule (ipc.c),
 * the exporter's, one hand-off is re-armed (its times are advisory: the
 * exporter reads them under its lock). Returns the exporter, to wake. No
 * lock needed: atomics only. */
static uint32_t limbo_unheld(struct reg_block *b)
{
    uint32_t none = 0;
    if ((b->rules & BLOCK_RULE_HANDOFF_WINDOW) &&
        __atomic_compare_exchange_n(&b->pending, &none, 1, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED)) {
        uint64_t now = reg_now_ns();
        __atomic_store_n(&b->first_export_ns, now, __ATOMIC_RELAXED);
        __atomic_store_n(&b->last_export_ns, now, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&b->exporter, __ATOMIC_RELAXED);
}

uint32_t reg_block_unheld(struct registry *r, uint32_t bi, uint64_t generation)
{
    struct reg_block *b = reg_block_at(r, bi);
    if (!b || b->generation != generation || reg_block_held(r, bi)) return REG_NONE;
    uint32_t state = LOAD_STATE(b->state);
    if (state == BLOCK_ORPHANED) {
        reg_block_recycle(r, bi);
        return REG_NONE;
    }
    return waits_on_holders(state) ? limbo_unheld(b) : REG_NONE;
}

uint32_t reg_holder_drop_leases(struct registry *r, uint32_t idx)
{
    uint32_t n = 0;
    for (uint32_t c = 0; c < r->nchunks; c++) {
        if (owner_of(r, c) != idx) continue;
        for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
            struct reg_lease *l = &r->leases[li];
            if (LOAD_STATE(l->intent) == LEASE_FREE) continue;
            uint32_t bi = l->block;
            uint64_t gen = l->block_gen;
            l->holder = idx; /* the chunk's owner's bit, whatever the record says */
            free_lease(r, li);
            n++;
            uint32_t wake = reg_block_unheld(r, bi, gen);
            if (wake != REG_NONE && wake != idx) registry_wake(r, wake);
        }
        disown(r, c); /* after its leases */
    }
    if (r->self_slot == idx) r->nspare = 0;
    return n;
}

void reg_holder_sweep(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    reg_holder_drop_leases(r, idx);
    test_delay();
    /* Its own records only: its lease chunks above, its exports here. (A
     * bit without a lease cannot be left by any death in this build: the
     * lease is written before the bit and freed after it. One in a
     * corrupt segment pins its block until a repair clears the bits of
     * holders that are not active.) */
    reg_holder_let_go(r, idx);
    STORE_STATE(h->state, HOLDER_FREE);
}

void reg_block_let_go(struct registry *r, uint32_t idx)
{
    struct reg_block *b = reg_block_at(r, idx);
    if (!b) return;
    if (b->state == BLOCK_RETIRED || !reg_block_held(r, idx))
        reg_block_recycle(r, idx);
    else
        reg_block_orphan(r, idx);
}

void reg_holder_let_go(struct registry *r, uint32_t idx)
{
    if (idx >= r->max_holders) return;
    uint32_t *head = &r->export_heads[idx];
    for (uint32_t steps = 0, first; (first = *head) != 0; steps++) {
        uint32_t i = first - 1;
        if (i >= r->max_blocks || r->blocks[i].exp_on != idx + 1 || steps > r->max_blocks) {
            /* A corrupt list: the table, as before there were lists. */
            *head = 0;
            for (uint32_t k = 0; k < r->max_blocks; k++)
                if (r->blocks[k].exporter == idx && listed(r->blocks[k].state))
                    reg_block_let_go(r, k);
            return;
        }
        reg_block_let_go(r, i); /* takes it off the list */
    }
}

/* The dead among the candidates (flags, max_holders of them), checked
 * without the lock: their indices and nonces into dead[]/nonce[]. */
static uint32_t find_dead(struct registry *r, const uint8_t *cand, uint32_t *dead, uint64_t *nonce)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->max_holders; i++) {
        if (!cand[i]) continue;
        struct reg_holder *h = &r->holders[i];
        uint64_t before = __atomic_load_n(&h->nonce, __ATOMIC_RELAXED);
        if (LOAD_STATE(h->state) != HOLDER_ACTIVE || reg_holder_alive(r, i)) continue;
        dead[n] = i;
        nonce[n++] = before;
    }
    return n;
}

/* Sweeps those find_dead returned that are still those holders. Lock held. */
static int sweep_found(struct registry *r, const uint32_t *dead, const uint64_t *nonce, uint32_t n)
{
    int swept = 0;
    for (uint32_t k = 0; k < n; k++) {
        struct reg_holder *h = reg_holder_at(r, dead[k]);
        /* Still the holder we found dead: its slot stays ACTIVE until a
         * sweep (under this lock) frees it, and a new attacher takes only a
         * FREE slot, with a new nonce. */
        if (!h || LOAD_STATE(h->state) != HOLDER_ACTIVE || h->nonce != nonce[k]) continue;
        log_msg(LOG_INFO, "holder %u (pid %d) is gone; releasing its leases and blocks", dead[k],
                (int)h->pid);
        reg_holder_sweep(r, dead[k]);
        swept++;
    }
    return swept;
}

int reg_sweep_among(struct registry *r, const uint8_t *cand)
{
    uint32_t *dead = malloc(r->max_holders * sizeof *dead);
    uint64_t *nonce = malloc(r->max_holders * sizeof *nonce);
    int swept = 0;
    uint32_t n = dead && nonce ? find_dead(r, cand, dead, nonce) : 0;
    if (n) {
        if (registry_lock(r) == 0) {
            swept = sweep_found(r, dead, nonce, n);
            registry_unlock(r);
        } else {
            swept = -1;
        }
    }
    free(dead);
    free(nonce);
    return swept;
}

int reg_sweep_dead(struct registry *r, uint32_t self)
{
    uint8_t *cand = calloc(r->max_holders, 1);
    if (!cand) return 0;
    for (uint32_t i = 0; i < r->max_holders; i++)
        cand[i] = i != self && LOAD_STATE(r->holders[i].state) == HOLDER_ACTIVE;
    int swept = reg_sweep_among(r, cand);
    free(cand);
    return swept;
}

void registry_wake(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    __atomic_fetch_add(&h->wake, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &h->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void registry_wait(struct registry *r, uint32_t idx, uint32_t seen, uint64_t timeout_ns)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    /* Shared (not FUTEX_PRIVATE): wakers live in other processes. */
    syscall(SYS_futex, &h->wake, FUTEX_WAIT, seen, &ts, NULL, 0);
}

/* ---- blocks ---- */

static bool handle_equal(const struct reg_block *b, const struct ipc_handle *hd)
{
    return !memcmp(b->handle, hd->bytes, IPC_HANDLE_BYTES);
}

uint32_t reg_block_find(struct registry *r, const struct ipc_handle *hd)
{
    uint32_t best = REG_NONE, idx = r->buckets[bucket_of(r, hd->bytes)];
    for (uint32_t steps = 0; idx != REG_NONE && steps < r->max_blocks; steps++) {
        struct reg_block *b = reg_block_at(r, idx);
        if (!b) break;
        if (b->state != BLOCK_FREE && handle_equal(b, hd)) {
            if (b->state == BLOCK_LIVE || b->state == BLOCK_LIMBO) return idx;
            if (best == REG_NONE) best = idx;
        }
        idx = b->hash_next;
    }
    return best;
}

/* The handle bytes compared word by word with relaxed atomic loads: a
 * writer may be refilling the record (the generation check decides). */
static bool handle_equal_racy(const struct reg_block *b, const struct ipc_handle *hd)
{
    const uint64_t *w = (const uint64_t *)(const void *)b->handle;
    for (int i = 0; i < IPC_HANDLE_BYTES / 8; i++) {
        uint64_t x;
        memcpy(&x, hd->bytes + i * 8, sizeof x);
        if (__atomic_load_n(&w[i], __ATOMIC_RELAXED) != x) return false;
    }
    return true;
}

uint32_t reg_block_lookup(struct registry *r, const struct ipc_handle *hd, uint32_t hash,
                          uint64_t *gen)
{
    uint32_t idx = __atomic_load_n(&r->buckets[hash & (r->nbuckets - 1)], __ATOMIC_ACQUIRE);
    for (uint32_t steps = 0; idx != REG_NONE && steps < r->max_blocks; steps++) {
        struct reg_block *b = reg_block_at(r, idx);
        if (!b) return REG_NONE;
        /* state is stored last by the creator (release): after an acquire
         * load of a live state, the handle and generation are its own. */
        uint32_t s1 = LOAD_STATE(b->state);
        uint64_t g1 = __atomic_load_n(&b->generation, __ATOMIC_RELAXED);
        if ((s1 == BLOCK_LIVE || s1 == BLOCK_LIMBO || s1 == BLOCK_RETIRING) &&
            handle_equal_racy(b, hd)) {
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            /* Recycling stores FREE first and re-creating bumps the
             * generation: unchanged, the handle compared was this record's. */
            if (__atomic_load_n(&b->generation, __ATOMIC_RELAXED) == g1 &&
                LOAD_STATE(b->state) != BLOCK_FREE) {
                *gen = g1;
                return idx;
            }
            return REG_NONE;
        }
        idx = __atomic_load_n(&b->hash_next, __ATOMIC_RELAXED);
    }
    return REG_NONE;
}

#define prefetch_read(p) __builtin_prefetch((p), 0)

/* A prefetch for writing: the line comes exclusive, so that the atomic
 * that needs it does not wait a second time for the other CPU to drop its
 * copy. Trap: on x86-64, GCC compiles __builtin_prefetch(p, 1) to a read
 * prefetch unless built for a CPU with PREFETCHW, so the instruction is
 * issued here when CPUID reports it (checked once; a read prefetch
 * otherwise). */
#if defined(__x86_64__)
static int has_prefetchw = -1; /* unknown; racy first checks agree */
static inline void prefetch_write(const volatile void *p)
{
    int has = __atomic_load_n(&has_prefetchw, __ATOMIC_RELAXED);
    if (__builtin_expect(has < 0, 0)) {
        unsigned a, b, c = 0, d;
        has = __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & bit_PRFCHW);
        __atomic_store_n(&has_prefetchw, has, __ATOMIC_RELAXED);
    }
    if (has)
        __asm__ volatile("prefetchw %0" : : "m"(*(const volatile char *)p));
    else
        __builtin_prefetch((const void *)p, 0);
}
#else
#define prefetch_write(p) __builtin_prefetch((p), 1)
#endif

void reg_prefetch_free(struct registry *r, uint32_t idx)
{
    if (idx >= r->max_blocks) return;
    /* For reading, though the state's CASes write it: prefetching it for
     * writing made the free slower (+140 against +96 ns while lines moved
     * slowly, 10-20 ns in the fast state; docs/performance.md). */
    prefetch_read(&r->blocks[idx].generation);
    prefetch_read(reg_block_held_words(r, idx));
}

void reg_prefetch_create(struct registry *r, uint32_t idx, const struct ipc_handle *hd)
{
    prefetch_write(&r->buckets[bucket_of(r, hd->bytes)]);
    if (idx >= r->max_blocks) return;
    struct reg_block *b = &r->blocks[idx];
    if (LOAD_STATE(b->state) != BLOCK_FREE) /* recycled first: unlinked from its bucket */
        prefetch_write(&r->buckets[bucket_of(r, b->handle)]);
    prefetch_write(b->handle);
    prefetch_write(&b->generation);
    prefetch_read(reg_block_held_words(r, idx));
}

void reg_prefetch_open(struct registry *r, uint32_t guess, uint32_t hash)
{
    if (!r->base) return;
    prefetch_read(&r->buckets[hash & (r->nbuckets - 1)]);
    if (guess >= r->max_blocks) return;
    struct reg_block *b = &r->blocks[guess];
    prefetch_read(b->handle);
    prefetch_write(&b->generation); /* the hand-off's claim */
    if (r->self_slot < r->max_holders)
        prefetch_write(reg_block_held_words(r, guess) + r->self_slot / 64); /* our bit */
}

uint32_t reg_block_next_free(struct registry *r)
{
    return __atomic_load_n(&r->hdr->block_free, __ATOMIC_RELAXED);
}

/* Empties block idx's held bitmap, storing only into words that are not
 * zero already: a store moves the line from the last importer's CPU. */
static void clear_held(struct registry *r, uint32_t idx)
{
    uint64_t *held = reg_block_held_words(r, idx);
#pragma GCC unroll 8 /* every export and free runs it: 8 words by default */
    for (uint32_t w = 0; w < r->held_words; w++)
        if (__atomic_load_n(&held[w], __ATOMIC_SEQ_CST))
            __atomic_store_n(&held[w], 0, __ATOMIC_SEQ_CST);
}

/* Pops the free-list head, growing the table when it is empty, repairing
 * once if it does not point at a free record. */
static uint32_t pop_free_block(struct registry *r)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        uint32_t idx = r->hdr->block_free;
        if (idx == REG_NONE && grow_blocks(r)) idx = r->hdr->block_free;
        if (idx == REG_NONE) return REG_NONE;
        if (idx < r->max_blocks && r->blocks[idx].state == BLOCK_FREE) {
            r->hdr->block_free = r->blocks[idx].hash_next;
            return idx;
        }
        LOG_RATE(LOG_WARN, "registry %s: free list corrupt; rebuilding", r->name);
        registry_repair(r);
    }
    return REG_NONE;
}

uint32_t reg_block_create(struct registry *r, const struct ipc_handle *hd, uint64_t base,
                          uint64_t size, int device, uint32_t exporter, uint64_t now, int kind)
{
    struct reg_holder *o = reg_holder_at(r, exporter);
    if (!o) return REG_NONE;
    uint32_t idx = pop_free_block(r);
    if (idx == REG_NONE) return REG_NONE;
    struct reg_block *b = &r->blocks[idx];
    __atomic_store_n(&b->generation, b->generation + 1, __ATOMIC_RELAXED);
    memcpy(b->handle, hd->bytes, IPC_HANDLE_BYTES);
    b->base = base;
    b->size = size;
    b->device = device;
    b->exporter = exporter;
    b->exporter_nonce = o->nonce;
    __atomic_store_n(&b->pending, 1, __ATOMIC_RELAXED);
    b->first_export_ns = b->last_export_ns = now;
    b->limbo_since_ns = 0;
    b->exporter_pid = o->pid, b->claimed = b->expired = 0, b->orphaned_ns = 0; /* observability */
    clear_held(r, idx); /* nobody yet (a free record may hold garbage) */
    b->rules = (options_get()->handoff == HANDOFF_WINDOW ? BLOCK_RULE_HANDOFF_WINDOW : 0) |
               (kind == IPC_KIND_POOL ? BLOCK_KIND_POOL : 0);
    memcpy(b->exporter_comm, o->comm, sizeof b->exporter_comm);
    list_push(r, idx, exporter);
    uint32_t bk = bucket_of(r, b->handle);
    b->hash_next = r->buckets[bk];
    __atomic_store_n(&r->buckets[bk], idx, __ATOMIC_RELEASE);
    test_delay();
    STORE_STATE(b->state, BLOCK_LIVE);
    return idx;
}

void reg_block_recycle(struct registry *r, uint32_t idx)
{
    struct reg_block *b = reg_block_at(r, idx);
    if (!b) return;
    STORE_STATE(b->state, BLOCK_FREE);
    test_delay();
    list_unlink(r, idx);
    clear_held(r, idx);
    uint32_t *link = &r->buckets[bucket_of(r, b->handle)];
    for (uint32_t steps = 0; *link != REG_NONE && steps < r->max_blocks; steps++) {
        struct reg_block *c = reg_block_at(r, *link);
        if (!c) {
            *link = REG_NONE;
            break;
        }
        if (*link == idx) {
            /* Lock-free readers standing on idx keep following its old
             * link (into the chain they were on) until it is reused. */
            __atomic_store_n(link, c->hash_next, __ATOMIC_RELEASE);
            break;
        }
        link = &c->hash_next;
    }
    __atomic_store_n(&b->pending, 0, __ATOMIC_RELAXED);
    b->hash_next = r->hdr->block_free;
    r->hdr->block_free = idx;
}

void reg_block_orphan(struct registry *r, uint32_t idx)
{
    struct reg_block *b = reg_block_at(r, idx);
    if (!b) return;
    b->orphaned_ns = reg_now_ns();
    STORE_STATE(b->state, BLOCK_ORPHANED);
    list_unlink(r, idx);
}

uint32_t reg_block_leases(struct registry *r, uint32_t idx)
{
    if (idx >= r->max_blocks) return 0;
    const uint64_t *held = reg_block_held_words(r, idx);
    uint32_t n = 0;
    for (uint32_t w = 0; w < r->held_words; w++)
        n += (uint32_t)__builtin_popcountll(__atomic_load_n(&held[w], __ATOMIC_SEQ_CST));
    return n;
}

bool reg_block_held(struct registry *r, uint32_t idx)
{
    if (idx >= r->max_blocks) return false;
    const uint64_t *held = reg_block_held_words(r, idx);
#pragma GCC unroll 8 /* every free runs it: 8 words by default */
    for (uint32_t w = 0; w < r->held_words; w++)
        if (__atomic_load_n(&held[w], __ATOMIC_SEQ_CST)) return true;
    return false;
}

uint32_t reg_block_next_holder(struct registry *r, uint32_t idx, uint32_t from)
{
    if (idx >= r->max_blocks) return REG_NONE;
    const uint64_t *held = reg_block_held_words(r, idx);
    for (uint32_t w = from / 64; w < r->held_words; w++) {
        uint64_t m = __atomic_load_n(&held[w], __ATOMIC_RELAXED);
        if (w == from / 64) m &= ~0ull << (from % 64);
        if (m) {
            uint32_t h = w * 64 + (uint32_t)__builtin_ctzll(m);
            return h < r->max_holders ? h : REG_NONE;
        }
    }
    return REG_NONE;
}

bool reg_hold(struct registry *r, uint32_t block, uint32_t holder)
{
    if (block >= r->max_blocks || holder >= r->max_holders) return false;
    uint64_t bit = 1ull << (holder % 64);
    uint64_t old =
        __atomic_fetch_or(&reg_block_held_words(r, block)[holder / 64], bit, __ATOMIC_SEQ_CST);
    return !(old & bit);
}

bool reg_unhold(struct registry *r, uint32_t block, uint32_t holder)
{
    if (block >= r->max_blocks || holder >= r->max_holders) return false;
    __atomic_fetch_and(&reg_block_held_words(r, block)[holder / 64], ~(1ull << (holder % 64)),
                       __ATOMIC_SEQ_CST);
    return !reg_block_held(r, block);
}

bool reg_block_retire(struct registry *r, uint32_t idx)
{
    struct reg_block *b = reg_block_at(r, idx);
    uint32_t limbo = BLOCK_LIMBO;
    if (!b || !__atomic_compare_exchange_n(&b->state, &limbo, BLOCK_RETIRING, false,
                                           __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return false;
    /* Dekker with the importer (reg_hold, then a load of state; all
     * seq-cst): one of the two sees the other's store, so either we see its
     * bit or it sees RETIRING and waits for our answer. */
    bool free_now = !reg_block_held(r, idx) && __atomic_load_n(&b->pending, __ATOMIC_SEQ_CST) == 0;
    if (free_now) test_delay(); /* a death here leaves RETIRING: swept like all the dead's blocks */
    /* A CAS, not a store: a repair (rebuild_index) may have turned RETIRING
     * into LIMBO meanwhile, and an importer may have taken LIMBO for LIVE
     * and its bit come too late for us: then it stays in limbo. */
    uint32_t retiring = BLOCK_RETIRING;
    return __atomic_compare_exchange_n(&b->state, &retiring, free_now ? BLOCK_RETIRED : BLOCK_LIMBO,
                                       false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED) &&
           free_now;
}

/* ---- leases ---- */

uint32_t reg_lease_take(struct registry *r)
{
    return r->nspare ? r->spare[--r->nspare] : REG_NONE;
}

/* Adds a slot to our spare list (growing it). False when out of memory. */
static bool spare_push(struct registry *r, uint32_t li)
{
    if (r->nspare == r->spare_cap) {
        uint32_t cap = r->spare_cap ? r->spare_cap * 2 : 64;
        uint32_t *p = realloc(r->spare, cap * sizeof *p);
        if (!p) return false;
        r->spare = p, r->spare_cap = cap;
    }
    r->spare[r->nspare++] = li;
    return true;
}

/* A chunk for holder, marked as its own: an unowned one, or (locked) one
 * whose owner is not an active holder -- a corrupt or hostile owner: a
 * chunk is claimed only by an attached holder and given back by its sweep,
 * so its leases name nobody. The table grows when none is found. REG_NONE
 * when full. */
static uint32_t claim_chunk(struct registry *r, uint32_t holder, bool locked)
{
    registry_refresh(r); /* another process may have grown the table */
    for (uint32_t c = 0;; c++) {
        if (c == r->nchunks && !grow_chunks(r)) return REG_NONE;
        uint32_t owner = owner_of(r, c);
        if (owner != REG_NONE &&
            (!locked ||
             (owner < r->max_holders && LOAD_STATE(r->holders[owner].state) == HOLDER_ACTIVE)))
            continue;
        /* Only ours once the CAS says so. An unowned chunk's slots are all
         * FREE (a sweep or an exit frees every lease of a chunk before
         * giving it back) and nobody else writes them. */
        if (!own_chunk(r, c, owner, holder)) continue;
        reset_chunk(r, c, holder);
        /* One of the last quarter: grow now, before anyone finds none. */
        if (c >= r->nchunks - r->nchunks / 4) (void)grow_chunks(r);
        return c;
    }
}

/* Our spare list gets chunk c's slots. */
static void spare_chunk(struct registry *r, uint32_t c)
{
    for (uint32_t li = (c + 1) * r->lease_chunk; li-- > c * r->lease_chunk;)
        if (!spare_push(r, li)) break; /* out of memory: fewer spares, nothing wrong */
}

/* reg_lease_claim and reg_lease_grow. */
static int claim_for_self(struct registry *r, bool locked)
{
    if (r->self_slot == REG_NONE) return -ENOSPC;
    uint32_t c = claim_chunk(r, r->self_slot, locked);
    if (c == REG_NONE) return locked ? -ENOSPC : -EAGAIN;
    spare_chunk(r, c);
    return 0;
}

int reg_lease_claim(struct registry *r)
{
    return claim_for_self(r, false);
}

int reg_lease_grow(struct registry *r)
{
    return claim_for_self(r, true);
}

bool reg_lease_begin(struct registry *r, uint32_t li, uint32_t block, uint64_t generation)
{
    struct reg_lease *l = &r->leases[li];
    l->block = block;
    l->block_gen = generation;
    l->holder = owner_of(r, li / r->lease_chunk);
    l->count = 1;
    l->open_ns = reg_coarse_ns();          /* for reports: how long it is held */
    STORE_STATE(l->intent, LEASE_OPENING); /* before the bit: a sweep finds it */
    test_delay();
    return reg_hold(r, block, l->holder);
}

uint32_t reg_lease_end(struct registry *r, uint32_t li)
{
    struct reg_lease *l = reg_lease_at(r, li);
    if (!l) return REG_NONE;
    uint32_t bi = l->block;
    uint64_t gen = l->block_gen;
    STORE_STATE(l->intent, LEASE_CLOSING);
    bool empty = reg_unhold(r, bi, l->holder);
    test_delay();
    __atomic_store_n(&l->count, 0, __ATOMIC_RELAXED);
    STORE_STATE(l->intent, LEASE_FREE);
    (void)spare_push(r, li); /* out of memory: the slot idles until exit */
    if (!empty) return REG_NONE;
    struct reg_block *b = reg_block_at(r, bi);
    if (!b || __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) != gen ||
        !waits_on_holders(LOAD_STATE(b->state)))
        return REG_NONE;
    return limbo_unheld(b);
}

uint32_t reg_lease_find(struct registry *r, uint32_t block, uint32_t holder)
{
    struct reg_block *b = reg_block_at(r, block);
    if (!b) return REG_NONE;
    for (uint32_t c = 0; c < r->nchunks; c++) {
        if (owner_of(r, c) != holder) continue;
        for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
            struct reg_lease *l = &r->leases[li];
            if (LOAD_STATE(l->intent) != LEASE_FREE && l->block == block &&
                l->block_gen == b->generation && b->state != BLOCK_FREE)
                return li;
        }
    }
    return REG_NONE;
}

uint32_t reg_lease_create(struct registry *r, uint32_t block, uint32_t holder)
{
    struct reg_block *b = reg_block_at(r, block);
    if (!b || !reg_holder_at(r, holder)) return REG_NONE;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t c = 0; c < r->nchunks; c++) {
            if (owner_of(r, c) != holder) continue;
            for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
                if (LOAD_STATE(r->leases[li].intent) != LEASE_FREE) continue;
                if (holder == r->self_slot) /* not handed out twice by reg_lease_take */
                    for (uint32_t k = 0; k < r->nspare; k++)
                        if (r->spare[k] == li) r->spare[k] = r->spare[--r->nspare];
                reg_lease_begin(r, li, block, b->generation);
                return li;
            }
        }
        if (pass == 0 && claim_chunk(r, holder, true) == REG_NONE) return REG_NONE;
    }
    return REG_NONE;
}

uint32_t reg_lease_drop(struct registry *r, uint32_t idx)
{
    struct reg_lease *l = reg_lease_at(r, idx);
    if (!l || l->intent == LEASE_FREE) return REG_NONE;
    uint32_t bi = l->block;
    uint64_t gen = l->block_gen;
    free_lease(r, idx);
    if (owner_of(r, idx / r->lease_chunk) == r->self_slot && r->self_slot != REG_NONE)
        (void)spare_push(r, idx);
    return reg_block_unheld(r, bi, gen);
}
