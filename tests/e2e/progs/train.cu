// train.cu: a training-like nvcc program (shared runtime) for the host-swap
// tests. L layers with weights W, gradients dW, optimizer state M and V,
// activations A[0..L] and two ping-pong activation gradients G; each
// iteration copies a new batch into A[0], runs forward (reads W[l] and
// A[l-1], writes A[l]), a loss kernel, backward in reverse (dgrad: W[l],
// G -> G; wgrad: A[l-1], G -> dW[l]) and an optimizer step per layer (W, dW,
// M, V, the last two passed inside a struct by value), all with <<<>>>; then
// it reads the loss back. The simulator does not run kernels, so the data
// check is the copies: every buffer is filled with known bytes at the start,
// the per-iteration copies write more, and at the end every buffer is read
// back and hashed:
//   working_set BYTES     sum of the buffers' sizes (4 KiB units)
//   max_launch BYTES      the most one launch touches
//   checksum HEX
//   iterations_per_second X   the training loop's throughput (scripts/gpu-check --swap)
// and, when the simulator's counters can be found (dlsym; absent on a real
// driver): faults, fetches, bytes_h2d, bytes_d2h, peak_device_resident.
//
//   train [--layers N] [--iters N] [--scale N] [--driver-copies] [--durations FILE]
//       --scale N: every buffer N times its size (default 1: blocks of
//         64 KiB-1.5 MiB; 8: 512 KiB-12 MiB, the weights and activations
//         4-12 MiB)
//       --driver-copies: fills, memsets and read-backs through the driver
//       --durations FILE: time every launch, copy and set on the device
//         (an event before and after each, on the legacy stream) and write
//         one count of nanoseconds per line, in the order the shim's trace
//         has them (IPCSHIM_TRACE with IPCSHIM_SWAP_MIN_BYTES=64K: every
//         buffer is swappable): the fills, each iteration's work, the
//         read-backs. The timing model reads it as TRACE.durations
//         (tests/swap/offline/swap_model.h).
//   train --export SWAPPABLE_BYTES ORDINARY_BYTES
//       export a block of each size with cudaIpcGetMemHandle and print
//       "export_large CODE", "export_small CODE"; then launch kernels over
//       both under pressure and print "small_managed R" (the simulator's
//       residency of the exported block: -2 = not managed, never migrated).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <dlfcn.h>
#include <vector>
#include <cuda_runtime.h>

#include "simcuda.h"

struct AdamState {
    float *m;
    float *v;
    float lr;
};

__global__ void forward(const float *w, int nw, const float *in, int nin, float *out, int nout)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nout) out[i] = w[i % nw] * 0.5f + in[i % nin] * 0.25f;
}

__global__ void loss_kernel(const float *a, int na, float *g, int ng, float *loss)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < ng) g[i] = a[i % na] - 1.0f;
    if (i == 0) loss[0] += a[0];
}

__global__ void dgrad(const float *w, int nw, const float *gin, float *gout, int ng)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < ng) gout[i] = gin[i] * w[i % nw];
}

__global__ void wgrad(const float *a, int na, const float *g, int ng, float *dw, int nw)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nw) dw[i] = a[i % na] * g[i % ng];
}

__global__ void adam(float *w, const float *dw, AdamState s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        s.m[i] = 0.9f * s.m[i] + 0.1f * dw[i];
        s.v[i] = 0.999f * s.v[i] + 0.001f * dw[i] * dw[i];
        w[i] -= s.lr * s.m[i] / (1.0f + s.v[i]);
    }
}

static void check(cudaError_t r, const char *what)
{
    if (r != cudaSuccess) {
        printf("error: %s: %d %s\n", what, (int)r, cudaGetErrorString(r));
        exit(2);
    }
}

static const size_t KiB = 1024;

struct Buf {
    float *p;
    size_t bytes;
    int n() const { return (int)(bytes / 4); }
};

static std::vector<Buf *> bufs;

// --durations: an event pair around each piece of work, in order.
static std::vector<cudaEvent_t> timing;
static bool timing_on;

static void mark()
{
    if (!timing_on) return;
    cudaEvent_t e;
    check(cudaEventCreate(&e), "cudaEventCreate");
    check(cudaEventRecord(e, 0), "cudaEventRecord");
    timing.push_back(e);
}

static int write_durations(const char *path)
{
    check(cudaDeviceSynchronize(), "sync");
    FILE *f = fopen(path, "w");
    if (!f) return printf("error: %s: cannot write\n", path), 2;
    fprintf(f, "# train: device nanoseconds of each launch, copy and set, in order\n");
    for (size_t i = 0; i + 1 < timing.size(); i += 2) {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, timing[i], timing[i + 1]), "cudaEventElapsedTime");
        fprintf(f, "%llu\n", (unsigned long long)(ms * 1e6 + 0.5));
    }
    for (cudaEvent_t e : timing)
        cudaEventDestroy(e);
    return fclose(f) ? 2 : 0;
}

static Buf *make(size_t bytes)
{
    Buf *b = new Buf{nullptr, bytes};
    check(cudaMalloc(&b->p, bytes), "cudaMalloc");
    bufs.push_back(b);
    return b;
}

static void *sim_symbol(const char *name);

// --driver-copies: fills, the memset and the read-back go through the
// driver's cuMemcpyHtoD_v2 / cuMemsetD32_v2 / cuMemcpyDtoH_v2, found with
// dlsym on libcuda (under the shim: its resolver door).
typedef int (*htod_fn)(unsigned long long, const void *, size_t);
typedef int (*dtoh_fn)(void *, unsigned long long, size_t);
typedef int (*setd32_fn)(unsigned long long, unsigned int, size_t);
static htod_fn drv_htod;
static dtoh_fn drv_dtoh;
static setd32_fn drv_setd32;

static void to_device(void *dst, const void *src, size_t n, const char *what)
{
    mark();
    if (drv_htod) {
        int r = drv_htod((unsigned long long)dst, src, n);
        if (r) printf("error: %s: CUresult %d\n", what, r), exit(2);
    } else {
        check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), what);
    }
    mark();
}

static void to_host(void *dst, const void *src, size_t n, const char *what)
{
    mark();
    if (drv_dtoh) {
        int r = drv_dtoh(dst, (unsigned long long)src, n);
        if (r) printf("error: %s: CUresult %d\n", what, r), exit(2);
    } else {
        check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), what);
    }
    mark();
}

static void fill(Buf *b, uint32_t seed)
{
    std::vector<uint32_t> h(b->bytes / 4);
    for (size_t i = 0; i < h.size(); i++)
        h[i] = seed * 2654435761u ^ (uint32_t)i;
    to_device(b->p, h.data(), b->bytes, "fill");
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static unsigned blocks_for(int n)
{
    return (unsigned)((n + 255) / 256);
}

typedef void (*stats_fn)(struct simcuda_managed_stats *);
typedef void (*peaks_fn)(struct simcuda_managed_peaks *);
typedef int (*residency_fn)(const void *, struct simcuda_residency *);

static void *sim_symbol(const char *name)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : nullptr;
}

static int export_mode(size_t large, size_t small)
{
    Buf *big = make(large), *little = make(small);
    fill(big, 1);
    fill(little, 2);
    cudaIpcMemHandle_t h;
    cudaError_t r = cudaIpcGetMemHandle(&h, big->p);
    printf("export_large %d\n", (int)r);
    cudaGetLastError();
    r = cudaIpcGetMemHandle(&h, little->p);
    printf("export_small %d\n", (int)r);
    // Pressure: launches over several swappable blocks and the exported one.
    Buf *more[4];
    for (int i = 0; i < 4; i++)
        more[i] = make(large), fill(more[i], 10 + i);
    for (int it = 0; it < 3; it++)
        for (int i = 0; i < 4; i++) {
            forward<<<blocks_for(more[i]->n()), 256>>>(little->p, little->n(), big->p, big->n(),
                                                       more[i]->p, more[i]->n());
            check(cudaGetLastError(), "launch");
        }
    check(cudaDeviceSynchronize(), "sync");
    residency_fn residency = (residency_fn)sim_symbol("simcuda_managed_residency");
    if (residency) printf("small_managed %d\n", residency(little->p, nullptr));
    std::vector<unsigned char> back(small);
    check(cudaMemcpy(back.data(), little->p, small, cudaMemcpyDeviceToHost), "read back");
    printf("small_checksum %016llx\n",
           (unsigned long long)fnv(1469598103934665603ull, back.data(), small));
    for (Buf *b : bufs)
        check(cudaFree(b->p), "cudaFree");
    return 0;
}

int main(int argc, char **argv)
{
    int L = 8, iters = 10, scale = 1;
    bool driver_copies = false;
    const char *durations = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            L = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--driver-copies"))
            driver_copies = true;
        else if (!strcmp(argv[i], "--durations") && i + 1 < argc)
            durations = argv[++i];
        else if (!strcmp(argv[i], "--export") && i + 2 < argc)
            return export_mode(strtoull(argv[i + 1], nullptr, 0),
                               strtoull(argv[i + 2], nullptr, 0));
        else {
            fprintf(stderr, "usage: train [--layers N] [--iters N] [--scale N] [--driver-copies] "
                            "[--durations FILE] | "
                            "--export LARGE SMALL\n");
            return 2;
        }
    }
    if (L < 1 || L > 64 || iters < 1 || scale < 1 || scale > 64) return 2;
    timing_on = durations != nullptr;

    std::vector<Buf *> W(L + 1), dW(L + 1), M(L + 1), V(L + 1), A(L + 1);
    size_t gmax = 0;
    for (int l = 0; l <= L; l++) {
        size_t a = (size_t)(3 + (l * 5) % 4) * 256 * KiB * scale;
        A[l] = make(a);
        if (a > gmax) gmax = a;
        if (l == 0) continue;
        size_t w = (size_t)(2 + l % 3) * 256 * KiB * scale;
        W[l] = make(w), dW[l] = make(w), M[l] = make(w), V[l] = make(w);
    }
    Buf *G[2] = {make(gmax), make(gmax)};
    Buf *loss = make(64 * KiB * scale);

    uint64_t ws = 0, max_launch = 0;
    for (Buf *b : bufs)
        ws += (b->bytes + 4095) / 4096 * 4096;
    for (int l = 1; l <= L; l++) {
        uint64_t adam_bytes = 4 * W[l]->bytes, fwd = W[l]->bytes + A[l - 1]->bytes + A[l]->bytes;
        if (adam_bytes > max_launch) max_launch = adam_bytes;
        if (fwd > max_launch) max_launch = fwd;
    }
    printf("working_set %llu\n", (unsigned long long)ws);
    printf("max_launch %llu\n", (unsigned long long)max_launch);
    fflush(stdout);

    if (driver_copies) {
        check(cudaFree(nullptr),
              "init"); // the runtime's context is current: driver calls may follow
        drv_htod = (htod_fn)sim_symbol("cuMemcpyHtoD_v2");
        drv_dtoh = (dtoh_fn)sim_symbol("cuMemcpyDtoH_v2");
        drv_setd32 = (setd32_fn)sim_symbol("cuMemsetD32_v2");
        if (!drv_htod || !drv_dtoh || !drv_setd32) return printf("error: no driver copies\n"), 2;
    }
    for (size_t i = 0; i < bufs.size(); i++)
        fill(bufs[i], (uint32_t)i + 100);

    float host_loss = 0, lr = 0.01f;
    std::vector<uint32_t> batch(A[0]->bytes / 4);
    uint64_t loss_hash = 1469598103934665603ull;
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < iters; it++) {
        for (size_t i = 0; i < batch.size(); i++)
            batch[i] = (uint32_t)(it * 7919 + i);
        to_device(A[0]->p, batch.data(), A[0]->bytes, "batch");
        mark();
        if (drv_setd32) {
            if (drv_setd32((unsigned long long)loss->p, 0, loss->bytes / 4))
                return printf("error: memset\n"), 2;
        } else {
            check(cudaMemset(loss->p, 0, loss->bytes), "memset");
        }
        mark();
        for (int l = 1; l <= L; l++) {
            mark();
            forward<<<blocks_for(A[l]->n()), 256>>>(W[l]->p, W[l]->n(), A[l - 1]->p, A[l - 1]->n(),
                                                    A[l]->p, A[l]->n());
            mark();
        }
        mark();
        loss_kernel<<<blocks_for(G[L % 2]->n()), 256>>>(A[L]->p, A[L]->n(), G[L % 2]->p,
                                                        G[L % 2]->n(), loss->p);
        mark();
        for (int l = L; l >= 1; l--) {
            mark();
            dgrad<<<blocks_for(G[0]->n()), 256>>>(W[l]->p, W[l]->n(), G[l % 2]->p,
                                                  G[(l - 1) % 2]->p, G[0]->n());
            mark();
            mark();
            wgrad<<<blocks_for(W[l]->n()), 256>>>(A[l - 1]->p, A[l - 1]->n(), G[l % 2]->p,
                                                  G[l % 2]->n(), dW[l]->p, dW[l]->n());
            mark();
        }
        for (int l = 1; l <= L; l++) {
            AdamState s = {M[l]->p, V[l]->p, lr};
            mark();
            adam<<<blocks_for(W[l]->n()), 256>>>(W[l]->p, dW[l]->p, s, W[l]->n());
            mark();
        }
        check(cudaGetLastError(), "launch");
        mark();
        check(cudaMemcpyAsync(&host_loss, loss->p, sizeof host_loss, cudaMemcpyDeviceToHost, 0),
              "loss");
        mark();
        check(cudaStreamSynchronize(0), "sync");
        loss_hash = fnv(loss_hash, &host_loss, sizeof host_loss);
    }
    check(cudaDeviceSynchronize(), "sync");
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("iterations_per_second %.2f\n", secs > 0 ? iters / secs : 0.0);

    stats_fn stats = (stats_fn)sim_symbol("simcuda_managed_stats");
    peaks_fn peaks = (peaks_fn)sim_symbol("simcuda_managed_peaks");
    struct simcuda_managed_stats st;
    struct simcuda_managed_peaks pk;
    if (stats && peaks)
        stats(&st), peaks(&pk);
    else
        stats = nullptr;

    uint64_t h = loss_hash;
    for (Buf *b : bufs) {
        std::vector<unsigned char> back(b->bytes);
        to_host(back.data(), b->p, b->bytes, "read back");
        h = fnv(h, back.data(), back.size());
    }
    printf("checksum %016llx\n", (unsigned long long)h);
    if (durations && write_durations(durations)) return 2;
    if (stats) {
        printf("faults %llu\n", (unsigned long long)st.proc_faults);
        printf("fetches %llu\n", (unsigned long long)pk.proc_fetches);
        printf("bytes_h2d %llu\n", (unsigned long long)st.proc_bytes_htod);
        printf("bytes_d2h %llu\n", (unsigned long long)st.proc_bytes_dtoh);
        printf("peak_device_resident %llu\n", (unsigned long long)pk.proc_peak_resident[0]);
    }
    for (Buf *b : bufs)
        check(cudaFree(b->p), "cudaFree");
    return 0;
}
