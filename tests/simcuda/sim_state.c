/*
 * sim_state.c: the shared simulated machine (see sim_state.h for the layout
 * and its invariants).
 *
 * Creation races are settled by O_EXCL: the winner sizes and initialises the
 * segment, creates the pool files and then publishes `ready`; everybody
 * else waits (bounded) for `ready` and checks owner, mode, magic, ABI and
 * size before trusting it. Each pool (a device's memory, or the managed
 * pool) is sub-allocated in 512-byte granules with a next-fit search over a
 * bitmap, so alloc and free cost a short scan from the hint in the common
 * case; a pointer maps back to its table entry through the start bitmap and
 * start_entry, without touching the table. Managed residency is bookkeeping
 * only (the bytes never move): moving an allocation onto a device that
 * lacks room evicts that device's least recently used managed allocations
 * (a scan of the table per eviction). Processes are tracked in a holder table; the allocations of a
 * holder that is gone (no such pid, a different start time, or a zombie) are swept: at attach, on
 * cuMemGetInfo, before an allocation failure is reported, and on an IPC open of a block whose owner
 * is gone (an open checks that owner only). A table of IPC opens in
 * force tells an owner's free whether someone still maps the block; in keep mode
 * (SIMCUDA_FREE_WHILE_MAPPED=keep, chosen by the creator) such a block outlives the free until its
 * last open goes. IPC opens and closes keep that table with atomics, without the machine mutex
 * (the real driver does them in the kernel); the handshake with the owner's free is at
 * sim_owner_release_locked, in sim_map.c with the table. The last holder to leave removes the
 * machine's files (sim_detach; the handshake with a process that is joining is at sim_attach). This
 * file knows nothing about CUDA types.
 */
#include "sim_state.h"
#include "sim_state_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct sim_machine *sim_m;
struct sim_proc_counters sim_counters;

static size_t g_map_size;
static dev_t g_seg_dev; /* the segment file this process mapped (its name may move on) */
static ino_t g_seg_ino;
static char g_name[128];
static pid_t g_pid;      /* pid that attached; 0 = not attached (or a fork child) */
static uint64_t g_start; /* its start time */
static uint32_t g_holder = SIM_NO_INDEX;
static uint8_t *_Atomic g_win[SIM_POOLS];
static pthread_mutex_t g_win_lock = PTHREAD_MUTEX_INITIALIZER;

/* This process's own LIVE allocations, by table index: what a pointer query
 * (sim_own_find) reads instead of the shared entry, so that it takes no
 * machine mutex. Process-local (a private anonymous mapping of max_allocs
 * records, touched only where this process allocated). A record is written
 * only by this process: published under the machine mutex when its
 * allocation is made (own_note) and withdrawn when the owner lets go of it
 * (sim_own_forget, in sim_owner_release_locked). `serial` is the record's version,
 * a seqlock whose odd state is 0: the writer stores 0 and a release fence
 * before the other fields, then the allocation's serial with release; a
 * reader loads serial (acquire), the fields, an acquire fence, and serial
 * again, and trusts the fields only when both loads agree and are not 0.
 * Serials are never reused, so a record withdrawn and rewritten between the
 * two loads cannot pass. `pid` makes a fork child ignore its parent's
 * records (its copy of the mapping). 48 bytes. */
struct own_rec {
    uint64_t serial;
    uint64_t offset;
    uint64_t size;
    uint64_t ctx_id;
    uint64_t pool_id; /* SIM_F_POOL: its pool's machine-wide id */
    int32_t pid;
    uint8_t pool;
    uint8_t home;
    uint16_t flags; /* SIM_OWN_FLAGS only: the ones that never change */
};
#define SIM_OWN_FLAGS (SIM_F_MANAGED | SIM_F_POOL)
_Static_assert(SIM_POOLS <= 256 && SIM_MAX_DEVICES <= 256, "pool and home fit a byte");
static struct own_rec *g_own;
static uint32_t g_own_cap;

#define WAIT_STEP_NS 1000000L /* 1 ms */
#define WAIT_STEPS 5000       /* 5 s for a creator to publish the machine */

static void fork_child(void)
{
    /* The child keeps the mappings but is a new process: it must cuInit
     * again to get a holder slot of its own. */
    g_pid = 0;
    g_holder = SIM_NO_INDEX;
    pthread_mutex_init(&g_win_lock, NULL);
    memset(&sim_counters, 0, sizeof(sim_counters));
    /* g_own is kept: the parent's records carry the parent's pid. */
}

__attribute__((constructor)) static void sim_state_init(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

static uint64_t round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

static void sleep_step(void)
{
    struct timespec ts = {0, WAIT_STEP_NS};
    nanosleep(&ts, NULL);
}

void sim_object_name(char *buf, size_t len, const char *name, int dev)
{
    char clean[101];
    size_t i;
    for (i = 0; name[i] && i < sizeof(clean) - 1; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '_' || c == '.';
        clean[i] = ok ? c : '_';
    }
    clean[i] = '\0';
    if (dev < 0)
        snprintf(buf, len, "/simcuda-%u-%s", (unsigned)geteuid(), clean);
    else if (dev == SIM_POOL_MANAGED)
        snprintf(buf, len, "/simcuda-%u-%s-managed", (unsigned)geteuid(), clean);
    else
        snprintf(buf, len, "/simcuda-%u-%s-dev%d", (unsigned)geteuid(), clean, dev);
}

int sim_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    case 't':
    case 'T':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (shift && *end == 'i') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0' || (shift && v > (~0ull >> shift))) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

uint64_t sim_proc_start(pid_t pid, int *zombie)
{
    char path[64], buf[1024];
    *zombie = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int saved = errno;
    close(fd);
    if (n <= 0) {
        errno = saved;
        return 0;
    }
    buf[n] = '\0';
    /* The command name (field 2) may contain spaces and parentheses: the
     * fields after it start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return 0;
    p += 2;
    if (*p == 'Z' || *p == 'X') *zombie = 1;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    return strtoull(p, NULL, 10);
}

/* Whether holder (pid, start) may still be running. Unknown means alive: a
 * leak is acceptable, releasing a live process's memory is not. */
static int proc_alive(pid_t pid, uint64_t start)
{
    if (pid <= 0) return 0;
    if (kill(pid, 0) < 0 && errno == ESRCH) return 0;
    int zombie;
    errno = 0;
    uint64_t now = sim_proc_start(pid, &zombie);
    if (now == 0) return errno != ENOENT && errno != ESRCH;
    return !zombie && now == start;
}

int sim_proc_alive(pid_t pid, uint64_t start)
{
    return proc_alive(pid, start);
}

uint32_t sim_self_holder(void)
{
    return g_holder;
}

pid_t sim_self_pid(void)
{
    return g_pid;
}

/* ---- layout helpers (caller holds the mutex where state is mutated) ---- */

struct sim_holder *sim_holders(void)
{
    return (struct sim_holder *)((uint8_t *)sim_m + sim_m->off_holders);
}

struct sim_map *sim_maps(void)
{
    return (struct sim_map *)((uint8_t *)sim_m + sim_m->off_maps);
}

struct sim_alloc *sim_entry(uint32_t index)
{
    return (struct sim_alloc *)((uint8_t *)sim_m + sim_m->off_allocs) + index;
}

static uint64_t *alloc_bits(unsigned dev)
{
    return (uint64_t *)((uint8_t *)sim_m + sim_m->dev[dev].off);
}

static uint64_t *start_bits(unsigned dev)
{
    return alloc_bits(dev) + sim_m->dev[dev].bits_words;
}

static uint32_t *start_entry(unsigned dev)
{
    return (uint32_t *)(alloc_bits(dev) + 2 * sim_m->dev[dev].bits_words);
}

int sim_pool_valid(unsigned pool)
{
    return sim_m && (pool < sim_m->ndev || pool == SIM_POOL_MANAGED);
}

static int bit_get(const uint64_t *bits, uint64_t u)
{
    return (bits[u / 64] >> (u % 64)) & 1;
}

/* Sets (val = 1) or clears granules [s, s + n). */
static void bits_set(uint64_t *bits, uint64_t s, uint64_t n, int val)
{
    while (n) {
        uint64_t w = s / 64, b = s % 64;
        uint64_t take = 64 - b < n ? 64 - b : n;
        uint64_t mask = take == 64 ? ~0ull : ((1ull << take) - 1) << b;
        if (val)
            bits[w] |= mask;
        else
            bits[w] &= ~mask;
        s += take;
        n -= take;
    }
}

/* First run of n clear bits inside [lo, hi), or -1. Skips full and empty
 * words whole. */
static int64_t find_run(const uint64_t *bits, uint64_t lo, uint64_t hi, uint64_t n)
{
    uint64_t run = 0, run_start = lo, u = lo;
    while (u < hi) {
        if (u % 64 == 0 && u + 64 <= hi) {
            uint64_t w = bits[u / 64];
            if (w == ~0ull) {
                run = 0;
                u += 64;
                continue;
            }
            if (w == 0) {
                if (run == 0) run_start = u;
                run += 64;
                u += 64;
                if (run >= n) return (int64_t)run_start;
                continue;
            }
        }
        if (bit_get(bits, u)) {
            run = 0;
        } else {
            if (run == 0) run_start = u;
            if (++run >= n) return (int64_t)run_start;
        }
        u++;
    }
    return -1;
}

/* Pools in layout order: the devices, then the managed pool. */
static unsigned pool_at(const struct sim_machine *h, unsigned k)
{
    return k < h->ndev ? k : SIM_POOL_MANAGED;
}

static void compute_layout(struct sim_machine *h, unsigned ndev, uint64_t capacity,
                           uint64_t managed, uint32_t max_allocs)
{
    const uint64_t page = 4096;
    h->ndev = ndev;
    h->granule = SIM_GRANULE;
    h->capacity = capacity;
    h->managed_capacity = managed;
    h->max_allocs = max_allocs;
    h->max_holders = SIM_MAX_HOLDERS;
    h->max_maps = SIM_MAX_MAPS;
    h->off_holders = round_up(sizeof(struct sim_machine), page);
    h->off_allocs =
        round_up(h->off_holders + (uint64_t)SIM_MAX_HOLDERS * sizeof(struct sim_holder), page);
    h->off_maps = round_up(h->off_allocs + (uint64_t)max_allocs * sizeof(struct sim_alloc), page);
    uint64_t off = round_up(h->off_maps + (uint64_t)SIM_MAX_MAPS * sizeof(struct sim_map), page);
    for (unsigned k = 0; k <= ndev; k++) {
        struct sim_dev_state *p = &h->dev[pool_at(h, k)];
        p->capacity = k < ndev ? capacity : managed;
        p->units = p->capacity / SIM_GRANULE;
        p->bits_words = (p->units + 63) / 64;
        p->off = off;
        off = round_up(off + 2 * p->bits_words * 8 + p->units * 4, page);
    }
    h->total_size = off;
}

/* ---- attach ---- */

static int create_machine(int fd, const char *name, unsigned ndev, uint64_t capacity,
                          uint64_t managed, uint32_t max_allocs)
{
    struct sim_machine h;
    memset(&h, 0, sizeof(h));
    compute_layout(&h, ndev, capacity, managed, max_allocs);
    const char *mode = getenv(SIMCUDA_ENV_FREE_WHILE_MAPPED);
    if (mode && !strcmp(mode, "keep"))
        h.free_while_mapped = SIM_FREE_KEEP;
    else if (mode && *mode && strcmp(mode, "poison"))
        fprintf(stderr, "simcuda[%d]: ignoring %s=%s (want poison or keep)\n", (int)getpid(),
                SIMCUDA_ENV_FREE_WHILE_MAPPED, mode);
    if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)h.total_size) < 0) return SIM_EOS;
    void *p = mmap(NULL, h.total_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) return SIM_EOS;
    struct sim_machine *m = p;
    for (unsigned k = 0; k <= ndev; k++) {
        char path[160];
        unsigned pool = pool_at(&h, k);
        sim_object_name(path, sizeof(path), name, (int)pool);
        shm_unlink(path); /* a stale file from an earlier machine of this name */
        int dfd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (dfd < 0 || ftruncate(dfd, (off_t)h.dev[pool].capacity) < 0) {
            if (dfd >= 0) close(dfd);
            munmap(p, h.total_size);
            return SIM_EOS;
        }
        close(dfd);
    }
    memcpy(m, &h, sizeof(h));
    m->magic = SIM_MAGIC;
    m->abi = SIM_ABI;
    if (getrandom(&m->machine_id, sizeof(m->machine_id), 0) != sizeof(m->machine_id))
        m->machine_id = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
    m->machine_id |= 1; /* never 0: a zeroed handle is never valid */
    m->next_serial = 1;
    m->free_head = SIM_NO_INDEX;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m->lock.mutex, &a);
    pthread_mutexattr_destroy(&a);
    __atomic_store_n(&m->ready, SIM_READY, __ATOMIC_RELEASE);
    struct stat st;
    if (fstat(fd, &st) == 0) g_seg_dev = st.st_dev, g_seg_ino = st.st_ino;
    sim_m = m;
    g_map_size = h.total_size;
    return SIM_OK;
}

static int join_machine(int fd)
{
    struct stat st;
    int i;
    for (i = 0; i < WAIT_STEPS; i++) {
        if (fstat(fd, &st) < 0) return SIM_EOS;
        if (st.st_uid != geteuid() || (st.st_mode & 077))
            return SIM_EOS; /* not ours, or readable by others: refuse */
        if ((uint64_t)st.st_size >= sizeof(struct sim_machine)) break;
        sleep_step();
    }
    if (i == WAIT_STEPS) return SIM_EOS;
    struct sim_machine *h = mmap(NULL, sizeof(struct sim_machine), PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return SIM_EOS;
    for (i = 0; i < WAIT_STEPS && !__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE); i++)
        sleep_step();
    int ok = i < WAIT_STEPS && h->magic == SIM_MAGIC && h->abi == SIM_ABI && h->ndev >= 1 &&
             h->ndev <= SIM_MAX_DEVICES && h->max_allocs >= 1 && h->max_allocs <= SIM_MAX_ALLOCS &&
             h->max_holders == SIM_MAX_HOLDERS && h->max_maps == SIM_MAX_MAPS &&
             h->granule == SIM_GRANULE && h->free_while_mapped <= SIM_FREE_KEEP;
    uint64_t total = h->total_size;
    if (ok) {
        struct sim_machine check;
        memset(&check, 0, sizeof(check));
        compute_layout(&check, h->ndev, h->capacity, h->managed_capacity, h->max_allocs);
        ok = check.total_size == total && fstat(fd, &st) == 0 && (uint64_t)st.st_size == total;
    }
    munmap(h, sizeof(struct sim_machine));
    if (!ok) return SIM_EOS;
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) return SIM_EOS;
    g_seg_dev = st.st_dev;
    g_seg_ino = st.st_ino;
    sim_m = p;
    g_map_size = total;
    return SIM_OK;
}

static int map_machine(const char *name, unsigned ndev, uint64_t capacity, uint64_t managed,
                       uint32_t max_allocs)
{
    char path[160];
    sim_object_name(path, sizeof(path), name, -1);
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            int rc = create_machine(fd, name, ndev, capacity, managed, max_allocs);
            close(fd);
            if (rc != SIM_OK) shm_unlink(path);
            return rc;
        }
        if (errno != EEXIST) return SIM_EOS;
        fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT) continue; /* unlinked between our two opens: race again */
            return SIM_EOS;
        }
        int rc = join_machine(fd);
        close(fd);
        return rc;
    }
    return SIM_EOS;
}

void sim_lock(void)
{
    int rc = pthread_mutex_lock(&sim_m->lock.mutex);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&sim_m->lock.mutex);
}

void sim_unlock(void)
{
    pthread_mutex_unlock(&sim_m->lock.mutex);
}

void sim_vmm_file_name(char *buf, size_t len)
{
    char base[160];
    sim_object_name(base, sizeof(base), g_name, -1);
    snprintf(buf, len, "%s-vmmfd", base);
}

/* Unlinks the files of this process's machine, pool files first and the
 * segment last, if the segment's name still names the segment this process
 * mapped. Caller holds the mutex and has set SIM_REMOVING. While the
 * segment's name exists nobody can create another machine of that name
 * (O_EXCL), so the pool names are this machine's (or stale) until the
 * segment's own unlink; and every process that unlinks this machine's
 * names holds its mutex and checks first, so once the names are gone no
 * late remover of this machine touches the files of the next one. */
static void remove_files_locked(void)
{
    char path[160];
    sim_object_name(path, sizeof(path), g_name, -1);
    int fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return; /* already gone */
    struct stat st;
    int same = fstat(fd, &st) == 0 && st.st_dev == g_seg_dev && st.st_ino == g_seg_ino;
    close(fd); /* our mapping keeps the inode (and its number) alive meanwhile */
    if (!same) return;
    sim_vmm_reap_locked(1); /* the VMM fd file */
    for (unsigned k = 0; k <= sim_m->ndev; k++) {
        char pool[160];
        sim_object_name(pool, sizeof(pool), g_name, (int)pool_at(sim_m, k));
        shm_unlink(pool);
    }
    shm_unlink(path);
}

/* Forgets a machine that is being removed: unmaps the segment and this
 * process's windows of its pools. Caller holds no lock; nothing of this
 * process is registered in it. */
static void drop_machine(void)
{
    pthread_mutex_lock(&g_win_lock);
    for (unsigned d = 0; d < SIM_POOLS; d++) {
        uint8_t *w = atomic_exchange(&g_win[d], NULL);
        if (w) munmap(w, sim_m->dev[d].capacity);
    }
    pthread_mutex_unlock(&g_win_lock);
    munmap(sim_m, g_map_size);
    sim_m = NULL;
    g_map_size = 0;
}

int sim_attached(void)
{
    return sim_m != NULL && g_pid != 0;
}

int sim_attach(const char *name, unsigned ndev, uint64_t capacity, uint64_t managed,
               uint32_t max_allocs)
{
    if (sim_attached()) return SIM_OK;
    if (ndev < 1 || ndev > SIM_MAX_DEVICES || capacity < SIM_GRANULE ||
        capacity > SIM_MAX_CAPACITY || managed < SIM_GRANULE || managed > SIM_MAX_CAPACITY ||
        max_allocs < 1 || max_allocs > SIM_MAX_ALLOCS)
        return SIM_EINVAL;
    capacity -= capacity % SIM_GRANULE;
    managed -= managed % SIM_GRANULE;
    if (sim_m && strcmp(name, g_name) != 0)
        return SIM_EINVAL; /* one machine per process, even across fork */
    int zombie;
    pid_t pid = getpid();
    uint64_t start = sim_proc_start(pid, &zombie);
    /* A machine whose last holder left between our mapping it (here, or in
     * the parent before a fork) and our registering is being removed: the
     * leaver set SIM_REMOVING under the mutex before it unlinked the names,
     * and we look at the flag and register in one hold of the same mutex, so
     * either it saw us (and kept the machine) or we see the flag, drop the
     * machine and open the name again (a new machine, or one that another
     * process has created meanwhile). */
    for (int attempt = 0;; attempt++) {
        if (!sim_m) {
            if (attempt >= 100) return SIM_EOS;
            int rc = map_machine(name, ndev, capacity, managed, max_allocs);
            if (rc != SIM_OK) return rc;
            snprintf(g_name, sizeof(g_name), "%s", name);
        }
        if (g_own_cap < sim_m->max_allocs) {
            size_t bytes = (size_t)sim_m->max_allocs * sizeof(struct own_rec);
            void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) return SIM_EOS;
            if (g_own) munmap(g_own, (size_t)g_own_cap * sizeof(struct own_rec));
            g_own = p;
            g_own_cap = sim_m->max_allocs;
        }
        sim_lock();
        if (LOAD(&sim_m->ready) == SIM_REMOVING) {
            remove_files_locked(); /* in case the leaver died half-way */
            sim_unlock();
            drop_machine();
            continue;
        }
        break; /* with the mutex held */
    }
    int rc = SIM_ENOMEM;
    sim_sweep_locked();
    struct sim_holder *h = sim_holders();
    for (uint32_t i = 0; i < sim_m->max_holders; i++) {
        if (h[i].pid != 0) continue;
        h[i].pid = pid;
        h[i].start = start;
        h[i].live = 0;
        if (i >= sim_m->holder_hw) sim_m->holder_hw = i + 1;
        g_holder = i;
        g_pid = pid;
        g_start = start;
        rc = SIM_OK;
        break;
    }
    sim_unlock();
    return rc == SIM_OK ? SIM_OK : SIM_EOS;
}

/* ---- device windows ---- */

uint8_t *sim_window(unsigned dev)
{
    if (!sim_pool_valid(dev)) return NULL;
    uint8_t *w = atomic_load(&g_win[dev]);
    if (w) return w;
    pthread_mutex_lock(&g_win_lock);
    w = atomic_load(&g_win[dev]);
    if (!w) {
        char path[160];
        sim_object_name(path, sizeof(path), g_name, (int)dev);
        int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
        struct stat st;
        uint64_t cap = sim_m->dev[dev].capacity;
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
            (uint64_t)st.st_size >= cap) {
            void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
            if (p != MAP_FAILED) {
                w = p;
                atomic_store(&g_win[dev], w);
            }
        }
        if (fd >= 0) close(fd);
    }
    pthread_mutex_unlock(&g_win_lock);
    return w;
}

int sim_window_of(uintptr_t p, uint64_t *off)
{
    if (!sim_m) return -1;
    for (unsigned k = 0; k <= sim_m->ndev; k++) {
        unsigned d = pool_at(sim_m, k);
        uint8_t *w = atomic_load(&g_win[d]);
        if (w && p >= (uintptr_t)w && p < (uintptr_t)w + sim_m->dev[d].capacity) {
            *off = p - (uintptr_t)w;
            return (int)d;
        }
    }
    return -1;
}

/* ---- allocation ---- */

int sim_is_mine(const struct sim_alloc *a)
{
    return g_pid != 0 && a->holder == g_holder && a->owner_pid == g_pid &&
           a->owner_start == g_start;
}

/* Withdraws record `index` (its allocation is no longer this process's). */
void sim_own_forget(uint32_t index)
{
    if (index >= g_own_cap) return;
    __atomic_store_n(&g_own[index].serial, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* pairs with the acquire fence in sim_own_find */
}

/* Publishes LIVE entry `index`, just made by this process. Caller holds
 * the mutex. */
static void own_note(uint32_t index, const struct sim_alloc *a)
{
    if (index >= g_own_cap) return;
    struct own_rec *o = &g_own[index];
    sim_own_forget(index); /* a fork child's copy may still hold its parent's */
    __atomic_store_n(&o->offset, a->offset, __ATOMIC_RELAXED);
    __atomic_store_n(&o->size, a->size, __ATOMIC_RELAXED);
    __atomic_store_n(&o->ctx_id, a->ctx_id, __ATOMIC_RELAXED);
    __atomic_store_n(&o->pool_id, (a->flags & SIM_F_POOL) ? a->pool_id : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&o->pid, g_pid, __ATOMIC_RELAXED);
    __atomic_store_n(&o->pool, (uint8_t)a->device, __ATOMIC_RELAXED);
    __atomic_store_n(&o->home, (uint8_t)a->home, __ATOMIC_RELAXED);
    __atomic_store_n(&o->flags, (uint16_t)(a->flags & SIM_OWN_FLAGS), __ATOMIC_RELAXED);
    __atomic_store_n(&o->serial, a->serial, __ATOMIC_RELEASE); /* pairs with the first load */
}

int sim_own_find(unsigned pool, uint64_t offset, struct sim_own *out)
{
    if (!sim_attached() || !sim_pool_valid(pool) || offset >= sim_m->dev[pool].capacity) return -1;
    /* The shared bitmaps are only a hint here, read without the mutex while
     * other processes change them: when `offset` lies in one of our LIVE
     * allocations, the granules from its start to `offset` are ours, so
     * their bits and the start's start_entry cannot change under us and
     * the scan finds it; anywhere else it may find anything, which our
     * own record then refuses. */
    uint64_t u = offset / SIM_GRANULE;
    const uint64_t *ab = alloc_bits(pool), *sb = start_bits(pool);
    if (!((__atomic_load_n(&ab[u / 64], __ATOMIC_RELAXED) >> (u % 64)) & 1)) return -1;
    uint64_t w = u / 64, b = u % 64;
    uint64_t word = __atomic_load_n(&sb[w], __ATOMIC_RELAXED) & (b == 63 ? ~0ull : (2ull << b) - 1);
    while (!word) {
        if (w == 0) return -1;
        word = __atomic_load_n(&sb[--w], __ATOMIC_RELAXED);
    }
    uint64_t s = w * 64 + 63 - (uint64_t)__builtin_clzll(word);
    uint32_t i = __atomic_load_n(&start_entry(pool)[s], __ATOMIC_RELAXED);
    if (i >= g_own_cap || i >= sim_m->max_allocs) return -1;
    const struct own_rec *o = &g_own[i];
    uint64_t serial = __atomic_load_n(&o->serial, __ATOMIC_ACQUIRE);
    if (serial == 0) return -1;
    struct sim_own r = {
        .index = i,
        .serial = serial,
        .offset = __atomic_load_n(&o->offset, __ATOMIC_RELAXED),
        .size = __atomic_load_n(&o->size, __ATOMIC_RELAXED),
        .ctx_id = __atomic_load_n(&o->ctx_id, __ATOMIC_RELAXED),
        .pool_id = __atomic_load_n(&o->pool_id, __ATOMIC_RELAXED),
        .pool = __atomic_load_n(&o->pool, __ATOMIC_RELAXED),
        .home = __atomic_load_n(&o->home, __ATOMIC_RELAXED),
        .flags = __atomic_load_n(&o->flags, __ATOMIC_RELAXED),
    };
    int32_t pid = __atomic_load_n(&o->pid, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* pairs with the release fence in sim_own_forget */
    if (__atomic_load_n(&o->serial, __ATOMIC_RELAXED) != serial) return -1;
    /* The shared entry must still be that allocation (a sweep by another
     * process that wrongly took us for dead released it without us). */
    if (pid != g_pid || r.pool != pool || offset < r.offset || offset - r.offset >= r.size ||
        LOAD(&sim_entry(i)->serial) != serial)
        return -1;
    *out = r;
    return 0;
}

static void poison(const struct sim_alloc *a)
{
    uint8_t *w = sim_window(a->device);
    if (!w) return;
    uint32_t *p = (uint32_t *)(w + a->offset);
    for (uint64_t i = 0; i < a->rsize / 4; i++)
        p[i] = SIMCUDA_POISON_WORD;
}

/* Releases LIVE entry `index`. Caller holds the mutex. */
void sim_release_locked(uint32_t index)
{
    struct sim_alloc *a = sim_entry(index);
    unsigned dev = a->device;
    uint64_t u = a->offset / SIM_GRANULE, n = a->rsize / SIM_GRANULE;
    STORE(&a->serial, 0); /* first: an opener's re-read (open_valid) fails from here */
    if (a->flags & SIM_F_EXPORTED) {
        poison(a);
        sim_m->poisoned_frees++;
        sim_counters.poisoned_frees++;
    }
    bits_set(alloc_bits(dev), u, n, 0);
    bits_set(start_bits(dev), u, 1, 0);
    start_entry(dev)[u] = SIM_NO_INDEX;
    sim_m->dev[dev].used -= a->rsize;
    if ((a->flags & SIM_F_MANAGED) && a->resident >= 0 && (unsigned)a->resident < sim_m->ndev)
        sim_m->dev[a->resident].managed -= a->rsize;
    if (a->holder < sim_m->max_holders) {
        struct sim_holder *h = &sim_holders()[a->holder];
        if (h->pid == a->owner_pid && h->live) h->live--;
    }
    sim_m->live--;
    memset(a, 0, sizeof(*a));
    a->state = SIM_SLOT_FREE;
    a->next_free = sim_m->free_head;
    sim_m->free_head = index;
    sim_counters.frees++;
}

/* ---- managed residency ---- */

/* Device-resident bytes of device d, ordinary and managed. */
static uint64_t dev_load(unsigned d)
{
    return sim_m->dev[d].used + sim_m->dev[d].managed;
}

/* Moves entry a's residency to `to`, counting bytes; no capacity check. */
static void set_resident(struct sim_alloc *a, int to)
{
    int from = a->resident;
    if (from == to) return;
    if (from >= 0) sim_m->dev[from].managed -= a->rsize;
    if (to >= 0) sim_m->dev[to].managed += a->rsize;
    if (to >= 0 && to < SIMCUDA_MAX_DEVICES &&
        sim_m->dev[to].managed > sim_counters.peak_resident[to])
        sim_counters.peak_resident[to] = sim_m->dev[to].managed;
    if (from < 0 && to >= 0) sim_counters.fetches++;
    if (from < 0)
        sim_counters.bytes_htod += a->rsize;
    else if (to < 0)
        sim_counters.bytes_dtoh += a->rsize;
    else
        sim_counters.bytes_dtod += a->rsize;
    sim_counters.migrations++;
    a->resident = to;
}

/* Evicts managed allocations resident on device d (never entry `keep`),
 * least recently used first, until `need` more bytes fit. Caller holds the
 * mutex. Returns SIM_OK or SIM_ENOMEM (nothing left to evict). */
static int make_room_locked(unsigned d, uint64_t need, uint32_t keep)
{
    while (dev_load(d) + need > sim_m->capacity) {
        uint32_t victim = SIM_NO_INDEX;
        uint64_t oldest = UINT64_MAX;
        for (uint32_t i = 0; i < sim_m->high_water; i++) {
            struct sim_alloc *a = sim_entry(i);
            if (i == keep || a->state != SIM_SLOT_LIVE || !(a->flags & SIM_F_MANAGED) ||
                a->resident != (int32_t)d)
                continue;
            if (victim == SIM_NO_INDEX || a->last_use < oldest) {
                victim = i;
                oldest = a->last_use;
            }
        }
        if (victim == SIM_NO_INDEX) return SIM_ENOMEM;
        set_resident(sim_entry(victim), SIM_HOST);
        sim_counters.evictions++;
    }
    return SIM_OK;
}

void sim_managed_touch_locked(uint32_t index)
{
    sim_entry(index)->last_use = ++sim_m->lru_clock;
}

int sim_managed_move_locked(uint32_t index, int to)
{
    struct sim_alloc *a = sim_entry(index);
    if (to >= 0) {
        if (a->resident != to) {
            if (a->rsize > sim_m->capacity || sim_m->dev[to].used + a->rsize > sim_m->capacity) {
                sim_counters.refused++;
                return SIM_ENOMEM;
            }
            if (make_room_locked((unsigned)to, a->rsize, index) != SIM_OK) {
                sim_counters.refused++;
                return SIM_ENOMEM;
            }
            set_resident(a, to);
        }
        sim_managed_touch_locked(index);
        return SIM_OK;
    }
    set_resident(a, SIM_HOST);
    return SIM_OK;
}

static int try_alloc_locked(unsigned dev, uint64_t size, uint64_t ctx_id, uint32_t flags,
                            unsigned home, uint64_t pool_id, uint32_t *index, uint64_t *offset)
{
    struct sim_machine *m = sim_m;
    if (m->free_head == SIM_NO_INDEX && m->high_water >= m->max_allocs) return SIM_ENOMEM;
    uint64_t n = (size + SIM_GRANULE - 1) / SIM_GRANULE;
    uint64_t units = m->dev[dev].units;
    if (dev < m->ndev && dev_load(dev) + n * SIM_GRANULE > m->capacity &&
        (m->dev[dev].used + n * SIM_GRANULE > m->capacity || /* evicting would not help */
         make_room_locked(dev, n * SIM_GRANULE, SIM_NO_INDEX) != SIM_OK))
        return SIM_ENOMEM;
    uint64_t hint = m->dev[dev].hint < units ? m->dev[dev].hint : 0;
    int64_t s = find_run(alloc_bits(dev), hint, units, n);
    if (s < 0 && hint > 0) s = find_run(alloc_bits(dev), 0, units, n);
    if (s < 0) return SIM_ENOMEM;
    uint32_t i;
    if (m->free_head != SIM_NO_INDEX) {
        i = m->free_head;
        m->free_head = sim_entry(i)->next_free;
    } else {
        i = m->high_water++;
    }
    struct sim_alloc *a = sim_entry(i);
    memset(a, 0, sizeof(*a));
    a->state = SIM_SLOT_LIVE;
    a->device = dev;
    a->holder = g_holder;
    a->flags = flags & ~SIM_F_EXPORTED;
    a->offset = (uint64_t)s * SIM_GRANULE;
    a->size = size;
    a->rsize = n * SIM_GRANULE;
    a->serial = m->next_serial++;
    a->ctx_id = ctx_id;
    a->owner_pid = g_pid;
    a->owner_start = g_start;
    a->next_free = SIM_NO_INDEX;
    if (flags & SIM_F_MANAGED) {
        a->resident = SIM_HOST;
        a->preferred = SIM_NOWHERE;
        a->home = home;
    } else if (flags & SIM_F_POOL) {
        a->pool_id = pool_id;
    }
    bits_set(alloc_bits(dev), (uint64_t)s, n, 1);
    bits_set(start_bits(dev), (uint64_t)s, 1, 1);
    start_entry(dev)[s] = i;
    m->dev[dev].used += a->rsize;
    m->dev[dev].hint = (uint64_t)s + n >= units ? 0 : (uint64_t)s + n;
    sim_holders()[g_holder].live++;
    m->live++;
    *index = i;
    *offset = a->offset;
    return SIM_OK;
}

static int alloc_common(unsigned dev, uint64_t size, uint64_t ctx_id, uint32_t flags, unsigned home,
                        uint64_t pool_id, uint32_t *index, uint64_t *offset)
{
    if (!sim_attached() || !sim_pool_valid(dev) || size == 0 || home >= sim_m->ndev ||
        ((flags & SIM_F_MANAGED) != 0) != (dev == SIM_POOL_MANAGED))
        return SIM_EINVAL;
    if (size > sim_m->dev[dev].capacity) return SIM_ENOMEM;
    sim_lock();
    int rc = try_alloc_locked(dev, size, ctx_id, flags, home, pool_id, index, offset);
    if (rc == SIM_ENOMEM && sim_sweep_locked() > 0)
        rc = try_alloc_locked(dev, size, ctx_id, flags, home, pool_id, index, offset);
    if (rc == SIM_OK) own_note(*index, sim_entry(*index));
    sim_unlock();
    return rc;
}

int sim_alloc(unsigned dev, uint64_t size, uint64_t ctx_id, uint32_t flags, unsigned home,
              uint32_t *index, uint64_t *offset)
{
    return alloc_common(dev, size, ctx_id, flags, home, 0, index, offset);
}

int sim_alloc_pool(unsigned dev, uint64_t size, uint64_t ctx_id, uint64_t pool_id, uint32_t *index,
                   uint64_t *offset)
{
    return alloc_common(dev, size, ctx_id, SIM_F_POOL, dev, pool_id, index, offset);
}

uint64_t sim_new_serial(void)
{
    sim_lock();
    uint64_t s = sim_m->next_serial++;
    sim_unlock();
    return s;
}

uint32_t sim_find_locked(unsigned dev, uint64_t offset)
{
    if (!sim_pool_valid(dev) || offset >= sim_m->dev[dev].capacity) return SIM_NO_INDEX;
    uint64_t u = offset / SIM_GRANULE;
    if (!bit_get(alloc_bits(dev), u)) return SIM_NO_INDEX;
    const uint64_t *sb = start_bits(dev);
    uint64_t w = u / 64, b = u % 64;
    uint64_t word = sb[w] & (b == 63 ? ~0ull : (2ull << b) - 1);
    while (!word) {
        if (w == 0) return SIM_NO_INDEX;
        word = sb[--w];
    }
    uint64_t s = w * 64 + 63 - (uint64_t)__builtin_clzll(word);
    uint32_t i = start_entry(dev)[s];
    if (i >= sim_m->max_allocs) return SIM_NO_INDEX;
    struct sim_alloc *a = sim_entry(i);
    if (a->state != SIM_SLOT_LIVE || a->device != dev || offset < a->offset ||
        offset >= a->offset + a->size)
        return SIM_NO_INDEX;
    return i;
}

int sim_free(unsigned dev, uint64_t offset)
{
    if (!sim_attached() || !sim_pool_valid(dev) || offset % SIM_GRANULE) return SIM_EINVAL;
    int rc = SIM_EINVAL;
    sim_lock();
    uint32_t i = sim_find_locked(dev, offset);
    if (i != SIM_NO_INDEX && sim_entry(i)->offset == offset && sim_is_mine(sim_entry(i))) {
        sim_owner_release_locked(i);
        rc = SIM_OK;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        sim_counters.last_free_ns = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    }
    sim_unlock();
    return rc;
}

/* Releases this process's allocations: all of them, or those of context
 * ctx_id. Caller holds the mutex. */
static void release_mine_locked(int all, uint64_t ctx_id)
{
    for (uint32_t i = 0; i < sim_m->high_water; i++) {
        struct sim_alloc *a = sim_entry(i);
        if (a->state == SIM_SLOT_LIVE && sim_is_mine(a) && (all || a->ctx_id == ctx_id))
            sim_owner_release_locked(i);
    }
}

uint64_t sim_pool_usage(unsigned dev, uint64_t pool_id)
{
    uint64_t n = 0;
    if (!sim_attached()) return 0;
    sim_lock();
    for (uint32_t i = 0; i < sim_m->high_water; i++) {
        const struct sim_alloc *a = sim_entry(i);
        if (a->state == SIM_SLOT_LIVE && a->device == dev && (a->flags & SIM_F_POOL) &&
            a->pool_id == pool_id && sim_is_mine(a))
            n += a->rsize;
    }
    sim_unlock();
    return n;
}

void sim_free_ctx(uint64_t ctx_id)
{
    if (!sim_attached()) return;
    sim_lock();
    sim_unmap_holder_locked(g_holder, 0, ctx_id);
    release_mine_locked(0, ctx_id);
    sim_unlock();
}

void sim_detach(void)
{
    if (!sim_attached()) return;
    sim_lock();
    sim_unmap_holder_locked(g_holder, 1, 0);
    release_mine_locked(1, 0);
    if (g_holder < sim_m->max_holders)
        memset(&sim_holders()[g_holder], 0, sizeof(struct sim_holder));
    g_pid = 0;
    g_holder = SIM_NO_INDEX;
    /* The last process out removes the machine (README, "The machine"): a
     * real GPU keeps nothing of a process after its exit either. Holders
     * that are gone are swept first; one whose liveness is unknown counts
     * as alive and keeps the machine. Registering (sim_attach) looks at
     * SIM_REMOVING in the same hold of the mutex as it registers. */
    sim_sweep_locked();
    int others = 0;
    const struct sim_holder *h = sim_holders();
    for (uint32_t k = 0; k < sim_m->holder_hw && k < sim_m->max_holders && !others; k++)
        others = h[k].pid != 0;
    if (!others) {
        STORE(&sim_m->ready, SIM_REMOVING);
        remove_files_locked();
    }
    sim_unlock();
}

unsigned sim_sweep_locked(void)
{
    unsigned released = 0;
    struct sim_holder *h = sim_holders();
    for (uint32_t k = 0; k < sim_m->holder_hw && k < sim_m->max_holders; k++) {
        if (h[k].pid == 0 || (k == g_holder && g_pid != 0)) continue;
        if (proc_alive(h[k].pid, h[k].start)) continue;
        uint64_t kept = sim_m->kept;
        sim_unmap_holder_locked(k, 1, 0); /* a dead importer unmaps everything */
        released += (unsigned)(kept - sim_m->kept);
        if (h[k].live) {
            for (uint32_t i = 0; i < sim_m->high_water; i++) {
                struct sim_alloc *a = sim_entry(i);
                if (a->state == SIM_SLOT_LIVE && a->holder == k && a->owner_pid == h[k].pid) {
                    sim_owner_release_locked(i);
                    released++;
                }
            }
        }
        memset(&h[k], 0, sizeof(h[k]));
    }
    /* VMM memory held by exported fds alone: released once they are closed. */
    if (sim_m->vmm_fd_kept) released += sim_vmm_reap_locked(0);
    sim_counters.swept += released;
    return released;
}

void sim_machine_stats(struct simcuda_stats *out)
{
    if (!sim_m) return;
    sim_lock();
    out->devices = sim_m->ndev;
    out->live_allocs = sim_m->live;
    out->capacity = sim_m->capacity;
    for (unsigned d = 0; d < sim_m->ndev; d++)
        out->used[d] = sim_m->dev[d].used;
    out->machine_poisoned_frees = sim_m->poisoned_frees;
    out->machine_kept = sim_m->kept;
    out->machine_kept_frees = sim_m->kept_frees;
    out->max_allocs = sim_m->max_allocs;
    const struct sim_map *m = sim_maps();
    uint32_t hw = LOAD(&sim_m->maps_hw);
    for (uint32_t r = 0; r < hw && r < sim_m->max_maps; r++) {
        if (LOAD(&m[r].serial) == 0) continue;
        if (LOAD(&m[r].kind) == SIM_MAP_POOL)
            out->machine_pool_imports++;
        else
            out->machine_ipc_opens++;
    }
    sim_unlock();
}

void sim_managed_stats(struct simcuda_managed_stats *out)
{
    if (!sim_m) return;
    sim_lock();
    out->proc_faults = sim_counters.faults;
    out->proc_bytes_htod = sim_counters.bytes_htod;
    out->proc_bytes_dtoh = sim_counters.bytes_dtoh;
    out->proc_bytes_dtod = sim_counters.bytes_dtod;
    out->proc_migrations = sim_counters.migrations;
    out->proc_evictions = sim_counters.evictions;
    out->proc_refused = sim_counters.refused;
    out->devices = sim_m->ndev;
    out->managed_capacity = sim_m->managed_capacity;
    out->managed_used = sim_m->dev[SIM_POOL_MANAGED].used;
    for (unsigned d = 0; d < sim_m->ndev; d++) {
        out->resident[d] = sim_m->dev[d].managed;
        out->device_used[d] = sim_m->dev[d].used;
    }
    sim_unlock();
}

void sim_managed_peaks(struct simcuda_managed_peaks *out)
{
    if (!sim_m) return;
    sim_lock();
    out->proc_fetches = sim_counters.fetches;
    for (unsigned d = 0; d < sim_m->ndev && d < SIMCUDA_MAX_DEVICES; d++)
        out->proc_peak_resident[d] = sim_counters.peak_resident[d];
    sim_unlock();
}

int sim_managed_query(uint64_t off, struct simcuda_residency *out)
{
    if (!sim_attached()) return -1;
    int rc = -1;
    sim_lock();
    uint32_t i = sim_find_locked(SIM_POOL_MANAGED, off);
    if (i != SIM_NO_INDEX && sim_is_mine(sim_entry(i))) {
        const struct sim_alloc *a = sim_entry(i);
        out->location = a->resident;
        out->preferred = a->preferred;
        out->accessed_by = a->accessed_by;
        out->read_mostly = (a->flags & SIM_F_READ_MOSTLY) != 0;
        out->base = a->offset; /* the caller adds its window base */
        out->size = a->size;
        out->last_use = a->last_use;
        rc = 0;
    }
    sim_unlock();
    return rc;
}

SIMCUDA_API int simcuda_unlink_machine(const char *name)
{
    char path[160];
    int removed = 0;
    if (!name) {
        name = getenv(SIMCUDA_ENV_MACHINE);
        if (!name || !*name) name = "default";
    }
    sim_object_name(path, sizeof(path), name, -1);
    removed += shm_unlink(path) == 0;
    for (int d = 0; d < SIM_POOLS; d++) { /* the devices, then the managed pool */
        sim_object_name(path, sizeof(path), name, d);
        removed += shm_unlink(path) == 0;
    }
    return removed;
}
