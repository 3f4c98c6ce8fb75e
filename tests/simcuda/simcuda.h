/*
 * simcuda.h: the small public face of the simulated CUDA driver (libcuda.so.1
 * built from tests/simcuda). Shared by the driver, the simulated runtime and
 * the tests: environment variable names, the poison word written over freed
 * exported memory, and a few test-only entry points exported from libcuda
 * next to the cu* API. Nothing here exists in NVIDIA's driver; code that must
 * also run on real hardware looks these up with dlsym and copes with NULL.
 */
#ifndef SIMCUDA_H
#define SIMCUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Written over every byte of an allocation that was ever exported (with
 * cuIpcGetMemHandle or cuMemPoolExportPointer) when it is really released (cuMemFree, context
 * destruction, owner exit or death), so an importer still mapping it reads
 * 0xDEADBEEF words instead of plausible data. */
#define SIMCUDA_POISON_WORD 0xDEADBEEFu

/* Environment, read once per process at the first cuInit (see README.md). */
#define SIMCUDA_ENV_MACHINE "SIMCUDA_MACHINE" /* machine name, default "default" */
#define SIMCUDA_ENV_DEVICES "SIMCUDA_DEVICES" /* device count, 1..8, default 1 */
#define SIMCUDA_ENV_DEVICE_MEMORY                                                                  \
    "SIMCUDA_DEVICE_MEMORY"                                 /* bytes per device, K/M/G, default 1G \
                                                             */
#define SIMCUDA_ENV_FAIL_ALLOC "SIMCUDA_FAIL_ALLOC"         /* next N allocations fail */
#define SIMCUDA_ENV_FAIL_IPC_GET "SIMCUDA_FAIL_IPC_GET"     /* next N cuIpcGetMemHandle fail */
#define SIMCUDA_ENV_FAIL_IPC_OPEN "SIMCUDA_FAIL_IPC_OPEN"   /* next N cuIpcOpenMemHandle fail */
#define SIMCUDA_ENV_FAIL_IPC_CLOSE "SIMCUDA_FAIL_IPC_CLOSE" /* next N cuIpcCloseMemHandle fail */
#define SIMCUDA_ENV_FAIL_LAUNCH "SIMCUDA_FAIL_LAUNCH"       /* next N kernel launches fail */
/* next N cuMemCreate calls that ask for a shareable handle type fail */
#define SIMCUDA_ENV_FAIL_VMM_SHAREABLE "SIMCUDA_FAIL_VMM_SHAREABLE"
/* next N cuMemCreate calls of host-located memory fail */
#define SIMCUDA_ENV_FAIL_VMM_HOST "SIMCUDA_FAIL_VMM_HOST"
/* next N cuFuncGetParamInfo calls fail */
#define SIMCUDA_ENV_FAIL_PARAM_INFO "SIMCUDA_FAIL_PARAM_INFO"
/* next N cuMemMap calls fail */
#define SIMCUDA_ENV_FAIL_VMM_MAP "SIMCUDA_FAIL_VMM_MAP"
#define SIMCUDA_ENV_MANAGED_MEMORY                                                                 \
    "SIMCUDA_MANAGED_MEMORY" /* managed pool bytes, default 4 x device */
/* Allocation-table entries (live allocations, machine-wide), a count with
 * an optional K/M suffix (x1024), 1..16M, default 2M. Creator only. */
#define SIMCUDA_ENV_MAX_ALLOCS "SIMCUDA_MAX_ALLOCS"
/* What an exporter's free does to a block another process still maps:
 * "poison" (default: released and overwritten with SIMCUDA_POISON_WORD) or
 * "keep" (pages stay valid and charged until the last importer unmaps).
 * Creator only: a property of the machine. */
#define SIMCUDA_ENV_FREE_WHILE_MAPPED "SIMCUDA_FREE_WHILE_MAPPED"
/* What cuGetProcAddress hands out: "internal" (default), "alias", "global"
 * (resolver.c). Read at every call. */
#define SIMCUDA_ENV_PROC_ADDRESS "SIMCUDA_PROC_ADDRESS"
/* 1 (default): the first cuInit starts a sleeping helper thread, as
 * NVIDIA's driver starts its own; 0: none (the process stays
 * single-threaded unless it starts threads itself). */
#define SIMCUDA_ENV_DRIVER_THREAD "SIMCUDA_DRIVER_THREAD"

#define SIMCUDA_MAX_DEVICES 8

/* Fault kinds for simcuda_inject(); the same counters the SIMCUDA_FAIL_*
 * variables set. */
enum simcuda_fault {
    SIMCUDA_FAULT_ALLOC = 0,     /* cuMemAlloc*: CUDA_ERROR_OUT_OF_MEMORY */
    SIMCUDA_FAULT_IPC_GET,       /* cuIpcGetMemHandle: CUDA_ERROR_OUT_OF_MEMORY */
    SIMCUDA_FAULT_IPC_OPEN,      /* cuIpcOpenMemHandle*: CUDA_ERROR_MAP_FAILED */
    SIMCUDA_FAULT_IPC_CLOSE,     /* cuIpcCloseMemHandle: CUDA_ERROR_INVALID_CONTEXT */
    SIMCUDA_FAULT_LAUNCH,        /* cuLaunchKernel*: CUDA_ERROR_LAUNCH_FAILED */
    SIMCUDA_FAULT_VMM_SHAREABLE, /* cuMemCreate asking for a shareable handle type:
                                    CUDA_ERROR_NOT_SUPPORTED (a driver that refuses it) */
    SIMCUDA_FAULT_VMM_HOST,      /* cuMemCreate of host-located memory: CUDA_ERROR_NOT_SUPPORTED
                                    (a driver or system without it: host swap's fallback) */
    SIMCUDA_FAULT_PARAM_INFO,    /* cuFuncGetParamInfo: CUDA_ERROR_NOT_SUPPORTED (a kernel whose
                                    layout cannot be read: host swap's unknown-layout launch) */
    SIMCUDA_FAULT_VMM_MAP,       /* cuMemMap: CUDA_ERROR_OUT_OF_MEMORY (a move that cannot map
                                    its memory: host swap's failed fetch ahead) */
    SIMCUDA_FAULT_COUNT
};

/* Counters. "proc_" fields count what this process did since its cuInit;
 * the others describe the whole simulated machine at the time of the call. */
struct simcuda_stats {
    uint64_t proc_allocs;         /* successful device allocations */
    uint64_t proc_frees;          /* allocations this process released (incl. sweeps) */
    uint64_t proc_poisoned_frees; /* of those, how many were poisoned */
    uint64_t proc_ipc_gets;
    uint64_t proc_ipc_opens; /* successful opens, counting repeats */
    uint64_t proc_ipc_closes;
    uint64_t proc_launches;
    uint64_t proc_swept; /* allocations of dead owners this process reclaimed */
    uint32_t devices;
    uint32_t live_allocs; /* machine-wide live allocations */
    uint64_t capacity;    /* bytes per device */
    uint64_t used[SIMCUDA_MAX_DEVICES];
    uint64_t machine_poisoned_frees;
    uint64_t machine_kept; /* freed by their owner, kept while an importer maps them (keep mode) */
    uint64_t
        machine_kept_frees; /* owner frees that were kept (keep mode), since the machine began */
    uint64_t max_allocs;    /* allocation-table capacity (SIMCUDA_MAX_ALLOCS of the creator) */
    uint64_t proc_last_free_ns; /* CLOCK_MONOTONIC when this process's last free returned */
    /* Rows of the machine's table of IPC opens in force, by kind: legacy
     * opens (cuIpcOpenMemHandle, one per open, repeats included) and pool
     * imports (cuMemPoolImportPointer, one per import, repeats included),
     * in every process of the machine. An importer's close or free, its
     * context's end, its exit or the sweep of its death removes its rows. */
    uint64_t machine_ipc_opens;
    uint64_t machine_pool_imports;
    uint64_t proc_pool_exports; /* successful cuMemPoolExportPointer calls */
    uint64_t proc_pool_imports; /* successful cuMemPoolImportPointer calls, repeats included */
};

/* A recorded kernel launch (kernels are never executed, but for the
 * builtins of SIMCUDA_BUILTIN_PTX). */
struct simcuda_launch {
    void *func;
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared_mem;
    void *stream;
    void **params;
    void **extra;
};

/* Managed-memory counters. "proc_" fields count what this process caused
 * since its cuInit (or the last simcuda_reset_counters); bytes are counted
 * in whole allocations rounded up to 512 (residency is per allocation). */
struct simcuda_managed_stats {
    uint64_t proc_faults;     /* launches' touches of non-resident managed allocations */
    uint64_t proc_bytes_htod; /* host -> device (prefetch, fault) */
    uint64_t proc_bytes_dtoh; /* device -> host (prefetch, eviction) */
    uint64_t proc_bytes_dtod; /* device -> another device */
    uint64_t proc_migrations; /* residency changes, evictions included */
    uint64_t proc_evictions;  /* moves to host made to free room on a device */
    uint64_t proc_refused;    /* moves to a device that could not make room */
    uint32_t devices;
    uint32_t pad;
    uint64_t managed_capacity;                 /* bytes of the managed pool */
    uint64_t managed_used;                     /* bytes of live managed allocations, machine-wide */
    uint64_t resident[SIMCUDA_MAX_DEVICES];    /* managed bytes resident per device */
    uint64_t device_used[SIMCUDA_MAX_DEVICES]; /* ordinary allocations per device */
};

/* More managed-memory counters, for the host-swap tests (a struct of its own
 * so that programs built against the one above keep working). Same rules:
 * since cuInit or the last simcuda_reset_counters. */
struct simcuda_managed_peaks {
    uint64_t proc_fetches; /* moves host -> device (prefetch or fault) this process caused */
    uint64_t
        proc_peak_resident[SIMCUDA_MAX_DEVICES]; /* highest managed bytes resident per device, seen
                                                  * at any move this process caused (a reset
                                                  * restarts it from the bytes resident then) */
};

/* Where a managed allocation is, and the advice recorded for it. */
#define SIMCUDA_HOST (-1)    /* = CU_DEVICE_CPU */
#define SIMCUDA_NOWHERE (-2) /* = CU_DEVICE_INVALID: no preferred location */
struct simcuda_residency {
    int location;         /* SIMCUDA_HOST or the device it is resident on */
    int preferred;        /* SIMCUDA_NOWHERE, SIMCUDA_HOST or a device */
    unsigned accessed_by; /* bit d: device d; bit 31: the host */
    int read_mostly;
    uint64_t base;     /* the allocation's base pointer in this process */
    uint64_t size;     /* bytes requested */
    uint64_t last_use; /* LRU clock of its last device use (0: never) */
};

/* The layout of one kernel parameter, as cuFuncGetParamInfo reports it. */
struct simcuda_param {
    uint32_t offset;
    uint32_t size;
};

/* The kernels the simulator runs (driver_kernels.c), as PTX for
 * cuModuleLoadData; the same PTX runs on a device. Parameters (u32 *p, u64
 * count, u32 value): p[i] += value for i < count, one thread per word.
 * simcuda_add_u32_opaque is the same kernel, but the simulator's
 * cuFuncGetParamInfo refuses it (CUDA_ERROR_NOT_SUPPORTED): a kernel whose
 * launches an interposer cannot read. */
#define SIMCUDA_ADD_U32_PTX_ENTRY(NAME)                                                            \
    ".visible .entry " NAME "(\n"                                                                  \
    "\t.param .u64 " NAME "_param_0,\n"                                                            \
    "\t.param .u64 " NAME "_param_1,\n"                                                            \
    "\t.param .u32 " NAME "_param_2\n"                                                             \
    ")\n{\n"                                                                                       \
    "\t.reg .pred %p<2>;\n\t.reg .b32 %r<6>;\n\t.reg .b64 %rd<8>;\n"                               \
    "\tld.param.u64 %rd1, [" NAME "_param_0];\n"                                                   \
    "\tld.param.u64 %rd2, [" NAME "_param_1];\n"                                                   \
    "\tld.param.u32 %r1, [" NAME "_param_2];\n"                                                    \
    "\tmov.u32 %r2, %ctaid.x;\n\tmov.u32 %r3, %ntid.x;\n\tmov.u32 %r4, %tid.x;\n"                  \
    "\tmul.wide.u32 %rd3, %r2, %r3;\n\tcvt.u64.u32 %rd4, %r4;\n\tadd.s64 %rd3, %rd3, %rd4;\n"      \
    "\tsetp.ge.u64 %p1, %rd3, %rd2;\n\t@%p1 bra $L_" NAME "_done;\n"                               \
    "\tcvta.to.global.u64 %rd5, %rd1;\n\tshl.b64 %rd6, %rd3, 2;\n\tadd.s64 %rd7, %rd5, %rd6;\n"    \
    "\tld.global.u32 %r5, [%rd7];\n\tadd.s32 %r5, %r5, %r1;\n\tst.global.u32 [%rd7], %r5;\n"       \
    "$L_" NAME "_done:\n\tret;\n}\n"
#define SIMCUDA_BUILTIN_PTX                                                                        \
    ".version 8.0\n.target sm_90\n.address_size 64\n\n" SIMCUDA_ADD_U32_PTX_ENTRY(                 \
        "simcuda_add_u32") SIMCUDA_ADD_U32_PTX_ENTRY("simcuda_add_u32_opaque")

#if defined(__GNUC__)
#define SIMCUDA_API __attribute__((visibility("default")))
#else
#define SIMCUDA_API
#endif

/* Number of kernel launches recorded in this process since it was loaded. */
SIMCUDA_API unsigned long simcuda_launch_count(void);

/* Copies the launch `back` launches ago (0 = the latest) into *out; returns 0,
 * or -1 when there is no such launch (the log keeps the last 1024). */
SIMCUDA_API int simcuda_last_launch(unsigned back, struct simcuda_launch *out);

/* Fills *out; zeroes it when cuInit has not succeeded in this process. */
SIMCUDA_API void simcuda_stats(struct simcuda_stats *out);

/* Makes the next n operations of `kind` in this process fail. */
SIMCUDA_API void simcuda_inject(enum simcuda_fault kind, unsigned n);

/* Fills *out; zeroes it when cuInit has not succeeded in this process. */
SIMCUDA_API void simcuda_managed_stats(struct simcuda_managed_stats *out);

/* Fills *out; zeroes it when cuInit has not succeeded in this process. */
SIMCUDA_API void simcuda_managed_peaks(struct simcuda_managed_peaks *out);

/* Zeroes this process's proc_ counters of simcuda_managed_stats and
 * simcuda_managed_peaks. */
SIMCUDA_API void simcuda_reset_counters(void);

/* Residency of the managed allocation of this process containing ptr
 * (interior pointers too). Returns SIMCUDA_HOST or a device ordinal, or -2
 * when ptr is not in one. If `out` is not NULL it receives the details. */
SIMCUDA_API int simcuda_managed_residency(const void *ptr, struct simcuda_residency *out);

/* Holds (on != 0) or releases stream (NULL: the legacy stream) of this
 * process: while held, kernels launched on it stay queued, as if the
 * device were still running them, until the stream or the context is
 * synchronised or the hold is released (which completes them). A
 * cuMemUnmap under a queued kernel that may touch the range faults the
 * process's context, as NVIDIA's driver does (README, "Queued work").
 * Returns 0, or -1 for an unknown stream or too many holds. */
SIMCUDA_API int simcuda_stream_hold(void *stream, int on);

/* Kernels queued (on held streams, or behind them) in this process now. */
SIMCUDA_API unsigned simcuda_queued_launches(void);

/* How many cuStreamWaitEvent calls this process made with stream as the
 * waiting stream (NULL and CU_STREAM_LEGACY count as one; at most 64
 * streams are counted, the rest answer 0). */
SIMCUDA_API unsigned long simcuda_stream_waits(void *stream);
/* Kernels, copies and sets queued in this process now. */
SIMCUDA_API unsigned simcuda_queued_work(void);

/* Removes the shared-memory objects of machine `name` (NULL: the one named
 * by SIMCUDA_MACHINE, else "default") for the calling user. Processes that
 * still map them keep working on the unlinked objects. Returns the number of
 * objects removed. */
SIMCUDA_API int simcuda_unlink_machine(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* SIMCUDA_H */
