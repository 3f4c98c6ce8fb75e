#!/usr/bin/env python3
"""test_record: the trace recorder (tests/swap/record_traces.py) still works
and still writes what is committed. TAP.

With PyTorch importable (by `python3` or Debian's /usr/bin/python3), it
re-records resnet18-infer for two iterations and asserts that
  1. swap-replay loads it (the format is right) and
  2. every event line equals the committed trace's line at the same place
     (the committed trace is the same run, longer), when the PyTorch version
     is the one recorded in the committed trace's header; with another
     version only 1, plus shape checks (launches, writes, an I per iteration).
Without PyTorch the whole test is skipped, saying so."""
import lzma
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDER = os.path.join(HERE, "record_traces.py")
COMMITTED = os.path.join(HERE, "traces", "resnet18-infer.trace.xz")


def torch_python():
    for py in ("python3", "/usr/bin/python3"):
        try:
            r = subprocess.run([py, "-c", "import torch, torchvision; print(torch.__version__)"],
                               capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return py, r.stdout.strip()
    return None, None


def events(lines):
    return [l for l in lines if l and not l.startswith("#")]


def main():
    replay = sys.argv[1]
    py, version = torch_python()
    if not py:
        print("1..0 # SKIP PyTorch is not installed (Debian: apt-get install -y python3-torch "
              "python3-torchvision)")
        return 0
    print("1..3")
    with tempfile.TemporaryDirectory(prefix="test-record-%d-" % os.getpid()) as d:
        r = subprocess.run([py, RECORDER, "--out", d, "--only", "resnet18-infer", "--iters", "2"],
                           capture_output=True, text=True, timeout=600)
        path = os.path.join(d, "resnet18-infer.trace.xz")
        ok = r.returncode == 0 and os.path.exists(path)
        print("%s 1 - recorder ran (%s, torch %s)" % ("ok" if ok else "not ok", py, version))
        if not ok:
            print("# " + (r.stdout + r.stderr).replace("\n", "\n# "))
            print("not ok 2 - replay\nnot ok 3 - matches the committed trace")
            return 1
        r = subprocess.run([replay, path, "--oversub", "1.5", "--warmup", "0"],
                           capture_output=True, text=True, timeout=120)
        print("%s 2 - swap-replay reads it" % ("ok" if r.returncode == 0 else "not ok"))
        if r.returncode:
            print("# " + (r.stdout + r.stderr).replace("\n", "\n# "))
        with lzma.open(path, "rt") as f:
            new = f.read().splitlines()
        with lzma.open(COMMITTED, "rt") as f:
            old = f.read().splitlines()
        m = re.search(r"torch (\S+),", "\n".join(old[:3]))
        ev_new, ev_old = events(new), events(old)
        shape = (ev_new.count("I") == 2 and ev_new.count("L") > 100 and
                 any(l.endswith(" w") for l in ev_new))
        if m and m.group(1) == version:
            same = ev_new == ev_old[:len(ev_new)]
            print("%s 3 - %d events equal the committed trace's first %d (torch %s)" %
                  ("ok" if same and shape else "not ok", len(ev_new), len(ev_new), version))
            if not same:
                bad = next(i for i, (a, b) in enumerate(zip(ev_new, ev_old)) if a != b) \
                    if any(a != b for a, b in zip(ev_new, ev_old)) else min(len(ev_new), len(ev_old))
                print("# first difference at event %d" % bad)
            return 0 if (same and shape and r.returncode == 0) else 1
        print("%s 3 - shape only: 2 iterations, >100 launches, writes (committed with torch %s, "
              "this is %s)" % ("ok" if shape else "not ok", m.group(1) if m else "?", version))
        return 0 if (shape and r.returncode == 0) else 1


if __name__ == "__main__":
    sys.exit(main())
