# scripts/lib.sh: what the project's scripts share: finding (and, for
# scripts/test only, installing) build dependencies, and configuring +
# building into one folder.
#
# Who installs packages: only scripts/test, and only when asked to
# (--install-deps) or when it runs as root with CI set (a CI machine is
# disposable; a developer's machine is not changed without being asked).
# ipcshim-run and scripts/bench never install anything: they print the
# command to run.

# The build folder every script uses.
build_dir() { echo "${IPCSHIM_BUILD_DIR:-$PWD/build}"; }

# The Debian packages missing for a build (the library and the commands; with
# --tests also what the tests need), one line, space separated.
missing_build_deps() {
    local missing=()
    command -v meson >/dev/null 2>&1 || missing+=(meson)
    command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    [ -f /usr/include/uthash.h ] || missing+=(uthash-dev)
    if [ "${1:-}" = --tests ]; then
        pkg-config --exists criterion 2>/dev/null || missing+=(libcriterion-dev)
    fi
    echo "${missing[*]}"
}

# Optional packages of the test run: each makes more of it run, none is
# needed (a test that lacks one skips and says why).
#   clang             tests/fuzz as a coverage-guided libFuzzer target
#   clang-format      scripts/format --check
#   python3-mesonpy python3-venv python3-pip
#                     tests/tools/test_wheel.py (pip install of the wheel)
#   debhelper dpkg-dev fakeroot lintian build-essential
#                     tests/tools/test_deb.py (dpkg-buildpackage, lintian)
#   python3-numba     tests/thirdparty (numba's own CUDA IPC tests)
#   python3-prometheus-client python3-matplotlib
#                     tests/tools/test_observe.py (a real OpenMetrics parser;
#                     ipcshim-plot's PNG)
#   libunwind8        cheap call sites for the leak report (else glibc's
#                     backtrace, ~20x slower)
optional_test_deps() {
    local want=()
    command -v clang >/dev/null 2>&1 || want+=(clang)
    command -v clang-format >/dev/null 2>&1 || want+=(clang-format)
    /usr/bin/python3 -c 'import mesonpy' 2>/dev/null || want+=(python3-mesonpy)
    /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || want+=(python3-venv)
    /usr/bin/python3 -m pip --version >/dev/null 2>&1 || want+=(python3-pip)
    command -v dh >/dev/null 2>&1 || want+=(debhelper)
    command -v dpkg-buildpackage >/dev/null 2>&1 || want+=(dpkg-dev)
    command -v fakeroot >/dev/null 2>&1 || want+=(fakeroot)
    command -v lintian >/dev/null 2>&1 || want+=(lintian)
    dpkg -s build-essential >/dev/null 2>&1 || want+=(build-essential)
    /usr/bin/python3 -c 'import numba' >/dev/null 2>&1 || want+=(python3-numba)
    /usr/bin/python3 -c 'import prometheus_client' >/dev/null 2>&1 || want+=(python3-prometheus-client)
    /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1 || want+=(python3-matplotlib)
    command -v spin >/dev/null 2>&1 || want+=(spin) # tests/model: the lease protocol's model check
    command -v valgrind >/dev/null 2>&1 || want+=(valgrind) # tests/e2e/test_valgrind.c: memcheck over an e2e pair
    grep -q 'libunwind\.so\.8 ' < <(ldconfig -p 2>/dev/null) || want+=(libunwind8) # no pipe: grep -q ends it early
    echo "${want[*]}"
}

# For the commands (ipcshim-run, scripts/bench): fail with the command to run
# when something the build needs is missing; never installs.
check_build_deps() {
    local missing
    missing=$(missing_build_deps "$@")
    [ -z "$missing" ] && return 0
    echo "missing build dependencies; run:" >&2
    echo "  sudo apt-get install -y $missing" >&2
    echo "  (or scripts/test --install-deps, which installs them and the test tools)" >&2
    return 1
}

# For scripts/test: install_test_deps INSTALL. With INSTALL=1 (root and
# apt-get needed) installs what is missing, then the optional packages (whose
# failure stops nothing); otherwise as check_build_deps --tests.
install_test_deps() {
    local missing optional
    missing=$(missing_build_deps --tests)
    if [ "$1" != 1 ]; then
        check_build_deps --tests
        return
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "--install-deps needs root and apt-get" >&2
        check_build_deps --tests
        return
    fi
    optional=$(optional_test_deps)
    [ -z "$missing$optional" ] && return 0
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    if [ -n "$missing" ]; then
        echo "installing: $missing" >&2
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
    fi
    if [ -n "$optional" ]; then
        echo "installing (optional): $optional" >&2
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $optional >&2 || {
            local p # one by one, so that one missing from the registry stops no other
            for p in $optional; do
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >&2 ||
                    echo "optional package $p could not be installed; the tests that need it skip" >&2
            done
        }
    fi
}

# build_project [TARGET...]: configure (once; MESON_SETUP_ARGS adds options)
# and build TARGETs (meson's [DIR/]NAME, e.g. shim/ipcshim), or everything.
build_project() {
    local build
    build=$(build_dir)
    if [ ! -f "$build/build.ninja" ]; then
        # shellcheck disable=SC2086
        meson setup "$build" ${MESON_SETUP_ARGS:-} >&2
    fi
    if [ $# -gt 0 ]; then
        meson compile -C "$build" "$@" >&2
    else
        ninja -C "$build" >&2
    fi
}
