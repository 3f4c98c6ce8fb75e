/* standalone: a driver for fuzz_registry.c where clang's libFuzzer is not
 * available. Replays every file named (or found in a named folder), then
 * runs random mutations of them -- bit flips, byte and word overwrites with
 * interesting values (0, 0xff.., REG_NONE, small indices), truncation,
 * extension, splices of two inputs -- for -runs=N inputs or
 * -max_total_time=S seconds, whichever comes first. Not coverage-guided; it
 * is a smoke fuzzer. A crash (or an abort() from the target's consistency
 * check) leaves the input in ./crash-standalone and fails the run.
 *
 *   fuzz-registry [-runs=N] [-max_total_time=S] [-seed=N] CORPUS...   */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
    uint8_t *data;
    size_t size;
};

static struct input *inputs;
static size_t ninputs;
static const uint8_t *current;
static size_t current_size;

static void add_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(n > 0 ? (size_t)n : 1);
    if (n > 0 && fread(d, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    inputs = realloc(inputs, (ninputs + 1) * sizeof *inputs);
    inputs[ninputs++] = (struct input){d, n > 0 ? (size_t)n : 0};
}

static void add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st)) return;
    if (!S_ISDIR(st.st_mode)) return add_file(path);
    DIR *d = opendir(path);
    struct dirent *e;
    char p[4096];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", path, e->d_name), add_file(p);
    if (d) closedir(d);
}

static void on_crash(int sig)
{
    FILE *f = fopen("crash-standalone", "wb");
    if (f) fwrite(current, 1, current_size, f), fclose(f);
    fprintf(stderr, "standalone: signal %d; input saved as ./crash-standalone (%zu bytes)\n", sig,
            current_size);
    signal(sig, SIG_DFL);
    raise(sig);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t mutate(uint8_t *d, size_t n, size_t cap)
{
    static const uint32_t interesting[] = {0,  1,   2,          3,          4,          63,
                                           64, 255, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff};
    int steps = 1 + (int)(rnd() % 8);
    for (int s = 0; s < steps; s++) {
        switch (rnd() % 7) {
        case 0:
            if (n) d[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 1:
            if (n) d[rnd() % n] = (uint8_t)rnd();
            break;
        case 2:
            if (n >= 4) {
                uint32_t v = interesting[rnd() % (sizeof interesting / sizeof *interesting)];
                memcpy(d + (rnd() % (n - 3)) / 4 * 4, &v, 4);
            }
            break;
        case 3:
            if (n > 1) n = 1 + rnd() % n;
            break; /* truncate */
        case 4: {
            size_t add = rnd() % 256;
            if (n + add <= cap) memset(d + n, (int)(rnd() & 0xff), add), n += add;
        } break;
        case 5: { /* splice another input in */
            struct input *o = &inputs[rnd() % ninputs];
            if (o->size && n) {
                size_t at = rnd() % n, len = rnd() % o->size;
                if (at + len > n) len = n - at;
                memcpy(d + at, o->data + rnd() % (o->size - len + 1), len);
            }
        } break;
        case 6:
            if (n) d[0] = (uint8_t)rnd();
            break; /* the flags byte */
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    long runs = 100000, max_time = 0;
    uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "-runs=", 6))
            runs = atol(argv[i] + 6);
        else if (!strncmp(argv[i], "-max_total_time=", 16))
            max_time = atol(argv[i] + 16);
        else if (!strncmp(argv[i], "-seed=", 6))
            seed = strtoull(argv[i] + 6, NULL, 10);
        else if (argv[i][0] != '-')
            add_path(argv[i]);
    }
    rng_state = seed | 1;
    signal(SIGSEGV, on_crash), signal(SIGBUS, on_crash), signal(SIGABRT, on_crash),
        signal(SIGFPE, on_crash);
    fprintf(stderr, "standalone: %zu corpus inputs, seed %llu\n", ninputs,
            (unsigned long long)seed);
    for (size_t i = 0; i < ninputs; i++) {
        current = inputs[i].data, current_size = inputs[i].size;
        LLVMFuzzerTestOneInput(current, current_size);
    }
    if (!ninputs) add_file("/dev/null"), inputs[0].size = 0;
    time_t end = max_time ? time(NULL) + max_time : 0;
    size_t cap = 1 << 20;
    uint8_t *buf = malloc(cap);
    long done = 0;
    for (; done < runs && (!end || time(NULL) < end); done++) {
        struct input *in = &inputs[rnd() % ninputs];
        size_t n = in->size < cap ? in->size : cap;
        memcpy(buf, in->data, n);
        n = mutate(buf, n, cap);
        current = buf, current_size = n;
        LLVMFuzzerTestOneInput(buf, n);
    }
    fprintf(stderr, "standalone: stat::number_of_executed_units: %ld\nstandalone: done, no crash\n",
            done + (long)ninputs);
    return 0;
}
