"""`meson install --destdir` into a temporary folder gives a user everything:
the library (with the soname libipcshim.so.0 and the -dev link), the header,
the pkg-config file (with the version), ipcshim-run and ipcshim-stat with
--help and --version, and their man pages; the installed launcher preloads
the installed soname and protects a real program (pair-runtime on the
simulator); the simulated GPU and the demo's program are installed in a
private folder (LIBDIR/ipcshim/sim, -Dsim), with which the installed
`ipcshim-run --demo` and `--sim` work, and without which they say so."""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402

BUILD = os.environ["BUILD_ROOT"]
SOURCE = os.environ["SOURCE_ROOT"]
PID = os.getpid()
UID = os.geteuid()
DEST = tempfile.mkdtemp(prefix="ipcshim-install-")
atexit.register(shutil.rmtree, DEST, True)


def option(name):
    status, out, err = run(["meson", "introspect", "--buildoptions", BUILD])
    eq(status, 0, f"meson introspect: {err}")
    return next(o["value"] for o in json.loads(out) if o["name"] == name)


PREFIX, BINDIR, LIBDIR = option("prefix"), option("bindir"), option("libdir")
INCLUDEDIR, MANDIR = option("includedir"), option("mandir")
SIM = option("sim")
SIMDIR = os.path.join(LIBDIR, "ipcshim", "sim")
DEMODIR = os.path.join(option("libexecdir"), "ipcshim")  # the demo's program: a program, in libexec


def staged(subdir, name=""):
    return os.path.join(DEST + os.path.join(PREFIX, subdir), name)


def sim_env(tag):
    domain = f"inst-{tag}-{PID}"
    return domain, {"LD_LIBRARY_PATH": os.environ["SIMCUDA_DIR"], "SIMCUDA_MACHINE": domain,
                    "IPCSHIM_DOMAIN": domain, "LD_PRELOAD": ""}


def cleanup(domain):
    for name in os.listdir("/dev/shm"):
        if f"-{UID}-{domain}" in name:
            os.unlink(os.path.join("/dev/shm", name))


def test_meson_install_destdir():
    status, out, err = run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir", DEST], timeout=120)
    eq(status, 0, f"meson install: {out}{err}")
    for path in (staged(LIBDIR, "libipcshim.so"), staged(LIBDIR, "libipcshim.so.0"), staged(INCLUDEDIR, "ipcshim.h"),
                 staged(LIBDIR, "pkgconfig/ipcshim.pc"), staged(BINDIR, "ipcshim-run"),
                 staged(BINDIR, "ipcshim-stat"), staged(MANDIR, "man1/ipcshim-run.1"),
                 staged(MANDIR, "man1/ipcshim-stat.1")):
        check(os.path.isfile(path), f"{path} installed")
    for cmd in ("ipcshim-run", "ipcshim-stat"):
        check(os.access(staged(BINDIR, cmd), os.X_OK), f"{cmd} is executable")


def test_installed_launcher_points_at_the_installed_library():
    text = open(staged(BINDIR, "ipcshim-run")).read()
    want = os.path.join(PREFIX, LIBDIR, "libipcshim.so.0")
    check(f'installed_lib="{want}"' in text, f"installed_lib is {want}")
    check(not re.search(r"@LAUNCHER_\w+@", text), "no placeholder left")


def test_library_has_a_soname_and_the_version():
    lib = staged(LIBDIR, "libipcshim.so.0")
    check(os.path.islink(staged(LIBDIR, "libipcshim.so")), "libipcshim.so is the -dev link")
    if shutil.which("readelf"):
        status, out, err = run(["readelf", "-d", lib])
        eq(status, 0, err)
        check("Library soname: [libipcshim.so.0]" in out, out)
        check("libcuda" not in out, f"no NEEDED on a CUDA library: {out}")
    version = option_version()
    probe = ("import ctypes; l = ctypes.CDLL(%r); l.ipcshim_version.restype = ctypes.c_char_p; "
             "print(l.ipcshim_version().decode())" % lib)
    status, out, err = run([sys.executable, "-c", probe], env={"IPCSHIM_LOG": "error"})
    eq(status, 0, err)
    eq(out.strip(), version, "ipcshim_version()")
    pc = open(staged(LIBDIR, "pkgconfig/ipcshim.pc")).read()
    check(re.search(r"^Version: " + re.escape(version) + "$", pc, re.M), f"Version: {version} in ipcshim.pc")
    for cmd in ("ipcshim-run", "ipcshim-stat"):
        status, out, err = run([staged(BINDIR, cmd), "--version"])
        eq(status, 0, f"{cmd} --version: {err}")
        check(out.startswith(f"{cmd} {version}"), f"{cmd} --version: {out}")


def option_version():
    status, out, err = run(["meson", "introspect", "--projectinfo", BUILD])
    eq(status, 0, err)
    return json.loads(out)["version"]


def test_pkg_config_file_and_header_build_a_program():
    pc = open(staged(LIBDIR, "pkgconfig/ipcshim.pc")).read()
    check(re.search(r"^Name: ipcshim$", pc, re.M) and "-lipcshim" in pc, pc)
    if not shutil.which("pkg-config"):
        return "pkg-config not installed"
    env = {"PKG_CONFIG_PATH": staged(LIBDIR, "pkgconfig"), "PKG_CONFIG_SYSROOT_DIR": DEST,
           "PKG_CONFIG_LIBDIR": staged(LIBDIR, "pkgconfig")}
    status, flags, err = run(["pkg-config", "--cflags", "--libs", "ipcshim"], env=env)
    eq(status, 0, f"pkg-config: {err}")
    src = os.path.join(DEST, "use.c")
    with open(src, "w") as f:
        f.write('#include <ipcshim.h>\n#include <stdio.h>\n'
                'int main(void) { struct ipcshim_stats s; int rc = ipcshim_stats(&s, sizeof s);\n'
                '  printf("stats %d version %u active %d\\n", rc, s.version, ipcshim_active()); return rc; }\n')
    exe = os.path.join(DEST, "use")
    status, out, err = run(["cc", src, "-o", exe, *flags.split()])
    eq(status, 0, f"cc {flags}: {err}")
    status, out, err = run([exe], env={"LD_LIBRARY_PATH": staged(LIBDIR), "IPCSHIM_LOG": "error"})
    eq(status, 0, f"program linked with -lipcshim: {out}{err}")
    check("stats 0 version 1 active 1" in out, out)  # loaded and not disabled


def test_installed_commands_have_help_and_man_pages():
    status, out, _ = run([staged(BINDIR, "ipcshim-run"), "--help"])
    eq(status, 0, "ipcshim-run --help")
    check("ipcshim-run [--sim] [--] CMD" in out and "IPCSHIM_LIBRARY" in out, out)
    status, out, _ = run([staged(BINDIR, "ipcshim-stat"), "--help"])
    eq(status, 0, "ipcshim-stat --help")
    man = open(staged(MANDIR, "man1/ipcshim-stat.1")).read()
    for opt in re.findall(r"--[a-z]+", out):
        check(opt.replace("-", r"\-") in man, f"ipcshim-stat.1 documents {opt}")
    man = open(staged(MANDIR, "man1/ipcshim-run.1")).read()
    for opt in ("--sim", "--demo", "--help", "IPCSHIM_LIBRARY", "IPCSHIM_DOMAIN"):
        check(opt.replace("-", r"\-") in man, f"ipcshim-run.1 documents {opt}")
    for page in ("ipcshim-run.1", "ipcshim-stat.1"):
        text = open(staged(MANDIR, "man1/" + page)).read()
        check(text.startswith(".TH ") and ".SH NAME" in text and ".SH SYNOPSIS" in text, f"{page} is a man page")
        if shutil.which("man"):
            status, out, err = run(["man", "-l", staged(MANDIR, "man1/" + page)], env={"MANPAGER": "cat",
                                                                                       "PAGER": "cat"})
            eq(status, 0, f"man -l {page}: {err}")


def test_installed_launcher_protects_a_program():
    prog = os.path.join(os.environ["E2E_BIN_DIR"], "pair-runtime")
    domain, env = sim_env("run")
    try:
        status, out, err = run([prog, "--free", "while-reading"], env=env)
        check(status == 1 and "consumer 0: poison" in out, f"without the shim the consumer reads poison: {out}")
        status, out, err = run([staged(BINDIR, "ipcshim-run"), "--", prog, "--free", "while-reading"],
                               env=dict(env, IPCSHIM_STATS="1"))
        eq(status, 0, f"under the installed launcher: {out}{err}")
        check("consumer 0: ok" in out, out)
        check("reclaimed: yes" in out, out)
        check(": exports 1, " in err and "deferred frees 1," in err, f"exit report: {err}")
        status, out, err = run([staged(BINDIR, "ipcshim-run"), "--", "sh", "-c", 'echo "$LD_PRELOAD"'],
                               env=dict(env, LD_PRELOAD="libfirst.so"))
        eq(status, 0, err)
        first, _, shim = out.strip().partition(":")
        eq(first, "libfirst.so", "LD_PRELOAD keeps what was set first")
        eq(os.path.basename(shim), "libipcshim.so.0", "the launcher preloads the soname")
        eq(os.path.realpath(shim), os.path.realpath(staged(LIBDIR, "libipcshim.so.0")),
           "LD_PRELOAD gets the installed library, appended")
        # The pair's last process out removed its registry: nothing held,
        # nothing left (the stat tool says so, in JSON, and exits 1).
        status, out, err = run([staged(BINDIR, "ipcshim-stat"), "--domain", domain, "--json"])
        eq((status, json.loads(out)["holders"]), (1, []), f"installed ipcshim-stat: {out}{err}")
        check(not os.path.exists(f"/dev/shm/ipcshim-{os.geteuid()}-{domain}"), "the registry was left behind")
    finally:
        cleanup(domain)


def test_installed_launcher_errors():
    status, _, err = run([staged(BINDIR, "ipcshim-run"), "--", "true"], env={"IPCSHIM_LIBRARY": "/nonexistent.so"})
    eq(status, 1, "missing library")
    check("library not found at /nonexistent.so" in err, err)
    # A launcher whose simulator is not where it looks (moved away from it).
    moved = os.path.join(DEST, "moved", "bin")
    os.makedirs(moved, exist_ok=True)
    shutil.copy(staged(BINDIR, "ipcshim-run"), moved)
    for flag in (["--demo"], ["--sim", "--", "true"]):
        status, _, err = run([os.path.join(moved, "ipcshim-run"), *flag],
                             env={"IPCSHIM_LIBRARY": staged(LIBDIR, "libipcshim.so.0")})
        eq(status, 2, f"{flag[0]} without the simulator")
        check(f"ipcshim-run: {flag[0]}: the simulated GPU is not installed" in err and "ipcshim-sim" in err, err)
    # Argument errors name the command, never the script's path or a line.
    for argv, status_want, msg in ((["--bogus"], 2, "ipcshim-run: unknown option --bogus"),
                                   (["--", "no-such-command-here"], 127, "no-such-command-here: command not found"),
                                   (["--", "/"], 126, "/: is a directory")):
        status, _, err = run([staged(BINDIR, "ipcshim-run"), *argv])
        eq(status, status_want, f"ipcshim-run {argv}")
        check(msg in err and "line " not in err and "/bin/ipcshim-run" not in err, f"ipcshim-run {argv}: {err}")


def test_simulator_is_installed_in_a_private_folder():
    if not SIM:
        return "configured with -Dsim=false: no simulator installed"
    for name in ("libcuda.so.1", "libcudart.so.13"):
        check(os.path.isfile(staged(SIMDIR, name)), f"{SIMDIR}/{name} installed")
    check(os.path.isfile(staged(DEMODIR, "pair-runtime")), f"{DEMODIR}/pair-runtime installed")
    # The examples' sources, with the documentation.
    for name in ("ipc_producer.c", "ipc_consumer.c", "torch_pair.py", "README.md"):
        where = os.path.join(option("datadir"), "doc", "ipcshim", "examples")
        check(os.path.isfile(staged(where, name)), f"{where}/{name} installed")
    check(not os.path.exists(staged(LIBDIR, "libcuda.so.1")) and not os.path.exists(staged(LIBDIR, "libcudart.so.13")),
          "nothing of the simulator on the library path")
    text = open(staged(BINDIR, "ipcshim-run")).read()
    check(f'installed_simdir="{os.path.join(PREFIX, SIMDIR)}"' in text, "the launcher knows where it is")


def test_installed_launcher_runs_the_demo_and_sim():
    if not SIM:
        return "configured with -Dsim=false: no simulator installed"
    status, out, err = run([staged(BINDIR, "ipcshim-run"), "--demo"], env={"LD_PRELOAD": ""}, cwd=DEST, timeout=120)
    eq(status, 0, f"installed ipcshim-run --demo: {out}{err}")
    check("ipcshim demo on " in out and "the producer's cudaFree was deferred" in out, out)
    check("the memory was really freed" in out, out)
    domain, senv = sim_env("sim")
    try:
        status, out, err = run([staged(BINDIR, "ipcshim-run"), "--sim", "--", "sh", "-c", 'echo "$LD_LIBRARY_PATH"'],
                               env=dict(senv, LD_LIBRARY_PATH="/elsewhere"))
        eq(status, 0, err)
        eq(out.strip(), os.path.realpath(staged(SIMDIR)) + ":/elsewhere", "--sim puts the installed simulator first")
        status, out, err = run([staged(BINDIR, "ipcshim-run"), "--sim", "--", staged(DEMODIR, "pair-runtime"),
                                "--free", "while-reading"], env=dict(senv, LD_LIBRARY_PATH=""))
        eq(status, 0, f"installed --sim: {out}{err}")
        check("consumer 0: ok" in out and "reclaimed: yes" in out, out)
    finally:
        cleanup(domain)


if __name__ == "__main__":
    run_all(globals())
