/* stat-scenario: builds a registry in a known state for the ipcshim-stat
 * tests, with core's own ipc_* functions (a fake device), in forked
 * processes that stay put until told to go.
 *
 *   stat-scenario leases DOMAIN
 *     exporter E: exports A (1 MiB, device 0), B (4096 B, device 1, a
 *       stream-ordered pool's pointer export) and C (8192 B, device 0);
 *       frees A and C while they are open, so both go to limbo; B stays
 *       live with its hand-off unclaimed.
 *     importer I: opens A in two contexts (lease count 2).
 *     importer D: opens A and C, then is killed with SIGKILL (a dead holder
 *       nobody has swept: the exporter runs no collector).
 *   stat-scenario orphan DOMAIN
 *     exporter X exports O (65536 B, device 0); importer I opens it; X is
 *     killed; I collects, which sweeps X: O is orphaned, I still holds it.
 *
 * Prints "NAME PID" lines for the processes, then "ready", then waits for a
 * line (or end of file) on stdin; then the children exit and the registry
 * is removed. Exit status 0, or 1 with a message when a step failed. */
#include "host.h"
#include "ipc.h"
#include "options.h"
#include "registry.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int fake_free(uint64_t base, int device, uint64_t ctx, uint64_t identity)
{
    (void)base, (void)device, (void)ctx, (void)identity;
    return 0;
}
static const struct host fake_host = {.free_block = fake_free};

static struct ipc_handle handle(unsigned seed)
{
    struct ipc_handle h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < IPC_HANDLE_BYTES; i++)
        h.bytes[i] = (uint8_t)(seed * 37 + i * 11 + 3);
    memcpy(h.bytes, &seed, sizeof seed);
    return h;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "stat-scenario: " __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                                   \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static void open_block(unsigned seed, uint64_t ctx, uint64_t ptr)
{
    struct ipc_handle h = handle(seed);
    struct ipc_open t;
    uint64_t got = 0;
    int rc = ipc_open_begin(&h, ctx, &t, &got);
    CHECK(rc == IPC_REAL, "open of block %u in context %llx gave %d", seed, (unsigned long long)ctx,
          rc);
    ipc_open_commit(&t, ptr);
}

static void export_block(unsigned seed, uint64_t base, uint64_t size, int device, int kind)
{
    struct ipc_handle h = handle(seed);
    int rc = ipc_export_identity(&h, base, size, device, 0xe0, 0, kind);
    CHECK(rc == 0, "export of block %u gave %d", seed, rc);
}

/* A child process: runs step(), reports on its pipe, then waits to be told
 * to go (any byte, or the pipe closing) and leaves without ipc_shutdown. */
struct child {
    pid_t pid;
    int go[2], done[2];
};

static void child_start(struct child *c, void (*step)(void))
{
    CHECK(pipe(c->go) == 0 && pipe(c->done) == 0, "pipe");
    c->pid = fork();
    CHECK(c->pid >= 0, "fork");
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the scenario */
        close(c->go[1]), close(c->done[0]);
        host_set(&fake_host);
        ipc_init();
        step();
        char ok = 'k', x;
        if (write(c->done[1], &ok, 1) != 1) _exit(1);
        if (read(c->go[0], &x, 1) < 0) _exit(1);
        _exit(0);
    }
    close(c->go[0]), close(c->done[1]);
    char got = 0;
    CHECK(read(c->done[0], &got, 1) == 1 && got == 'k', "a child failed its step");
}

static void child_kill(struct child *c)
{
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = -c->pid; /* remembered for printing */
}

/* Tells a child to go. A byte, not end of file: later children inherited
 * the write ends of earlier children's pipes. */
static void child_release(struct child *c)
{
    if (c->pid <= 0) return;
    char go = 'g';
    if (write(c->go[1], &go, 1) != 1) kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
}

/* Runs one more step in a fresh child that reports and exits at once. */
static void child_run(void (*step)(void))
{
    struct child c;
    child_start(&c, step);
    child_release(&c);
}

static struct child E, I, D, X;

static void importer_opens(void)
{
    open_block(1, 0x11, 0x7000000);
    open_block(1, 0x12, 0x8000000);
}

static void doomed_opens(void)
{
    open_block(1, 0x21, 0x9000000);
    open_block(3, 0x21, 0xa000000);
}

static void orphan_exports(void)
{
    export_block(9, 0x500000, 65536, 0, IPC_KIND_LEGACY);
}
static void orphan_opens(void)
{
    open_block(9, 0x31, 0xb000000);
}
/* Attaches (an open of a handle nobody exported), sweeps dead holders, and
 * leaves cleanly, so that it is not a holder itself afterwards. */
static void sweeper(void)
{
    struct ipc_handle h = handle(77);
    struct ipc_open t;
    uint64_t got = 0;
    int rc = ipc_open_begin(&h, 0x41, &t, &got);
    CHECK(rc == IPC_PASS, "open of an unknown handle gave %d", rc);
    ipc_collect();
    ipc_shutdown();
}

/* child_start for the exporter, whose step pauses halfway. */
static void exporter_start(void)
{
    CHECK(pipe(E.go) == 0 && pipe(E.done) == 0, "pipe");
    E.pid = fork();
    CHECK(E.pid >= 0, "fork");
    if (E.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(E.go[1]), close(E.done[0]);
        host_set(&fake_host);
        ipc_init();
        export_block(1, 0x100000, 1 << 20, 0, IPC_KIND_LEGACY);
        export_block(2, 0x300000, 4096, 1, IPC_KIND_POOL);
        export_block(3, 0x400000, 8192, 0, IPC_KIND_LEGACY);
        char ok = 'k', x;
        if (write(E.done[1], &ok, 1) != 1) _exit(1);
        if (read(E.go[0], &x, 1) != 1) _exit(1);
        CHECK(ipc_free(0x100000) == IPC_DONE, "free of A did not defer");
        CHECK(ipc_free(0x400000) == IPC_DONE, "free of C did not defer");
        if (write(E.done[1], &ok, 1) != 1) _exit(1);
        if (read(E.go[0], &x, 1) < 0) _exit(1);
        _exit(0);
    }
    close(E.go[0]), close(E.done[1]);
    char got = 0;
    CHECK(read(E.done[0], &got, 1) == 1 && got == 'k', "the exporter failed to export");
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "leases") && strcmp(argv[1], "orphan"))) {
        fprintf(stderr, "usage: stat-scenario leases|orphan DOMAIN\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("IPCSHIM_DOMAIN", argv[2], 1);
    setenv("IPCSHIM_COLLECTOR", "0", 1); /* nothing sweeps behind the test's back */
    setenv("IPCSHIM_LOG", "error", 1);
    setenv("IPCSHIM_MAX_HOLDERS", "16", 1);
    setenv("IPCSHIM_MAX_BLOCKS", "64", 1);
    setenv("IPCSHIM_MAX_LEASES", "128", 1);
    options_reload();

    if (!strcmp(argv[1], "leases")) {
        exporter_start();
        child_start(&I, importer_opens);
        child_start(&D, doomed_opens);
        char go = 'g', got = 0;
        CHECK(write(E.go[1], &go, 1) == 1, "pipe");
        CHECK(read(E.done[0], &got, 1) == 1 && got == 'k', "the exporter failed to free");
        child_kill(&D);
        printf("exporter %d\nimporter %d\ndead %d\n", (int)E.pid, (int)I.pid, (int)-D.pid);
    } else {
        child_start(&X, orphan_exports);
        child_start(&I, orphan_opens);
        child_kill(&X);
        child_run(sweeper);
        printf("dead-exporter %d\nimporter %d\n", (int)-X.pid, (int)I.pid);
    }
    printf("ready\n");
    char line[64];
    if (!fgets(line, sizeof line, stdin)) line[0] = 0;
    child_release(&E);
    child_release(&I);
    char name[128];
    if (registry_name(argv[2], name, sizeof name) == 0) shm_unlink(name);
    return 0;
}
