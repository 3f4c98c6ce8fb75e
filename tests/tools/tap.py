"""tap: a minimal TAP producer for the tool tests, and what they share.

Each test is a function named test_*; run_all() runs them in file order and
prints "ok N - name" or "not ok N - name" with the failure as diagnostics.
"""
import os
import subprocess
import sys
import traceback


class Failure(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, expected {want!r}")


def run(argv, env=None, timeout=60, input=None, cwd=None):
    """Runs argv; returns (status, stdout, stderr) as text."""
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=timeout, input=input, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def run_all(namespace):
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
    print(f"1..{len(tests)}", flush=True)
    failed = 0
    for i, (name, fn) in enumerate(tests, 1):
        try:
            skip = fn()
            if isinstance(skip, str):
                print(f"ok {i} - {name} # SKIP {skip}", flush=True)
            else:
                print(f"ok {i} - {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - any failure is a test failure
            failed += 1
            print(f"not ok {i} - {name}", flush=True)
            detail = str(e) if isinstance(e, Failure) else traceback.format_exc()
            for line in detail.splitlines():
                print(f"# {line}", flush=True)
    sys.exit(1 if failed else 0)
