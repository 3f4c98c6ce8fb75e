/* test_records: what the death of a participant does to the registry's
 * records, at the record level (no CUDA): a dead importer's leases go in
 * every intent state; a dead exporter's blocks are orphaned while someone
 * holds them and recycled when the last lease goes; a new process's attach
 * sweeps the dead; a holder record whose pid lives but whose start time is
 * wrong is dead; a pid that cannot be checked counts as alive. Children are
 * plain fork()s that open their own view of the registry (their own
 * descriptor, hence their own lock bytes) and die by SIGKILL. */
#include "liveness.h"
#include "options.h"
#include "registry.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char domain[64];
static const struct reg_caps caps = {8, 16, 32};

static void setup(void)
{
    snprintf(domain, sizeof domain, "crash-records-%d", (int)getpid());
    setenv("IPCSHIM_LOG", "error", 1);
    setenv("IPCSHIM_REGISTRY_DIR", "/dev/shm", 1);
    options_reload();
}

static void teardown(void)
{
    registry_unlink(domain);
}

TestSuite(records, .init = setup, .fini = teardown, .timeout = 30);

static struct ipc_handle handle(unsigned seed)
{
    struct ipc_handle h;
    for (int i = 0; i < IPC_HANDLE_BYTES; i++)
        h.bytes[i] = (uint8_t)(seed * 37 + i);
    return h;
}

static void view(struct registry *r)
{
    cr_assert_eq(registry_open(r, domain, &caps), 0);
}

static int wait_for(pid_t pid)
{
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static uint32_t leases_of(struct registry *r, uint32_t holder)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->max_leases; i++)
        n += r->leases[i].intent != LEASE_FREE && r->leases[i].holder == holder;
    return n;
}

/* A child attaches, takes one lease on each block in the given intents, tells
 * us its holder index through a pipe, and is killed. */
static uint32_t importer_dies_holding(const uint32_t *blocks, const uint32_t *intents, int n)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct registry c;
        if (registry_open(&c, domain, &caps) || registry_lock(&c)) _exit(1);
        uint32_t me = reg_holder_attach(&c, 0xc0ffee);
        for (int i = 0; i < n; i++) {
            uint32_t li = reg_lease_create(&c, blocks[i], me);
            if (li == REG_NONE) _exit(2);
            c.leases[li].intent = intents[i];
        }
        registry_unlock(&c);
        if (write(p[1], &me, sizeof me) != sizeof me) _exit(3);
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    uint32_t me = REG_NONE;
    cr_assert_eq(read(p[0], &me, sizeof me), (ssize_t)sizeof me);
    cr_assert_eq(wait_for(pid), 128 + SIGKILL);
    close(p[0]), close(p[1]);
    return me;
}

Test(records, dead_importers_leases_go_in_every_intent)
{
    struct registry r;
    view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 1);
    uint32_t b[3];
    for (int i = 0; i < 3; i++) {
        struct ipc_handle h = handle((unsigned)i + 1);
        b[i] = reg_block_create(&r, &h, 0x1000u * (i + 1), 4096, 0, me, 1, IPC_KIND_LEGACY);
    }
    registry_unlock(&r);
    uint32_t intents[3] = {LEASE_OPENING, LEASE_OPEN, LEASE_CLOSING};
    uint32_t dead = importer_dies_holding(b, intents, 3);
    cr_assert_eq(registry_lock(&r), 0);
    cr_assert_eq(leases_of(&r, dead), 3);
    registry_unlock(&r); /* the sweep checks liveness first, then locks */
    cr_assert_eq(reg_sweep_dead(&r, me), 1, "the killed importer is dead");
    cr_assert_eq(registry_lock(&r), 0);
    cr_expect_eq(leases_of(&r, dead), 0, "its leases went, whatever their intent");
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(r.blocks[b[i]].state, BLOCK_LIVE, "the live exporter's blocks stay");
        cr_expect_eq(reg_block_leases(&r, b[i]), 0);
    }
    cr_expect_eq(r.holders[dead].state, HOLDER_FREE);
    registry_unlock(&r);
    registry_close(&r);
}

Test(records, dead_exporters_blocks_are_orphaned_then_recycled)
{
    int p[2], q[2]; /* child to parent, parent to child */
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(pipe(q), 0);
    pid_t pid = fork();
    if (pid == 0) { /* the exporter: two blocks, then killed */
        struct registry c;
        if (registry_open(&c, domain, &caps) || registry_lock(&c)) _exit(1);
        uint32_t me = reg_holder_attach(&c, 0xe);
        struct ipc_handle h1 = handle(10), h2 = handle(11);
        uint32_t b[2] = {reg_block_create(&c, &h1, 0x1000, 4096, 0, me, 1, IPC_KIND_LEGACY),
                         reg_block_create(&c, &h2, 0x2000, 4096, 0, me, 1, IPC_KIND_LEGACY)};
        registry_unlock(&c);
        if (write(p[1], b, sizeof b) != sizeof b) _exit(3);
        char go;
        if (read(q[0], &go, 1) != 1) _exit(4); /* until the importer holds one */
        kill(getpid(), SIGKILL);
        _exit(5);
    }
    uint32_t b[2];
    cr_assert_eq(read(p[0], b, sizeof b), (ssize_t)sizeof b);
    struct registry r;
    view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 2);
    uint32_t li = reg_lease_create(&r, b[0], me);
    r.leases[li].intent = LEASE_OPEN;
    registry_unlock(&r);
    cr_assert_eq(write(q[1], "g", 1), 1);
    cr_assert_eq(wait_for(pid), 128 + SIGKILL);

    cr_assert_eq(reg_sweep_dead(&r, me), 1);
    cr_assert_eq(registry_lock(&r), 0);
    cr_expect_eq(r.blocks[b[0]].state, BLOCK_ORPHANED,
                 "held: orphaned, so no new open can succeed");
    cr_expect_eq(r.blocks[b[1]].state, BLOCK_FREE, "held by nobody: recycled at once");
    struct ipc_handle h1 = handle(10);
    cr_expect_eq(reg_block_find(&r, &h1), b[0], "an orphan is still found (to refuse it)");
    cr_expect_eq(reg_lease_drop(&r, li), REG_NONE);
    cr_expect_eq(r.blocks[b[0]].state, BLOCK_FREE, "recycled with its last lease");
    cr_expect_eq(reg_block_find(&r, &h1), REG_NONE);
    registry_unlock(&r);
    registry_close(&r);
    close(p[0]), close(p[1]), close(q[0]), close(q[1]);
}

/* The leases of a dead holder go when the next process attaches, before any
 * collect: its start-up sweep (what ipc.c does before taking a slot) sees
 * the dead holder's byte unlocked. */
Test(records, attach_sweeps_the_dead)
{
    struct registry r;
    view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t exporter = reg_holder_attach(&r, 3);
    struct ipc_handle h = handle(20);
    uint32_t b = reg_block_create(&r, &h, 0x1000, 4096, 0, exporter, 1, IPC_KIND_LEGACY);
    registry_unlock(&r);
    uint32_t intents[1] = {LEASE_OPEN};
    uint32_t dead = importer_dies_holding(&b, intents, 1);

    pid_t pid = fork();
    if (pid == 0) { /* a newcomer: attaching is all it does */
        struct registry c;
        if (registry_open(&c, domain, &caps) || reg_sweep_dead(&c, REG_NONE) != 1 ||
            registry_lock(&c))
            _exit(1);
        uint32_t me = reg_holder_attach(&c, 4);
        registry_unlock(&c);
        _exit(me == REG_NONE ? 2 : 0);
    }
    cr_assert_eq(wait_for(pid), 0);
    cr_assert_eq(registry_lock(&r), 0);
    cr_expect_eq(leases_of(&r, dead), 0, "the newcomer's attach swept the dead importer");
    cr_expect_eq(r.holders[dead].state != HOLDER_ACTIVE ||
                     r.holders[dead].pid != r.holders[exporter].pid,
                 1);
    registry_unlock(&r);
    registry_close(&r);
}

/* Liveness: the lock byte is held (by another description of ours) and the
 * pid is ours, but the start time is not: pid reuse, hence dead. And a pid
 * that exists with the right start time and a held byte is alive. */
Test(records, forged_holder_with_wrong_start_time_is_dead)
{
    struct registry owner, judge;
    view(&owner);
    view(&judge); /* a second description: it sees owner's lock bytes */
    cr_assert_eq(registry_lock(&owner), 0);
    uint32_t f = reg_holder_attach(&owner, 5);
    registry_unlock(&owner);
    cr_assert_eq(registry_lock(&judge), 0);
    cr_expect(reg_holder_alive(&judge, f), "right pid, right start time, byte held: alive");
    judge.holders[f].start_time ^= 1;
    cr_expect(!reg_holder_alive(&judge, f),
              "a live pid with another start time is a reused pid: dead");
    judge.holders[f].start_time ^= 1;
    judge.holders[f].pid = 0x3ffffff0; /* no such process */
    cr_expect(!reg_holder_alive(&judge, f), "a pid that does not exist: dead");
    registry_unlock(&judge);
    registry_close(&judge);
    registry_close(&owner);
}

/* What cannot be found out counts as alive: a lock query that fails (here:
 * on a descriptor that is not open) says "held". */
Test(records, unknown_liveness_counts_as_alive)
{
    uint64_t start = 0;
    cr_assert_eq(liveness_start_time(getpid(), &start), 0);
    cr_expect(liveness_byte_locked(-1, 0), "a failed lock query reads as held");
    cr_expect(liveness_alive(-1, 0, getpid(), start), "so a live pid with its start time is alive");
    cr_expect(!liveness_alive(-1, 0, 0x3ffffff0, start), "but a pid known not to exist is dead");
}
