/* registry_fd: the registry's descriptor, never trusted by number. A
 * program may close descriptors it does not own or dup2 over ours: every
 * use checks the number still names the segment (dev/inode), re-opens it by
 * path when not, and re-takes our own lock byte if it was lost; a fork
 * child gets a description of its own, pinned by a one-page mapping so that
 * its OFD lock byte lives as long as the process. Any thread, no registry
 * lock (fd_mu serialises the re-opens). */
#include "registry_internal.h"
#include "liveness.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens the registry again by path; -1 unless it is still the same file. */
static int open_same(const struct registry *r)
{
    struct stat st;
    int fd = open(r->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || st.st_dev != r->dev || st.st_ino != r->ino) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Maps one page from fd so that fd's description -- and the OFD lock byte
 * taken through it -- lives as long as the mapping, whatever the program
 * does to its descriptors. The page (the header's, reserved by the creator
 * and again at attach) is never touched through this mapping. */
static void pin_description(struct registry *r, int fd)
{
    void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return;
    if (r->pin) munmap(r->pin, 4096);
    r->pin = p;
}

/* Serialises re-opening the descriptor: liveness checks run without the
 * registry lock (sweeps, cached re-opens), from any thread. Re-initialised
 * in a fork child (registry_reopen_fd). */
static pthread_mutex_t fd_mu = PTHREAD_MUTEX_INITIALIZER;

static int registry_fd_locked(struct registry *r);

int registry_reopen_fd(struct registry *r)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    fd_mu = fresh; /* a fork child: another thread may have held it */
    int fd = open_same(r);
    if (fd < 0) return -ESTALE; /* the segment was replaced since we mapped it */
    /* The inherited number may not even be ours any more; never close
     * something the program owns. The parent's description keeps its locks. */
    if (r->fd >= 0) {
        struct stat st;
        if (fstat(r->fd, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino) close(r->fd);
    }
    r->fd = fd;
    r->self_slot = REG_NONE; /* the parent's slot is not ours, nor its chunks */
    r->nspare = 0;
    pin_description(r, fd);
    return 0;
}

int registry_fd(struct registry *r)
{
    struct stat st;
    int fd = __atomic_load_n(&r->fd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino) return fd;
    pthread_mutex_lock(&fd_mu);
    fd = registry_fd_locked(r);
    pthread_mutex_unlock(&fd_mu);
    return fd;
}

static int registry_fd_locked(struct registry *r)
{
    struct stat st;
    if (r->fd >= 0 && fstat(r->fd, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino)
        return r->fd; /* another thread re-opened it meanwhile */
    /* The program closed our descriptor (closefrom) or put another file at
     * its number (dup2, a later open): the number is not ours any more. */
    int fd = open_same(r);
    LOG_ONCE(LOG_WARN, "registry %s: the program closed or replaced the shim's descriptor %d; %s",
             r->name, r->fd,
             fd >= 0 ? "re-opened it" : "cannot re-open it (liveness unknown: alive)");
    /* pairs with the acquire load in registry_fd (process-local) */
    __atomic_store_n(&r->fd, fd, __ATOMIC_RELEASE);
    if (fd < 0) return -1;
    /* Our own lock byte lives on while a mapping of its description does
     * (the registry's own mapping, or the pin): find out, and re-take it if
     * it was lost, so that we never look dead to the others. */
    struct reg_holder *me = r->self_slot < r->max_holders ? &r->holders[r->self_slot] : NULL;
    if (me && !liveness_byte_locked(fd, r->lock_base + r->self_slot)) {
        if (LOAD_STATE(me->state) == HOLDER_ACTIVE && me->nonce == r->self_nonce &&
            liveness_lock_byte(fd, r->lock_base + r->self_slot) == 0) {
            pin_description(r, fd);
            log_msg(LOG_WARN, "registry %s: re-took this process's lock byte", r->name);
        } else {
            LOG_ONCE(LOG_ERROR,
                     "registry %s: this process lost its lock byte and was judged dead; its "
                     "leases were released",
                     r->name);
        }
    }
    return fd;
}
