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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define JSON_VERSION 1
#define LOCK_HELD_NOTE_NS 1000000000ull /* show the lock's holder when held this long */

static const char usage_text[] =
    "usage: ipcshim-stat [--domain D] [--json] [--watch SECONDS [--count N]]\n"
    "       ipcshim-stat --list\n"
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
    uint32_t dead, live, limbo, orphaned, retired, opens;
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
        printf("  %-5s %-14s %-3s %-9s %-8s %-8s %-8s %-8s %s\n", "SLOT", "EXPORTER", "DEV", "SIZE",
               "STATE", "HANDOFFS", "AGE", "IN-LIMBO", "IMPORTERS(OPENS)");
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
        printf("  %-5u %-14s %-3d %-9s %-8s %-8u %-8s %-8s %s\n", b->slot, exporter, (int)b->device,
               fmt_bytes(b->size, a, sizeof a), inspect_block_state(b->state), b->pending,
               fmt_age(age_ms(s, b->last_export_ns), b2, sizeof b2),
               b->state == BLOCK_LIMBO ? fmt_age(age_ms(s, b->limbo_since_ns), c, sizeof c) : "-",
               importers);
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
            "\"limbo_bytes\":%llu}",
            (unsigned long long)age_ms(s, h->attach_ns), h->exports, h->imports, h->opens,
            h->limbo_blocks, (unsigned long long)h->limbo_bytes);
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
            printf("%s{\"slot\":%u,\"pid\":%d,\"alive\":%s,\"opens\":%u,\"intent\":\"%s\"}",
                   k ? "," : "", l->holder, h ? (int)h->pid : -1, h && h->alive ? "true" : "false",
                   l->count, inspect_lease_intent(l->intent));
        }
        printf("]}");
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

static int show(const char *domain, bool json)
{
    struct inspect_snapshot s;
    char why[512];
    int rc = inspect_snapshot(domain, &s, why, sizeof why);
    if (rc) {
        fprintf(stderr, "ipcshim-stat: %s\n", why);
        if (rc == -ENOENT) {
            fprintf(stderr, "ipcshim-stat: registries of this user: ");
            if (!list_domains(stderr, true)) fprintf(stderr, "none");
            fprintf(stderr,
                    " (choose one with --domain, or set IPCSHIM_DOMAIN as the programs do)\n");
        }
        return 1;
    }
    if (json)
        print_json(&s, domain);
    else
        print_text(&s, domain);
    fflush(stdout);
    inspect_free(&s);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"domain", required_argument, NULL, 'd'}, {"json", no_argument, NULL, 'j'},
        {"watch", required_argument, NULL, 'w'},  {"count", required_argument, NULL, 'n'},
        {"list", no_argument, NULL, 'l'},         {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
    };
    const char *domain = getenv("IPCSHIM_DOMAIN");
    bool json = false, list = false;
    double watch = 0;
    long max_count = 0;
    int c;
    if (!domain || !*domain) domain = "default";
    opterr = 0; /* our own messages, with our own name */
    while ((c = getopt_long(argc, argv, "d:jw:n:lhV", longs, NULL)) != -1) {
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
    char name[128];
    if (registry_name(domain, name, sizeof name) != 0) {
        fprintf(stderr, "ipcshim-stat: \"%s\" is not a domain name (1-64 of A-Z a-z 0-9 . _ -)\n",
                domain);
        return 2;
    }
    if (list) {
        list_domains(stdout, false);
        return 0;
    }
    if (!watch) return show(domain, json);

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
        if (!json) {
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
        status = show(domain, json);
    }
    return status;
}
