/* process: this process's IPC state -- attaching, the registry lock, fork
 * detection, "is this block ours" (see process.h). */
#include "process.h"
#include "collector.h"
#include "host.h"
#include "leak.h"
#include "log.h"
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

struct ipc_process ipc_proc = {
    .state = PROC_IDLE,
    .self = REG_NONE,
    .open_guess = REG_NONE,
};

void process_init(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && madvise(p, 4096, MADV_WIPEONFORK) == 0) {
        ipc_proc.fork_canary = p;
        *ipc_proc.fork_canary = 1;
    } else if (p != MAP_FAILED) {
        munmap(p, 4096);
    }
    ipc_proc.canary_pid = getpid();
    leak_init();
}

bool process_active(void)
{
    return __atomic_load_n(&ipc_proc.state, __ATOMIC_ACQUIRE) == PROC_ACTIVE && !ipc_proc.shut &&
           !options_get()->disable;
}

void process_turn_off(void)
{
    __atomic_store_n(&ipc_proc.state, PROC_OFF, __ATOMIC_RELEASE);
}

bool process_lock_registry(void)
{
    int rc = registry_lock(&ipc_proc.reg);
    if (rc == 0) return true;
    if (rc != -ETIMEDOUT) process_turn_off();
    return false;
}

uint64_t process_timeout_ns(void)
{
    return options_get()->handoff_timeout * 1000000ull;
}

/* ---- fork ---- */

void process_after_fork(bool consistent)
{
    local_reset(consistent);
    collector_after_fork();
    ipc_proc.collector_asked = false;
    leak_after_fork();
    memset(&ipc_proc.st, 0, sizeof ipc_proc.st);
    ipc_proc.self = REG_NONE;
    ipc_proc.nrecycles = 0; /* the parent's records */
    ipc_proc.last_sweep_ns = ipc_proc.last_collect_ns = ipc_proc.last_limbo_sweep_ns = 0;
    ipc_proc.canary_pid = getpid();
    if (ipc_proc.fork_canary) *ipc_proc.fork_canary = 1;
    if (ipc_proc.state == PROC_ACTIVE && !ipc_proc.shut && registry_reopen_fd(&ipc_proc.reg) != 0) {
        LOG_ONCE(LOG_WARN, "fork child cannot reopen the registry; not tracking");
        ipc_proc.state = PROC_OFF;
    }
}

/* Forks are the host's fork chain's business (ipc_fork_*); this canary is
 * here only for a child that no atfork handler saw (a raw clone): the page
 * is MADV_WIPEONFORK, so it reads 0 there, with no syscall on the hot path.
 * Where that advice is unsupported we compare getpid() instead. */
bool process_forked(void)
{
    if (ipc_proc.fork_canary) return *ipc_proc.fork_canary == 0;
    return ipc_proc.canary_pid && getpid() != ipc_proc.canary_pid;
}

void process_check_fork(void)
{
    /* The tables may be mid-update (no atfork handler ran): abandon them. */
    if (process_forked()) process_after_fork(false);
}

bool process_attached_locked(void)
{
    return ipc_proc.state == PROC_ACTIVE && !ipc_proc.shut && ipc_proc.self != REG_NONE &&
           !process_forked();
}

/* ---- attach ---- */

static uint64_t new_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof n, GRND_NONBLOCK) != sizeof n)
        n = reg_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&n;
    return n | 1; /* never 0: a zeroed record has nonce 0 */
}

/* A holder slot: without the lock (many processes start at once); under it
 * only when no slot is FREE (one in a corrupt state may be reused). */
static int take_holder_slot(void)
{
    struct registry *reg = &ipc_proc.reg;
    /* Once per process: the leases of holders that died since the last
     * sweep (or of this very pid before an exec) go now. */
    if (reg_sweep_dead(reg, REG_NONE) < 0 && ipc_proc.state != PROC_ACTIVE) return -ENODEV;
    ipc_proc.self_nonce = new_nonce();
    ipc_proc.self = reg_holder_claim(reg, ipc_proc.self_nonce);
    if (ipc_proc.self == REG_NONE) {
        if (!process_lock_registry()) return -ENODEV;
        ipc_proc.self = reg_holder_attach(reg, ipc_proc.self_nonce);
        registry_unlock(reg);
    }
    if (ipc_proc.self == REG_NONE) {
        LOG_ONCE(LOG_WARN,
                 "registry %s has no free holder slot (IPCSHIM_MAX_HOLDERS); "
                 "not tracking for now",
                 reg->name);
        return -ENOSPC;
    }
    log_msg(LOG_DEBUG, "attached to %s as holder %u", reg->name, ipc_proc.self);
    return 0;
}

/* process_ready_locked's attach: the registry, then a holder slot. */
static int attach_locked(const struct options *opt)
{
    if (ipc_proc.state == PROC_IDLE) {
        struct reg_caps caps;
        registry_caps_from_options(opt, &caps);
        if (registry_open(&ipc_proc.reg, opt->domain, &caps) != 0) {
            process_turn_off();
            return -ENODEV;
        }
        __atomic_store_n(&ipc_proc.state, PROC_ACTIVE, __ATOMIC_RELEASE);
    }
    return ipc_proc.self == REG_NONE ? take_holder_slot() : 0;
}

enum { REMOVED_RETRIES = 3 };

int process_ready_locked(void)
{
    /* Every export, open, close and free asks: the attached, active,
     * unforked process answers from its own words (ACTIVE implies ipc_init
     * ran with the host's free installed and the shim not disabled; the
     * slow path below gives 0 in this case too). */
    if (ipc_proc.state == PROC_ACTIVE && ipc_proc.self != REG_NONE && !ipc_proc.shut &&
        ipc_proc.fork_canary && *ipc_proc.fork_canary)
        return 0;
    const struct options *opt = options_get();
    if (opt->disable || ipc_proc.shut || !ipc_proc.initialised || !host_free_block())
        return -ENODEV;
    process_check_fork();
    if (ipc_proc.state == PROC_OFF) return -ENODEV;
    /* A registry removed by its last user while we attached: once more, on
     * the new file (REMOVED_RETRIES times at most: then untracked). */
    for (int tries = 0;; tries++) {
        bool fresh = ipc_proc.self == REG_NONE; /* only a slot taken now asks */
        int rc = attach_locked(opt);
        /* pairs with registry_remove_if_unused (Dekker on removing) */
        if (rc || !fresh || !registry_removing(&ipc_proc.reg)) return rc;
        if (tries == REMOVED_RETRIES) {
            LOG_ONCE(LOG_WARN, "registry %s keeps being removed as we attach; not tracking",
                     ipc_proc.reg.name);
            process_turn_off();
            return -ENODEV;
        }
        if (process_lock_registry()) {
            reg_holder_release(&ipc_proc.reg, ipc_proc.self);
            registry_unlock(&ipc_proc.reg);
        }
        registry_close(&ipc_proc.reg);
        ipc_proc.self = REG_NONE;
        __atomic_store_n(&ipc_proc.state, PROC_IDLE, __ATOMIC_RELEASE);
    }
}

/* ---- our records ---- */

bool process_owns(const struct reg_block *b, uint64_t generation)
{
    return b && b->generation == generation && b->exporter == ipc_proc.self &&
           b->exporter_nonce == ipc_proc.self_nonce && b->state != BLOCK_FREE;
}
