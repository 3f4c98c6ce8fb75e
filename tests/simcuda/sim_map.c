/*
 * sim_map.c: the machine's table of IPC opens in force (sim_state.h, "The
 * table of IPC opens"), kept without the machine mutex: an open claims and
 * publishes a row (sim_map_open), a close clears and gives it back
 * (sim_map_del), and the owner's free asks whether a row still names its
 * block (sim_owner_release_locked). The handshake between them is written
 * down once, above sim_owner_release_locked; every seq-cst site names its
 * other half. Also the sweep of a holder's rows (sim_unmap_holder_locked)
 * for context teardown, exit and dead processes. The rest of the machine
 * (attach, allocation, sweep) is sim_state.c; what they share is
 * sim_state_internal.h.
 */
#include "sim_state.h"
#include "sim_state_internal.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether some row names allocation `serial` (an open in force, or one
 * being published or backed out). Serials are never reused, so the serial
 * alone names the allocation, even in a row being refilled meanwhile.
 * Caller holds the mutex; rows change under it all the same. */
static int serial_mapped(uint64_t serial)
{
    const struct sim_map *m = sim_maps();
    uint32_t hw = LOAD(&sim_m->maps_hw);
    for (uint32_t r = 0; r < hw && r < sim_m->max_maps; r++)
        if (LOAD(&m[r].serial) == serial) return 1;
    return 0;
}

/* Whether some process still has an exported fd of VMM entry `index` open:
 * a new description of the fd file asks whether any other description
 * holds a read lock on the entry's record (every exported fd is a
 * description holding one, and an OFD lock lasts while any fd of the
 * description is open, in any process). Unknown (the file cannot be
 * opened) counts as closed. */
static int vmm_fd_alive(uint32_t index)
{
    if (!(sim_entry(index)->flags & SIM_F_EXPORTED)) return 0;
    char name[192];
    sim_vmm_file_name(name, sizeof(name));
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct flock l = {.l_type = F_WRLCK,
                      .l_whence = SEEK_SET,
                      .l_start = (off_t)index * SIM_VMM_RECORD,
                      .l_len = SIM_VMM_RECORD};
    int alive = fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
    close(fd);
    return alive;
}

/* Clears VMM entry `index`'s record in the fd file (nothing names it any
 * more: no description holds its lock). Caller holds the mutex. */
static void vmm_record_clear(uint32_t index)
{
    char name[192], zero[SIM_VMM_RECORD] = {0};
    sim_vmm_file_name(name, sizeof(name));
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return;
    if (pwrite(fd, zero, sizeof(zero), (off_t)index * SIM_VMM_RECORD) < 0) {
        /* nothing to do: the record names a serial that is never reused */
    }
    close(fd);
}

/* VMM entry `index` has no row left: released, with its record, unless an
 * exported fd of it is still open (then it is kept, SIM_F_KEPT, until
 * sim_vmm_reap_locked finds them all closed). Caller holds the mutex.
 * Returns 1 when it released. */
static int vmm_release_locked(uint32_t index)
{
    struct sim_alloc *a = sim_entry(index);
    if (vmm_fd_alive(index)) {
        if (!(a->flags & SIM_F_KEPT)) {
            __atomic_fetch_or(&a->flags, SIM_F_KEPT, __ATOMIC_SEQ_CST);
            sim_m->vmm_fd_kept++;
        }
        return 0;
    }
    if (a->flags & SIM_F_KEPT) sim_m->vmm_fd_kept--;
    if (a->flags & SIM_F_EXPORTED) vmm_record_clear(index);
    a->flags &= ~(SIM_F_EXPORTED | SIM_F_KEPT); /* nobody maps it: nothing to poison */
    sim_release_locked(index);
    return 1;
}

/* Releases LIVE entry `index` if it is still allocation `serial`, kept, and
 * no row names it any more. Idempotent: every closer that may have been the
 * last calls it, the first one to find no row releases. Caller holds the
 * mutex. Returns 1 when it released. */
static int release_if_unmapped_locked(uint32_t index, uint64_t serial)
{
    if (index >= sim_m->max_allocs || serial == 0) return 0;
    struct sim_alloc *a = sim_entry(index);
    uint32_t f = LOAD(&a->flags);
    if (a->state != SIM_SLOT_LIVE || a->serial != serial || !(f & (SIM_F_KEPT | SIM_F_VMM)) ||
        serial_mapped(serial))
        return 0;
    if (f & SIM_F_VMM) return vmm_release_locked(index);
    sim_m->kept--;
    sim_release_locked(index);
    return 1;
}

/* The owner lets go of LIVE entry `index` (cuMemFree, its context's end,
 * exit, death). In keep mode an allocation still open elsewhere stays
 * LIVE and charged, without an owner (SIM_F_KEPT), until its last open
 * goes; otherwise it is released now. Caller holds the mutex.
 *
 * Opens and closes do not take the mutex, so "still open elsewhere" is a
 * handshake (Dekker, all of it seq-cst):
 *   free:  set SIM_F_KEPT          ; then scan the rows for the serial
 *   open:  publish the row's serial; then re-read the entry (LIVE, serial,
 *          EXPORTED, !KEPT), and back out (close the row) if it fails
 *   close: clear the row's serial  ; then read the entry's flags, and when
 *          they say KEPT take the mutex and release if no row is left; only
 *          then give the row back (a closer killed before that leaves the
 *          row to the sweep of its holder, which does the same)
 * In the total order, either the free's scan sees the importer's row (then
 * the block is kept, and the importer's later read sees KEPT: an open backs
 * out, a close takes the mutex), or it does not (then the importer's store
 * came after the scan, so its read sees KEPT, or the block already gone:
 * an open backs out; a close's row was already cleared). So a block is never
 * released while an open that succeeded names it, and the last closer, the
 * last backing-out opener or the sweep of a dead importer always gets to
 * release_if_unmapped_locked, which releases it exactly once (under the
 * mutex, re-checking LIVE, serial, KEPT and the rows). KEPT is set before
 * the scan even when nothing maps the block: openers then back out of a
 * block that is being released. In poison mode nothing waits for the rows:
 * an open whose re-read came before the release succeeded first (its row
 * names a serial that no longer exists, harmless), as before this was
 * lock-free. */
void sim_owner_release_locked(uint32_t index)
{
    struct sim_alloc *a = sim_entry(index);
    if (sim_is_mine(a)) sim_own_forget(index);
    if (sim_m->free_while_mapped != SIM_FREE_KEEP || !(a->flags & SIM_F_EXPORTED)) {
        sim_release_locked(index); /* never exported: no handle, so no open */
        return;
    }
    __atomic_fetch_or(&a->flags, SIM_F_KEPT, __ATOMIC_SEQ_CST);
    if (!serial_mapped(a->serial)) {
        sim_release_locked(index);
        return;
    }
    if (a->holder < sim_m->max_holders) {
        struct sim_holder *h = &sim_holders()[a->holder];
        if (h->pid == a->owner_pid && h->live) h->live--;
    }
    STORE(&a->holder, SIM_NO_INDEX);
    STORE(&a->owner_pid, 0);
    STORE(&a->owner_start, 0);
    a->ctx_id = 0;
    sim_m->kept++;
    sim_m->kept_frees++;
    sim_counters.frees++;
}

/* Gives row r back after its serial was cleared (by whoever won the CAS). */
static void row_free(uint32_t r)
{
    STORE(&sim_maps()[r].holder, 0);
    uint32_t hint = __atomic_load_n(&sim_m->map_hint, __ATOMIC_RELAXED);
    if (r < hint) __atomic_store_n(&sim_m->map_hint, r, __ATOMIC_RELAXED);
}

/* Ends the open in row r, which names `serial` (of entry `index`) and
 * belongs to this process or to a holder being swept: clears the serial
 * (a CAS, so of two threads only one closes it), frees the row, and in
 * keep mode releases a kept block whose last open this was. locked: the
 * caller holds the mutex. Returns 0 when the row no longer named `serial`. */
static int row_close(uint32_t r, uint32_t index, uint64_t serial, int locked)
{
    struct sim_map *m = &sim_maps()[r];
    uint64_t s = serial;
    if (serial == 0 ||
        !__atomic_compare_exchange_n(&m->serial, &s, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return 0;
    /* The close's side of the handshake at sim_owner_release_locked. The row is
     * given back only after it: a closer killed in between leaves its row
     * claimed, index intact, for the sweep (sim_unmap_holder_locked). */
    if (index < sim_m->max_allocs) {
        struct sim_alloc *a = sim_entry(index);
        uint32_t f = LOAD(&a->flags);
        int keeps = sim_m->free_while_mapped == SIM_FREE_KEEP ? (f & SIM_F_KEPT) : 0;
        if ((keeps || (f & SIM_F_VMM)) && LOAD(&a->serial) == serial) {
            if (!locked) sim_lock();
            release_if_unmapped_locked(index, serial);
            if (!locked) sim_unlock();
        }
    }
    row_free(r);
    return 1;
}

/* Drops the opens of holder k (in context ctx_id unless all). For another
 * holder (a dead one being swept) every row it claimed is freed, also one
 * it died in the middle of: claimed but not published (serial 0; its index
 * may be a former user's), or closed but not given back (serial 0, index
 * intact). For such a row the block its index names is released if it is
 * kept and no row names it any more: a KEPT entry without rows is garbage
 * in any case (no open can start on it, a closer that could still be
 * running re-checks under the mutex). For this process only published
 * rows: a row with serial 0 is another thread's open in progress. Caller
 * holds the mutex. */
void sim_unmap_holder_locked(uint32_t k, int all, uint64_t ctx_id)
{
    struct sim_map *m = sim_maps();
    uint32_t hw = LOAD(&sim_m->maps_hw), tag = k + 1;
    int mine = k == sim_self_holder() && sim_self_pid() != 0;
    for (uint32_t r = 0; r < hw && r < sim_m->max_maps; r++) {
        if (LOAD(&m[r].holder) != tag) continue;
        uint64_t serial = LOAD(&m[r].serial);
        uint32_t index = m[r].index;
        if (!all && m[r].ctx_id != ctx_id) continue;
        if (serial != 0) {
            row_close(r, index, serial, 1);
        } else if (!mine) {
            row_free(r);
            if (index < sim_m->max_allocs && (sim_m->free_while_mapped == SIM_FREE_KEEP ||
                                              (sim_entry(index)->flags & SIM_F_VMM)))
                release_if_unmapped_locked(index, sim_entry(index)->serial);
        }
    }
}

/* Claims a free row for this process (CAS of its holder word 0 -> ours),
 * starting at the machine's hint. Returns the row, or SIM_NO_INDEX when all
 * max_maps rows are taken. */
static uint32_t row_claim(void)
{
    struct sim_map *m = sim_maps();
    uint32_t max = sim_m->max_maps, tag = sim_self_holder() + 1;
    uint32_t r = __atomic_load_n(&sim_m->map_hint, __ATOMIC_RELAXED);
    if (r >= max) r = 0;
    for (uint32_t n = 0; n < max; n++, r = r + 1 < max ? r + 1 : 0) {
        if (__atomic_load_n(&m[r].holder, __ATOMIC_RELAXED) != 0) continue;
        /* Sweeps scan rows below maps_hw: raise it before the row is ours,
         * so that a claimer that dies right after the CAS is still found. */
        uint32_t hw = LOAD(&sim_m->maps_hw);
        while (hw <= r && !__atomic_compare_exchange_n(&sim_m->maps_hw, &hw, r + 1, 0,
                                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        }
        uint32_t zero = 0;
        if (__atomic_compare_exchange_n(&m[r].holder, &zero, tag, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&sim_m->map_hint, r + 1 < max ? r + 1 : 0, __ATOMIC_RELAXED);
            return r;
        }
    }
    return SIM_NO_INDEX;
}

/* Whether entry a is allocation `serial` at (dev, offset), LIVE, exported
 * and not kept, read without the mutex. The serial is read first and last:
 * serials are never reused, so when both reads give `serial` the reads in
 * between saw that allocation (or its release under way, which fails a
 * check), never a newer allocation at the same index. */
static int open_valid(const struct sim_alloc *a, uint64_t serial, unsigned dev, uint64_t offset)
{
    if (LOAD(&a->serial) != serial) return 0;
    int ok = LOAD(&a->state) == SIM_SLOT_LIVE && LOAD(&a->device) == dev &&
             LOAD(&a->offset) == offset &&
             (LOAD(&a->flags) & (SIM_F_EXPORTED | SIM_F_KEPT | SIM_F_VMM)) == SIM_F_EXPORTED;
    return ok && LOAD(&a->serial) == serial;
}

/* Whether the owner of entry a may still be running (see
 * sim_owner_alive_locked). Safe without the mutex: a torn read of a
 * changing owner gives "alive" (fields that do not match the holder
 * slot) or "dead" (the caller then re-checks under the mutex). */
static int owner_alive(const struct sim_alloc *a)
{
    uint32_t k = LOAD(&a->holder);
    int32_t pid = LOAD(&a->owner_pid);
    uint64_t start = LOAD(&a->owner_start);
    if ((LOAD(&a->flags) & SIM_F_KEPT) || sim_is_mine(a)) return 1;
    if (k >= sim_m->max_holders) return 1; /* not a holder of ours: nothing to sweep */
    const struct sim_holder *h = &sim_holders()[k];
    if (LOAD(&h->pid) != pid || LOAD(&h->start) != start)
        return 1; /* the slot moved on: a sweep would not find this owner either */
    return sim_proc_alive(pid, start);
}

int sim_owner_alive_locked(uint32_t index)
{
    return owner_alive(sim_entry(index));
}

int sim_map_open(uint32_t index, uint64_t serial, unsigned dev, uint64_t offset, uint64_t ctx_id,
                 enum sim_map_kind kind, uint32_t *row)
{
    if (!sim_attached() || index >= sim_m->max_allocs || serial == 0) return SIM_EINVAL;
    struct sim_alloc *a = sim_entry(index);
    if (!open_valid(a, serial, dev, offset)) return SIM_EINVAL; /* freed, kept or reused */
    if (sim_is_mine(a)) return SIM_EMINE;
    /* Only the block's owner is checked, without the mutex (a sweep of
     * every holder here put one /proc read per process under the machine
     * mutex on every open); when it looks gone, the sweep under the mutex
     * checks again and releases what it left, this block too. */
    if (!owner_alive(a)) {
        sim_lock();
        if (a->state == SIM_SLOT_LIVE && a->serial == serial && !sim_owner_alive_locked(index))
            sim_sweep_locked();
        sim_unlock();
        if (!open_valid(a, serial, dev, offset)) return SIM_EINVAL;
    }
    uint32_t r = row_claim();
    if (r == SIM_NO_INDEX) return SIM_ENOMEM; /* machine-wide table of opens full */
    struct sim_map *m = &sim_maps()[r];
    STORE(&m->index, index);
    STORE(&m->ctx_id, ctx_id);
    STORE(&m->kind, (uint64_t)kind);
    STORE(&m->serial, serial); /* published: from here this open is in force */
    /* The open's side of the handshake at sim_owner_release_locked. */
    if (open_valid(a, serial, dev, offset)) {
        *row = r;
        return SIM_OK;
    }
    row_close(r, index, serial, 0); /* freed meanwhile: back out like a close */
    return SIM_EINVAL;
}

void sim_map_del(uint32_t index, uint64_t serial, uint64_t ctx_id, uint32_t row)
{
    if (!sim_attached() || serial == 0) return;
    struct sim_map *m = sim_maps();
    uint32_t tag = sim_self_holder() + 1, hw = LOAD(&sim_m->maps_hw);
    /* Our own rows only change under our hands (or a ctx teardown of ours,
     * which the serial's CAS settles), so the hint can be checked directly. */
    if (row < hw && row < sim_m->max_maps && LOAD(&m[row].holder) == tag && m[row].index == index &&
        m[row].ctx_id == ctx_id && row_close(row, index, serial, 0))
        return;
    for (uint32_t r = 0; r < hw && r < sim_m->max_maps; r++)
        if (LOAD(&m[r].holder) == tag && LOAD(&m[r].serial) == serial && m[r].index == index &&
            m[r].ctx_id == ctx_id && row_close(r, index, serial, 0))
            return;
}

/* ---- VMM allocations (sim_state.h, "VMM memory") ---- */

/* Claims and publishes a row of this process for (index, serial). Caller
 * holds the mutex. Returns the row or SIM_NO_INDEX. */
static uint32_t vmm_row_locked(uint32_t index, uint64_t serial)
{
    uint32_t r = row_claim();
    if (r == SIM_NO_INDEX) return r;
    struct sim_map *m = &sim_maps()[r];
    STORE(&m->index, index);
    STORE(&m->ctx_id, SIM_VMM_CTX);
    STORE(&m->kind, (uint64_t)SIM_MAP_VMM);
    STORE(&m->serial, serial);
    return r;
}

int sim_vmm_create(unsigned dev, uint64_t size, uint32_t *index, uint64_t *offset, uint64_t *serial,
                   uint32_t *row)
{
    if (!sim_attached() || dev >= sim_m->ndev) return SIM_EINVAL;
    int rc = sim_alloc(dev, size, SIM_VMM_CTX, 0, dev, index, offset);
    if (rc != SIM_OK) return rc;
    sim_lock();
    struct sim_alloc *a = sim_entry(*index);
    /* Ownerless from here: the row below is this process's hold. */
    sim_own_forget(*index);
    if (a->holder < sim_m->max_holders) {
        struct sim_holder *h = &sim_holders()[a->holder];
        if (h->pid == a->owner_pid && h->live) h->live--;
    }
    STORE(&a->holder, SIM_NO_INDEX);
    STORE(&a->owner_pid, 0);
    STORE(&a->owner_start, 0);
    __atomic_fetch_or(&a->flags, SIM_F_VMM, __ATOMIC_SEQ_CST);
    *serial = a->serial;
    *row = vmm_row_locked(*index, *serial);
    if (*row == SIM_NO_INDEX) {
        sim_release_locked(*index);
        rc = SIM_ENOMEM;
    }
    sim_unlock();
    return rc;
}

int sim_vmm_hold(uint32_t index, uint64_t serial, unsigned *dev, uint64_t *offset, uint64_t *size,
                 uint32_t *row)
{
    if (!sim_attached() || index >= sim_m->max_allocs || serial == 0) return SIM_EINVAL;
    int rc = SIM_EINVAL;
    sim_lock();
    struct sim_alloc *a = sim_entry(index);
    if (a->state == SIM_SLOT_LIVE && a->serial == serial && (a->flags & SIM_F_VMM)) {
        *row = vmm_row_locked(index, serial);
        rc = *row == SIM_NO_INDEX ? SIM_ENOMEM : SIM_OK;
        if (rc == SIM_OK && (a->flags & SIM_F_KEPT)) { /* held again: no longer by the fd alone */
            __atomic_fetch_and(&a->flags, ~SIM_F_KEPT, __ATOMIC_SEQ_CST);
            sim_m->vmm_fd_kept--;
        }
        *dev = a->device;
        *offset = a->offset;
        *size = a->size;
    }
    sim_unlock();
    return rc;
}

void sim_vmm_drop(uint32_t index, uint64_t serial, uint32_t row)
{
    sim_map_del(index, serial, SIM_VMM_CTX, row);
}

int sim_vmm_fd_open(uint32_t index, uint64_t serial, const void *rec, size_t len)
{
    if (!sim_attached() || index >= sim_m->max_allocs || len > SIM_VMM_RECORD) return -1;
    char name[192];
    sim_vmm_file_name(name, sizeof(name));
    off_t at = (off_t)index * SIM_VMM_RECORD;
    int fd = -1;
    sim_lock();
    struct sim_alloc *a = sim_entry(index);
    if (a->state == SIM_SLOT_LIVE && a->serial == serial && (a->flags & SIM_F_VMM)) {
        if (!(a->flags & SIM_F_EXPORTED)) {
            int w = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
            if (w >= 0 && pwrite(w, rec, len, at) == (ssize_t)len) a->flags |= SIM_F_EXPORTED;
            if (w >= 0) close(w);
        }
        /* A new description of the one file per export, whose position
         * names the record, locked through itself: the lock lasts while any
         * fd of this description is open (dup, fork, SCM_RIGHTS included). */
        if (a->flags & SIM_F_EXPORTED) fd = shm_open(name, O_RDONLY, 0);
        struct flock l = {
            .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = SIM_VMM_RECORD};
        if (fd >= 0 && (lseek(fd, at, SEEK_SET) != at || fcntl(fd, F_OFD_SETLK, &l) < 0)) {
            close(fd);
            fd = -1;
        }
    }
    sim_unlock();
    return fd;
}

unsigned sim_vmm_reap_locked(int all)
{
    if (all) {
        char name[192];
        sim_vmm_file_name(name, sizeof(name));
        shm_unlink(name);
        return 0;
    }
    unsigned n = 0;
    for (uint32_t i = 0; i < sim_m->high_water; i++) {
        struct sim_alloc *a = sim_entry(i);
        if (a->state == SIM_SLOT_LIVE && (a->flags & SIM_F_VMM) && (a->flags & SIM_F_KEPT) &&
            !serial_mapped(a->serial))
            n += (unsigned)vmm_release_locked(i);
    }
    return n;
}
