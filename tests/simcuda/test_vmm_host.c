/*
 * test_vmm_host.c: Criterion tests of host-located VMM memory
 * (driver_vmm_host.c) and of queued work (driver_queue.c): what a host swap
 * built on VMM relies on, and the one mistake that kills a context, as
 * NVIDIA's driver showed them on an H200 (../../shared/probes/README.md):
 * host-located memory mapped at a device address with device access, one
 * address re-pointed between device- and host-backed memory with its data
 * intact, and cuMemUnmap under a kernel still queued that may touch the
 * range: the call succeeds and the context is dead (700 from then on).
 *
 * Each test runs on its own machine (SIMCUDA_MACHINE = test name + pid,
 * unlinked in .fini) and in its own process (the sticky error is the
 * process's).
 */
#include <cuda.h>
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simcuda.h"
#include "test_check.h"

static char g_machine[160];

static void setup(void)
{
    snprintf(g_machine, sizeof(g_machine), "vh-%s-%d", criterion_current_test->name, (int)getpid());
    setenv(SIMCUDA_ENV_MACHINE, g_machine, 1);
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "64M", 1);
    unsetenv(SIMCUDA_ENV_DEVICES);
    unsetenv(SIMCUDA_ENV_FAIL_ALLOC);
}

static void teardown(void)
{
    simcuda_unlink_machine(g_machine);
}

TestSuite(simvmmhost, .init = setup, .fini = teardown, .timeout = 30);

#define GRAN (2u << 20)

/* A kernel whose first parameter is a pointer (PTX, as in test_managed.c). */
static const char ptr_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n\n"
                              ".visible .entry use(\n\t.param .u64 use_param_0\n)\n{\n\tret;\n}\n";

static CUfunction g_use;

static void init0(void)
{
    CUcontext c;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&c, 0));
    OK(cuCtxSetCurrent(c));
    CUmodule mod;
    OK(cuModuleLoadData(&mod, ptr_ptx));
    OK(cuModuleGetFunction(&g_use, mod, "use"));
}

static CUmemAllocationProp prop_at(CUmemLocationType type, int id)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    return p;
}

static void grant(CUdeviceptr va, size_t n)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = 0;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(cuMemSetAccess(va, n, &d, 1));
}

static size_t used_bytes(void)
{
    size_t f = 0, t = 0;
    OK(cuMemGetInfo(&f, &t));
    return t - f;
}

/* A reserved range of n bytes with allocation h mapped and open to device 0. */
static CUdeviceptr mapped(CUmemGenericAllocationHandle h, size_t n)
{
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, n, 0, 0, 0));
    OK(cuMemMap(va, n, 0, h, 0));
    grant(va, n);
    return va;
}

static void launch_on(CUstream s, CUdeviceptr p)
{
    void *params[] = {&p};
    OK(cuLaunchKernel(g_use, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
}

Test(simvmmhost, the_device_says_host_located_vmm_is_supported)
{
    init0();
    int v = 0;
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                            0));
    cr_expect_eq(v, 1, "attribute 141");
    v = 0;
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    cr_expect_eq(v, 1, "attribute 145");
}

Test(simvmmhost, host_located_memory_maps_at_a_device_address_and_costs_the_device_nothing)
{
    init0();
    size_t used = used_bytes();
    const CUmemLocationType types[] = {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                                       CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT};
    for (size_t t = 0; t < 3; t++) {
        CUmemAllocationProp p = prop_at(types[t], 0);
        size_t g = 0;
        OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        cr_expect_eq(g, GRAN);
        CUmemGenericAllocationHandle h;
        OK(cuMemCreate(&h, 2 * GRAN, &p, 0));
        cr_expect_eq(used_bytes(), used, "host-located memory is not charged to the device");
        CUmemAllocationProp q;
        OK(cuMemGetAllocationPropertiesFromHandle(&q, h));
        cr_expect_eq(q.location.type, types[t]);
        CUdeviceptr va = mapped(h, 2 * GRAN);
        static uint32_t in[1024], out[1024];
        for (unsigned i = 0; i < 1024; i++)
            in[i] = 0x9e3779b9u * (i + 1) + (unsigned)t;
        OK(cuMemcpyHtoD(va + GRAN - 2048, in, sizeof(in))); /* across the middle */
        OK(cuMemcpyDtoH(out, va + GRAN - 2048, sizeof(out)));
        cr_expect(memcmp(in, out, sizeof(in)) == 0);
        CUdeviceptr dev;
        OK(cuMemAlloc(&dev, sizeof(in)));
        OK(cuMemcpyDtoD(dev, va + GRAN - 2048, sizeof(in)));
        memset(out, 0, sizeof(out));
        OK(cuMemcpyDtoH(out, dev, sizeof(out)));
        cr_expect(memcmp(in, out, sizeof(in)) == 0, "a device copy reads it");
        OK(cuMemFree(dev));
        OK(cuMemUnmap(va, 2 * GRAN));
        OK(cuMemAddressFree(va, 2 * GRAN));
        OK(cuMemRelease(h));
    }
    CUmemAllocationProp bad = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 1);
    CUmemGenericAllocationHandle h;
    FAILS(cuMemCreate(&h, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE); /* one NUMA node, 0 */
    bad = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    FAILS(cuMemCreate(&h, GRAN, &bad, 0), CUDA_ERROR_NOT_SUPPORTED);
}

/* Each host-located allocation has a BUFFER_ID of its own, as every CUDA
 * allocation does (cuPointerGetAttribute's docs), and answers as device
 * memory of its device, not managed, not legacy-IPC capable. */
Test(simvmmhost, host_located_memory_answers_pointer_queries_with_its_own_buffer_id)
{
    init0();
    CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    CUmemGenericAllocationHandle h1, h2;
    OK(cuMemCreate(&h1, GRAN, &p, 0));
    OK(cuMemCreate(&h2, GRAN, &p, 0));
    CUdeviceptr a = mapped(h1, GRAN), b = mapped(h2, GRAN);
    unsigned long long ida = 0, idb = 0;
    OK(cuPointerGetAttribute(&ida, CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 100));
    OK(cuPointerGetAttribute(&idb, CU_POINTER_ATTRIBUTE_BUFFER_ID, b));
    cr_expect_neq(ida, 0);
    cr_expect_neq(idb, 0);
    cr_expect_neq(ida, idb);
    unsigned int type = 0;
    unsigned char managed = 9, legacy = 9;
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a));
    OK(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, a));
    cr_expect_eq(type, CU_MEMORYTYPE_DEVICE);
    cr_expect_eq(managed, 0);
    cr_expect_eq(legacy, 0);
    void *host = NULL;
    FAILS(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, a),
          CUDA_ERROR_INVALID_VALUE);
}

/* The probe's `remap`: copy through a second mapping, unmap, map the other
 * backing, set access; both ways, data intact. */
Test(simvmmhost, one_address_moves_between_device_and_host_backing_with_its_data)
{
    init0();
    CUmemAllocationProp pd = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAllocationProp ph = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    CUmemGenericAllocationHandle dh, hh;
    OK(cuMemCreate(&dh, GRAN, &pd, 0));
    OK(cuMemCreate(&hh, GRAN, &ph, 0));
    CUdeviceptr va = mapped(dh, GRAN);   /* the block: device-backed */
    CUdeviceptr side = mapped(hh, GRAN); /* the host copy's own mapping */
    static uint32_t in[GRAN / 4], out[GRAN / 4];
    for (size_t i = 0; i < GRAN / 4; i++)
        in[i] = (uint32_t)(i * 2654435761u);
    OK(cuMemcpyHtoD(va, in, GRAN));
    /* evict: copy out, re-point the address at the host copy */
    OK(cuMemcpyDtoD(side, va, GRAN));
    OK(cuMemUnmap(va, GRAN));
    OK(cuMemMap(va, GRAN, 0, hh, 0));
    grant(va, GRAN);
    OK(cuMemcpyDtoH(out, va, GRAN));
    cr_expect(memcmp(in, out, GRAN) == 0, "read through the host-backed address");
    in[7] ^= 0xffffffffu; /* a write while evicted lands in the host copy */
    OK(cuMemcpyHtoD(va + 28, &in[7], 4));
    /* fetch: the device memory gets the host copy, the address points back */
    OK(cuMemUnmap(side, GRAN));
    OK(cuMemMap(side, GRAN, 0, dh, 0));
    grant(side, GRAN);
    OK(cuMemcpyDtoD(side, va, GRAN));
    OK(cuMemUnmap(va, GRAN));
    OK(cuMemMap(va, GRAN, 0, dh, 0));
    grant(va, GRAN);
    memset(out, 0, GRAN);
    OK(cuMemcpyDtoH(out, va, GRAN));
    cr_expect(memcmp(in, out, GRAN) == 0, "moved back with the write made while evicted");
}

Test(simvmmhost, a_held_stream_keeps_its_kernels_queued_until_synchronised)
{
    init0();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    launch_on(s, p);
    launch_on(NULL, p); /* the legacy stream is not held */
    cr_expect_eq(simcuda_queued_launches(), 1);
    FAILS(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    OK(cuStreamQuery(NULL));
    OK(cuStreamSynchronize(s));
    cr_expect_eq(simcuda_queued_launches(), 0);
    OK(cuStreamQuery(s));
    launch_on(s, p);
    OK(cuCtxSynchronize());
    cr_expect_eq(simcuda_queued_launches(), 0, "a context synchronisation completes every stream");
    launch_on(s, p);
    cr_assert_eq(simcuda_stream_hold(s, 0), 0);
    cr_expect_eq(simcuda_queued_launches(), 0, "releasing the hold completes its kernels");
}

/* What a swap engine asks before it remaps: an event recorded after the
 * block's last kernel. */
Test(simvmmhost, an_event_after_a_queued_kernel_is_not_ready_until_it_completes)
{
    init0();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent before, after, idle;
    OK(cuEventCreate(&before, CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&after, CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&idle, CU_EVENT_DISABLE_TIMING));
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuEventRecord(before, s));
    launch_on(s, p);
    OK(cuEventRecord(after, s));
    OK(cuEventRecord(idle, NULL)); /* another stream, nothing queued there */
    OK(cuEventQuery(before));
    FAILS(cuEventQuery(after), CUDA_ERROR_NOT_READY);
    OK(cuEventQuery(idle));
    launch_on(s, p); /* queued after the event: not waited for by it */
    OK(cuEventSynchronize(after));
    OK(cuEventQuery(after));
    cr_expect_eq(simcuda_queued_launches(), 1, "the later kernel is still queued");
    OK(cuStreamSynchronize(s));
    cr_expect_eq(simcuda_queued_launches(), 0);
}

/* The probe's `unmapbusy`: the unmap succeeds, the kernel dies, and the
 * context is dead. Here the kernel is queued on another stream than the
 * one the unmap's caller thinks of: any stream counts. */
Test(simvmmhost, unmapping_a_range_a_queued_kernel_may_touch_kills_the_context)
{
    init0();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemAllocationProp pd = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, 2 * GRAN, &pd, 0));
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
    OK(cuMemMap(va, GRAN, 0, h, 0));
    OK(cuMemMap(va + GRAN, GRAN, GRAN, h, 0));
    grant(va, 2 * GRAN);
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    launch_on(s, va + 64); /* an interior pointer of the first mapping */
    /* the second mapping: the kernel may index past its pointer, within
     * the reservation */
    OK(cuMemUnmap(va + GRAN, GRAN));
    cr_expect_eq(simcuda_queued_launches(), 0, "the queued kernel died");
    CUdeviceptr p;
    FAILS(cuMemAlloc(&p, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
    FAILS(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    FAILS(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
}

Test(simvmmhost, unmapping_what_no_queued_kernel_touches_is_harmless)
{
    init0();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemAllocationProp pd = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle a, b;
    OK(cuMemCreate(&a, GRAN, &pd, 0));
    OK(cuMemCreate(&b, GRAN, &pd, 0));
    CUdeviceptr va = mapped(a, GRAN), vb = mapped(b, GRAN);
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    launch_on(s, va);
    OK(cuMemUnmap(vb, GRAN)); /* the probe's `mapbusy`: another range, at once */
    cr_expect_eq(simcuda_queued_launches(), 1);
    OK(cuStreamSynchronize(s)); /* the kernel completed: now its range may go */
    OK(cuMemUnmap(va, GRAN));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemFree(p));
}

Test(simvmmhost, a_queued_kernel_of_unknown_layout_may_touch_any_range)
{
    init0();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemAllocationProp pd = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle a;
    OK(cuMemCreate(&a, GRAN, &pd, 0));
    CUdeviceptr va = mapped(a, GRAN);
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    /* a handle that is not a loaded function: accepted, recorded without
     * a layout (driver_module.c) */
    int n = 0;
    void *params[] = {&n};
    OK(cuLaunchKernel((CUfunction)(uintptr_t)0x1234, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    OK(cuMemUnmap(va, GRAN));
    CUdeviceptr p;
    FAILS(cuMemAlloc(&p, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
}

/* ---- work that completes later: builtin kernels, copies, sets, waits ---- */

static CUfunction g_add, g_add_opaque;

static void init_builtins(void)
{
    init0();
    CUmodule mod;
    OK(cuModuleLoadData(&mod, SIMCUDA_BUILTIN_PTX));
    OK(cuModuleGetFunction(&g_add, mod, "simcuda_add_u32"));
    OK(cuModuleGetFunction(&g_add_opaque, mod, "simcuda_add_u32_opaque"));
}

static void add_on(CUfunction f, CUstream s, CUdeviceptr p, uint64_t count, uint32_t value)
{
    void *params[] = {&p, &count, &value};
    OK(cuLaunchKernel(f, (unsigned)((count + 255) / 256), 1, 1, 256, 1, 1, 0, s, params, NULL));
}

static uint32_t word_at(CUdeviceptr p)
{
    uint32_t w = 0;
    OK(cuMemcpyDtoH(&w, p, 4));
    return w;
}

Test(simvmmhost, a_builtin_kernel_runs_when_it_completes)
{
    init_builtins();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD32(p, 10, 1024));
    add_on(g_add, s, p, 1024, 5);
    cr_expect_eq(word_at(p + 4092), 15, "not held: it ran at once");
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    add_on(g_add, s, p, 1024, 100);
    cr_expect_eq(word_at(p), 15, "queued: not run yet");
    cr_assert_eq(simcuda_stream_hold(s, 0), 0);
    cr_expect_eq(word_at(p), 115, "the release completed it");
    size_t off = 0, size = 0;
    OK(cuFuncGetParamInfo(g_add, 2, &off, &size));
    cr_expect(off == 16 && size == 4);
    FAILS(cuFuncGetParamInfo(g_add_opaque, 0, &off, &size), CUDA_ERROR_NOT_SUPPORTED);
    add_on(g_add_opaque, NULL, p, 1, 1);
    cr_expect_eq(word_at(p), 116);
}

Test(simvmmhost, an_async_copy_on_a_held_stream_lands_when_it_completes)
{
    init_builtins();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD32(p, 0, 1024));
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    static uint32_t src[1024];
    for (unsigned i = 0; i < 1024; i++)
        src[i] = 7;
    OK(cuMemcpyHtoDAsync(p, src, sizeof(src), s));
    src[0] = 8; /* pageable: staged at the call, as the driver does */
    OK(cuMemsetD32Async(p + 8, 9, 1, s));
    cr_expect_eq(simcuda_queued_work(), 2);
    cr_expect_eq(simcuda_queued_launches(), 0);
    cr_expect_eq(word_at(p), 0, "queued: not copied yet");
    OK(cuStreamSynchronize(s));
    cr_expect_eq(word_at(p), 7);
    cr_expect_eq(word_at(p + 4), 7);
    cr_expect_eq(word_at(p + 8), 9, "the set ran after the copy, in stream order");
}

/* What an engine's eviction does: its copy stream waits for the event
 * recorded after the kernel that uses the block, then copies; the copy sees
 * the kernel's effect, however the host waits for it. */
Test(simvmmhost, a_stream_waiting_on_an_event_queues_its_work_behind_it)
{
    init_builtins();
    CUstream s, copier;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&copier, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    OK(cuMemAlloc(&a, 4096));
    OK(cuMemAlloc(&b, 4096));
    OK(cuMemsetD32(a, 1, 1024));
    CUevent e;
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    add_on(g_add, s, a, 1024, 2);
    OK(cuEventRecord(e, s));
    OK(cuStreamWaitEvent(copier, e, 0));
    OK(cuMemcpyDtoDAsync(b, a, 4096, copier));
    FAILS(cuStreamQuery(copier), CUDA_ERROR_NOT_READY);
    cr_expect_eq(simcuda_queued_work(), 2, "the kernel and the copy behind it");
    OK(cuStreamSynchronize(copier)); /* the host waits: the kernel finishes first */
    cr_expect_eq(word_at(b + 100), 3, "the copy saw the kernel's effect");
    cr_expect_eq(simcuda_queued_work(), 0);
    /* The same, completed by releasing the held stream. */
    add_on(g_add, s, a, 1024, 2);
    OK(cuEventRecord(e, s));
    OK(cuStreamWaitEvent(copier, e, 0));
    OK(cuMemcpyDtoDAsync(b, a, 4096, copier));
    cr_assert_eq(simcuda_stream_hold(s, 0), 0);
    cr_expect_eq(word_at(b), 5);
}

Test(simvmmhost, unmapping_a_range_a_queued_copy_writes_kills_the_context)
{
    init_builtins();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemAllocationProp pd = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle a;
    OK(cuMemCreate(&a, GRAN, &pd, 0));
    CUdeviceptr va = mapped(a, GRAN);
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    static uint32_t src[16];
    OK(cuMemcpyHtoDAsync(va + 64, src, sizeof(src), s));
    OK(cuMemUnmap(va, GRAN));
    CUdeviceptr p;
    FAILS(cuMemAlloc(&p, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
}

Test(simvmmhost, a_free_waits_for_the_queued_work)
{
    init_builtins();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p, q;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemAlloc(&q, 4096));
    OK(cuMemsetD32(q, 0, 1024));
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    add_on(g_add, s, q, 1024, 4);
    OK(cuMemFree(p));
    cr_expect_eq(simcuda_queued_work(), 0, "cudaFree synchronises the device");
    cr_expect_eq(word_at(q), 4);
}

Test(simvmmhost, a_2d_copy_lands_row_by_row_in_stream_order)
{
    init_builtins();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD32(p, 0, 1024));
    static uint32_t rows[4][8];
    for (unsigned r = 0; r < 4; r++)
        for (unsigned i = 0; i < 8; i++)
            rows[r][i] = r * 100 + i + 1;
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = rows;
    c.srcPitch = sizeof(rows[0]);
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = p + 64;
    c.dstPitch = 256;
    c.WidthInBytes = sizeof(rows[0]);
    c.Height = 4;
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    OK(cuMemcpy2DAsync(&c, s));
    cr_expect_eq(simcuda_queued_work(), 4, "a piece of work a row");
    cr_expect_eq(word_at(p + 64 + 3 * 256 + 28), 0);
    cr_assert_eq(simcuda_stream_hold(s, 0), 0);
    cr_expect_eq(word_at(p + 64 + 3 * 256 + 28), 308);
    cr_expect_eq(word_at(p + 64 + 32), 0, "between the rows: untouched");
    c.Height = 2, c.dstPitch = 16; /* a pitch below the width */
    FAILS(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
}

Test(simvmmhost, a_2d_set_fills_width_elements_of_height_rows_pitch_apart)
{
    init_builtins();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD32(p, 0, 1024));
    OK(cuMemsetD2D32(p + 64, 256, 5, 8, 3)); /* 8 words in each of 3 rows */
    for (unsigned r = 0; r < 4; r++)
        for (unsigned i = 0; i < 10; i++)
            cr_expect_eq(word_at(p + 64 + r * 256 + i * 4), r < 3 && i < 8 ? 5u : 0u,
                         "row %u word %u", r, i);
    cr_expect_eq(word_at(p + 60), 0, "before the first row: untouched");
    /* Queued on a held stream: a row a piece, in stream order after a set. */
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    OK(cuMemsetD32Async(p + 64, 1, 64, s));
    OK(cuMemsetD2D32Async(p + 64, 256, 9, 2, 4, s));
    cr_expect_eq(simcuda_queued_work(), 5, "the set and a piece of work a row");
    cr_expect_eq(word_at(p + 64), 5, "queued: not set yet");
    cr_assert_eq(simcuda_stream_hold(s, 0), 0);
    cr_expect_eq(word_at(p + 64), 9, "the 2D set ran after the 1D one");
    cr_expect_eq(word_at(p + 64 + 8), 1);
    cr_expect_eq(word_at(p + 64 + 3 * 256 + 4), 9);
    cr_expect_eq(word_at(p + 64 + 2 * 256 + 8), 5, "beyond the width: untouched");
    /* 8- and 16-bit elements: Width counts elements, not bytes. */
    OK(cuMemsetD2D8(p + 2048, 16, 0xab, 3, 2));
    cr_expect_eq(word_at(p + 2048), 0x00ababab);
    cr_expect_eq(word_at(p + 2064), 0x00ababab);
    OK(cuMemsetD2D16(p + 2048 + 32, 8, 0x1234, 3, 2));
    cr_expect_eq(word_at(p + 2080), 0x12341234);
    cr_expect_eq(word_at(p + 2084), 0x1234);
    cr_expect_eq(word_at(p + 2088), 0x12341234);
    /* One row: the pitch is not used. */
    OK(cuMemsetD2D32(p + 3072, 3, 6, 2, 1));
    cr_expect_eq(word_at(p + 3076), 6);
    OK(cuMemsetD2D32(p, 16, 7, 0, 4)); /* nothing to set */
    cr_expect_eq(word_at(p), 0);
    FAILS(cuMemsetD2D32(p + 2, 16, 7, 1, 2), CUDA_ERROR_INVALID_VALUE); /* misaligned start */
    FAILS(cuMemsetD2D32(p, 18, 7, 1, 2), CUDA_ERROR_INVALID_VALUE);     /* misaligned pitch */
    FAILS(cuMemsetD2D32(p, 16, 7, 5, 2), CUDA_ERROR_INVALID_VALUE);     /* pitch below the row */
    /* A last row past the allocation: refused before any row is set. */
    FAILS(cuMemsetD2D32(p, 1024, 7, 4, 5), CUDA_ERROR_INVALID_VALUE);
    cr_expect_eq(word_at(p), 0);
}

Test(simvmmhost, a_graph_runs_its_kernel_nodes_in_order_on_the_stream)
{
    init_builtins();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD32(p, 1, 1024));
    uint64_t count = 1024;
    uint32_t value = 10;
    void *params[] = {&p, &count, &value};
    CUDA_KERNEL_NODE_PARAMS k;
    memset(&k, 0, sizeof(k));
    k.func = g_add;
    k.gridDimX = 4, k.gridDimY = k.gridDimZ = 1;
    k.blockDimX = 256, k.blockDimY = k.blockDimZ = 1;
    k.kernelParams = params;
    CUgraph g;
    CUgraphNode n1, n2;
    CUgraphExec e;
    OK(cuGraphCreate(&g, 0));
    OK(cuGraphAddKernelNode(&n1, g, NULL, 0, &k));
    value = 100; /* the node kept its own copy: the second adds 100 */
    OK(cuGraphAddKernelNode(&n2, g, &n1, 1, &k));
    OK(cuGraphInstantiate(&e, g, 0));
    OK(cuGraphDestroy(g));
    cr_assert_eq(simcuda_stream_hold(s, 1), 0);
    OK(cuGraphLaunch(e, s));
    cr_expect_eq(simcuda_queued_launches(), 2);
    cr_expect_eq(word_at(p), 1);
    OK(cuStreamSynchronize(s));
    cr_expect_eq(word_at(p + 4092), 111);
    OK(cuGraphExecDestroy(e));
}

static CUcontext g_release_ctx;
static CUstream g_release_stream;

static void *release_hold(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(g_release_ctx);
    simcuda_stream_hold(g_release_stream, 0);
    return NULL;
}

/* A host thread polling an event while another thread completes the work
 * it follows (the hold released: a swap engine's mover polling a
 * write-back's event) must not see it complete before the work's bytes
 * have all landed. */
Test(simvmmhost, an_event_is_complete_only_once_its_work_landed_while_another_thread_runs_it)
{
    init0();
    OK(cuCtxGetCurrent(&g_release_ctx));
    OK(cuStreamCreate(&g_release_stream, CU_STREAM_NON_BLOCKING));
    const size_t n = 24u << 20;
    CUdeviceptr src, dst;
    OK(cuMemAlloc(&src, n));
    OK(cuMemAlloc(&dst, n));
    OK(cuMemsetD8(src, 0xab, n));
    OK(cuMemsetD8(dst, 0, n));
    CUevent ev;
    OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    for (int round = 0; round < 4; round++) {
        cr_assert_eq(simcuda_stream_hold(g_release_stream, 1), 0);
        OK(cuMemcpyDtoDAsync(dst, src, n, g_release_stream));
        OK(cuEventRecord(ev, g_release_stream));
        cr_assert_eq(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, release_hold, NULL), 0);
        CUresult r;
        while ((r = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY)
            ;
        OK(r);
        /* the simulated device's memory is this process's: read it as it is now */
        const volatile unsigned char *last = (const volatile unsigned char *)(uintptr_t)dst + n - 1;
        cr_expect_eq(*last, 0xab, "round %d: the event completed before its copy's last byte",
                     round);
        pthread_join(t, NULL);
        OK(cuMemsetD8(dst, 0, n));
    }
}
