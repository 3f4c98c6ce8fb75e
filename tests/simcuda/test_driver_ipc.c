/*
 * test_driver_ipc.c: tests of the simulated driver's legacy IPC: handles in
 * one process and across processes, SIMCUDA_FREE_WHILE_MAPPED=keep and
 * poison, and the table of IPC opens in force, opened and closed without
 * the machine lock (races with the owner's free, importers killed mid-open
 * or mid-close, a full table). Part of the simcuda-driver program
 * (test_driver.h; suite setup in test_driver.c).
 */
#include "test_driver.h"

/* ---- IPC within one process ---- */

static int handles_equal(const CUipcMemHandle *x, const CUipcMemHandle *y)
{
    return memcmp(x, y, sizeof(*x)) == 0;
}

Test(simcuda, ipc_handles_of_one_allocation_are_equal)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "4K", 1); /* room for one: the offset must be reused */
    OK(init_on(0));
    CUdeviceptr p, q;
    CUipcMemHandle h1, h2, h3;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&h1, p));
    OK(cuIpcGetMemHandle(&h2, p + 1000)); /* interior pointer */
    cr_assert(handles_equal(&h1, &h2));
    OK(cuMemFree(p));
    FAILS(cuIpcGetMemHandle(&h3, p), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc(&q, 4096));
    cr_assert_eq(q, p);
    OK(cuIpcGetMemHandle(&h3, q));
    cr_assert_not(handles_equal(&h1, &h3), "a reused offset must give a new handle");
    FAILS(cuIpcGetMemHandle(NULL, q), CUDA_ERROR_INVALID_VALUE);
    int x;
    FAILS(cuIpcGetMemHandle(&h3, (CUdeviceptr)(uintptr_t)&x), CUDA_ERROR_INVALID_VALUE);
}

Test(simcuda, ipc_open_in_exporter_and_garbage_handles_fail)
{
    OK(init_on(0));
    CUdeviceptr p, o;
    CUipcMemHandle h, bad;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&h, p));
    FAILS(cuIpcOpenMemHandle(&o, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
          CUDA_ERROR_INVALID_CONTEXT);
    memset(&bad, 0, sizeof(bad));
    FAILS(cuIpcOpenMemHandle(&o, bad, 0), CUDA_ERROR_INVALID_VALUE);
    srand(7);
    for (int i = 0; i < 1000; i++) {
        for (size_t k = 0; k < sizeof(bad); k++)
            bad.reserved[k] = (char)rand();
        FAILS(cuIpcOpenMemHandle(&o, bad, 0), CUDA_ERROR_INVALID_VALUE);
    }
    bad = h;
    bad.reserved[20] ^= 1; /* one flipped bit */
    FAILS(cuIpcOpenMemHandle(&o, bad, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuIpcOpenMemHandle(NULL, h, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuIpcOpenMemHandle(&o, h, 0x100), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE); /* never opened */
}

/* ---- IPC across processes ---- */

static int child_open_twice(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p1, p2;
    CHILD_OK(cuIpcOpenMemHandle(&p1, a->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHILD_OK(cuIpcOpenMemHandle(&p2, a->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHILD_EXPECT(p1 == p2);
    unsigned v[4];
    CHILD_OK(cuMemcpyDtoH(v, p1 + 16, sizeof(v)));
    CHILD_EXPECT(v[0] == 0x11111111u && v[3] == 0x11111111u);
    CUdeviceptr base;
    size_t size;
    CHILD_OK(cuMemGetAddressRange(&base, &size, p1 + 100));
    CHILD_EXPECT(base == p1 && size == 4096);
    unsigned type;
    CHILD_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p1 + 1));
    CHILD_EXPECT(type == CU_MEMORYTYPE_DEVICE);
    CHILD_EXPECT(cuMemFree(p1) == CUDA_ERROR_INVALID_VALUE); /* not ours to free */
    CHILD_OK(cuMemsetD32(p1, 0x22222222u, 1024));
    CHILD_OK(cuIpcCloseMemHandle(p1));
    CHILD_OK(cuMemcpyDtoH(v, p1, 4)); /* still open once */
    CHILD_OK(cuIpcCloseMemHandle(p1));
    CHILD_EXPECT(cuIpcCloseMemHandle(p1) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(cuMemcpyDtoH(v, p1, 4) == CUDA_ERROR_INVALID_VALUE); /* closed */
    CHILD_OK(cuIpcOpenMemHandle(&p2, a->h, 0));                       /* reopen after full close */
    struct simcuda_stats st;
    simcuda_stats(&st);
    CHILD_EXPECT(st.proc_ipc_opens == 3 && st.proc_ipc_closes == 2);
    return 0;
}

Test(simcuda, ipc_open_in_another_process)
{
    OK(init_on(0));
    struct ipc_args a;
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD32(p, 0x11111111u, 1024));
    OK(cuIpcGetMemHandle(&a.h, p));
    cr_assert_eq(run_child(child_open_twice, &a), 0);
    unsigned v;
    OK(cuMemcpyDtoH(&v, p + 4092, 4)); /* the child's write; exporter unaffected */
    cr_assert_eq(v, 0x22222222u);
    OK(cuMemFree(p));
}

/* ---- SIMCUDA_FREE_WHILE_MAPPED=keep ---- */

/* Opens the handle, checks the data, reports 'o'; after the parent's free
 * ('f') checks the data again and that the freed block cannot be opened a
 * second time, then closes unless a->hold (then waits to be killed). */
struct keep_args {
    struct ipc_args ipc;
    int hold;
};

static int child_keep_reader(void *arg)
{
    struct keep_args *k = arg;
    struct ipc_args *a = &k->ipc;
    CHILD_OK(init_on(0));
    CUdeviceptr p, again;
    CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    unsigned v[1024];
    char c = 'o';
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1); /* parent has freed */
    CHILD_OK(cuMemcpyDtoH(v, p, sizeof(v)));
    for (int i = 0; i < 1024; i++)
        CHILD_EXPECT(v[i] == 0x5a5a5a5au);
    CHILD_EXPECT(cuIpcOpenMemHandle(&again, a->h, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    if (k->hold)
        for (;;)
            pause();
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1);
    CHILD_OK(cuIpcCloseMemHandle(p));
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1); /* stay alive until the parent looked */
    return 0;
}

static pid_t start_keep_reader(struct keep_args *k, CUdeviceptr *p)
{
    cr_assert_eq(pipe(k->ipc.to_parent), 0);
    cr_assert_eq(pipe(k->ipc.to_child), 0);
    OK(cuMemAlloc(p, 4096));
    OK(cuMemsetD32(*p, 0x5a5a5a5au, 1024));
    OK(cuIpcGetMemHandle(&k->ipc.h, *p));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_keep_reader(k));
    char c;
    cr_assert_eq(read(k->ipc.to_parent[0], &c, 1), 1);
    return pid;
}

Test(simcuda, keep_mode_free_while_mapped_keeps_the_pages_until_the_last_close)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "8K", 1); /* room for two 4 KiB blocks */
    OK(init_on(0));
    struct keep_args k = {.hold = 0};
    CUdeviceptr p, q, r;
    pid_t pid = start_keep_reader(&k, &p);
    size_t before = free_bytes();
    OK(cuMemFree(p));
    FAILS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* freed for its owner */
    cr_assert_eq(free_bytes(), before, "a kept block stays charged");
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 1);
    cr_assert_eq(s.machine_kept_frees, 1);
    cr_assert_eq(s.proc_poisoned_frees, 0);
    OK(cuMemAlloc(&q, 4096));
    cr_assert_neq(q, p, "the kept range must not be reused");
    FAILS(cuMemAlloc(&r, 4096), CUDA_ERROR_OUT_OF_MEMORY);
    char c = 'f';
    write_all(k.ipc.to_child[1], &c, 1); /* the child reads intact data */
    cr_assert_eq(read(k.ipc.to_parent[0], &c, 1), 1);
    write_all(k.ipc.to_child[1], &c, 1); /* now close */
    cr_assert_eq(read(k.ipc.to_parent[0], &c, 1), 1);
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0, "the last close releases the kept block");
    OK(cuMemAlloc(&r, 4096));
    cr_assert_eq(r, p, "the range is free again");
    write_all(k.ipc.to_child[1], &c, 1);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

Test(simcuda, keep_mode_importer_death_releases_the_kept_block)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init_on(0));
    struct keep_args k = {.hold = 1};
    CUdeviceptr p;
    size_t start = free_bytes();
    pid_t pid = start_keep_reader(&k, &p);
    OK(cuMemFree(p));
    char c = 'f';
    write_all(k.ipc.to_child[1], &c, 1);
    cr_assert_eq(read(k.ipc.to_parent[0], &c, 1), 1);
    cr_assert_lt(free_bytes(), start);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    cr_assert_eq(free_bytes(), start, "the sweep of the dead importer releases the block");
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0);
    cr_assert_eq(s.machine_poisoned_frees, 1, "really released at last, poisoned as exported");
}

Test(simcuda, poison_mode_is_the_default_and_releases_at_once)
{
    OK(init_on(0));
    struct keep_args k = {.hold = 1};
    CUdeviceptr p;
    size_t start = free_bytes();
    pid_t pid = start_keep_reader(&k, &p);
    OK(cuMemFree(p));
    cr_assert_eq(free_bytes(), start, "released at once although mapped");
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0);
    cr_assert_eq(s.proc_poisoned_frees, 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- IPC open and close without the machine lock ---- */

/* This test's machine segment, mapped a second time (coherent with the
 * library's own mapping), to look at the table of opens or to play a
 * process that dies in the middle of an open or a close. */
static struct sim_machine *map_segment(void)
{
    char path[200];
    snprintf(path, sizeof(path), "/simcuda-%u-%s", (unsigned)geteuid(), g_machine);
    int fd = shm_open(path, O_RDWR, 0);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = fstat(fd, &st) == 0
                  ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static struct sim_map *segment_rows(struct sim_machine *m)
{
    return (struct sim_map *)((uint8_t *)m + m->off_maps);
}

/* Rows of the table of opens that are claimed (holder != 0). */
static unsigned claimed_rows(struct sim_machine *m)
{
    unsigned n = 0;
    for (uint32_t r = 0; r < m->maps_hw; r++)
        n += __atomic_load_n(&segment_rows(m)[r].holder, __ATOMIC_SEQ_CST) != 0;
    return n;
}

enum { RACE_BLOCKS = 64, RACE_RACERS = 6 };
#define RACE_WORD 0x5a5a5a5au

/* Shared between the parent and the children of the races below. */
struct race {
    CUipcMemHandle h[RACE_BLOCKS];
    int ready;     /* children that opened at least once */
    int freed;     /* the parent freed every block */
    int verified;  /* the holder child checked its opens after the frees */
    long opens_ok; /* opens that succeeded in the racers */
    long opens_refused;
};

/* Whether the 4 KiB at p still hold the pattern (not poisoned, not
 * reused): its first and last words (a release poisons every word). */
static int block_intact(CUdeviceptr p)
{
    unsigned first = 0, last = 0;
    return cuMemcpyDtoH(&first, p, 4) == CUDA_SUCCESS &&
           cuMemcpyDtoH(&last, p + 4092, 4) == CUDA_SUCCESS && first == RACE_WORD &&
           last == RACE_WORD;
}

/* Opens and closes the first block whose open was not refused yet, over
 * and over, until every block's open is refused (the parent frees them in
 * order, so all racers hammer the block being freed); an open that
 * succeeds must see the bytes until its close. */
static int child_racer(void *arg)
{
    struct race *r = arg;
    alarm(20); /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    long ok = 0, refused = 0;
    for (int j = 0, first = 1; j < RACE_BLOCKS;) {
        CUdeviceptr p;
        CUresult rc = cuIpcOpenMemHandle(&p, r->h[j], 0);
        if (rc == CUDA_ERROR_INVALID_VALUE) {
            j++;
            refused++;
            continue;
        }
        CHILD_OK(rc);
        ok++;
        CHILD_EXPECT(block_intact(p));
        if (ok % 7 == 0) sched_yield(); /* hold it across a reschedule now and then */
        CHILD_EXPECT(block_intact(p));
        CHILD_OK(cuIpcCloseMemHandle(p));
        if (first) {
            first = 0;
            __atomic_fetch_add(&r->ready, 1, __ATOMIC_SEQ_CST);
        }
    }
    __atomic_fetch_add(&r->opens_ok, ok, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&r->opens_refused, refused, __ATOMIC_SEQ_CST);
    return 0;
}

/* Opens every block, waits for the parent's frees, checks the bytes are
 * still there, then closes: the last close of each block is one of these
 * or a racer's. */
static int child_holder(void *arg)
{
    struct race *r = arg;
    alarm(20); /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    CUdeviceptr p[RACE_BLOCKS];
    for (int j = 0; j < RACE_BLOCKS; j++)
        CHILD_OK(cuIpcOpenMemHandle(&p[j], r->h[j], 0));
    __atomic_fetch_add(&r->ready, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&r->freed, __ATOMIC_SEQ_CST))
        usleep(1000);
    for (int j = 0; j < RACE_BLOCKS; j++)
        CHILD_EXPECT(block_intact(p[j]));
    __atomic_store_n(&r->verified, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&r->verified, __ATOMIC_SEQ_CST) != 2) /* the parent looked */
        usleep(1000);
    for (int j = 0; j < RACE_BLOCKS; j++)
        CHILD_OK(cuIpcCloseMemHandle(p[j]));
    return 0;
}

/* In keep mode, frees RACE_BLOCKS exported blocks one by one while
 * RACE_RACERS children open and close the block being freed (opens in
 * flight: publishing, re-reading, backing out; closes racing the free's
 * scan), with (hold) or without a child that keeps every block open
 * across the frees. Every block must be released exactly once, never
 * while an open that succeeded still maps it, and every row given back. */
static void race_frees(int hold, int racers)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init_on(0));
    size_t start = free_bytes();
    struct race *r =
        mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(r, MAP_FAILED);
    CUdeviceptr p[RACE_BLOCKS];
    for (int j = 0; j < RACE_BLOCKS; j++) {
        OK(cuMemAlloc(&p[j], 4096));
        OK(cuMemsetD32(p[j], RACE_WORD, 1024));
        OK(cuIpcGetMemHandle(&r->h[j], p[j]));
    }
    pid_t pids[RACE_RACERS + 1];
    int n = racers + (hold != 0);
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        cr_assert_neq(pids[i], -1);
        if (pids[i] == 0) _exit(i == racers ? child_holder(r) : child_racer(r));
    }
    while (__atomic_load_n(&r->ready, __ATOMIC_SEQ_CST) < n)
        usleep(1000);
    for (int j = 0; j < RACE_BLOCKS; j++) {
        usleep(1000);
        OK(cuMemFree(p[j]));
    }
    struct simcuda_stats s;
    if (hold) {
        simcuda_stats(&s);
        cr_assert_eq(s.machine_kept, RACE_BLOCKS, "the holder child still maps every block");
        cr_assert_eq(s.machine_kept_frees, RACE_BLOCKS);
        cr_assert_eq(s.machine_poisoned_frees, 0, "nothing released while mapped");
        cr_assert_eq(start - free_bytes(), (size_t)RACE_BLOCKS * 4096, "kept blocks stay charged");
        __atomic_store_n(&r->freed, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&r->verified, __ATOMIC_SEQ_CST) != 1)
            usleep(1000);
        __atomic_store_n(&r->verified, 2, __ATOMIC_SEQ_CST);
    }
    for (int i = 0; i < n; i++) {
        int st;
        cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d failed", i);
    }
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0, "the last closes released every kept block");
    cr_assert_eq(s.machine_poisoned_frees, RACE_BLOCKS, "each block released exactly once");
    cr_assert_eq(s.live_allocs, 0);
    cr_assert_eq(free_bytes(), start);
    cr_assert_eq(r->opens_refused, racers * RACE_BLOCKS);
    struct sim_machine *m = map_segment();
    cr_assert_not_null(m);
    cr_assert_eq(claimed_rows(m), 0, "every row was given back");
    cr_log_info("racers: %ld opens, %ld refused; frees kept: %lu", r->opens_ok, r->opens_refused,
                (unsigned long)s.machine_kept_frees);
}

Test(simcuda, keep_mode_lock_free_opens_and_closes_race_the_owners_free)
{
    race_frees(0, 2);
}

Test(simcuda, keep_mode_lock_free_race_with_a_holder_keeps_until_the_last_close)
{
    race_frees(1, RACE_RACERS);
}

/* Plays an importer killed at every point of the lock-free protocol: it
 * holds block 0 open (an open in force), leaves a row claimed but never
 * published (killed inside an open), and "closes" block 1 only half: the
 * row's serial cleared, the row not given back and the kept block not
 * released (killed inside a close). Then it dies without its destructor. */
static int child_dies_mid_protocol(void *arg)
{
    struct ipc_args *a = arg; /* a[0], a[1]: the two blocks */
    alarm(20);                /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    CUdeviceptr p0, p1;
    CHILD_OK(cuIpcOpenMemHandle(&p0, a[0].h, 0));
    CHILD_OK(cuIpcOpenMemHandle(&p1, a[1].h, 0));
    char c = 'o';
    CHILD_EXPECT(write(a[0].to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a[0].to_child[0], &c, 1) == 1); /* both freed (kept) */
    struct sim_machine *m = map_segment();
    CHILD_EXPECT(m != NULL);
    struct sim_holder *h = (struct sim_holder *)((uint8_t *)m + m->off_holders);
    uint32_t k = 0;
    while (k < m->holder_hw && h[k].pid != getpid())
        k++;
    CHILD_EXPECT(k < m->holder_hw);
    struct sim_map *rows = segment_rows(m);
    struct { /* the handle's first fields (README, "IPC") */
        uint32_t magic;
        uint16_t abi, device;
        uint32_t index;
    } h1;
    memcpy(&h1, &a[1].h, sizeof(h1));
    uint32_t half = UINT32_MAX, spare = UINT32_MAX;
    for (uint32_t r = 0; r < m->max_maps && spare == UINT32_MAX; r++) {
        if (half == UINT32_MAX && rows[r].holder == k + 1 && rows[r].index == h1.index &&
            rows[r].serial != 0) {
            __atomic_store_n(&rows[r].serial, 0, __ATOMIC_SEQ_CST); /* the close's CAS */
            half = r;
        } else if (half != UINT32_MAX && rows[r].holder == 0 && r >= m->maps_hw) {
            m->maps_hw = r + 1; /* a claim: raise maps_hw, then the holder word */
            __atomic_store_n(&rows[r].holder, k + 1, __ATOMIC_SEQ_CST);
            spare = r;
        }
    }
    CHILD_EXPECT(half != UINT32_MAX && spare != UINT32_MAX);
    CHILD_EXPECT(write(a[0].to_parent[1], &c, 1) == 1);
    for (;;)
        pause(); /* killed */
}

Test(simcuda, keep_mode_sweep_of_an_importer_killed_mid_open_or_mid_close)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init_on(0));
    size_t start = free_bytes();
    struct ipc_args a[2];
    CUdeviceptr p[2];
    cr_assert_eq(pipe(a[0].to_parent), 0);
    cr_assert_eq(pipe(a[0].to_child), 0);
    for (int j = 0; j < 2; j++) {
        OK(cuMemAlloc(&p[j], 4096));
        OK(cuIpcGetMemHandle(&a[j].h, p[j]));
    }
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) _exit(child_dies_mid_protocol(a));
    char c;
    cr_assert_eq(read(a[0].to_parent[0], &c, 1), 1);
    OK(cuMemFree(p[0]));
    OK(cuMemFree(p[1]));
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 2);
    write_all(a[0].to_child[1], &c, 1);
    cr_assert_eq(read(a[0].to_parent[0], &c, 1), 1, "the child left its rows half done");
    struct sim_machine *m = map_segment();
    cr_assert_not_null(m);
    cr_assert_eq(claimed_rows(m), 3, "an open in force, a half close, a claim never published");
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 2, "a half-done close released nothing");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert_eq(free_bytes(), start, "the sweep of the dead importer released both blocks");
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0);
    cr_assert_eq(s.machine_poisoned_frees, 2, "each released once");
    cr_assert_eq(claimed_rows(m), 0, "the sweep gave every row of the dead importer back");
}

/* Opens one handle until the machine-wide table of opens is full. */
static int child_fill_table(void *arg)
{
    struct ipc_args *a = arg;
    alarm(20); /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    CUdeviceptr p = 0, q;
    for (unsigned i = 0; i < SIM_MAX_MAPS; i++)
        CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    CHILD_EXPECT(cuIpcOpenMemHandle(&q, a->h, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_OK(cuIpcCloseMemHandle(p));
    CHILD_OK(cuIpcOpenMemHandle(&q, a->h, 0)); /* one row free again */
    CHILD_EXPECT(q == p);
    CHILD_EXPECT(cuIpcOpenMemHandle(&q, a->h, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    for (unsigned i = 0; i < SIM_MAX_MAPS; i++)
        CHILD_OK(cuIpcCloseMemHandle(p));
    CHILD_EXPECT(cuIpcCloseMemHandle(p) == CUDA_ERROR_INVALID_VALUE);
    return 0;
}

Test(simcuda, full_table_of_opens_gives_out_of_memory)
{
    OK(init_on(0));
    struct ipc_args a;
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&a.h, p));
    cr_assert_eq(run_child(child_fill_table, &a), 0);
    struct sim_machine *m = map_segment();
    cr_assert_not_null(m);
    cr_assert_eq(m->maps_hw, SIM_MAX_MAPS);
    cr_assert_eq(claimed_rows(m), 0);
    OK(cuMemFree(p));
}
