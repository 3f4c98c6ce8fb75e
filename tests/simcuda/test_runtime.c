/*
 * test_runtime.c: Criterion tests of the simulated runtime libcudart.so.13.
 *
 * The binary is linked like a user program, against the real toolkit's
 * libcudart when meson finds it (else against the simulator), and run with
 * LD_LIBRARY_PATH at the simulator's build folder, so the first test checks
 * that the runtime actually loaded is the simulator. Every test runs in its
 * own process on its own simulated machine (SIMCUDA_MACHINE=rt-<test>-<pid>,
 * set in .init before any CUDA call) and removes its shared-memory objects
 * in .fini. Test-only entry points (simcudart_resolved_count in the runtime,
 * simcuda_* in the driver) are found with dlsym because the real runtime
 * does not have them. The IPC test re-executes this binary as the importing
 * process (SIMCUDART_IPC_CHILD set; see the constructor below): real CUDA
 * does not support fork without exec either. The nvcc tests run the
 * programs built from runtime_launch.cu and runtime_managed.cu when meson
 * had nvcc; without it, a hand-made fat binary holding PTX still covers
 * parameter layouts and launch faults through the runtime.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simcuda.h"

#ifndef SIMCUDA_DIR
#error "SIMCUDA_DIR (the simulator's build folder) must be defined"
#endif

extern char **environ;

/* nvcc's registration entry points, declared only for C++ by the toolkit. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);

static char machine[160];

static void setup(void)
{
    snprintf(machine, sizeof machine, "rt-%s-%d", criterion_current_test->name, (int)getpid());
    setenv(SIMCUDA_ENV_MACHINE, machine, 1);
}

static void teardown(void)
{
    char pattern[256];
    glob_t g;
    snprintf(pattern, sizeof pattern, "/dev/shm/simcuda-%u-%s*", (unsigned)geteuid(), machine);
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
        globfree(&g);
    }
}

TestSuite(simcudart, .init = setup, .fini = teardown, .timeout = 60);

/* A test-only entry point of the simulated driver; initialises the runtime
 * first so that libcuda.so.1 is loaded. */
static void *driver_sym(const char *name)
{
    cr_assert_eq(cudaFree(NULL), cudaSuccess);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : NULL;
}

static unsigned long launch_count(void)
{
    unsigned long (*fn)(void) = (unsigned long (*)(void))driver_sym("simcuda_launch_count");
    cr_assert_not_null(fn, "the simulated driver exports simcuda_launch_count");
    return fn();
}

static int spawn_and_wait(char *const argv[])
{
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
    cr_assert_eq(rc, 0, "posix_spawn %s: %s", argv[0], strerror(rc));
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "%s died (status 0x%x)", argv[0], status);
    return WEXITSTATUS(status);
}

/* ---------------------------------------------------------------------- */

Test(simcudart, loaded_runtime_is_the_simulator)
{
    Dl_info info;
    cr_assert(dladdr((void *)&cudaMalloc, &info) && info.dli_fname);
    char *want = realpath(SIMCUDA_DIR, NULL), *got = realpath(info.dli_fname, NULL);
    cr_assert(want && got);
    cr_assert(strncmp(got, want, strlen(want)) == 0, "cudaMalloc comes from %s, not %s", got, want);
    free(want);
    free(got);
    cr_assert_not_null(dlsym(RTLD_DEFAULT, "simcudart_resolved_count"));
}

/* The runtime reaches the driver only through cuGetProcAddress_v2: it
 * imports no cu* symbol at all (so it cannot call one by link), and every
 * slot of its table was filled by the resolver. */
Test(simcudart, driver_reached_only_through_cuGetProcAddress)
{
    Dl_info info;
    cr_assert(dladdr((void *)&cudaMalloc, &info) && info.dli_fname);
    int fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
    cr_assert(fd >= 0);
    struct stat st;
    cr_assert(fstat(fd, &st) == 0);
    const unsigned char *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    cr_assert(base != MAP_FAILED);
    const Elf64_Ehdr *eh = (const void *)base;
    cr_assert(memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64);
    const Elf64_Shdr *sh = (const void *)(base + eh->e_shoff);
    int checked = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM) continue;
        const Elf64_Sym *sym = (const void *)(base + sh[i].sh_offset);
        const char *str = (const char *)(base + sh[sh[i].sh_link].sh_offset);
        size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        for (size_t j = 1; j < n; j++) {
            const char *name = str + sym[j].st_name;
            if (sym[j].st_shndx == SHN_UNDEF)
                cr_expect(!(name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z'),
                          "the runtime imports driver symbol %s", name);
            checked++;
        }
    }
    munmap((void *)base, (size_t)st.st_size);
    cr_assert(checked > 50);

    int (*resolved)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "simcudart_resolved_count");
    cr_assert_not_null(resolved);
    int wanted = 0, got = resolved(&wanted);
    cr_assert(wanted >= 40);
    cr_assert_eq(got, wanted, "resolver filled %d of %d slots", got, wanted);
}

Test(simcudart, malloc_memcpy_free_round_trip)
{
    enum { N = 1 << 20 };
    unsigned char *host = malloc(N), *back = malloc(N);
    cr_assert(host && back);
    for (size_t i = 0; i < N; i++)
        host[i] = (unsigned char)(i * 7 + 3);

    size_t free0, total;
    cr_assert_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
    void *a = NULL, *b = NULL;
    cr_assert_eq(cudaMalloc(&a, N), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, N), cudaSuccess);
    cr_assert(a && b && a != b);
    size_t free1;
    cr_assert_eq(cudaMemGetInfo(&free1, &total), cudaSuccess);
    cr_assert(free1 <= free0 - 2 * (size_t)N);

    cr_assert_eq(cudaMemcpy(a, host, N, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(cudaMemcpy(b, a, N, cudaMemcpyDeviceToDevice), cudaSuccess);
    memset(back, 0, N);
    cr_assert_eq(cudaMemcpy(back, b, N, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert(memcmp(host, back, N) == 0);

    /* cudaMemcpyDefault: unified addressing finds the direction. */
    cr_assert_eq(cudaMemset(a, 0x3c, 4096), cudaSuccess);
    cr_assert_eq(cudaMemcpy(back, a, 4096, cudaMemcpyDefault), cudaSuccess);
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(back[i], 0x3c);
    cr_assert_eq(back[4096], host[4096]);

    cr_assert_eq(cudaMemcpy(back, a, 16, (enum cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);

    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
    cr_assert_eq(cudaFree(NULL), cudaSuccess);
    size_t free2;
    cr_assert_eq(cudaMemGetInfo(&free2, &total), cudaSuccess);
    cr_assert_eq(free2, free0);
    free(host);
    free(back);
}

Test(simcudart, managed_memory_prefetch_and_advice)
{
    int (*where)(const void *, struct simcuda_residency *) =
        (int (*)(const void *, struct simcuda_residency *))driver_sym("simcuda_managed_residency");
    void (*stats)(struct simcuda_managed_stats *) =
        (void (*)(struct simcuda_managed_stats *))driver_sym("simcuda_managed_stats");
    cr_assert(where && stats);
    void *p = NULL;
    cr_assert_eq(cudaMallocManaged(&p, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    cr_assert_eq(cudaMallocManaged(&p, 4096, 0), cudaErrorInvalidValue);
    cr_assert_eq(cudaMallocManaged(&p, 1 << 20, cudaMemAttachGlobal), cudaSuccess);
    cr_assert_eq(where(p, NULL), SIMCUDA_HOST);
    memset(p, 7, 1 << 20); /* host access */

    struct cudaPointerAttributes at;
    cr_assert_eq(cudaPointerGetAttributes(&at, p), cudaSuccess);
    cr_assert(at.type == cudaMemoryTypeManaged && at.device == 0 && at.hostPointer == p &&
              at.devicePointer == p);

    struct cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0};
    struct cudaMemLocation host = {cudaMemLocationTypeHost, 0};
    size_t free0, free1, total;
    cr_assert_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
    cr_assert_eq(cudaMemPrefetchAsync(p, 1 << 20, dev0, 0, NULL), cudaSuccess);
    cr_assert_eq(where(p, NULL), 0);
    cr_assert_eq(cudaMemGetInfo(&free1, &total), cudaSuccess);
    cr_assert_eq(free1, free0 - (1 << 20));
    cudaError_t (*prefetch_ptsz)(const void *, size_t, struct cudaMemLocation, unsigned,
                                 cudaStream_t) =
        (cudaError_t(*)(const void *, size_t, struct cudaMemLocation, unsigned, cudaStream_t))dlsym(
            RTLD_DEFAULT, "cudaMemPrefetchAsync_ptsz");
    cr_assert_not_null(prefetch_ptsz);
    cr_assert_eq(prefetch_ptsz(p, 1 << 20, host, 0, cudaStreamPerThread), cudaSuccess);
    cr_assert_eq(where(p, NULL), SIMCUDA_HOST);
    struct simcuda_managed_stats st;
    stats(&st);
    cr_assert(st.proc_bytes_htod == 1 << 20 && st.proc_bytes_dtoh == 1 << 20);

    cr_assert_eq(cudaMemAdvise(p, 4096, cudaMemAdviseSetAccessedBy, dev0), cudaSuccess);
    struct simcuda_residency r;
    cr_assert_eq(where(p, &r), SIMCUDA_HOST);
    cr_assert_eq(r.accessed_by, 1u);
    struct cudaMemLocation bad = {cudaMemLocationTypeDevice, 9};
    cr_assert_eq(cudaMemAdvise(p, 4096, cudaMemAdviseSetPreferredLocation, bad),
                 cudaErrorInvalidDevice);

    void *plain = NULL;
    cr_assert_eq(cudaMalloc(&plain, 4096), cudaSuccess);
    cr_assert_eq(cudaMemPrefetchAsync(plain, 4096, dev0, 0, NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaFree(plain), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(where(p, NULL), -2);
}

Test(simcudart, full_allocation_table_is_out_of_memory)
{
    setenv(SIMCUDA_ENV_MAX_ALLOCS, "4", 1); /* a table of 4 entries, on a 1 GiB device */
    void *p[4], *q = NULL;
    for (int i = 0; i < 4; i++) {
        cudaError_t e = cudaMalloc(&p[i], 512);
        cr_assert_eq(e, cudaSuccess, "allocation %d: %s", i, cudaGetErrorName(e));
    }
    cr_assert_eq(cudaMalloc(&q, 512), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaFree(p[0]), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 512), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess);
    for (int i = 1; i < 4; i++)
        cr_assert_eq(cudaFree(p[i]), cudaSuccess);
}

Test(simcudart, out_of_memory_maps_and_sets_last_error)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "4M", 1);
    void *p = (void *)0x1;
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cr_assert_eq(cudaMalloc(&p, 8 << 20), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cr_assert_str_eq(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
    cr_assert_str_eq(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");

    /* Injected driver failure goes through the same mapping. */
    cr_assert_eq(cudaMalloc(&p, 4096), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    void (*inject)(enum simcuda_fault, unsigned) =
        (void (*)(enum simcuda_fault, unsigned))driver_sym("simcuda_inject");
    cr_assert_not_null(inject);
    inject(SIMCUDA_FAULT_ALLOC, 1);
    cr_assert_eq(cudaMalloc(&p, 4096), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaMalloc(&p, 4096), cudaSuccess);
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

Test(simcudart, last_error_get_and_peek)
{
    cr_assert_eq(cudaPeekAtLastError(), cudaSuccess);
    cr_assert_eq(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
    cr_assert_eq(cudaSetDevice(7), cudaErrorInvalidDevice);
    /* The latest error wins; success does not clear it. */
    void *p;
    cr_assert_eq(cudaMalloc(&p, 16), cudaSuccess);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidDevice);
    cr_assert_eq(cudaPeekAtLastError(), cudaSuccess);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    /* A driver error (freeing what was never allocated) is recorded too. */
    cr_assert_eq(cudaFree((void *)0x10), cudaErrorInvalidValue);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaFree(p), cudaSuccess);

    cr_assert_str_eq(cudaGetErrorName(cudaSuccess), "cudaSuccess");
    cr_assert_str_eq(cudaGetErrorString(cudaSuccess), "no error");
    cr_assert_str_eq(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
    cr_assert_str_eq(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
    cr_assert_str_eq(cudaGetErrorName((cudaError_t)12345), "unrecognized error code");
}

static void *peek_in_thread(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)cudaPeekAtLastError();
}

static void *device_in_thread(void *arg)
{
    (void)arg;
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) return (void *)(intptr_t)-100;
    void *p = NULL;
    struct cudaPointerAttributes at;
    if (cudaMalloc(&p, 512) != cudaSuccess || cudaPointerGetAttributes(&at, p) != cudaSuccess)
        return (void *)(intptr_t)-200;
    cudaFree(p);
    return (void *)(intptr_t)(d * 10 + at.device);
}

Test(simcudart, last_error_is_per_thread)
{
    cr_assert_eq(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
    pthread_t t;
    void *ret;
    cr_assert_eq(pthread_create(&t, NULL, peek_in_thread, NULL), 0);
    cr_assert_eq(pthread_join(t, &ret), 0);
    cr_assert_eq((intptr_t)ret, cudaSuccess);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInvalidValue);
}

Test(simcudart, set_device_with_two_devices)
{
    setenv(SIMCUDA_ENV_DEVICES, "2", 1);
    int n = 0, d = -1;
    cr_assert_eq(cudaGetDeviceCount(&n), cudaSuccess);
    cr_assert_eq(n, 2);
    cr_assert_eq(cudaGetDevice(&d), cudaSuccess);
    cr_assert_eq(d, 0);

    void *p0, *p1;
    cr_assert_eq(cudaMalloc(&p0, 4096), cudaSuccess);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaGetDevice(&d), cudaSuccess);
    cr_assert_eq(d, 1);
    cr_assert_eq(cudaMalloc(&p1, 4096), cudaSuccess);

    struct cudaPointerAttributes at;
    cr_assert_eq(cudaPointerGetAttributes(&at, p1), cudaSuccess);
    cr_assert_eq(at.type, cudaMemoryTypeDevice);
    cr_assert_eq(at.device, 1);
    cr_assert_eq(at.devicePointer, p1);
    cr_assert_eq(cudaPointerGetAttributes(&at, p0), cudaSuccess);
    cr_assert_eq(at.device, 0);

    /* A new thread starts on device 0. */
    pthread_t t;
    void *ret;
    cr_assert_eq(pthread_create(&t, NULL, device_in_thread, NULL), 0);
    cr_assert_eq(pthread_join(t, &ret), 0);
    cr_assert_eq((intptr_t)ret, 0, "thread device*10+alloc device = %d", (int)(intptr_t)ret);

    cr_assert_eq(cudaSetDevice(2), cudaErrorInvalidDevice);
    cr_assert_eq(cudaSetDevice(-1), cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetDevice(&d), cudaSuccess);
    cr_assert_eq(d, 1);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidDevice);

    /* Cross-device copy through unified addressing. */
    cr_assert_eq(cudaMemset(p1, 0x11, 4096), cudaSuccess);
    cr_assert_eq(cudaMemcpy(p0, p1, 4096, cudaMemcpyDefault), cudaSuccess);
    unsigned char buf[4096];
    cr_assert_eq(cudaMemcpy(buf, p0, sizeof buf, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(buf[0], 0x11);
    cr_assert_eq(buf[4095], 0x11);

    cr_assert_eq(cudaFree(p1), cudaSuccess);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaFree(p0), cudaSuccess);
}

Test(simcudart, device_properties_and_attributes)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "64M", 1);
    struct cudaDeviceProp prop;
    cr_assert_eq(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    cr_assert(prop.name[0] != '\0');
    cr_assert_eq(prop.totalGlobalMem, (size_t)64 << 20);
    cr_assert(prop.major >= 1);
    cr_assert(prop.multiProcessorCount >= 1);
    cr_assert_eq(prop.unifiedAddressing, 1);
    cr_assert_eq(prop.managedMemory, 1);
    int v = -1;
    cr_assert_eq(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    cr_assert_eq(v, prop.major);
    cr_assert_eq(cudaDeviceGetAttribute(&v, cudaDevAttrUnifiedAddressing, 0), cudaSuccess);
    cr_assert_eq(v, 1);
    cr_assert_eq(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 1),
                 cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetDeviceProperties(&prop, 1), cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetDeviceProperties(NULL, 0), cudaErrorInvalidValue);

    int dv = 0, rv = 0;
    cr_assert_eq(cudaDriverGetVersion(&dv), cudaSuccess);
    cr_assert(dv >= 13000);
    cr_assert_eq(cudaRuntimeGetVersion(&rv), cudaSuccess);
    cr_assert_eq(rv, CUDART_VERSION);
}

Test(simcudart, host_memory_pitch_and_pointer_attributes)
{
    void *h = NULL, *h2 = NULL, *d = NULL;
    cr_assert_eq(cudaMallocHost(&h, 8192), cudaSuccess);
    cr_assert_eq(cudaHostAlloc(&h2, 4096, cudaHostAllocMapped | cudaHostAllocPortable),
                 cudaSuccess);
    memset(h, 0x42, 8192);
    struct cudaPointerAttributes at;
    cr_assert_eq(cudaPointerGetAttributes(&at, h), cudaSuccess);
    cr_assert_eq(at.type, cudaMemoryTypeHost);
    cr_assert_eq(at.hostPointer, h);

    int on_stack = 0;
    cr_assert_eq(cudaPointerGetAttributes(&at, &on_stack), cudaSuccess);
    cr_assert_eq(at.type, cudaMemoryTypeUnregistered);
    cr_assert_eq(cudaPeekAtLastError(), cudaSuccess);

    size_t pitch = 0;
    cr_assert_eq(cudaMallocPitch(&d, &pitch, 100, 10), cudaSuccess);
    cr_assert(d && pitch >= 100);
    cr_assert_eq(cudaMemcpy(d, h, pitch * 10, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(cudaFree(d), cudaSuccess);
    cr_assert_eq(cudaHostAlloc(&h2, 16, 0x80), cudaErrorInvalidValue);
    cr_assert_eq(cudaFreeHost(h), cudaSuccess);
    cr_assert_eq(cudaFreeHost(NULL), cudaSuccess);
}

Test(simcudart, streams_and_events)
{
    cudaStream_t s, s2;
    cudaEvent_t e0, e1;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&e0), cudaSuccess);
    cr_assert_eq(cudaEventCreateWithFlags(&e1, cudaEventBlockingSync), cudaSuccess);

    enum { N = 65536 };
    static unsigned char host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (unsigned char)i;
    void *d;
    cr_assert_eq(cudaMalloc(&d, N), cudaSuccess);
    cr_assert_eq(cudaEventRecord(e0, s), cudaSuccess);
    cr_assert_eq(cudaMemcpyAsync(d, host, N, cudaMemcpyHostToDevice, s), cudaSuccess);
    cr_assert_eq(cudaMemsetAsync(d, 7, 16, s), cudaSuccess);
    cr_assert_eq(cudaMemcpyAsync(back, d, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
    cr_assert_eq(cudaEventRecord(e1, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(cudaEventSynchronize(e1), cudaSuccess);
    cr_assert_eq(cudaStreamQuery(s), cudaSuccess);
    cr_assert_eq(cudaEventQuery(e1), cudaSuccess);
    cr_assert_eq(back[0], 7);
    cr_assert_eq(back[16], 16);
    cr_assert_eq(back[N - 1], (unsigned char)(N - 1));
    float ms = -1;
    cr_assert_eq(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    cr_assert(ms >= 0);

    cr_assert_eq(cudaStreamSynchronize(NULL), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);
    cr_assert_eq(cudaEventRecord(NULL, s), cudaErrorInvalidResourceHandle);
    cr_assert_eq(cudaEventCreateWithFlags(&e0, cudaEventInterprocess), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);

    cr_assert_eq(cudaEventDestroy(e0), cudaSuccess);
    cr_assert_eq(cudaEventDestroy(e1), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s2), cudaSuccess);
    cr_assert_eq(cudaFree(d), cudaSuccess);
}

Test(simcudart, device_reset_gives_a_fresh_context)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 1 << 20), cudaSuccess);
    size_t f0, f1, t;
    cr_assert_eq(cudaMemGetInfo(&f0, &t), cudaSuccess);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cr_assert_eq(cudaMemGetInfo(&f1, &t), cudaSuccess);
    cr_assert(f1 >= f0 + (1 << 20), "reset released the allocation (%zu -> %zu)", f0, f1);
    cr_assert_eq(cudaMalloc(&p, 4096), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

/* The per-thread-default-stream exports (what code built with
 * --default-stream per-thread calls), found by name like a loader would. */
Test(simcudart, per_thread_stream_variants)
{
    typedef cudaError_t (*memcpy_fn)(void *, const void *, size_t, enum cudaMemcpyKind);
    typedef cudaError_t (*memcpy_async_fn)(void *, const void *, size_t, enum cudaMemcpyKind,
                                           cudaStream_t);
    typedef cudaError_t (*memset_fn)(void *, int, size_t);
    typedef cudaError_t (*memset_async_fn)(void *, int, size_t, cudaStream_t);
    typedef cudaError_t (*stream_fn)(cudaStream_t);
    typedef cudaError_t (*record_fn)(cudaEvent_t, cudaStream_t);
    memcpy_fn cpy = (memcpy_fn)dlsym(RTLD_DEFAULT, "cudaMemcpy_ptds");
    memcpy_async_fn cpya = (memcpy_async_fn)dlsym(RTLD_DEFAULT, "cudaMemcpyAsync_ptsz");
    memset_fn set = (memset_fn)dlsym(RTLD_DEFAULT, "cudaMemset_ptds");
    memset_async_fn seta = (memset_async_fn)dlsym(RTLD_DEFAULT, "cudaMemsetAsync_ptsz");
    stream_fn sync = (stream_fn)dlsym(RTLD_DEFAULT, "cudaStreamSynchronize_ptsz");
    stream_fn query = (stream_fn)dlsym(RTLD_DEFAULT, "cudaStreamQuery_ptsz");
    record_fn record = (record_fn)dlsym(RTLD_DEFAULT, "cudaEventRecord_ptsz");
    cr_assert(cpy && cpya && set && seta && sync && query && record);
    cr_assert_not_null(dlsym(RTLD_DEFAULT, "cudaLaunchKernel_ptsz"));
    cr_assert_not_null(dlsym(RTLD_DEFAULT, "cudaLaunchKernelExC_ptsz"));
    cr_assert_not_null(dlsym(RTLD_DEFAULT, "__cudaLaunchKernel_ptsz"));

    unsigned char host[256], back[256];
    for (int i = 0; i < 256; i++)
        host[i] = (unsigned char)(255 - i);
    void *d;
    cudaEvent_t ev;
    cr_assert_eq(cudaMalloc(&d, sizeof host), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&ev), cudaSuccess);
    cr_assert_eq(cpy(d, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(set(d, 1, 8), cudaSuccess);
    cr_assert_eq(seta(d, 2, 4, cudaStreamPerThread), cudaSuccess);
    cr_assert_eq(cpya(back, d, sizeof back, cudaMemcpyDeviceToHost, NULL), cudaSuccess);
    cr_assert_eq(record(ev, NULL), cudaSuccess);
    cr_assert_eq(sync(NULL), cudaSuccess);
    cr_assert_eq(query(NULL), cudaSuccess);
    cr_assert_eq(cudaEventSynchronize(ev), cudaSuccess);
    cr_assert_eq(back[0], 2);
    cr_assert_eq(back[4], 1);
    cr_assert_eq(back[8], host[8]);
    cr_assert_eq(cpy(back, d, 4, (enum cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection);
    cr_assert_eq(cudaEventDestroy(ev), cudaSuccess);
    cr_assert_eq(cudaFree(d), cudaSuccess);
}

/* Bad arguments come back as errors (and become the last error), never as
 * a crash. */
Test(simcudart, bad_arguments_fail_cleanly)
{
    char buf[16];
    cr_assert_eq(cudaGetDeviceCount(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetDevice(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemGetInfo(NULL, NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(NULL, buf, sizeof buf, cudaMemcpyDefault), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(buf, NULL, sizeof buf, cudaMemcpyDefault), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(NULL, NULL, 0, cudaMemcpyDefault), cudaSuccess);
    cr_assert_eq(cudaMemset(NULL, 0, 16), cudaErrorInvalidValue);
    cr_assert_eq(cudaMallocPitch(NULL, NULL, 16, 16), cudaErrorInvalidValue);
    cr_assert_eq(cudaMallocHost(NULL, 16), cudaErrorInvalidValue);
    cr_assert_eq(cudaPointerGetAttributes(NULL, buf), cudaErrorInvalidValue);
    cr_assert_eq(cudaStreamCreate(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaStreamCreateWithFlags((cudaStream_t *)buf, 0x40), cudaErrorInvalidValue);
    cr_assert_eq(cudaEventCreate(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaEventElapsedTime(NULL, NULL, NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaEventSynchronize(NULL), cudaErrorInvalidResourceHandle);
    cr_assert_eq(cudaEventQuery(NULL), cudaErrorInvalidResourceHandle);
    cr_assert_eq(cudaEventDestroy(NULL), cudaErrorInvalidResourceHandle);
    cr_assert_eq(cudaIpcGetEventHandle(NULL, NULL), cudaErrorInvalidValue);
    cudaIpcEventHandle_t eh;
    memset(&eh, 0, sizeof eh);
    cr_assert_eq(cudaIpcOpenEventHandle(NULL, eh), cudaErrorInvalidValue);
    cr_assert_eq(cudaIpcCloseMemHandle(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaDeviceGetAttribute(NULL, cudaDevAttrWarpSize, 0), cudaErrorInvalidValue);
    cr_assert_eq(cudaDriverGetVersion(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaRuntimeGetVersion(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaLaunchKernel(NULL, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, NULL),
                 cudaErrorInvalidDeviceFunction);
    cr_assert_eq(__cudaGetKernel(NULL, NULL), cudaErrorInvalidValue);
    cr_assert_eq(__cudaLaunchKernel(NULL, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, NULL),
                 cudaErrorInvalidDeviceFunction);
    cr_assert_neq(__cudaPopCallConfiguration(NULL, NULL, NULL, NULL), cudaSuccess);
    __cudaRegisterFunction(NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL);
    cr_assert_eq(cudaFuncGetParamInfo(NULL, 0, NULL, NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

/* ---------------------------------------------------------------------- */
/* IPC across processes.                                                  */

#define IPC_SIZE (1 << 20)
#define IPC_CHILD_ENV "SIMCUDART_IPC_CHILD"

static void to_hex(char *out, const void *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", ((const unsigned char *)bytes)[i]);
}

static int from_hex(void *bytes, const char *hex, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        ((unsigned char *)bytes)[i] = (unsigned char)v;
    }
    return 0;
}

/* The importing side, run in a re-executed copy of this binary. Exit codes
 * name the failed step. */
static int ipc_child(const char *arg)
{
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    if (strlen(arg) != 2 * (sizeof mh + sizeof eh) || from_hex(&mh, arg, sizeof mh) ||
        from_hex(&eh, arg + 2 * sizeof mh, sizeof eh))
        return 10;
    cudaEvent_t ev;
    if (cudaIpcOpenEventHandle(&ev, eh) != cudaSuccess || cudaEventSynchronize(ev) != cudaSuccess)
        return 11;
    void *p = NULL;
    if (cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess || !p)
        return 12;
    static unsigned char buf[IPC_SIZE];
    if (cudaMemcpy(buf, p, IPC_SIZE, cudaMemcpyDeviceToHost) != cudaSuccess) return 13;
    for (size_t i = 0; i < IPC_SIZE; i++)
        if (buf[i] != 0x5a) return 14;
    if (cudaMemset(p, 0xa5, 4096) != cudaSuccess) return 15;
    if (cudaIpcCloseMemHandle(p) != cudaSuccess) return 16;
    if (cudaEventDestroy(ev) != cudaSuccess) return 17;
    return 0;
}

__attribute__((constructor)) static void maybe_ipc_child(void)
{
    const char *arg = getenv(IPC_CHILD_ENV);
    if (arg) _exit(ipc_child(arg));
}

Test(simcudart, ipc_memory_and_event_in_child_process)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, IPC_SIZE), cudaSuccess);
    cr_assert_eq(cudaMemset(p, 0x5a, IPC_SIZE), cudaSuccess);
    cudaIpcMemHandle_t mh;
    cr_assert_eq(cudaIpcGetMemHandle(&mh, p), cudaSuccess);
    cudaEvent_t ev;
    cr_assert_eq(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming),
                 cudaSuccess);
    cr_assert_eq(cudaEventRecord(ev, NULL), cudaSuccess);
    cudaIpcEventHandle_t eh;
    cr_assert_eq(cudaIpcGetEventHandle(&eh, ev), cudaSuccess);

    char arg[2 * (sizeof mh + sizeof eh) + 1];
    to_hex(arg, &mh, sizeof mh);
    to_hex(arg + 2 * sizeof mh, &eh, sizeof eh);
    setenv(IPC_CHILD_ENV, arg, 1);
    char *argv[] = {"/proc/self/exe", NULL};
    int rc = spawn_and_wait(argv);
    unsetenv(IPC_CHILD_ENV);
    cr_assert_eq(rc, 0, "IPC child failed at step %d", rc);

    unsigned char buf[8192];
    cr_assert_eq(cudaMemcpy(buf, p, sizeof buf, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(buf[0], 0xa5);
    cr_assert_eq(buf[4095], 0xa5);
    cr_assert_eq(buf[4096], 0x5a);

    /* Bad input: opening garbage fails cleanly, closing a non-mapping too. */
    cudaIpcMemHandle_t junk;
    memset(&junk, 0x77, sizeof junk);
    void *q = NULL;
    cr_assert_neq(cudaIpcOpenMemHandle(&q, junk, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
    cr_assert_eq(cudaIpcOpenMemHandle(&q, mh, 0x100), cudaErrorInvalidValue);
    cr_assert_neq(cudaIpcCloseMemHandle(p), cudaSuccess);
    cr_assert_eq(cudaIpcGetMemHandle(NULL, p), cudaErrorInvalidValue);

    cr_assert_eq(cudaEventDestroy(ev), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

/* ---------------------------------------------------------------------- */
/* Pool IPC across processes: the importer is this binary re-executed with */
/* SIMCUDART_POOL_CHILD=<its end of a socketpair>, over which the pool's fd */
/* arrives by SCM_RIGHTS with the export data and the exporter's pointer.  */

#define POOL_CHILD_ENV "SIMCUDART_POOL_CHILD"
#define POOL_SIZE (256 << 10)

struct pool_msg {
    struct cudaMemPoolPtrExportData data;
    void *exporter_ptr;
};

/* The importing side. Exit codes name the failed step. */
static int pool_child(int sock)
{
    struct pool_msg m;
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof m};
    struct msghdr h = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    if (recvmsg(sock, &h, 0) != (ssize_t)sizeof m || !CMSG_FIRSTHDR(&h)) return 20;
    int fd;
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&h)), sizeof fd);
    cudaMemPool_t pool;
    if (cudaMemPoolImportFromShareableHandle(
            &pool, (void *)(uintptr_t)fd, cudaMemHandleTypePosixFileDescriptor, 0) != cudaSuccess)
        return 21;
    close(fd);
    void *p = NULL;
    if (cudaMemPoolImportPointer(&p, pool, &m.data) != cudaSuccess || !p) return 22;
    static unsigned char buf[POOL_SIZE];
    if (cudaMemcpy(buf, p, POOL_SIZE, cudaMemcpyDeviceToHost) != cudaSuccess) return 23;
    for (size_t i = 0; i < POOL_SIZE; i++)
        if (buf[i] != 0x5a) return 24;
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess || at.type != cudaMemoryTypeDevice ||
        at.device != 0)
        return 25;
    struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = 0};
    enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    if (cudaMemPoolGetAccess(&flags, pool, &loc) != cudaSuccess ||
        flags != cudaMemAccessFlagsProtReadWrite)
        return 26;
    struct cudaMemAccessDesc d = {.location = loc, .flags = cudaMemAccessFlagsProtReadWrite};
    if (cudaMemPoolSetAccess(pool, &d, 1) != cudaSuccess) return 27;
    if (cudaMemset(p, 0xa5, 4096) != cudaSuccess) return 28;
    void *again = NULL;
    if (cudaMallocFromPoolAsync(&again, 512, pool, 0) != cudaErrorInvalidValue) return 29;
    if (cudaFree(p) != cudaSuccess) return 30; /* unmaps here only */
    if (cudaFree(p) != cudaErrorInvalidValue) return 31;
    if (cudaFreeAsync(p, 0) != cudaErrorInvalidValue) return 32;
    cudaGetLastError();
    if (cudaMemPoolDestroy(pool) != cudaSuccess) return 33;
    return write(sock, "d", 1) == 1 ? 0 : 34;
}

__attribute__((constructor)) static void maybe_pool_child(void)
{
    const char *arg = getenv(POOL_CHILD_ENV);
    if (arg) _exit(pool_child(atoi(arg)));
}

Test(simcudart, pool_ipc_in_child_process)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool = NULL, cur = NULL, dflt = NULL;
    cr_assert_eq(cudaMemPoolCreate(&pool, &props), cudaSuccess);
    cr_assert_eq(cudaDeviceSetMemPool(0, pool), cudaSuccess);
    cr_assert_eq(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
    cr_assert_eq(cur, pool);
    void *p = NULL, *plain = NULL;
    cr_assert_eq(cudaMallocAsync(&p, POOL_SIZE, 0), cudaSuccess); /* the current pool */
    cr_assert_eq(cudaMemset(p, 0x5a, POOL_SIZE), cudaSuccess);
    struct pool_msg m;
    memset(&m, 0, sizeof m);
    m.exporter_ptr = p;
    int fd = -1;
    cr_assert_eq(
        cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
        cudaSuccess);
    cr_assert_eq(cudaMemPoolExportPointer(&m.data, p), cudaSuccess);

    /* Refusals through the runtime's error mapping. */
    cr_assert_eq(cudaMalloc(&plain, 4096), cudaSuccess);
    struct cudaMemPoolPtrExportData junk;
    cr_assert_eq(cudaMemPoolExportPointer(&junk, plain), cudaErrorInvalidValue);
    memset(&junk, 0, sizeof junk);
    cudaMemPool_t imported = NULL;
    cr_assert_eq(cudaMemPoolImportFromShareableHandle(&imported, (void *)(uintptr_t)fd,
                                                      cudaMemHandleTypePosixFileDescriptor, 0),
                 cudaSuccess);
    void *q = NULL;
    cr_assert_eq(cudaMemPoolImportPointer(&q, imported, &junk), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemPoolDestroy(imported), cudaSuccess);
    cr_assert_eq(cudaDeviceGetDefaultMemPool(&dflt, 0), cudaSuccess);
    cr_assert_eq(cudaMemPoolDestroy(dflt), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaFree(plain), cudaSuccess);

    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(fcntl(sv[1], F_SETFD, 0), 0); /* the child's end survives exec */
    char arg[16];
    snprintf(arg, sizeof arg, "%d", sv[1]);
    setenv(POOL_CHILD_ENV, arg, 1);
    char *argv[] = {"/proc/self/exe", NULL};
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    unsetenv(POOL_CHILD_ENV);
    close(sv[1]);
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof m};
    struct msghdr h = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    cr_assert_eq(sendmsg(sv[0], &h, 0), (ssize_t)sizeof m);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "pool child died (status 0x%x)", status);
    cr_assert_eq(WEXITSTATUS(status), 0, "pool child failed at step %d", WEXITSTATUS(status));
    char done = 0;
    cr_assert_eq(read(sv[0], &done, 1), 1);
    cr_assert_eq(done, 'd');

    unsigned char buf[8192];
    cr_assert_eq(cudaMemcpy(buf, p, sizeof buf, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(buf[0], 0xa5, "the importer's write reached the exporter's bytes");
    cr_assert_eq(buf[4095], 0xa5);
    cr_assert_eq(buf[4096], 0x5a);
    cr_assert_eq(cudaFreeAsync(p, 0), cudaSuccess);
    cr_assert_eq(cudaMemPoolDestroy(pool), cudaSuccess);
    cr_assert_eq(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
    cr_assert_eq(cur, dflt, "the default pool is current again");
    close(fd);
    close(sv[0]);
}

/* ---------------------------------------------------------------------- */
/* Kernels.                                                               */

static void fake_stub(void) {}
static void fake_stub2(void) {}

/* What nvcc's static constructor does, by hand: register a fat binary and
 * two kernels, then launch through both CUDA 13 paths. */
Test(simcudart, registered_kernels_launch_through_the_driver)
{
    static const struct {
        int magic, version;
        const void *data, *unused;
    } wrapper = {0x466243b1, 1, NULL, NULL};
    void **h = __cudaRegisterFatBinary((void *)&wrapper);
    cr_assert_not_null(h);
    __cudaRegisterFunction(h, (const char *)fake_stub, "_Z4stubv", "_Z4stubv", -1, NULL, NULL, NULL,
                           NULL, NULL);
    __cudaRegisterFunction(h, (const char *)fake_stub2, "_Z5stub2v", "_Z5stub2v", -1, NULL, NULL,
                           NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(h);

    unsigned long before = launch_count();
    int arg = 5;
    void *args[] = {&arg};
    dim3 g = {2, 3, 1}, b = {32, 1, 1};
    cr_assert_eq(cudaLaunchKernel((const void *)fake_stub, g, b, args, 0, NULL), cudaSuccess);
    cr_assert_eq(launch_count(), before + 1);

    int (*last)(unsigned, struct simcuda_launch *) =
        (int (*)(unsigned, struct simcuda_launch *))driver_sym("simcuda_last_launch");
    cr_assert_not_null(last);
    struct simcuda_launch l;
    cr_assert_eq(last(0, &l), 0);
    cr_assert_eq(l.grid[0], 2);
    cr_assert_eq(l.grid[1], 3);
    cr_assert_eq(l.block[0], 32);
    void *f1 = l.func;

    /* <<<>>> as CUDA 13 stubs do it: push, pop, get kernel, launch. */
    cr_assert_eq(__cudaPushCallConfiguration(g, b, 0, NULL), 0u);
    dim3 pg, pb;
    size_t shm = 1;
    cudaStream_t st = (cudaStream_t)0x1234;
    cr_assert_eq(__cudaPopCallConfiguration(&pg, &pb, &shm, &st), cudaSuccess);
    cr_assert(pg.x == 2 && pg.y == 3 && pb.x == 32 && shm == 0 && st == NULL);
    cr_assert_neq(__cudaPopCallConfiguration(&pg, &pb, &shm, &st), cudaSuccess);
    cudaKernel_t k = NULL;
    cr_assert_eq(__cudaGetKernel(&k, (const void *)fake_stub), cudaSuccess);
    cr_assert_eq(__cudaLaunchKernel(k, pg, pb, args, shm, st), cudaSuccess);
    cr_assert_eq(last(0, &l), 0);
    cr_assert_eq(l.func, f1, "a kernel has one stable function handle");

    cr_assert_eq(cudaLaunchKernel((const void *)fake_stub2, g, b, NULL, 0, NULL), cudaSuccess);
    cr_assert_eq(last(0, &l), 0);
    cr_assert_neq(l.func, f1);
    cr_assert_eq(launch_count(), before + 3);

    cudaLaunchConfig_t cfg = {0};
    cfg.gridDim = g;
    cfg.blockDim = b;
    cr_assert_eq(cudaLaunchKernelExC(&cfg, (const void *)fake_stub, args), cudaSuccess);
    cr_assert_eq(launch_count(), before + 4);

    /* Errors: unknown function, bad configuration, parameter info. */
    cr_assert_eq(cudaLaunchKernel((const void *)&arg, g, b, args, 0, NULL),
                 cudaErrorInvalidDeviceFunction);
    cr_assert_eq(__cudaGetKernel(&k, (const void *)&arg), cudaErrorInvalidDeviceFunction);
    dim3 zero = {0, 1, 1}, huge = {2048, 1, 1};
    cr_assert_eq(cudaLaunchKernel((const void *)fake_stub, zero, b, args, 0, NULL),
                 cudaErrorInvalidConfiguration);
    cr_assert_eq(cudaLaunchKernel((const void *)fake_stub, g, huge, args, 0, NULL),
                 cudaErrorInvalidConfiguration);
    cr_assert_eq(cudaLaunchKernelExC(NULL, (const void *)fake_stub, args), cudaErrorInvalidValue);
    size_t off, sz;
    cr_assert_eq(cudaFuncGetParamInfo((const void *)fake_stub, 0, &off, &sz),
                 cudaErrorNotSupported);
    cr_assert_eq(cudaFuncGetParamInfo((const void *)&arg, 0, &off, &sz),
                 cudaErrorInvalidDeviceFunction);
    cr_assert_eq(launch_count(), before + 4);

    /* Driver-side failure is mapped and recorded. */
    void (*inject)(enum simcuda_fault, unsigned) =
        (void (*)(enum simcuda_fault, unsigned))driver_sym("simcuda_inject");
    cr_assert_not_null(inject);
    inject(SIMCUDA_FAULT_LAUNCH, 1);
    cudaGetLastError();
    cr_assert_eq(cudaLaunchKernel((const void *)fake_stub, g, b, args, 0, NULL),
                 cudaErrorLaunchFailure);
    cr_assert_eq(cudaGetLastError(), cudaErrorLaunchFailure);

    /* After unregistering, the cached handle is refused, not followed. */
    __cudaUnregisterFatBinary(h);
    cr_assert_eq(__cudaLaunchKernel(k, g, b, args, 0, NULL), cudaErrorInvalidDeviceFunction);
    cr_assert_eq(cudaLaunchKernel((const void *)fake_stub, g, b, args, 0, NULL),
                 cudaErrorInvalidDeviceFunction);
    __cudaUnregisterFatBinary(h);
    __cudaUnregisterFatBinary(NULL);
    __cudaRegisterFatBinaryEnd(NULL);
}

/* A fat binary as nvcc lays it out, holding one uncompressed PTX entry. */
static const char fatbin_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                                 ".visible .entry _Z5touchPfiS_(\n"
                                 "  .param .u64 _Z5touchPfiS__param_0,\n"
                                 "  .param .u32 _Z5touchPfiS__param_1,\n"
                                 "  .param .u64 _Z5touchPfiS__param_2\n"
                                 ")\n{\n  ret;\n}\n";

static void fake_touch(void) {}
static void fake_missing(void) {}

Test(simcudart, registered_fat_binary_gives_param_info_and_launch_faults)
{
    static _Alignas(8) unsigned char fatbin[16 + 64 + sizeof(fatbin_ptx) + 8];
    uint64_t payload = (sizeof(fatbin_ptx) + 7) / 8 * 8, total = 64 + payload, flags = 0x11;
    uint32_t magic = 0xBA55ED50u, ehs = 64;
    uint16_t ver = 1, hs = 16, kind = 1;
    memcpy(fatbin, &magic, 4);
    memcpy(fatbin + 4, &ver, 2);
    memcpy(fatbin + 6, &hs, 2);
    memcpy(fatbin + 8, &total, 8);
    memcpy(fatbin + 16, &kind, 2);
    memcpy(fatbin + 20, &ehs, 4);
    memcpy(fatbin + 24, &payload, 8);
    memcpy(fatbin + 16 + 40, &flags, 8);
    memcpy(fatbin + 16 + 64, fatbin_ptx, sizeof(fatbin_ptx));
    static struct {
        int magic, version;
        const void *data, *unused;
    } wrapper = {0x466243b1, 1, fatbin, NULL};
    void **h = __cudaRegisterFatBinary(&wrapper);
    cr_assert_not_null(h);
    __cudaRegisterFunction(h, (const char *)fake_touch, "_Z5touchPfiS_", "_Z5touchPfiS_", -1, NULL,
                           NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(h, (const char *)fake_missing, "_Z4gonev", "_Z4gonev", -1, NULL, NULL,
                           NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(h);

    size_t off = 0, size = 0;
    cr_assert_eq(cudaFuncGetParamInfo((const void *)fake_touch, 2, &off, &size), cudaSuccess);
    cr_assert(off == 16 && size == 8);
    cr_assert_eq(cudaFuncGetParamInfo((const void *)fake_touch, 1, &off, &size), cudaSuccess);
    cr_assert(off == 8 && size == 4);
    cr_assert_eq(cudaFuncGetParamInfo((const void *)fake_touch, 3, &off, &size),
                 cudaErrorInvalidValue);
    cr_assert_eq(cudaFuncGetParamInfo((const void *)fake_missing, 0, &off, &size),
                 cudaErrorNotSupported);

    void (*stats)(struct simcuda_managed_stats *) =
        (void (*)(struct simcuda_managed_stats *))driver_sym("simcuda_managed_stats");
    cr_assert_not_null(stats);
    float *a = NULL, *b = NULL;
    cr_assert_eq(cudaMallocManaged((void **)&a, 1 << 20, cudaMemAttachGlobal), cudaSuccess);
    cr_assert_eq(cudaMallocManaged((void **)&b, 1 << 20, cudaMemAttachGlobal), cudaSuccess);
    int n = 3;
    void *args[] = {&a, &n, &b};
    dim3 g = {1, 1, 1}, blk = {32, 1, 1};
    cr_assert_eq(cudaLaunchKernel((const void *)fake_touch, g, blk, args, 0, NULL), cudaSuccess);
    struct simcuda_managed_stats st;
    stats(&st);
    cr_assert_eq(st.proc_faults, 2);
    cr_assert_eq(st.resident[0], 2u << 20);
    /* A kernel the image lacks still launches, without a layout: no fault. */
    void *args2[] = {&a};
    cr_assert_eq(cudaMemPrefetchAsync(
                     a, 1 << 20, (struct cudaMemLocation){cudaMemLocationTypeHost, 0}, 0, NULL),
                 cudaSuccess);
    cr_assert_eq(cudaLaunchKernel((const void *)fake_missing, g, blk, args2, 0, NULL), cudaSuccess);
    stats(&st);
    cr_assert_eq(st.proc_faults, 2);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
    __cudaUnregisterFatBinary(h);
}

Test(simcudart, nvcc_program_launches_under_the_simulator)
{
#ifndef SIMCUDART_LAUNCH_PROG
    cr_skip_test("nvcc was not found at configure time");
#else
    char *argv[] = {SIMCUDART_LAUNCH_PROG, SIMCUDA_DIR, NULL};
    int rc = spawn_and_wait(argv);
    cr_assert_eq(rc, 0, "%s failed check %d", SIMCUDART_LAUNCH_PROG, rc);
#endif
}

/* The same program built with --default-stream per-thread: <<<>>> goes
 * through __cudaLaunchKernel_ptsz, cudaMemcpy through cudaMemcpy_ptds. */
Test(simcudart, nvcc_per_thread_program_launches_under_the_simulator)
{
#ifndef SIMCUDART_LAUNCH_PROG_PTDS
    cr_skip_test("nvcc was not found at configure time");
#else
    char *argv[] = {SIMCUDART_LAUNCH_PROG_PTDS, SIMCUDA_DIR, NULL};
    int rc = spawn_and_wait(argv);
    cr_assert_eq(rc, 0, "%s failed check %d", SIMCUDART_LAUNCH_PROG_PTDS, rc);
#endif
}

/* Parameter layouts of an nvcc-built program's kernels (default targets)
 * and the faults its launches with managed pointers cause. */
Test(simcudart, nvcc_managed_program_under_the_simulator)
{
#ifndef SIMCUDART_MANAGED_PROG
    cr_skip_test("nvcc was not found at configure time");
#else
    char *argv[] = {SIMCUDART_MANAGED_PROG, SIMCUDA_DIR, NULL};
    int rc = spawn_and_wait(argv);
    cr_assert_eq(rc, 0, "%s failed check %d", SIMCUDART_MANAGED_PROG, rc);
#endif
}

Test(simcudart, stream_ordered_allocation_and_pools)
{
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    size_t before = 0, total = 0, now = 0;
    cr_assert_eq(cudaMemGetInfo(&before, &total), cudaSuccess);
    void *p = NULL, *q = NULL;
    cr_assert_eq(cudaMallocAsync(&p, 1000, s), cudaSuccess);
    cr_assert_not_null(p);
    cr_assert_eq(cudaMemsetAsync(p, 3, 1000, s), cudaSuccess);
    unsigned char b = 0;
    cr_assert_eq(cudaMemcpy(&b, (char *)p + 999, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(b, 3);
    struct cudaPointerAttributes at;
    cr_assert_eq(cudaPointerGetAttributes(&at, p), cudaSuccess);
    cr_assert_eq(at.type, cudaMemoryTypeDevice);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaErrorInvalidValue,
                 "legacy IPC refuses pool memory");
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);

    cudaMemPool_t pool = NULL;
    cr_assert_eq(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    cr_assert_not_null(pool);
    cr_assert_eq(cudaDeviceGetDefaultMemPool(&pool, 5), cudaErrorInvalidDevice);
    cudaGetLastError();
    unsigned long long used = 0, threshold = 1 << 20, got = 0;
    cr_assert_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
    cr_assert_eq(used, 1024);
    cr_assert_eq(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                 cudaSuccess);
    cr_assert_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got), cudaSuccess);
    cr_assert_eq(got, 1 << 20);
    cr_assert_eq(cudaMemPoolTrimTo(pool, 0), cudaSuccess);

    cr_assert_eq(cudaMallocFromPoolAsync(&q, 512, pool, s), cudaSuccess);
    cr_assert_eq(cudaMemGetInfo(&now, &total), cudaSuccess);
    cr_assert_eq(before - now, 1536);
    cr_assert_eq(cudaFreeAsync(q, s), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, s), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(NULL, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(cudaMemGetInfo(&now, &total), cudaSuccess);
    cr_assert_eq(now, before, "freed at once: the simulator's work is synchronous");
    cr_assert_eq(cudaFreeAsync(p, s), cudaErrorInvalidValue);
    cudaGetLastError();

    /* The per-thread-default-stream entry points nvcc emits with
     * --default-stream per-thread. */
    typedef cudaError_t (*malloc_fn)(void **, size_t, cudaStream_t);
    typedef cudaError_t (*free_fn)(void *, cudaStream_t);
    malloc_fn ma = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMallocAsync_ptsz");
    free_fn fa = (free_fn)dlsym(RTLD_DEFAULT, "cudaFreeAsync_ptsz");
    cr_assert(ma && fa && dlsym(RTLD_DEFAULT, "cudaMallocFromPoolAsync_ptsz"));
    cr_assert_eq(ma(&p, 64, cudaStreamPerThread), cudaSuccess);
    cr_assert_eq(fa(p, cudaStreamPerThread), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
}

Test(simcudart, malloc3d_peers_and_stream_wait_event)
{
    setenv(SIMCUDA_ENV_DEVICES, "2", 1);
    struct cudaPitchedPtr pp;
    cr_assert_eq(cudaMalloc3D(&pp, (struct cudaExtent){100, 4, 3}), cudaSuccess);
    cr_assert_not_null(pp.ptr);
    cr_assert_geq(pp.pitch, 100);
    cr_assert_eq(pp.xsize, 100);
    cr_assert_eq(pp.ysize, 4);
    cr_assert_eq(cudaMemset(pp.ptr, 1, pp.pitch * 4 * 3), cudaSuccess,
                 "pitch x height x depth bytes");
    cr_assert_eq(cudaMemset(pp.ptr, 1, pp.pitch * 4 * 3 + 1), cudaErrorInvalidValue);
    cudaGetLastError();
    cr_assert_eq(cudaFree(pp.ptr), cudaSuccess);
    cr_assert_eq(cudaMalloc3D(&pp, (struct cudaExtent){0, 4, 3}), cudaSuccess);
    cr_assert_null(pp.ptr);
    cr_assert_eq(cudaMalloc3D(NULL, (struct cudaExtent){1, 1, 1}), cudaErrorInvalidValue);
    cudaGetLastError();

    /* What NVIDIA's simpleIPC sample checks and does before sharing. */
    int can = -1;
    cr_assert_eq(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
    cr_assert_eq(can, 1);
    cr_assert_eq(cudaDeviceCanAccessPeer(&can, 0, 9), cudaErrorInvalidDevice);
    cudaGetLastError();
    cr_assert_eq(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    cr_assert_eq(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    cr_assert_eq(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
    cr_assert_eq(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
    cudaGetLastError();

    cudaEvent_t e;
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming),
                 cudaSuccess);
    cr_assert_eq(cudaEventRecord(e, s), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(0, e, 0), cudaSuccess);
    typedef cudaError_t (*wait_fn)(cudaStream_t, cudaEvent_t, unsigned);
    wait_fn w = (wait_fn)dlsym(RTLD_DEFAULT, "cudaStreamWaitEvent_ptsz");
    cr_assert_not_null(w);
    cr_assert_eq(w(cudaStreamPerThread, e, 0), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(s, NULL, 0), cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    cr_assert_eq(cudaEventSynchronize(e), cudaSuccess);
    cr_assert_eq(cudaEventDestroy(e), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
}
