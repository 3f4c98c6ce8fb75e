"""Finding the CUDA Toolkit (scripts/find-cuda, which meson.build runs): a
wrapper script named nvcc earlier on PATH that execs the real nvcc does not
send the build to the wrapper's folder (nvcc itself is asked where its
toolkit is); a CUDA_HOME that does not exist or has no include/cuda.h is
passed over for the next place with a warning that names both (also in
`meson setup`'s output); and `meson setup` with only the wrapper on PATH
configures with the real toolkit. Also the build's other look at the
compiler: one whose LTO plugin cannot run still builds the library."""
import atexit
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402

SOURCE = os.environ["SOURCE_ROOT"]
FIND = os.path.join(SOURCE, "scripts", "find-cuda")
WORK = tempfile.mkdtemp(prefix="ipcshim-find-cuda-")
atexit.register(shutil.rmtree, WORK, True)


def real_toolkit():
    """The toolkit as found with the caller's environment, and its nvcc."""
    status, out, err = run([FIND])
    if status != 0:
        return None, None
    nvcc = os.path.join(out.strip(), "bin", "nvcc")
    return out.strip(), (nvcc if os.access(nvcc, os.X_OK) else None)


TOOLKIT, NVCC = real_toolkit()


def wrapper_path():
    """A folder holding only a wrapper nvcc, first on a PATH without the
    toolkit's bin folder."""
    wrap = os.path.join(WORK, "wrap", "bin")
    os.makedirs(wrap, exist_ok=True)
    with open(os.path.join(wrap, "nvcc"), "w") as f:
        f.write(f'#!/bin/sh\n# a site wrapper around the real compiler\nexec "{NVCC}" "$@"\n')
    os.chmod(os.path.join(wrap, "nvcc"), 0o755)
    rest = [d for d in os.environ["PATH"].split(os.pathsep) if d and not os.path.exists(os.path.join(d, "nvcc"))]
    return os.pathsep.join([wrap] + rest), wrap


def test_wrapper_nvcc_leads_to_the_real_toolkit():
    if not NVCC:
        return "no CUDA Toolkit with bin/nvcc here"
    path, wrap = wrapper_path()
    status, out, err = run([FIND, "--verbose"], env={"PATH": path, "CUDA_HOME": ""})
    eq(status, 0, err)
    eq(out.strip(), TOOLKIT, "the toolkit nvcc reports, not the wrapper's folder")
    check("nvcc --dryrun TOP" in err and os.path.join(wrap, "nvcc") in err, f"found by asking nvcc: {err}")
    check(os.path.isfile(os.path.join(out.strip(), "include", "cuda.h")), "include/cuda.h there")


def test_bad_cuda_home_is_named_and_passed_over():
    if not NVCC:
        return "no CUDA Toolkit with bin/nvcc here"
    path, _ = wrapper_path()
    bogus = os.path.join(WORK, "not-cuda")
    os.makedirs(bogus, exist_ok=True)
    status, out, err = run([FIND, "--verbose"], env={"PATH": path, "CUDA_HOME": bogus})
    eq(status, 0, err)
    eq(out.strip(), TOOLKIT, "the next place in order")
    check(f"CUDA_HOME: {bogus} has no include/cuda.h" in err, err)
    for home, why in ((bogus, "has no include/cuda.h"), (os.path.join(WORK, "no-such-dir"), "does not exist")):
        status, out, err = run([FIND], env={"PATH": path, "CUDA_HOME": home})
        eq(status, 0, err)
        eq(out.strip(), TOOLKIT, "the next place in order")
        check(err.startswith(f"find-cuda: warning: CUDA_HOME={home} {why}; using {TOOLKIT} instead, from ")
              and err.count("\n") == 1, f"one warning, without --verbose: {err}")


def test_meson_setup_warns_about_a_missing_cuda_home():
    if not NVCC:
        return "no CUDA Toolkit with bin/nvcc here"
    home = os.path.join(WORK, "no-such-cuda")
    status, out, err = run(["meson", "setup", os.path.join(WORK, "build-home"), SOURCE, "-Dtests=disabled",
                            "-Dsim=false"], cwd=WORK, timeout=120, env={"CUDA_HOME": home})
    eq(status, 0, f"meson setup: {out[-2000:]}{err[-2000:]}")
    # Which toolkit is used instead is find-cuda's own test (above); here,
    # that meson shows the warning that names the CUDA_HOME passed over.
    shown = [line for line in (out + err).splitlines() if "WARNING" in line or "CUDA" in line]
    check(f"WARNING: find-cuda: warning: CUDA_HOME={home} does not exist; using " in out + err,
          f"meson shows find-cuda's warning; its lines that name a warning or CUDA: {shown}")


def test_arguments():
    status, out, _ = run([FIND, "--help"])
    eq(status, 0, "--help")
    check("CUDA_HOME" in out and "/usr/local/cuda-*" in out and "#" not in out, out)
    status, _, err = run([FIND, "--bogus"])
    eq(status, 2, "unknown argument")
    check(err.startswith("find-cuda: unknown argument --bogus"), err)


def test_meson_setup_with_a_wrapper_nvcc_uses_the_real_toolkit():
    if not NVCC:
        return "no CUDA Toolkit with bin/nvcc here"
    path, _ = wrapper_path()
    build = os.path.join(WORK, "build")
    status, out, err = run(["meson", "setup", build, SOURCE, "-Dtests=disabled"], cwd=WORK, timeout=120,
                           env={"PATH": path, "CUDA_HOME": ""})
    eq(status, 0, f"meson setup: {out[-2000:]}{err[-2000:]}")
    found = re.search(r"CUDA Toolkit: (\S+)", out)
    check(found, out[-2000:])
    eq(found.group(1), TOOLKIT, "meson's toolkit")
    check(re.search(r"Program " + re.escape(os.path.join(TOOLKIT, "bin", "nvcc")) + r" found: YES", out),
          f"the toolkit's own nvcc, not the wrapper: {out[-2000:]}")


def test_a_compiler_that_cannot_link_with_lto_still_builds():
    """The GPU image's GCC compiled with -flto and failed every link ("could
    not run lto-wrapper"): the same failure, made by a wrapper around the
    compiler, gets a warning at setup and a library built without LTO."""
    if not NVCC:
        return "no CUDA Toolkit with bin/nvcc here"
    gcc = shutil.which("gcc")
    if not gcc:
        return "no gcc here"
    cc = os.path.join(WORK, "lto-broken-cc")
    with open(cc, "w") as f:
        f.write(f"""#!/bin/sh
lto=0 link=1
for a in "$@"; do case $a in -flto*) lto=1 ;; -fno-lto) lto=0 ;; -c|-E|-S) link=0 ;; esac; done
if [ $lto = 1 ] && [ $link = 1 ]; then
    echo "/usr/bin/ld: error: could not run lto-wrapper" >&2; exit 1
fi
exec "{gcc}" "$@"
""")
    os.chmod(cc, 0o755)
    build = os.path.join(WORK, "build-lto")
    status, out, err = run(["meson", "setup", build, SOURCE, "-Dtests=disabled", "-Dsim=false"], cwd=WORK,
                           timeout=120, env={"CC": cc})
    eq(status, 0, f"meson setup: {out[-2000:]}{err[-2000:]}")
    check("the compiler cannot link with -flto" in out + err, f"the warning: {out[-2000:]}")
    status, out, err = run(["ninja", "-C", build, "shim/libipcshim.so.0.1.0"], timeout=300)
    eq(status, 0, f"ninja: {out[-2000:]}{err[-2000:]}")


if __name__ == "__main__":
    run_all(globals())
