/* units: sizes and ages as people read them, for the leak report
 * (core/leak.c) and ipcshim-stat. Pure formatting: no state, no lock. */
#ifndef UNITS_H
#define UNITS_H

#include <stddef.h>
#include <stdint.h>

/* How a size is written: compact for tables ("512B", "1.5MiB"), spaced for
 * sentences ("512 bytes", "1.5 MiB"). */
enum units_style { UNITS_COMPACT, UNITS_SPACED };

/* n bytes in binary units, one decimal from 1 KiB up (KiB to PiB). Writes
 * into buf (32 bytes are enough) and returns it. */
const char *units_format_bytes(uint64_t n, enum units_style style, char *buf, size_t len);

/* An age of ms milliseconds: "950ms", "12.5s", "3m07s", "2h05m". Writes into
 * buf (32 bytes are enough) and returns it. */
const char *units_format_age_ms(uint64_t ms, char *buf, size_t len);

#endif
