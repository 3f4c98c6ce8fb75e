"""test_gpu_check: scripts/gpu-check, the one command a lent GPU machine runs,
exercised without a GPU so that it cannot rot between lendings: its argument
errors, its no-GPU answer, and a whole run on the simulated driver
(--simulator), which builds the shim the way a bare GPU machine would
(-Dtests=false), runs every check and probe (legacy and stream-ordered pool
IPC), and writes the Markdown block for docs/gpu-validation.md. Its runner
of PyTorch's own test file (tests/gpu/torch_suite.py) is exercised on a
small unittest file of our own that behaves differently under the shim, as
torch with CUDA is not here."""
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
    for args in (["--json"], ["--markdown"], ["--simulator"], ["--json", "--bench"], ["--nonsense"],
                 ["--torch-suite", "x"], ["--torch-limit", "soon"], ["--torch-filter"]):
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
        for name in ("address reused after an export exports again", "ledger names each direct importer"):
            check(f"| vmm: shim, {name} | pass |" in text, f"vmm: shim, {name} in:\n{text}")
        check(re.search(r"^\| torch suite: skipped \| skip \| (PyTorch's test_multiprocessing.py not carried|torch not "
                        r"installed, or without CUDA)", text, re.M), text)
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
        # --swap: the training loop, at both shapes, keeps its checksum under
        # each engine and budget, the speed-up row is computed, and every
        # probe of the driver's move costs printed a line.
        for shape in ("x1", "x8"):
            for engine in ("managed", "vmm", "vmm+ahead"):
                for over in ("1.5", "2"):
                    row = f"| swap: train {shape}, {engine} at {over}x, same checksum | pass |"
                    check(row in text, f"{row} in:\n{text}")
            check(re.search(rf"\| swap: train {shape}, vmm over managed at 1.5x \| info \| [0-9.]+x \(issue 45 goal", text),
                  f"speed-up row of train {shape} in:\n{text}")
        check(re.search(r"\| swap: train x8, vmm at 1.5x, moves \| info \|.*VMM blocks [1-9]", text),
              f"train x8's VMM blocks in:\n{text}")
        # the policy's fetches ahead and their lateness (IPCSHIM_SWAP_AHEAD=1)
        for engine in ("vmm\\+ahead",):
            check(re.search(rf"\| swap: train x8, {engine} at 1.5x, moves \| info \|.*fetched ahead [1-9][0-9]* bytes "
                            r"\(late [0-9]+, early [0-9]+, missed [0-9]+\)", text),
                  f"train x8's fetches ahead under {engine} in:\n{text}")
        check(re.search(r"\| swap: train x8, vmm\+ahead at 1.5x, moves \| info \|.*fetches ahead [0-9]+ \(failed [0-9]+, "
                        r"dropped [0-9]+\)", text), f"train x8's mover fetches ahead in:\n{text}")
        for probe in ("swap-move-256K", "swap-move-2048K", "swap-move-16384K", "swap-overlap", "swap-pattern",
                      "swap-pattern-side", "swap-duplex"):
            check(f"- **{probe}**:" in text, f"probe {probe} in:\n{text}")


def test_torch_only_runs_only_the_torch_suite():
    status, out, err = run([SCRIPT, "--simulator", os.environ["SIMCUDA_DIR"], "--torch-only"],
                           env={"GPU_CHECK_DIR": os.path.join(BUILD, "gpu-check")}, timeout=600)
    eq(status, 0, f"gpu-check --torch-only:\n{out}\n{err}")
    check("torch suite: skipped" in out and "runtime: shim" not in out and "probe " not in out, out)
    check(re.search(r"^0 passed, 0 failed$", out, re.M), out)


FAKE_SUITE = """
import os, subprocess, sys, time, unittest
SHIM = bool(os.environ.get("LD_PRELOAD"))
class T(unittest.TestCase):
    def test_passes(self):
        pass
    def test_fails_both(self):
        self.fail("without the shim too")
    @unittest.skip("needs two GPUs")
    def test_skipped(self):
        pass
    def test_hangs_with_shim(self):
        if SHIM:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(os.environ["FAKE_CHILD"], "w") as f:
                f.write(str(child.pid))
            time.sleep(600)
    def test_fails_with_shim(self):
        self.assertFalse(SHIM)
    def test_passes_with_shim_only(self):
        self.assertTrue(SHIM)
"""


def test_torch_suite_runner_finds_what_the_shim_turned():
    runner = os.path.join(SRC, "tests", "gpu", "torch_suite.py")
    lib = os.path.join(BUILD, "shim", "libipcshim.so")
    with tempfile.TemporaryDirectory() as tmp:
        suite, child = os.path.join(tmp, "fake_suite.py"), os.path.join(tmp, "child")
        with open(suite, "w") as f:
            f.write(FAKE_SUITE)
        status, out, err = run([sys.executable, runner, "--suite", suite, "--shim", lib, "--limit", "5"],
                               env={"FAKE_CHILD": child}, timeout=120)
        eq(status, 1, f"the runner's verdict:\n{out}\n{err}")
        for name, outcomes in (("test_passes", "without=pass shim=pass"),
                               ("test_fails_both", "without=fail shim=fail"),
                               ("test_skipped", "without=skip shim=skip"),
                               ("test_hangs_with_shim", "without=pass shim=hang"),
                               ("test_fails_with_shim", "without=pass shim=fail"),
                               ("test_passes_with_shim_only", "without=fail shim=pass")):
            check(f"test T.{name}: {outcomes}" in out, f"{name}: {outcomes} in:\n{out}")
        check(re.search(r"^summary: 6 tests, 3 passed without, 2 passed with the shim, 2 turned into a failure or a "
                        r"hang by the shim: T.test_fails_with_shim, T.test_hangs_with_shim$", out, re.M), out)
        # The hung test's own child went with it (its process group).
        pid = int(open(child).read())
        check(not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
              f"the hung test's child {pid} still runs")
        status, out, err = run([sys.executable, runner, "--suite", suite, "--shim", lib, "--limit", "5",
                                "--filter", "passes$|skipped"], timeout=120)
        eq(status, 0, f"without a turned test:\n{out}\n{err}")
        check("summary: 2 tests, 1 passed without, 1 passed with the shim, 0 turned" in out, out)


if __name__ == "__main__":
    run_all(globals())
