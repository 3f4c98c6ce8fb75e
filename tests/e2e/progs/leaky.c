/* leaky: programs that leave exported device memory held, one per kind of
 * leak the exit report names (tests/e2e/test_leaks.c). Like pair.c they know
 * nothing of the shim. Built with -rdynamic so that the call sites of the
 * report can name leaky_export_block and leaky_open_block.
 *
 *   leaky never-close SIZE        a child opens the parent's block and exits
 *   leaky open-twice SIZE         a child opens it twice, closes it once
 *   leaky exporter-killed SIZE    we open a child's block; the child is killed
 *   leaky unopened SIZE           we export a block nobody opens, free it, exit
 *   leaky limbo-grows SIZE        we export and free a block every 400 ms, ten
 *                                 times; nobody opens them (limbo grows)
 *   leaky opens-grow SIZE         a child opens one of our ten blocks every
 *                                 400 ms and closes none (its opens grow)
 * exporter-killed takes a third argument: how long to hold the dead
 * exporter's block, in ms (default 1200).
 *
 * Output: "exporter PID" and "importer PID" lines (who is who), "done".
 * Exit status 0, or 2 on a CUDA error. */
#include "api.h"
#include "hex.h"

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void fail(const char *what, int r)
{
    printf("error: %s failed with %d\n", what, r);
    fflush(stdout);
    exit(2);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* The frames the report must name: not inlined, in the dynamic symbol
 * table (-rdynamic, and default visibility despite -fvisibility=hidden). */
__attribute__((noinline, visibility("default"))) uint64_t
leaky_export_block(size_t size, unsigned char handle[64])
{
    uint64_t p = 0;
    int r = api.alloc(&p, size);
    if (r) fail("alloc", r);
    if ((r = api.get_handle(handle, p))) fail("get handle", r);
    return p;
}

__attribute__((noinline, visibility("default"))) uint64_t
leaky_open_block(const unsigned char handle[64])
{
    uint64_t p = 0;
    int r = api.open(&p, handle);
    if (r) fail("open", r);
    return p;
}

static pid_t spawn_self(char *const argv[], FILE **out)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) fail("readlink", -1);
    self[n] = 0; /* the real path, so that the child's command name is ours */
    int fds[2];
    if (pipe(fds)) fail("pipe", -1);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    pid_t pid;
    int r = posix_spawn(&pid, self, &fa, NULL, argv, environ);
    if (r) fail("spawn", r);
    close(fds[1]);
    *out = fdopen(fds[0], "r");
    return pid;
}

/* leaky --open HEX OPENS CLOSES: open the handle OPENS times, close CLOSES. */
static int opener(const char *hex, int opens, int closes)
{
    unsigned char h[64];
    if (from_hex(hex, h, 64)) fail("handle parse", -1);
    int r = api.init(0);
    if (r) fail("init", r);
    uint64_t p = 0;
    for (int i = 0; i < opens; i++)
        p = leaky_open_block(h);
    for (int i = 0; i < closes; i++)
        if ((r = api.close(p))) fail("close", r);
    printf("importer %d\n", (int)getpid());
    return 0;
}

/* leaky --export SIZE: export a block, print its handle, wait to be killed. */
static int exporter(size_t size)
{
    unsigned char h[64];
    char hex[129];
    int r = api.init(0);
    if (r) fail("init", r);
    leaky_export_block(size, h);
    to_hex(h, 64, hex);
    printf("%s\n", hex);
    fflush(stdout);
    for (;;)
        pause();
    return 0;
}

/* leaky --open-slowly HEX...: open each handle, 400 ms apart; close none. */
static int slow_opener(int n, char **hex)
{
    int r = api.init(0);
    if (r) fail("init", r);
    for (int i = 0; i < n; i++) {
        unsigned char h[64];
        if (from_hex(hex[i], h, 64)) fail("handle parse", -1);
        leaky_open_block(h);
        sleep_ms(400);
    }
    printf("importer %d\n", (int)getpid());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--open-slowly")) return slow_opener(argc - 2, argv + 2);
    if (argc == 5 && !strcmp(argv[1], "--open"))
        return opener(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "--export")) return exporter(strtoull(argv[2], NULL, 0));
    if (argc != 3 && argc != 4) {
        fprintf(
            stderr,
            "usage: leaky never-close|open-twice|exporter-killed|unopened|limbo-grows|opens-grow "
            "SIZE [MS]\n");
        return 2;
    }
    const char *mode = argv[1];
    size_t size = strtoull(argv[2], NULL, 0);
    int r = api.init(0);
    if (r) fail("init", r);
    unsigned char h[64];
    char hex[129], line[256];
    FILE *out;
    int st;
    if (!strcmp(mode, "never-close") || !strcmp(mode, "open-twice")) {
        uint64_t p = leaky_export_block(size, h);
        to_hex(h, 64, hex);
        printf("exporter %d\n", (int)getpid());
        char *args[] = {
            "leaky", "--open", hex, mode[0] == 'n' ? "1" : "2", mode[0] == 'n' ? "0" : "1", NULL};
        pid_t child = spawn_self(args, &out);
        while (fgets(line, sizeof line, out))
            fputs(line, stdout);
        waitpid(child, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) fail("importer", st);
        if ((r = api.free(p))) fail("free", r);
    } else if (!strcmp(mode, "exporter-killed")) {
        char sz[32];
        snprintf(sz, sizeof sz, "%zu", size);
        char *args[] = {"leaky", "--export", sz, NULL};
        pid_t child = spawn_self(args, &out);
        if (!fgets(line, sizeof line, out)) fail("exporter handle", -1);
        line[strcspn(line, "\n")] = 0;
        if (from_hex(line, h, 64)) fail("handle parse", -1);
        leaky_open_block(h);
        kill(child, SIGKILL);
        waitpid(child, &st, 0);
        /* Said once the exporter is dead: a caller may kill us now. */
        printf("exporter %d\nimporter %d\n", (int)child, (int)getpid());
        fflush(stdout);
        sleep_ms(argc == 4 ? atoi(argv[3]) : 1200); /* a dead exporter's block, held a while */
    } else if (!strcmp(mode, "unopened")) {
        uint64_t p = leaky_export_block(size, h);
        printf("exporter %d\n", (int)getpid());
        if ((r = api.free(p))) fail("free", r); /* in limbo: the hand-off is pending */
    } else if (!strcmp(mode, "opens-grow")) {
        enum { N = 10 };
        uint64_t p[N];
        static char hexes[N][129];
        char *args[N + 3] = {"leaky", "--open-slowly"};
        for (int i = 0; i < N; i++) {
            p[i] = leaky_export_block(size, h);
            to_hex(h, 64, hexes[i]);
            args[2 + i] = hexes[i];
        }
        args[N + 2] = NULL;
        printf("exporter %d\n", (int)getpid());
        pid_t child = spawn_self(args, &out);
        while (fgets(line, sizeof line, out))
            fputs(line, stdout);
        waitpid(child, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) fail("importer", st);
        for (int i = 0; i < N; i++)
            if ((r = api.free(p[i]))) fail("free", r);
    } else if (!strcmp(mode, "limbo-grows")) {
        printf("exporter %d\n", (int)getpid());
        for (int i = 0; i < 10; i++) {
            uint64_t p = leaky_export_block(size, h);
            if ((r = api.free(p))) fail("free", r);
            sleep_ms(400);
        }
    } else {
        fprintf(stderr, "leaky: unknown mode %s\n", mode);
        return 2;
    }
    printf("done\n");
    fflush(stdout);
    return 0;
}
