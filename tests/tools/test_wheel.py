"""pip install of the wheel, both routes of docs/usage.md:

- offline (Debian): the source tree (a copy) is built with `pip wheel
  --no-build-isolation --no-index` (Debian's python3-mesonpy as the
  backend) and installed into a venv with the system's site packages;
- the README's `pip install .` in a plain venv, where pip fetches
  meson-python, meson and ninja itself (build isolation); skipped when the
  package index cannot be reached.

The installed venv then has ipcshim-run and ipcshim-stat on its PATH,
`python -m ipcshim`, the header and the man pages; the library inside needs
no CUDA library to load; the ipcshim module answers "not active" without
the shim and real numbers under it; a program run with `python -m ipcshim`
on the simulator is protected; and the simulated GPU inside the package
(ipcshim/sim) gives a working `ipcshim-run --demo` and `--sim`. Skips,
saying why, without python3-mesonpy or venv."""
import atexit
import glob
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402

SOURCE = os.environ["SOURCE_ROOT"]
PID = os.getpid()
UID = os.geteuid()
WORK = tempfile.mkdtemp(prefix="ipcshim-wheel-")
atexit.register(shutil.rmtree, WORK, True)
VENV = os.path.join(WORK, "venv")
BIN = os.path.join(VENV, "bin")
PLAIN = os.path.join(WORK, "plain")  # the README's route
PAIR = [os.path.join(os.environ["E2E_BIN_DIR"], "pair-runtime"), "--free", "while-reading"]
state = {}


def python_with_mesonpy():
    """An interpreter that can import mesonpy (Debian's python3-mesonpy is
    for /usr/bin/python3, which need not be the python3 on PATH)."""
    for py in dict.fromkeys([sys.executable, shutil.which("python3"), "/usr/bin/python3"]):
        if py and os.path.exists(py) and run([py, "-c", "import mesonpy"])[0] == 0:
            return py
    return None


def sim_env(tag):
    domain = f"whl-{tag}-{PID}"
    return domain, {"LD_LIBRARY_PATH": os.environ["SIMCUDA_DIR"], "SIMCUDA_MACHINE": domain,
                    "IPCSHIM_DOMAIN": domain, "LD_PRELOAD": "", "PATH": BIN + os.pathsep + os.environ["PATH"]}


def cleanup(domain):
    for name in os.listdir("/dev/shm"):
        if f"-{UID}-{domain}" in name:
            os.unlink(os.path.join("/dev/shm", name))


def source_copy():
    """A copy of the tree: meson-python builds inside the source folder."""
    src = os.path.join(WORK, "src")
    if not os.path.isdir(src):
        shutil.copytree(SOURCE, src, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "build", "build-*", ".mesonpy*", "obj-*", "__pycache__",
                                                      ".carry", ".whl"))
    return src


def test_wheel_builds_and_installs_into_a_venv():
    py = python_with_mesonpy()
    if not py:
        state["skip"] = "python3-mesonpy is not installed (scripts/test --install-deps installs it)"
        return state["skip"]
    status, out, err = run([py, "-m", "venv", "--system-site-packages", VENV])
    if status != 0:
        state["skip"] = f"python3 -m venv does not work here (python3-venv): {err.strip()[-200:]}"
        return state["skip"]
    src = source_copy()
    wheels = os.path.join(WORK, "wheels")
    status, out, err = run([os.path.join(BIN, "python"), "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
                            "--no-deps", "-w", wheels, src], timeout=600, env={"PIP_NO_CACHE_DIR": "1"})
    eq(status, 0, f"pip wheel: {out[-3000:]}{err[-3000:]}")
    found = glob.glob(os.path.join(wheels, "ipcshim-*.whl"))
    eq(len(found), 1, f"one wheel in {os.listdir(wheels)}")
    status, out, err = run([os.path.join(BIN, "python"), "-m", "pip", "install", "--no-index", "--no-deps", found[0]],
                           timeout=120)
    eq(status, 0, f"pip install: {out}{err}")


def installed():
    if "skip" in state:
        return state["skip"]
    check(os.path.exists(os.path.join(BIN, "ipcshim-run")), "the wheel is installed (see the first test)")
    return None


def test_commands_header_and_man_pages_are_installed():
    if installed():
        return installed()
    for cmd in ("ipcshim-run", "ipcshim-stat"):
        status, out, err = run([os.path.join(BIN, cmd), "--version"])
        eq(status, 0, f"{cmd} --version: {err}")
        check(out.startswith(cmd + " 0.") or out.startswith(cmd + " 1."), f"{cmd} --version: {out}")
        status, out, err = run([os.path.join(BIN, cmd), "--help"])
        eq(status, 0, f"{cmd} --help: {err}")
    status, out, err = run([os.path.join(BIN, "python"), "-m", "ipcshim", "--help"])
    eq(status, 0, err)
    check("ipcshim-run [--sim] [--] CMD" in out, f"python -m ipcshim --help is the launcher's: {out}")
    check(glob.glob(os.path.join(VENV, "include", "**", "ipcshim.h"), recursive=True), "ipcshim.h in the venv")
    for page in ("ipcshim-run.1", "ipcshim-stat.1"):
        check(os.path.isfile(os.path.join(VENV, "share", "man", "man1", page)), f"share/man/man1/{page}")
    # ipcshim-plot runs the venv's Python (pip rewrote its #!python), and
    # without matplotlib there says to install the plot extra into it.
    plot = os.path.join(BIN, "ipcshim-plot")
    first = open(plot).readline().strip()
    check(first.startswith("#!") and os.path.realpath(first[2:]) == os.path.realpath(os.path.join(BIN, "python")),
          f"ipcshim-plot's #! is the venv's Python: {first}")
    status, out, err = run([plot, "--version"])
    eq(status, 0, f"ipcshim-plot --version: {err}")
    if run([os.path.join(BIN, "python"), "-c", "import matplotlib"])[0] != 0:
        log = os.path.join(WORK, "one.jsonl")
        with open(log, "w") as f:
            f.write('{"format": "ipcshim-stat", "domain": "d", "time_unix_ms": 1, "holders": [], "blocks": []}\n')
        status, out, err = run([plot, log, "-o", os.path.join(WORK, "one.png")])
        eq(status, 3, f"no matplotlib in the venv: {out}{err}")
        check("-m pip install 'ipcshim[plot]'" in err, err)
    check(os.path.isfile(os.path.join(VENV, "share", "doc", "ipcshim", "examples", "ipc_producer.c")),
          "the examples' sources in share/doc/ipcshim/examples")


def test_library_needs_no_cuda_library():
    if installed():
        return installed()
    status, lib, err = run([os.path.join(BIN, "python"), "-c", "import ipcshim; print(ipcshim.library())"])
    eq(status, 0, err)
    lib = lib.strip()
    check(os.path.isfile(lib), f"ipcshim.library() is a file: {lib}")
    if shutil.which("readelf"):
        status, out, err = run(["readelf", "-d", lib])
        eq(status, 0, err)
        check("libcuda" not in out, f"no NEEDED on libcuda/libcudart: {out}")


def test_module_without_the_shim_says_not_active():
    if installed():
        return installed()
    probe = "import ipcshim; print(ipcshim.loaded(), ipcshim.active(), ipcshim.collect(), ipcshim.stats())"
    status, out, err = run([os.path.join(BIN, "python"), "-c", probe], env={"LD_PRELOAD": ""})
    eq(status, 0, err)
    eq(out.strip(), "False False 0 None", "the module outside the shim")


def test_module_under_the_shim_reads_its_numbers():
    if installed():
        return installed()
    domain, env = sim_env("mod")
    probe = ("import ipcshim; s = ipcshim.stats(); "
             "print(ipcshim.loaded(), ipcshim.version(), s['version'], s['size'], ipcshim.collect())")
    try:
        status, out, err = run([os.path.join(BIN, "ipcshim-run"), "--", os.path.join(BIN, "python"), "-c", probe],
                               env=env)
        eq(status, 0, f"{out}{err}")
        fields = out.split()
        eq(fields[0], "True", f"loaded under ipcshim-run: {out}")
        check(fields[1].count(".") == 2, f"ipcshim.version(): {out}")
        eq(fields[2:], ["1", "112", "0"], "stats version and size; nothing to collect")
    finally:
        cleanup(domain)


def test_python_m_ipcshim_protects_a_program_on_the_simulator():
    if installed():
        return installed()
    domain, env = sim_env("run")
    try:
        status, out, err = run(PAIR, env=env)
        check(status == 1 and "consumer 0: poison" in out, f"without the shim the consumer reads poison: {out}")
        status, out, err = run([os.path.join(BIN, "python"), "-m", "ipcshim", "--", *PAIR],
                               env=dict(env, IPCSHIM_STATS="1"))
        eq(status, 0, f"python -m ipcshim: {out}{err}")
        check("consumer 0: ok" in out and "reclaimed: yes" in out, out)
        check(": exports 1, " in err and "deferred frees 1," in err, f"exit report: {err}")
        status, out, err = run(["ipcshim-run", "--", *PAIR], env=env)
        eq(status, 0, f"ipcshim-run on the venv's PATH: {out}{err}")
        check("consumer 0: ok" in out, out)
        # The last process out removed the registry: the stat tool finds
        # nothing held (JSON all the same, exit status 1).
        status, out, err = run(["ipcshim-stat", "--domain", domain, "--json"], env=env)
        eq(status, 1, f"the venv's ipcshim-stat: {out}{err}")
        check('"holders": []' in out.replace('"holders":[]', '"holders": []'), f"nothing held: {out[:300]}")
        check(not os.path.exists(f"/dev/shm/ipcshim-{os.geteuid()}-{domain}"), "the registry was left behind")
    finally:
        cleanup(domain)


def package_dir(venv):
    status, out, err = run([os.path.join(venv, "bin", "python"), "-c",
                            "import ipcshim, os; print(os.path.dirname(ipcshim.__file__))"])
    eq(status, 0, err)
    return out.strip()


def demo_and_sim(venv, tag):
    """ipcshim-run --demo and --sim of the venv, with the simulator the wheel
    carries (nothing of the build folder on LD_LIBRARY_PATH)."""
    simdir = os.path.join(package_dir(venv), "sim")
    for name in ("libcuda.so.1", "libcudart.so.13", "pair-runtime"):
        check(os.path.isfile(os.path.join(simdir, name)), f"ipcshim/sim/{name} in the wheel")
    status, out, err = run([os.path.join(venv, "bin", "ipcshim-run"), "--demo"], env={"LD_PRELOAD": ""}, cwd=WORK,
                           timeout=120)
    eq(status, 0, f"the venv's ipcshim-run --demo: {out}{err}")
    check("ipcshim demo on " in out and "the producer's cudaFree was deferred" in out, out)
    domain, env = sim_env(tag)
    try:
        env.update(LD_LIBRARY_PATH="", PATH=os.path.join(venv, "bin") + os.pathsep + os.environ["PATH"])
        status, out, err = run([os.path.join(venv, "bin", "python"), "-m", "ipcshim", "--sim", "--",
                                os.path.join(simdir, "pair-runtime"), "--free", "while-reading"], env=env)
        eq(status, 0, f"python -m ipcshim --sim: {out}{err}")
        check("consumer 0: ok" in out and "reclaimed: yes" in out, out)
    finally:
        cleanup(domain)


def test_installed_demo_and_sim_use_the_packaged_simulator():
    if installed():
        return installed()
    demo_and_sim(VENV, "sim")


def test_pip_install_in_a_plain_venv():
    """The README's line, `pip install .`, in a venv without the system's
    packages: pip brings the build backend (pyproject.toml)."""
    status, out, err = run([sys.executable, "-m", "venv", PLAIN])
    if status != 0:
        return f"{sys.executable} -m venv does not work here: {err.strip()[-200:]}"
    pip = [os.path.join(PLAIN, "bin", "python"), "-m", "pip"]
    probe = os.path.join(WORK, "probe")
    status, out, err = run([*pip, "download", "--no-deps", "--only-binary", ":all:", "-d", probe, "meson-python"],
                           timeout=120)
    if status != 0:
        return f"the package index cannot be reached (pip download meson-python: {err.strip()[-200:]})"
    status, out, err = run([*pip, "install", source_copy()], timeout=600, env={"PIP_NO_CACHE_DIR": "1"})
    eq(status, 0, f"pip install .: {out[-3000:]}{err[-3000:]}")
    demo_and_sim(PLAIN, "plain")


if __name__ == "__main__":
    run_all(globals())
