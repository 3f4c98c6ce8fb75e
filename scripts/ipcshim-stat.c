/* ipcshim-stat: show what a registry holds -- processes, exported blocks,
 * who has them open, what waits in limbo -- without touching it.
 *
 * It attaches read-only (core/inspect.c: O_RDONLY, PROT_READ, no lock), so
 * it never changes the registry and can run while programs use it; a
 * snapshot may be torn when records change while it is copied. The text
 * layout is for people; --json (docs/ipcshim-stat.md) is the stable one.
 *
 * Exit status: 0 shown, 1 no registry or it cannot be read, 2 usage. */
#include "inspect.h"
#include "registry.h"
#include "stat_fields.h"
#include "stat_print.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: ipcshim-stat [--domain D | --all] [--json | --leaks | --prometheus]\n"
    "                    [--stale SECONDS] [--watch SECONDS [--count N]]\n"
    "       ipcshim-stat --list\n"
    "       ipcshim-stat --remove DOMAIN\n"
    "\n"
    "Show the ipcshim registry of one domain: the processes using it (pid,\n"
    "command, alive or dead), the exported blocks (exporter, device, size,\n"
    "state, importers and their open counts, age), and what waits in limbo,\n"
    "per exporter. Read-only: it never changes the registry.\n"
    "\n"
    "  -d, --domain D     the registry of domain D (default: $IPCSHIM_DOMAIN,\n"
    "                     else \"default\")\n"
    "  -j, --json         one JSON object per snapshot, on one line\n"
    "                     (format: docs/ipcshim-stat.md, man ipcshim-stat)\n"
    "  -w, --watch SECS   take a snapshot every SECS seconds until interrupted\n"
    "  -n, --count N      with --watch: stop after N snapshots\n"
    "  -a, --all          every domain of this user, one after the other\n"
    "  -L, --leaks        what each live process holds: mappings never closed,\n"
    "                     exports nobody opened, limbo (a live leak report)\n"
    "  -p, --prometheus   OpenMetrics text: per-process gauges and counters\n"
    "                     (for node_exporter's textfile collector)\n"
    "  -s, --stale SECS   a lease open longer than this is stale (default 300)\n"
    "  -r, --remove D     delete domain D's registry if no live process holds it\n"
    "  -l, --list         list the domains that have a registry for this user\n"
    "  -h, --help         show this help\n"
    "  -V, --version      show the version and the registry ABI it reads\n"
    "\n"
    "Exit status: 0 shown; 1 no registry, or it cannot be read; 2 bad usage.\n";

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig, stop = 1;
}

/* ---- domains ---------------------------------------------------------- */

/* Prints the domains with a registry of this user, one per line (or, when
 * inline, comma-separated after a prefix). Returns how many. */
static int list_domains(FILE *out, bool inline_list)
{
    char prefix[64], dirs[2][200];
    int n = 0, plen = snprintf(prefix, sizeof prefix, "ipcshim-%u-", (unsigned)geteuid());
    /* Where this user's registries are created now, and /dev/shm (older
     * registries, or a directory that went away). */
    registry_dir(dirs[0], sizeof dirs[0]);
    snprintf(dirs[1], sizeof dirs[1], "/dev/shm");
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !strcmp(dirs[0], dirs[1])) break;
        DIR *d = opendir(dirs[k]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, prefix, (size_t)plen) || !e->d_name[plen]) continue;
            if (strchr(e->d_name + plen, '~')) continue; /* a fallback name: same domain */
            if (inline_list)
                fprintf(out, "%s%s", n ? ", " : "", e->d_name + plen);
            else
                fprintf(out, "%s\n", e->d_name + plen);
            n++;
        }
        if (d) closedir(d);
    }
    return n;
}

/* The domains with a registry of this user, into names (at most max).
 * Returns how many. */
static int collect_domains(char (*names)[REG_DOMAIN_MAX + 1], int max)
{
    char prefix[64];
    int n = 0, plen = snprintf(prefix, sizeof prefix, "ipcshim-%u-", (unsigned)geteuid());
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        if (strncmp(e->d_name, prefix, (size_t)plen) || !e->d_name[plen]) continue;
        if (strlen(e->d_name + plen) > REG_DOMAIN_MAX) continue;
        snprintf(names[n++], REG_DOMAIN_MAX + 1, "%s", e->d_name + plen);
    }
    if (d) closedir(d);
    return n;
}

enum { MODE_TEXT, MODE_JSON, MODE_LEAKS, MODE_PROM };

/* --remove: unlink the registry of domain when no live process holds it. */
static int remove_domain(const char *domain)
{
    struct inspect_snapshot s;
    char why[512], name[128];
    int rc = inspect_snapshot(domain, &s, why, sizeof why);
    if (rc == -ENOENT) {
        fprintf(stderr, "ipcshim-stat: %s\n", why);
        return 1;
    }
    if (rc == 0) {
        char pids[256] = "";
        size_t len = 0;
        for (uint32_t i = 0; i < s.nholders && len < sizeof pids - 24; i++)
            if (s.holders[i].alive)
                len +=
                    (size_t)snprintf(pids + len, sizeof pids - len, " %d", (int)s.holders[i].pid);
        inspect_free(&s);
        if (len) {
            fprintf(stderr,
                    "ipcshim-stat: domain %s is in use by live process(es)%s; not removed\n",
                    domain, pids);
            return 1;
        }
    }
    /* A registry we cannot read (another ABI, never initialised) holds no
     * process we can see: it is removed too, which is what the shim's own
     * message for those cases advises. */
    registry_name(domain, name, sizeof name);
    if (shm_unlink(name) != 0) {
        fprintf(stderr, "ipcshim-stat: cannot remove /dev/shm%s: %s\n", name, strerror(errno));
        return 1;
    }
    printf("removed /dev/shm%s%s%s\n", name, rc ? " (" : "", rc ? "it could not be read)" : "");
    return 0;
}

static int show(const char *domain, int mode)
{
    struct inspect_snapshot s;
    char why[512];
    int rc = inspect_snapshot(domain, &s, why, sizeof why);
    if (rc) {
        fprintf(stderr, "ipcshim-stat: %s\n", why);
        if (mode == MODE_JSON) {
            stat_print_json_error(domain, s.name[0] ? s.name : NULL, why, rc == -ENOENT);
            fflush(stdout);
        }
        if (rc == -ENOENT) {
            fprintf(stderr, "ipcshim-stat: registries of this user: ");
            if (!list_domains(stderr, true)) fprintf(stderr, "none");
            fprintf(stderr,
                    " (choose one with --domain, or set IPCSHIM_DOMAIN as the programs do)\n");
        }
        return 1;
    }
    if (mode == MODE_JSON)
        stat_print_json(&s, domain);
    else if (mode == MODE_LEAKS)
        stat_print_leaks(&s, domain);
    else if (mode == MODE_PROM)
        stat_print_prometheus(&s, &domain, 1);
    else
        stat_print_text(&s, domain);
    fflush(stdout);
    inspect_free(&s);
    return 0;
}

/* --all: every domain of this user; one exposition for --prometheus. */
static int show_all(int mode)
{
    static char names[256][REG_DOMAIN_MAX + 1];
    int n = collect_domains(names, 256), status = 0;
    if (mode == MODE_PROM) {
        struct inspect_snapshot *snaps = calloc((size_t)n + 1, sizeof *snaps);
        const char **doms = calloc((size_t)n + 1, sizeof *doms);
        int k = 0;
        char why[512];
        for (int i = 0; snaps && doms && i < n; i++) {
            if (inspect_snapshot(names[i], &snaps[k], why, sizeof why) == 0)
                doms[k++] = names[i];
            else
                fprintf(stderr, "ipcshim-stat: %s\n", why);
        }
        if (snaps && doms) stat_print_prometheus(snaps, doms, k);
        if (n && !k) status = 1;
        for (int i = 0; snaps && i < k; i++)
            inspect_free(&snaps[i]);
        free(snaps);
        free((void *)doms);
        fflush(stdout);
        return status;
    }
    /* A registry that cannot be read (another release's, one being created)
     * is named on stderr; the status is 1 only when none could be read. */
    int shown = 0;
    if (!n && mode == MODE_JSON)
        stat_print_json_error(NULL, NULL, "no registry for this user", false);
    else if (!n)
        printf("no registry for this user\n");
    for (int i = 0; i < n; i++) {
        if (shown && mode != MODE_JSON) printf("\n");
        if (show(names[i], mode) == 0) shown++;
    }
    return n && !shown ? 1 : status;
}

/* ---- command line ----------------------------------------------------- */

struct cli {
    const char *domain, *remove;
    bool list, all;
    int mode;
    double watch;
    long max_count;
};

/* A number of seconds, or -1 after the message for a bad value. */
static double seconds_arg(const char *opt, const char *arg, double min, bool above, double max)
{
    char *end;
    double v = strtod(arg, &end);
    if (end != arg && !*end && (above ? v > min : v >= min) && v <= max) return v;
    fprintf(stderr, "ipcshim-stat: --%s takes a number of seconds %s %g, not \"%s\"\n", opt,
            above ? ">" : ">=", min, arg);
    return -1;
}

/* An option that getopt refused: a long option is named as typed (--watch, not -w). */
static int bad_option(char **argv)
{
    if (optopt && strncmp(argv[optind - 1], "--", 2) != 0)
        fprintf(stderr, "ipcshim-stat: option -%c is unknown or needs a value (see --help)\n",
                optopt);
    else
        fprintf(stderr, "ipcshim-stat: option %s is unknown or needs a value (see --help)\n",
                argv[optind - 1]);
    return 2;
}

static const struct option longs[] = {
    {"domain", required_argument, NULL, 'd'},
    {"json", no_argument, NULL, 'j'},
    {"watch", required_argument, NULL, 'w'},
    {"count", required_argument, NULL, 'n'},
    {"list", no_argument, NULL, 'l'},
    {"help", no_argument, NULL, 'h'},
    {"all", no_argument, NULL, 'a'},
    {"leaks", no_argument, NULL, 'L'},
    {"prometheus", no_argument, NULL, 'p'},
    {"stale", required_argument, NULL, 's'},
    {"remove", required_argument, NULL, 'r'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

/* The options into cli. Returns -1 to go on, else the exit status (help,
 * version: 0; bad usage: 2, after the message). */
static int parse_options(int argc, char **argv, struct cli *cli)
{
    bool json = false, leaks = false, prom = false;
    int c;
    opterr = 0; /* our own messages, with our own name */
    while ((c = getopt_long(argc, argv, "d:jw:n:lhVaLps:r:", longs, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'd':
            cli->domain = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'w':
            if ((cli->watch = seconds_arg("watch", optarg, 0, true, 86400)) < 0) return 2;
            break;
        case 'n':
            cli->max_count = strtol(optarg, &end, 10);
            if (end == optarg || *end || cli->max_count < 1) {
                fprintf(stderr, "ipcshim-stat: --count takes a number >= 1, not \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'l':
            cli->list = true;
            break;
        case 'a':
            cli->all = true;
            break;
        case 'L':
            leaks = true;
            break;
        case 'p':
            prom = true;
            break;
        case 'r':
            cli->remove = optarg;
            break;
        case 's':
            if ((stat_stale_s = seconds_arg("stale", optarg, 0, false, INFINITY)) < 0) return 2;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'V':
            printf("ipcshim-stat %s (registry ABI %u, JSON version %d)\n", STAT_VERSION, REG_ABI,
                   STAT_JSON_VERSION);
            return 0;
        default:
            return bad_option(argv);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ipcshim-stat: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return 2;
    }
    if (cli->max_count && !cli->watch) {
        fprintf(stderr, "ipcshim-stat: --count needs --watch\n");
        return 2;
    }
    if (json + leaks + prom > 1) {
        fprintf(stderr, "ipcshim-stat: choose one of --json, --leaks, --prometheus\n");
        return 2;
    }
    cli->mode = json ? MODE_JSON : leaks ? MODE_LEAKS : prom ? MODE_PROM : MODE_TEXT;
    return -1;
}

/* A domain name a registry can have; else 2 after the message. */
static int check_domain(const char *domain)
{
    char name[128];
    if (registry_name(domain, name, sizeof name) == 0) return 0;
    fprintf(stderr, "ipcshim-stat: \"%s\" is not a domain name (1-64 of A-Z a-z 0-9 . _ -)\n",
            domain);
    return 2;
}

/* --watch: a snapshot every cli->watch seconds until a signal or --count. */
static int watch_loop(const struct cli *cli)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    bool tty = isatty(STDOUT_FILENO);
    double watch = cli->watch;
    int status = 0;
    for (long n = 0; !stop && (!cli->max_count || n < cli->max_count); n++) {
        if (n) {
            struct timespec ts = {(time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9)};
            while (!stop && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
            if (stop) break;
        }
        if (cli->mode == MODE_TEXT || cli->mode == MODE_LEAKS) {
            time_t now = time(NULL);
            struct tm tm;
            char when[32] = "";
            if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%H:%M:%S", &tm);
            if (tty)
                printf("\033[H\033[2J");
            else if (n)
                printf("\n");
            printf("---- %s, every %gs (Ctrl-C to stop)\n", when, watch);
        }
        status = cli->all ? show_all(cli->mode) : show(cli->domain, cli->mode);
        fflush(stdout); /* each snapshot whole, into a pipe or file too (tail -f) */
    }
    return status;
}

int main(int argc, char **argv)
{
    struct cli cli = {.domain = getenv("IPCSHIM_DOMAIN")};
    if (!cli.domain || !*cli.domain) cli.domain = "default";
    int rc = parse_options(argc, argv, &cli);
    if (rc >= 0) return rc;
    if (cli.remove) return check_domain(cli.remove) ? 2 : remove_domain(cli.remove);
    if (!cli.all && check_domain(cli.domain)) return 2;
    if (cli.list) {
        list_domains(stdout, false);
        return 0;
    }
    if (!cli.watch) return cli.all ? show_all(cli.mode) : show(cli.domain, cli.mode);
    return watch_loop(&cli);
}
