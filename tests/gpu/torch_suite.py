"""torch_suite: a unittest file (PyTorch's own test/test_multiprocessing.py,
carried by `scripts/gpu-check --prepare --torch-suite FILE`) run test by
test, each test in a process of its own, first without the shim and then
with it (LD_PRELOAD), under a per-test time limit that ends a hung test (its
whole process group: the spawned workers too) and moves on. The shim may
not turn a test that passes without it into a failure or a hang.

    torch_suite.py --suite FILE --shim LIB [--limit SECONDS] [--filter REGEX]

Prints one line per test, "test NAME: without=OUTCOME shim=OUTCOME" (pass,
fail, skip, hang), and a summary line "summary: N tests, P passed without,
Q passed with the shim, K turned into a failure or a hang by the shim[:
NAMES]". Exit status 0 when K is 0, 1 when it is not, 2 when the tests
could not be listed. Runs each test under pytest when pytest imports, else
under unittest (PyTorch's test files run under either)."""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

LISTER = r"""
import sys, unittest
sys.path.insert(0, sys.argv[1])
def walk(s):
    for t in s:
        if isinstance(t, unittest.TestSuite):
            yield from walk(t)
        else:
            yield t.id()
mod = __import__(sys.argv[2])
for name in walk(unittest.defaultTestLoader.loadTestsFromModule(mod)):
    print("test-id:", name)
"""


def has_pytest():
    return subprocess.run([sys.executable, "-c", "import pytest"], capture_output=True).returncode == 0


def run_one(suite, test_id, env, limit, pytest):
    """One test in a new session (its process group ends with it): its
    outcome and the last lines of its output."""
    folder = os.path.dirname(suite)
    if pytest:
        # "module.Class.test" -> "FILE::Class::test"
        node = suite + "::" + "::".join(test_id.split(".")[1:])
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", node]
    else:
        cmd = [sys.executable, "-m", "unittest", "-v", test_id]
    p = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, text=True, errors="replace")
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "hang", out
    finally:
        try:  # what the test spawned and left behind
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if pytest:  # the summary line: "1 passed in 2.10s", "1 skipped", "1 failed, ..."
        tail = out.strip().splitlines()[-1] if out.strip() else ""
        if p.returncode != 0 or re.search(r"\b(failed|error|errors)\b", tail):
            return "fail", out
        return ("pass" if re.search(r"\bpassed\b", tail) else "skip"), out
    if p.returncode != 0:
        return "fail", out
    return ("skip" if re.search(r"\.\.\. skipped", out) else "pass"), out

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--limit", type=float, default=60)
    ap.add_argument("--filter", default="")
    a = ap.parse_args()
    suite, a.shim = os.path.abspath(a.suite), os.path.abspath(a.shim)
    folder, module = os.path.dirname(suite), os.path.splitext(os.path.basename(suite))[0]
    listed = subprocess.run([sys.executable, "-c", LISTER, folder, module], capture_output=True, text=True,
                            timeout=300)
    ids = [line.split(": ", 1)[1] for line in listed.stdout.splitlines() if line.startswith("test-id: ")]
    ids = [t for t in ids if re.search(a.filter, t)]
    if listed.returncode != 0 or not ids:
        print(f"summary: the tests could not be listed: {(listed.stderr or listed.stdout).strip()[-300:]}")
        return 2
    pytest = has_pytest()
    plain = dict(os.environ)
    plain.pop("LD_PRELOAD", None)
    shim = dict(plain, LD_PRELOAD=a.shim)
    print(f"runner: {'pytest' if pytest else 'unittest'}, {len(ids)} tests, limit {a.limit:g} s per test",
          flush=True)
    turned, passed = [], [0, 0]
    for t in ids:
        outcome = []
        for side, env in enumerate((plain, shim)):
            start = time.monotonic()
            got, out = run_one(suite, t, env, a.limit, pytest)
            outcome.append(got)
            passed[side] += got == "pass"
            if got in ("fail", "hang") and side == 1:
                last = " | ".join(out.strip().splitlines()[-3:])[-300:]
                print(f"  shim side of {t} ({time.monotonic() - start:.0f} s): {last}", flush=True)
        name = t.split(".", 1)[1] if "." in t else t
        print(f"test {name}: without={outcome[0]} shim={outcome[1]}", flush=True)
        if outcome[0] == "pass" and outcome[1] in ("fail", "hang"):
            turned.append(name)
    print(f"summary: {len(ids)} tests, {passed[0]} passed without, {passed[1]} passed with the shim, "
          f"{len(turned)} turned into a failure or a hang by the shim{': ' + ', '.join(turned) if turned else ''}")
    return 1 if turned else 0


if __name__ == "__main__":
    sys.exit(main())
