#!/usr/bin/env python3
"""numba_cuda_run.py: numba-cuda's own CUDA test suite on the simulator,
without and then with the shim, compared test by test (TAP on stdout).

One TAP line per test case run (numba_cuda_cases.py runs them, a process
per test module; RUN says which modules, and each other module is one SKIP
line that says why):
  ok      passed both ways;
  not ok  passed without the shim and did not with it (a regression), or
          an IPC test (test_ipc) that does not pass with the shim;
  SKIP    numba-cuda skipped it (its reason), or it does not pass on the
          simulator even without the shim (not runnable here: the first
          line of why; the simulator runs no kernels). Such a test must
          still not hang or crash the run with the shim.
Then a line that the shim tracked numba-cuda's IPC (its exports, opens and
closes, from IPCSHIM_STATS). numba-cuda reaches the driver only through
cuda-bindings, which loads libcuda.so.1 and asks it for every function with
cuGetProcAddress: the shim's resolver door.

numba-cuda comes from PyPI, in the venv scripts/test makes
(scripts/lib.sh: thirdparty_venv, pinned versions), named by
IPCSHIM_THIRDPARTY_VENV; without it the test is one TAP skip that says so.
Environment otherwise as numba_run.py's.
"""
import os
import re
import subprocess
import sys
import tempfile

from numba_run import Tap, run_inner, shim_totals

PACKAGE = "numba.cuda.tests."
# What runs here: the driver-facing half of the suite (contexts, memory,
# streams, events, modules, IPC) and the IPC tests. The rest compiles and
# launches kernels, which the simulator does not run: on a whole run here
# those tests fail without the shim too (the first launch asks for
# cuLibraryLoadData), and take minutes to compile.
RUN = ("numba.cuda.tests.cudadrv.", "numba.cuda.tests.cudapy.test_ipc")
NOT_RUN = "not run here: compiles and launches kernels, which the simulator does not run"
MODULE_TIMEOUT = 120
IPC_TESTS = "numba.cuda.tests.cudapy.test_ipc."


def venv_python():
    """(interpreter, numba-cuda version) or (None, why not)."""
    venv = os.environ.get("IPCSHIM_THIRDPARTY_VENV", "")
    py = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(py):
        return None, ("numba-cuda's venv (%s) is not there: scripts/test makes it from PyPI "
                      "(scripts/lib.sh: thirdparty_venv)" % (venv or "IPCSHIM_THIRDPARTY_VENV unset"))
    r = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('numba-cuda'), "
                        "m.version('cuda-bindings'))"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "numba-cuda does not import in %s: %s" % (venv, r.stderr.strip()[-300:])
    return py, r.stdout.strip()


def first_line(case):
    """Why a case did not pass: its skip reason or its error's last line."""
    if case["reason"]:
        return case["reason"]
    for d in case["details"]:
        lines = [ln for ln in str(d).strip().splitlines() if ln.strip()]
        if lines:
            return lines[-1].strip()[:160]
    return case["outcome"]


def run_side(py, shim, names, tmp):
    """Every module of names, one process each: (records, {module: output of
    a process that wrote nothing}, the shim's stats of them all)."""
    records, broken, stats = [], {}, ""
    for i, name in enumerate(names):
        mode = "numba-cuda%s-%d" % ("-shim" if shim else "", i)
        cases, output, log = run_inner(py, "numba_cuda_cases.py", mode, shim, tmp, compat=False,
                                       timeout=MODULE_TIMEOUT, args=(name,))
        stats += log
        if cases is None:
            broken[name] = output
        else:
            records += cases
    return records, broken, stats


def case_id(c):
    """A case's id, without the addresses some ids carry (a parametrised
    case names its functions: "<function f at 0x7f...>")."""
    return re.sub(r" at 0x[0-9a-f]+", "", c["id"])


def main():
    py, version = venv_python()
    if py is None:
        print("1..0 # SKIP " + version, flush=True)
        return 0
    tap = Tap()
    Tap.diag("numba-cuda %s, cuda-bindings %s (%s)" % (tuple(version.split()) + (py,)))
    with tempfile.TemporaryDirectory(prefix="thirdparty-numba-cuda-") as tmp:
        names, output, _ = run_inner(py, "numba_cuda_cases.py", "numba-cuda-list", False, tmp,
                                     compat=False, args=("--list",))
        if not names:
            tap.line(False, "numba-cuda's test modules are listed")
            Tap.diag(output[-3000:])
            return tap.done()
        run = [n for n in names if n.startswith(RUN)]
        for n in names:
            if not n.startswith(RUN):
                tap.line(True, n.replace(PACKAGE, "") + " (module)", "SKIP " + NOT_RUN)
        (off, off_broken, _), (on, on_broken, log) = (run_side(py, False, run, tmp),
                                                      run_side(py, True, run, tmp))
    for name in run:  # a module whose process died or hung: all its cases lost
        short = name.replace(PACKAGE, "") + " (module)"
        if name in off_broken and name in on_broken:
            tap.line(True, short, "SKIP its process fails without the shim too: "
                     + off_broken[name].strip().splitlines()[-1][:160])
        elif name in on_broken:
            tap.line(False, short + ": its process failed with the shim only")
            Tap.diag(on_broken[name][-3000:])
        elif name in off_broken:
            tap.line(True, short, "SKIP its process fails without the shim: "
                     + off_broken[name].strip().splitlines()[-1][:160])
    with_shim = {case_id(c): c for c in on}
    counts = {"both": 0, "not here": 0, "skipped": 0, "regressed": 0}
    for c in off:
        name, w = case_id(c).replace(PACKAGE, ""), with_shim.get(case_id(c))
        passed_off = c["outcome"] in ("pass", "xfail")
        passed_on = w is not None and w["outcome"] in ("pass", "xfail")
        if c["outcome"] == "skip":
            counts["skipped"] += 1
            tap.line(True, name, "SKIP numba-cuda: " + c["reason"])
        elif not passed_off and not c["id"].startswith(IPC_TESTS):
            counts["not here"] += 1
            tap.line(True, name, "SKIP fails on the simulator without the shim too: " + first_line(c))
        elif passed_on:
            counts["both"] += 1
            tap.line(True, name)
        else:
            counts["regressed"] += 1
            tap.line(False, name + (": not run with the shim" if w is None else ""))
            for d in (w or {}).get("details", []):
                Tap.diag(d)
    ran_off = {case_id(c) for c in off}
    missing = sorted(i for i in with_shim if i not in ran_off and not any(
        i.startswith(m + ".") for m in off_broken))
    tap.line(not missing, "the same cases ran both ways" + (": %s" % ", ".join(missing[:5]) if missing else ""))
    Tap.diag("numba-cuda: %d test modules, %d run here (%d cases): passed both ways %d, regressed with "
             "the shim %d, skipped by numba-cuda %d, failing on the simulator without the shim %d"
             % (len(names), len(run), len(off), counts["both"], counts["regressed"], counts["skipped"],
                counts["not here"]))
    t = shim_totals(log)
    tap.line(t["exports"] > 0 and t["opens"] > 0 and t["opens"] == t["closes"],
             "the shim tracked numba-cuda's IPC: %(exports)d exports, %(opens)d opens, %(closes)d closes "
             "in %(processes)d processes" % t)
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
