/* stat_print: ipcshim-stat's outputs of a snapshot -- text for people,
 * JSON (docs/ipcshim-stat.md, the stable one), the live leak report and
 * OpenMetrics -- all written to stdout from the fields of stat_fields.h. */
#ifndef STAT_PRINT_H
#define STAT_PRINT_H

#include "inspect.h"

#include <stdbool.h>

#define STAT_JSON_VERSION 1

void stat_print_text(const struct inspect_snapshot *s, const char *domain);
void stat_print_json(const struct inspect_snapshot *s, const char *domain);

/* --json when there is no snapshot to show: an object all the same, so that
 * a reader always gets JSON, with "error" (the reason also printed on
 * stderr) as its last key. A domain without a registry holds nothing: its
 * lists are empty and its totals zero (empty). A registry that cannot be
 * read, or --all with no registry at all (domain and registry null), has
 * only the keys known without reading one. */
void stat_print_json_error(const char *domain, const char *registry, const char *why, bool empty);

/* What each live process holds, the exit report's items seen from outside. */
void stat_print_leaks(const struct inspect_snapshot *s, const char *domain);

/* One OpenMetrics exposition for n snapshots (families are not repeated). */
void stat_print_prometheus(struct inspect_snapshot *snaps, const char *const *domains, int n);

#endif
