/* owned_file: a file the shim writes for itself (the log, the swap trace),
 * opened so that it can never be turned against the program or a user.
 *
 * Opening: O_CLOEXEC (no child inherits it), O_NOFOLLOW (the last name is
 * never a symlink), a new file is created O_EXCL with mode 0600, an
 * existing one is appended to and must be a regular file. Writing: each
 * write first checks that the descriptor still names the file opened
 * (device + inode); a program that closed it (closefrom) and got the number
 * back for a file of its own never receives a shim line. A descriptor that
 * is no longer ours is opened again by path, once per loss, with the same
 * rules. In secure execution nobody calls owned_file_open: every path here
 * comes from the environment (options.c obeys none there). */
#ifndef OWNED_FILE_H
#define OWNED_FILE_H

#include <stdio.h>
#include <sys/types.h>

struct owned_file {
    int fd; /* -1: not open */
    dev_t dev;
    ino_t ino;
    const char *path; /* kept for re-opening; must outlive the file */
};

/* Opens (creating if needed) path for appending, by the rules above.
 * 0, or a negative errno (-EINVAL for a file that is not regular). */
int owned_file_open(struct owned_file *f, const char *path);

/* Writes len bytes with one write(2) to the file, never to a descriptor
 * that is not (or no longer) it. Returns what write(2) returned, or -1 with
 * errno EBADF when the file is lost and cannot be opened again. Thread-safe
 * against other writers of the same struct. */
ssize_t owned_file_write(struct owned_file *f, const void *buf, size_t len);

/* A stdio stream whose flushes go through owned_file_write (fopencookie);
 * fclose does not close the owned file's descriptor. NULL when out of
 * memory. */
FILE *owned_file_stream(struct owned_file *f);

#endif
