/* registry: the shared segment's life in one process -- its name and
 * directory, creating a new segment or validating and attaching to an
 * existing one (the one validator, shared with ipcshim-stat), raising its
 * bounds, closing it, and removing the file as the last process out.
 * registry.h holds the layout, the protocol table and the state machines;
 * the pieces of the registry are registry_layout.c (geometry and
 * reservations), registry_fd.c (the verified descriptor), registry_lock.c
 * (the robust lock), registry_chunks.c (lease chunk ownership),
 * registry_blocks.c (the block table, its derived index and the repair),
 * registry_leases.c and registry_holders.c. ipc.c decides when to call
 * what. Nothing here calls the host (host.h). */
#include "registry_internal.h"
#include "liveness.h"
#include "log.h"
#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    INITIAL_BLOCKS = 1024, /* in use at creation; the table doubles from there */
    INITIAL_CHUNKS = 32,   /* lease chunks at creation (1024 leases) */
};

_Static_assert(sizeof(pthread_mutex_t) <= 64, "the header reserves 64 bytes for the mutex");
_Static_assert(sizeof(struct reg_header) == 256, "header layout");
_Static_assert(sizeof(struct reg_holder) == 80, "holder layout");
_Static_assert(sizeof(struct reg_block) == 192, "block layout: three cache lines");
_Static_assert(offsetof(struct reg_block, generation) == 64 &&
                   offsetof(struct reg_block, first_export_ns) == 128,
               "block layout: the open's fields on one line");
_Static_assert(sizeof(struct reg_lease) == 32, "lease layout");

unsigned registry_attach_wait_ms = 2000;

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
    uint32_t nb0 = reg_buckets_within(l.nbuckets, b0);
    /* Reserve the pages in use now, before the first touch of any of them
     * (registry_set_views already reads the header): a sparse file on a
     * full tmpfs maps fine and then kills the host with SIGBUS at the first
     * touch of a missing page, a read as much as a write. Growth reserves
     * before it touches, the same way. */
    int err = reg_reserve_in_use(registry_reserve, fd, &l, b0, c0, nb0);
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
        reg_chunk_disown(r, c);
    h->creator_pid = (int32_t)getpid();
    h->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    int rc = reg_lock_init(&h->lock.mutex);
    if (rc) return rc;
    registry_repair(r); /* builds the free lists and empty hash buckets */
    /* Attachers read the header only after seeing ready: pairs with the
     * acquire fence in validate, after it reads ready == 1. */
    __atomic_store_n(&h->ready, 1, __ATOMIC_RELEASE);
    return 0;
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
                 * read it again, after having seen ready, for the fields.
                 * Pairs with create's release store of ready. */
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
    if (!reg_lock_kind_ok(&h->lock.mutex))
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
    /* pairs with registry_refresh's acquire loads of the limits */
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
    int err =
        reg_reserve_in_use(reg_reserve_live, fd, &l, h.blocks_now, h.chunks_now, h.nbuckets_now);
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
    REG_ASSERT_LOCKED(r);
    /* pairs with registry_removing (Dekker: we publish, then read the slots) */
    __atomic_store_n(&r->hdr->removing, 1, __ATOMIC_SEQ_CST);
    int fd = registry_fd(r);
    bool used = fd < 0; /* cannot see the lock bytes: keep it */
    for (uint32_t i = 0; i < r->max_holders && !used; i++)
        /* pairs with take_slot's store of ACTIVE */
        used = __atomic_load_n(&r->holders[i].state, __ATOMIC_SEQ_CST) != HOLDER_FREE;
    /* A byte taken by an attacher still in take_slot (one call for all). */
    if (!used) used = liveness_range_state(fd, r->lock_base, (off_t)r->max_holders) != 0;
    struct stat st;
    if (!used && stat(r->path, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino &&
        unlink(r->path) == 0) {
        log_msg(LOG_DEBUG, "registry %s: removed (the last process out)", r->name);
        return true; /* `removing` stays set: whoever still maps it backs off */
    }
    /* pairs with registry_removing's load: an attacher that backed off retries */
    __atomic_store_n(&r->hdr->removing, 0, __ATOMIC_SEQ_CST);
    return false;
}

bool registry_removing(struct registry *r)
{
    /* pairs with registry_remove_if_unused's seq_cst store of removing: after
     * the slot's ACTIVE store (take_slot), before the load below */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* pairs with the store of removing in registry_remove_if_unused */
    return __atomic_load_n(&r->hdr->removing, __ATOMIC_SEQ_CST) != 0;
}
