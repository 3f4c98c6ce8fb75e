/* test_exports: libipcshim.so exports only what it interposes (CUDA, dlsym,
 * pidfd_open / pidfd_getfd / syscall for the fd hand-off, _exit / _Exit)
 * and its public
 * API, and is never linked against libcuda or libcudart. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(exports, only_interposed_symbols_and_public_api)
{
    char cmd[2048], line[512];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' | awk '{print $3}'",
             getenv("IPCSHIM_LIB"));
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    int count = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (!*line) continue;
        count++;
        bool ok = !strncmp(line, "cu", 2) || !strncmp(line, "__cuda", 6) ||
                  !strncmp(line, "ipcshim_", 8) || !strcmp(line, "dlsym") ||
                  /* the fd hand-off (shim/pidfd.c) */
                  !strcmp(line, "pidfd_open") || !strcmp(line, "pidfd_getfd") ||
                  !strcmp(line, "syscall") ||
                  /* releasing the holder at the program's _exit (shim/init.c) */
                  !strcmp(line, "_exit") || !strcmp(line, "_Exit");
        cr_expect(ok, "unexpected export %s", line);
    }
    cr_expect_eq(pclose(p), 0);
    cr_expect_gt(count, 10, "too few exports (%d)", count);
}

Test(exports, not_linked_to_cuda)
{
    char cmd[2048], line[512];
    snprintf(cmd, sizeof cmd, "readelf -d '%s' | grep NEEDED", getenv("IPCSHIM_LIB"));
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    while (fgets(line, sizeof line, p)) {
        cr_expect(!strstr(line, "libcuda"), "linked to the driver: %s", line);
        cr_expect(!strstr(line, "libcudart"), "linked to the runtime: %s", line);
    }
    pclose(p);
}
