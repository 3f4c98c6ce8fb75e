"""test_gpu_check: scripts/gpu-check, the one command a lent GPU machine runs,
exercised without a GPU so that it cannot rot between lendings: its argument
errors, its no-GPU answer, and a whole run on the simulated driver
(--simulator), which builds the shim the way a bare GPU machine would
(-Dtests=false), runs every check and probe (legacy and stream-ordered pool
IPC), and writes the Markdown block for docs/gpu-validation.md."""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from tap import check, eq, run, run_all  # noqa: E402

SRC = os.environ["SOURCE_ROOT"]
BUILD = os.environ["BUILD_ROOT"]
SCRIPT = os.path.join(SRC, "scripts", "gpu-check")


def test_argument_errors_are_usage_errors():
    for args in (["--json"], ["--markdown"], ["--simulator"], ["--json", "--bench"], ["--nonsense"]):
        status, out, err = run([SCRIPT, *args])
        eq(status, 2, f"gpu-check {' '.join(args)}")
        check("gpu-check:" in err and "line" not in err, err)
    status, out, _ = run([SCRIPT, "--help"])
    eq(status, 0, "--help")
    check("--prepare" in out and "--simulator" in out and "#!/" not in out, out)


def test_without_a_gpu_it_says_so():
    if shutil.which("nvidia-smi"):
        return "this machine has nvidia-smi: gpu-check runs for real here"
    status, out, _ = run([SCRIPT], env={"PATH": "/usr/bin:/bin"})
    eq(status, 0, "gpu-check on a machine without nvidia-smi")
    check("no NVIDIA GPU" in out, out)


def test_whole_run_on_the_simulator_prints_the_validation_block():
    with tempfile.TemporaryDirectory() as tmp:
        md = os.path.join(tmp, "validation.md")
        status, out, err = run([SCRIPT, "--simulator", os.environ["SIMCUDA_DIR"], "--swap", "--markdown", md],
                               env={"GPU_CHECK_DIR": os.path.join(BUILD, "gpu-check")}, timeout=600)
        eq(status, 0, f"gpu-check --simulator:\n{out}\n{err}")
        check(re.search(r"^\d+ passed, 0 failed$", out, re.M), out)
        text = open(md).read()
        check(text.startswith("\n## ") and "| check | result | detail |" in text, text)
        for probe in ("free-while-mapped", "exporter-kill-while-mapped", "open-freed-handle", "reopen-same-context",
                      "close-waits-for-kernel", "small-allocs-share-handle", "importer-killed",
                      "driver-threads", "pool-free-while-imported", "pool-freeasync-while-imported",
                      "pool-import-after-free", "pool-exporter-killed", "pool-destroy-while-imported",
                      "pool-destroy-unfreed-while-imported", "pool-import-pool-twice",
                      "pool-import-pointer-twice"):
            check(f"- **{probe}**:" in text, f"probe {probe} in:\n{text}")
        # Every pool probe ran to its end: nothing refused its setup, no
        # child left an answer unsent.
        check(not re.search(r"^- \*\*pool-[^*]*\*\*: (not run|.*no answer)", text, re.M), text)
        check("| consumer SIGKILLed: shim reclaims its lease | pass |" in text, text)
        check("| pool: without shim, free while reading | info | consumer: " in text, text)
        for door in ("runtime", "driver", "resolver"):
            for when in ("while-reading", "before-import"):
                check(f"| pool {door}: shim, free {when} | pass |" in text, f"pool {door} {when} in:\n{text}")
        for name in ("consumer SIGKILLed holding imports", "pool destroyed while imported"):
            check(f"| pool: shim, {name} | pass |" in text, f"pool: shim, {name} in:\n{text}")
        # Issue 46's sharing orders (tests/e2e/progs/sharing_orders.c).
        for args in ("--free early", "--free early --free-with async --reuse", "--kind legacy --free early --reuse"):
            check(f"| orders {args}: shim | pass |" in text, f"orders {args} in:\n{text}")
        for args in ("--free last --reimport", "--free last --reset device", "--free last --reset primary",
                     "--free last --reset release", "--free last --reset ctx",
                     "--kind legacy --free last --reset device", "--kind legacy --free last --reset ctx"):
            check(f"| orders {args}: shim answers as the driver | pass |" in text, f"orders {args} in:\n{text}")
        # --swap: the training loop keeps its checksum under each policy and
        # budget, and every probe of the driver's move costs printed a line.
        for policy in ("history", "lru"):
            for over in ("1.5", "2"):
                check(f"| swap: {policy} at {over}x, same checksum | pass |" in text, f"swap {policy} {over} in:\n{text}")
        for probe in ("swap-move-256K", "swap-move-2048K", "swap-move-16384K", "swap-overlap", "swap-pattern",
                      "swap-pattern-side", "swap-duplex"):
            check(f"- **{probe}**:" in text, f"probe {probe} in:\n{text}")


if __name__ == "__main__":
    run_all(globals())
