/* log: prefixed, leveled, rate-limited lines; see log.h. Safe before options
 * are read (the default level is warn) and from any thread. A log file is an
 * owned_file (checked by identity before each line); no control character
 * of a message reaches the log (a value from the environment may hold a
 * newline that would forge a line of its own). */
#include "log.h"
#include "owned_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { RATE_WINDOW_S = 60, RATE_PER_WINDOW = 5 };

int log_level = LOG_WARN;
static struct owned_file file = {.fd = -1}; /* IPCSHIM_LOG_FILE; stderr while closed */
static const char *names[] = {"error", "warn", "info", "debug"};

void log_configure(int new_level, const char *path)
{
    __atomic_store_n(&log_level, new_level, __ATOMIC_RELAXED);
    if (path && *path && file.fd < 0) {
        int rc = owned_file_open(&file, path);
        if (rc)
            log_msg(LOG_WARN, "cannot open IPCSHIM_LOG_FILE=%s (%s); logging to stderr", path,
                    rc == -EINVAL ? "not a regular file" : strerror(-rc));
    }
}

/* Copies text into out (room for len bytes), each control byte written as
 * \xNN; returns the bytes written. */
static size_t escape(char *out, size_t len, const char *text)
{
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c && n + 4 < len; c++) {
        if (*c < 0x20 || *c == 0x7f)
            n += (size_t)snprintf(out + n, len - n, "\\x%02x", *c);
        else
            out[n++] = (char)*c;
    }
    return n;
}

static void vlog_named(const char *name, const char *fmt, va_list ap)
{
    char text[1024], line[1024 + 64];
    vsnprintf(text, sizeof text, fmt, ap);
    int n = snprintf(line, sizeof line, "ipcshim[%d]: %s: ", (int)getpid(), name);
    n += (int)escape(line + n, sizeof line - (size_t)n - 1, text);
    line[n++] = '\n';
    ssize_t ignored = file.fd >= 0 && owned_file_write(&file, line, (size_t)n) >= 0
                          ? 0
                          : write(STDERR_FILENO, line, (size_t)n);
    (void)ignored;
}

static void vlog(int l, const char *fmt, va_list ap)
{
    vlog_named(names[l], fmt, ap);
}

void log_report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog_named("report", fmt, ap);
    va_end(ap);
}

void(log_msg)(int l, const char *fmt, ...)
{
    if (!log_enabled(l)) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(l, fmt, ap);
    va_end(ap);
}

void log_once(int *flag, int l, const char *fmt, ...)
{
    if (!log_enabled(l) || __atomic_exchange_n(flag, 1, __ATOMIC_RELAXED)) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(l, fmt, ap);
    va_end(ap);
}

void log_rated(struct log_rate *rate, int l, const char *fmt, ...)
{
    if (!log_enabled(l)) return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    /* Races between threads only miscount a line or two; that is fine here. */
    if (now.tv_sec - rate->window_start >= RATE_WINDOW_S) {
        if (rate->dropped) log_msg(l, "(%ld similar messages suppressed)", rate->dropped);
        rate->window_start = now.tv_sec;
        rate->printed = rate->dropped = 0;
    }
    if (rate->printed++ >= RATE_PER_WINDOW) {
        rate->dropped++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vlog(l, fmt, ap);
    va_end(ap);
}
