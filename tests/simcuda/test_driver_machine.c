/*
 * test_driver_machine.c: tests of the simulated machine across processes:
 * the allocation table's capacity (SIMCUDA_MAX_ALLOCS, the creator's
 * choice), opens after a free, fork children, poisoning, the allocations of
 * killed, zombie and exiting owners, and the last process out removing the
 * machine (races of processes coming and going, concurrent first inits).
 * Part of the simcuda-driver program (test_driver.h; suite setup in
 * test_driver.c).
 */
#include "test_driver.h"

/* ---- the allocation table's capacity (SIMCUDA_MAX_ALLOCS) ---- */

Test(simcuda, allocation_table_capacity_is_the_limit)
{
    setenv(SIMCUDA_ENV_MAX_ALLOCS, "64", 1);
    OK(init_on(0));
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.max_allocs, 64);
    CUdeviceptr p[64], q, r;
    for (int i = 0; i < 64; i++)
        OK(cuMemAlloc(&p[i], 512));
    cr_assert_eq(free_bytes(), (64u << 20) - 64 * 512, "the device has room left");
    FAILS(cuMemAlloc(&q, 512), CUDA_ERROR_OUT_OF_MEMORY); /* the table is full */
    FAILS(cuMemAllocManaged(&q, 512, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 64);
    OK(cuMemFree(p[10]));
    OK(cuMemAlloc(&q, 512)); /* a freed entry is reused */
    FAILS(cuMemAlloc(&r, 512), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemFree(q));
    OK(cuMemAllocManaged(&q, 512, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemFree(q));
    for (int i = 0; i < 64; i++)
        if (i != 10) OK(cuMemFree(p[i]));
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 0);
}

struct table_case {
    const char *value; /* SIMCUDA_MAX_ALLOCS, or NULL for unset */
    const char *suffix;
    uint64_t want;
};

/* In a fresh child: cuInit on machine <test machine>-<suffix> with
 * SIMCUDA_MAX_ALLOCS = c->value, and check the table's capacity. */
static int child_table_capacity(void *arg)
{
    const struct table_case *c = arg;
    char name[200];
    snprintf(name, sizeof(name), "%s-%s", g_machine, c->suffix);
    setenv(SIMCUDA_ENV_MACHINE, name, 1);
    if (c->value)
        setenv(SIMCUDA_ENV_MAX_ALLOCS, c->value, 1);
    else
        unsetenv(SIMCUDA_ENV_MAX_ALLOCS);
    CHILD_OK(cuInit(0));
    struct simcuda_stats s;
    simcuda_stats(&s);
    if (s.max_allocs != c->want) {
        fprintf(stderr, "SIMCUDA_MAX_ALLOCS=%s: capacity %llu, want %llu\n",
                c->value ? c->value : "(unset)", (unsigned long long)s.max_allocs,
                (unsigned long long)c->want);
        return 1;
    }
    return 0;
}

Test(simcuda, allocation_table_capacity_from_the_creator)
{
    const struct table_case cases[] = {
        {NULL, "unset", SIM_DEFAULT_ALLOCS},
        {"1", "one", 1},
        {"4K", "k", 4096},
        {"16M", "max", SIM_MAX_ALLOCS},
        {"0", "zero", SIM_DEFAULT_ALLOCS}, /* out of range: ignored with a warning */
        {"16777217", "over", SIM_DEFAULT_ALLOCS},
        {"lots", "junk", SIM_DEFAULT_ALLOCS},
        {"100", "join", 100},
        {"1M", "join", 100}, /* a machine that exists keeps the creator's capacity */
    };
    cr_assert_geq(SIM_DEFAULT_ALLOCS, 2u << 20, "1 M live blocks fit by default, with room");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_eq(run_child(child_table_capacity, (void *)&cases[i]), 0, "case %zu", i);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[200];
        snprintf(name, sizeof(name), "%s-%s", g_machine, cases[i].suffix);
        simcuda_unlink_machine(name);
    }
}

static int child_open_read(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    unsigned v = 0;
    CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    CHILD_OK(cuMemcpyDtoH(&v, p, sizeof(v)));
    CHILD_EXPECT(v == 0x33333333u);
    CHILD_OK(cuIpcCloseMemHandle(p));
    return 0;
}

Test(simcuda, allocation_table_holds_more_than_the_old_fixed_size, .timeout = 60)
{
    enum { N = 262145 }; /* one past the table of earlier builds (262,144 entries) */
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "256M", 1);
    OK(init_on(0));
    CUdeviceptr p = 0;
    for (int i = 0; i < N; i++)
        OK(cuMemAlloc(&p, 512));
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, N);
    /* The last one is table entry 262,144: its handle opens in another process. */
    OK(cuMemsetD32(p, 0x33333333u, 128));
    struct ipc_args a;
    OK(cuIpcGetMemHandle(&a.h, p));
    cr_assert_eq(run_child(child_open_read, &a), 0);
}

static int child_open_fails(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    CUresult r = cuIpcOpenMemHandle(&p, a->h, 0);
    if (r != CUDA_ERROR_INVALID_VALUE) {
        fprintf(stderr, "open of a dead handle returned %d\n", (int)r);
        return 1;
    }
    return 0;
}

Test(simcuda, ipc_open_after_free_fails)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "4K", 1); /* room for one: the offset must be reused */
    OK(init_on(0));
    struct ipc_args a;
    CUdeviceptr p, q;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&a.h, p));
    OK(cuMemFree(p));
    cr_assert_eq(run_child(child_open_fails, &a), 0);
    OK(cuMemAlloc(&q, 4096)); /* same offset, new serial: the old handle stays dead */
    cr_assert_eq(q, p);
    OK(cuIpcGetMemHandle(&a.h, q)); /* (exported again, under a new handle) */
    CUipcMemHandle fresh = a.h;
    OK(cuMemFree(q));
    a.h = fresh;
    cr_assert_eq(run_child(child_open_fails, &a), 0);
}

Test(simcuda, fork_child_must_reinit)
{
    OK(init_on(0));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int n;
        CUdeviceptr p;
        int bad = cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED ||
                  cuMemAlloc(&p, 1) != CUDA_ERROR_NOT_INITIALIZED;
        bad |= cuInit(0) != CUDA_SUCCESS;
        bad |= cuMemAlloc(&p, 1) != CUDA_ERROR_INVALID_CONTEXT; /* parent's context is gone */
        _exit(bad);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static int child_poison_reader(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    unsigned v[1024];
    CHILD_OK(cuMemcpyDtoH(v, p, sizeof(v)));
    CHILD_EXPECT(v[0] == 0x5a5a5a5au);
    char c = 'o';
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1); /* parent has freed */
    CHILD_OK(cuMemcpyDtoH(v, p, sizeof(v)));        /* still mapped here */
    for (int i = 0; i < 1024; i++)
        CHILD_EXPECT(v[i] == SIMCUDA_POISON_WORD);
    CHILD_EXPECT(((volatile unsigned *)(uintptr_t)p)[17] == SIMCUDA_POISON_WORD);
    CHILD_OK(cuIpcCloseMemHandle(p));
    return 0;
}

Test(simcuda, poison_on_free_is_visible_to_importer)
{
    OK(init_on(0));
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    cr_assert_eq(pipe(a.to_child), 0);
    CUdeviceptr p, q;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemAlloc(&q, 4096));
    OK(cuMemsetD32(p, 0x5a5a5a5au, 1024));
    OK(cuIpcGetMemHandle(&a.h, p));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_poison_reader(&a));
    char c;
    cr_assert_eq(read(a.to_parent[0], &c, 1), 1);
    OK(cuMemFree(p));
    OK(cuMemFree(q)); /* never exported: not poisoned */
    write_all(a.to_child[1], "f", 1);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.proc_frees, 2);
    cr_assert_eq(s.proc_poisoned_frees, 1);
}

static int child_alloc_and_hang(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p[10];
    for (int i = 0; i < 10; i++)
        CHILD_OK(cuMemAlloc(&p[i], 1 << 20));
    CHILD_OK(cuMemsetD32(p[3], 0x77777777u, 1024));
    CUipcMemHandle h;
    CHILD_OK(cuIpcGetMemHandle(&h, p[3]));
    CHILD_EXPECT(write(a->to_parent[1], &h, sizeof(h)) == sizeof(h));
    for (;;)
        pause();
}

Test(simcuda, allocations_of_a_killed_process_are_released)
{
    OK(init_on(0));
    size_t baseline = free_bytes();
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_alloc_and_hang(&a));
    CUipcMemHandle h;
    cr_assert_eq(read(a.to_parent[0], &h, sizeof(h)), (ssize_t)sizeof(h));
    cr_assert_eq(free_bytes(), baseline - (10u << 20));
    CUdeviceptr imp;
    OK(cuIpcOpenMemHandle(&imp, h, 0));
    unsigned v;
    OK(cuMemcpyDtoH(&v, imp, 4));
    cr_assert_eq(v, 0x77777777u);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    cr_assert_eq(free_bytes(), baseline);
    OK(cuMemcpyDtoH(&v, imp, 4)); /* our mapping survives, over poisoned memory */
    cr_assert_eq(v, SIMCUDA_POISON_WORD);
    /* Open here already: it opens again, the same pointer, as NVIDIA's driver
     * did after the exporter was SIGKILLed (docs/gpu-validation.md). */
    CUdeviceptr again;
    OK(cuIpcOpenMemHandle(&again, h, 0));
    cr_assert_eq(again, imp);
    OK(cuIpcCloseMemHandle(imp));
    OK(cuIpcCloseMemHandle(imp));
    FAILS(cuIpcOpenMemHandle(&again, h, 0), CUDA_ERROR_INVALID_VALUE); /* closed: owner dead */
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.proc_swept, 10);
    cr_assert_eq(s.live_allocs, 0);
}

/* Forks child_alloc_and_hang; returns its pid and sets *h to its handle. */
static pid_t start_hanging_owner(CUipcMemHandle *h)
{
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) _exit(child_alloc_and_hang(&a));
    cr_assert_eq(read(a.to_parent[0], h, sizeof(*h)), (ssize_t)sizeof(*h));
    close(a.to_parent[0]);
    close(a.to_parent[1]);
    return pid;
}

Test(simcuda, ipc_open_checks_only_the_owner_it_opens)
{
    OK(init_on(0));
    CUipcMemHandle ha, hb;
    pid_t a = start_hanging_owner(&ha), b = start_hanging_owner(&hb);
    struct simcuda_stats s;
    simcuda_stats(&s); /* reads, never sweeps */
    cr_assert_eq(s.live_allocs, 20);
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
    CUdeviceptr imp;
    OK(cuIpcOpenMemHandle(&imp, ha, 0)); /* A lives: B is not looked at */
    OK(cuIpcCloseMemHandle(imp));
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 20, "an open of a live owner's block sweeps nobody");
    FAILS(cuIpcOpenMemHandle(&imp, hb, 0), CUDA_ERROR_INVALID_VALUE); /* B's owner is dead */
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 10, "opening a dead owner's block sweeps the dead");
    cr_assert_eq(s.proc_swept, 10);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    FAILS(cuIpcOpenMemHandle(&imp, ha, 0), CUDA_ERROR_INVALID_VALUE);
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 0);
    cr_assert_eq(s.proc_swept, 20);
}

Test(simcuda, zombie_owner_counts_as_dead)
{
    OK(init_on(0));
    size_t baseline = free_bytes();
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_alloc_and_hang(&a));
    CUipcMemHandle h;
    cr_assert_eq(read(a.to_parent[0], &h, sizeof(h)), (ssize_t)sizeof(h));
    kill(pid, SIGKILL);
    siginfo_t si;
    waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT); /* dead but not reaped */
    cr_assert_eq(free_bytes(), baseline);
    waitpid(pid, NULL, 0);
}

static int child_exit_normally(void *arg)
{
    (void)arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    CHILD_OK(cuMemAlloc(&p, 4 << 20));
    exit(0); /* runs the library destructor */
}

Test(simcuda, normal_exit_releases_allocations)
{
    OK(init_on(0));
    size_t baseline = free_bytes();
    cr_assert_eq(run_child(child_exit_normally, NULL), 0);
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 0); /* released by the child itself, not by a sweep */
    cr_assert_eq(free_bytes(), baseline);
}

/* ---- the last process out removes the machine ---- */

/* How many of this test's machine files (segment, device 0, managed pool)
 * exist. */
static int machine_files(void)
{
    static const char *const suffix[] = {"", "-dev0", "-managed"};
    int n = 0;
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char path[256];
        struct stat st;
        snprintf(path, sizeof(path), "/dev/shm/simcuda-%u-%s%s", (unsigned)geteuid(), g_machine,
                 suffix[i]);
        n += stat(path, &st) == 0;
    }
    return n;
}

/* Allocates, writes and reads back a block on device 0 (cuInit first). */
static int use_machine(void)
{
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    unsigned v = 0;
    CHILD_OK(cuMemAlloc(&p, 1 << 20));
    CHILD_OK(cuMemsetD32(p, 0x5a5a5a5au, 1 << 18));
    CHILD_OK(cuMemcpyDtoH(&v, p + 4096, sizeof(v)));
    CHILD_EXPECT(v == 0x5a5a5a5au);
    return 0;
}

static int child_use_and_exit(void *arg)
{
    (void)arg;
    if (use_machine()) return 1;
    exit(0); /* runs the library destructor */
}

/* Attaches, says so on fds[1], waits for a byte (or EOF) on fds[2], leaves. */
static int child_hold(void *arg)
{
    const int *fds = arg;
    if (use_machine()) return 1;
    write_all(fds[1], "a", 1);
    char c;
    (void)!read(fds[2], &c, 1);
    exit(0);
}

Test(simcuda, last_process_out_removes_the_machine)
{
    /* This process never attaches: its children are the machine's only
     * processes. */
    cr_assert_eq(run_child(child_use_and_exit, NULL), 0);
    cr_assert_eq(machine_files(), 0, "the last process out removed the machine");

    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    int fds[3] = {-1, up[1], down[0]};
    fflush(NULL);
    pid_t holder = fork();
    cr_assert_neq(holder, -1);
    if (holder == 0) _exit(child_hold(fds));
    close(up[1]);
    close(down[0]);
    char c;
    cr_assert_eq(read(up[0], &c, 1), 1, "the holder attached");
    cr_assert_eq(machine_files(), 3);
    cr_assert_eq(run_child(child_use_and_exit, NULL), 0);
    cr_assert_eq(machine_files(), 3, "kept while another process is attached");
    write_all(down[1], "x", 1);
    int st;
    cr_assert_eq(waitpid(holder, &st, 0), holder);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert_eq(machine_files(), 0, "removed by the holder, the last one out");
    close(up[0]);
    close(down[1]);
}

/* The grandchild of child_map_then_orphan: it inherited its parent's mapping
 * of the machine without registering, and its parent (the machine's only
 * holder) has left and removed the machine. */
static int orphan_attach(int go)
{
    char c;
    CHILD_EXPECT(read(go, &c, 1) == 0); /* EOF: the parent is gone */
    CHILD_EXPECT(machine_files() == 0);
    if (use_machine()) return 1; /* drops the removed machine, makes a new one */
    CHILD_EXPECT(machine_files() == 3);
    struct simcuda_stats s;
    simcuda_stats(&s);
    CHILD_EXPECT(s.live_allocs == 1); /* the new machine holds only its own block */
    return 0;
}

static int child_map_then_orphan(void *arg)
{
    const int *result = arg;
    if (use_machine()) return 1;
    int go[2];
    CHILD_EXPECT(pipe(go) == 0);
    fflush(NULL);
    pid_t q = fork();
    CHILD_EXPECT(q != -1);
    if (q == 0) {
        close(go[1]);
        char rc = (char)orphan_attach(go[0]);
        write_all(result[1], &rc, 1);
        exit(0);
    }
    close(go[0]);
    exit(0); /* the last holder out: removes the machine the grandchild maps */
}

Test(simcuda, attach_to_a_removed_machine_opens_the_name_again)
{
    int result[2];
    cr_assert_eq(pipe(result), 0);
    cr_assert_eq(run_child(child_map_then_orphan, result), 0);
    close(result[1]);
    char rc = 1, c;
    cr_assert_eq(read(result[0], &rc, 1), 1, "the grandchild reported");
    cr_assert_eq(rc, 0, "the grandchild attached to a new machine");
    cr_assert_eq(read(result[0], &c, 1), 0); /* EOF: the grandchild is gone */
    close(result[0]);
    cr_assert_eq(machine_files(), 0, "and removed it on its way out");
}

static int child_churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 25; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) _exit(child_use_and_exit(NULL));
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "churn: round %d failed\n", i);
            return 1;
        }
    }
    return 0;
}

Test(simcuda, processes_coming_and_going_race_the_removal, .timeout = 60)
{
    /* Four lines of short-lived processes: attaches race the last one out's
     * removal; every attach must find a usable machine. */
    enum { N = 4 };
    pid_t pids[N];
    fflush(NULL);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        cr_assert_neq(pids[i], -1);
        if (pids[i] == 0) _exit(child_churn(NULL));
    }
    for (int i = 0; i < N; i++) {
        int st;
        cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "line %d", i);
    }
    cr_assert_eq(machine_files(), 0, "the last one out removed the machine");
}

static int child_init(void *arg)
{
    (void)arg;
    setenv(SIMCUDA_ENV_DEVICES, "3", 1);
    CHILD_OK(cuInit(0));
    int n;
    CHILD_OK(cuDeviceGetCount(&n));
    CUuuid u;
    CHILD_OK(cuDeviceGetUuid(&u, 0));
    return n == 3 ? 0 : 1;
}

Test(simcuda, concurrent_first_init_creates_one_machine, .timeout = 60)
{
    /* Eight processes race to create the machine; all must attach to one. */
    enum { N = 8 };
    pid_t pids[N];
    fflush(NULL);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0) _exit(child_init(NULL));
    }
    for (int i = 0; i < N; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    setenv(SIMCUDA_ENV_DEVICES, "1", 1); /* the existing machine's geometry wins */
    OK(cuInit(0));
    int n;
    OK(cuDeviceGetCount(&n));
    cr_assert_eq(n, 3);
}
