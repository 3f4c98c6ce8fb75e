// simple_ipc.cu: the call sequence of NVIDIA's simpleIPC sample
// (cuda-samples, Samples/0_Introduction/simpleIPC), built with
// `nvcc -cudart shared`, for the simulator: the parent checks the devices
// (cudaGetDeviceCount, cudaGetDeviceProperties, cudaDeviceCanAccessPeer),
// allocates one buffer, creates an interprocess event
// (cudaEventDisableTiming | cudaEventInterprocess) and exports both; it
// fills the buffer (with cudaMemcpy: the simulator records kernels but does
// not run them, so the sample's kernel is launched for its calls only) and
// records the event. Each child (this binary again, as the sample spawns
// its workers) opens both handles, waits on the event with
// cudaStreamWaitEvent and cudaEventSynchronize, launches the kernel, reads
// its slice with cudaMemcpy, checks it and closes everything.
//
// Output: "devices: N", "can-access-peer: 0|1", "child K: ok|wrong|error
// WHAT CODE". Exit status 0 when every child read what the parent wrote.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hex.h"

extern char **environ;

#define PROCS 2
#define N 4096 // ints per child

__global__ void simpleKernel(int *dst, int *src, int num)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < num) dst[idx] = src[idx] / 2;
}

static int check(const char *what, cudaError_t e, int k)
{
    if (e == cudaSuccess) return 0;
    printf("child %d: error %s %d\n", k, what, (int)e);
    fflush(stdout);
    return 1;
}

// argv: --child K MEMHEX EVTHEX
static int child(int k, const char *memhex, const char *evthex)
{
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    if (from_hex(memhex, (unsigned char *)&mh, sizeof mh) ||
        from_hex(evthex, (unsigned char *)&eh, sizeof eh))
        return 2;
    int *ptr = NULL;
    cudaEvent_t event;
    if (check("set-device", cudaSetDevice(0), k) ||
        check("open-mem", cudaIpcOpenMemHandle((void **)&ptr, mh, cudaIpcMemLazyEnablePeerAccess),
              k) ||
        check("open-event", cudaIpcOpenEventHandle(&event, eh), k) ||
        check("wait-event", cudaStreamWaitEvent(0, event, 0), k) ||
        check("sync-event", cudaEventSynchronize(event), k))
        return 2;
    simpleKernel<<<N / 256, 256>>>(ptr + k * N, ptr + k * N, N);
    if (check("launch", cudaGetLastError(), k)) return 2;
    static int host[N];
    if (check("memcpy", cudaMemcpy(host, ptr + k * N, sizeof host, cudaMemcpyDeviceToHost), k))
        return 2;
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= host[i] == (k + 1) * 100000 + i;
    if (check("close-mem", cudaIpcCloseMemHandle(ptr), k) ||
        check("destroy-event", cudaEventDestroy(event), k))
        return 2;
    printf("child %d: %s\n", k, ok ? "ok" : "wrong");
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5 && !strcmp(argv[1], "--child")) return child(atoi(argv[2]), argv[3], argv[4]);

    int devices = 0, can = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) return 2;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 2;
    printf("devices: %d\n", devices);
    if (devices > 1 && cudaDeviceCanAccessPeer(&can, 0, 1) != cudaSuccess) return 2;
    printf("can-access-peer: %d\n", can);

    int *ptr = NULL;
    cudaEvent_t event;
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    if (cudaSetDevice(0) != cudaSuccess ||
        cudaMalloc((void **)&ptr, PROCS * N * sizeof(int)) != cudaSuccess ||
        cudaIpcGetMemHandle(&mh, ptr) != cudaSuccess ||
        cudaEventCreate(&event, cudaEventDisableTiming | cudaEventInterprocess) != cudaSuccess ||
        cudaIpcGetEventHandle(&eh, event) != cudaSuccess)
        return 2;
    static int host[PROCS * N];
    for (int k = 0; k < PROCS; k++)
        for (int i = 0; i < N; i++)
            host[k * N + i] = (k + 1) * 100000 + i;
    if (cudaMemcpy(ptr, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return 2;
    simpleKernel<<<PROCS * N / 256, 256>>>(ptr, ptr, PROCS * N);
    if (cudaGetLastError() != cudaSuccess || cudaEventRecord(event, 0) != cudaSuccess) return 2;

    char memhex[2 * sizeof mh + 1], evthex[2 * sizeof eh + 1], kbuf[16];
    to_hex((const unsigned char *)&mh, sizeof mh, memhex);
    to_hex((const unsigned char *)&eh, sizeof eh, evthex);
    pid_t pids[PROCS];
    for (int k = 0; k < PROCS; k++) {
        snprintf(kbuf, sizeof kbuf, "%d", k);
        char *args[] = {argv[0], (char *)"--child", kbuf, memhex, evthex, NULL};
        if (posix_spawn(&pids[k], "/proc/self/exe", NULL, NULL, args, environ)) return 2;
    }
    int status = 0;
    for (int k = 0; k < PROCS; k++) {
        int ws;
        waitpid(pids[k], &ws, 0);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) status = 1;
    }
    if (cudaEventDestroy(event) != cudaSuccess || cudaFree(ptr) != cudaSuccess) return 2;
    return status;
}
