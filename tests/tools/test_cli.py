"""The project's commands as a user meets them: plain --help texts (no
script source), --version, argument errors that name the command and never
a script path or line, `--json` without a file name as a usage error
(scripts/bench, scripts/gpu-check); scripts/test's closing line counts
skipped cases of every TAP dialect (scripts/test-tally); scripts/format
skips with its reason without clang-format; the build works without
Criterion (hidden from pkg-config: the Criterion suites are dropped, the
library, commands, simulator and other tests stay) and -Dtests=enabled then
fails naming it; ipcshim-run in a checkout builds only what the command
needs, and warns when the command it starts drops LD_PRELOAD (sudo, env -i,
a setuid program) but not for a command that keeps it. What fails says what
is missing: `scripts/test --install-deps` waits for the package lock and
stops, naming the packages, when a required one cannot be installed; the
launcher's build stops at a failed configure (no CUDA headers) without
claiming --install-deps would help, and a build folder configured with
-Dtests=disabled builds the simulator and the demo (-Dsim), or, with
-Dsim=false too, is named with the option to change."""
import atexit
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402

SRC = os.environ["SOURCE_ROOT"]
BUILD = os.environ["BUILD_ROOT"]
WORK = tempfile.mkdtemp(prefix="ipcshim-cli-")
atexit.register(shutil.rmtree, WORK, True)


def script(name):
    return os.path.join(SRC, "scripts", name)


def project_version():
    status, out, err = run(["meson", "introspect", "--projectinfo", BUILD])
    eq(status, 0, err)
    return json.loads(out)["version"]


def plain(text):
    """Help text, not a script: no shebang, no shell statements, no '# '."""
    return not re.search(r"^(#!|# |set -|cd |\. scripts|usage\(\))", text, re.M)


def test_help_texts_are_plain():
    for name in ("ipcshim-run", "ipcshim-plot", "bench", "gpu-check", "format", "find-cuda", "test", "test-tally"):
        status, out, err = run([script(name), "--help"])
        eq(status, 0, f"{name} --help: {err}")
        check(out.strip() and plain(out), f"{name} --help is plain text:\n{out}")


def test_versions():
    version = project_version()
    status, out, err = run([script("ipcshim-run"), "--version"], env={"IPCSHIM_BUILD_DIR": BUILD})
    eq(status, 0, err)
    eq(out.strip(), f"ipcshim-run {version}", "ipcshim-run --version in a checkout")
    status, out, err = run([os.path.join(BUILD, "scripts", "ipcshim-stat"), "--version"])
    eq(status, 0, err)
    check(out.startswith(f"ipcshim-stat {version} "), out)
    # ipcshim-plot: in the checkout (from meson.build) and as meson installs it
    for plot in (script("ipcshim-plot"), os.path.join(BUILD, "scripts", "ipcshim-plot")):
        status, out, err = run([plot, "--version"])
        eq(status, 0, err)
        eq(out.strip(), f"ipcshim-plot {version}", f"{plot} --version")


def no_internals(err):
    return "line " not in err and "unbound variable" not in err and "/scripts/" not in err


def test_argument_errors_are_usage_errors():
    cases = [([script("bench"), "--json"], "bench: --json needs a value"),
             ([script("bench"), "--json", "--quick"], "bench: --json needs a value"),
             ([script("bench"), "--bogus"], "bench: unknown option --bogus"),
             ([script("gpu-check"), "--json"], "gpu-check: --json needs a file name"),
             ([script("gpu-check"), "--bogus"], "gpu-check: unknown option --bogus"),
             ([script("ipcshim-run"), "--bogus"], "ipcshim-run: unknown option --bogus"),
             ([script("format"), "--bogus"], "format: unknown option --bogus"),
             ([script("test-tally")], "usage: test-tally"),
             ([os.path.join(BUILD, "scripts", "ipcshim-stat"), "--watch"], "ipcshim-stat: option --watch")]
    for argv, msg in cases:
        status, out, err = run(argv, env={"IPCSHIM_BUILD_DIR": BUILD})
        eq(status, 2, f"{argv[1:]} of {os.path.basename(argv[0])}: {out}{err}")
        check(err.startswith(msg) and no_internals(err), f"{argv}: {err}")
    status, out, err = run([script("ipcshim-plot"), "--bogus"])
    eq(status, 2, f"--bogus of ipcshim-plot: {out}{err}")
    check("ipcshim-plot: error: " in err and no_internals(err), err)
    status, out, err = run([script("ipcshim-run"), "--", "no-such-command-here"], env={"IPCSHIM_BUILD_DIR": BUILD})
    eq(status, 127, f"a missing command: {err}")
    check(err.strip() == "ipcshim-run: no-such-command-here: command not found", err)


def test_tally_counts_skipped_cases():
    log = os.path.join(WORK, "testlog.json")
    entries = [
        # Criterion --tap, as libcriterion 2.4 writes it
        {"result": "OK", "stdout": "TAP version 13\n1..3\n# Criterion v2.4.1\nok - s::two  (0.00s)\n"
                                   "ok - s::one  # SKIP no gpu here\nok - s::three  # SKIP test was skipped\n"},
        # tests/tools/tap.py
        {"result": "OK", "stdout": "1..3\nok 1 - a\nok 2 - b # SKIP no lintian\nok 3 - c # skip lower case\n"},
        # a failure and a TODO
        {"result": "FAIL", "stdout": "1..2\nnot ok 1 - x\n# why\nnot ok 2 - y # TODO later\n"},
        # exitcode tests: passed, skipped (77), crashed
        {"result": "OK", "stdout": ""}, {"result": "SKIP", "stdout": ""}, {"result": "FAIL", "stdout": None},
        # a TAP program that crashed after its last "ok"
        {"result": "ERROR", "stdout": "1..2\nok 1 - a\n"},
        # cases of one test that skip for one reason: one line
        {"result": "OK", "stdout": "1..2\nok 1 - m1 # SKIP same why\nok 2 - m2 # SKIP same why\n"},
    ]
    with open(log, "w") as f:
        for e in entries:
            f.write(json.dumps(dict(name="t", **e)) + "\n")
    status, out, err = run([script("test-tally"), log])
    eq(status, 0, err)
    lines = out.strip().split("\n")
    eq(lines[-1], "5 passed, 3 failed, 7 skipped", "the closing line")
    # meson's own summary counts programs: the line above the closing one
    # says so, with its numbers, and the skipped cases come with their reasons.
    eq(lines[-2], "meson counted 8 test programs (4 ok, 3 failed, 1 skipped); the cases in them:", out)
    for why in ("t: s::one: no gpu here", "t: b: no lintian", "t: c: lower case", "t: skipped as a whole",
                "t: 2 cases: same why"):
        check(any(line.strip().startswith(why) for line in lines), f"{why!r} in {out}")
    # The failed cases, with what they said, come last before the counts
    # (the tail of a CI log shows them): the TAP failure with its "#" lines,
    # the crashed programs with their result.
    failed = out[out.index("failed cases, and what they said:"):out.index("meson counted")]
    for what in ("t: not ok 1 - x\n      # why\n", "t: FAIL\n", "t: ERROR without a failed case\n      1..2\n"
                 "      ok 1 - a\n"):
        check(what in failed, f"{what!r} in {failed}")
    check("not ok 2 - y" not in failed, "a TODO is not a failure")
    status, out, err = run([script("test-tally"), log, log])
    check(out.strip().endswith("(8 ok, 6 failed, 2 skipped); the cases in them:\n10 passed, 6 failed, 14 skipped")
          and "16 test programs in 2 runs" in out, out)


def test_format_check_skips_without_clang_format():
    bindir = os.path.join(WORK, "bin")
    os.makedirs(bindir, exist_ok=True)
    for tool in ("bash", "dirname", "sed", "git", "env"):
        path = shutil.which(tool)
        if path and not os.path.exists(os.path.join(bindir, tool)):
            os.symlink(path, os.path.join(bindir, tool))
    status, out, err = run([os.path.join(bindir, "bash"), script("format"), "--check"], env={"PATH": bindir})
    eq(status, 0, f"{out}{err}")
    check("SKIP: clang-format is not installed" in out, out)
    if not shutil.which("clang-format"):
        return "clang-format not installed: the check itself is not run"
    status, out, err = run([script("format"), "--check"])
    eq(status, 0, f"the checked files are formatted: {out}{err}")


def test_builds_without_criterion():
    empty = os.path.join(WORK, "no-pkgconfig")
    os.makedirs(empty, exist_ok=True)
    env = {"PKG_CONFIG_LIBDIR": empty, "PKG_CONFIG_PATH": "", "CMAKE_PREFIX_PATH": empty}
    build = os.path.join(WORK, "build-nocriterion")
    status, out, err = run(["meson", "setup", build, SRC], env=env, cwd=WORK, timeout=180)
    eq(status, 0, f"meson setup without Criterion: {out[-2000:]}{err[-2000:]}")
    check("criterion found: NO" in out and "Criterion not found" in out, out[-2000:])
    status, out, err = run(["meson", "introspect", "--targets", build])
    names = {t["name"] for t in json.loads(out)}
    check({"ipcshim", "ipcshim-stat", "cuda", "cudart", "pair-runtime", "stat-scenario"} <= names, sorted(names))
    check(not {n for n in names if n.startswith(("test-core", "test-e2e", "test-swap", "test-crash",
                                                  "test-simcuda"))}, f"no Criterion program: {sorted(names)}")
    status, out, err = run(["meson", "test", "-C", build, "--list", "--no-rebuild"])
    tests = set(out.split("\n"))
    check(any("tools-install" in t for t in tests) and not any("core-registry" in t for t in tests), out)
    status, out, err = run(["meson", "compile", "-C", build, "shim/ipcshim", "scripts/ipcshim-stat",
                            "tests/simcuda/cuda", "tests/e2e/pair-runtime"], timeout=300)
    eq(status, 0, f"meson compile: {out[-2000:]}{err[-2000:]}")
    for f in ("shim/libipcshim.so", "scripts/ipcshim-stat", "tests/simcuda/libcuda.so.1", "tests/e2e/pair-runtime"):
        check(os.path.exists(os.path.join(build, f)), f"{f} built")
    status, out, err = run(["meson", "setup", os.path.join(WORK, "build-enabled"), SRC, "-Dtests=enabled"],
                           env=env, cwd=WORK, timeout=180)
    check(status != 0 and "criterion" in (out + err).lower(), f"-Dtests=enabled needs Criterion: {out[-1500:]}")


def test_launcher_in_a_checkout_builds_only_what_it_needs():
    build = os.path.join(WORK, "build-launcher")
    env = {"IPCSHIM_BUILD_DIR": build, "LD_PRELOAD": ""}
    status, out, err = run([script("ipcshim-run"), "--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env, timeout=300)
    eq(status, 0, f"{out}{err}")
    eq(out.strip(), os.path.join(build, "shim", "libipcshim.so"), "preloads the library it built")
    check(not os.path.exists(os.path.join(build, "tests", "simcuda", "libcuda.so.1")), "no simulator without --sim")
    check(not os.path.exists(os.path.join(build, "scripts", "ipcshim-stat")), "nor ipcshim-stat")
    check(not os.path.exists(os.path.join(build, "tests", "core")) or
          not os.listdir(os.path.join(build, "tests", "core")) or
          not any(n.startswith("test-") and "." not in n for n in os.listdir(os.path.join(build, "tests", "core"))),
          "no test program")
    status, out, err = run([script("ipcshim-run"), "--sim", "--", "true"], env=env, timeout=300)
    eq(status, 0, f"{out}{err}")
    check(os.path.exists(os.path.join(build, "tests", "simcuda", "libcuda.so.1")), "--sim builds the simulator")
    check(not os.path.exists(os.path.join(build, "tests", "e2e", "pair-runtime")), "but not the demo program")


def test_launcher_warns_about_commands_that_drop_the_preload():
    bin_dir = os.path.join(WORK, "wrappers")
    os.makedirs(bin_dir, exist_ok=True)
    fake_sudo = os.path.join(bin_dir, "sudo")  # the name is what counts
    with open(fake_sudo, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(fake_sudo, 0o755)
    suid = os.path.join(bin_dir, "suid-true")
    shutil.copy("/bin/true", suid)
    os.chmod(suid, 0o4755)
    env = {"IPCSHIM_BUILD_DIR": BUILD, "PATH": bin_dir + ":" + os.environ["PATH"]}
    warned = "so what it runs is not under the shim; put ipcshim-run after it"
    for cmd, why in ((["sudo", "true"], "sudo starts its command without LD_PRELOAD"),
                     (["env", "-i", "true"], "env -i starts its command with an empty environment"),
                     (["env", "-u", "LD_PRELOAD", "A=1", "true"], "env -u LD_PRELOAD removes the shim"),
                     ([suid], "suid-true is setuid/setgid")):
        status, out, err = run([script("ipcshim-run"), "--"] + cmd, env=env, timeout=300)
        eq(status, 0, f"{cmd}: {out}{err}")
        check(why in err and warned in err, f"{cmd} warns: {err!r}")
    for cmd in (["env", "A=1", "true"], ["env", "-u", "HOME", "true"], ["true"]):
        status, out, err = run([script("ipcshim-run"), "--"] + cmd, env=env, timeout=300)
        eq(status, 0, f"{cmd}: {out}{err}")
        check("warning" not in err, f"{cmd} keeps the preload, no warning: {err!r}")


def test_install_deps_waits_for_the_lock_and_stops_when_a_package_fails():
    if os.geteuid() != 0:
        return "--install-deps needs root"
    fake = os.path.join(WORK, "fake-apt")
    os.makedirs(fake, exist_ok=True)
    calls = os.path.join(WORK, "apt-calls")
    with open(os.path.join(fake, "apt-get"), "w") as f:  # update works, install fails (a held lock, a bad mirror)
        f.write(f'#!/bin/sh\necho "$*" >> {calls}\n'
                'case " $* " in *" install "*) echo "E: no way" >&2; exit 100 ;; esac\n')
    os.chmod(os.path.join(fake, "apt-get"), 0o755)
    empty = os.path.join(WORK, "no-pkgconfig-deps")  # Criterion hidden: a required package to install
    os.makedirs(empty, exist_ok=True)
    build = os.path.join(WORK, "build-deps")
    env = {"PATH": fake + os.pathsep + os.environ["PATH"], "PKG_CONFIG_LIBDIR": empty, "PKG_CONFIG_PATH": "",
           "IPCSHIM_BUILD_DIR": build, "CI": ""}
    status, out, err = run([script("test"), "--install-deps", "--suite", "none"], env=env, timeout=120)
    eq(status, 1, f"a required package that does not install stops the run: {out}{err}")
    check("could not install what the build and the tests need: libcriterion-dev" in err, err)
    check("E: no way" in err and not os.path.exists(build), f"apt-get's reason shown, nothing built: {err}")
    log = open(calls).read()
    check(all("-o DPkg::Lock::Timeout=300" in line for line in log.splitlines()) and " install " in f" {log} ",
          f"every apt-get waits for the lock: {log}")


def test_launcher_build_errors_name_what_is_missing():
    # No usable CUDA headers (-Dtoolkit to a folder without them): the
    # configure fails, and nothing is compiled after it.
    build = os.path.join(WORK, "build-nocuda")
    env = {"IPCSHIM_BUILD_DIR": build, "MESON_SETUP_ARGS": "-Dtoolkit=" + os.path.join(WORK, "no-cuda")}
    status, out, err = run([script("ipcshim-run"), "--", "true"], env=env, timeout=180)
    eq(status, 1, f"{out}{err}")
    check("CUDA Toolkit not usable at" in err and f"ipcshim-run: could not build in {build}" in err, err)
    check("target not found" not in err and "ninja: error" not in err and "install-deps installs" not in err, err)
    # find-cuda finding nothing (a stand-in for it in a copy of lib.sh's folder).
    fake = os.path.join(WORK, "nocuda-top")
    os.makedirs(os.path.join(fake, "scripts"), exist_ok=True)
    shutil.copy(script("lib.sh"), os.path.join(fake, "scripts"))
    with open(os.path.join(fake, "scripts", "find-cuda"), "w") as f:
        f.write("#!/bin/sh\necho 'CUDA Toolkit not found (no include/cuda.h) in any of: ...' >&2\nexit 1\n")
    os.chmod(os.path.join(fake, "scripts", "find-cuda"), 0o755)
    status, out, err = run(["bash", "-c", ". scripts/lib.sh && check_cuda"], cwd=fake,
                           env={"IPCSHIM_BUILD_DIR": os.path.join(fake, "build"), "MESON_SETUP_ARGS": ""})
    eq(status, 1, err)
    check("CUDA Toolkit not found" in err and "needs the CUDA Toolkit's headers" in err and
          "--install-deps does not install it" in err, err)
    # A folder configured without tests still builds the simulator and the
    # demo's program (-Dsim, the default)...
    build = os.path.join(WORK, "build-notests")
    status, out, err = run(["meson", "setup", build, SRC, "-Dtests=disabled"], cwd=WORK, timeout=180)
    eq(status, 0, f"{out[-2000:]}{err[-2000:]}")
    env = {"IPCSHIM_BUILD_DIR": build, "LD_PRELOAD": ""}
    status, out, err = run([script("ipcshim-run"), "--demo"], env=env, cwd=WORK, timeout=400)
    eq(status, 0, f"--demo with a -Dtests=disabled folder: {out}{err}")
    check("the producer's cudaFree was deferred" in out, out)
    # It built the demo's program quietly (meson's lines only on a failure)
    # and shows the words the consumer read, poison first, then the data.
    check("ninja" not in err and "Compiling" not in err and "Linking" not in err, f"build output shown: {err}")
    read = re.findall(r"the consumer read: +(.*)", out)
    wrote = re.findall(r"the producer wrote: +(.*)", out)
    check(len(read) == 2 and len(wrote) == 2 and read[1] == wrote[1] and read[0] != wrote[0], out)
    # ... and one without the simulator either is named, with the option.
    status, out, err = run(["meson", "configure", build, "-Dsim=false"], timeout=120)
    eq(status, 0, err)
    for f in ("tests/simcuda/libcuda.so.1", "tests/e2e/pair-runtime"):
        os.unlink(os.path.join(build, f))
    status, out, err = run([script("ipcshim-run"), "--sim", "--", "true"], env=env, cwd=WORK, timeout=180)
    eq(status, 1, f"{out}{err}")
    check(f"{build} is configured with -Dtests=disabled -Dsim=false: it builds no simulator" in err and
          f"meson configure {build} -Dsim=true" in err and "target not found" not in err, err)


if __name__ == "__main__":
    run_all(globals())
