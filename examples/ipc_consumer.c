/* ipc-consumer: opens the blocks ipc-producer shares, reads them for a
 * while, and says in plain words what it read (on stderr).
 *
 *   ipc-producer [--seconds N] | ipc-consumer [--hold S]
 *
 * Each line "block ROUND BYTES VALUE HANDLE" on stdin is opened with
 * cudaIpcOpenMemHandle and read (the whole block, copied to the host) every
 * half second for S seconds (default 2.5): the producer frees each block one
 * second after sharing it, so the consumer goes on reading blocks whose
 * owner has freed them. Each read says whether every word is the value the
 * producer wrote; then the block is closed (cudaIpcCloseMemHandle). On
 * "end" it closes what it still holds and exits: status 0 when every read
 * was right, 1 when one was not (what a process reads from freed memory:
 * without ipcshim, on a real GPU undefined, on the simulated GPU poison).
 *
 * Plain C on the CUDA runtime: cc ipc_consumer.c -lcudart. */
#include <cuda_runtime.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_OPEN 64

struct opened {
    unsigned round;
    size_t bytes;
    uint32_t value;
    void *p;
    double since, last_read;
};

static struct opened open_blocks[MAX_OPEN];
static int nopen, wrong;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Reads the whole block and says what it found. */
static void read_block(struct opened *o, uint32_t *host)
{
    cudaError_t e = cudaMemcpy(host, o->p, o->bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        fprintf(stderr, "consumer (pid %d): block %u: the read failed: %s\n", (int)getpid(),
                o->round, cudaGetErrorString(e));
        wrong = 1;
        return;
    }
    size_t words = o->bytes / 4, bad = 0, first_bad = 0;
    for (size_t i = 0; i < words; i++)
        if (host[i] != o->value && !bad++) first_bad = i;
    if (!bad)
        fprintf(stderr,
                "consumer (pid %d): block %u: read %zu MiB, every word 0x%08x, as the "
                "producer wrote it\n",
                (int)getpid(), o->round, o->bytes >> 20, o->value);
    else
        fprintf(stderr,
                "consumer (pid %d): block %u: WRONG: %zu of %zu words are not 0x%08x (word %zu "
                "is 0x%08x): this memory was freed under us\n",
                (int)getpid(), o->round, bad, words, o->value, first_bad, host[first_bad]);
    wrong |= bad != 0;
    o->last_read = now_s();
}

static void close_block(int k)
{
    struct opened *o = &open_blocks[k];
    cudaError_t e = cudaIpcCloseMemHandle(o->p);
    fprintf(stderr, "consumer (pid %d): block %u: closed after %.1f s%s%s\n", (int)getpid(),
            o->round, now_s() - o->since, e == cudaSuccess ? "" : ": ",
            e == cudaSuccess ? "" : cudaGetErrorString(e));
    open_blocks[k] = open_blocks[--nopen];
}

/* One line from the producer; 1 on "end". */
static int take_line(const char *line)
{
    unsigned round, value;
    size_t bytes;
    char hex[2 * CUDA_IPC_HANDLE_SIZE + 1];
    if (!strncmp(line, "end", 3)) return 1;
    if (sscanf(line, "block %u %zu %x %128s", &round, &bytes, &value, hex) != 4 ||
        strlen(hex) != 2 * CUDA_IPC_HANDLE_SIZE || nopen == MAX_OPEN) {
        fprintf(stderr, "consumer (pid %d): ignored a line: %s\n", (int)getpid(), line);
        return 0;
    }
    cudaIpcMemHandle_t h;
    for (size_t i = 0; i < sizeof h.reserved; i++) {
        unsigned b;
        sscanf(hex + 2 * i, "%2x", &b);
        h.reserved[i] = (char)b;
    }
    struct opened *o = &open_blocks[nopen];
    cudaError_t e = cudaIpcOpenMemHandle(&o->p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        fprintf(stderr, "consumer (pid %d): block %u: cannot open it: %s\n", (int)getpid(), round,
                cudaGetErrorString(e));
        wrong = 1;
        return 0;
    }
    o->round = round, o->bytes = bytes, o->value = value, o->since = now_s(), o->last_read = 0;
    nopen++;
    fprintf(stderr, "consumer (pid %d): block %u: opened, %zu MiB at %p\n", (int)getpid(), round,
            bytes >> 20, o->p);
    return 0;
}

int main(int argc, char **argv)
{
    double hold = 2.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hold") && i + 1 < argc) {
            hold = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: ipc-producer | ipc-consumer [--hold SECONDS]\n");
            return 2;
        }
    }
    prctl(PR_SET_NAME, "ipc-consumer");
    uint32_t *host = NULL;
    size_t host_bytes = 0;
    char buf[4096];
    size_t have = 0;
    int ended = 0;
    while (!ended || nopen) {
        /* Lines by read(), not stdio: poll must see all that is unread. */
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        if (!ended && poll(&pfd, 1, 100) > 0) {
            ssize_t n = read(STDIN_FILENO, buf + have, sizeof buf - 1 - have);
            if (n <= 0) ended = 1; /* the producer is gone */
            have += n > 0 ? (size_t)n : 0;
            char *nl;
            while (!ended && (nl = memchr(buf, '\n', have))) {
                *nl = 0;
                ended = take_line(buf);
                have -= (size_t)(nl + 1 - buf);
                memmove(buf, nl + 1, have);
            }
            if (have == sizeof buf - 1) have = 0; /* a line too long: dropped */
        } else if (ended) {
            usleep(100000);
        }
        for (int k = nopen - 1; k >= 0; k--) {
            struct opened *o = &open_blocks[k];
            double t = now_s();
            if (o->bytes > host_bytes) {
                free(host);
                host = malloc(o->bytes);
                host_bytes = host ? o->bytes : 0;
                if (!host) return 1;
            }
            if (t - o->last_read >= 0.5) read_block(o, host);
            if (t - o->since >= hold || (ended && t - o->since >= 0.5)) close_block(k);
        }
    }
    free(host);
    fprintf(stderr, "consumer (pid %d): done: %s\n", (int)getpid(),
            wrong ? "some reads were WRONG" : "every read was right");
    return wrong;
}
