/* leak: see leak.h. The gather/print split keeps symbolization and string
 * work out of the registry lock; items are plain copies. */
#include "leak.h"
#include "callsite.h"
#include "local.h"
#include "log.h"
#include "options.h"
#include "registry.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

enum { ITEM_OPEN, ITEM_LIMBO, ITEM_UNOPENED };

struct leak_item {
    int kind;
    uint64_t base, bytes, since_ns; /* since: first open or export, or limbo entry */
    uint64_t dead_ns;               /* ITEM_OPEN: when the exporter was found dead, 0 unknown */
    uint32_t opens, closes, callsite, pending, expired, handoffs;
    int32_t peer_pid; /* ITEM_OPEN: the exporter */
    bool peer_dead;
    char peer_comm[16];
    char holders[192]; /* ITEM_LIMBO: "pid 77 (consumer), ..." */
};

struct leak_report {
    uint64_t now;
    size_t n, cap;
    struct leak_item *items;
};

void leak_init(void)
{
    callsite_init((unsigned)options_get()->callsite_depth);
}

void leak_note_export(struct local_export *e, uint64_t now, uint32_t cs)
{
    e->export_ns = now;
    e->handoffs = 1;
    e->callsite = cs;
}

void leak_note_reexport(struct local_export *e)
{
    e->handoffs++;
}

void leak_note_open(struct local_map *m, const struct registry *r, const struct reg_block *b,
                    uint32_t cs)
{
    (void)r;
    m->open_ns = reg_now_ns();
    m->size = b->size;
    m->opens = 1;
    m->callsite = cs;
    m->exporter_pid = b->exporter_pid;
    memcpy(m->exporter_comm, b->exporter_comm, sizeof m->exporter_comm);
    m->exporter_comm[sizeof m->exporter_comm - 1] = 0;
}

void leak_note_reopen(struct local_map *m)
{
    m->opens++;
}

static struct leak_item *add_item(struct leak_report *lr, int kind)
{
    if (lr->n == lr->cap) {
        size_t cap = lr->cap ? lr->cap * 2 : 16;
        struct leak_item *p = realloc(lr->items, cap * sizeof *p);
        if (!p) return NULL;
        lr->items = p, lr->cap = cap;
    }
    struct leak_item *it = &lr->items[lr->n++];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    return it;
}

/* "pid 77 (consumer)" for every holder of a lease on block bi. */
static void list_holders(struct registry *r, const struct reg_block *b, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    uint32_t li = b->lease_head;
    for (uint32_t steps = 0; li != REG_NONE && steps < r->max_leases && used + 40 < len; steps++) {
        const struct reg_lease *l = reg_lease_at(r, li);
        if (!l) break;
        const struct reg_holder *h = reg_holder_at(r, l->holder);
        if (h) {
            char comm[17];
            memcpy(comm, h->comm, 16), comm[16] = 0;
            int w =
                snprintf(buf + used, len - used, "%spid %d (%s%s)", used ? ", " : "", (int)h->pid,
                         comm[0] ? comm : "?", reg_holder_alive(r, l->holder) ? "" : ", dead");
            if (w > 0) used += (size_t)w;
        }
        li = l->next;
    }
}

struct leak_report *leak_gather(struct registry *r, uint32_t self)
{
    if (options_get()->leak_report == LEAK_REPORT_OFF) return NULL;
    struct leak_report *lr = calloc(1, sizeof *lr);
    if (!lr) return NULL;
    lr->now = reg_now_ns();
    struct local_map *m, *mt;
    HASH_ITER(hh, local_maps(), m, mt)
    {
        if (m->pending || !m->count) continue;
        struct leak_item *it = add_item(lr, ITEM_OPEN);
        if (!it) break;
        it->base = m->ptr;
        it->bytes = m->size;
        it->since_ns = m->open_ns;
        it->opens = m->opens;
        it->closes = m->opens > m->count ? m->opens - m->count : 0;
        it->callsite = m->callsite;
        it->peer_pid = m->exporter_pid;
        memcpy(it->peer_comm, m->exporter_comm, sizeof it->peer_comm);
        const struct reg_block *b = reg_block_at(r, m->block);
        bool same = b && b->generation == m->generation && b->state != BLOCK_FREE;
        if (!same || b->state == BLOCK_ORPHANED) {
            it->peer_dead = true;
            it->dead_ns = same ? b->orphaned_ns : 0;
        } else {
            const struct reg_holder *ex = reg_holder_at(r, b->exporter);
            it->peer_dead =
                !ex || ex->nonce != b->exporter_nonce || !reg_holder_alive(r, b->exporter);
        }
    }
    struct local_export *e, *et;
    HASH_ITER(hh, local_exports(), e, et)
    {
        const struct reg_block *b = reg_block_at(r, e->block);
        if (!b || b->generation != e->generation || b->exporter != self) continue;
        uint32_t pending = __atomic_load_n(&b->pending, __ATOMIC_RELAXED);
        bool unopened = !b->claimed && b->lease_head == REG_NONE && (pending || b->expired);
        if ((b->state == BLOCK_LIVE || b->state == BLOCK_LIMBO) && unopened) {
            if (!add_item(lr, ITEM_UNOPENED)) break;
        } else if (b->state == BLOCK_LIMBO) {
            struct leak_item *it = add_item(lr, ITEM_LIMBO);
            if (!it) break;
            it->since_ns = b->limbo_since_ns;
            list_holders(r, b, it->holders, sizeof it->holders);
        } else {
            continue;
        }
        struct leak_item *it = &lr->items[lr->n - 1];
        if (it->kind == ITEM_UNOPENED) it->since_ns = e->export_ns;
        it->base = e->base;
        it->bytes = e->size;
        it->pending = pending;
        it->expired = b->expired;
        it->handoffs = e->handoffs;
        it->callsite = e->callsite;
        it->opens = b->claimed;
    }
    return lr;
}

static const char *bytes_str(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
        return buf;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

static const char *age_str(uint64_t ns, char *buf, size_t len)
{
    uint64_t ms = ns / 1000000ull;
    if (ms < 1000)
        snprintf(buf, len, "%llums", (unsigned long long)ms);
    else if (ms < 60000)
        snprintf(buf, len, "%.1fs", ms / 1e3);
    else if (ms < 3600000)
        snprintf(buf, len, "%llum%02llus", (unsigned long long)(ms / 60000),
                 (unsigned long long)(ms / 1000 % 60));
    else
        snprintf(buf, len, "%lluh%02llum", (unsigned long long)(ms / 3600000),
                 (unsigned long long)(ms / 60000 % 60));
    return buf;
}

static const char *times(uint32_t n)
{
    return n == 1 ? "once" : n == 2 ? "twice" : NULL;
}

static void print_item(const struct leak_report *lr, const struct leak_item *it)
{
    char b[32], a[32], d[32], cs[1024], what[160];
    uint64_t age = it->since_ns && it->since_ns < lr->now ? lr->now - it->since_ns : 0;
    callsite_format(it->callsite, cs, sizeof cs);
    bytes_str(it->bytes, b, sizeof b);
    switch (it->kind) {
    case ITEM_OPEN: {
        char dead[64] = "alive";
        if (it->peer_dead && it->dead_ns && it->dead_ns < lr->now &&
            lr->now - it->dead_ns >= 1000000000ull)
            snprintf(dead, sizeof dead, "dead for %s", age_str(lr->now - it->dead_ns, d, sizeof d));
        else if (it->peer_dead)
            snprintf(dead, sizeof dead, "dead");
        char oc[64];
        const char *o = times(it->opens), *c = times(it->closes);
        char on[16], cn[16];
        snprintf(on, sizeof on, "%u times", it->opens);
        snprintf(cn, sizeof cn, "%u times", it->closes);
        if (it->closes)
            snprintf(oc, sizeof oc, "opened %s, closed %s", o ? o : on, c ? c : cn);
        else
            snprintf(oc, sizeof oc, "opened %s, never closed", o ? o : on);
        log_msg(LOG_WARN,
                "leak:   holds %s at 0x%llx exported by pid %d (%s), %s; held for %s, %s; "
                "opened at %s",
                b, (unsigned long long)it->base, (int)it->peer_pid,
                it->peer_comm[0] ? it->peer_comm : "?", dead, age_str(age, a, sizeof a), oc, cs);
        break;
    }
    case ITEM_LIMBO:
        snprintf(what, sizeof what, "%s", it->pending ? " and an unclaimed hand-off" : "");
        log_msg(LOG_WARN,
                "leak:   left %s at 0x%llx in limbo for %s, still held by %s%s; exported at %s", b,
                (unsigned long long)it->base, age_str(age, a, sizeof a),
                it->holders[0] ? it->holders : "nobody", what, cs);
        break;
    default:
        snprintf(what, sizeof what, "%u times", it->handoffs);
        log_msg(LOG_WARN,
                "leak:   exported %s at 0x%llx %s, first %s ago, never opened (%u hand-off%s "
                "expired, %u unclaimed); exported at %s",
                b, (unsigned long long)it->base, times(it->handoffs) ? times(it->handoffs) : what,
                age_str(age, a, sizeof a), it->expired, it->expired == 1 ? "" : "s", it->pending,
                cs);
        break;
    }
}

void leak_print(struct leak_report *lr, uint64_t expired_during_run)
{
    if (!lr) return;
    if (!lr->n && !expired_during_run) {
        free(lr->items);
        free(lr);
        return;
    }
    uint32_t opens = 0, dead = 0, limbo = 0, unopened = 0;
    uint64_t open_b = 0, dead_b = 0, limbo_b = 0, unopened_b = 0;
    for (size_t i = 0; i < lr->n; i++) {
        const struct leak_item *it = &lr->items[i];
        if (it->kind == ITEM_OPEN) {
            opens++, open_b += it->bytes;
            if (it->peer_dead) dead++, dead_b += it->bytes;
        } else if (it->kind == ITEM_LIMBO) {
            limbo++, limbo_b += it->bytes;
        } else {
            unopened++, unopened_b += it->bytes;
        }
    }
    char comm[17] = "";
    if (prctl(PR_GET_NAME, comm) != 0) comm[0] = 0;
    char line[768], b[32];
    size_t used = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(line + used, sizeof line - used, __VA_ARGS__);                           \
        if (w_ > 0 && (size_t)w_ < sizeof line - used) used += (size_t)w_;                         \
    } while (0)
    if (opens) {
        ADD("%s%u mapping%s never closed (%s", used ? "; " : "", opens, opens == 1 ? "" : "s",
            bytes_str(open_b, b, sizeof b));
        if (dead) ADD(", %s of it exported by dead processes", bytes_str(dead_b, b, sizeof b));
        ADD(")");
    }
    if (limbo)
        ADD("%s%u block%s left in limbo, still held by others (%s)", used ? "; " : "", limbo,
            limbo == 1 ? "" : "s", bytes_str(limbo_b, b, sizeof b));
    if (unopened)
        ADD("%s%u export%s nobody opened (%s)", used ? "; " : "", unopened,
            unopened == 1 ? "" : "s", bytes_str(unopened_b, b, sizeof b));
    if (expired_during_run)
        ADD("%s%llu hand-off%s expired unclaimed during the run (IPCSHIM_HANDOFF_TIMEOUT)",
            used ? "; " : "", (unsigned long long)expired_during_run,
            expired_during_run == 1 ? "" : "s");
#undef ADD
    bool full = options_get()->leak_report == LEAK_REPORT_FULL;
    log_msg(LOG_WARN, "leak: pid %d (%s) exits with %s%s", (int)getpid(), comm[0] ? comm : "?",
            line, full ? ":" : "; IPCSHIM_LEAK_REPORT=full lists each with its call site");
    if (full)
        for (size_t i = 0; i < lr->n; i++)
            print_item(lr, &lr->items[i]);
    free(lr->items);
    free(lr);
}
