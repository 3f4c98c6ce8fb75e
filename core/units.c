/* units: sizes and ages as people read them; see units.h. The leak report
 * and ipcshim-stat print the same numbers the same way through these two. */
#include "units.h"

#include <stdio.h>

const char *units_format_bytes(uint64_t n, enum units_style style, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    const char *gap = style == UNITS_SPACED ? " " : "";
    if (n < 1024) {
        snprintf(buf, len, "%llu%s", (unsigned long long)n, style == UNITS_SPACED ? " bytes" : "B");
        return buf;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, len, "%.1f%s%s", v, gap, units[u]);
    return buf;
}

const char *units_format_age_ms(uint64_t ms, char *buf, size_t len)
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
