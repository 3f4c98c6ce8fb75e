/* vmm: the virtual memory management API (cuMemCreate, cuMemMap, ...) under
 * the shim: what this process creates, imports and maps (two local tables),
 * legacy IPC on that memory (the synthetic handle, issue 29 item 1) and the
 * process's part of the VMM ledger (double releases, imports never released
 * and mappings left at exit, each reported once with its call site).
 *
 * Every VMM call is passed to the driver and its answer returned; the only
 * change to what the driver sees is cuMemCreate's extra POSIX-fd handle
 * type, which is retried exactly as the program asked if the driver
 * refuses it. Legacy IPC on VMM memory acts only where the driver refused:
 *   export  cudaIpcGetMemHandle failed with invalid value on a pointer in a
 *           mapping of a shareable allocation of ours: export the allocation
 *           as a POSIX fd (kept open, served by fdpass), build a synthetic
 *           handle (struct vmm_wire) and record it in the registry as an
 *           export of kind IPC_KIND_VMM (leases, hand-offs, exit report);
 *   open    a handle with the magic that the registry knows (its 64 bytes,
 *           random nonce included, are the key: a forged one is not found
 *           and goes to the driver, which refuses it as any bad handle):
 *           the exporter's fd (fdpass), import, reserve,
 *           map, set access; the lease is the open's;
 *   close   unmap, release, free the reservation; the lease drops.
 * The exporter's unmap of an exported mapping is its "free" (ipc_free): the
 * record moves off the address (ipc_export_move: the program may map and
 * export another allocation there at once) and goes to limbo while
 * importers hold it; the driver itself keeps
 * the memory alive, so limbo's deferred free only closes the exported fd
 * (vmm_free_block). */
#include "vmm.h"
#include "hooks.h"
#include "resolve.h"
#include "callsite.h"
#include "fdpass.h"
#include "ipc.h"
#include "leak.h"
#include "log.h"
#include "options.h"
#include "uthash_wrap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* The synthetic handle's 64 bytes. The magic never starts a driver handle
 * (NVIDIA's and the simulator's begin with small little-endian words). */
#define VMM_MAGIC 0x314d4d5648535049ull /* "IPSHVMM1" */
struct vmm_wire {
    uint64_t magic;
    uint32_t pid;    /* the exporter */
    int32_t fd;      /* the exported POSIX fd, in the exporter */
    uint64_t size;   /* the allocation's */
    uint64_t offset; /* where the exporter's mapping starts in the allocation */
    uint64_t length; /* the exporter's mapping's length */
    uint64_t nonce;  /* random: the registry knows only the handles it was given */
    int32_t device;
    uint32_t reserved;
    uint64_t check; /* vmm_check of the words before it */
};
_Static_assert(sizeof(struct vmm_wire) == IPC_HANDLE_BYTES, "a synthetic handle is a legacy one");

/* An allocation handle this process created, imported or retained. */
struct vmm_alloc {
    CUmemGenericAllocationHandle handle; /* key */
    uint64_t size;
    int device;
    int refs;        /* create/import/retain minus releases */
    bool shareable;  /* created with the POSIX fd handle type */
    bool imported;   /* by the program (cuMemImportFromShareableHandle) */
    bool double_hit; /* a double release was reported */
    uint32_t site;   /* call site of its creation or import */
    uint64_t ledger; /* direct sharing: the export record's or the import lease's pseudo address */
    uint64_t ledger_id; /* the export record's identity (IPC_IDENTITY_VMM | serial) */
    uint64_t lock;      /* direct sharing: the key's lock offset (direct_mark) */
    UT_hash_handle hh;
};

/* A mapping [va, va + size) of (handle, offset); its export, if any. */
struct vmm_map {
    uint64_t va; /* key */
    uint64_t size, offset;
    CUmemGenericAllocationHandle handle;
    uint32_t site;
    int export_fd;        /* -1: not exported through legacy IPC */
    uint64_t export_id;   /* IPC_IDENTITY_VMM | serial while exported */
    struct vmm_wire wire; /* the synthetic handle, when exported */
    bool shim_import;     /* a synthetic handle's open (the shim maps it) */
    uint64_t reserve;     /* shim_import: the reservation to free at close */
    UT_hash_handle hh;
};

/* An exported fd whose record went with its mapping, kept until limbo lets
 * go of the registry record (vmm_free_block). */
struct vmm_kept {
    uint64_t id; /* key: export identity */
    int fd;
    UT_hash_handle hh;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_alloc *allocs;
static struct vmm_map *maps;
/* Synthetic handles' opens in force: the close path's gate, so that the
 * close of any other IPC mapping takes no lock here (relaxed: a stale value
 * only sends a close to the table, which answers). */
static int shim_imports_open;
static struct vmm_kept *kept;
static uint64_t export_serial, import_serial;
/* The fork chain's child step (init.c): the parent's handles and mappings
 * mean nothing in the child. Trap: the tables are abandoned, not freed, and
 * the lock made anew, because vmm_lock is not held across fork (a thread may
 * hold it across a real driver call, and the driver's own fork handlers may
 * wait for that thread): they may be mid-update. The child's copies of the
 * parent's exported fds are forgotten, not closed. */
void vmm_postfork_child(void)
{
    pthread_mutex_init(&vmm_lock, NULL);
    allocs = NULL;
    maps = NULL;
    kept = NULL;
    __atomic_store_n(&shim_imports_open, 0, __ATOMIC_RELAXED);
}

static uint64_t vmm_check(const struct vmm_wire *w)
{
    const uint64_t *words = (const uint64_t *)w;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < offsetof(struct vmm_wire, check) / 8; i++)
        h = (h ^ words[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

bool vmm_handle_synthetic(const void *handle)
{
    struct vmm_wire w;
    memcpy(&w, handle, sizeof w);
    return w.magic == VMM_MAGIC && w.check == vmm_check(&w);
}

static const char *site_text(uint32_t site, char *buf, size_t len)
{
    const char *s = site ? callsite_format(site, buf, len) : NULL;
    return s && *s ? s : "an unknown call site";
}

/* ---- direct sharing: the program's own POSIX-fd exports and imports ----
 * PyTorch's expandable segments, NCCL and UCX share VMM memory themselves:
 * cuMemExportToShareableHandle, the fd to a peer (pidfd_getfd, SCM_RIGHTS,
 * fork), cuMemImportFromShareableHandle there. The ledger records that
 * passively: the export makes (once per allocation) a registry record of
 * kind vmm owned by the exporter; the import takes a lease on it
 * (ipc_import_begin) that its last cuMemRelease ends. Both live at pseudo
 * addresses (IPC_LEDGER_ADDRESS and up: above any user address, so no free
 * or close of the program's can ever reach them). The record's "free" is
 * the exporter's letting go: its last release with no mapping of it left.
 *
 * The key: NVIDIA's driver hands out every such fd as a new open of
 * /dev/nvidiactl, one inode for every allocation, and finds the allocation
 * from the open file description; an fd number differs per process. So the
 * exporter marks the description itself: a read OFD lock at an offset
 * drawn once per allocation (struct vmm_direct_key's lock, far above any
 * offset a program or the simulator locks). The lock lives exactly as long
 * as the description, goes wherever the fd goes (dup, fork, SCM_RIGHTS,
 * pidfd_getfd), and the importer reads it back from its own fd's
 * /proc/self/fdinfo ("lock:" lines list the locks its description holds),
 * with no ptrace rights and no syscall a container's seccomp filter
 * refuses (kcmp). A read lock conflicts with no one's. */
#define VMM_DIRECT_MAGIC                                                                           \
    0x315249444d4d5649ull /* "IVMMDIR1": never a driver or synthetic handle                        \
                           */
#define VMM_LEDGER_EXPORT IPC_LEDGER_ADDRESS
#define VMM_LEDGER_IMPORT (IPC_LEDGER_ADDRESS | (1ull << 61))
#define VMM_LEDGER_STEP (1ull << 21)
/* A legacy export's record once its mapping is gone (do_cuMemUnmap). */
#define VMM_LEDGER_MOVED (IPC_LEDGER_ADDRESS | (1ull << 60))
/* The direct keys' lock offsets: [2^62, 2^63 - 2]. */
#define VMM_LOCK_BASE (1ull << 62)
#define VMM_LOCK_SPAN ((1ull << 62) - 2)
struct vmm_direct_key {
    uint64_t magic;
    uint64_t lock; /* the lock's offset */
    uint64_t zero[5];
    uint64_t check;
};
_Static_assert(sizeof(struct vmm_direct_key) == IPC_HANDLE_BYTES, "a key is a handle's size");

bool vmm_handle_direct(const void *handle)
{
    struct vmm_direct_key k;
    memcpy(&k, handle, sizeof k);
    return k.magic == VMM_DIRECT_MAGIC && k.check == vmm_check((const struct vmm_wire *)&k);
}

static void direct_key_of(uint64_t lock, struct ipc_handle *h)
{
    struct vmm_direct_key k = {.magic = VMM_DIRECT_MAGIC, .lock = lock};
    k.check = vmm_check((const struct vmm_wire *)&k);
    memcpy(h->bytes, &k, sizeof k);
}

/* A new allocation's lock offset (random: one inode holds every process's
 * marks on the real driver). */
static uint64_t direct_lock_new(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
        r = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&r ^ ++export_serial;
    return VMM_LOCK_BASE + r % VMM_LOCK_SPAN;
}

/* Marks fd's description with lock. 0, or -1 (logged once). */
static int direct_mark(int fd, uint64_t lock)
{
    struct flock l = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = (off_t)lock, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &l) == 0) return 0;
    LOG_ONCE(LOG_INFO,
             "the driver's VMM POSIX fds take no lock (errno %d): direct VMM sharing is not "
             "recorded in the ledger",
             errno);
    return -1;
}

/* The key fd's description carries (direct_mark), read from
 * /proc/self/fdinfo/fd into h. 0, or -1 when it carries none. */
static int direct_key(int fd, struct ipc_handle *h)
{
    char path[64], buf[4096];
    if (fd < 0) return -1;
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0) return -1;
    ssize_t n = read(in, buf, sizeof buf - 1);
    close(in);
    if (n <= 0) return -1;
    buf[n] = 0;
    /* "lock:\t1: OFDLCK  ADVISORY  READ  -1 00:1a:7 START END" */
    for (char *line = strstr(buf, "lock:"); line; line = strstr(line + 1, "lock:")) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        char *last = strrchr(line, ' ');
        char *prev = last;
        while (prev && prev > line && prev[-1] != ' ')
            prev--;
        unsigned long long start = 0, end = 0;
        bool ours = strstr(line, "OFDLCK") && strstr(line, "READ") && last && prev > line &&
                    sscanf(prev, "%llu %llu", &start, &end) == 2 && start == end &&
                    start >= VMM_LOCK_BASE && start - VMM_LOCK_BASE < VMM_LOCK_SPAN;
        if (eol) *eol = '\n';
        if (ours) {
            direct_key_of(start, h);
            return 0;
        }
    }
    return -1;
}

static uint64_t current_ctx(void)
{
    CUcontext ctx = NULL;
    if (REAL(cuCtxGetCurrent)) real_cuCtxGetCurrent(&ctx);
    return (uint64_t)ctx;
}

/* After the program's own successful POSIX-fd export of allocation handle
 * as fd: the fd's description marked with the allocation's key, its record
 * (once per allocation) and one more hand-off. Passive: nothing is
 * recorded when the allocation is not one this process created, the fd
 * takes no lock, or the registry is full. */
static void vmm_note_direct_export(CUmemGenericAllocationHandle handle, int fd)
{
    if (!shim_tracking() || fd < 0) return;
    uint64_t base = 0, size = 0, id = 0, lock = 0;
    int device = -1;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a;
    HASH_FIND(hh, allocs, &handle, sizeof handle, a);
    if (a && !a->imported && a->refs > 0) {
        if (!a->ledger) {
            a->ledger_id = IPC_IDENTITY_VMM | ++export_serial;
            a->ledger = VMM_LEDGER_EXPORT + export_serial * VMM_LEDGER_STEP;
            a->lock = direct_lock_new();
        }
        base = a->ledger, id = a->ledger_id, size = a->size, device = a->device, lock = a->lock;
    }
    pthread_mutex_unlock(&vmm_lock);
    if (!base || direct_mark(fd, lock)) return;
    struct ipc_handle key;
    direct_key_of(lock, &key);
    /* Once per allocation: exported again, one more hand-off. */
    if (ipc_export_identity(&key, base, size, device, current_ctx(), id, IPC_KIND_VMM) == 0)
        hooks_first_export();
}

/* The program's own export (symbols.def): a POSIX fd is served by fdpass
 * (fdpass_note_exported) and recorded in the ledger. */
CUresult do_cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                         CUmemAllocationHandleType handleType,
                                         unsigned long long flags)
{
    CUresult rc = CALL_REAL_DRIVER(cuMemExportToShareableHandle,
                                   (shareableHandle, handle, handleType, flags));
    if (rc == CUDA_SUCCESS && handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
        shareableHandle) {
        fdpass_note_exported(*(int *)shareableHandle);
        vmm_note_direct_export(handle, *(int *)shareableHandle);
    }
    return rc;
}

/* The exporter lets go of a's record when no handle and no mapping of it
 * are left here: its pseudo address to ipc_free (0: not yet, or none).
 * vmm_lock held. */
static uint64_t direct_export_done_locked(struct vmm_alloc *a)
{
    if (!a || a->imported || !a->ledger || a->refs > 0) return 0;
    struct vmm_map *m, *tmp;
    HASH_ITER(hh, maps, m, tmp)
    if (m->handle == a->handle && !m->shim_import) return 0;
    uint64_t base = a->ledger;
    a->ledger = 0;
    return base;
}

/* The end of a direct import's lease (its last release). */
static void direct_unimport(uint64_t ptr)
{
    struct ipc_close t;
    if (ipc_unimport_begin(ptr, &t) == IPC_REAL) ipc_close_finish(&t);
}

/* After the program's import of fd as handle h (a new entry of ours): a
 * lease on the exporter's record, if there is one. */
static void direct_import(CUmemGenericAllocationHandle h, int fd)
{
    struct ipc_handle key;
    struct ipc_open t;
    uint64_t ptr = 0;
    if (direct_key(fd, &key)) return;
    int rc = ipc_import_begin(&key, current_ctx(), &t, &ptr);
    if (rc == IPC_REAL) {
        pthread_mutex_lock(&vmm_lock);
        ptr = VMM_LEDGER_IMPORT + ++import_serial * VMM_LEDGER_STEP;
        pthread_mutex_unlock(&vmm_lock);
        ipc_open_commit(&t, ptr);
    } else if (rc != IPC_DONE) {
        return; /* not recorded (an exporter not under the shim), or gone */
    }
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a;
    HASH_FIND(hh, allocs, &h, sizeof h, a);
    if (a && a->imported && a->refs > 0 && !a->ledger) a->ledger = ptr, ptr = 0;
    pthread_mutex_unlock(&vmm_lock);
    if (ptr) direct_unimport(ptr); /* released meanwhile */
}

/* ---- the interposed calls: pass through, note what happened ---- */

CUresult do_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                        const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!REAL(cuMemCreate)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    bool asked = prop && (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    bool added = false;
    if (shim_tracking() && handle && prop && !asked &&
        prop->type == CU_MEM_ALLOCATION_TYPE_PINNED) {
        CUmemAllocationProp more = *prop; /* the caller's struct is never changed */
        more.requestedHandleTypes |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        r = real_cuMemCreate(handle, size, &more, flags);
        added = r == CUDA_SUCCESS;
        if (!added)
            LOG_ONCE(LOG_INFO,
                     "cuMemCreate refused the POSIX fd handle type (%d); retried as the program "
                     "asked (that memory cannot be shared through legacy IPC)",
                     r);
    }
    if (!added) r = real_cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS || !shim_tracking() || !handle) return r;
    struct vmm_alloc *a = calloc(1, sizeof *a);
    if (!a) return r;
    a->handle = *handle, a->size = size, a->refs = 1, a->shareable = asked || added;
    a->device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
    a->site = callsite_capture();
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *old;
    HASH_FIND(hh, allocs, &a->handle, sizeof a->handle, old);
    uint64_t stale = 0; /* a record of the handle's last allocation, still mapped here */
    if (old) {          /* a handle value reused after its release */
        stale = old->imported ? 0 : old->ledger;
        HASH_DEL(allocs, old);
        free(old);
    }
    HASH_ADD(hh, allocs, handle, sizeof a->handle, a);
    if (!a->hh.tbl) free(a); /* no memory for the table: left unnoted */
    pthread_mutex_unlock(&vmm_lock);
    if (stale) ipc_free(stale);
    return r;
}

/* A double release is reported once per allocation, with the call site of
 * its creation; the driver's answer is returned either way. */
CUresult do_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult r = CALL_REAL_DRIVER(cuMemRelease, (handle));
    if (!shim_tracking()) return r;
    char buf[256];
    uint64_t export_done = 0, import_done = 0;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a;
    HASH_FIND(hh, allocs, &handle, sizeof handle, a);
    if (a && a->refs > 0) {
        if (r == CUDA_SUCCESS) a->refs--; /* at 0 kept: a further release is a double one */
        export_done = direct_export_done_locked(a);
        if (a->imported && !a->refs && a->ledger) import_done = a->ledger, a->ledger = 0;
    } else if (a && !a->double_hit) {
        a->double_hit = true;
        log_report("VMM allocation %#llx (%llu bytes, created at %s) released twice "
                   "(cuMemRelease returned %d)",
                   (unsigned long long)handle, (unsigned long long)a->size,
                   site_text(a->site, buf, sizeof buf), r);
    }
    pthread_mutex_unlock(&vmm_lock);
    if (export_done) ipc_free(export_done); /* limbo while importers hold it */
    if (import_done) direct_unimport(import_done);
    return r;
}

CUresult do_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult r = CALL_REAL_DRIVER(cuMemRetainAllocationHandle, (handle, addr));
    if (r != CUDA_SUCCESS || !shim_tracking() || !handle) return r;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a;
    HASH_FIND(hh, allocs, handle, sizeof *handle, a);
    if (a) a->refs++;
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

CUresult do_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                     CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = CALL_REAL_DRIVER(cuMemMap, (ptr, size, offset, handle, flags));
    if (r != CUDA_SUCCESS || !shim_tracking()) return r;
    struct vmm_map *m = calloc(1, sizeof *m);
    if (!m) return r;
    m->va = ptr, m->size = size, m->offset = offset, m->handle = handle, m->export_fd = -1;
    m->site = callsite_capture();
    pthread_mutex_lock(&vmm_lock);
    struct vmm_map *old;
    HASH_FIND(hh, maps, &m->va, sizeof m->va, old);
    if (old) {
        HASH_DEL(maps, old);
        free(old);
    }
    struct vmm_alloc *a;
    HASH_FIND(hh, allocs, &handle, sizeof handle, a);
    if (a && !a->size) a->size = offset + size; /* an import's size: at least this */
    HASH_ADD(hh, maps, va, sizeof m->va, m);
    if (!m->hh.tbl) free(m);
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

/* One mapping that [ptr, ptr + size) unmapped: out of the table; an exported
 * one's fd is kept for limbo (vmm_free_block) and its identity returned
 * (0: none). vmm_lock held. */
static uint64_t unmapped_locked(struct vmm_map *m)
{
    HASH_DEL(maps, m);
    struct vmm_kept *k = m->export_fd >= 0 ? calloc(1, sizeof *k) : NULL;
    uint64_t id = 0;
    if (k) {
        k->id = m->export_id, k->fd = m->export_fd;
        HASH_ADD(hh, kept, id, sizeof k->id, k);
        if (k->hh.tbl)
            id = k->id;
        else
            close(k->fd), free(k);
    } else if (m->export_fd >= 0) {
        close(m->export_fd);
    }
    free(m);
    return id;
}

/* The exporter's unmap of an exported mapping is the export's free: limbo
 * (importers hold it; the driver keeps the memory) or retired now. One
 * unmap may cover several mappings. */
CUresult do_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = CALL_REAL_DRIVER(cuMemUnmap, (ptr, size));
    if (r != CUDA_SUCCESS || !shim_tracking()) return r;
    for (;;) {
        uint64_t va = 0, id = 0, export_done = 0;
        pthread_mutex_lock(&vmm_lock);
        struct vmm_map *m, *tmp;
        HASH_ITER(hh, maps, m, tmp)
        if (!m->shim_import && m->va >= ptr && m->va - ptr < size) break;
        if (m) {
            CUmemGenericAllocationHandle h = m->handle;
            va = m->va, id = unmapped_locked(m);
            struct vmm_alloc *a;
            HASH_FIND(hh, allocs, &h, sizeof h, a);
            export_done = direct_export_done_locked(a);
        }
        pthread_mutex_unlock(&vmm_lock);
        if (!va) return r;
        if (id) {
            /* The record leaves the address, which the program may map
             * another allocation at and export while this one's importers
             * hold it (the driver keeps it for them). */
            uint64_t at = VMM_LEDGER_MOVED + (id & ~IPC_IDENTITY_VMM) * VMM_LEDGER_STEP;
            if (ipc_export_move(va, at) != 0) at = va;
            if (ipc_free(at) != IPC_DONE) vmm_free_block(id);
        }
        if (export_done) ipc_free(export_done);
    }
}

CUresult do_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                           CUmemAllocationHandleType shHandleType)
{
    CUresult r = CALL_REAL_DRIVER(cuMemImportFromShareableHandle, (handle, osHandle, shHandleType));
    if (r != CUDA_SUCCESS || !shim_tracking() || !handle) return r;
    struct vmm_alloc *a = calloc(1, sizeof *a);
    if (!a) return r;
    a->handle = *handle, a->refs = 1, a->imported = true, a->device = -1;
    a->site = callsite_capture();
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *old;
    HASH_FIND(hh, allocs, &a->handle, sizeof a->handle, old);
    bool added = false;
    if (old && old->refs > 0) {
        old->refs++; /* the driver hands back the same handle for a second import */
        free(a);
    } else {
        if (old) { /* released before: this import starts anew */
            HASH_DEL(allocs, old);
            free(old);
        }
        HASH_ADD(hh, allocs, handle, sizeof a->handle, a);
        added = a->hh.tbl != NULL;
        if (!added) free(a);
    }
    pthread_mutex_unlock(&vmm_lock);
    if (added && shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        direct_import(*handle, (int)(intptr_t)osHandle);
    return r;
}

/* ---- legacy IPC on VMM memory ---- */

/* The mapping holding ptr. vmm_lock held. */
static struct vmm_map *map_of(uint64_t ptr)
{
    struct vmm_map *m, *tmp;
    HASH_ITER(hh, maps, m, tmp)
    if (ptr >= m->va && ptr - m->va < m->size && !m->shim_import) return m;
    return NULL;
}

/* Build m's synthetic handle and export fd, once. vmm_lock held. */
static int export_locked(struct vmm_map *m, const struct vmm_alloc *a)
{
    if (m->export_fd >= 0) return 0;
    int fd = -1;
    CUresult r = REAL(cuMemExportToShareableHandle)
                     ? real_cuMemExportToShareableHandle(
                           &fd, m->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                     : CUDA_ERROR_NOT_INITIALIZED;
    if (r != CUDA_SUCCESS) {
        LOG_RATE(LOG_WARN, "legacy IPC on VMM memory: export of the allocation failed (%d)", r);
        return -EINVAL;
    }
    struct vmm_wire *w = &m->wire;
    memset(w, 0, sizeof *w);
    w->magic = VMM_MAGIC, w->pid = (uint32_t)getpid(), w->fd = fd, w->size = a->size;
    w->offset = m->offset, w->length = m->size, w->device = a->device;
    if (getrandom(&w->nonce, sizeof w->nonce, GRND_NONBLOCK) != sizeof w->nonce)
        w->nonce = (uint64_t)(uintptr_t)m ^ ((uint64_t)getpid() << 32) ^ (uint64_t)fd;
    w->check = vmm_check(w);
    m->export_fd = fd;
    m->export_id = IPC_IDENTITY_VMM | ++export_serial;
    fdpass_note_exported(fd);
    return 0;
}

int vmm_export_legacy(void *handle_out, uint64_t ptr)
{
    if (!shim_tracking() || !handle_out) return -EINVAL;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_map *m = map_of(ptr);
    struct vmm_alloc *a = NULL;
    if (m) HASH_FIND(hh, allocs, &m->handle, sizeof m->handle, a);
    int rc = !m ? -ENOENT : !a || !a->shareable || a->imported ? -EPERM : export_locked(m, a);
    struct vmm_wire w;
    uint64_t base = m ? m->va : 0, length = m ? m->size : 0, id = m ? m->export_id : 0;
    int device = a ? a->device : -1;
    if (rc == 0) w = m->wire;
    pthread_mutex_unlock(&vmm_lock);
    if (rc == -EPERM)
        LOG_ONCE(LOG_WARN,
                 "export of %#llx refused by CUDA: its VMM allocation was created without a "
                 "shareable handle type the shim could add; ipcshim passes the error through",
                 (unsigned long long)ptr);
    if (rc) return rc;
    struct ipc_handle h;
    memcpy(h.bytes, &w, sizeof h.bytes);
    CUcontext ctx = NULL;
    if (REAL(cuCtxGetCurrent)) real_cuCtxGetCurrent(&ctx);
    rc = ipc_export_identity(&h, base, length, device, (uint64_t)ctx, id, IPC_KIND_VMM);
    if (rc == 0) hooks_first_export();
    memcpy(handle_out, &w, sizeof w);
    return 0; /* untracked (registry full): the handle still works where the registry does */
}

/* The exporter's fd, from its shim over fdpass (fdpass.c: a peer of the
 * same user and domain only, an fd it exported only). Not pidfd_getfd:
 * the shim never calls pidfd_* itself (pidfd.c), and the exporter of a
 * synthetic handle always runs the fd server. A new fd, or a negative
 * errno. */
static int fetch_fd(pid_t pid, int fd)
{
    return fdpass_fetch(pid, fd);
}

/* Undo a partial import. */
static void import_undo(CUmemGenericAllocationHandle h, uint64_t va, uint64_t size, bool mapped)
{
    if (mapped) real_cuMemUnmap(va, size);
    if (va) real_cuMemAddressFree(va, size);
    if (h) real_cuMemRelease(h);
}

int vmm_open(const void *handle, uint64_t *out)
{
    struct vmm_wire w;
    memcpy(&w, handle, sizeof w);
    if (!REAL(cuMemImportFromShareableHandle) || !REAL(cuMemAddressReserve) || !REAL(cuMemMap) ||
        !REAL(cuMemSetAccess) || !REAL(cuMemUnmap) || !REAL(cuMemAddressFree) ||
        !REAL(cuMemRelease) || w.offset >= w.size || w.length > w.size - w.offset)
        return -EINVAL;
    int fd = fetch_fd((pid_t)w.pid, w.fd);
    if (fd < 0) {
        LOG_RATE(LOG_WARN, "open of a VMM handle of pid %u failed: its fd could not be had (%d)",
                 w.pid, fd);
        return fd;
    }
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    CUresult r = real_cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r == CUDA_SUCCESS) r = real_cuMemAddressReserve(&va, w.size, 0, 0, 0);
    if (r == CUDA_SUCCESS) r = real_cuMemMap(va, w.size, 0, h, 0);
    bool mapped = r == CUDA_SUCCESS;
    CUdevice dev = 0;
    if (r == CUDA_SUCCESS && REAL(cuCtxGetDevice) && real_cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        dev = w.device >= 0 ? w.device : 0;
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (r == CUDA_SUCCESS) r = real_cuMemSetAccess(va, w.size, &access, 1);
    struct vmm_map *m = r == CUDA_SUCCESS ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        LOG_RATE(LOG_WARN, "open of a VMM handle of pid %u failed: CUresult %d", w.pid, r);
        import_undo(h, va, w.size, mapped);
        return -EINVAL;
    }
    m->va = va + w.offset, m->size = w.length, m->handle = h, m->export_fd = -1;
    m->shim_import = true, m->reserve = va, m->wire = w;
    pthread_mutex_lock(&vmm_lock);
    HASH_ADD(hh, maps, va, sizeof m->va, m);
    bool added = m->hh.tbl != NULL;
    if (added) __atomic_add_fetch(&shim_imports_open, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&vmm_lock);
    if (!added) {
        free(m);
        import_undo(h, va, w.size, true);
        return -ENOMEM;
    }
    *out = va + w.offset;
    return 0;
}

bool vmm_is_open(uint64_t ptr)
{
    if (!__atomic_load_n(&shim_imports_open, __ATOMIC_RELAXED)) return false;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_map *m;
    HASH_FIND(hh, maps, &ptr, sizeof ptr, m);
    bool yes = m && m->shim_import;
    pthread_mutex_unlock(&vmm_lock);
    return yes;
}

int vmm_close(uint64_t ptr)
{
    pthread_mutex_lock(&vmm_lock);
    struct vmm_map *m;
    HASH_FIND(hh, maps, &ptr, sizeof ptr, m);
    if (m && m->shim_import) {
        HASH_DEL(maps, m);
        __atomic_sub_fetch(&shim_imports_open, 1, __ATOMIC_RELAXED);
    } else {
        m = NULL;
    }
    pthread_mutex_unlock(&vmm_lock);
    if (!m) return -ENOENT;
    import_undo(m->handle, m->reserve, m->wire.size, true);
    free(m);
    return 0;
}

int vmm_free_block(uint64_t identity)
{
    pthread_mutex_lock(&vmm_lock);
    struct vmm_kept *k;
    HASH_FIND(hh, kept, &identity, sizeof identity, k);
    if (k) HASH_DEL(kept, k);
    pthread_mutex_unlock(&vmm_lock);
    if (k) close(k->fd), free(k);
    return 0;
}

/* ---- the exit report ---- */

/* One kind of item left at exit: a summary line (the first item's call
 * site), or with IPCSHIM_LEAK_REPORT=full one line per item. */
struct left {
    int n;
    uint64_t bytes;
    uint32_t first_site;
};

static void left_item(struct left *l, bool full, const char *what, uint64_t id, uint64_t bytes,
                      uint32_t site)
{
    char buf[256];
    if (!l->n++) l->first_site = site;
    l->bytes += bytes;
    if (full)
        log_report("VMM %s %#llx (%llu bytes) at exit, from %s", what, (unsigned long long)id,
                   (unsigned long long)bytes, site_text(site, buf, sizeof buf));
}

static void left_summary(const struct left *l, const char *what)
{
    char buf[256];
    if (l->n)
        log_report("pid %d exits with %d VMM %s (%llu bytes), the first from %s", (int)getpid(),
                   l->n, what, (unsigned long long)l->bytes,
                   site_text(l->first_site, buf, sizeof buf));
}

void vmm_report_exit(void)
{
    int mode = options_get()->leak_report;
    if (!shim_tracking() || mode == LEAK_REPORT_OFF) return;
    bool full = mode == LEAK_REPORT_FULL;
    struct left imports = {0}, mappings = {0};
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a, *ta;
    HASH_ITER(hh, allocs, a, ta)
    if (a->imported && a->refs > 0)
        left_item(&imports, full, "allocation imported and never released", a->handle, a->size,
                  a->site);
    struct vmm_map *m, *tm;
    HASH_ITER(hh, maps, m, tm)
    if (!m->shim_import) left_item(&mappings, full, "mapping left", m->va, m->size, m->site);
    pthread_mutex_unlock(&vmm_lock);
    if (!full) {
        left_summary(&imports, "allocation(s) imported and never released");
        left_summary(&mappings, "mapping(s) never unmapped");
    }
}
