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
#   python3-numba     tests/thirdparty (numba's own CUDA IPC tests; numba-cuda's
#                     suite comes from PyPI instead: thirdparty_venv)
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
    # tests/e2e/test_preloads.py: what operators preload beside the shim
    local lib pkg
    for lib in libjemalloc.so.2:libjemalloc2 libtcmalloc.so.4:libgoogle-perftools4 \
               libmimalloc.so.2:libmimalloc2.0 libeatmydata.so.1:eatmydata libasan.so.8:libasan8 \
               libubsan.so.1:libubsan1; do
        pkg=${lib#*:} lib=${lib%%:*}
        grep -q "${lib//./\\.} " < <(ldconfig -p 2>/dev/null) || want+=("$pkg")
    done
    ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || want+=(libfaketime)
    echo "${want[*]}"
}

# The Python packages of tests/thirdparty's numba-cuda run, from PyPI, pinned
# (the suite's outcomes are compared test by test, so they must not move
# under it): numba-cuda and the NVIDIA bindings it runs on (cuda-bindings
# 13.0: 13.5 renamed the IPC handle's field numba-cuda 0.30 reads), and what
# numba-cuda's test modules import.
THIRDPARTY_PIP=(numba-cuda==0.30.4 cuda-bindings==13.0.3 cuda-core==1.2.2 pytest filecheck cffi ml_dtypes)

# thirdparty_venv BUILD: makes BUILD/venv-thirdparty with THIRDPARTY_PIP once
# and reuses it while the list is the same (it records the list). Returns 1,
# saying why, when it cannot (no python3 venv module, no network): the tests
# that need it then skip and say so. scripts/test runs it; nothing else
# installs into it.
thirdparty_venv() {
    local venv=$1/venv-thirdparty want
    want="${THIRDPARTY_PIP[*]}"
    [ -x "$venv/bin/python" ] && [ "$(cat "$venv/ipcshim-packages" 2>/dev/null)" = "$want" ] && return 0
    rm -rf "$venv"
    echo "making $venv (pip: $want)" >&2
    if python3 -m venv "$venv" >&2 &&
        "$venv/bin/python" -m pip install -q --disable-pip-version-check --retries 2 --timeout 20 \
            "${THIRDPARTY_PIP[@]}" >&2; then
        echo "$want" >"$venv/ipcshim-packages"
        return 0
    fi
    echo "could not make $venv: tests/thirdparty's numba-cuda run skips" >&2
    rm -rf "$venv"
    return 1
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

# apt-get as install_test_deps runs it: no questions, and waiting (up to
# IPCSHIM_APT_LOCK_WAIT seconds, default 300) for the package lock that
# another apt-get or an unattended upgrade holds, instead of failing at once.
apt_get() {
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="${IPCSHIM_APT_LOCK_WAIT:-300}" "$@"
}

# For scripts/test: install_test_deps INSTALL. With INSTALL=1 (root and
# apt-get needed) installs what is missing, then the optional packages (whose
# failure stops nothing); otherwise as check_build_deps --tests. Returns 1,
# naming the packages, when a required one is still missing afterwards.
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
    # A failed update (offline, a broken source) is not the end: the lists
    # already there may hold everything.
    apt_get update -qq >&2 ||
        echo "apt-get update failed (see above); installing from the package lists already here" >&2
    if [ -n "$missing" ]; then
        echo "installing: $missing" >&2
        # shellcheck disable=SC2086
        apt_get install -y -qq $missing >&2 || true
        missing=$(missing_build_deps --tests)
        if [ -n "$missing" ]; then
            echo "could not install what the build and the tests need: $missing" >&2
            echo "  (apt-get's reason is above; after fixing it, run this again or install them: apt-get install $missing)" >&2
            return 1
        fi
    fi
    if [ -n "$optional" ]; then
        echo "installing (optional): $optional" >&2
        # shellcheck disable=SC2086
        apt_get install -y -qq --no-install-recommends $optional >&2 || {
            local p # one by one, so that one missing from the registry stops no other
            for p in $optional; do
                apt_get install -y -qq --no-install-recommends "$p" >&2 ||
                    echo "optional package $p could not be installed; the tests that need it skip" >&2
            done
        }
    fi
}

# For the commands that build (ipcshim-run, scripts/test):
# when the build folder is not configured yet and no -Dtoolkit is given in
# MESON_SETUP_ARGS, fail unless scripts/find-cuda finds the CUDA headers,
# saying so (no Debian package of the list above has them).
check_cuda() {
    local build err
    build=$(build_dir)
    [ ! -f "$build/build.ninja" ] || return 0
    case " ${MESON_SETUP_ARGS:-} " in *" -Dtoolkit="*) return 0 ;; esac
    err=$(scripts/find-cuda 2>&1 >/dev/null) && return 0
    echo "$err" >&2
    echo "the build needs the CUDA Toolkit's headers (include/cuda.h): install the toolkit (NVIDIA's" >&2
    echo "  cuda-toolkit package, or Debian's nvidia-cuda-toolkit from non-free), then set CUDA_HOME if it" >&2
    echo "  is in none of those places; scripts/test --install-deps does not install it" >&2
    return 1
}

# check_build_folder [TARGET...]: for a build folder configured before, after
# meson has caught up with any change of the meson.build files: fail, naming
# the option, when TARGETs include the simulator or the demo's program and the
# folder builds neither (-Dtests=disabled -Dsim=false).
check_build_folder() {
    local build t sim_targets=0
    build=$(build_dir)
    [ -f "$build/build.ninja" ] || return 0
    ninja -C "$build" build.ninja >/dev/null || return 1 # meson's own reconfigure, if due
    for t in "$@"; do case $t in tests/*) sim_targets=1 ;; esac; done
    [ $sim_targets = 1 ] || return 0
    if meson introspect --buildoptions "$build" | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
sys.exit(1 if opts.get("tests") == "disabled" and opts.get("sim") is False else 0)'; then
        return 0
    fi
    echo "$build is configured with -Dtests=disabled -Dsim=false: it builds no simulator;" >&2
    echo "  run: meson configure $build -Dsim=true   (or set IPCSHIM_BUILD_DIR to another folder)" >&2
    return 1
}

# build_project [TARGET...]: configure (once; MESON_SETUP_ARGS adds options)
# and build TARGETs (meson's [DIR/]NAME, e.g. shim/ipcshim), or everything.
# Stops at the first step that fails (callers run it where set -e is off).
build_project() {
    local build
    build=$(build_dir)
    if [ ! -f "$build/build.ninja" ]; then
        # shellcheck disable=SC2086
        meson setup "$build" ${MESON_SETUP_ARGS:-} >&2 || return 1
    fi
    if [ $# -gt 0 ]; then
        meson compile -C "$build" "$@" >&2
    else
        ninja -C "$build" >&2
    fi
}
