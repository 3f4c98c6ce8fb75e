"""The Debian package: `dpkg-buildpackage -us -uc -b` on a copy of the tree
builds libipcshim0 (the library, soname libipcshim.so.0, in the multiarch
libdir), libipcshim-dev (header, pkg-config file, the .so link), ipcshim
(ipcshim-run, ipcshim-stat, man pages) and ipcshim-sim (the simulated GPU
and the demo's program in a private folder, no shlibs, no ldconfig
trigger); lintian reports no error (its warnings are printed as TAP
comments); the packages unpacked with `dpkg -x` into a temporary root give
a launcher that preloads the unpacked soname, protects a program on the
simulator, and runs `--demo` and `--sim` with the unpacked simulator. A real `dpkg -i` into the system (and
`dpkg -r` afterwards) runs only as root with CI set: a CI machine is
disposable, a developer's is not changed by a test. Skips, saying why,
without debhelper / dpkg-dev / fakeroot."""
import atexit
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402

SOURCE = os.environ["SOURCE_ROOT"]
PID = os.getpid()
UID = os.geteuid()
WORK = tempfile.mkdtemp(prefix="ipcshim-deb-")
atexit.register(shutil.rmtree, WORK, True)
ROOT = os.path.join(WORK, "root")
PAIR = [os.path.join(os.environ["E2E_BIN_DIR"], "pair-runtime"), "--free", "while-reading"]
PACKAGES = ("libipcshim0", "libipcshim-dev", "ipcshim", "ipcshim-sim")
state = {}


def multiarch():
    status, out, _ = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"])
    return out.strip() if status == 0 else None


def sim_env(tag):
    domain = f"deb-{tag}-{PID}"
    return domain, {"LD_LIBRARY_PATH": os.environ["SIMCUDA_DIR"], "SIMCUDA_MACHINE": domain,
                    "IPCSHIM_DOMAIN": domain, "LD_PRELOAD": ""}


def cleanup(domain):
    for name in os.listdir("/dev/shm"):
        if f"-{UID}-{domain}" in name:
            os.unlink(os.path.join("/dev/shm", name))


def debs():
    return {p: os.path.join(WORK, f"{p}_{state['version']}_{state['arch']}.deb") for p in PACKAGES}


def test_dpkg_buildpackage_builds_four_packages():
    missing = [tool for tool, pkg in (("dpkg-buildpackage", "dpkg-dev"), ("dh", "debhelper"),
                                      ("fakeroot", "fakeroot")) if not shutil.which(tool)]
    if missing:
        state["skip"] = f"{', '.join(missing)} not installed (scripts/test --install-deps installs them)"
        return state["skip"]
    src = os.path.join(WORK, "src")
    shutil.copytree(SOURCE, src, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "build", "build-*", ".mesonpy*", "obj-*", "__pycache__",
                                                  ".carry", ".whl"))
    status, out, err = run(["dpkg-checkbuilddeps"], cwd=src)
    if status != 0:
        state["skip"] = f"build dependencies missing ({err.strip()[-300:]}; scripts/test --install-deps installs them)"
        return state["skip"]
    status, out, err = run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, timeout=600)
    eq(status, 0, f"dpkg-buildpackage: {(out + err)[-4000:]}")
    status, out, _ = run(["dpkg-parsechangelog", "-S", "Version"], cwd=src)
    state["version"] = out.strip()
    status, out, _ = run(["dpkg-architecture", "-qDEB_HOST_ARCH"])
    state["arch"] = out.strip()
    for pkg, path in debs().items():
        check(os.path.isfile(path), f"{os.path.basename(path)} built: {os.listdir(WORK)}")
    state["built"] = True


def built():
    if "skip" in state:
        return state["skip"]
    check(state.get("built"), "the packages were built (see the first test)")
    return None


def test_packages_hold_the_library_header_pc_commands_and_man_pages():
    if built():
        return built()
    ma = multiarch()
    want = {"libipcshim0": [f"./usr/lib/{ma}/libipcshim.so.0", f"./usr/lib/{ma}/libipcshim.so.0."],
            "libipcshim-dev": ["./usr/include/ipcshim.h", f"./usr/lib/{ma}/libipcshim.so ",
                               f"./usr/lib/{ma}/pkgconfig/ipcshim.pc"],
            "ipcshim": ["./usr/bin/ipcshim-run", "./usr/bin/ipcshim-stat", "./usr/share/man/man1/ipcshim-run.1",
                        "./usr/share/man/man1/ipcshim-stat.1"],
            "ipcshim-sim": [f"./usr/lib/{ma}/ipcshim/sim/{name}" for name in ("libcuda.so.1", "libcudart.so.13")] +
                           ["./usr/libexec/ipcshim/pair-runtime"]}
    want["ipcshim"] += ["./usr/bin/ipcshim-plot", "./usr/share/doc/ipcshim/examples/ipc_producer.c"]
    for pkg, path in debs().items():
        status, out, err = run(["dpkg-deb", "-c", path])
        eq(status, 0, err)
        for name in want[pkg]:
            check(name in out, f"{pkg} has {name}: {out}")
    status, out, _ = run(["dpkg-deb", "-f", debs()["ipcshim"], "Depends"])
    check("libipcshim0 (= " in out, f"ipcshim depends on its library: {out}")
    check("python3-matplotlib" in out, f"ipcshim depends on matplotlib, for ipcshim-plot: {out}")
    status, out, err = run(["bash", "-c", f"dpkg-deb --fsys-tarfile {debs()['ipcshim']} | tar -xOf - ./usr/bin/ipcshim-plot"
                            " | head -1"])
    eq(out.strip(), "#!/usr/bin/python3", "ipcshim-plot runs Debian's python3")
    status, out, _ = run(["dpkg-deb", "-f", debs()["ipcshim"], "Recommends"])
    check("ipcshim-sim" in out, f"ipcshim recommends the simulator: {out}")
    status, out, err = run(["dpkg-deb", "-c", debs()["ipcshim-sim"]])
    check(not re.search(r"\./usr/lib/[^/]+/lib", out), f"nothing of the simulator on the library path: {out}")
    lib_control = os.path.join(WORK, "lib-control")
    status, out, err = run(["dpkg-deb", "-e", debs()["libipcshim0"], lib_control])
    eq(status, 0, err)
    check("symbols" in os.listdir(lib_control), f"libipcshim0 has a symbols file: {os.listdir(lib_control)}")
    control = os.path.join(WORK, "sim-control")
    status, out, err = run(["dpkg-deb", "-e", debs()["ipcshim-sim"], control])
    eq(status, 0, err)
    check(not {"shlibs", "triggers", "symbols"} & set(os.listdir(control)),
          f"the simulator's libraries are private (no shlibs, no ldconfig trigger): {os.listdir(control)}")


def test_lintian_reports_no_error():
    if built():
        return built()
    if not shutil.which("lintian"):
        return "lintian not installed (scripts/test --install-deps installs it)"
    changes = glob.glob(os.path.join(WORK, "*.changes"))
    # As a user checks a package: every tag, pedantic ones included.
    status, out, err = run(["lintian", "-EvIL", "+pedantic", "--tag-display-limit", "0", *changes], timeout=300)
    tags = [line for line in (out + err).splitlines() if line[:2] in ("E:", "W:", "I:", "X:", "P:")]
    for line in tags:
        print(f"# lintian: {line}", flush=True)
    errors = [line for line in tags if line.startswith("E:")]
    check(not errors, "lintian errors:\n" + "\n".join(errors))
    # Issue 47's notes: the library has a symbols file; no program in /usr/lib.
    noted = [line for line in tags if re.search(r"\b(no-symbols-control-file|executable-in-usr-lib)\b", line)]
    check(not noted, "lintian notes:\n" + "\n".join(noted))


def test_unpacked_launcher_protects_a_program():
    if built():
        return built()
    for path in debs().values():
        status, out, err = run(["dpkg-deb", "-x", path, ROOT])
        eq(status, 0, err)
    ma = multiarch()
    lib = os.path.join(ROOT, "usr", "lib", ma, "libipcshim.so.0")
    if shutil.which("readelf"):
        status, out, err = run(["readelf", "-d", lib])
        check("Library soname: [libipcshim.so.0]" in out and "libcuda" not in out, out)
    launcher = os.path.join(ROOT, "usr", "bin", "ipcshim-run")
    status, out, err = run([launcher, "--version"])
    eq(status, 0, err)
    check(out.startswith("ipcshim-run " + state["version"].split("-")[0]), out)
    domain, env = sim_env("x")
    try:
        status, out, err = run([launcher, "--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env)
        eq(status, 0, err)
        eq(os.path.realpath(out.strip()), os.path.realpath(lib), "the unpacked soname is preloaded")
        status, out, err = run([launcher, "--", *PAIR], env=dict(env, IPCSHIM_STATS="1"))
        eq(status, 0, f"unpacked ipcshim-run: {out}{err}")
        check("consumer 0: ok" in out and "reclaimed: yes" in out, out)
        check("deferred frees 1," in err, f"exit report: {err}")
        # The last process out removed the registry: the stat tool finds none.
        status, out, err = run([os.path.join(ROOT, "usr", "bin", "ipcshim-stat"), "--domain", domain])
        eq(status, 1, f"unpacked ipcshim-stat: {out}{err}")
        check("no registry" in err and not os.path.exists(f"/dev/shm/ipcshim-{os.geteuid()}-{domain}"),
              f"the registry was left behind: {err}")
    finally:
        cleanup(domain)
    demo_and_sim(launcher, os.path.join(ROOT, "usr", "libexec", "ipcshim"), "xsim")


def demo_and_sim(launcher, demodir, tag):
    """The launcher's --demo, and --sim with the demo's program, on the
    packaged simulator (nothing of the build folder on LD_LIBRARY_PATH)."""
    status, out, err = run([launcher, "--demo"], env={"LD_PRELOAD": "", "LD_LIBRARY_PATH": ""}, cwd=WORK, timeout=120)
    eq(status, 0, f"{launcher} --demo: {out}{err}")
    check("ipcshim demo on " in out and "the producer's cudaFree was deferred" in out, out)
    domain, env = sim_env(tag)
    try:
        status, out, err = run([launcher, "--sim", "--", os.path.join(demodir, "pair-runtime"), "--free",
                                "while-reading"], env=dict(env, LD_LIBRARY_PATH=""))
        eq(status, 0, f"{launcher} --sim: {out}{err}")
        check("consumer 0: ok" in out and "reclaimed: yes" in out, out)
    finally:
        cleanup(domain)


def test_installed_package_runs_a_program():
    if built():
        return built()
    if UID != 0 or not os.environ.get("CI"):
        return "a real dpkg -i into the system runs only as root with CI set (the unpacked packages were tested)"
    status, out, _ = run(["dpkg-query", "-W", "-f", "${Status}", "ipcshim"])
    if status == 0 and "installed" in out and "not-installed" not in out:
        return "an ipcshim package is installed already; not replaced by a test"
    try:
        status, out, err = run(["dpkg", "-i", *debs().values()], timeout=120)
        eq(status, 0, f"dpkg -i: {out}{err}")
        domain, env = sim_env("i")
        try:
            status, out, err = run(["/usr/bin/ipcshim-run", "--", *PAIR], env=env)
            eq(status, 0, f"installed ipcshim-run: {out}{err}")
            check("consumer 0: ok" in out, out)
            status, out, err = run(["/usr/bin/ipcshim-run", "--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env)
            eq(out.strip(), f"/usr/lib/{multiarch()}/libipcshim.so.0", "preloads the installed soname")
        finally:
            cleanup(domain)
        demo_and_sim("/usr/bin/ipcshim-run", "/usr/libexec/ipcshim", "isim")
    finally:
        run(["dpkg", "-r", *reversed(PACKAGES)], timeout=120)


if __name__ == "__main__":
    run_all(globals())
