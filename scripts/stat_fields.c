/* stat_fields: the table of what ipcshim-stat shows (stat_fields.h): each
 * holder and block field's column, JSON key, gauge and how to read it. */
#include "stat_fields.h"
#include "registry.h"
#include "units.h"

#include <stdio.h>

double stat_stale_s = 300;

/* Sizes and ages as the leak report writes them (core/units.c), compact. */
const char *stat_bytes(uint64_t n, char *buf, size_t len)
{
    return units_format_bytes(n, UNITS_COMPACT, buf, len);
}

uint64_t stat_age_ms(const struct inspect_snapshot *s, uint64_t since_ns)
{
    return since_ns && since_ns < s->taken_ns ? (s->taken_ns - since_ns) / 1000000ull : 0;
}

const char *stat_age(uint64_t ms, char *buf, size_t len)
{
    return units_format_age_ms(ms, buf, len);
}

struct totals stat_totals(const struct inspect_snapshot *s)
{
    struct totals t = {0};
    for (uint32_t i = 0; i < s->nholders; i++)
        t.dead += !s->holders[i].alive;
    for (uint32_t i = 0; i < s->nblocks; i++) {
        const struct inspect_block *b = &s->blocks[i];
        t.bytes += b->size;
        t.pool += b->pool;
        t.vmm += b->vmm;
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
uint32_t stat_stale_leases(const struct inspect_snapshot *s, uint32_t slot)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->nleases; i++) {
        const struct inspect_lease *l = &s->leases[i];
        if (l->holder == slot && l->open_ns && stat_age_ms(s, l->open_ns) > stat_stale_s * 1e3) n++;
    }
    return n;
}

/* The command of holder h: /proc when alive, else what it recorded. */
const char *stat_holder_comm(const struct inspect_holder *h)
{
    if (h->alive && h->comm[0]) return h->comm;
    return h->reg_comm[0] ? h->reg_comm : "-";
}

/* The exporting holder of b, or NULL when that process is gone. */
const struct inspect_holder *stat_exporter_of(const struct inspect_snapshot *s,
                                              const struct inspect_block *b)
{
    return b->exporter_current ? inspect_holder_by_slot(s, b->exporter) : NULL;
}

/* ---- the fields --------------------------------------------------------- */

#define NUM(x) ((struct val){.n = (x)})
#define INT(x) ((struct val){.i = (x)})
#define STR(x) ((struct val){.s = (x), .null = !(x)})
#define NULLABLE(cond, x) ((struct val){.n = (cond) ? (x) : 0, .null = !(cond)})

const struct field stat_holder_fields[H_COUNT] = {
    [H_SLOT] = {"SLOT", 5, "slot", V_NUM},
    [H_PID] = {"PID", 8, "pid", V_INT},
    [H_ALIVE] = {"STATUS", 6, "alive", V_BOOL, "ipcshim_process_alive", NULL,
                 "1 while the process lives (0: dead, released at the next sweep)"},
    [H_COMMAND] = {"COMMAND", 0, "command", V_STR},
    [H_ATTACHED] = {"AGE", 8, "attached_ms", V_MS},
    [H_EXPORTS] = {"EXPORTS", 7, "exports", V_NUM, "ipcshim_process_exports", NULL,
                   "blocks the process exported that are in the registry"},
    [H_IMPORTS] = {"IMPORTS", 7, "imports", V_NUM, "ipcshim_process_imports", NULL,
                   "blocks the process has open (leases)"},
    [H_OPENS] = {"OPENS", 6, "opens", V_NUM, "ipcshim_process_opens", NULL,
                 "opens without a close yet, over its leases"},
    [H_LIMBO_BLOCKS] = {NULL, 0, "limbo_blocks", V_NUM, "ipcshim_process_limbo_blocks", NULL,
                        "its freed blocks waiting for importers (limbo)"},
    [H_LIMBO_BYTES] = {"IN-LIMBO", 10, "limbo_bytes", V_BYTES, "ipcshim_process_limbo_bytes",
                       "bytes", "bytes of its blocks in limbo"},
    [H_RECORDED] = {NULL, 0, "recorded_command", V_STR},
    [H_EXPORTED] = {"EXPORTED", 10, "exported_bytes", V_BYTES, "ipcshim_process_exported_bytes",
                    "bytes", "bytes of its exports, live or in limbo"},
    [H_IMPORTED] = {"IMPORTED", 10, "imported_bytes", V_BYTES, "ipcshim_process_imported_bytes",
                    "bytes", "bytes of the blocks it has open"},
    [H_DEAD_BLOCKS] = {NULL, 0, "dead_pinned_blocks", V_NUM, "ipcshim_process_dead_pinned_blocks",
                       NULL, "blocks of dead exporters it still has open"},
    [H_DEAD_BYTES] = {"DEAD-PINNED", 11, "dead_pinned_bytes", V_BYTES,
                      "ipcshim_process_dead_pinned_bytes", "bytes",
                      "bytes of dead exporters' blocks it still has open"},
    [H_STALE] = {"STALE", 6, "stale_leases", V_NUM, "ipcshim_process_stale_leases", NULL,
                 "its leases open longer than the --stale threshold"},
    [H_LIMBO_CELL] = {"LIMBO", 14, NULL, V_STR},
    [H_ANY_COMMAND] = {"COMMAND", 0, NULL, V_STR},
    [H_LB_BLOCKS] = {"BLOCKS", 6, "blocks", V_NUM},
    [H_LB_BYTES] = {"BYTES", 14, "bytes", V_NUM},
    [H_LB_OLDEST] = {"OLDEST", 8, "oldest_ms", V_MS, "ipcshim_process_oldest_limbo_seconds",
                     "seconds", "age of its oldest block in limbo"},
};

static struct val stat_holder_get(const struct inspect_snapshot *s, const void *rec, int f,
                                  char *buf, size_t len)
{
    const struct inspect_holder *h = rec;
    char a[32];
    switch (f) {
    case H_SLOT:
        return NUM(h->slot);
    case H_PID:
        return INT(h->pid);
    case H_ALIVE:
        return NUM(h->alive);
    case H_COMMAND:
        return STR(h->alive && h->comm[0] ? h->comm : NULL);
    case H_ATTACHED:
        return NUM(stat_age_ms(s, h->attach_ns));
    case H_EXPORTS:
        return NUM(h->exports);
    case H_IMPORTS:
        return NUM(h->imports);
    case H_OPENS:
        return NUM(h->opens);
    case H_LIMBO_BLOCKS:
    case H_LB_BLOCKS:
        return NUM(h->limbo_blocks);
    case H_LIMBO_BYTES:
    case H_LB_BYTES:
        return NUM(h->limbo_bytes);
    case H_RECORDED:
        return STR(h->reg_comm[0] ? h->reg_comm : NULL);
    case H_EXPORTED:
        return NUM(h->exported_bytes);
    case H_IMPORTED:
        return NUM(h->imported_bytes);
    case H_DEAD_BLOCKS:
        return NUM(h->dead_pinned_blocks);
    case H_DEAD_BYTES:
        return NUM(h->dead_pinned_bytes);
    case H_STALE:
        return NUM(stat_stale_leases(s, h->slot));
    case H_LIMBO_CELL:
        if (!h->limbo_blocks) return STR(NULL);
        snprintf(buf, len, "%u/%s", h->limbo_blocks, stat_bytes(h->limbo_bytes, a, sizeof a));
        return STR(buf);
    case H_ANY_COMMAND:
        return STR(stat_holder_comm(h));
    default:
        return NUM(stat_age_ms(s, h->oldest_limbo_ns)); /* H_LB_OLDEST */
    }
}

const struct field stat_block_fields[B_COUNT] = {
    [B_SLOT] = {"SLOT", 5, "slot", V_NUM},
    [B_GENERATION] = {NULL, 0, "generation", V_NUM},
    [B_STATE] = {"STATE", 8, "state", V_STR},
    [B_DEVICE] = {"DEV", 3, "device", V_INT},
    [B_BASE] = {NULL, 0, "base", V_HEX},
    [B_SIZE] = {"SIZE", 9, "size", V_BYTES},
    [B_EXPORTER] = {"EXPORTER", 14, "exporter", V_EXPORTER},
    [B_PENDING] = {"HANDOFFS", 8, "pending_handoffs", V_NUM},
    [B_EXPORT_AGE] = {"AGE", 8, "export_age_ms", V_MS},
    [B_LIMBO_AGE] = {"IN-LIMBO", 8, "limbo_age_ms", V_MS},
    [B_IMPORTERS] = {"IMPORTERS(OPENS)", 0, "importers", V_IMPORTERS},
    [B_EXPORTER_PID] = {NULL, 0, "exporter_pid", V_INT},
    [B_EXPORTER_COMMAND] = {NULL, 0, "exporter_command", V_STR},
    [B_EXPORTER_DEAD] = {NULL, 0, "exporter_dead", V_BOOL},
    [B_CLAIMED] = {NULL, 0, "claimed_handoffs", V_NUM},
    [B_EXPIRED] = {NULL, 0, "expired_handoffs", V_NUM},
    [B_ORPHANED_AGE] = {NULL, 0, "orphaned_age_ms", V_MS},
    [B_KIND] = {"KIND", 4, "kind", V_STR},
};

static struct val stat_block_get(const struct inspect_snapshot *s, const void *rec, int f,
                                 char *buf, size_t len)
{
    const struct inspect_block *b = rec;
    (void)buf, (void)len;
    switch (f) {
    case B_SLOT:
        return NUM(b->slot);
    case B_GENERATION:
        return NUM(b->generation);
    case B_STATE:
        return STR(inspect_block_state(b->state));
    case B_DEVICE:
        return INT(b->device);
    case B_BASE:
        return NUM(b->base);
    case B_SIZE:
        return NUM(b->size);
    case B_EXPORTER:
        return (struct val){.p = stat_exporter_of(s, b)};
    case B_PENDING:
        return NUM(b->pending);
    case B_EXPORT_AGE:
        return NUM(stat_age_ms(s, b->last_export_ns));
    case B_LIMBO_AGE:
        return NULLABLE(b->state == BLOCK_LIMBO, stat_age_ms(s, b->limbo_since_ns));
    case B_IMPORTERS:
        return (struct val){.p = b};
    case B_EXPORTER_PID:
        return INT(b->exporter_pid);
    case B_EXPORTER_COMMAND:
        return STR(b->exporter_comm[0] ? b->exporter_comm : NULL);
    case B_EXPORTER_DEAD:
        return NUM(b->exporter_dead);
    case B_CLAIMED:
        return NUM(b->claimed);
    case B_EXPIRED:
        return NUM(b->expired);
    case B_ORPHANED_AGE:
        return NULLABLE(b->orphaned_ns != 0, stat_age_ms(s, b->orphaned_ns));
    default:
        return STR(b->pool ? "pool" : b->vmm ? "vmm" : "ipc"); /* B_KIND */
    }
}

const struct record stat_holder_record = {stat_holder_fields, stat_holder_get};
const struct record stat_block_record = {stat_block_fields, stat_block_get};
