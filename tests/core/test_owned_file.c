/* Tests for owned_file (the log and trace files) and the log's escaping:
 * mode 0600 on creation, close-on-exec, no symlink or FIFO, appending to an
 * existing file, and never a line in a descriptor the program took over
 * (closed and reopened, or dup2'ed onto); and the line about a bad option
 * value, which names what the variable takes. */
#include "log.h"
#include "options.h"
#include "owned_file.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64], path[128], other[128];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/ipcshim-owned-XXXXXX");
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/log", dir);
    snprintf(other, sizeof other, "%s/program-output", dir);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(owned_file, .init = setup, .fini = teardown, .timeout = 10);

/* The whole of a small file. */
static const char *contents(const char *p)
{
    static char buf[4096];
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return buf;
}

Test(owned_file, created_private_and_close_on_exec)
{
    struct owned_file f = {.fd = -1};
    cr_assert_eq(owned_file_open(&f, path), 0);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    cr_expect(fcntl(f.fd, F_GETFD) & FD_CLOEXEC, "not close-on-exec");
    cr_expect(fcntl(f.fd, F_GETFL) & O_APPEND, "not appending");
    cr_expect_eq(owned_file_write(&f, "one\n", 4), 4);
    close(f.fd);
}

Test(owned_file, appends_to_an_existing_file_keeping_its_mode)
{
    FILE *pre = fopen(path, "w");
    fputs("before\n", pre);
    fclose(pre);
    chmod(path, 0640);
    struct owned_file f = {.fd = -1};
    cr_assert_eq(owned_file_open(&f, path), 0);
    cr_expect_eq(owned_file_write(&f, "after\n", 6), 6);
    cr_expect_str_eq(contents(path), "before\nafter\n");
    struct stat st;
    stat(path, &st);
    cr_expect_eq(st.st_mode & 0777, 0640);
    close(f.fd);
}

Test(owned_file, refuses_a_symlink_and_a_fifo)
{
    /* A link planted where the file should be: its target stays untouched. */
    FILE *t = fopen(other, "w");
    fclose(t);
    cr_assert_eq(symlink(other, path), 0);
    struct owned_file f = {.fd = -1};
    cr_expect_eq(owned_file_open(&f, path), -ELOOP);
    cr_expect_eq(f.fd, -1);
    cr_expect_str_eq(contents(other), "");
    /* A FIFO would block the open, or feed a reader: refused at once. */
    char fifo[160];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_eq(owned_file_open(&f, fifo), -ENXIO); /* no reader: O_NONBLOCK says so */
    int reader = open(fifo, O_RDONLY | O_NONBLOCK);
    cr_assert_geq(reader, 0);
    cr_expect_eq(owned_file_open(&f, fifo), -EINVAL); /* a reader: not a regular file */
    cr_expect_eq(f.fd, -1);
    close(reader);
}

/* A program that closes every descriptor from 3 up, then opens its own
 * output (getting our number back), or dup2s its file onto our number. */
static void program_takes_the_number(struct owned_file *f, bool by_dup2)
{
    int fd = f->fd, mine;
    if (by_dup2) {
        int tmp = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        cr_assert_eq(dup2(tmp, fd), fd);
        close(tmp);
        mine = fd;
    } else {
        close(fd);
        mine = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        cr_assert_eq(mine, fd, "the program did not get the number back (%d, %d)", mine, fd);
    }
    cr_expect_eq(owned_file_write(f, "shim line\n", 10), 10);
    cr_expect_neq(f->fd, mine, "still writing to the program's descriptor");
    cr_expect_str_eq(contents(other), "", "a shim line in the program's output");
    cr_expect_str_eq(contents(path), "first\nshim line\n", "the line did not reach the log");
    close(mine);
}

Test(owned_file, never_writes_to_a_number_the_program_reopened)
{
    struct owned_file f = {.fd = -1};
    cr_assert_eq(owned_file_open(&f, path), 0);
    owned_file_write(&f, "first\n", 6);
    program_takes_the_number(&f, false);
}

Test(owned_file, never_writes_to_a_number_the_program_dup2ed_onto)
{
    struct owned_file f = {.fd = -1};
    cr_assert_eq(owned_file_open(&f, path), 0);
    owned_file_write(&f, "first\n", 6);
    program_takes_the_number(&f, true);
}

Test(owned_file, a_stream_flushes_through_the_check)
{
    struct owned_file f = {.fd = -1};
    cr_assert_eq(owned_file_open(&f, path), 0);
    FILE *s = owned_file_stream(&f);
    cr_assert(s);
    fprintf(s, "first\n");
    fflush(s);
    fprintf(s, "shim line\n"); /* buffered while the program takes the number */
    int fd = f.fd;
    close(fd);
    int mine = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_eq(mine, fd);
    fflush(s);
    cr_expect_str_eq(contents(other), "");
    cr_expect_str_eq(contents(path), "first\nshim line\n");
    close(mine);
}

Test(owned_file, log_lines_carry_no_control_character)
{
    log_configure(LOG_WARN, path);
    log_msg(LOG_WARN, "value=%s", "1s\nipcshim[1]: error: forged\r\x1b[2J");
    const char *c = contents(path);
    cr_expect(strstr(c, "value=1s\\x0aipcshim[1]: error: forged\\x0d\\x1b[2J\n"), "%s", c);
    cr_expect_eq(strchr(c, '\n'), c + strlen(c) - 1, "more than one line: %s", c);
}

Test(owned_file, a_bad_value_names_what_is_valid_and_what_the_default_means)
{
    setenv("IPCSHIM_LOG_FILE", path, 1);
    setenv("IPCSHIM_LOG", "verbose", 1);
    setenv("IPCSHIM_DEVICE_BUDGET", "12QB", 1);
    options_reload();
    const char *c = contents(path);
    cr_expect(strstr(c, "error: IPCSHIM_LOG=verbose is not valid: expected one of "
                        "error|warn|info|debug; using the default warn (log level)\n"),
              "%s", c);
    cr_expect(strstr(c, "error: IPCSHIM_DEVICE_BUDGET=12QB is not valid: expected bytes, or a "
                        "number with a K, M, G or T suffix; using the default 0 (host swap: "),
              "%s", c);
    cr_expect(strstr(c, "0 = off)\n"), "%s", c);
    cr_expect_eq(options_get()->device_budget, 0);
}

/* Issue 33: a bad value is said once per domain, not by every process of
 * a job: while the first process that said it lives, another process of
 * the same user and domain with the same bad values stays quiet; another
 * domain, or other bad values, are said again. */
static int lines_in(const char *p, const char *what)
{
    int n = 0;
    char line[1024];
    FILE *f = fopen(p, "r");
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    if (f) fclose(f);
    return n;
}

/* A child that reads the options with env and exits (or, given hold_fd,
 * says so there and waits for the other end, drop_fd, to close). */
static pid_t child_reading_options(const char *domain, const char *log_value, int hold_fd,
                                   int drop_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (drop_fd >= 0) close(drop_fd);
        setenv("IPCSHIM_LOG_FILE", path, 1);
        setenv("IPCSHIM_DOMAIN", domain, 1);
        setenv("IPCSHIM_LOG", log_value, 1);
        options_reload();
        if (hold_fd >= 0) {
            char c;
            if (write(hold_fd, "r", 1) != 1) _exit(3);
            while (read(hold_fd, &c, 1) > 0) {
            }
        }
        _exit(0);
    }
    return pid;
}

Test(owned_file, a_bad_value_is_said_once_per_domain)
{
    char domain[64], other[64];
    snprintf(domain, sizeof domain, "once-%d", (int)getpid());
    snprintf(other, sizeof other, "once-other-%d", (int)getpid());
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t first = child_reading_options(domain, "verbose", sv[1], sv[0]);
    close(sv[1]);
    char c;
    cr_assert_eq(read(sv[0], &c, 1), 1, "the first child did not read its options");
    int st;
    for (int i = 0; i < 3; i++) { /* three more processes of the job */
        waitpid(child_reading_options(domain, "verbose", -1, -1), &st, 0);
        cr_assert_eq(st, 0);
    }
    cr_expect_eq(lines_in(path, "IPCSHIM_LOG=verbose is not valid"), 1,
                 "said more than once in one domain:\n%s", contents(path));
    waitpid(child_reading_options(other, "verbose", -1, -1), &st, 0);
    waitpid(child_reading_options(domain, "loud", -1, -1), &st, 0);
    cr_expect_eq(lines_in(path, "IPCSHIM_LOG=verbose is not valid"), 2, "%s", contents(path));
    cr_expect_eq(lines_in(path, "IPCSHIM_LOG=loud is not valid"), 1, "%s", contents(path));
    close(sv[0]); /* the first one goes: the next process says it again */
    waitpid(first, &st, 0);
    waitpid(child_reading_options(domain, "verbose", -1, -1), &st, 0);
    cr_expect_eq(lines_in(path, "IPCSHIM_LOG=verbose is not valid"), 3, "%s", contents(path));
}
