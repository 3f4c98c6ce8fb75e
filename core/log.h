/* log: the library's only output. Every line is "ipcshim[PID]: level: text",
 * written with one write(2) to stderr or IPCSHIM_LOG_FILE. The levels below
 * are also the indices of the "log" option's choices (options.def). A warning that may repeat goes
 * through log_once() or LOG_RATE so that a hot path cannot flood the host's stderr. */
#ifndef LOG_H
#define LOG_H

#include <stdbool.h>

/* Levels, in the order of the "log" option's choices (options.def). */
enum { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Set the level and destination ("" = stderr). Called by options. */
void log_configure(int level, const char *file);

/* The level in effect (log_configure's); read it through log_enabled. */
extern int log_level;

/* True when messages of this level are printed. Inline: the hot paths'
 * debug lines must cost a compare when debug is off. */
static inline bool log_enabled(int level)
{
    return level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

/* A line printed whatever the level, labelled "report" (the IPCSHIM_STATS
 * exit summary). */
void log_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print one line at the given level, if enabled (checked inline, before the
 * arguments are passed). */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_msg(level, ...) (log_enabled(level) ? log_msg(level, __VA_ARGS__) : (void)0)

/* Print at most once per process for this *flag (a static int at the call site). */
void log_once(int *flag, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Print at most once per process from this call site. */
#define LOG_ONCE(level, ...)                                                                       \
    do {                                                                                           \
        static int log_once_flag_;                                                                 \
        log_once(&log_once_flag_, level, __VA_ARGS__);                                             \
    } while (0)

/* Print from this call site at most a few times a minute; says how many were dropped. */
struct log_rate {
    long window_start, printed, dropped;
};
void log_rated(struct log_rate *rate, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define LOG_RATE(level, ...)                                                                       \
    do {                                                                                           \
        static struct log_rate log_rate_;                                                          \
        log_rated(&log_rate_, level, __VA_ARGS__);                                                 \
    } while (0)

#endif
