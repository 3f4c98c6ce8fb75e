/* ipcshim-stat: show what a registry holds -- processes, exported blocks,
 * who has them open, what waits in limbo -- without touching it.
 *
 * It attaches read-only (core/inspect.c: O_RDONLY, PROT_READ, no lock), so
 * it never changes the registry and can run while programs use it; a
 * snapshot may be torn when records change while it is copied. The text
 * layout is for people; --json (docs/ipcshim-stat.md) is the stable one.
 *
 * Exit status: 0 shown, 1 no registry or it cannot be read, 2 usage. */
#include "inspect.h"
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define JSON_VERSION 1
#define LOCK_HELD_NOTE_NS 1000000000ull /* show the lock's holder when held this long */

static const char usage_text[] =
    "usage: ipcshim-stat [--domain D | --all] [--json | --leaks | --prometheus]\n"
    "                    [--stale SECONDS] [--watch SECONDS [--count N]]\n"
    "       ipcshim-stat --list\n"
    "       ipcshim-stat --remove DOMAIN\n"
    "\n"
    "Show the ipcshim registry of one domain: the processes using it (pid,\n"
    "command, alive or dead), the exported blocks (exporter, device, size,\n"
    "state, importers and their open counts, age), and what waits in limbo,\n"
    "per exporter. Read-only: it never changes the registry.\n"
    "\n"
    "  -d, --domain D     the registry of domain D (default: $IPCSHIM_DOMAIN,\n"
    "                     else \"default\")\n"
    "  -j, --json         one JSON object per snapshot, on one line\n"
    "                     (format: docs/ipcshim-stat.md, man ipcshim-stat)\n"
    "  -w, --watch SECS   take a snapshot every SECS seconds until interrupted\n"
    "  -n, --count N      with --watch: stop after N snapshots\n"
    "  -a, --all          every domain of this user, one after the other\n"
    "  -L, --leaks        what each live process holds: mappings never closed,\n"
    "                     exports nobody opened, limbo (a live leak report)\n"
    "  -p, --prometheus   OpenMetrics text: per-process gauges and counters\n"
    "                     (for node_exporter's textfile collector)\n"
    "  -s, --stale SECS   a lease open longer than this is stale (default 300)\n"
    "  -r, --remove D     delete domain D's registry if no live process holds it\n"
    "  -l, --list         list the domains that have a registry for this user\n"
    "  -h, --help         show this help\n"
    "  -V, --version      show the version and the registry ABI it reads\n"
    "\n"
    "Exit status: 0 shown; 1 no registry, or it cannot be read; 2 bad usage.\n";

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig, stop = 1;
}

static double stale_s = 300; /* --stale */

/* ---- formatting helpers ----------------------------------------------- */

static const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        snprintf(buf, len, "%lluB", (unsigned long long)n);
        return buf;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, len, "%.1f%s", v, units[u]);
    return buf;
}

static uint64_t age_ms(const struct inspect_snapshot *s, uint64_t since_ns)
{
    return since_ns && since_ns < s->taken_ns ? (s->taken_ns - since_ns) / 1000000ull : 0;
}

static const char *fmt_age(uint64_t ms, char *buf, size_t len)
{
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

struct totals {
    uint32_t dead, live, limbo, orphaned, retired, opens, pool;
    uint64_t bytes, limbo_bytes, orphaned_bytes;
};

static struct totals count(const struct inspect_snapshot *s)
{
    struct totals t = {0};
    for (uint32_t i = 0; i < s->nholders; i++)
        t.dead += !s->holders[i].alive;
    for (uint32_t i = 0; i < s->nblocks; i++) {
        const struct inspect_block *b = &s->blocks[i];
        t.bytes += b->size;
        t.pool += b->pool;
        if (b->state == BLOCK_LIVE)
            t.live++;
        else if (b->state == BLOCK_LIMBO)
            t.limbo++, t.limbo_bytes += b->size;
        else if (b->state == BLOCK_ORPHANED)
            t.orphaned++, t.orphaned_bytes += b->size;
        else if (b->state == BLOCK_RETIRED)
            t.retired++;
    }
    for (uint32_t i = 0; i < s->nleases; i++)
        t.opens += s->leases[i].count;
    return t;
}

/* Leases of holder slot h open for longer than --stale. */
static uint32_t stale_leases(const struct inspect_snapshot *s, uint32_t slot)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->nleases; i++) {
        const struct inspect_lease *l = &s->leases[i];
        if (l->holder == slot && l->open_ns && age_ms(s, l->open_ns) > stale_s * 1e3) n++;
    }
    return n;
}

/* The command of holder h: /proc when alive, else what it recorded. */
static const char *holder_comm(const struct inspect_holder *h)
{
    if (h->alive && h->comm[0]) return h->comm;
    return h->reg_comm[0] ? h->reg_comm : "-";
}

/* The exporting holder of b, or NULL when that process is gone. */
static const struct inspect_holder *exporter_of(const struct inspect_snapshot *s,
                                                const struct inspect_block *b)
{
    return b->exporter_current ? inspect_holder_by_slot(s, b->exporter) : NULL;
}

/* ---- text ------------------------------------------------------------- */

static void print_text(const struct inspect_snapshot *s, const char *domain)
{
    char a[32], b2[32], c[32];
    struct totals t = count(s);
    time_t created = (time_t)(s->created_ns / 1000000000ull);
    struct tm tm;
    char when[64] = "?";
    if (localtime_r(&created, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);

    printf("registry %s (domain %s, ABI %u), created %s by pid %d, lock repairs %u\n", s->name,
           domain, s->abi, when, (int)s->creator_pid, s->repairs);
    printf(
        "holders %u of %u (%u dead), blocks %u of %u (%u live, %u limbo, %u orphaned, %u retired), "
        "leases %u of %u\n",
        s->nholders, s->max_holders, t.dead, s->nblocks, s->max_blocks, t.live, t.limbo, t.orphaned,
        t.retired, s->nleases, s->max_leases);
    if (s->lock_tid && s->lock_held_ns >= LOCK_HELD_NOTE_NS)
        printf("LOCK held for %s by pid %d (thread %d): a stopped or hung process? Others wait "
               "at most IPCSHIM_LOCK_WAIT, then go on untracked\n",
               fmt_age(s->lock_held_ns / 1000000ull, a, sizeof a), (int)s->lock_pid,
               (int)s->lock_tid);

    printf("\nHOLDERS\n");
    if (!s->nholders)
        printf("  none\n");
    else
        printf("  %-5s %-8s %-6s %-8s %-7s %-7s %-6s %-14s %s\n", "SLOT", "PID", "STATUS", "AGE",
               "EXPORTS", "IMPORTS", "OPENS", "LIMBO", "COMMAND");
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        char limbo[48] = "-";
        if (h->limbo_blocks)
            snprintf(limbo, sizeof limbo, "%u/%s", h->limbo_blocks,
                     fmt_bytes(h->limbo_bytes, a, sizeof a));
        printf("  %-5u %-8d %-6s %-8s %-7u %-7u %-6u %-14s %s\n", h->slot, (int)h->pid,
               h->alive ? "alive" : "dead", fmt_age(age_ms(s, h->attach_ns), c, sizeof c),
               h->exports, h->imports, h->opens, limbo, h->alive && h->comm[0] ? h->comm : "-");
    }

    printf("\nBLOCKS\n");
    if (!s->nblocks)
        printf("  none\n");
    else
        printf("  %-5s %-14s %-3s %-4s %-9s %-8s %-8s %-8s %-8s %s\n", "SLOT", "EXPORTER", "DEV",
               "KIND", "SIZE", "STATE", "HANDOFFS", "AGE", "IN-LIMBO", "IMPORTERS(OPENS)");
    for (uint32_t i = 0; i < s->nblocks; i++) {
        const struct inspect_block *b = &s->blocks[i];
        const struct inspect_holder *e = exporter_of(s, b);
        char exporter[32] = "gone";
        if (e) snprintf(exporter, sizeof exporter, "%d%s", (int)e->pid, e->alive ? "" : "(dead)");
        char importers[512] = "-";
        size_t len = 0;
        for (uint32_t k = 0; k < b->nleases && len < sizeof importers - 48; k++) {
            const struct inspect_lease *l = &s->leases[b->first_lease + k];
            const struct inspect_holder *h = inspect_holder_by_slot(s, l->holder);
            char extra[32] = "";
            if (h && !h->alive) snprintf(extra, sizeof extra, ",dead");
            if (l->intent != LEASE_OPEN)
                snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",%s",
                         inspect_lease_intent(l->intent));
            len += (size_t)snprintf(importers + len, sizeof importers - len, "%s%d(%u%s)",
                                    k ? " " : "", h ? (int)h->pid : -1, l->count, extra);
        }
        printf("  %-5u %-14s %-3d %-4s %-9s %-8s %-8u %-8s %-8s %s\n", b->slot, exporter,
               (int)b->device, b->pool ? "pool" : "ipc", fmt_bytes(b->size, a, sizeof a),
               inspect_block_state(b->state), b->pending,
               fmt_age(age_ms(s, b->last_export_ns), b2, sizeof b2),
               b->state == BLOCK_LIMBO ? fmt_age(age_ms(s, b->limbo_since_ns), c, sizeof c) : "-",
               importers);
    }

    if (s->nholders) {
        printf("\nBY PROCESS\n");
        printf("  %-8s %-6s %-10s %-10s %-10s %-11s %-6s %s\n", "PID", "STATUS", "EXPORTED",
               "IMPORTED", "IN-LIMBO", "DEAD-PINNED", "STALE", "COMMAND");
        for (uint32_t i = 0; i < s->nholders; i++) {
            const struct inspect_holder *h = &s->holders[i];
            char e[32], im[32], l[32], d[32];
            printf("  %-8d %-6s %-10s %-10s %-10s %-11s %-6u %s\n", (int)h->pid,
                   h->alive ? "alive" : "dead", fmt_bytes(h->exported_bytes, e, sizeof e),
                   fmt_bytes(h->imported_bytes, im, sizeof im),
                   fmt_bytes(h->limbo_bytes, l, sizeof l),
                   fmt_bytes(h->dead_pinned_bytes, d, sizeof d), stale_leases(s, h->slot),
                   holder_comm(h));
        }
    }

    if (t.limbo) {
        printf("\nLIMBO BY EXPORTER\n");
        printf("  %-8s %-6s %-14s %-8s %s\n", "PID", "BLOCKS", "BYTES", "OLDEST", "COMMAND");
        for (uint32_t i = 0; i < s->nholders; i++) {
            const struct inspect_holder *h = &s->holders[i];
            if (!h->limbo_blocks) continue;
            printf("  %-8d %-6u %-14llu %-8s %s\n", (int)h->pid, h->limbo_blocks,
                   (unsigned long long)h->limbo_bytes,
                   fmt_age(age_ms(s, h->oldest_limbo_ns), c, sizeof c),
                   h->alive && h->comm[0] ? h->comm : "-");
        }
        printf("  total: %u blocks, %s\n", t.limbo, fmt_bytes(t.limbo_bytes, a, sizeof a));
    }

    /* What a reader most likely wants explained. */
    bool noted = false;
#define NOTE(...) (void)(noted ? 0 : printf("\nNOTES\n"), noted = true, printf("  " __VA_ARGS__))
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        if (h->alive) continue;
        NOTE("pid %d is dead; its %u lease(s) and %u export(s) are released at the next sweep (an "
             "exporter's "
             "collector looks about once a second; any export, open or free also sweeps)\n",
             (int)h->pid, h->imports, h->exports);
    }
    if (t.orphaned)
        NOTE("%u orphaned block(s), %s: their exporter exited or died, so the driver has freed the "
             "memory; "
             "importers still mapping them read freed memory and should close them\n",
             t.orphaned, fmt_bytes(t.orphaned_bytes, a, sizeof a));
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        if (!h->alive || !h->dead_pinned_bytes) continue;
        char who[256] = "";
        size_t len = 0;
        for (uint32_t k = 0; k < s->nblocks && len < sizeof who - 48; k++) {
            const struct inspect_block *b = &s->blocks[k];
            bool mine = false;
            for (uint32_t j = 0; j < b->nleases; j++)
                mine |= s->leases[b->first_lease + j].holder == h->slot;
            if (!mine || !b->exporter_dead) continue;
            char tag[48];
            snprintf(tag, sizeof tag, "pid %d (%s)", (int)b->exporter_pid,
                     b->exporter_comm[0] ? b->exporter_comm : "?");
            if (strstr(who, tag)) continue;
            len += (size_t)snprintf(who + len, sizeof who - len, "%s%s", len ? ", " : "", tag);
        }
        char since[48] = "";
        if (h->oldest_dead_ns)
            snprintf(since, sizeof since, ", dead for %s",
                     fmt_age(age_ms(s, h->oldest_dead_ns), c, sizeof c));
        NOTE("pid %d (%s) holds %s exported by %s%s: they stay pinned until it closes them "
             "(cudaIpcCloseMemHandle; a pool import: its free) or exits; ipcshim-stat --leaks "
             "lists them\n",
             (int)h->pid, holder_comm(h), fmt_bytes(h->dead_pinned_bytes, a, sizeof a), who, since);
    }
    if (s->skipped)
        NOTE("%u record(s) changed while they were read and were left out; run again for a steady "
             "view\n",
             s->skipped);
#undef NOTE
}

/* ---- JSON ------------------------------------------------------------- */

static void json_str(const char *v)
{
    if (!v) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            printf("\\u%04x", *p); /* bytes as Latin-1: always valid JSON */
        else
            putchar(*p);
    }
    putchar('"');
}

static void json_holder_ref(const struct inspect_holder *h)
{
    if (!h) {
        fputs("null", stdout);
        return;
    }
    printf("{\"slot\":%u,\"pid\":%d,\"alive\":%s}", h->slot, (int)h->pid,
           h->alive ? "true" : "false");
}

static void print_json(const struct inspect_snapshot *s, const char *domain)
{
    struct totals t = count(s);
    printf("{\"format\":\"ipcshim-stat\",\"version\":%d,\"domain\":", JSON_VERSION);
    json_str(domain);
    printf(",\"registry\":");
    json_str(s->name);
    printf(",\"abi\":%u,\"time_unix_ms\":%llu,\"created_unix_ms\":%llu,\"creator_pid\":%d,"
           "\"repairs\":%u",
           s->abi, (unsigned long long)(s->taken_real_ns / 1000000ull),
           (unsigned long long)(s->created_ns / 1000000ull), (int)s->creator_pid, s->repairs);
    printf(",\"capacity\":{\"holders\":%u,\"blocks\":%u,\"leases\":%u}", s->max_holders,
           s->max_blocks, s->max_leases);

    printf(",\"holders\":[");
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        printf("%s{\"slot\":%u,\"pid\":%d,\"alive\":%s,\"command\":", i ? "," : "", h->slot,
               (int)h->pid, h->alive ? "true" : "false");
        json_str(h->alive && h->comm[0] ? h->comm : NULL);
        printf(
            ",\"attached_ms\":%llu,\"exports\":%u,\"imports\":%u,\"opens\":%u,\"limbo_blocks\":%u,"
            "\"limbo_bytes\":%llu",
            (unsigned long long)age_ms(s, h->attach_ns), h->exports, h->imports, h->opens,
            h->limbo_blocks, (unsigned long long)h->limbo_bytes);
        printf(",\"recorded_command\":");
        json_str(h->reg_comm[0] ? h->reg_comm : NULL);
        printf(",\"exported_bytes\":%llu,\"imported_bytes\":%llu,\"dead_pinned_blocks\":%u,"
               "\"dead_pinned_bytes\":%llu,\"stale_leases\":%u}",
               (unsigned long long)h->exported_bytes, (unsigned long long)h->imported_bytes,
               h->dead_pinned_blocks, (unsigned long long)h->dead_pinned_bytes,
               stale_leases(s, h->slot));
    }

    printf("],\"blocks\":[");
    for (uint32_t i = 0; i < s->nblocks; i++) {
        const struct inspect_block *b = &s->blocks[i];
        printf("%s{\"slot\":%u,\"generation\":%llu,\"state\":\"%s\",\"device\":%d,\"base\":\"0x%"
               "llx\",\"size\":%llu,"
               "\"exporter\":",
               i ? "," : "", b->slot, (unsigned long long)b->generation,
               inspect_block_state(b->state), (int)b->device, (unsigned long long)b->base,
               (unsigned long long)b->size);
        json_holder_ref(exporter_of(s, b));
        printf(",\"pending_handoffs\":%u,\"export_age_ms\":%llu,\"limbo_age_ms\":", b->pending,
               (unsigned long long)age_ms(s, b->last_export_ns));
        if (b->state == BLOCK_LIMBO)
            printf("%llu", (unsigned long long)age_ms(s, b->limbo_since_ns));
        else
            fputs("null", stdout);
        printf(",\"importers\":[");
        for (uint32_t k = 0; k < b->nleases; k++) {
            const struct inspect_lease *l = &s->leases[b->first_lease + k];
            const struct inspect_holder *h = inspect_holder_by_slot(s, l->holder);
            printf("%s{\"slot\":%u,\"pid\":%d,\"alive\":%s,\"opens\":%u,\"intent\":\"%s\","
                   "\"open_age_ms\":%llu}",
                   k ? "," : "", l->holder, h ? (int)h->pid : -1, h && h->alive ? "true" : "false",
                   l->count, inspect_lease_intent(l->intent),
                   (unsigned long long)age_ms(s, l->open_ns));
        }
        printf("]");
        printf(",\"exporter_pid\":%d,\"exporter_command\":", (int)b->exporter_pid);
        json_str(b->exporter_comm[0] ? b->exporter_comm : NULL);
        printf(",\"exporter_dead\":%s,\"claimed_handoffs\":%u,\"expired_handoffs\":%u,"
               "\"orphaned_age_ms\":",
               b->exporter_dead ? "true" : "false", b->claimed, b->expired);
        if (b->orphaned_ns)
            printf("%llu", (unsigned long long)age_ms(s, b->orphaned_ns));
        else
            fputs("null", stdout);
        printf(",\"kind\":\"%s\"}", b->pool ? "pool" : "ipc");
    }

    printf("],\"limbo\":[");
    bool first = true;
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        if (!h->limbo_blocks) continue;
        printf("%s{\"slot\":%u,\"pid\":%d,\"alive\":%s,\"command\":", first ? "" : ",", h->slot,
               (int)h->pid, h->alive ? "true" : "false");
        json_str(h->alive && h->comm[0] ? h->comm : NULL);
        printf(",\"blocks\":%u,\"bytes\":%llu,\"oldest_ms\":%llu}", h->limbo_blocks,
               (unsigned long long)h->limbo_bytes,
               (unsigned long long)age_ms(s, h->oldest_limbo_ns));
        first = false;
    }
    printf(
        "],\"totals\":{\"holders\":%u,\"dead_holders\":%u,\"blocks\":%u,\"bytes\":%llu,\"live_"
        "blocks\":%u,"
        "\"limbo_blocks\":%u,\"limbo_bytes\":%llu,\"orphaned_blocks\":%u,\"orphaned_bytes\":%llu,"
        "\"retired_blocks\":%u,\"leases\":%u,\"opens\":%u}",
        s->nholders, t.dead, s->nblocks, (unsigned long long)t.bytes, t.live, t.limbo,
        (unsigned long long)t.limbo_bytes, t.orphaned, (unsigned long long)t.orphaned_bytes,
        t.retired, s->nleases, t.opens);
    printf(",\"skipped\":%u,\"swap\":null}\n", s->skipped);
}

/* --json when there is no snapshot to show: an object all the same, so that
 * a reader always gets JSON, with "error" (the reason also printed on
 * stderr) as its last key. A domain without a registry holds nothing: its
 * lists are empty and its totals zero. A registry that cannot be read, or
 * --all with no registry at all (domain and registry null), has only the
 * keys known without reading one. */
static void print_json_error(const char *domain, const char *registry, const char *why, bool empty)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    printf("{\"format\":\"ipcshim-stat\",\"version\":%d,\"domain\":", JSON_VERSION);
    json_str(domain);
    printf(",\"registry\":");
    json_str(registry);
    printf(",\"time_unix_ms\":%llu",
           (unsigned long long)now.tv_sec * 1000ull + (unsigned long long)now.tv_nsec / 1000000ull);
    if (empty)
        printf(",\"holders\":[],\"blocks\":[],\"limbo\":[],\"totals\":{\"holders\":0,"
               "\"dead_holders\":0,\"blocks\":0,\"bytes\":0,\"live_blocks\":0,\"limbo_blocks\":0,"
               "\"limbo_bytes\":0,\"orphaned_blocks\":0,\"orphaned_bytes\":0,\"retired_blocks\":0,"
               "\"leases\":0,\"opens\":0},\"skipped\":0,\"swap\":null");
    printf(",\"error\":");
    json_str(why);
    printf("}\n");
}

/* ---- leaks (live, read-only) ------------------------------------------ */

/* What each live process holds, the exit report's items seen from outside.
 * Call sites live only in each process's memory: the exit report has them. */
static void print_leaks(const struct inspect_snapshot *s, const char *domain)
{
    char a[32], c[32], d[32];
    int shown = 0;
    printf("leaks in domain %s (live processes; read-only)\n", domain);
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        bool header = false;
#define HEADER()                                                                                   \
    (void)(header ? 0                                                                              \
                  : (printf("\npid %d (%s)%s\n", (int)h->pid, holder_comm(h),                      \
                            h->alive ? "" : ", dead: released at the next sweep"),                 \
                     header = true, shown++))
        for (uint32_t k = 0; k < s->nblocks; k++) {
            const struct inspect_block *b = &s->blocks[k];
            for (uint32_t j = 0; j < b->nleases; j++) {
                const struct inspect_lease *l = &s->leases[b->first_lease + j];
                if (l->holder != h->slot) continue;
                HEADER();
                char dead[64] = "alive";
                if (b->exporter_dead && b->orphaned_ns)
                    snprintf(dead, sizeof dead, "dead for %s",
                             fmt_age(age_ms(s, b->orphaned_ns), d, sizeof d));
                else if (b->exporter_dead)
                    snprintf(dead, sizeof dead, "dead");
                uint64_t held = age_ms(s, l->open_ns);
                printf("  holds %s exported by pid %d (%s), %s; open for %s, %u open(s)%s%s; "
                       "call site: only in the process's own exit report\n",
                       fmt_bytes(b->size, a, sizeof a), (int)b->exporter_pid,
                       b->exporter_comm[0] ? b->exporter_comm : "?", dead,
                       fmt_age(held, c, sizeof c), l->count, held > stale_s * 1e3 ? ", stale" : "",
                       l->intent != LEASE_OPEN ? ", in flight" : "");
            }
        }
        for (uint32_t k = 0; k < s->nblocks; k++) {
            const struct inspect_block *b = &s->blocks[k];
            if (!b->exporter_current || b->exporter != h->slot) continue;
            if (b->state != BLOCK_LIVE && b->state != BLOCK_LIMBO) continue;
            if (!b->claimed && !b->nleases && (b->pending || b->expired)) {
                HEADER();
                printf("  exported %s %s ago, opened by no process under the shim (%u hand-off(s) "
                       "unclaimed, %u "
                       "expired)%s; call site: only in the process's own exit report\n",
                       fmt_bytes(b->size, a, sizeof a),
                       fmt_age(age_ms(s, b->first_export_ns), c, sizeof c), b->pending, b->expired,
                       b->state == BLOCK_LIMBO ? ", freed (in limbo)" : "");
            } else if (b->state == BLOCK_LIMBO) {
                HEADER();
                char who[256] = "";
                size_t len = 0;
                for (uint32_t j = 0; j < b->nleases && len < sizeof who - 48; j++) {
                    const struct inspect_lease *l = &s->leases[b->first_lease + j];
                    const struct inspect_holder *o = inspect_holder_by_slot(s, l->holder);
                    len +=
                        (size_t)snprintf(who + len, sizeof who - len, "%spid %d (%s%s)",
                                         len ? ", " : "", o ? (int)o->pid : -1,
                                         o ? holder_comm(o) : "?", o && !o->alive ? ", dead" : "");
                }
                printf("  left %s in limbo for %s, still held by %s%s\n",
                       fmt_bytes(b->size, a, sizeof a),
                       fmt_age(age_ms(s, b->limbo_since_ns), c, sizeof c), len ? who : "nobody",
                       b->pending ? " and an unclaimed hand-off" : "");
            }
        }
#undef HEADER
    }
    if (!shown) printf("  nothing held: no open mapping, no unopened export, no limbo\n");
}

/* ---- OpenMetrics ------------------------------------------------------- */

/* A label value with OpenMetrics escapes (\\, \", \n). */
static void om_value(const char *v)
{
    putchar('"');
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            printf("\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", stdout);
        else
            putchar(*v);
    }
    putchar('"');
}

static void om_labels(const char *domain, const struct inspect_holder *h)
{
    fputs("{domain=", stdout);
    om_value(domain);
    if (h) {
        printf(",pid=\"%d\",command=", (int)h->pid);
        om_value(holder_comm(h));
    }
    putchar('}');
}

enum {
    G_ALIVE,
    G_EXPORTS,
    G_EXPORTED,
    G_IMPORTS,
    G_IMPORTED,
    G_OPENS,
    G_LIMBO_BLOCKS,
    G_LIMBO,
    G_DEAD_BLOCKS,
    G_DEAD,
    G_STALE,
    G_OLDEST_LIMBO,
    G_COUNT
};

static const struct {
    const char *name, *unit, *help;
} gauges[G_COUNT] = {
    {"ipcshim_process_alive", NULL,
     "1 while the process lives (0: dead, released at the next sweep)"},
    {"ipcshim_process_exports", NULL, "blocks the process exported that are in the registry"},
    {"ipcshim_process_exported_bytes", "bytes", "bytes of its exports, live or in limbo"},
    {"ipcshim_process_imports", NULL, "blocks the process has open (leases)"},
    {"ipcshim_process_imported_bytes", "bytes", "bytes of the blocks it has open"},
    {"ipcshim_process_opens", NULL, "opens without a close yet, over its leases"},
    {"ipcshim_process_limbo_blocks", NULL, "its freed blocks waiting for importers (limbo)"},
    {"ipcshim_process_limbo_bytes", "bytes", "bytes of its blocks in limbo"},
    {"ipcshim_process_dead_pinned_blocks", NULL, "blocks of dead exporters it still has open"},
    {"ipcshim_process_dead_pinned_bytes", "bytes",
     "bytes of dead exporters' blocks it still has open"},
    {"ipcshim_process_stale_leases", NULL, "its leases open longer than the --stale threshold"},
    {"ipcshim_process_oldest_limbo_seconds", "seconds", "age of its oldest block in limbo"},
};

static double gauge_value(const struct inspect_snapshot *s, const struct inspect_holder *h, int g)
{
    switch (g) {
    case G_ALIVE:
        return h->alive;
    case G_EXPORTS:
        return h->exports;
    case G_EXPORTED:
        return (double)h->exported_bytes;
    case G_IMPORTS:
        return h->imports;
    case G_IMPORTED:
        return (double)h->imported_bytes;
    case G_OPENS:
        return h->opens;
    case G_LIMBO_BLOCKS:
        return h->limbo_blocks;
    case G_LIMBO:
        return (double)h->limbo_bytes;
    case G_DEAD_BLOCKS:
        return h->dead_pinned_blocks;
    case G_DEAD:
        return (double)h->dead_pinned_bytes;
    case G_STALE:
        return stale_leases(s, h->slot);
    default:
        return h->oldest_limbo_ns ? age_ms(s, h->oldest_limbo_ns) / 1e3 : 0;
    }
}

/* Hand-offs over the process's blocks now in the registry: claimed or expired. */
static void handoffs_of(const struct inspect_snapshot *s, const struct inspect_holder *h,
                        uint64_t *claimed, uint64_t *expired)
{
    *claimed = *expired = 0;
    for (uint32_t k = 0; k < s->nblocks; k++) {
        const struct inspect_block *b = &s->blocks[k];
        if (!b->exporter_current || b->exporter != h->slot) continue;
        *claimed += b->claimed, *expired += b->expired;
    }
}

/* One exposition for all the snapshots (families are not repeated). */
static void print_prometheus(struct inspect_snapshot *snaps, const char *const *domains, int n)
{
    for (int g = 0; g < G_COUNT; g++) {
        printf("# TYPE %s gauge\n", gauges[g].name);
        if (gauges[g].unit) printf("# UNIT %s %s\n", gauges[g].name, gauges[g].unit);
        printf("# HELP %s %s\n", gauges[g].name, gauges[g].help);
        for (int d = 0; d < n; d++)
            for (uint32_t i = 0; i < snaps[d].nholders; i++) {
                fputs(gauges[g].name, stdout);
                om_labels(domains[d], &snaps[d].holders[i]);
                printf(" %.17g\n", gauge_value(&snaps[d], &snaps[d].holders[i], g));
            }
    }
    static const char *const counters[2][2] = {
        {"ipcshim_process_handoffs_claimed",
         "hand-offs of its blocks now in the registry claimed by a first open"},
        {"ipcshim_process_handoffs_expired",
         "hand-offs of its blocks now in the registry that expired unclaimed"},
    };
    for (int c = 0; c < 2; c++) {
        printf("# TYPE %s counter\n# HELP %s %s\n", counters[c][0], counters[c][0], counters[c][1]);
        for (int d = 0; d < n; d++)
            for (uint32_t i = 0; i < snaps[d].nholders; i++) {
                uint64_t v[2];
                handoffs_of(&snaps[d], &snaps[d].holders[i], &v[0], &v[1]);
                printf("%s_total", counters[c][0]);
                om_labels(domains[d], &snaps[d].holders[i]);
                printf(" %llu\n", (unsigned long long)v[c]);
            }
    }
    printf("# TYPE ipcshim_registry_lock_repairs counter\n"
           "# HELP ipcshim_registry_lock_repairs times the registry lock was recovered from a dead "
           "owner\n");
    for (int d = 0; d < n; d++) {
        fputs("ipcshim_registry_lock_repairs_total", stdout);
        om_labels(domains[d], NULL);
        printf(" %u\n", snaps[d].repairs);
    }
    printf("# TYPE ipcshim_registry_blocks gauge\n# HELP ipcshim_registry_blocks blocks in the "
           "registry by state\n");
    for (int d = 0; d < n; d++) {
        struct totals t = count(&snaps[d]);
        const char *st[] = {"live", "limbo", "orphaned", "retired"};
        uint32_t v[] = {t.live, t.limbo, t.orphaned, t.retired};
        for (int k = 0; k < 4; k++) {
            fputs("ipcshim_registry_blocks{domain=", stdout);
            om_value(domains[d]);
            printf(",state=\"%s\"} %u\n", st[k], v[k]);
        }
    }
    printf("# TYPE ipcshim_registry_blocks_by_kind gauge\n# HELP ipcshim_registry_blocks_by_kind "
           "blocks in the registry by how they were exported (ipc: legacy IPC, pool: a "
           "stream-ordered pool's pointer)\n");
    for (int d = 0; d < n; d++) {
        struct totals t = count(&snaps[d]);
        const char *kind[] = {"ipc", "pool"};
        uint32_t v[] = {snaps[d].nblocks - t.pool, t.pool};
        for (int k = 0; k < 2; k++) {
            fputs("ipcshim_registry_blocks_by_kind{domain=", stdout);
            om_value(domains[d]);
            printf(",kind=\"%s\"} %u\n", kind[k], v[k]);
        }
    }
    printf("# EOF\n");
}

/* ---- domains ---------------------------------------------------------- */

/* Prints the domains with a registry of this user, one per line (or, when
 * inline, comma-separated after a prefix). Returns how many. */
static int list_domains(FILE *out, bool inline_list)
{
    char prefix[64], dirs[2][200];
    int n = 0, plen = snprintf(prefix, sizeof prefix, "ipcshim-%u-", (unsigned)geteuid());
    /* Where this user's registries are created now, and /dev/shm (older
     * registries, or a directory that went away). */
    registry_dir(dirs[0], sizeof dirs[0]);
    snprintf(dirs[1], sizeof dirs[1], "/dev/shm");
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !strcmp(dirs[0], dirs[1])) break;
        DIR *d = opendir(dirs[k]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, prefix, (size_t)plen) || !e->d_name[plen]) continue;
            if (strchr(e->d_name + plen, '~')) continue; /* a fallback name: same domain */
            if (inline_list)
                fprintf(out, "%s%s", n ? ", " : "", e->d_name + plen);
            else
                fprintf(out, "%s\n", e->d_name + plen);
            n++;
        }
        if (d) closedir(d);
    }
    return n;
}

/* The domains with a registry of this user, into names (at most max).
 * Returns how many. */
static int collect_domains(char (*names)[REG_DOMAIN_MAX + 1], int max)
{
    char prefix[64];
    int n = 0, plen = snprintf(prefix, sizeof prefix, "ipcshim-%u-", (unsigned)geteuid());
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        if (strncmp(e->d_name, prefix, (size_t)plen) || !e->d_name[plen]) continue;
        if (strlen(e->d_name + plen) > REG_DOMAIN_MAX) continue;
        snprintf(names[n++], REG_DOMAIN_MAX + 1, "%s", e->d_name + plen);
    }
    if (d) closedir(d);
    return n;
}

enum { MODE_TEXT, MODE_JSON, MODE_LEAKS, MODE_PROM };

/* --remove: unlink the registry of domain when no live process holds it. */
static int remove_domain(const char *domain)
{
    struct inspect_snapshot s;
    char why[512], name[128];
    int rc = inspect_snapshot(domain, &s, why, sizeof why);
    if (rc == -ENOENT) {
        fprintf(stderr, "ipcshim-stat: %s\n", why);
        return 1;
    }
    if (rc == 0) {
        char pids[256] = "";
        size_t len = 0;
        for (uint32_t i = 0; i < s.nholders && len < sizeof pids - 24; i++)
            if (s.holders[i].alive)
                len +=
                    (size_t)snprintf(pids + len, sizeof pids - len, " %d", (int)s.holders[i].pid);
        inspect_free(&s);
        if (len) {
            fprintf(stderr,
                    "ipcshim-stat: domain %s is in use by live process(es)%s; not removed\n",
                    domain, pids);
            return 1;
        }
    }
    /* A registry we cannot read (another ABI, never initialised) holds no
     * process we can see: it is removed too, which is what the shim's own
     * message for those cases advises. */
    registry_name(domain, name, sizeof name);
    if (shm_unlink(name) != 0) {
        fprintf(stderr, "ipcshim-stat: cannot remove /dev/shm%s: %s\n", name, strerror(errno));
        return 1;
    }
    printf("removed /dev/shm%s%s%s\n", name, rc ? " (" : "", rc ? "it could not be read)" : "");
    return 0;
}

static int show(const char *domain, int mode)
{
    struct inspect_snapshot s;
    char why[512];
    int rc = inspect_snapshot(domain, &s, why, sizeof why);
    if (rc) {
        fprintf(stderr, "ipcshim-stat: %s\n", why);
        if (mode == MODE_JSON) {
            print_json_error(domain, s.name[0] ? s.name : NULL, why, rc == -ENOENT);
            fflush(stdout);
        }
        if (rc == -ENOENT) {
            fprintf(stderr, "ipcshim-stat: registries of this user: ");
            if (!list_domains(stderr, true)) fprintf(stderr, "none");
            fprintf(stderr,
                    " (choose one with --domain, or set IPCSHIM_DOMAIN as the programs do)\n");
        }
        return 1;
    }
    if (mode == MODE_JSON)
        print_json(&s, domain);
    else if (mode == MODE_LEAKS)
        print_leaks(&s, domain);
    else if (mode == MODE_PROM)
        print_prometheus(&s, &domain, 1);
    else
        print_text(&s, domain);
    fflush(stdout);
    inspect_free(&s);
    return 0;
}

/* --all: every domain of this user; one exposition for --prometheus. */
static int show_all(int mode)
{
    static char names[256][REG_DOMAIN_MAX + 1];
    int n = collect_domains(names, 256), status = 0;
    if (mode == MODE_PROM) {
        struct inspect_snapshot *snaps = calloc((size_t)n + 1, sizeof *snaps);
        const char **doms = calloc((size_t)n + 1, sizeof *doms);
        int k = 0;
        char why[512];
        for (int i = 0; snaps && doms && i < n; i++) {
            if (inspect_snapshot(names[i], &snaps[k], why, sizeof why) == 0)
                doms[k++] = names[i];
            else
                fprintf(stderr, "ipcshim-stat: %s\n", why);
        }
        if (snaps && doms) print_prometheus(snaps, doms, k);
        if (n && !k) status = 1;
        for (int i = 0; snaps && i < k; i++)
            inspect_free(&snaps[i]);
        free(snaps);
        free((void *)doms);
        fflush(stdout);
        return status;
    }
    /* A registry that cannot be read (another release's, one being created)
     * is named on stderr; the status is 1 only when none could be read. */
    int shown = 0;
    if (!n && mode == MODE_JSON)
        print_json_error(NULL, NULL, "no registry for this user", false);
    else if (!n)
        printf("no registry for this user\n");
    for (int i = 0; i < n; i++) {
        if (shown && mode != MODE_JSON) printf("\n");
        if (show(names[i], mode) == 0) shown++;
    }
    return n && !shown ? 1 : status;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"domain", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"watch", required_argument, NULL, 'w'},
        {"count", required_argument, NULL, 'n'},
        {"list", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {"all", no_argument, NULL, 'a'},
        {"leaks", no_argument, NULL, 'L'},
        {"prometheus", no_argument, NULL, 'p'},
        {"stale", required_argument, NULL, 's'},
        {"remove", required_argument, NULL, 'r'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *domain = getenv("IPCSHIM_DOMAIN");
    bool json = false, list = false, all = false, leaks = false, prom = false;
    const char *remove = NULL;
    double watch = 0;
    long max_count = 0;
    int c;
    char name_check[128];
    if (!domain || !*domain) domain = "default";
    opterr = 0; /* our own messages, with our own name */
    while ((c = getopt_long(argc, argv, "d:jw:n:lhVaLps:r:", longs, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'd':
            domain = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'w':
            watch = strtod(optarg, &end);
            if (end == optarg || *end || !(watch > 0) || watch > 86400) {
                fprintf(stderr, "ipcshim-stat: --watch takes a number of seconds > 0, not \"%s\"\n",
                        optarg);
                return 2;
            }
            break;
        case 'n':
            max_count = strtol(optarg, &end, 10);
            if (end == optarg || *end || max_count < 1) {
                fprintf(stderr, "ipcshim-stat: --count takes a number >= 1, not \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'l':
            list = true;
            break;
        case 'a':
            all = true;
            break;
        case 'L':
            leaks = true;
            break;
        case 'p':
            prom = true;
            break;
        case 'r':
            remove = optarg;
            break;
        case 's':
            stale_s = strtod(optarg, &end);
            if (end == optarg || *end || !(stale_s >= 0)) {
                fprintf(stderr,
                        "ipcshim-stat: --stale takes a number of seconds >= 0, not \"%s\"\n",
                        optarg);
                return 2;
            }
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'V':
            printf("ipcshim-stat %s (registry ABI %u, JSON version %d)\n", STAT_VERSION, REG_ABI,
                   JSON_VERSION);
            return 0;
        default:
            /* a long option is named as typed (--watch, not -w) */
            if (optopt && strncmp(argv[optind - 1], "--", 2) != 0)
                fprintf(stderr,
                        "ipcshim-stat: option -%c is unknown or needs a value (see --help)\n",
                        optopt);
            else
                fprintf(stderr,
                        "ipcshim-stat: option %s is unknown or needs a value (see --help)\n",
                        argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ipcshim-stat: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return 2;
    }
    if (max_count && !watch) {
        fprintf(stderr, "ipcshim-stat: --count needs --watch\n");
        return 2;
    }
    if (json + leaks + prom > 1) {
        fprintf(stderr, "ipcshim-stat: choose one of --json, --leaks, --prometheus\n");
        return 2;
    }
    int mode = json ? MODE_JSON : leaks ? MODE_LEAKS : prom ? MODE_PROM : MODE_TEXT;
    if (remove) {
        if (registry_name(remove, name_check, sizeof name_check) != 0) {
            fprintf(stderr,
                    "ipcshim-stat: \"%s\" is not a domain name (1-64 of A-Z a-z 0-9 . _ -)\n",
                    remove);
            return 2;
        }
        return remove_domain(remove);
    }
    char name[128];
    if (!all && registry_name(domain, name, sizeof name) != 0) {
        fprintf(stderr, "ipcshim-stat: \"%s\" is not a domain name (1-64 of A-Z a-z 0-9 . _ -)\n",
                domain);
        return 2;
    }
    if (list) {
        list_domains(stdout, false);
        return 0;
    }
    if (!watch) return all ? show_all(mode) : show(domain, mode);

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    bool tty = isatty(STDOUT_FILENO);
    int status = 0;
    for (long n = 0; !stop && (!max_count || n < max_count); n++) {
        if (n) {
            struct timespec ts = {(time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9)};
            while (!stop && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
            if (stop) break;
        }
        if (mode == MODE_TEXT || mode == MODE_LEAKS) {
            time_t now = time(NULL);
            struct tm tm;
            char when[32] = "";
            if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%H:%M:%S", &tm);
            if (tty)
                printf("\033[H\033[2J");
            else if (n)
                printf("\n");
            printf("---- %s, every %gs (Ctrl-C to stop)\n", when, watch);
        }
        status = all ? show_all(mode) : show(domain, mode);
    }
    return status;
}
