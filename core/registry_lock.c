/* registry_lock: the registry's robust, process-shared mutex. Taking it
 * repairs after an owner that died holding it (EOWNERDEAD: registry_repair
 * in registry_blocks.c); a lock word that names a thread which is not a
 * holder (corrupt) is marked dead the way the kernel marks a dead owner's;
 * a live owner (a stopped process) is waited for at most IPCSHIM_LOCK_WAIT.
 * Also the mutex's creation and the check of its type in a segment made by
 * someone else, and this process's PID namespace, by which a thread id in
 * the lock word (or a holder's pid) is judged. */
#include "registry_internal.h"
#include "sys.h"
#include "liveness.h"
#include "log.h"
#include "options.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

enum {
    LOCK_CHECK_MS = 200,   /* a contended lock re-checks its owner this often */
    LOCK_BOGUS_CHECKS = 2, /* ... and repairs after this many "not a holder" in a row */
    LOCK_PROBE_MS = 20,    /* the wait on a hold we already gave up on once */
};

int reg_lock_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int rc = pthread_mutexattr_init(&a);
    if (!rc) rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!rc) rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!rc) rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -rc;
}

/* The lock's type word (glibc: __kind) as this process would create it; a
 * segment whose lock is of another type (corrupt, or not made by us) would
 * make glibc treat it as a mutex that never reports a dead owner. */
bool reg_lock_kind_ok(const pthread_mutex_t *m)
{
#ifdef __GLIBC__
    static int expected = -1;
    if (__atomic_load_n(&expected, __ATOMIC_RELAXED) < 0) {
        pthread_mutex_t t;
        if (reg_lock_init(&t) != 0) return true; /* cannot tell: let the lock decide */
        __atomic_store_n(&expected, t.__data.__kind & ~0x300, __ATOMIC_RELAXED);
        pthread_mutex_destroy(&t);
    }
    /* 0x300: glibc's lock-elision bits, never part of the type. */
    return (__atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED) & ~0x300) == expected;
#else
    (void)m;
    return true;
#endif
}

enum { OWNER_HOLDER, OWNER_BOGUS };

/* This process's PID namespace: the inode of /proc/self/ns/pid (fits 32
 * bits: the kernel numbers namespace inodes below 2^32), 0 when unknown. */
uint32_t reg_own_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* Is an active holder of this registry in another PID namespace? Then a
 * thread id in the lock word may be that namespace's, unknowable here. */
static bool foreign_holders(const struct registry *r)
{
    uint32_t mine = reg_own_pidns();
    for (uint32_t i = 0; i < r->max_holders; i++) {
        const struct reg_holder *h = &r->holders[i];
        uint32_t ns = __atomic_load_n(&h->pidns, __ATOMIC_RELAXED);
        if (LOAD_STATE(h->state) == HOLDER_ACTIVE && ns && mine && ns != mine) return true;
    }
    return false;
}

/* Is the thread named by the lock word a possible holder of this registry?
 * A real owner maps the registry (it mapped it before locking); a thread
 * that no longer exists, or whose process does not map this file, can only
 * be named by a corrupt word -- unless holders of another PID namespace
 * share the registry (a pod sharing /dev/shm): their thread ids mean
 * nothing here, so no word is judged corrupt then (the wait stays bounded;
 * a real owner's death is still marked by the kernel). Unknown (/proc
 * unreadable) counts as a holder. */
static int owner_verdict(const struct registry *r, int tid)
{
    char path[40], line[512];
    if (tid <= 0 || foreign_holders(r)) return OWNER_HOLDER;
    snprintf(path, sizeof path, "/proc/%d/maps", tid); /* any thread id, not only processes */
    FILE *f = fopen(path, "re");
    if (!f) return errno == ENOENT || errno == ESRCH ? OWNER_BOGUS : OWNER_HOLDER;
    int verdict = OWNER_BOGUS;
    unsigned maj, min;
    unsigned long long ino;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 &&
            ino == (unsigned long long)r->ino && maj == major(r->dev) && min == minor(r->dev)) {
            verdict = OWNER_HOLDER;
            break;
        }
    }
    fclose(f);
    return verdict;
}

/* Makes a lock word that names a bogus owner look like a dead owner's, the
 * way the kernel marks the lock of a thread that died holding it: the next
 * locker gets EOWNERDEAD and repairs. A CAS: a word that changed meanwhile
 * (a real release or acquisition) is left alone. */
static bool mark_owner_dead(pthread_mutex_t *m, int word)
{
#ifdef __GLIBC__
    int dead = (word & FUTEX_WAITERS) | FUTEX_OWNER_DIED;
    /* pairs with glibc's own CASes on the word: one that changed is left alone */
    if (!__atomic_compare_exchange_n(&m->__data.__lock, &word, dead, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return false;
    sys_call6(SYS_futex, (long)&m->__data.__lock, FUTEX_WAKE, 1, 0, 0, 0);
    return true;
#else
    (void)m, (void)word;
    return false;
#endif
}

static int lock_word(pthread_mutex_t *m)
{
#ifdef __GLIBC__
    return __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED);
#else
    (void)m;
    return 0;
#endif
}

/* Waits for a contended lock, never without bound: a bogus owner is
 * repaired after LOCK_BOGUS_CHECKS checks that name the same one; a live
 * owner is waited for at most IPCSHIM_LOCK_WAIT per hold (and a hold we
 * already gave up on is only probed for LOCK_PROBE_MS). */
static int lock_slow(struct registry *r)
{
    pthread_mutex_t *m = &r->hdr->lock.mutex;
    uint64_t start = reg_now_ns(), bound = options_get()->lock_wait * 1000000ull;
    int strikes = 0, last = 0;
    int tid0 = lock_word(m) & FUTEX_TID_MASK;
    uint64_t since0 = __atomic_load_n(&r->hdr->lock_since_ns, __ATOMIC_RELAXED);
    if (tid0 && __atomic_load_n(&r->stuck_tid, __ATOMIC_RELAXED) == tid0 &&
        __atomic_load_n(&r->stuck_since, __ATOMIC_RELAXED) == since0 &&
        bound > LOCK_PROBE_MS * 1000000ull)
        bound = LOCK_PROBE_MS * 1000000ull;
    for (;;) {
        uint64_t now = reg_now_ns(), left = now - start < bound ? bound - (now - start) : 0;
        uint64_t step = left < LOCK_CHECK_MS * 1000000ull ? left : LOCK_CHECK_MS * 1000000ull;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += (time_t)(step / 1000000000ull);
        dl.tv_nsec += (long)(step % 1000000000ull);
        if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        int rc = pthread_mutex_timedlock(m, &dl);
        if (rc != ETIMEDOUT) return rc;
        int word = lock_word(m), owner = word & FUTEX_TID_MASK;
        /* This very thread never holds the lock while it waits for it (no
         * registry function locks twice): a word naming it is corrupt. */
        bool bogus = owner && (owner == (int)gettid() || owner_verdict(r, owner) == OWNER_BOGUS);
        if (bogus) {
            strikes = owner == last ? strikes + 1 : 1;
            last = owner;
            if (strikes >= LOCK_BOGUS_CHECKS && mark_owner_dead(m, word)) {
                log_msg(LOG_WARN,
                        "registry %s: its lock named thread %d, which is not a holder (it no "
                        "longer exists or does not map the registry): a corrupt lock word; "
                        "repairing",
                        r->name, owner);
                strikes = 0;
                continue;
            }
        } else {
            strikes = 0;
        }
        if (reg_now_ns() - start >= bound) {
            __atomic_store_n(&r->stuck_tid, owner, __ATOMIC_RELAXED);
            __atomic_store_n(&r->stuck_since,
                             __atomic_load_n(&r->hdr->lock_since_ns, __ATOMIC_RELAXED),
                             __ATOMIC_RELAXED);
            LOG_RATE(LOG_WARN,
                     "registry %s: its lock has been held by pid %d "
                     "(thread %d) for more than IPCSHIM_LOCK_WAIT (a stopped process?); going "
                     "on without it: opens and exports pass untracked, frees are deferred",
                     r->name, (int)liveness_tgid(owner), owner);
            return ETIMEDOUT;
        }
    }
}

/* What registry_lock does with the mutex's answer rc. */
static int locked(struct registry *r, int rc)
{
    if (rc == 0 || rc == EOWNERDEAD) {
        /* Reports and a hold's identity (lock_slow): a tick is enough. */
        __atomic_store_n(&r->hdr->lock_since_ns, reg_coarse_ns(), __ATOMIC_RELAXED);
        registry_refresh(r); /* another process may have grown it */
    }
    if (rc == 0) {
        reg_test_delay();
        return 0;
    }
    if (rc == EOWNERDEAD) {
        /* The previous owner died inside a critical section. Its record
         * writes are either committed (state stored last) or invisible to
         * readers of state; the derived structures may be half-updated. */
        registry_repair(r);
        r->hdr->repairs++;
        pthread_mutex_consistent(&r->hdr->lock.mutex);
        log_msg(LOG_WARN, "registry %s: lock owner died; repaired", r->name);
        return 0;
    }
    if (rc == ETIMEDOUT) return -ETIMEDOUT;
    LOG_ONCE(LOG_ERROR, "registry %s lock is unusable (%s); not tracking", r->name, strerror(rc));
    return -ENOTRECOVERABLE;
}

int registry_lock(struct registry *r)
{
    int rc = pthread_mutex_trylock(&r->hdr->lock.mutex);
    if (rc == EBUSY) rc = lock_slow(r);
    return locked(r, rc);
}

void registry_unlock(struct registry *r)
{
    pthread_mutex_unlock(&r->hdr->lock.mutex);
}
