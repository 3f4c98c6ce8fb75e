/* crash.h: running the crash tests' CUDA programs on the simulated machine,
 * under the shim or not, as children the test can talk to, kill and wait
 * for.
 *
 * Each test gets its own simulated machine and registry domain,
 * "crash-<test>-<pid>", and removes both when it ends (crash_cleanup). The
 * build folders come from the environment meson sets: CRASH_BIN_DIR,
 * IPCSHIM_LIB, SIMCUDA_DIR. Children inherit this process's environment
 * minus LD_PRELOAD, LD_LIBRARY_PATH, SIMCUDA_* and IPCSHIM_*, then get the
 * test's entries (which win), then the machine, domain and preload. */
#ifndef CRASH_H
#define CRASH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

struct child {
    pid_t pid;
    int in, out; /* its stdin (ours to write), its stdout (ours to read); -1 closed */
    int status;  /* after child_wait: exit status, or 128 + signal */
    size_t len;
    char buf[65536]; /* what it printed and was not consumed by child_line */
};

/* This test's machine/domain name ("crash-<test>-<pid>"); call from .init. */
void crash_setup(const char *test_name);
const char *crash_domain(void);

/* Remove this test's shared-memory objects (machine, devices, registry). */
void crash_cleanup(void);

/* "/dev/shm/ipcshim-<uid>-<domain>" of this test. */
const char *crash_segment_path(void);

/* Start CRASH_BIN_DIR/prog (or prog itself if it holds a '/'). 0 or -errno. */
int child_spawn(struct child *c, const char *prog, bool shim, const char *const *env,
                const char *const *args);

/* Next line of its output into line (without the newline): 1, 0 on
 * timeout, -1 at end of output. */
int child_line(struct child *c, char *line, size_t n, int timeout_ms);

/* Send one line to its stdin (false if it is gone). */
bool child_send(struct child *c, const char *line);
void child_close_stdin(struct child *c);

/* Wait for it (at most timeout_ms, then SIGKILL), close our ends, keep
 * what it printed in buf. Returns status. */
int child_wait(struct child *c, int timeout_ms);

/* Run to completion with stdin closed: output in c->buf, status returned. */
int child_run(struct child *c, const char *prog, bool shim, const char *const *env,
              const char *const *args, int timeout_ms);

/* What this test's registry holds now (opened as a view: no holder slot
 * taken). pid > 0: holders/leases counted only for that pid. -1 if it
 * cannot be opened. */
struct reg_counts {
    int holders, blocks, leases;
    unsigned repairs;
};
int crash_registry_counts(struct reg_counts *out, int pid);

/* Lines of buf that contain needle. */
int count_lines(const char *buf, const char *needle);

/* Read a whole (small) file into a malloc'd string; NULL if absent. */
char *read_file(const char *path);

#endif
