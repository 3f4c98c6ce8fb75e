"""python -m ipcshim [--sim] [--] CMD [ARGS...]: the same as ipcshim-run (the
wheel's `ipcshim-run` command is this entry point): it runs the launcher
script installed inside the package, which preloads the library next to it.
Every argument, --help and --version included, goes to the launcher."""
import os
import shutil
import sys

from . import launcher


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    script = launcher()
    if script is None:
        # Not a wheel install (e.g. the source tree on PYTHONPATH): the
        # ipcshim-run on PATH, if any.
        script = shutil.which("ipcshim-run")
    if script is None:
        sys.stderr.write("ipcshim: no ipcshim-run next to this package or on PATH\n")
        return 1
    bash = shutil.which("bash") or "/bin/bash"
    try:
        os.execv(bash, [bash, script, *args])
    except OSError as e:
        sys.stderr.write(f"ipcshim: cannot run {script}: {e.strerror}\n")
        return 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
