# scripts/lib.sh: what the project's scripts share: finding or installing
# build dependencies, and configuring + building into one folder.

# The build folder every script uses.
build_dir() { echo "${IPCSHIM_BUILD_DIR:-$PWD/build}"; }

# Install meson, ninja, Criterion, uthash and pkg-config when missing: with
# apt-get when root, otherwise print the exact command and fail.
ensure_build_deps() {
    local missing=()
    command -v meson >/dev/null 2>&1 || missing+=(meson)
    command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    pkg-config --exists criterion 2>/dev/null || missing+=(libcriterion-dev)
    [ -f /usr/include/uthash.h ] || missing+=(uthash-dev)
    # Optional: clang (with its libFuzzer runtime) makes tests/fuzz a
    # coverage-guided libFuzzer target; without it a plain driver runs the
    # same target. Installed only where we install anyway (root + apt), and
    # its failure stops nothing.
    if ! command -v clang >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing (optional): clang" >&2
        { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang; } >&2 ||
            echo "clang could not be installed; the fuzz test uses its plain driver" >&2
    fi
    # Optional: the observability tests validate ipcshim-stat --prometheus
    # with prometheus_client's OpenMetrics parser and draw ipcshim-plot's PNG
    # with matplotlib (Debian's, for /usr/bin/python3); without them those
    # tests skip and say why.
    local optional=()
    python3 -c 'import prometheus_client' >/dev/null 2>&1 || optional+=(python3-prometheus-client)
    python3 -c 'import matplotlib' >/dev/null 2>&1 || optional+=(python3-matplotlib)
    # libunwind makes a call-site capture ~20x cheaper than glibc's backtrace().
    ldconfig -p 2>/dev/null | grep -q 'libunwind\.so\.8 ' || optional+=(libunwind8)
    if [ ${#optional[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing (optional): ${optional[*]}" >&2
        { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${optional[@]}"; } >&2 ||
            echo "${optional[*]} could not be installed; the tests that need them skip" >&2
    fi
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing: ${missing[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    else
        echo "missing build dependencies; run:" >&2
        echo "  sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
}

# Configure (once) and build everything.
build_project() {
    local build
    build=$(build_dir)
    if [ ! -f "$build/build.ninja" ]; then
        meson setup "$build" "$@" >&2
    fi
    ninja -C "$build" >&2
}
