"""test_preloads: the shim beside what operators preload on every process of
a node -- allocators (jemalloc, tcmalloc, mimalloc), libfaketime, eatmydata,
sanitizer runtimes -- in both orders, with a CUDA pair on the simulator, a
program that calls every libc-level function the shim exports, a program
that makes no CUDA call (env), bash -c, and a Python interpreter that reaches
CUDA through ctypes. Each run must start and finish as it does with the same
preload and no shim: same exit status, same output.

Trap: a preload hang is a hang of every dynamically linked process, timeout
and env included, so this runner (not preloaded) runs each program itself,
in its own session, under a hard limit, and kills the whole session when it
is reached.

It also checks that every libc-level name in shim/exports.map is called by
libc-doors (tests/e2e/progs/libc_doors.c): export a new one and this fails
until the probe calls it."""
import glob
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["SOURCE_ROOT"], "tests", "tools"))
from tap import Failure, check, eq, run_all  # noqa: E402

SHIM = os.environ["IPCSHIM_LIB"]
BIN = os.environ["E2E_BIN_DIR"]
SIM = os.environ["SIMCUDA_DIR"]
LIMIT = 30  # seconds; a run that takes longer has hung
# The names libc_doors.c calls, one "door NAME:" line each.
DOORS = {"dlsym", "syscall", "pidfd_open", "pidfd_getfd", "_exit", "_Exit"}


def library(name, *subdirs):
    """The path of a shared library, or None when it is not installed."""
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        for sub in subdirs or ("",):
            hits = glob.glob(os.path.join(d, sub, name))
            if hits:
                return hits[0]
    return None


# name: (library file, Debian package, environment both sides get)
PRELOADS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2", {}),
    "tcmalloc": ("libtcmalloc.so.4", "libgoogle-perftools4", {}),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0", {}),
    "faketime": ("libfaketime.so.1", "libfaketime", {"FAKETIME": "-400d"}),
    "eatmydata": ("libeatmydata.so.1", "eatmydata", {}),
    # A sanitizer runtime preloaded into programs not built with it; leak
    # reports of bash and Python are theirs, not the shim's.
    "asan": ("libasan.so.8", "libasan8", {"ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}),
    "ubsan": ("libubsan.so.1", "libubsan1", {}),
}

PY_CUDA = (
    "import ctypes\n"
    "rt = ctypes.CDLL('libcudart.so.13', mode=ctypes.RTLD_LOCAL)\n"
    "p = ctypes.c_void_p()\n"
    "print('malloc', rt.cudaMalloc(ctypes.byref(p), 1 << 20), 'free', rt.cudaFree(p))\n"
)

# name: (argv, what of the output must match): "all" compares stdout whole;
# "ok-lines" compares the lines that say what consumers read.
PROGRAMS = {
    "cuda-pair": ([os.path.join(BIN, "pair-runtime"), "--consumers", "2", "--free", "after-close"], "ok-lines"),
    "libc-doors": ([os.path.join(BIN, "libc-doors")], "all"),
    "no-cuda": (["env", "LC_ALL=C", "sh", "-c", "echo $((6 * 7))"], "all"),
    "bash": (["bash", "-c", "x=$(seq 3 | tr '\\n' +); echo ${x}0; date +%Y >/dev/null"], "all"),
    "python": ([sys.executable, "-c", PY_CUDA], "all"),
}


def run_limited(argv, env):
    """(status, stdout, stderr) of argv, or a Failure when it outlives LIMIT
    (its whole session is killed first)."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise Failure(f"hung: {' '.join(argv)} did not finish in {LIMIT} s (LD_PRELOAD={env.get('LD_PRELOAD')})")
    return p.returncode, out, err


def environment(preload, extra, tag):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "IPCSHIM_", "SIMCUDA_"))}
    env.update(extra)
    env["LD_LIBRARY_PATH"] = SIM
    env["SIMCUDA_MACHINE"] = f"preloads-{os.getpid()}-{tag}"
    env["IPCSHIM_DOMAIN"] = f"preloads-{os.getpid()}-{tag}"
    env["LD_PRELOAD"] = preload
    return env


def comparable(out, how):
    if how == "all":
        return out
    return "\n".join(sorted(l for l in out.splitlines() if l.startswith("consumer") and " ok" in l))


def sanitized():
    """True when this build's programs carry AddressSanitizer (scripts/test's
    second run): they crash beside another preloaded allocator or runtime
    with or without the shim, so there is nothing to compare."""
    needed = subprocess.run(["readelf", "-d", SHIM], capture_output=True, text=True).stdout
    return "libasan" in needed


def check_preload(name, order):
    lib, package, extra = PRELOADS[name]
    if sanitized():
        return "the programs are built with AddressSanitizer here; checked in the plain build"
    path = library(lib, "faketime") if name == "faketime" else library(lib)
    if not path:
        return f"{lib} is not installed (Debian's {package}; scripts/test --install-deps installs it)"
    both = f"{path}:{SHIM}" if order == "before" else f"{SHIM}:{path}"
    for prog, (argv, how) in PROGRAMS.items():
        tag = f"{name}-{order}-{prog}"
        want = run_limited(argv, environment(path, extra, tag + "-alone"))
        got = run_limited(argv, environment(both, extra, tag))
        eq(got[0], want[0], f"{prog} exit status with LD_PRELOAD={both} (stderr: {got[2][-500:]})")
        eq(comparable(got[1], how), comparable(want[1], how), f"{prog} output with LD_PRELOAD={both}")
        if how == "ok-lines":
            check(comparable(got[1], how).count("ok") == 2, f"{prog}: both consumers read: {got[1]}")
    # And the shim still protects beside it: an exporter's free while the
    # consumers read (which without the shim hands them poison).
    argv = [os.path.join(BIN, "pair-runtime"), "--consumers", "2", "--free", "while-reading"]
    status, out, err = run_limited(argv, environment(both, extra, f"{name}-{order}-protected"))
    eq(status, 0, f"a free while reading under LD_PRELOAD={both} (output: {out} {err[-500:]})")
    return None


def test_every_libc_export_is_a_door_of_the_probe():
    """shim/exports.map names each libc-level function the shim exports;
    every one must be exercised here, or a new one would go untested."""
    text = open(os.path.join(os.environ["SOURCE_ROOT"], "shim", "exports.map")).read()
    names = set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*;", text, re.M))
    libc_level = {n for n in names if not n.startswith(("cu", "__cuda", "ipcshim_"))}
    eq(libc_level - DOORS, set(), "exported libc-level names libc_doors.c does not call")
    out = subprocess.run([os.path.join(BIN, "libc-doors")], capture_output=True, text=True, timeout=LIMIT).stdout
    called = set(re.findall(r"^door ([A-Za-z_]+):", out, re.M))
    eq(DOORS - called, set(), "doors libc-doors did not report")
    exported = subprocess.run(["nm", "-D", "--defined-only", SHIM], capture_output=True, text=True).stdout.split()
    unexpected = {n for n in exported if re.fullmatch(r"[A-Za-z_]\w*", n)} - DOORS
    unexpected = {n for n in unexpected if not n.startswith(("cu", "__cuda", "ipcshim_"))}
    # nm prints the symbol type letters and versions too; keep only names.
    unexpected -= {"T", "W", "D", "B", "R", "A", "V", "i"}
    eq(unexpected, set(), "libc-level exports of libipcshim.so that this test does not cover")


def make_case(name, order):
    def case():
        return check_preload(name, order)
    case.__name__ = f"test_{name}_{order}_the_shim"
    return case


for _name in PRELOADS:
    for _order in ("before", "after"):
        _case = make_case(_name, _order)
        globals()[_case.__name__] = _case

if __name__ == "__main__":
    run_all(globals())
