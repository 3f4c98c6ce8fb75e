/* stat_print: ipcshim-stat's text, JSON, leaks and OpenMetrics writers
 * (stat_print.h). Which fields each shows, in which order, is the views
 * below; what a field is and how it is read is stat_fields.c. */
#include "stat_print.h"
#include "registry.h"
#include "stat_fields.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define LOCK_HELD_NOTE_NS 1000000000ull /* show the lock's holder when held this long */

/* The views: which fields, in which order. VIEW(v) is the two arguments
 * (fields, count) that the writers take. */
#define VIEW(v) v, (int)(sizeof v / sizeof *v)
static const int holders_text[] = {H_SLOT,    H_PID,   H_ALIVE,      H_ATTACHED, H_EXPORTS,
                                   H_IMPORTS, H_OPENS, H_LIMBO_CELL, H_COMMAND};
static const int by_process_text[] = {H_PID,         H_ALIVE,      H_EXPORTED, H_IMPORTED,
                                      H_LIMBO_BYTES, H_DEAD_BYTES, H_STALE,    H_ANY_COMMAND};
static const int limbo_text[] = {H_PID, H_LB_BLOCKS, H_LB_BYTES, H_LB_OLDEST, H_COMMAND};
static const int blocks_text[] = {B_SLOT,  B_EXPORTER, B_DEVICE,     B_KIND,      B_SIZE,
                                  B_STATE, B_PENDING,  B_EXPORT_AGE, B_LIMBO_AGE, B_IMPORTERS};
static const int holders_json[] = {H_SLOT,         H_PID,         H_ALIVE,      H_COMMAND,
                                   H_ATTACHED,     H_EXPORTS,     H_IMPORTS,    H_OPENS,
                                   H_LIMBO_BLOCKS, H_LIMBO_BYTES, H_RECORDED,   H_EXPORTED,
                                   H_IMPORTED,     H_DEAD_BLOCKS, H_DEAD_BYTES, H_STALE};
static const int limbo_json[] = {H_SLOT,      H_PID,      H_ALIVE,    H_COMMAND,
                                 H_LB_BLOCKS, H_LB_BYTES, H_LB_OLDEST};
static const int blocks_json[] = {STAT_BLOCK_FIELDS(STAT_BLOCK_ENUM)};
static const int gauges[] = {H_ALIVE,       H_EXPORTS,    H_EXPORTED,     H_IMPORTS,
                             H_IMPORTED,    H_OPENS,      H_LIMBO_BLOCKS, H_LIMBO_BYTES,
                             H_DEAD_BLOCKS, H_DEAD_BYTES, H_STALE,        H_LB_OLDEST};

/* ---- text ------------------------------------------------------------- */

/* The importers of b as "PID(OPENS[,dead][,intent])", space-separated. */
static const char *importers_cell(const struct inspect_snapshot *s, const struct inspect_block *b,
                                  char *importers, size_t size)
{
    size_t len = 0;
    snprintf(importers, size, "-");
    for (uint32_t k = 0; k < b->nleases && len < size - 48; k++) {
        const struct inspect_lease *l = &s->leases[b->first_lease + k];
        const struct inspect_holder *h = inspect_holder_by_slot(s, l->holder);
        char extra[32] = "";
        if (h && !h->alive) snprintf(extra, sizeof extra, ",dead");
        if (l->intent != LEASE_OPEN)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",%s",
                     inspect_lease_intent(l->intent));
        len += (size_t)snprintf(importers + len, size - len, "%s%d(%u%s)", k ? " " : "",
                                h ? (int)h->pid : -1, l->count, extra);
    }
    return importers;
}

/* Field f of rec as a text cell, in buf (512 bytes). */
static const char *text_cell(const struct inspect_snapshot *s, const struct record *r,
                             const void *rec, int f, char *buf, size_t len)
{
    struct val v = r->get(s, rec, f, buf, len);
    const struct inspect_holder *e = v.p;
    if (v.null) return "-";
    switch (r->fields[f].kind) {
    case V_INT:
        snprintf(buf, len, "%lld", (long long)v.i);
        break;
    case V_BOOL:
        return v.n ? "alive" : "dead";
    case V_STR:
        return v.s;
    case V_BYTES:
        return stat_bytes(v.n, buf, len);
    case V_MS:
        return stat_age(v.n, buf, len);
    case V_EXPORTER:
        if (!e) return "gone";
        snprintf(buf, len, "%d%s", (int)e->pid, e->alive ? "" : "(dead)");
        break;
    case V_IMPORTERS:
        return importers_cell(s, v.p, buf, len);
    default:
        snprintf(buf, len, "%llu", (unsigned long long)v.n);
    }
    return buf;
}

/* A table's header line: each column left-aligned to its width but the last. */
static void text_header(const struct field *fields, const int *cols, int n)
{
    fputs(" ", stdout);
    for (int c = 0; c < n; c++)
        printf(" %-*s", c + 1 < n ? fields[cols[c]].width : 0, fields[cols[c]].head);
    putchar('\n');
}

static void text_row(const struct inspect_snapshot *s, const struct record *r, const void *rec,
                     const int *cols, int n)
{
    char buf[512];
    fputs(" ", stdout);
    for (int c = 0; c < n; c++)
        printf(" %-*s", c + 1 < n ? r->fields[cols[c]].width : 0,
               text_cell(s, r, rec, cols[c], buf, sizeof buf));
    putchar('\n');
}

static void text_summary(const struct inspect_snapshot *s, const char *domain,
                         const struct totals *t)
{
    char a[32];
    time_t created = (time_t)(s->created_ns / 1000000000ull);
    struct tm tm;
    char when[64] = "?";
    if (localtime_r(&created, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);

    printf("registry %s (domain %s, ABI %u), created %s by pid %d, lock repairs %u\n", s->name,
           domain, s->abi, when, (int)s->creator_pid, s->repairs);
    printf(
        "holders %u of %u (%u dead), blocks %u of %u (%u live, %u limbo, %u orphaned, %u retired), "
        "leases %u of %u\n",
        s->nholders, s->max_holders, t->dead, s->nblocks, s->max_blocks, t->live, t->limbo,
        t->orphaned, t->retired, s->nleases, s->max_leases);
    if (s->lock_tid && s->lock_held_ns >= LOCK_HELD_NOTE_NS)
        printf("LOCK held for %s by pid %d (thread %d): a stopped or hung process? Others wait "
               "at most IPCSHIM_LOCK_WAIT, then go on untracked\n",
               stat_age(s->lock_held_ns / 1000000ull, a, sizeof a), (int)s->lock_pid,
               (int)s->lock_tid);
}

/* The tables: holders, blocks, by process, limbo by exporter. */
static void text_tables(const struct inspect_snapshot *s, const struct totals *t)
{
    char a[32];
    printf("\nHOLDERS\n");
    if (!s->nholders)
        printf("  none\n");
    else
        text_header(stat_holder_fields, VIEW(holders_text));
    for (uint32_t i = 0; i < s->nholders; i++)
        text_row(s, &stat_holder_record, &s->holders[i], VIEW(holders_text));

    printf("\nBLOCKS\n");
    if (!s->nblocks)
        printf("  none\n");
    else
        text_header(stat_block_fields, VIEW(blocks_text));
    for (uint32_t i = 0; i < s->nblocks; i++)
        text_row(s, &stat_block_record, &s->blocks[i], VIEW(blocks_text));

    if (s->nholders) {
        printf("\nBY PROCESS\n");
        text_header(stat_holder_fields, VIEW(by_process_text));
        for (uint32_t i = 0; i < s->nholders; i++)
            text_row(s, &stat_holder_record, &s->holders[i], VIEW(by_process_text));
    }

    if (t->limbo) {
        printf("\nLIMBO BY EXPORTER\n");
        text_header(stat_holder_fields, VIEW(limbo_text));
        for (uint32_t i = 0; i < s->nholders; i++)
            if (s->holders[i].limbo_blocks)
                text_row(s, &stat_holder_record, &s->holders[i], VIEW(limbo_text));
        printf("  total: %u blocks, %s\n", t->limbo, stat_bytes(t->limbo_bytes, a, sizeof a));
    }
}

/* "pid P (COMM)" for each dead exporter of a block holder h has open. */
static const char *dead_exporters(const struct inspect_snapshot *s, const struct inspect_holder *h,
                                  char *who, size_t size)
{
    size_t len = 0;
    who[0] = '\0';
    for (uint32_t k = 0; k < s->nblocks && len < size - 48; k++) {
        const struct inspect_block *b = &s->blocks[k];
        bool mine = false;
        for (uint32_t j = 0; j < b->nleases; j++)
            mine |= s->leases[b->first_lease + j].holder == h->slot;
        if (!mine || !b->exporter_dead) continue;
        char tag[48];
        snprintf(tag, sizeof tag, "pid %d (%s)", (int)b->exporter_pid,
                 b->exporter_comm[0] ? b->exporter_comm : "?");
        if (strstr(who, tag)) continue;
        len += (size_t)snprintf(who + len, size - len, "%s%s", len ? ", " : "", tag);
    }
    return who;
}

/* What a reader most likely wants explained. */
static void text_notes(const struct inspect_snapshot *s, const struct totals *t)
{
    char a[32], c[32], who[256];
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
    if (t->orphaned)
        NOTE("%u orphaned block(s), %s: their exporter exited or died, so the driver has freed the "
             "memory; "
             "importers still mapping them read freed memory and should close them\n",
             t->orphaned, stat_bytes(t->orphaned_bytes, a, sizeof a));
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        if (!h->alive || !h->dead_pinned_bytes) continue;
        char since[48] = "";
        if (h->oldest_dead_ns)
            snprintf(since, sizeof since, ", dead for %s",
                     stat_age(stat_age_ms(s, h->oldest_dead_ns), c, sizeof c));
        NOTE("pid %d (%s) holds %s exported by %s%s: they stay pinned until it closes them "
             "(cudaIpcCloseMemHandle; a pool import: its free) or exits; ipcshim-stat --leaks "
             "lists them\n",
             (int)h->pid, stat_holder_comm(h), stat_bytes(h->dead_pinned_bytes, a, sizeof a),
             dead_exporters(s, h, who, sizeof who), since);
    }
    if (s->skipped)
        NOTE("%u record(s) changed while they were read and were left out; run again for a steady "
             "view\n",
             s->skipped);
#undef NOTE
}

void stat_print_text(const struct inspect_snapshot *s, const char *domain)
{
    struct totals t = stat_totals(s);
    text_summary(s, domain, &t);
    text_tables(s, &t);
    text_notes(s, &t);
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

static void json_importers(const struct inspect_snapshot *s, const struct inspect_block *b)
{
    putchar('[');
    for (uint32_t k = 0; k < b->nleases; k++) {
        const struct inspect_lease *l = &s->leases[b->first_lease + k];
        const struct inspect_holder *h = inspect_holder_by_slot(s, l->holder);
        printf("%s{\"slot\":%u,\"pid\":%d,\"alive\":%s,\"opens\":%u,\"intent\":\"%s\","
               "\"open_age_ms\":%llu}",
               k ? "," : "", l->holder, h ? (int)h->pid : -1, h && h->alive ? "true" : "false",
               l->count, inspect_lease_intent(l->intent),
               (unsigned long long)stat_age_ms(s, l->open_ns));
    }
    putchar(']');
}

/* rec as one JSON object of the fields cols, keys in that order. */
static void json_object(const struct inspect_snapshot *s, const struct record *r, const void *rec,
                        const int *cols, int n)
{
    char buf[512];
    putchar('{');
    for (int c = 0; c < n; c++) {
        struct val v = r->get(s, rec, cols[c], buf, sizeof buf);
        printf("%s\"%s\":", c ? "," : "", r->fields[cols[c]].key);
        if (v.null) {
            fputs("null", stdout);
            continue;
        }
        switch (r->fields[cols[c]].kind) {
        case V_INT:
            printf("%lld", (long long)v.i);
            break;
        case V_HEX:
            printf("\"0x%llx\"", (unsigned long long)v.n);
            break;
        case V_BOOL:
            fputs(v.n ? "true" : "false", stdout);
            break;
        case V_STR:
            json_str(v.s);
            break;
        case V_EXPORTER:
            json_holder_ref(v.p);
            break;
        case V_IMPORTERS:
            json_importers(s, v.p);
            break;
        default:
            printf("%llu", (unsigned long long)v.n);
        }
    }
    putchar('}');
}

/* "totals": from a snapshot's counts, or all zero (s and t NULL). */
static void json_totals(const struct inspect_snapshot *s, const struct totals *t)
{
    static const char *const keys[] = {"holders",        "dead_holders",    "blocks",
                                       "bytes",          "live_blocks",     "limbo_blocks",
                                       "limbo_bytes",    "orphaned_blocks", "orphaned_bytes",
                                       "retired_blocks", "leases",          "opens"};
    uint64_t v[12] = {0};
    if (s)
        memcpy(v,
               (uint64_t[12]){s->nholders, t->dead, s->nblocks, t->bytes, t->live, t->limbo,
                              t->limbo_bytes, t->orphaned, t->orphaned_bytes, t->retired,
                              s->nleases, t->opens},
               sizeof v);
    printf(",\"totals\":");
    for (int k = 0; k < 12; k++)
        printf("%c\"%s\":%llu", k ? ',' : '{', keys[k], (unsigned long long)v[k]);
    putchar('}');
}

/* The keys every object starts with: format, version, domain, registry. */
static void json_head(const char *domain, const char *registry)
{
    printf("{\"format\":\"ipcshim-stat\",\"version\":%d,\"domain\":", STAT_JSON_VERSION);
    json_str(domain);
    printf(",\"registry\":");
    json_str(registry);
}

void stat_print_json(const struct inspect_snapshot *s, const char *domain)
{
    struct totals t = stat_totals(s);
    json_head(domain, s->name);
    printf(",\"abi\":%u,\"time_unix_ms\":%llu,\"created_unix_ms\":%llu,\"creator_pid\":%d,"
           "\"repairs\":%u",
           s->abi, (unsigned long long)(s->taken_real_ns / 1000000ull),
           (unsigned long long)(s->created_ns / 1000000ull), (int)s->creator_pid, s->repairs);
    printf(",\"capacity\":{\"holders\":%u,\"blocks\":%u,\"leases\":%u}", s->max_holders,
           s->max_blocks, s->max_leases);
    printf(",\"holders\":[");
    for (uint32_t i = 0; i < s->nholders; i++) {
        if (i) putchar(',');
        json_object(s, &stat_holder_record, &s->holders[i], VIEW(holders_json));
    }
    printf("],\"blocks\":[");
    for (uint32_t i = 0; i < s->nblocks; i++) {
        if (i) putchar(',');
        json_object(s, &stat_block_record, &s->blocks[i], VIEW(blocks_json));
    }
    printf("],\"limbo\":[");
    bool first = true;
    for (uint32_t i = 0; i < s->nholders; i++) {
        if (!s->holders[i].limbo_blocks) continue;
        if (!first) putchar(',');
        json_object(s, &stat_holder_record, &s->holders[i], VIEW(limbo_json));
        first = false;
    }
    putchar(']');
    json_totals(s, &t);
    printf(",\"skipped\":%u,\"swap\":null,\"swept\":%u}\n", s->skipped, s->swept);
}

/* --json when there is no snapshot to show: an object all the same, so that
 * a reader always gets JSON, with "error" (the reason also printed on
 * stderr) as its last key. A domain without a registry holds nothing: its
 * lists are empty and its totals zero. A registry that cannot be read, or
 * --all with no registry at all (domain and registry null), has only the
 * keys known without reading one. */
void stat_print_json_error(const char *domain, const char *registry, const char *why, bool empty)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    json_head(domain, registry);
    printf(",\"time_unix_ms\":%llu",
           (unsigned long long)now.tv_sec * 1000ull + (unsigned long long)now.tv_nsec / 1000000ull);
    if (empty) {
        printf(",\"holders\":[],\"blocks\":[],\"limbo\":[]");
        json_totals(NULL, NULL);
        printf(",\"skipped\":0,\"swap\":null");
    }
    printf(",\"error\":");
    json_str(why);
    printf("}\n");
}

/* ---- leaks (live, read-only) ------------------------------------------ */

/* What each live process holds, the exit report's items seen from outside.
 * Call sites live only in each process's memory: the exit report has them. */
void stat_print_leaks(const struct inspect_snapshot *s, const char *domain)
{
    char a[32], c[32], d[32];
    int shown = 0;
    printf("leaks in domain %s (live processes; read-only)\n", domain);
    for (uint32_t i = 0; i < s->nholders; i++) {
        const struct inspect_holder *h = &s->holders[i];
        bool header = false;
#define HEADER()                                                                                   \
    (void)(header ? 0                                                                              \
                  : (printf("\npid %d (%s)%s\n", (int)h->pid, stat_holder_comm(h),                 \
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
                             stat_age(stat_age_ms(s, b->orphaned_ns), d, sizeof d));
                else if (b->exporter_dead)
                    snprintf(dead, sizeof dead, "dead");
                uint64_t held = stat_age_ms(s, l->open_ns);
                printf("  holds %s exported by pid %d (%s), %s; open for %s, %u open(s)%s%s; "
                       "call site: only in the process's own exit report\n",
                       stat_bytes(b->size, a, sizeof a), (int)b->exporter_pid,
                       b->exporter_comm[0] ? b->exporter_comm : "?", dead,
                       stat_age(held, c, sizeof c), l->count,
                       held > stat_stale_s * 1e3 ? ", stale" : "",
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
                       stat_bytes(b->size, a, sizeof a),
                       stat_age(stat_age_ms(s, b->first_export_ns), c, sizeof c), b->pending,
                       b->expired, b->state == BLOCK_LIMBO ? ", freed (in limbo)" : "");
            } else if (b->state == BLOCK_LIMBO) {
                HEADER();
                char who[256] = "";
                size_t len = 0;
                for (uint32_t j = 0; j < b->nleases && len < sizeof who - 48; j++) {
                    const struct inspect_lease *l = &s->leases[b->first_lease + j];
                    const struct inspect_holder *o = inspect_holder_by_slot(s, l->holder);
                    len += (size_t)snprintf(who + len, sizeof who - len, "%spid %d (%s%s)",
                                            len ? ", " : "", o ? (int)o->pid : -1,
                                            o ? stat_holder_comm(o) : "?",
                                            o && !o->alive ? ", dead" : "");
                }
                printf("  left %s in limbo for %s, still held by %s%s\n",
                       stat_bytes(b->size, a, sizeof a),
                       stat_age(stat_age_ms(s, b->limbo_since_ns), c, sizeof c),
                       len ? who : "nobody", b->pending ? " and an unclaimed hand-off" : "");
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
        om_value(stat_holder_comm(h));
    }
    putchar('}');
}

/* A gauge's value: its field as a number (an age in seconds). */
static double gauge_value(const struct inspect_snapshot *s, const struct inspect_holder *h, int f)
{
    char buf[64];
    struct val v = stat_holder_record.get(s, h, f, buf, sizeof buf);
    if (v.null) return 0;
    return stat_holder_fields[f].kind == V_MS ? v.n / 1e3 : (double)v.n;
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

/* The per-process families: a gauge per holder field that has a metric, then
 * the hand-off counters. */
static void om_processes(struct inspect_snapshot *snaps, const char *const *domains, int n)
{
    for (int g = 0; g < (int)(sizeof gauges / sizeof *gauges); g++) {
        const struct field *f = &stat_holder_fields[gauges[g]];
        printf("# TYPE %s gauge\n", f->metric);
        if (f->unit) printf("# UNIT %s %s\n", f->metric, f->unit);
        printf("# HELP %s %s\n", f->metric, f->help);
        for (int d = 0; d < n; d++)
            for (uint32_t i = 0; i < snaps[d].nholders; i++) {
                fputs(f->metric, stdout);
                om_labels(domains[d], &snaps[d].holders[i]);
                printf(" %.17g\n", gauge_value(&snaps[d], &snaps[d].holders[i], gauges[g]));
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
}

/* The per-registry families: lock repairs, blocks by state and by kind. */
static void om_registries(struct inspect_snapshot *snaps, const char *const *domains, int n)
{
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
        struct totals t = stat_totals(&snaps[d]);
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
           "stream-ordered pool's pointer, vmm: legacy IPC on VMM memory)\n");
    for (int d = 0; d < n; d++) {
        struct totals t = stat_totals(&snaps[d]);
        const char *kind[] = {"ipc", "pool", "vmm"};
        uint32_t v[] = {snaps[d].nblocks - t.pool - t.vmm, t.pool, t.vmm};
        for (int k = 0; k < 3; k++) {
            fputs("ipcshim_registry_blocks_by_kind{domain=", stdout);
            om_value(domains[d]);
            printf(",kind=\"%s\"} %u\n", kind[k], v[k]);
        }
    }
}

/* One exposition for all the snapshots (families are not repeated). */
void stat_print_prometheus(struct inspect_snapshot *snaps, const char *const *domains, int n)
{
    om_processes(snaps, domains, n);
    om_registries(snaps, domains, n);
    printf("# EOF\n");
}
