/* leak: see leak.h. The gather/print split keeps symbolization and string
 * work out of the registry lock; items are plain copies. */
#include "leak.h"
#include "callsite.h"
#include "collector.h"
#include "local.h"
#include "log.h"
#include "options.h"
#include "registry.h"
#include "units.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

enum { ITEM_OPEN, ITEM_LIMBO, ITEM_UNOPENED, ITEM_EXPIRED };

/* Why an export nobody opened may still have been opened: a consumer that
 * lost the preload maps it unseen (docs/limitations.md, "Consumers started
 * without the shim"). */
#define LEAK_UNSEEN_CAUSE                                                                          \
    "or by a consumer started without it: sudo, env -i or a setuid helper drop LD_PRELOAD"

struct leak_item {
    int kind;
    uint64_t base, bytes, since_ns; /* since: first open or export, or limbo entry */
    uint64_t dead_ns;               /* ITEM_OPEN: when the exporter was found dead, 0 unknown */
    uint32_t opens, closes, callsite, pending, expired, handoffs;
    int32_t peer_pid; /* ITEM_OPEN: the exporter */
    bool peer_dead;
    bool never_freed; /* ITEM_LIMBO: not freed by the program, still mapped by others at exit */
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
    /* A lease begun for this open (count 1) was stamped a moment ago: its
     * time spares a clock read. A second context's open on a lease held
     * already reads the clock. */
    const struct reg_lease *l = reg_lease_at((struct registry *)r, m->lease);
    uint64_t stamped = l && l->count == 1 ? __atomic_load_n(&l->open_ns, __ATOMIC_RELAXED) : 0;
    m->open_ns = stamped ? stamped : reg_now_ns();
    m->size = b->size;
    m->opens = 1;
    m->callsite = cs;
    m->exporter_pid = b->exporter_pid;
    /* The name from the exporter's holder record (the open proved it
     * current a moment ago, and it is read-mostly), not the block's copy:
     * that sits on a line the exporter rewrites every export. */
    const struct reg_holder *x = reg_holder_at((struct registry *)r, b->exporter);
    const char *comm = x ? x->comm : b->exporter_comm;
    memcpy(m->exporter_comm, comm, sizeof m->exporter_comm);
    m->exporter_comm[sizeof m->exporter_comm - 1] = 0;
}

void leak_note_reopen(struct local_map *m)
{
    m->opens++;
}

/* Exports whose hand-offs expired before anyone ever opened them (by
 * IPCSHIM_HANDOFF_TIMEOUT, under pressure, or dropped at exit): counted, and
 * the first EXPIRED_KEPT kept with their call sites for the full report.
 * Written under the local lock (every caller holds it). */
enum { EXPIRED_KEPT = 64 };
static struct {
    uint64_t base, bytes, export_ns;
    uint32_t callsite, handoffs;
} expired_kept[EXPIRED_KEPT];
static uint64_t unopened_expired;

void leak_note_expired(const struct reg_block *b, const struct local_export *e)
{
    if (b->claimed || b->expired) return; /* opened once, or counted already */
    uint64_t n = __atomic_fetch_add(&unopened_expired, 1, __ATOMIC_RELAXED);
    if (n < EXPIRED_KEPT && e) {
        expired_kept[n].base = e->base;
        expired_kept[n].bytes = e->size;
        expired_kept[n].export_ns = e->export_ns;
        expired_kept[n].callsite = e->callsite;
        expired_kept[n].handoffs = e->handoffs;
    }
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

/* "pid 77 (consumer)" for every holder of block bi (its held bits). */
static void list_holders(struct registry *r, uint32_t bi, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (uint32_t hi = reg_block_next_holder(r, bi, 0); hi != REG_NONE && used + 40 < len;
         hi = reg_block_next_holder(r, bi, hi + 1)) {
        const struct reg_holder *h = reg_holder_at(r, hi);
        char comm[17];
        memcpy(comm, h->comm, 16), comm[16] = 0;
        int n = snprintf(buf + used, len - used, "%spid %d (%s%s)", used ? ", " : "", (int)h->pid,
                         comm[0] ? comm : "?", reg_holder_alive(r, hi) ? "" : ", dead");
        if (n > 0) used += (size_t)n;
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
        if (m->pending || !m->count || m->ptr >= IPC_LEDGER_ADDRESS) continue;
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
            it->dead_ns = m->dead_ns ? m->dead_ns : same ? b->orphaned_ns : 0;
        } else {
            const struct reg_holder *ex = reg_holder_at(r, b->exporter);
            it->peer_dead =
                !ex || ex->nonce != b->exporter_nonce || !reg_holder_alive(r, b->exporter);
            if (it->peer_dead) it->dead_ns = m->dead_ns;
        }
    }
    struct local_export *e, *et;
    HASH_ITER(hh, local_exports(), e, et)
    {
        const struct reg_block *b = reg_block_at(r, e->block);
        if (!b || b->generation != e->generation || b->exporter != self) continue;
        uint32_t pending = __atomic_load_n(&b->pending, __ATOMIC_RELAXED);
        bool held = reg_block_held(r, e->block);
        bool unopened = !b->claimed && !held && (pending || b->expired);
        if ((b->state == BLOCK_LIVE || b->state == BLOCK_LIMBO) && unopened) {
            if (!add_item(lr, ITEM_UNOPENED)) break;
        } else if (b->state == BLOCK_LIMBO || (b->state == BLOCK_LIVE && held)) {
            struct leak_item *it = add_item(lr, ITEM_LIMBO);
            if (!it) break;
            it->never_freed = b->state == BLOCK_LIVE;
            it->since_ns = it->never_freed ? e->export_ns : b->limbo_since_ns;
            list_holders(r, e->block, it->holders, sizeof it->holders);
        } else {
            continue;
        }
        struct leak_item *it = &lr->items[lr->n - 1];
        if (it->kind == ITEM_UNOPENED) it->since_ns = e->export_ns;
        it->base = b->base; /* where it was exported (a moved record: ipc_export_move) */
        it->bytes = e->size;
        it->pending = pending;
        it->expired = b->expired;
        it->handoffs = e->handoffs;
        it->callsite = e->callsite;
        it->opens = b->claimed;
    }
    return lr;
}

/* ---- the watch ---- */

static int watch_started, watch_stopping, watch_running;
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cv; /* CLOCK_MONOTONIC, set up in leak_watch_start */
static char watch_lines[3][768];
static unsigned watch_nlines;

/* Growth tracking of one quantity: consecutive increases. */
struct growth {
    uint64_t last, streak, warned_at;
};
static struct growth limbo_growth, open_growth;
static bool dead_warned;

static void *watch_loop(void *arg)
{
    leak_check_fn *check = arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&watch_mu);
    while (!__atomic_load_n(&watch_stopping, __ATOMIC_ACQUIRE)) {
        next.tv_sec += 1;
        while (!__atomic_load_n(&watch_stopping, __ATOMIC_ACQUIRE) &&
               pthread_cond_timedwait(&watch_cv, &watch_mu, &next) == 0) {
        }
        if (__atomic_load_n(&watch_stopping, __ATOMIC_ACQUIRE)) break;
        pthread_mutex_unlock(&watch_mu);
        check(); /* takes the shim's locks: never under watch_mu */
        pthread_mutex_lock(&watch_mu);
    }
    pthread_mutex_unlock(&watch_mu);
    __atomic_store_n(&watch_running, 0, __ATOMIC_RELEASE);
    return NULL;
}

void leak_watch_start(leak_check_fn *check)
{
    if (__atomic_load_n(&watch_started, __ATOMIC_RELAXED)) return; /* every open and export */
    const struct options *o = options_get();
    if (!o->dead_hold_warn && !o->growth_checks) return;
    if (__atomic_exchange_n(&watch_started, 1, __ATOMIC_ACQ_REL)) return;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&watch_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_t attr;
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all); /* the host's signal handlers never run on this thread */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    __atomic_store_n(&watch_running, 1, __ATOMIC_RELEASE);
    int rc = pthread_create(&t, &attr, watch_loop, (void *)check);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        __atomic_store_n(&watch_running, 0, __ATOMIC_RELEASE);
        LOG_ONCE(LOG_INFO, "cannot start the leak watch thread; leaks are reported at exit only");
    }
}

void leak_watch_stop(void)
{
    __atomic_store_n(&watch_stopping, 1, __ATOMIC_RELEASE);
    if (!__atomic_load_n(&watch_running, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&watch_mu);
    pthread_cond_broadcast(&watch_cv);
    pthread_mutex_unlock(&watch_mu);
    thread_wait_stopped(&watch_running, 200);
}

void leak_after_fork(void)
{
    watch_started = watch_stopping = watch_running = 0;
    pthread_mutex_init(&watch_mu, NULL); /* the thread is not in this process */
    watch_nlines = 0;
    memset(&limbo_growth, 0, sizeof limbo_growth);
    memset(&open_growth, 0, sizeof open_growth);
    dead_warned = false;
    unopened_expired = 0;
}

static const char *bytes_str(uint64_t n, char *buf, size_t len);
static const char *age_str(uint64_t ns, char *buf, size_t len);

/* True when value grew at `checks` consecutive checks (and, after a warning,
 * as many more again). */
static bool grew(struct growth *g, uint64_t value, uint64_t checks)
{
    g->streak = value > g->last ? g->streak + 1 : 0;
    if (!g->streak) g->warned_at = 0;
    g->last = value;
    if (!checks || g->streak < checks || (g->warned_at && g->streak < g->warned_at + checks))
        return false;
    g->warned_at = g->streak;
    return true;
}

/* Appends "pid N (comm)" of holder idx to buf unless already there. */
static void name_holder(struct registry *r, uint32_t idx, char *buf, size_t len)
{
    const struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    char tag[48], comm[17];
    memcpy(comm, h->comm, 16), comm[16] = 0;
    snprintf(tag, sizeof tag, "pid %d (%s)", (int)h->pid, comm[0] ? comm : "?");
    size_t used = strlen(buf);
    if (strstr(buf, tag) || used + strlen(tag) + 3 >= len) return;
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", tag);
}

/* Is the exporter of this mapping's block dead (cheap test: its lock byte)? */
static bool exporter_dead(struct registry *r, const struct local_map *m,
                          const struct reg_block **out)
{
    const struct reg_block *blk = reg_block_at(r, m->block);
    *out = blk && blk->generation == m->generation && blk->state != BLOCK_FREE ? blk : NULL;
    if (!*out || blk->state == BLOCK_ORPHANED) return true;
    const struct reg_holder *ex = reg_holder_at(r, blk->exporter);
    return !ex || ex->nonce != blk->exporter_nonce || !reg_holder_alive_quick(r, blk->exporter);
}

void leak_check_locked(struct registry *r, uint32_t self)
{
    const struct options *o = options_get();
    uint64_t now = reg_now_ns(), threshold = o->dead_hold_warn * 1000000ull;
    char b[32], a[32], who[256] = "";
    /* Imports: dead exporters, and how many opens lack a close. */
    uint64_t open_maps = 0, dead_bytes = 0, oldest = 0;
    struct local_map *m, *mt;
    HASH_ITER(hh, local_maps(), m, mt)
    {
        if (m->pending || !m->count || m->ptr >= IPC_LEDGER_ADDRESS) continue;
        open_maps += m->count;
        const struct reg_block *blk;
        if (!exporter_dead(r, m, &blk)) continue;
        if (!m->dead_ns) m->dead_ns = blk && blk->orphaned_ns ? blk->orphaned_ns : now;
        if (!threshold || now - m->dead_ns < threshold) continue;
        dead_bytes += m->size;
        if (!oldest || m->dead_ns < oldest) oldest = m->dead_ns;
        char tag[48];
        snprintf(tag, sizeof tag, "pid %d (%s)", (int)m->exporter_pid,
                 m->exporter_comm[0] ? m->exporter_comm : "?");
        size_t used = strlen(who);
        if (!strstr(who, tag) && used + strlen(tag) + 3 < sizeof who)
            snprintf(who + used, sizeof who - used, "%s%s", used ? ", " : "", tag);
    }
    if (dead_bytes && !dead_warned && watch_nlines < 3) {
        dead_warned = true;
        snprintf(watch_lines[watch_nlines++], sizeof watch_lines[0],
                 "leak: this process has held %s exported by %s, dead for %s "
                 "(IPCSHIM_DEAD_HOLD_WARN): the memory stays pinned until it closes them "
                 "(cudaIpcCloseMemHandle; a pool import: its free) or exits",
                 bytes_str(dead_bytes, b, sizeof b), who, age_str(now - oldest, a, sizeof a));
    }
    if (grew(&open_growth, open_maps, o->growth_checks) && watch_nlines < 3) {
        who[0] = 0;
        HASH_ITER(hh, local_maps(), m, mt)
        {
            const struct reg_block *blk = reg_block_at(r, m->block);
            if (!m->pending && m->count && blk && blk->generation == m->generation)
                name_holder(r, blk->exporter, who, sizeof who);
        }
        snprintf(watch_lines[watch_nlines++], sizeof watch_lines[0],
                 "leak in progress? this process's open mappings grew at %llu checks in a row "
                 "(now %llu opens without a close, of blocks exported by %s); "
                 "IPCSHIM_LEAK_REPORT=full at exit says where they were opened",
                 (unsigned long long)open_growth.streak, (unsigned long long)open_maps,
                 who[0] ? who : "?");
    }
    /* Exports: limbo that keeps growing, and who holds it. */
    uint64_t limbo = local_limbo_count();
    if (grew(&limbo_growth, limbo, o->growth_checks) && watch_nlines < 3) {
        who[0] = 0;
        struct local_export *e;
        DL_FOREACH(local_limbo_head(), e)
        {
            const struct reg_block *blk = reg_block_at(r, e->block);
            if (!blk || blk->generation != e->generation || blk->exporter != self) continue;
            for (uint32_t h = reg_block_next_holder(r, e->block, 0); h != REG_NONE;
                 h = reg_block_next_holder(r, e->block, h + 1))
                name_holder(r, h, who, sizeof who);
        }
        snprintf(watch_lines[watch_nlines++], sizeof watch_lines[0],
                 "leak in progress? this process's limbo grew at %llu checks in a row (now %llu "
                 "blocks, %s) held by %s",
                 (unsigned long long)limbo_growth.streak, (unsigned long long)limbo,
                 bytes_str(local_limbo_bytes(), b, sizeof b),
                 who[0] ? who : "nobody (unclaimed hand-offs)");
    }
}

void leak_check_flush(void)
{
    for (unsigned i = 0; i < watch_nlines; i++)
        log_msg(LOG_WARN, "%s", watch_lines[i]);
    watch_nlines = 0;
}

/* Sizes and ages in the report's words (core/units.c). */
static const char *bytes_str(uint64_t n, char *buf, size_t len)
{
    return units_format_bytes(n, UNITS_SPACED, buf, len);
}

static const char *age_str(uint64_t ns, char *buf, size_t len)
{
    return units_format_age_ms(ns / 1000000ull, buf, len);
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
        if (it->never_freed) {
            log_msg(LOG_WARN,
                    "leak:   exits without freeing %s at 0x%llx, exported %s ago and still mapped "
                    "by %s%s "
                    "(the driver frees it under them); exported at %s",
                    b, (unsigned long long)it->base, age_str(age, a, sizeof a),
                    it->holders[0] ? it->holders : "nobody", what, cs);
            break;
        }
        log_msg(LOG_WARN,
                "leak:   left %s at 0x%llx in limbo for %s, still held by %s%s; exported at %s", b,
                (unsigned long long)it->base, age_str(age, a, sizeof a),
                it->holders[0] ? it->holders : "nobody", what, cs);
        break;
    case ITEM_EXPIRED:
        snprintf(what, sizeof what, "%u times", it->handoffs);
        log_msg(LOG_WARN,
                "leak:   exported %s at 0x%llx %s, first %s ago, opened by no process under the "
                "shim (%s): its hand-off expired and the block was freed; exported at %s",
                b, (unsigned long long)it->base, times(it->handoffs) ? times(it->handoffs) : what,
                age_str(age, a, sizeof a), LEAK_UNSEEN_CAUSE, cs);
        break;
    default:
        snprintf(what, sizeof what, "%u times", it->handoffs);
        log_msg(LOG_WARN,
                "leak:   exported %s at 0x%llx %s, first %s ago, opened by no process under "
                "the shim (%u hand-off%s expired, %u unclaimed; %s); exported at %s",
                b, (unsigned long long)it->base, times(it->handoffs) ? times(it->handoffs) : what,
                age_str(age, a, sizeof a), it->expired, it->expired == 1 ? "" : "s", it->pending,
                LEAK_UNSEEN_CAUSE, cs);
        break;
    }
}

void leak_print(struct leak_report *lr)
{
    uint64_t expired_during_run = __atomic_load_n(&unopened_expired, __ATOMIC_RELAXED);
    if (!lr) return;
    for (uint64_t i = 0; i < expired_during_run && i < EXPIRED_KEPT; i++) {
        struct leak_item *it = add_item(lr, ITEM_EXPIRED);
        if (!it) break;
        it->base = expired_kept[i].base;
        it->bytes = expired_kept[i].bytes;
        it->since_ns = expired_kept[i].export_ns;
        it->callsite = expired_kept[i].callsite;
        it->handoffs = expired_kept[i].handoffs;
    }
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
        } else if (it->kind == ITEM_UNOPENED) {
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
        ADD("%s%u block%s left in limbo or never freed, still held by others (%s)",
            used ? "; " : "", limbo, limbo == 1 ? "" : "s", bytes_str(limbo_b, b, sizeof b));
    if (unopened)
        ADD("%s%u export%s no process under the shim opened (%s)", used ? "; " : "", unopened,
            unopened == 1 ? "" : "s", bytes_str(unopened_b, b, sizeof b));
    if (expired_during_run)
        ADD("%s%llu export%s no process under the shim opened, hand-off%s expired "
            "(IPCSHIM_HANDOFF_TIMEOUT, or at exit)",
            used ? "; " : "", (unsigned long long)expired_during_run,
            expired_during_run == 1 ? "" : "s", expired_during_run == 1 ? "" : "s");
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
