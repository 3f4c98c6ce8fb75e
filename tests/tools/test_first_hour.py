"""A new user's first hour (issue 47): each thing that made a user give up or
lose trust, tried the way the user tried it (the shell command, its
environment, the output read), on the simulated GPU:

- a bad IPCSHIM_DOMAIN keeps protection on (the default domain), said once;
- a misspelled IPCSHIM_* name is named, with the closest known one;
- scripts/ipcshim-stat runs in a checkout, as the README's layout says;
- the launcher says how to run on the simulated GPU when it finds no driver;
- the pool example of docs/usage.md leaves no registry behind (its
  processes end with _exit);
- ipcshim-stat --watch in text writes each snapshot into a file as it takes it;
- IPCSHIM_LOG=debug shows export, open, deferred free and reclaim;
- the size suffix T is documented;
- the examples run as long as asked, say what they read, and show by name
  in ipcshim-stat; without the shim the consumer says WRONG;
- ipcshim-plot: a clean run drawn without red marks, two consumers with the
  same values both visible, and advice that names the Python that ran it.

The launcher's quiet build and the demo's words are checked by tools-cli
(test_launcher_build_errors_name_what_is_missing); the documented commands
of "Watching it work" by tools-docs."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402

SRC = os.environ["SOURCE_ROOT"]
BUILD = os.environ["BUILD_ROOT"]
UID = os.geteuid()
PID = os.getpid()
RUN = os.path.join(SRC, "scripts", "ipcshim-run")
STAT = os.environ["STAT_BIN"]
PLOT = os.path.join(SRC, "scripts", "ipcshim-plot")
PAIR = os.path.join(os.environ["E2E_BIN_DIR"], "pair-runtime")
PRODUCER = os.path.join(BUILD, "examples", "ipc-producer")
CONSUMER = os.path.join(BUILD, "examples", "ipc-consumer")


def env_for(domain, **more):
    """The environment of a user's shell in a checkout: the test build, the
    simulated GPU on its own machine name, a domain of the test's own."""
    env = {"IPCSHIM_BUILD_DIR": BUILD, "SIMCUDA_MACHINE": domain, "IPCSHIM_DOMAIN": domain, "LD_PRELOAD": ""}
    env.update(more)
    return env


def shell(command, env, timeout=120):
    return run(["bash", "-c", command], env=env, timeout=timeout, cwd=tempfile.gettempdir())


def remove_shm(domain):
    for name in os.listdir("/dev/shm"):
        if f"-{UID}-{domain}" in name:
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def python_with(module):
    for exe in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(exe) and subprocess.run([exe, "-c", f"import {module}"],
                                                  capture_output=True).returncode == 0:
            return exe
    return None


def shim_lines(text, needle):
    return [line for line in text.splitlines() if line.startswith("ipcshim[") and needle in line]


def test_bad_domain_keeps_protection_and_says_so_once():
    # IPCSHIM_DOMAIN=job/42: the registry name it would make is no file
    # name; the default domain is used, so the pair is still protected.
    domain = f"fh-dom-{PID}"
    env = env_for(domain, IPCSHIM_DOMAIN="job/42")
    status, out, err = shell(f"{RUN} --sim -- {PAIR} --free while-reading", env)
    text = out + err
    eq(status, 0, f"the pair under the shim with a bad domain: {text}")
    check("consumer 0: ok" in text, f"protected (the consumer read the data, not poison): {text}")
    said = shim_lines(text, "IPCSHIM_DOMAIN=job/42 is not valid")
    eq(len(said), 1, f"one line about the bad domain: {text}")
    check("using the default default" in said[0], said[0])
    check("not tracking" not in text, f"tracking kept: {text}")
    remove_shm(domain)


def test_misspelled_variables_are_named_with_the_closest_known_one():
    domain = f"fh-names-{PID}"
    env = env_for(domain, IPCSHIM_LOG_LEVEL="info", IPCSHIM_EXITWAIT="10s")
    status, out, err = shell(f"{RUN} --sim -- {PAIR} --free while-reading", env)
    text = out + err
    eq(status, 0, text)
    for wrong, right in (("IPCSHIM_LOG_LEVEL", "IPCSHIM_LOG"), ("IPCSHIM_EXITWAIT", "IPCSHIM_EXIT_WAIT")):
        said = shim_lines(text, f"{wrong} is not an ipcshim setting (did you mean {right}?)")
        eq(len(said), 1, f"{wrong}: one line for the pipeline (said once per domain): {text}")
    # The commands' own variables are known names: no line for them.
    status, out, err = shell(f"IPCSHIM_APT_LOCK_WAIT=5 {RUN} --sim -- {PAIR} --free while-reading", env)
    check("IPCSHIM_APT_LOCK_WAIT is not" not in out + err and "IPCSHIM_BUILD_DIR is not" not in out + err,
          out + err)
    remove_shm(domain)


def test_scripts_ipcshim_stat_runs_in_a_checkout():
    # The README's layout lists scripts/ipcshim-stat.
    path = os.path.join(SRC, "scripts", "ipcshim-stat")
    check(os.access(path, os.X_OK), f"{path} is not there (README: scripts/ holds ipcshim-stat)")
    status, out, err = run([path, "--version"], env={"IPCSHIM_BUILD_DIR": BUILD}, timeout=300)
    eq(status, 0, f"scripts/ipcshim-stat --version: {out}{err}")
    check(out.startswith("ipcshim-stat "), out)


def has_driver():
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout if os.path.exists(ldconfig) else ""
    return "libcuda.so.1 " in out


def test_launcher_without_a_driver_says_how_to_use_the_simulator():
    if has_driver():
        return "this machine has a CUDA driver (libcuda.so.1 in the loader's cache)"
    # docs/usage.md's pool example, first tried without --sim.
    pool = os.path.join(os.environ["E2E_BIN_DIR"], "pool-ipc")
    domain = f"fh-nodrv-{PID}"
    status, out, err = shell(f"{RUN} -- {pool} --free while-reading", env_for(domain, LD_LIBRARY_PATH=""))
    check(status != 0 and "libcuda.so.1" in err, f"fails without a driver: {status} {err}")
    check(f"ipcshim-run --sim -- {pool} --free while-reading" in err, f"names the --sim command: {err}")
    # With the simulator on the library path (or --sim), no hint.
    status, out, err = shell(f"{RUN} -- true", env_for(domain, LD_LIBRARY_PATH=os.environ["SIMCUDA_DIR"]))
    check(status == 0 and "--sim" not in err, err)
    remove_shm(domain)


def test_pool_example_leaves_no_registry_behind():
    # Its producer and consumer are fork children that end with _exit.
    domain = f"fh-pool-{PID}"
    pool = os.path.join(os.environ["E2E_BIN_DIR"], "pool-ipc")
    try:
        status, out, err = shell(f"{RUN} --sim -- {pool} --free while-reading", env_for(domain))
        eq(status, 0, out + err)
        check("consumer: ok" in out, out)
        left = f"/dev/shm/ipcshim-{UID}-{domain}"
        check(not os.path.exists(left), f"{left} left behind by a clean run: "
                                        f"{run([STAT, '--domain', domain])[1]}")
    finally:
        remove_shm(domain)


VFORK_EXIT = r"""
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    void *p;
    cudaIpcMemHandle_t h;
    if (cudaMalloc(&p, 1 << 20) || cudaIpcGetMemHandle(&h, p)) return 2;
    pid_t c = vfork(); /* the child shares our memory: its _exit must release nothing of ours */
    if (c == 0) _exit(0);
    waitpid(c, NULL, 0);
    fflush(stdout);
    return system(argv[1]) == 0 ? 0 : 3; /* ipcshim-stat --json, while we still hold the export */
}
"""


def test_a_vfork_childs_exit_leaves_its_parent_tracked():
    # _exit is interposed (a fork child's release); a vfork child shares
    # its parent's memory and must not release the parent's holder.
    cuda = run(["meson", "introspect", "--buildoptions", BUILD])[1]
    toolkit = (re.findall(r'"name": "toolkit", "value": "([^"]+)"', cuda) or [None])[0]
    toolkit = toolkit or os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    work = tempfile.mkdtemp(prefix="ipcshim-fh-vfork-")
    domain = f"fh-vfork-{PID}"
    try:
        src, exe = os.path.join(work, "vfork_exit.c"), os.path.join(work, "vfork-exit")
        with open(src, "w") as f:
            f.write(VFORK_EXIT)
        status, out, err = run(["cc", "-o", exe, src, f"-I{toolkit}/include", f"-L{toolkit}/lib64",
                                f"-L{toolkit}/lib", "-lcudart"])
        eq(status, 0, f"cc: {err}")
        status, out, err = shell(f"{RUN} --sim -- {exe} '{STAT} --json'", env_for(domain))
        eq(status, 0, out + err)
        snap = json.loads(out.strip().splitlines()[-1])
        mine = [h for h in snap["holders"] if h["exports"] == 1]
        eq(len(mine), 1, f"the parent still holds its export after the vfork child's _exit: {out}")
        check(not os.path.exists(f"/dev/shm/ipcshim-{UID}-{domain}"), "and its own exit removed the registry")
    finally:
        remove_shm(domain)
        shutil.rmtree(work, ignore_errors=True)


def test_stat_watch_text_is_written_per_snapshot():
    # ipcshim-stat --watch 0.2 > watch.txt, read while it runs.
    work = tempfile.mkdtemp(prefix="ipcshim-fh-watch-")
    out_path = os.path.join(work, "watch.txt")
    try:
        with open(out_path, "w") as f:
            p = subprocess.Popen([STAT, "--domain", f"fh-none-{PID}", "--watch", "0.2"], stdout=f,
                                 stderr=subprocess.DEVNULL)
            time.sleep(1.5)
            seen = open(out_path).read()
            p.terminate()
            p.wait(timeout=10)
        check(seen.count("---- ") >= 3, f"snapshots in the file while it ran: {seen!r}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_debug_log_shows_export_open_deferred_free_and_reclaim():
    domain = f"fh-debug-{PID}"
    status, out, err = shell(f"{RUN} --sim -- {PAIR} --free while-reading", env_for(domain, IPCSHIM_LOG="debug"))
    text = out + err
    eq(status, 0, text)
    for what in (r"debug: export of 0x[0-9a-f]+ \(1048576 bytes, device 0\): block \d+",
                 r"debug: open of block \d+: mapped at 0x[0-9a-f]+",
                 r"debug: free of 0x[0-9a-f]+ deferred",
                 r"debug: reclaimed 0x[0-9a-f]+ \(1048576 bytes, block \d+\) after [\d.]+ ms in limbo"):
        check(re.search(what, text), f"no line /{what}/ in:\n{text}")
    remove_shm(domain)


def test_size_suffix_t_is_documented():
    env_md = open(os.path.join(SRC, "docs", "environment.md")).read()
    check(re.search(r"sizes take `K`, `M`, `G`, `T` suffixes", env_md), "docs/environment.md lists T")
    domain = f"fh-t-{PID}"
    status, out, err = shell(f"{RUN} --sim -- {PAIR} --free after-close",
                             env_for(domain, IPCSHIM_LOG="info", IPCSHIM_DEVICE_BUDGET="1T"))
    check("IPCSHIM_DEVICE_BUDGET=1099511627776" in out + err, out + err)
    remove_shm(domain)


def run_examples(domain, seconds, shim=True, stat_while=False):
    """ipc-producer --seconds N | ipc-consumer, as docs/usage.md runs them;
    returns (status, stderr of both, ipcshim-stat output taken meanwhile)."""
    prefix = f"{RUN} --sim -- " if shim else ""
    env = env_for(domain) if shim else env_for(domain, LD_LIBRARY_PATH=os.environ["SIMCUDA_DIR"])
    full = dict(os.environ)
    full.update(env)
    p = subprocess.Popen(["bash", "-c", f"{prefix}{PRODUCER} --seconds {seconds} | {prefix}{CONSUMER}"],
                         env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    snapshot = ""
    if stat_while:
        deadline = time.time() + 30
        while time.time() < deadline and "ipc-consumer" not in snapshot:
            time.sleep(0.5)
            snapshot = run([STAT, "--domain", domain])[1]
    out, err = p.communicate(timeout=120)
    return p.returncode, out + err, snapshot


def test_examples_run_as_long_as_asked_and_say_what_they_read():
    domain = f"fh-ex-{PID}"
    check(os.access(PRODUCER, os.X_OK) and os.access(CONSUMER, os.X_OK), "build/examples/ipc-producer, ipc-consumer")
    try:
        start = time.time()
        status, text, snapshot = run_examples(domain, 4, stat_while=True)
        took = time.time() - start
        eq(status, 0, text)
        check(took >= 4, f"ran {took:.1f} s, asked for 4")
        check(re.search(r"producer \(pid \d+\): block 2: 4 MiB at 0x[0-9a-f]+, every word 0x02020202, shared", text),
              text)
        check("block 1: freed with cudaFree, while the consumer may still read it" in text, text)
        reads = re.findall(r"block \d+: read 4 MiB, every word 0x[0-9a-f]{8}, as the producer wrote it", text)
        check(len(reads) >= 8 and "WRONG" not in text, text)
        check("done: every read was right" in text, text)
        # Their own names in ipcshim-stat, not "exe".
        check("ipc-producer" in snapshot and "ipc-consumer" in snapshot, snapshot)
        # The same pair without the shim: the consumer says what it saw.
        status, text, _ = run_examples(domain + "-bare", 3, shim=False)
        eq(status, 1, f"without the shim the consumer reads freed memory: {text}")
        check(re.search(r"block 1: WRONG: \d+ of \d+ words are not 0x01010101", text), text)
    finally:
        remove_shm(domain)
        remove_shm(domain + "-bare")


def test_torch_example_skips_cleanly_without_torch():
    if python_with("torch"):
        return "PyTorch is installed here: the example runs (on a GPU), nothing to skip"
    status, out, err = run([sys.executable, os.path.join(SRC, "examples", "torch_pair.py"), "--seconds", "1"])
    eq(status, 0, out + err)
    check("PyTorch is not installed" in err, err)


def snapshot(t_ms, holders, swept=None, domain="fh"):
    full = [dict({"pid": 0, "alive": True, "command": "prog", "imports": 0, "opens": 0, "exported_bytes": 0,
                  "imported_bytes": 0, "limbo_bytes": 0, "dead_pinned_bytes": 0}, **h) for h in holders]
    s = {"format": "ipcshim-stat", "version": 1, "domain": domain, "time_unix_ms": t_ms, "holders": full,
         "blocks": []}
    if swept is not None:
        s["swept"] = swept
    return json.dumps(s)


def test_plot_of_a_clean_run_has_no_red_marks():
    # A real run of the examples, recorded as docs/usage.md records it.
    py = python_with("matplotlib")
    if not py:
        return "matplotlib is not installed (Debian: python3-matplotlib)"
    domain = f"fh-plot-{PID}"
    work = tempfile.mkdtemp(prefix="ipcshim-fh-plot-")
    log, png = os.path.join(work, "run.jsonl"), os.path.join(work, "run.png")
    try:
        full = dict(os.environ)
        full.update(env_for(domain))
        p = subprocess.Popen(["bash", "-c", f"{RUN} --sim -- {PRODUCER} --seconds 4 | {RUN} --sim -- {CONSUMER}"],
                             env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with open(log, "w") as f:
            subprocess.run([STAT, "--domain", domain, "--json", "--watch", "0.2", "--count", "30"], stdout=f,
                           stderr=subprocess.DEVNULL, timeout=60)
        out, err = p.communicate(timeout=60)
        eq(p.returncode, 0, out + err)
        status, out, err = run([py, PLOT, log, "-o", png])
        eq(status, 0, out + err)
        check(" left between " not in out and "seen dead" not in out, f"a clean run marked as a crash: {out}")
        # The consumer's mappings ended with its clean exit: said so.
        check(re.search(r"pid \d+ \(ipc-consumer\) exited between", out) or "ipc-consumer" not in out, out)
        # A kill is still a kill: a holder that left while one was swept.
        consumer = {"pid": 11, "imports": 1, "opens": 1, "imported_bytes": 1 << 20, "command": "c"}
        producer = {"pid": 10, "exported_bytes": 1 << 20, "command": "p"}
        with open(log, "w") as f:
            f.write(snapshot(1000, [producer, consumer], swept=0) + "\n" + snapshot(1500, [producer], swept=1) + "\n")
        status, out, err = run([py, PLOT, log, "-o", png])
        check(status == 0 and "pid 11 (c) left between 0.00 s and 0.50 s holding 1.0MiB (killed: swept by the shim)"
              in out, out + err)
        with open(log, "w") as f:
            f.write(snapshot(1000, [producer, consumer], swept=3) + "\n" + snapshot(1500, [producer], swept=3) + "\n")
        status, out, err = run([py, PLOT, log, "-o", png])
        check(status == 0 and "pid 11 (c) exited between" in out and "left between" not in out, out + err)
    finally:
        remove_shm(domain)
        shutil.rmtree(work, ignore_errors=True)


def test_plot_draws_consumers_with_the_same_values_both_visible():
    py = python_with("matplotlib")
    if not py:
        return "matplotlib is not installed (Debian: python3-matplotlib)"
    work = tempfile.mkdtemp(prefix="ipcshim-fh-same-")
    try:
        producer = {"pid": 10, "exported_bytes": 1 << 20, "command": "p"}
        a = {"pid": 11, "imports": 1, "opens": 1, "imported_bytes": 1 << 20, "command": "a"}
        b = dict(a, pid=12, command="b")
        log, png = os.path.join(work, "same.jsonl"), os.path.join(work, "same.png")
        with open(log, "w") as f:
            for t in range(1000, 4000, 500):
                f.write(snapshot(t, [producer, a, b], swept=0) + "\n")
        status, out, err = run([py, PLOT, log, "-o", png])
        eq(status, 0, out + err)
        # Pixels of each consumer's colour (matplotlib's C1, C2) in the
        # panels, above the legend: both lines show.
        count = r"""
import sys
import matplotlib.image as im
import matplotlib.colors as mc
img = im.imread(sys.argv[1])
h = img.shape[0]
top = img[: int(h * 0.72), :, :3]
for c in ("C1", "C2"):
    r, g, b = mc.to_rgb(c)
    near = ((abs(top[:, :, 0] - r) < 0.08) & (abs(top[:, :, 1] - g) < 0.08) & (abs(top[:, :, 2] - b) < 0.08)).sum()
    print(c, int(near))
"""
        status, out, err = run([py, "-c", count, png])
        eq(status, 0, err)
        pixels = dict(line.split() for line in out.splitlines())
        check(int(pixels["C1"]) > 100 and int(pixels["C2"]) > 100,
              f"consumer a (C1) and b (C2) both visible in the panels: {pixels}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_plot_without_matplotlib_names_the_python_and_how_to_install():
    # The python3 on PATH without matplotlib (a venv made without the
    # system's packages): the advice names it, not apt-get.
    work = tempfile.mkdtemp(prefix="ipcshim-fh-venv-")
    try:
        status, out, err = run([sys.executable, "-m", "venv", "--without-pip", os.path.join(work, "venv")],
                               timeout=120)
        if status != 0:
            return f"cannot make a venv here: {err.strip()[-200:]}"
        venv_python = os.path.join(work, "venv", "bin", "python3")
        if subprocess.run([venv_python, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            return "the venv imports matplotlib"
        log = os.path.join(work, "run.jsonl")
        with open(log, "w") as f:
            f.write(snapshot(1000, [{"pid": 10}]) + "\n")
        # Run by the venv's Python, as an installed copy with its #! would be.
        env = {"_IPCSHIM_PLOT_REEXEC": "1"}
        status, out, err = run([venv_python, PLOT, log, "-o", os.path.join(work, "run.png")], env=env)
        eq(status, 3, out + err)
        check(venv_python in err and "-m pip install matplotlib" in err and "apt-get" not in err, err)
        # In a checkout, a python3 without matplotlib hands over to
        # /usr/bin/python3 when that one has it.
        if python_with("matplotlib") == "/usr/bin/python3" and sys.executable != "/usr/bin/python3":
            status, out, err = run([venv_python, PLOT, log, "-o", os.path.join(work, "run.png")])
            eq(status, 0, f"handed over to /usr/bin/python3: {out}{err}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run_all(globals())
