/* inspect: read-only snapshots of a registry; see inspect.h for what a
 * snapshot promises (and that it may be torn). The registry is found and
 * checked by registry_segment.c's own registry_locate() and registry_validate(),
 * the library's one validator: a segment the shim itself would refuse is
 * refused here too, with the same reason. */
#include "inspect.h"
#include "liveness.h"
#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOAD_STATE(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)

static int fail(int rc, char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(int rc, char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

const char *inspect_block_state(uint32_t state)
{
    switch (state) {
    case BLOCK_LIVE:
        return "live";
    case BLOCK_LIMBO:
        return "limbo";
    case BLOCK_ORPHANED:
        return "orphaned";
    case BLOCK_RETIRED:
        return "retired";
    default:
        return "?";
    }
}

const char *inspect_lease_intent(uint32_t intent)
{
    switch (intent) {
    case LEASE_OPENING:
        return "opening";
    case LEASE_OPEN:
        return "open";
    case LEASE_CLOSING:
        return "closing";
    default:
        return "?";
    }
}

const struct inspect_holder *inspect_holder_by_slot(const struct inspect_snapshot *s, uint32_t slot)
{
    for (uint32_t i = 0; i < s->nholders; i++)
        if (s->holders[i].slot == slot) return &s->holders[i];
    return NULL;
}

void inspect_free(struct inspect_snapshot *s)
{
    free(s->holders);
    free(s->blocks);
    free(s->leases);
    memset(s, 0, sizeof *s);
}

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void read_comm(pid_t pid, char *out, size_t len)
{
    char path[64];
    out[0] = 0;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n <= 0) n = 0;
    out[n] = 0;
    out[strcspn(out, "\n")] = 0;
}

static int by_block_then_holder(const void *a, const void *b)
{
    const struct inspect_lease *x = a, *y = b;
    if (x->block != y->block) return x->block < y->block ? -1 : 1;
    if (x->holder != y->holder) return x->holder < y->holder ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* copy_records' maps from the registry's slots to the snapshot's indexes
 * (REG_NONE: not copied), and the holders' nonces. */
struct copy_maps {
    uint32_t *holder_at;
    uint64_t *nonces;
    uint32_t *block_at;
};

/* The active holders. */
static void copy_holders(struct registry *r, struct inspect_snapshot *s, struct copy_maps *m)
{
    for (uint32_t i = 0; i < r->max_holders; i++) {
        m->holder_at[i] = REG_NONE;
        const struct reg_holder *h = &r->holders[i];
        uint32_t state = LOAD_STATE(h->state);
        if (state == HOLDER_FREE) continue;
        if (state != HOLDER_ACTIVE) {
            s->skipped++;
            continue;
        }
        struct inspect_holder *o = &s->holders[s->nholders];
        o->slot = i;
        o->pid = h->pid;
        o->start_time = h->start_time;
        o->attach_ns = h->attach_ns;
        m->nonces[i] = h->nonce;
        o->alive = liveness_alive(r->fd, r->lock_base + i, h->pid, h->start_time);
        if (o->alive) read_comm(h->pid, o->comm, sizeof o->comm);
        memcpy(o->reg_comm, h->comm, sizeof h->comm);
        o->reg_comm[16] = 0;
        m->holder_at[i] = s->nholders++;
    }
}

/* Block b (slot i, in state) into o; the holders are copied already. */
static void copy_block(struct registry *r, const struct inspect_snapshot *s,
                       const struct copy_maps *m, const struct reg_block *b, uint32_t i,
                       uint32_t state, struct inspect_block *o)
{
    o->slot = i;
    o->state = state;
    o->base = b->base;
    o->size = b->size;
    o->generation = b->generation;
    o->first_export_ns = b->first_export_ns;
    o->last_export_ns = b->last_export_ns;
    o->limbo_since_ns = b->limbo_since_ns;
    o->device = b->device;
    o->pending = b->pending;
    o->exporter = b->exporter < r->max_holders ? b->exporter : REG_NONE;
    o->exporter_current = o->exporter != REG_NONE && m->holder_at[o->exporter] != REG_NONE &&
                          m->nonces[o->exporter] == b->exporter_nonce;
    o->first_lease = UINT32_MAX;
    memcpy(o->handle, b->handle, sizeof o->handle);
    o->exporter_pid = b->exporter_pid;
    memcpy(o->exporter_comm, b->exporter_comm, sizeof b->exporter_comm);
    o->exporter_comm[16] = 0;
    o->claimed = b->claimed;
    o->expired = b->expired;
    o->orphaned_ns = state == BLOCK_ORPHANED ? b->orphaned_ns : 0;
    o->pool = (b->rules & BLOCK_KIND_POOL) != 0;
    o->vmm = (b->rules & BLOCK_KIND_VMM) != 0;
    o->exporter_dead = state == BLOCK_ORPHANED || !o->exporter_current ||
                       !s->holders[m->holder_at[o->exporter]].alive;
}

/* The blocks in use (a RETIRING one shows as LIMBO). */
static void copy_blocks(struct registry *r, struct inspect_snapshot *s, struct copy_maps *m)
{
    for (uint32_t i = 0; i < r->max_blocks; i++) {
        m->block_at[i] = REG_NONE;
        const struct reg_block *b = &r->blocks[i];
        uint32_t state = LOAD_STATE(b->state);
        if (state == BLOCK_FREE) continue;
        if (state > BLOCK_RETIRING) {
            s->skipped++;
            continue;
        }
        if (state == BLOCK_RETIRING) state = BLOCK_LIMBO; /* its exporter is deciding */
        copy_block(r, s, m, b, i, state, &s->blocks[s->nblocks]);
        m->block_at[i] = s->nblocks++;
    }
}

/* The leases on copied blocks by copied holders, sorted by block. */
static void copy_leases(struct registry *r, struct inspect_snapshot *s, const struct copy_maps *m)
{
    for (uint32_t i = 0; i < r->max_leases; i++) {
        const struct reg_lease *l = &r->leases[i];
        uint32_t intent = LOAD_STATE(l->intent);
        if (intent == LEASE_FREE) continue;
        uint32_t block = l->block, holder = l->holder, count = l->count;
        uint64_t gen = l->block_gen;
        bool ok = intent <= LEASE_CLOSING && block < r->max_blocks &&
                  m->block_at[block] != REG_NONE &&
                  s->blocks[m->block_at[block]].generation == gen && holder < r->max_holders &&
                  m->holder_at[holder] != REG_NONE && count > 0;
        if (!ok) {
            s->skipped++;
            continue;
        }
        s->leases[s->nleases++] =
            (struct inspect_lease){i, block, holder, count, intent, l->open_ns};
    }
    qsort(s->leases, s->nleases, sizeof *s->leases, by_block_then_holder);
}

/* Each holder's totals: what it imports (its leases) and exports. */
static void tally_holders(struct inspect_snapshot *s, const struct copy_maps *m)
{
    for (uint32_t i = 0; i < s->nleases; i++) {
        struct inspect_lease *l = &s->leases[i];
        struct inspect_block *b = &s->blocks[m->block_at[l->block]];
        if (b->first_lease == UINT32_MAX) b->first_lease = i;
        b->nleases++;
        struct inspect_holder *h = &s->holders[m->holder_at[l->holder]];
        h->imports++;
        h->opens += l->count;
        h->imported_bytes += b->size;
        if (b->exporter_dead) {
            h->dead_pinned_blocks++;
            h->dead_pinned_bytes += b->size;
            if (b->orphaned_ns && (!h->oldest_dead_ns || b->orphaned_ns < h->oldest_dead_ns))
                h->oldest_dead_ns = b->orphaned_ns;
        }
    }
    for (uint32_t i = 0; i < s->nblocks; i++) {
        struct inspect_block *b = &s->blocks[i];
        if (b->exporter == REG_NONE || m->holder_at[b->exporter] == REG_NONE) continue;
        struct inspect_holder *h = &s->holders[m->holder_at[b->exporter]];
        if (!b->exporter_current) continue;
        h->exports++;
        if (b->state == BLOCK_LIVE || b->state == BLOCK_LIMBO) h->exported_bytes += b->size;
        if (b->state != BLOCK_LIMBO) continue;
        h->limbo_blocks++;
        h->limbo_bytes += b->size;
        if (!h->oldest_limbo_ns || b->limbo_since_ns < h->oldest_limbo_ns)
            h->oldest_limbo_ns = b->limbo_since_ns;
    }
}

/* Copies the records in use out of the mapped registry r (fd open). */
static int copy_records(struct registry *r, struct inspect_snapshot *s)
{
    struct copy_maps m = {
        .holder_at = malloc(r->max_holders * sizeof *m.holder_at),
        .nonces = malloc(r->max_holders * sizeof *m.nonces),
        .block_at = malloc(r->max_blocks * sizeof *m.block_at),
    };
    s->holders = calloc(r->max_holders, sizeof *s->holders);
    s->blocks = calloc(r->max_blocks, sizeof *s->blocks);
    s->leases = calloc(r->max_leases, sizeof *s->leases);
    int rc = 0;
    if (!m.holder_at || !m.nonces || !m.block_at || !s->holders || !s->blocks || !s->leases) {
        rc = -ENOMEM;
    } else {
        copy_holders(r, s, &m);
        copy_blocks(r, s, &m);
        copy_leases(r, s, &m);
        tally_holders(s, &m);
    }
    free(m.holder_at);
    free(m.nonces);
    free(m.block_at);
    return rc;
}

int inspect_snapshot(const char *domain, struct inspect_snapshot *s, char *why, size_t whylen)
{
    memset(s, 0, sizeof *s);
    if (why && whylen) why[0] = 0;
    char path[256];
    int rc = registry_locate(domain, path, sizeof path, s->name, sizeof s->name);
    if (rc == -EINVAL)
        return fail(-EINVAL, why, whylen, "\"%s\" is not a domain name (1-64 of A-Z a-z 0-9 . _ -)",
                    domain ? domain : "");
    if (rc == -ENOENT) {
        registry_candidate(domain, 0, path, sizeof path, s->name, sizeof s->name);
        return fail(-ENOENT, why, whylen,
                    "no registry for domain \"%s\" (%s does not exist): no program of "
                    "this user uses the shim in this domain now (the last one out removes "
                    "the registry)",
                    domain, path);
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return fail(-e, why, whylen, "cannot open %s: %s", path, strerror(e));
    }
    struct reg_caps caps;
    struct reg_layout l;
    char reason[160];
    rc = registry_validate(fd, &caps, &l, reason, sizeof reason);
    if (rc) {
        close(fd);
        if (rc == -EUSERS) rc = -EPERM;
        if (rc == -ETIMEDOUT)
            return fail(rc, why, whylen, "registry %s %s; remove %s to reset it", s->name, reason,
                        path);
        return fail(rc, why, whylen, "registry %s %s%s", s->name, reason,
                    rc == -EPERM ? "; the shim refuses it too" : "");
    }
    void *p = mmap(NULL, l.size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = fail(-errno, why, whylen, "cannot map %s: %s", s->name, strerror(errno));
        close(fd);
        return rc;
    }
    /* A registry view over the read-only mapping, laid out as registry_layout.c does. */
    struct registry r;
    memset(&r, 0, sizeof r);
    r.fd = fd;
    r.base = p;
    r.size = l.size;
    registry_set_views(&r, &caps, &l);

    s->abi = r.hdr->abi;
    s->size = l.size;
    s->max_holders = caps.max_holders;
    s->max_blocks = r.limit_blocks; /* the bound, not the layout's capacity */
    s->max_leases = r.max_leases;
    s->repairs = r.hdr->repairs;
    s->swept = r.hdr->swept;
    s->creator_pid = r.hdr->creator_pid;
#ifdef __GLIBC__
    s->lock_tid = __atomic_load_n(&r.hdr->lock.mutex.__data.__lock, __ATOMIC_RELAXED) & 0x3fffffff;
#endif
    if (s->lock_tid) {
        s->lock_pid = liveness_tgid(s->lock_tid);
        uint64_t since = __atomic_load_n(&r.hdr->lock_since_ns, __ATOMIC_RELAXED);
        uint64_t now = clock_ns(CLOCK_MONOTONIC);
        s->lock_held_ns = since && since < now ? now - since : 0;
    }
    s->created_ns = r.hdr->created_ns;
    s->taken_ns = clock_ns(CLOCK_MONOTONIC);
    s->taken_real_ns = clock_ns(CLOCK_REALTIME);
    rc = copy_records(&r, s);
    munmap(p, l.size);
    close(fd);
    if (rc) {
        inspect_free(s);
        return fail(rc, why, whylen, "out of memory reading the registry");
    }
    return 0;
}
