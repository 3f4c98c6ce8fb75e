"""The documentation is checked, not trusted:

- every entry of core/options.def is in docs/environment.md with its default;
- every shell command in a ```sh block of README.md or docs/*.md (and in a
  ```text block: crash-safety.md writes its commands so) is listed in
  COMMANDS below, and is either run here (verbatim, or rewritten where it
  names a placeholder program, a GPU-only setting or hours of running; the
  rewrite is shown), or named with the test that runs it, or marked NotRun
  with the reason (a container runtime, root, a change to the whole
  machine); a listed command that no page shows any more is an error too. A
  Run that needs what this machine may lack (matplotlib, valgrind, a
  libFuzzer build) says so and is skipped, with the reason printed, without
  it;
- a plain ``` block right after a ```sh block shows what that block's last
  command prints: it is run and each line shown must match a line it
  printed (whole numbers exactly; decimals, pids and "…" stand for any),
  and every line the shim printed (`ipcshim[PID]: `) must be shown;
- the ```c blocks of docs/usage.md are compiled and run (the C/C++ example),
  and every ```python block parses.

Commands run in a scratch folder on the simulated GPU, with ipcshim-run and
ipcshim-stat on PATH, in a domain of their own."""
import ast
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402

SRC = os.environ["SOURCE_ROOT"]
BUILD = os.environ["BUILD_ROOT"]
UID = os.geteuid()
DOMAIN = f"docs-{os.getpid()}"
PAIR = os.path.join(os.environ["E2E_BIN_DIR"], "pair-runtime") + " --free while-reading"
# A registry left behind, as only killed processes leave one now (a clean
# last process out removes it): leaky-runtime's importer, whose exporter it
# killed itself, is killed once it says so. {leaky} is filled in later.
# A file of its own per domain: two commands use this, and the second's
# loop once read the first's "importer" before its own program had
# truncated the shared file, and killed it before it made its registry.
KILLED_LEFTOVER = ("IPCSHIM_DOMAIN={domain} ipcshim-run -- {{leaky}} exporter-killed 65536 30000 > killed-{domain}.out & "
                   "for i in $(seq 300); do grep -q importer killed-{domain}.out && break; sleep 0.1; done; "
                   "kill -9 $! && wait $!")


def toolkit():
    status, out, _ = run(["meson", "introspect", "--buildoptions", BUILD])
    for line in re.findall(r'"name": "toolkit", "value": "([^"]*)"', out):
        if line:
            return line
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else "/usr/local/cuda"


CUDA = toolkit()


def Run(command=None, expect=None, why=None, needs=None):
    """Run here: the documented command (None) or this rewrite; status 0 and
    `expect` in the output. `needs`: a function that returns why it cannot
    run on this machine (then it is skipped, and the reason printed), or
    None."""
    return ("run", command, expect, why, needs)


def Covered(path, needle, why=None):
    """Run by another test: `needle` (its name) must occur in `path`."""
    return ("covered", path, needle, why, None)


def NotRun(why):
    """Shown but run by no test, for the reason given (printed with the
    results): a container runtime, or a change to the whole machine."""
    return ("notrun", None, None, why, None)


def python_with(name):
    """The python3 on PATH, else Debian's, if it imports name; or None."""
    for exe in ("python3", "/usr/bin/python3"):
        if shutil.which(exe) and subprocess.run([exe, "-c", f"import {name}"], capture_output=True).returncode == 0:
            return shutil.which(exe)
    return None


def module(name):
    """needs: a python3 that imports name ({name_python} in the command)."""
    return lambda: None if python_with(name) else f"neither python3 on PATH nor /usr/bin/python3 imports {name}"


def program(name):
    """needs: name is on PATH."""
    return lambda: None if shutil.which(name) else f"{name} is not installed"


def built(path):
    """needs: the build folder has path (a target built only with some tools)."""
    return lambda: None if os.path.exists(os.path.join(BUILD, path)) else f"{path} is not built here"


GPU_ONLY = "needs a GPU and the library; scripts/gpu-check runs it, here its Python is parsed"

# documented command -> how it is checked
COMMANDS = {
    # README.md
    "scripts/ipcshim-run --demo": Covered("tests/e2e/test_launcher.c", "demo_shows_the_use_after_free_and_the_protection"),
    "scripts/test --install-deps": Covered(".ci/run", "scripts/test --install-deps", "what CI runs: every suite, this one included"),
    "scripts/ipcshim-run -- ./producer &":
        Run("mkfifo h; {src}/scripts/ipcshim-run -- ./producer > h & {src}/scripts/ipcshim-run -- ./consumer < h; "
            "s=$?; wait; rm -f h; exit $s", "consumer read 0x1010101",
            "with the next line, through a fifo (the handle goes from one to the other)"),
    "scripts/ipcshim-run -- ./consumer": Run("true", None, "run with the line before"),
    "scripts/ipcshim-run -- python train.py":
        Run("{src}/scripts/ipcshim-run -- python3 standin.py", "consumer 0: ok",
            "a Python program whose child uses CUDA stands in for train.py"),
    "LD_PRELOAD=$PWD/build/shim/libipcshim.so ./program": Run("LD_PRELOAD={build}/shim/libipcshim.so {pair}",
                                                              "consumer 0: ok"),
    "scripts/ipcshim-run --sim -- ./program": Run("{src}/scripts/ipcshim-run --sim -- {pair}", "consumer 0: ok"),
    "ipcshim-stat --help": Run(None, "--watch"),
    "ipcshim-run --help": Run(None, "ipcshim-run --demo"),
    # docs/ipcshim-stat.md, docs/troubleshooting.md
    "ipcshim-stat": Run(None, f"registry /ipcshim-{UID}-{DOMAIN}"),
    "ipcshim-stat --domain job42": Run("ipcshim-stat --domain {domain}", "HOLDERS"),
    "ipcshim-stat --list": Run(None, DOMAIN),
    "ipcshim-stat --watch 1": Run("ipcshim-stat --watch 0.1 --count 2", "----"),
    "ipcshim-stat --domain job42 --watch 1": Run("ipcshim-stat --domain {domain} --watch 0.1 --count 2", "----"),
    "ipcshim-stat --json | python3 -m json.tool": Run(None, '"format": "ipcshim-stat"'),
    "ipcshim-stat --json | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s[\"totals\"][\"limbo_bytes\"])'":
        Run(None, "0"),
    "ipcshim-stat --json --watch 5 --count 12 >> /tmp/ipcshim-stat.jsonl":
        Run("ipcshim-stat --json --watch 0.05 --count 3 >> stat.jsonl && test $(wc -l < stat.jsonl) = 3"),
    "ipcshim-stat --leaks": Run(None, "leaks in domain"),
    "ipcshim-stat --all": Run(None, f"(domain {DOMAIN}, ABI 6)"),
    "ipcshim-stat --all --prometheus > /var/lib/node_exporter/ipcshim.prom.tmp && mv /var/lib/node_exporter/ipcshim.prom.tmp /var/lib/node_exporter/ipcshim.prom":
        Run("ipcshim-stat --all --prometheus > ipcshim.prom.tmp && mv ipcshim.prom.tmp ipcshim.prom && tail -1 ipcshim.prom",
            "# EOF", "into the scratch folder instead of node_exporter's"),
    "ipcshim-stat --remove job42":
        # What --remove is for: a registry left by processes that were
        # killed (a clean last process out removes it itself).
        Run(KILLED_LEFTOVER.format(domain="{domain}-rm2") + "; ipcshim-stat --remove {domain}-rm2",
            "removed /dev/shm/ipcshim-"),
    "ipcshim-stat --json --watch 0.5 > run.jsonl":
        Run("ipcshim-stat --json --watch 0.1 --count 3 > run.jsonl && test $(wc -l < run.jsonl) = 3"),
    "ipcshim-plot run.jsonl -o run.png":
        Run("{matplotlib_python} $(command -v ipcshim-plot) run.jsonl -o run.png && test -s run.png", "-> run.png",
            "the log the line before recorded, with a python3 that has matplotlib; tools-observe draws a run with "
            "a death and checks the marks", needs=module("matplotlib")),
    "ipcshim-plot --help": Run(None, "--output"),
    "IPCSHIM_LEAK_REPORT=full ipcshim-run -- ./program":
        Covered("tests/e2e/test_leaks.c", "consumer_that_never_closes", "programs that leak, each kind"),
    "IPCSHIM_LOG=info ipcshim-run -- ./program": Run("IPCSHIM_LOG=info ipcshim-run -- {pair}", "options in effect"),
    "IPCSHIM_LOG=debug IPCSHIM_LOG_FILE=/tmp/ipcshim.log ipcshim-run -- ./program":
        Run("IPCSHIM_LOG=debug IPCSHIM_LOG_FILE=$PWD/ipcshim.log ipcshim-run -- {pair}", "consumer 0: ok"),
    "grep -h 'ipcshim\\[' /tmp/ipcshim.log": Run("grep -h 'ipcshim\\[' ipcshim.log", "debug: attached to"),
    "IPCSHIM_STATS=1 ipcshim-run -- ./producer | ipcshim-run -- ./consumer": Run(None, ": exports 1, "),
    "IPCSHIM_STATS=1 ipcshim-run -- ./producer | (sleep 0.3; ipcshim-run -- ./consumer)":
        Run(None, "deferred frees 1, reclaimed 1 blocks"),
    "IPCSHIM_LOG=info ipcshim-run -- valgrind --trace-children=yes --error-exitcode=99 "
    "--suppressions=/usr/share/ipcshim/ipcshim.supp ./program":
        Run("IPCSHIM_LOG=info ipcshim-run -- valgrind --trace-children=yes --error-exitcode=99 "
            "--suppressions={src}/scripts/ipcshim.supp ./producer | ipcshim-run -- ./consumer; "
            "s=(${{PIPESTATUS[@]}}); test ${{s[0]}} = 0 -a ${{s[1]}} = 0",
            "consumer read 0x1010101", "the producer of docs/usage.md under memcheck, with its consumer; the "
            "suppressions of the source tree", needs=program("valgrind")),
    # docs/crash-safety.md (its commands are ```text blocks)
    "cd build": Run("true", None, "with the next line, which names the build folder"),
    "IPCSHIM_SOAK_ROUNDS=1200 CRASH_BIN_DIR=$PWD/tests/crash E2E_BIN_DIR=$PWD/tests/e2e "
    "IPCSHIM_LIB=$PWD/shim/libipcshim.so SIMCUDA_DIR=$PWD/tests/simcuda "
    "tests/crash/test-crash-soak --filter '*random*'":
        Run("cd {build} && IPCSHIM_SOAK_ROUNDS=2 CRASH_BIN_DIR=$PWD/tests/crash E2E_BIN_DIR=$PWD/tests/e2e "
            "IPCSHIM_LIB=$PWD/shim/libipcshim.so SIMCUDA_DIR=$PWD/tests/simcuda tests/crash/test-crash-soak "
            "--filter '*random*'", "soak summary: rounds 2", "2 rounds instead of 1200 (crash-soak runs 60)",
            needs=built("tests/crash/test-crash-soak")),
    "ninja -C build && scripts/soak --minutes 30 --seed 20261123":
        Run("{src}/scripts/soak --minutes 0.02 --build {build} --seed 20261123 > soak.out 2>&1; s=$?; cat soak.out; "
            "rm -f $(sed -n 's/^soak: .*, log \\(\\S*\\)$/\\1/p' soak.out); exit $s", "bytes lost 0",
            "one round instead of 30 minutes, on the build meson test made", needs=built("tests/crash/soak")),
    "mkdir -p /tmp/fuzz && cd /tmp/fuzz": Run("mkdir -p fuzz && cd fuzz", None, "in the scratch folder"),
    "/path/to/build/tests/fuzz/fuzz-registry -max_total_time=3600 -timeout=10 -create_missing_dirs=1 work "
    "/path/to/ipcshim/tests/fuzz/corpus":
        Run("mkdir -p fuzz && cd fuzz && {build}/tests/fuzz/fuzz-registry -max_total_time=2 -timeout=10 "
            "-create_missing_dirs=1 work {src}/tests/fuzz/corpus", "Done ",
            "2 s instead of an hour (fuzz-registry runs 20 s)", needs=built("tests/fuzz/fuzz-registry")),
    "tests/model/check": Covered("tests/model/meson.build", "lease-model",
                                 "spin's model check of the lease protocol, minutes of it"),
    "rm -f /dev/shm/ipcshim-$(id -u)-job42":
        Run(KILLED_LEFTOVER.format(domain="{domain}-rm") + "; test -e /dev/shm/ipcshim-$(id -u)-{domain}-rm"
            " && rm -f /dev/shm/ipcshim-$(id -u)-{domain}-rm && ! ipcshim-stat --domain {domain}-rm"),
    # docs/usage.md
    "meson setup build": Covered("scripts/lib.sh", "meson setup", "how every test's build folder is made"),
    "ninja -C build": Covered("scripts/lib.sh", "ninja -C", "how every test's build folder is built"),
    "meson install -C build": Covered("tests/tools/test_install.py", "test_meson_install_destdir"),
    "python3 -m venv venv && . venv/bin/activate": Covered("tests/tools/test_wheel.py", '"-m", "venv", PLAIN'),
    "pip install .": Covered("tests/tools/test_wheel.py", "test_pip_install_in_a_plain_venv",
                             "in a plain venv, pip fetching the backend; skips when the package index is unreachable"),
    "ipcshim-run --demo": Covered("tests/tools/test_wheel.py", "demo_and_sim(",
                                  "the venv's ipcshim-run --demo on the simulator inside the wheel"),
    "/usr/bin/python3 -m venv --system-site-packages venv && . venv/bin/activate":
        Covered("tests/tools/test_wheel.py", '"venv", "--system-site-packages"'),
    "pip install --no-build-isolation .": Covered("tests/tools/test_wheel.py", '"--no-build-isolation"',
                                                  "pip wheel of a copy of the tree, then pip install of the wheel"),
    "python -m ipcshim -- ./program":
        Covered("tests/tools/test_wheel.py", "test_python_m_ipcshim_protects_a_program_on_the_simulator"),
    "dpkg-buildpackage -us -uc -b": Covered("tests/tools/test_deb.py", '"dpkg-buildpackage", "-us", "-uc", "-b"'),
    "sudo apt-get install ../ipcshim_0.1.0_amd64.deb ../libipcshim0_0.1.0_amd64.deb ../ipcshim-sim_0.1.0_amd64.deb":
        Covered("tests/tools/test_deb.py", "test_installed_package_runs_a_program",
                "dpkg -i as root with CI set; otherwise the packages are unpacked (dpkg -x) and run"),
    # docs/deploy.md
    "docker build -t ipcshim-app .": NotRun("no container runtime where the tests run; "
                                            "test_dockerfile_build_steps_run runs its build steps"),
    "docker run --gpus all --ipc=host ipcshim-app python3 train.py": NotRun("no container runtime, no GPU"),
    "echo /usr/lib/x86_64-linux-gnu/libipcshim.so.0 | sudo tee -a /etc/ld.so.preload":
        NotRun("changes every process of the machine; tools-deb checks the package's library is at this path"),
    "ipcshim-run -- ./producer": Run("ipcshim-run -- ./producer | ipcshim-run -- ./consumer", "consumer read 0x1010101",
                                     "with its consumer"),
    "IPCSHIM_DOMAIN=job42 ipcshim-run -- python3 train.py":
        Run("IPCSHIM_DOMAIN={domain} ipcshim-run -- python3 standin.py", "consumer 0: ok",
            "a Python program whose child uses CUDA stands in for train.py"),
    "LD_PRELOAD=/usr/local/lib/x86_64-linux-gnu/libipcshim.so.0 ./program":
        Run("LD_PRELOAD={build}/shim/libipcshim.so {pair}", "consumer 0: ok", "the built library, not installed"),
    "cc -o producer producer.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart":
        Run("cc -o producer producer.c -I{cuda}/include -L{cuda}/lib64 -lcudart"),
    "cc -o consumer consumer.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart":
        Run("cc -o consumer consumer.c -I{cuda}/include -L{cuda}/lib64 -lcudart"),
    "ipcshim-run -- sh -c './producer | ./consumer'": Run(None, "consumer read 0x1010101"),
    "cc -o collect collect.c $(pkg-config --cflags ipcshim) -ldl":
        Run("cc -o collect collect.c -I{src}/include -ldl", None,
            "the header from the tree; the installed pkg-config file is tested by tools-install"),
    "ipcshim-run -- ./collect": Run(None, "freed 0 blocks"),
    "ipcshim-run -- python3 train.py": Covered("scripts/gpu-check", "tests/gpu/torch_pair.py", GPU_ONLY),
    # docs/usage.md, "Watching it work": the whole block in one shell (its
    # first line starts the pair in the background for the others), from
    # the checkout's scripts and build folder; the consumer's right reads
    # counted, its wrong ones none.
    "scripts/ipcshim-run --sim -- build/examples/ipc-producer --seconds 20 | "
    "scripts/ipcshim-run --sim -- build/examples/ipc-consumer 2> pair.log &":
        Run("{src}/scripts/ipcshim-run --sim -- {build}/examples/ipc-producer --seconds 20 | "
            "{src}/scripts/ipcshim-run --sim -- {build}/examples/ipc-consumer 2> pair.log & "
            "{src}/scripts/ipcshim-stat --watch 1 --count 4 && "
            "{src}/scripts/ipcshim-stat --json --watch 0.5 --count 20 > run.jsonl && "
            "{src}/scripts/ipcshim-plot run.jsonl -o run.png && "
            "wait && grep -c 'as the producer wrote it' pair.log && ! grep WRONG pair.log && "
            "grep -q 'ipc-producer' run.jsonl && test -s run.png",
            "ipc-consumer", "the block's five lines in one shell, scripts/ and build/ of this checkout and build",
            needs=module("matplotlib")),
    "scripts/ipcshim-stat --watch 1 --count 4": Run("true", None, "run with the block's first line"),
    "scripts/ipcshim-stat --json --watch 0.5 --count 20 > run.jsonl": Run("true", None, "run with the block's first line"),
    "scripts/ipcshim-plot run.jsonl -o run.png": Run("true", None, "run with the block's first line"),
    "wait; grep -c 'as the producer wrote it' pair.log": Run("true", None, "run with the block's first line"),
    "ipcshim-run -- python3 examples/torch_pair.py --seconds 20":
        Run("ipcshim-run -- python3 {src}/examples/torch_pair.py --seconds 3", None,
            "3 s; without PyTorch (or a GPU PyTorch sees) it says so and exits 0"),
    "scripts/ipcshim-run --sim -- build/tests/e2e/pool-ipc --free while-reading":
        Run("IPCSHIM_DOMAIN={domain}-pool {src}/scripts/ipcshim-run --sim -- {build}/tests/e2e/pool-ipc --free "
            "while-reading && test ! -e /dev/shm/ipcshim-$(id -u)-{domain}-pool", "consumer: ok",
            "in a domain of its own, which must be gone after (its processes end with _exit)"),
    "ipcshim-run -- python3 numba_ipc.py": Covered("docs/usage.md", "# numba_ipc.py",
                                                   "needs numba and a GPU: its Python is parsed here"),
    # docs/performance.md
    "scripts/bench --quick": Covered("tests/bench/ipc/meson.build", "'--quick'"),
    "scripts/bench": Covered("tests/bench/ipc/meson.build", "bench-smoke", "the same script at --quick sizes"),
    "scripts/bench --json bench.json": Covered("tests/bench/ipc/meson.build", "bench-smoke",
                                               "the same script at --quick sizes"),
    "scripts/gpu-check --bench": Covered("scripts/gpu-check", "--bench", "needs a GPU"),
    "scripts/gpu-check --bench-only": Covered("scripts/gpu-check", "--bench-only", "needs a GPU"),
    "scripts/bench --instructions": Covered("tests/bench/ipc/meson.build", "bench-instructions"),
    "scripts/bench --repeat 3": Covered("tests/bench/ipc/meson.build", "bench-repeat-smoke",
                                        "the same script at --quick sizes, two runs"),
    # docs/gpu-validation.md
    "scripts/gpu-check --prepare": Covered("scripts/gpu-check", "apt-get download uthash-dev",
                                           "downloads from Debian's registry; the no-GPU path is tested by tools-gpu_check"),
    "scripts/gpu-check --markdown gpu-run.md": Covered("tests/tools/test_gpu_check.py", "--markdown",
                                                       "run on the simulated driver (--simulator)"),
    "scripts/gpu-check --prepare --torch-suite ~/pytorch/test/test_multiprocessing.py":
        Covered("scripts/gpu-check", "pip download -q --only-binary=:all: -d .carry/torch expecttest pytest",
                "downloads from PyPI and needs PyTorch's file; the runner is tested by tools-gpu_check"),
    "scripts/gpu-check --torch-only --torch-filter 'cuda|event' --torch-limit 30":
        Covered("tests/tools/test_gpu_check.py", "--torch-only",
                "needs torch with CUDA; --torch-only runs on the simulated driver (its row skips)"),
    # docs/swap.md
    "IPCSHIM_DEVICE_BUDGET=12G scripts/ipcshim-run -- python train.py":
        Covered("tests/e2e/test_swap.c", "training_at_1_5x_budget_is_correct_bounded_and_history_beats_lru",
                "an nvcc-built training loop stands in for train.py"),
    "IPCSHIM_DEVICE_BUDGET=12G IPCSHIM_STATS=1 ./train":
        Covered("tests/e2e/test_swap.c", "IPCSHIM_STATS", "the same program with the exit report"),
    "IPCSHIM_DEVICE_BUDGET=8G IPCSHIM_TRACE=/tmp/t.trace ./train":
        Covered("tests/e2e/test_swap.c", "trace_records_launches_copies_and_frees"),
    "build/tests/bench/swap-gen --variant train --layers 24 -o /tmp/gen.trace":
        Run("{build}/tests/bench/swap-gen --variant train --layers 24 -o gen.trace && test -s gen.trace"),
    "build/tests/bench/swap-replay /tmp/t.trace --oversub 1.5":
        Run("{build}/tests/bench/swap-gen --variant train --layers 8 -o t.trace && "
            "{build}/tests/bench/swap-replay t.trace --oversub 1.5", "history",
            "on a generated trace instead of one recorded from ./train"),
    "build/tests/bench/swap-bench": Covered("tests/bench/ipc/meson.build", "bench-smoke",
                                            "scripts/bench runs swap-bench; figure 6"),
    "apt-get install -y python3-torch python3-torchvision":
        Covered("tests/swap/test_record.py", "python3-torch", "installs packages; the recorder test skips without them"),
    "/usr/bin/python3 tests/swap/record_traces.py --out tests/swap/traces":
        Covered("tests/swap/test_record.py", "--only", "re-records one trace and compares it with the committed one"),
    "build/tests/bench/swap-real tests/swap/traces/*.trace.xz":
        Covered("tests/bench/meson.build", "swap-real-traces"),
    "build/tests/bench/swap-real --model tests/swap/traces/*.trace.xz tests/swap/model/*.trace.xz":
        Covered("tests/bench/meson.build", "swap-model-traces"),
    "build/tests/bench/swap-real --designs tests/swap/traces/*.trace.xz tests/swap/model/*.trace.xz":
        Run("{build}/tests/bench/swap-gen --variant train --layers 8 -o t.trace && "
            "{build}/tests/bench/swap-real --designs t.trace", "geomean/worst of ms/T_bound",
            "on a generated trace: the committed ones take about 70 s"),
    "build/tests/bench/swap-real --model /tmp/t.trace":
        Run("{build}/tests/bench/swap-gen --variant train --layers 8 -o t.trace && "
            "{build}/tests/bench/swap-real --model t.trace", "goal swap-model-run",
            "on a generated trace instead of one recorded from ./train"),
}

STANDIN = f"""import subprocess, sys
sys.exit(subprocess.call("{PAIR}".split()))
"""


def pages():
    return ["README.md"] + sorted(os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "docs", "*.md")))


def fenced(page):
    """[(lang, body, start, end)]: the fenced blocks of page, in order."""
    text = open(os.path.join(SRC, page)).read()
    return [(m.group(1), m.group(2), m.start(), m.end())
            for m in re.finditer(r"^```(\w*)\n(.*?)^```[ \t]*$", text, re.S | re.M)]


def blocks(page, lang):
    return [body for kind, body, _, _ in fenced(page) if kind == lang]


COMMAND_LANGS = ("sh", "text")


def block_commands(block):
    """The commands of a block: continuation lines joined, comments and blank
    lines dropped, runs of blanks made one."""
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        line = " ".join(re.sub(r"\s+#\s.*$", "", line).split())
        if line and not line.startswith("#"):
            found.append(line)
    return found


def commands():
    """[(page, command)] in page order."""
    return [(page, cmd) for page in pages() for kind, body, _, _ in fenced(page) if kind in COMMAND_LANGS
            for cmd in block_commands(body)]


def shown_outputs():
    """{command: [(page, lines)]}: a plain ``` block with nothing but blank
    lines between it and the ```sh block before it shows what that block's
    last command prints."""
    shown = {}
    for page in pages():
        text = open(os.path.join(SRC, page)).read()
        found = fenced(page)
        for (kind, body, _, end), (nkind, nbody, nstart, _) in zip(found, found[1:]):
            if kind == "sh" and nkind == "" and not text[end:nstart].strip() and block_commands(body):
                shown.setdefault(block_commands(body)[-1], []).append((page, nbody.splitlines()))
    return shown


def line_pattern(line):
    """A line shown in the docs as a pattern: whole numbers exact; a decimal,
    the pid of "ipcshim[PID]" and "…" stand for any."""
    out = []
    for tok in re.split(r"(…|\d+\.\d+|ipcshim\[\d+\])", line):
        if tok == "…":
            out.append(".*?")
        elif re.fullmatch(r"\d+\.\d+", tok):
            out.append(r"\d+\.\d+")
        elif tok.startswith("ipcshim["):
            out.append(r"ipcshim\[\d+\]")
        else:
            out.append(re.escape(tok))
    return re.compile("".join(out) + "$")


def output_mismatch(shown, printed):
    """Why the lines shown differ from those printed, or None: each shown
    line matches a line printed (a different one each), and each line of the
    shim's (ipcshim[PID]: ...) is shown."""
    left = list(printed)
    problems = []
    for line in shown:
        pat = line_pattern(line)
        hit = next((p for p in left if pat.match(p)), None)
        if hit is None:
            problems.append(f"shown, not printed: {line}")
        else:
            left.remove(hit)
    problems += [f"printed, not shown: {p}" for p in left if re.match(r"ipcshim\[\d+\]: ", p)]
    return "\n    ".join(problems) or None


def test_every_option_is_documented_with_its_default():
    env = open(os.path.join(SRC, "docs", "environment.md")).read()
    table = env.split("\n## ")[0]  # the main table: later sections list the commands' own variables
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(IPCSHIM_[A-Z_]+)` \|([^|]*)\|", table, re.M)}
    opts = re.findall(r'^OPT\((\w+),\s*\w+,\s*"([^"]*)"', open(os.path.join(SRC, "core", "options.def")).read(), re.M)
    check(len(opts) > 10, f"options.def parsed: {opts}")
    for name, default in opts:
        var = "IPCSHIM_" + name.upper()
        check(var in rows, f"{var} is not in the table of docs/environment.md")
        if default:
            eq(rows[var], f"`{default}`", f"{var} default in docs/environment.md")


def test_every_command_is_listed():
    shown = commands()
    unknown = [f"{page}: {cmd}" for page, cmd in shown if cmd not in COMMANDS]
    check(not unknown, "commands shown in the docs that no test checks (add them to COMMANDS in "
                       "tests/tools/test_docs.py):\n" + "\n".join(unknown))
    stale = sorted(set(COMMANDS) - {cmd for _, cmd in shown})
    check(not stale, "COMMANDS entries no page shows any more:\n" + "\n".join(stale))


def test_covering_tests_exist():
    for cmd, (kind, path, needle, _, _) in COMMANDS.items():
        if kind != "covered":
            continue
        full = os.path.join(SRC, path)
        check(os.path.exists(full), f"{cmd}: {path} does not exist")
        check(needle in open(full).read(), f"{cmd}: '{needle}' not in {path}")


def test_commands_not_run_say_why():
    for cmd, (kind, _, _, why, _) in COMMANDS.items():
        if kind == "notrun":
            check(why, f"{cmd}: NotRun without a reason")
            print(f"# not run: {cmd}: {why}", flush=True)
    preload = [c for c in COMMANDS if "ld.so.preload" in c]
    deb = open(os.path.join(SRC, "debian", "libipcshim0.install")).read()
    for cmd in preload:
        check("/usr/lib/x86_64-linux-gnu/libipcshim.so.0 " in cmd and "usr/lib/${DEB_HOST_MULTIARCH}/libipcshim.so."
              in deb, f"{cmd}: the path the Debian package installs")


def test_dockerfile_build_steps_run():
    """The build stage of docs/deploy.md's Dockerfile, outside a container:
    its RUN lines that call meson/ninja, with /src, /build and /out moved
    into a scratch folder; the tree it installs has the launcher and the
    library where the second stage copies them from."""
    docker = blocks("docs/deploy.md", "dockerfile")
    eq(len(docker), 1, "one Dockerfile in docs/deploy.md")
    lines = docker[0].replace("\\\n", " ").splitlines()
    steps = [line[4:] for line in lines if line.startswith("RUN ") and "meson" in line]
    check(steps, f"a RUN with meson: {lines}")
    work = tempfile.mkdtemp(prefix="ipcshim-docker-")
    try:
        for step in steps:
            step = re.sub(r"(?<![\w.])/src\b", SRC, step)
            step = re.sub(r"(?<![\w.])/(build|out)\b", lambda m: os.path.join(work, m.group(1)), step)
            status, out, err = run(["bash", "-c", step], cwd=work, timeout=600)
            eq(status, 0, f"RUN {step}: {(out + err)[-2000:]}")
        copy = re.search(r"^COPY --from=build /out(\S+) ", docker[0], re.M)
        check(copy, "the second stage copies from /out")
        root = os.path.join(work, "out") + copy.group(1)
        check(os.access(os.path.join(root, "bin", "ipcshim-run"), os.X_OK), f"{root}bin/ipcshim-run")
        check(glob.glob(os.path.join(root, "lib", "*", "libipcshim.so.0")) or
              glob.glob(os.path.join(root, "lib", "libipcshim.so.0")), f"libipcshim.so.0 under {root}lib")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_python_snippets_parse():
    n = 0
    for page in pages():
        for block in blocks(page, "python"):
            ast.parse(block, filename=page)
            n += 1
    check(n >= 3, f"python blocks found: {n}")
    for script in ("tests/gpu/torch_pair.py", "tests/gpu/cupy_pair.py"):
        ast.parse(open(os.path.join(SRC, script)).read(), filename=script)


def test_troubleshooting_quotes_real_log_messages():
    """Each message quoted in the table of docs/troubleshooting.md is one the
    library prints: its fixed parts (between "…" and placeholders such as N
    or PID) occur in core/ or shim/."""
    source = "".join(open(f).read() for f in glob.glob(os.path.join(SRC, "core", "**", "*.c"), recursive=True) +
                     glob.glob(os.path.join(SRC, "shim", "**", "*.c"), recursive=True))
    text = open(os.path.join(SRC, "docs", "troubleshooting.md")).read()
    table = text[text.index("| message |"):].split("\n\n")[0]
    quoted = 0
    for row in table.splitlines()[2:]:
        for msg in re.findall(r"`([^`]+)`", row.split("|")[1]):
            for part in re.split(r"…|\bN\b|\bPID\b|\bP\b|IPCSHIM_X|0x", msg):
                part = part.strip(" ()")
                if len(part) >= 8:
                    quoted += 1
                    check(part in source, f"'{part}' (from `{msg}`) is not in core/**/*.c or shim/**/*.c")
    check(quoted > 10, f"messages found: {quoted}")


def test_documented_commands_run():
    work = tempfile.mkdtemp(prefix="ipcshim-docs-")
    bindir = os.path.join(work, "bin")
    os.mkdir(bindir)
    os.symlink(os.path.join(SRC, "scripts", "ipcshim-run"), os.path.join(bindir, "ipcshim-run"))
    os.symlink(os.path.join(BUILD, "scripts", "ipcshim-stat"), os.path.join(bindir, "ipcshim-stat"))
    os.symlink(os.path.join(SRC, "scripts", "ipcshim-plot"), os.path.join(bindir, "ipcshim-plot"))
    for block in blocks("docs/usage.md", "c"):
        name = re.match(r"/\* (\w+\.c)", block)
        check(name, f"a C block of docs/usage.md does not start with /* NAME.c: {block[:40]}")
        with open(os.path.join(work, name.group(1)), "w") as f:
            f.write(block)
    with open(os.path.join(work, "standin.py"), "w") as f:
        f.write(STANDIN)
    env = {"PATH": bindir + os.pathsep + os.environ["PATH"], "LD_LIBRARY_PATH": os.environ["SIMCUDA_DIR"],
           "SIMCUDA_MACHINE": DOMAIN, "IPCSHIM_DOMAIN": DOMAIN, "IPCSHIM_BUILD_DIR": BUILD, "LD_PRELOAD": "",
           "IPCSHIM_EXIT_WAIT": "5s"}
    subst = {"src": SRC, "build": BUILD, "cuda": CUDA, "domain": DOMAIN, "pair": PAIR,
             "leaky": os.path.join(os.environ["E2E_BIN_DIR"], "leaky-runtime"),
             "matplotlib_python": python_with("matplotlib")}
    failures = []
    scenario = None
    try:
        # The C examples are built first (README runs them before usage.md
        # shows how to build them), and the domain's registry exists before
        # the ipcshim-stat commands run.
        for c in sorted(glob.glob(os.path.join(work, "*.c"))):
            exe = c[:-2]
            status, out, err = run(["cc", "-o", exe, c, f"-I{CUDA}/include", f"-I{SRC}/include", f"-L{CUDA}/lib64",
                                    "-lcudart", "-ldl"], cwd=work)
            eq(status, 0, f"cc {c}: {err}")
        status, out, err = run(["ipcshim-run", "--", *PAIR.split()], env=env, cwd=work, timeout=120)
        eq(status, 0, f"setup run: {out}{err}")
        # The pair's last process out removed its registry: for the
        # ipcshim-stat commands, processes that hold blocks stay in the
        # domain while they run (stat-scenario, as in test_stat.py).
        scenario = subprocess.Popen([os.path.join(BUILD, "tests", "tools", "stat-scenario"), "leases", DOMAIN],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for line in scenario.stdout:
            if line.strip() == "ready":
                break
        done, shown, ran = set(), shown_outputs(), 0
        for page, cmd in commands():
            kind, how, expect, _, needs = COMMANDS.get(cmd, ("unknown", None, None, None, None))
            if kind != "run" or cmd in done:
                continue
            done.add(cmd)
            missing = needs() if needs else None
            if missing:
                print(f"# skipped here: {cmd}: {missing}", flush=True)
                continue
            line = (how or cmd).format(**subst) if how else cmd
            try:
                status, out, err = run(["bash", "-c", line], env=env, cwd=work, timeout=120)
            except subprocess.TimeoutExpired:
                failures.append(f"{page}: {cmd}\n  ran: {line}\n  timed out")
                continue
            ran += 1
            if status != 0 or (expect and expect not in out + err):
                failures.append(f"{page}: {cmd}\n  ran: {line}\n  status {status}, expected "
                                f"'{expect}'\n  output: {(out + err)[-1500:]}")
                continue
            for where, lines in shown.get(cmd, []):
                why = output_mismatch(lines, (out + err).splitlines())
                if why:
                    failures.append(f"{where}: the output shown after `{cmd}` is not what it prints:\n    {why}\n"
                                    f"  output: {(out + err)[-1500:]}")
        print(f"# {ran} documented command(s) run", flush=True)
        unshown = [f"{page}: {cmd}" for cmd, where in shown.items() for page, _ in where
                   if COMMANDS.get(cmd, ("",))[0] != "run"]
        check(not unshown, "an output shown after a command that is not run here:\n" + "\n".join(unshown))
    finally:
        if scenario:
            scenario.communicate("done\n", timeout=30)
        shutil.rmtree(work, ignore_errors=True)
        for name in os.listdir("/dev/shm"):
            if f"-{UID}-{DOMAIN}" in name:
                os.unlink(os.path.join("/dev/shm", name))
    check(not failures, "\n".join(failures))


if __name__ == "__main__":
    run_all(globals())
