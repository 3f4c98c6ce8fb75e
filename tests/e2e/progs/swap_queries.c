/* swap_queries: what a program asks the driver and the runtime about its
 * pointers, and a numba-style export, for a swappable block (test_swap.c).
 * Two 8 MiB blocks, A and B, come from cudaMalloc and are filled by copies;
 * A is queried (offsets 0, 3 MiB and its last byte), kernel `peek` is
 * launched on B, A is queried again, then B is exported the way numba does
 * it: the base of a pointer 3 MiB into B from cuMemGetAddressRange, the
 * handle of that base, the offset shipped beside it; an importer (this
 * program again) opens the handle and reads at base + offset. An ordinary
 * 64 KiB block and a host address are queried too. Under the shim with
 * IPCSHIM_DEVICE_BUDGET=12M the blocks are VMM-backed: A on the device at
 * the first queries (the copy placed it), on the host at the second (B's
 * fetch evicted it). The program knows nothing of the shim: every "q" line
 * must read as without it.
 *
 *   swap_queries            the run
 *   swap_queries --race N   a thread asks about A (range, range attributes,
 *                           cudaPointerGetAttributes) while the main thread
 *                           launches `peek` N times on A and B in turn (under
 *                           the budget, each launch evicts the other block):
 *                           "race: queries Q wrong W"
 *   swap_queries --importer HEX OFFSET SEED   (internal)
 *
 * Output: "q PHASE OFFSET WHAT VALUE" for every answer (addresses relative
 * to the pointer asked about: the same whatever the addresses), "state
 * PHASE OFFSET mapping_size N" (CU_POINTER_ATTRIBUTE_MAPPING_SIZE, passed
 * through by the shim: a 2 MiB chunk while resident, the whole block while
 * evicted), "export: CODE", "import: ok|wrong|error CODE". Exit status 0,
 * or the failing step's number. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024ull * 1024)
#define BLOCK (8 * MIB)
#define SEED_A 0x11u
#define SEED_B 0x22u

static const char ptx[] = ".version 8.0\n.target sm_75\n.address_size 64\n\n"
                          ".visible .entry peek(\n"
                          "\t.param .u64 peek_param_0\n"
                          ")\n{\n\tret;\n}\n";

#define CHECK(step, call)                                                                          \
    do {                                                                                           \
        int r_ = (int)(call);                                                                      \
        if (r_ != 0) {                                                                             \
            fprintf(stderr, "step %d: %s failed with %d\n", step, #call, r_);                      \
            return step;                                                                           \
        }                                                                                          \
    } while (0)

/* Word i of a block filled with seed. */
static uint32_t word(uint32_t seed, uint64_t i)
{
    return seed * 0x9E3779B1u ^ (uint32_t)i;
}

static CUcontext ctx;
static unsigned long long first_id; /* BUFFER_ID of A's base, at the first query */
static CUresult (*via_range)(CUdeviceptr *, size_t *, CUdeviceptr);
static CUresult (*via_attribute)(void *, CUpointer_attribute, CUdeviceptr);

/* p's distance from base, or -1 when base is 0 (no answer). */
static long long rel(CUdeviceptr p, CUdeviceptr base)
{
    return base ? (long long)(p - base) : -1;
}

/* Every answer about p (offset off into its block, in phase). */
static void query(const char *phase, uint64_t off, CUdeviceptr p)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = cuMemGetAddressRange(&base, &size, p);
    printf("q %s %llu range %d %lld %zu\n", phase, (unsigned long long)off, (int)r, rel(p, base),
           size);
    base = 0, size = 0;
    r = via_range(&base, &size, p);
    printf("q %s %llu resolver-range %d %lld %zu\n", phase, (unsigned long long)off, (int)r,
           rel(p, base), size);

    CUdeviceptr start = 0, dptr = 0;
    size_t rsize = 0;
    unsigned int type = 0;
    int ordinal = -9;
    CUcontext owner = NULL;
    /* Booleans: the driver's width is not documented (one byte here, in
     * the simulator); zeroed ints read the same either way. */
    unsigned int legacy = 0, managed = 0;
    unsigned long long id = 0;
    CUpointer_attribute what[] = {
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_CONTEXT,          CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_BUFFER_ID};
    void *into[] = {&start, &rsize, &type, &ordinal, &owner, &dptr, &managed, &legacy, &id};
    const size_t n = sizeof what / sizeof what[0];
    r = cuPointerGetAttributes((unsigned)n, what, into, p);
    legacy &= 0xff, managed &= 0xff;
    if (!first_id && r == CUDA_SUCCESS) first_id = id;
    printf("q %s %llu attributes %d start %lld size %zu type %u ordinal %d context %d dptr %d "
           "managed %u legacy %u id %s\n",
           phase, (unsigned long long)off, (int)r, rel(p, start), rsize, type, ordinal,
           owner == ctx, dptr == p, managed, legacy,
           r != CUDA_SUCCESS ? "-"
           : id == first_id  ? "same"
                             : "other");
    /* Each one alone, through the exported symbol and the resolver door. */
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0, w = 0;
        CUresult r1 = cuPointerGetAttribute(&v, what[i], p);
        CUresult r2 = via_attribute(&w, what[i], p);
        uint64_t want = 0;
        memcpy(&want, into[i],
               what[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED ||
                       what[i] == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
                   ? 1
               : what[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE ||
                       what[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
                   ? 4
                   : 8);
        printf("q %s %llu attribute-%d %d %d %s\n", phase, (unsigned long long)off, (int)what[i],
               (int)r1, (int)r2, v == want && w == want ? "agrees" : "differs");
    }
    void *host = NULL;
    r = cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p);
    printf("q %s %llu host-pointer %d %d\n", phase, (unsigned long long)off, (int)r, host != NULL);

    struct cudaPointerAttributes at;
    memset(&at, 0x5a, sizeof at);
    cudaError_t e = cudaPointerGetAttributes(&at, (void *)(uintptr_t)p);
    printf("q %s %llu runtime %d type %d device %d dptr %d hptr %d\n", phase,
           (unsigned long long)off, (int)e, (int)at.type, at.device,
           at.devicePointer == (void *)(uintptr_t)p, at.hostPointer != NULL);

    size_t mapping = 0;
    cuPointerGetAttribute(&mapping, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p);
    printf("state %s %llu mapping_size %zu\n", phase, (unsigned long long)off, mapping);
}

static void query_block(const char *phase, CUdeviceptr a, size_t size)
{
    query(phase, 0, a);
    if (size > 3 * MIB) query(phase, 3 * MIB, a + 3 * MIB);
    query(phase, size - 1, a + size - 1);
}

/* The importer: open hex, read 16 bytes at offset, compare with block
 * seed's words at 3 MiB. */
static int importer(const char *hex, const char *offset, const char *seed)
{
    CUipcMemHandle h;
    for (size_t i = 0; i < sizeof h.reserved; i++) {
        unsigned v = 0;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 50;
        h.reserved[i] = (char)v;
    }
    CUdevice dev;
    CUcontext c;
    CHECK(51, cuInit(0));
    CHECK(52, cuDeviceGet(&dev, 0));
    CHECK(53, cuDevicePrimaryCtxRetain(&c, dev));
    CHECK(54, cuCtxSetCurrent(c));
    CUdeviceptr p = 0;
    CUresult r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUDA_SUCCESS) {
        printf("import: error %d\n", (int)r);
        return 0;
    }
    uint32_t got[4];
    r = cuMemcpyDtoH(got, p + strtoull(offset, NULL, 0), sizeof got);
    uint32_t s = (uint32_t)strtoul(seed, NULL, 0);
    int ok = r == CUDA_SUCCESS;
    for (int i = 0; i < 4 && ok; i++)
        ok = got[i] == word(s, 3 * MIB / 4 + (uint64_t)i);
    if (r != CUDA_SUCCESS)
        printf("import: error %d\n", (int)r);
    else
        printf("import: %s\n", ok ? "ok" : "wrong");
    cuIpcCloseMemHandle(p);
    return 0;
}

/* --race: the querying thread's state. */
static struct {
    CUdeviceptr a;
    int stop;
    unsigned long queries, wrong;
} race;

/* Ask about A until told to stop; count answers that are not A's. */
static void *race_queries(void *arg)
{
    (void)arg;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        race.wrong++;
        return NULL;
    }
    const uint64_t offs[] = {0, 3 * MIB, BLOCK - 1};
    while (!__atomic_load_n(&race.stop, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 3; i++) {
            CUdeviceptr p = race.a + offs[i], base = 0, start = 0;
            size_t size = 0, rsize = 0;
            struct cudaPointerAttributes at;
            int ok = cuMemGetAddressRange(&base, &size, p) == CUDA_SUCCESS && base == race.a &&
                     size == BLOCK;
            ok = ok &&
                 cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) ==
                     CUDA_SUCCESS &&
                 start == race.a;
            ok =
                ok &&
                cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) == CUDA_SUCCESS &&
                rsize == BLOCK;
            ok = ok && cudaPointerGetAttributes(&at, (void *)(uintptr_t)p) == cudaSuccess &&
                 at.type == cudaMemoryTypeDevice && at.device == 0;
            race.queries++;
            if (!ok) race.wrong++;
        }
    }
    return NULL;
}

static int run_race(CUfunction peek, CUdeviceptr a, CUdeviceptr b, int n)
{
    race.a = a;
    pthread_t t;
    if (pthread_create(&t, NULL, race_queries, NULL)) return 40;
    for (int i = 0; i < n; i++) {
        CUdeviceptr p = i % 2 ? b : a;
        void *params[] = {&p};
        CHECK(41, cuLaunchKernel(peek, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        CHECK(42, cuCtxSynchronize());
    }
    __atomic_store_n(&race.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    printf("race: queries %lu wrong %lu\n", race.queries, race.wrong);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--importer")) return importer(argv[2], argv[3], argv[4]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(1, cudaSetDevice(0));
    CHECK(2, cudaFree(0));
    CHECK(3, cuCtxGetCurrent(&ctx));
    CUdriverProcAddressQueryResult st;
    CHECK(4, cuGetProcAddress("cuMemGetAddressRange", (void **)&via_range, 12000, 0, &st));
    CHECK(5, cuGetProcAddress("cuPointerGetAttribute", (void **)&via_attribute, 12000, 0, &st));
    CUmodule mod;
    CUfunction peek;
    CHECK(6, cuModuleLoadData(&mod, ptx));
    CHECK(7, cuModuleGetFunction(&peek, mod, "peek"));

    void *a = NULL, *b = NULL, *small = NULL;
    CHECK(8, cudaMalloc(&a, BLOCK));
    CHECK(9, cudaMalloc(&b, BLOCK));
    CHECK(10, cudaMalloc(&small, 64 * 1024));
    uint32_t *fill = malloc(BLOCK);
    if (!fill) return 11;
    for (uint64_t i = 0; i < BLOCK / 4; i++)
        fill[i] = word(SEED_A, i);
    CHECK(12, cudaMemcpy(a, fill, BLOCK, cudaMemcpyHostToDevice));
    for (uint64_t i = 0; i < BLOCK / 4; i++)
        fill[i] = word(SEED_B, i);
    CHECK(13, cudaMemcpy(b, fill, BLOCK, cudaMemcpyHostToDevice));
    free(fill);
    CHECK(14, cudaDeviceSynchronize());

    if (argc == 3 && !strcmp(argv[1], "--race"))
        return run_race(peek, (CUdeviceptr)(uintptr_t)a, (CUdeviceptr)(uintptr_t)b, atoi(argv[2]));
    query_block("resident", (CUdeviceptr)(uintptr_t)a, BLOCK);
    CUdeviceptr pb = (CUdeviceptr)(uintptr_t)b;
    void *params[] = {&pb};
    CHECK(15, cuLaunchKernel(peek, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    CHECK(16, cuCtxSynchronize());
    query_block("evicted", (CUdeviceptr)(uintptr_t)a, BLOCK);
    query_block("ordinary", (CUdeviceptr)(uintptr_t)small, 64 * 1024);
    int on_stack = 0;
    query("host", 0, (CUdeviceptr)(uintptr_t)&on_stack);

    /* numba's export: base and offset from cuMemGetAddressRange. */
    CUdeviceptr p = pb + 3 * MIB, base = 0;
    size_t size = 0;
    CHECK(17, cuMemGetAddressRange(&base, &size, p));
    CUipcMemHandle h;
    CUresult r = cuIpcGetMemHandle(&h, base);
    printf("export: %d\n", (int)r);
    if (r == CUDA_SUCCESS) {
        char hex[2 * sizeof h.reserved + 1], off[32], seed[16];
        for (size_t i = 0; i < sizeof h.reserved; i++)
            sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
        snprintf(off, sizeof off, "%llu", (unsigned long long)(p - base));
        snprintf(seed, sizeof seed, "%u", SEED_B);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", "swap_queries", "--importer", hex, off, seed, (char *)NULL);
            _exit(127);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
            return 18;
    }
    CHECK(19, cudaFree(a));
    CHECK(20, cudaFree(b));
    CHECK(21, cudaFree(small));
    return 0;
}
