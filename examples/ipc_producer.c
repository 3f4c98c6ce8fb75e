/* ipc-producer: shares device memory with ipc-consumer through CUDA IPC,
 * for as long as asked, and says in plain words what it does (on stderr).
 *
 *   ipc-producer [--seconds N] [--mib M] | ipc-consumer [--hold S]
 *
 * Once a second it allocates a block of M MiB (default 4), fills every
 * 32-bit word with one value (round 1: 0x01010101, round 2: 0x02020202,
 * ...), exports it with cudaIpcGetMemHandle and writes the handle on stdout
 * (one line: "block ROUND BYTES VALUE HANDLE-IN-HEX"); then it frees the
 * block of the round before, which the consumer may well still be reading.
 * Without ipcshim that free releases memory another process uses; under
 * the shim it is deferred until the consumer closes the block. After N
 * seconds (default 20) it frees the last block, writes "end" and exits.
 *
 * Plain C on the CUDA runtime: cc ipc_producer.c -lcudart. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "producer (pid %d): %s failed: %s\n", (int)getpid(), what,
            cudaGetErrorString(e));
    return 1;
}

int main(int argc, char **argv)
{
    double seconds = 20;
    size_t mib = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = (size_t)atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: ipc-producer [--seconds N] [--mib M] | ipc-consumer\n");
            return 2;
        }
    }
    if (mib < 1) mib = 1;
    prctl(PR_SET_NAME, "ipc-producer"); /* the name ipcshim-stat shows, however it was started */
    size_t bytes = mib << 20;
    void *previous = NULL;
    unsigned previous_round = 0;
    double start = now_s();
    for (unsigned round = 1; now_s() - start < seconds; round++) {
        void *p;
        cudaIpcMemHandle_t h;
        uint32_t value = 0x01010101u * (round % 255 ? round % 255 : 255);
        if (check(cudaMalloc(&p, bytes), "cudaMalloc") ||
            check(cudaMemset(p, (int)(value & 0xff), bytes), "cudaMemset") ||
            check(cudaDeviceSynchronize(), "cudaDeviceSynchronize") ||
            check(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle"))
            return 1;
        char hex[2 * sizeof h.reserved + 1];
        for (size_t i = 0; i < sizeof h.reserved; i++)
            sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
        printf("block %u %zu 0x%08x %s\n", round, bytes, value, hex);
        fflush(stdout);
        fprintf(stderr,
                "producer (pid %d): block %u: %zu MiB at %p, every word 0x%08x, shared "
                "(its IPC handle sent to the consumer)\n",
                (int)getpid(), round, mib, p, value);
        if (previous) {
            fprintf(stderr,
                    "producer (pid %d): block %u: freed with cudaFree, while the consumer "
                    "may still read it\n",
                    (int)getpid(), previous_round);
            if (check(cudaFree(previous), "cudaFree")) return 1;
        }
        previous = p;
        previous_round = round;
        double next = start + round;
        while (now_s() < next && now_s() - start < seconds)
            usleep(20000);
    }
    printf("end\n");
    fflush(stdout);
    if (previous) {
        fprintf(stderr, "producer (pid %d): block %u: freed with cudaFree (the last one)\n",
                (int)getpid(), previous_round);
        if (check(cudaFree(previous), "cudaFree")) return 1;
    }
    fprintf(stderr, "producer (pid %d): done after %.0f s\n", (int)getpid(), now_s() - start);
    return 0;
}
