/* log: prefixed, leveled, rate-limited lines; see log.h. Safe before options
 * are read (the default level is warn) and from any thread. */
#include "log.h"
#include "options.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

enum { RATE_WINDOW_S = 60, RATE_PER_WINDOW = 5 };

static int level = LOG_WARN;
static int fd = STDERR_FILENO;
static const char *names[] = {"error", "warn", "info", "debug"};

void log_configure(int new_level, const char *file)
{
    level = new_level;
    if (file && *file) {
        int f = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (f >= 0)
            fd = f;
        else
            log_msg(LOG_WARN, "cannot open IPCSHIM_LOG_FILE=%s; logging to stderr", file);
    }
}

bool log_enabled(int l)
{
    return l <= level;
}

static void vlog_named(const char *name, const char *fmt, va_list ap)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "ipcshim[%d]: %s: ", (int)getpid(), name);
    n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t ignored = write(fd, line, (size_t)n);
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

void log_msg(int l, const char *fmt, ...)
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
