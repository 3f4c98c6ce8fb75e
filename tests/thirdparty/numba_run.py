#!/usr/bin/env python3
"""numba_run.py: the thirdparty tests that drive numba (TAP on stdout).

  numba_run.py ipc          numba's own CUDA IPC tests on the simulator
  numba_run.py ipc-shim     the same with the shim preloaded
  numba_run.py early-free   numba_early_free.py without, then with, the shim

Environment (from tests/thirdparty/meson.build): SIMCUDA_DIR (the simulated
libcuda.so.1), IPCSHIM_LIB (the shim), CUDA_HOME (the toolkit).

numba comes from Debian's python3-numba, which installs for the system
interpreter (/usr/bin/python3), not necessarily the python3 that runs this
script: the first of this interpreter, /usr/bin/python3 and python3 on PATH
that can import numba.cuda runs the cases. Without one, every test is one
TAP skip that says so.

Each run gets a simulated machine and a shim domain of its own,
thirdparty-<mode>-<pid>, removed from /dev/shm afterwards (the naming of
tests/e2e/run.c). numba finds the simulator through NUMBA_CUDA_DRIVER;
numba_compat/ (PYTHONPATH) adapts numba 0.56 to CUDA 13's cuCtxGetDevice_v2
and cuCtxSynchronize_v2 (see its sitecustomize.py). Children started by
multiprocessing inherit all of it.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
IPC_MODULE = "numba.cuda.tests.cudapy.test_ipc"
POISON_WORD = 0xDEADBEEF
RUN_TIMEOUT = 150


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def line(self, ok, text, directive=""):
        self.n += 1
        self.failed += not ok
        text = text.replace("#", "")
        print("%s %d - %s%s" % ("ok" if ok else "not ok", self.n, text,
                                " # " + directive if directive else ""), flush=True)

    @staticmethod
    def diag(text):
        for ln in str(text).rstrip().splitlines():
            print("# " + ln, flush=True)

    def done(self):
        print("1..%d" % self.n, flush=True)
        return 0  # meson reads the verdict from the TAP lines


def find_numba_python():
    """(interpreter, numba version) or (None, why not)."""
    tried = []
    for py in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if not py or py in tried or not os.path.exists(py):
            continue
        tried.append(py)
        r = subprocess.run([py, "-c", "import numba, numba.cuda, importlib; "
                            "importlib.util.find_spec('%s') or exit(3); print(numba.__version__)" % IPC_MODULE],
                           capture_output=True, text=True, env=dict(os.environ, NUMBA_DISABLE_CUDA="1"))
        if r.returncode == 0:
            return py, r.stdout.strip()
    return None, ("numba (python3-numba) with its CUDA target and tests is not installed for %s"
                  % " or ".join(tried))


def machine_name(mode):
    return "thirdparty-%s-%d" % (mode, os.getpid())


def cleanup(machine):
    prefix = "-%d-%s" % (os.getuid(), machine)
    for name in os.listdir("/dev/shm"):
        dash = name.find("-")
        if dash >= 0 and name[dash:].startswith(prefix):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def sim_env(machine, shim, stats_file=None, compat=True):
    """This environment minus what we set, then the simulator's (and the
    shim's). Two simulated devices: numba's staged IPC tests then also open
    on device 1 what device 0 exported (through a copy between devices).
    compat: numba 0.56's adaptation (numba_compat/); numba-cuda needs none."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH")
           and not k.startswith(("SIMCUDA_", "IPCSHIM_", "NUMBA_"))}
    simdir = os.environ["SIMCUDA_DIR"]
    env.update(LD_LIBRARY_PATH=simdir, NUMBA_CUDA_DRIVER=os.path.join(simdir, "libcuda.so.1"),
               SIMCUDA_MACHINE=machine, IPCSHIM_DOMAIN=machine, SIMCUDA_DEVICES="2",
               SIMCUDA_DEVICE_MEMORY="256M",
               PYTHONDONTWRITEBYTECODE="1")
    if compat:
        env["PYTHONPATH"] = os.path.join(HERE, "numba_compat")
    if os.environ.get("CUDA_HOME"):
        env["CUDA_HOME"] = os.environ["CUDA_HOME"]
    if shim:
        env["LD_PRELOAD"] = os.environ["IPCSHIM_LIB"]
        if stats_file:
            env.update(IPCSHIM_STATS="1", IPCSHIM_LOG_FILE=stats_file)
    return env


def run_inner(py, script, mode, shim, tmp, compat=True, timeout=RUN_TIMEOUT, args=()):
    """Runs script under py (at most timeout seconds) with the JSON file it
    writes and args; returns (json result or None, output, stats text)."""
    machine = machine_name(mode)
    out = os.path.join(tmp, mode + ".json")
    stats = os.path.join(tmp, mode + ".log") if shim else None
    # A session of its own, so that a timeout also ends the children that
    # multiprocessing started (a numba test waits on its queue forever).
    proc = subprocess.Popen([py, os.path.join(HERE, script), out, *args], env=sim_env(machine, shim, stats, compat),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
                            start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=timeout)
        output = "exit %d\n%s" % (proc.returncode, stdout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        output = "timed out after %d s\n%s" % (timeout, stdout)
    finally:
        cleanup(machine)
    result = None
    if os.path.exists(out):
        with open(out) as f:
            result = json.load(f)
    text = ""
    if stats and os.path.exists(stats):
        with open(stats) as f:
            text = f.read()
    return result, output, text


def shim_totals(log):
    """Sums the IPCSHIM_STATS report lines of every process."""
    totals = {"exports": 0, "opens": 0, "closes": 0, "deferred frees": 0, "processes": 0}
    for m in re.finditer(r"report: exports (\d+), opens (\d+), closes (\d+), deferred frees (\d+)", log):
        totals["processes"] += 1
        for key, val in zip(("exports", "opens", "closes", "deferred frees"), m.groups()):
            totals[key] += int(val)
    return totals


def ipc(py, version, shim, tmp):
    tap = Tap()
    mode = "ipc-shim" if shim else "ipc"
    cases, output, log = run_inner(py, "numba_ipc_cases.py", mode, shim, tmp)
    Tap.diag("numba %s (%s), %s the shim" % (version, py, "with" if shim else "without"))
    if cases is None:
        tap.line(False, "numba's %s ran" % IPC_MODULE)
        Tap.diag(output)
        return tap.done()
    for c in cases:
        name = c["id"].replace("numba.cuda.tests.cudapy.", "")
        if c["subtests"]:
            name += " (%d subtests)" % c["subtests"]
        name += " %.1fs" % c["seconds"]
        if c["outcome"] == "skip":
            tap.line(True, name, "SKIP " + c["reason"])
        elif c["outcome"] in ("pass", "xfail"):
            tap.line(True, name)
        else:
            tap.line(False, name)
            if c["subtests_failed"]:
                Tap.diag("failed subtests: " + ", ".join(c["subtests_failed"]))
            for d in c["details"]:
                Tap.diag(d)
    if not cases:
        tap.line(False, "numba's %s has test cases" % IPC_MODULE)
    if tap.failed:
        Tap.diag(output[-6000:])
    if shim:
        t = shim_totals(log)
        ran = any(c["outcome"] == "pass" for c in cases)
        tap.line(not ran or (t["exports"] > 0 and t["opens"] > 0 and t["opens"] == t["closes"]),
                 "the shim tracked numba's IPC: %(exports)d exports, %(opens)d opens, %(closes)d closes "
                 "in %(processes)d processes" % t)
        if tap.failed:
            Tap.diag(log[-3000:])
    return tap.done()


def early_free(py, version, tmp):
    tap = Tap()
    Tap.diag("numba %s (%s)" % (version, py))
    for shim in (False, True):
        mode = "early-free-shim" if shim else "early-free"
        res, output, log = run_inner(py, "numba_early_free.py", mode, shim, tmp)
        how = "with the shim" if shim else "without the shim"
        if res is None or "consumer_error" in res or res.get("consumer_exit") != 0:
            tap.line(False, "%s: producer and consumer ran" % how)
            Tap.diag(json.dumps(res))
            Tap.diag(output[-6000:])
            continue
        tap.line(res["queued_frees"] >= 2 and res["pending_after_clear"] == 0,
                 "%s: numba called cuMemFree on both exported arrays (%d queued, %d left)"
                 % (how, res["queued_frees"], res["pending_after_clear"]))
        a, b = res["a"], res["b"]
        if not shim:
            tap.line(a["poison"] == a["words"],
                     "without the shim: A freed while mapped, the consumer reads poison "
                     "(0x%X in %d of %d words)" % (POISON_WORD, a["poison"], a["words"]))
            tap.line("open_error" in b,
                     "without the shim: B freed before it was opened, the open fails (%s)"
                     % b.get("open_error", "it opened"))
        else:
            tap.line(a["expected"] == a["words"],
                     "with the shim: A freed while mapped, the consumer reads the producer's data "
                     "(%d of %d words)" % (a["expected"], a["words"]))
            tap.line("open_error" not in b and b["expected"] == b["words"],
                     "with the shim: B freed before it was opened, the consumer opens it and reads "
                     "the data (%s)" % (b.get("open_error") or "%d of %d words" % (b["expected"], b["words"])))
            t = shim_totals(log)
            tap.line(t["deferred frees"] >= 2,
                     "with the shim: the producer's frees were deferred (%d deferred, %d exports, "
                     "%d opens, %d closes)" % (t["deferred frees"], t["exports"], t["opens"], t["closes"]))
        if tap.failed:
            Tap.diag(json.dumps(res))
            Tap.diag(output[-3000:])
    return tap.done()


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("ipc", "ipc-shim", "early-free"):
        print("usage: numba_run.py ipc|ipc-shim|early-free", file=sys.stderr)
        return 2
    mode = sys.argv[1]
    py, version = find_numba_python()
    if py is None:
        print("1..0 # SKIP " + version, flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="thirdparty-numba-") as tmp:
        if mode == "early-free":
            return early_free(py, version, tmp)
        return ipc(py, version, mode == "ipc-shim", tmp)


if __name__ == "__main__":
    sys.exit(main())
