/* stat_fields: what ipcshim-stat shows of a snapshot, as one table per kind
 * of record (holders, blocks): for each field its text column (header and
 * width), its JSON key, how its value is written, for a holder the
 * OpenMetrics gauge it also is, and how to read it. The writers
 * (stat_print.c) only choose which fields, in which order, so that the text,
 * JSON and OpenMetrics outputs stay in step. Also the counts and ages all
 * three share. */
#ifndef STAT_FIELDS_H
#define STAT_FIELDS_H

#include "inspect.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern double stat_stale_s; /* --stale: a lease open longer is stale (seconds) */

/* Sizes and ages as the leak report writes them (core/units.c), compact. */
const char *stat_bytes(uint64_t n, char *buf, size_t len);
const char *stat_age(uint64_t ms, char *buf, size_t len);

/* Milliseconds from since_ns (monotonic) to the snapshot; 0 when unset. */
uint64_t stat_age_ms(const struct inspect_snapshot *s, uint64_t since_ns);

struct totals {
    uint32_t dead, live, limbo, orphaned, retired, opens, pool, vmm;
    uint64_t bytes, limbo_bytes, orphaned_bytes;
};

/* The snapshot's counts: dead holders, blocks by state and kind, opens. */
struct totals stat_totals(const struct inspect_snapshot *s);

/* Leases of holder slot h open for longer than --stale. */
uint32_t stat_stale_leases(const struct inspect_snapshot *s, uint32_t slot);

/* The command of holder h: /proc when alive, else what it recorded, or "-". */
const char *stat_holder_comm(const struct inspect_holder *h);

/* The exporting holder of b, or NULL when that process is gone. */
const struct inspect_holder *stat_exporter_of(const struct inspect_snapshot *s,
                                              const struct inspect_block *b);

/* How a field's value is written: text cell / JSON value / gauge value. */
enum vkind {
    V_NUM,       /* %llu / number / number */
    V_INT,       /* %lld (pid, device) / number */
    V_HEX,       /* JSON "0x..." (not in text) */
    V_BOOL,      /* "alive" or "dead" / true or false / 1 or 0 */
    V_STR,       /* the string / a JSON string */
    V_BYTES,     /* 1.5MiB / number of bytes / bytes */
    V_MS,        /* 3m07s / milliseconds / seconds */
    V_EXPORTER,  /* "PID" or "PID(dead)" or "gone" / {slot,pid,alive} or null */
    V_IMPORTERS, /* "PID(OPENS)..." / [{slot,pid,alive,opens,intent,open_age_ms}] */
};

/* A field's value, read from a record of the snapshot. */
struct val {
    bool null;     /* text "-", JSON null, gauge 0 */
    uint64_t n;    /* V_NUM, V_BOOL, V_HEX, V_BYTES, V_MS */
    int64_t i;     /* V_INT */
    const char *s; /* V_STR */
    const void *p; /* V_EXPORTER: the holder (NULL: gone); V_IMPORTERS: the block */
};

/* One field of a record: its text column (head NULL: never a column; the
 * width does not pad a row's last cell), its JSON key, how its value is
 * written, and for a holder the OpenMetrics gauge it also is. A field shown
 * two ways (limbo_bytes in BY PROCESS and LIMBO BY EXPORTER) is two rows. */
struct field {
    const char *head;
    int width;
    const char *key;
    enum vkind kind;
    const char *metric, *unit, *help;
};

/* A kind of record: its fields and how to read field f of one. A composite
 * text cell is written into buf. */
struct record {
    const struct field *fields;
    struct val (*get)(const struct inspect_snapshot *s, const void *rec, int f, char *buf,
                      size_t len);
};

/* Holder fields: JSON's "holders" order, then those only other views show. */
enum {
    H_SLOT,
    H_PID,
    H_ALIVE,
    H_COMMAND,
    H_ATTACHED,
    H_EXPORTS,
    H_IMPORTS,
    H_OPENS,
    H_LIMBO_BLOCKS,
    H_LIMBO_BYTES,
    H_RECORDED,
    H_EXPORTED,
    H_IMPORTED,
    H_DEAD_BLOCKS,
    H_DEAD_BYTES,
    H_STALE,
    H_LIMBO_CELL,
    H_ANY_COMMAND,
    H_LB_BLOCKS,
    H_LB_BYTES,
    H_LB_OLDEST,
    H_COUNT
};

/* Block fields, in JSON's "blocks" order: the one list that the enum and
 * stat_print.c's JSON view are made from (X is called with each name). */
/* clang-format off */
#define STAT_BLOCK_FIELDS(X) \
    X(SLOT) \
    X(GENERATION) \
    X(STATE) \
    X(DEVICE) \
    X(BASE) \
    X(SIZE) \
    X(EXPORTER) \
    X(PENDING) \
    X(EXPORT_AGE) \
    X(LIMBO_AGE) \
    X(IMPORTERS) \
    X(EXPORTER_PID) \
    X(EXPORTER_COMMAND) \
    X(EXPORTER_DEAD) \
    X(CLAIMED) \
    X(EXPIRED) \
    X(ORPHANED_AGE) \
    X(KIND)
/* clang-format on */
#define STAT_BLOCK_ENUM(name) B_##name,
enum { STAT_BLOCK_FIELDS(STAT_BLOCK_ENUM) B_COUNT };

extern const struct field stat_holder_fields[H_COUNT], stat_block_fields[B_COUNT];
extern const struct record stat_holder_record, stat_block_record;

#endif
