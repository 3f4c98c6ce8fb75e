/* hex.h: IPC handles as hex text, for passing them on a command line or a
 * pipe between the test programs (pair, and tests/crash's soak and misc). */
#ifndef E2E_HEX_H
#define E2E_HEX_H

#include <stdio.h>
#include <string.h>

/* Writes 2n hex digits and a NUL to out. */
static inline void to_hex(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

/* Parses exactly 2n hex digits; 0, or -1 on anything else. */
static inline int from_hex(const char *s, unsigned char *b, size_t n)
{
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        b[i] = (unsigned char)v;
    }
    return 0;
}

#endif
