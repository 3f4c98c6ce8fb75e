#!/usr/bin/env python3
"""cuda_core_run.py: cuda.core's IPC-enabled memory resource as a client
(cuda_core_pair.py: buffers from a stream-ordered pool shared with a
consumer process through multiprocessing) on the simulator, without and
with the shim (TAP on stdout):
  ok      keeping NVIDIA's rule (the consumer frees first) reads the data,
          without and with the shim;
  ok      breaking it (the producer frees first) reads the data with the
          shim (without it the consumer reads the poison of a freed block:
          reported, not judged);
  ok      the shim tracked the pool exports (IPCSHIM_STATS: exports,
          opens and closes counted, a free deferred).
cuda.core reaches the driver only through cuda-bindings, which loads
libcuda.so.1 and asks it for each function with cuGetProcAddress: the
shim's resolver door. cuda.core comes from PyPI, in the venv scripts/test
makes (IPCSHIM_THIRDPARTY_VENV, as numba_cuda_run.py); without it the test
is one TAP skip that says so. Environment otherwise as numba_run.py's.
"""
import os
import signal
import subprocess
import sys
import tempfile

from numba_run import Tap, cleanup, machine_name, shim_totals, sim_env

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 120


def venv_python():
    """(interpreter, cuda-core version) or (None, why not)."""
    venv = os.environ.get("IPCSHIM_THIRDPARTY_VENV", "")
    py = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(py):
        return None, ("the third-party venv (%s) is not there: scripts/test makes it from PyPI "
                      "(scripts/lib.sh: thirdparty_venv)" % (venv or "IPCSHIM_THIRDPARTY_VENV unset"))
    r = subprocess.run([py, "-c", "import importlib.metadata as m, cuda.core; print(m.version('cuda-core'))"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "cuda.core does not import in %s: %s" % (venv, r.stderr.strip()[-300:])
    return py, r.stdout.strip()


def pair(py, free, shim, tmp):
    """(the consumer's verdict line, the whole output, the shim's stats log)."""
    mode = "cuda-core-%s-%s" % (free, "shim" if shim else "plain")
    machine = machine_name(mode)
    stats = os.path.join(tmp, mode + ".log")
    proc = subprocess.Popen([py, os.path.join(HERE, "cuda_core_pair.py"), "--free", free],
                            env=sim_env(machine, shim, stats, compat=False), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=tmp, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = "timed out after %d s\n%s" % (TIMEOUT, proc.communicate()[0])
    finally:
        cleanup(machine)
    verdict = next((ln[len("consumer: "):] for ln in out.splitlines() if ln.startswith("consumer: ")),
                   "no verdict")
    log = ""
    if os.path.exists(stats):
        with open(stats) as f:
            log = f.read()
    return verdict, out, log


def main():
    py, version = venv_python()
    if py is None:
        print("1..0 # SKIP " + version, flush=True)
        return 0
    tap = Tap()
    Tap.diag("cuda-core %s (%s)" % (version, py))
    with tempfile.TemporaryDirectory(prefix="ipcshim-cuda-core-") as tmp:
        for shim in (False, True):
            verdict, out, _ = pair(py, "late", shim, tmp)
            tap.line(verdict.startswith("ok"), "the rule kept, %s the shim: consumer %s"
                     % ("with" if shim else "without", verdict))
            if not verdict.startswith("ok"):
                Tap.diag(out[-3000:])
        verdict, out, _ = pair(py, "early", False, tmp)
        tap.line(True, "the producer frees first, without the shim: consumer %s (reported, not judged)"
                 % verdict)
        verdict, out, log = pair(py, "early", True, tmp)
        tap.line(verdict.startswith("ok"), "the producer frees first, with the shim: consumer %s" % verdict)
        if not verdict.startswith("ok"):
            Tap.diag(out[-3000:])
        t = shim_totals(log)
        tap.line(t["exports"] >= 4 and t["opens"] >= 4 and t["closes"] >= 4 and t["deferred frees"] >= 1,
                 "the shim tracked cuda.core's pool IPC: %d exports, %d opens, %d closes, %d deferred frees "
                 "in %d processes" % (t["exports"], t["opens"], t["closes"], t["deferred frees"],
                                      t["processes"]))
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
