"""Observability tools: ipcshim-stat --leaks, --prometheus (validated with
prometheus_client's OpenMetrics parser), --all, --remove, the dead-pinned
hint, and ipcshim-plot turning a recorded run into a PNG: its panel for
blocks of dead exporters only when there are some, and its mark for a
consumer killed and swept between two snapshots.

Registries in known states come from stat-scenario (as in test_stat.py);
the plot records a real pair of programs under the shim on the simulator.
The parser and matplotlib are Debian's (python3-prometheus-client,
python3-matplotlib, installed by scripts/lib.sh when it can): they may sit
under /usr/bin/python3 rather than the python3 running this file, so each
is looked for in both; a test that finds neither skips and says why."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, eq, run, run_all  # noqa: E402
from test_stat import PID, STAT, UID, Scenario, sections, shm_path, stat_json  # noqa: E402

SOURCE = os.environ["SOURCE_ROOT"]
PLOT = os.path.join(SOURCE, "scripts", "ipcshim-plot")


def python_with(module):
    """A python3 that can import module, or None."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(exe) and subprocess.run([exe, "-c", f"import {module}"],
                                                  capture_output=True).returncode == 0:
            return exe
    return None


PARSE = r"""
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    out[fam.name] = {"type": fam.type, "unit": fam.unit,
                     "samples": [[s.name, s.labels, s.value] for s in fam.samples]}
print(json.dumps(out))
"""


def parse_openmetrics(text):
    """The families of text by a real OpenMetrics parser, or a skip reason."""
    py = python_with("prometheus_client")
    if not py:
        return None, "prometheus_client is not installed (Debian: python3-prometheus-client)"
    status, out, err = run([py, "-c", PARSE], input=text)
    eq(status, 0, f"the OpenMetrics parser refused the output: {err}\n{text}")
    return json.loads(out), None


def sample(families, family, name, **labels):
    got = [s[2] for s in families[family]["samples"] if s[0] == name and
           all(s[1].get(k) == v for k, v in labels.items())]
    eq(len(got), 1, f"{name}{labels} samples")
    return got[0]


def test_prometheus_passes_a_real_parser():
    with Scenario("leases", "prom") as sc:
        e, i, d = sc.pids["exporter"], sc.pids["importer"], sc.pids["dead"]
        status, out, err = run([STAT, "--domain", sc.domain, "--prometheus"])
        eq(status, 0, f"status ({err})")
        check(out.endswith("# EOF\n"), "ends with # EOF")
        fams, skip = parse_openmetrics(out)
        if skip:
            return skip
        eq(fams["ipcshim_process_limbo_bytes"]["type"], "gauge", "limbo type")
        eq(fams["ipcshim_process_limbo_bytes"]["unit"], "bytes", "limbo unit")
        eq(fams["ipcshim_process_handoffs_claimed"]["type"], "counter", "claimed type")
        dom = sc.domain
        eq(sample(fams, "ipcshim_process_limbo_bytes", "ipcshim_process_limbo_bytes", domain=dom, pid=str(e)),
           1048576 + 8192, "exporter's limbo bytes")
        eq(sample(fams, "ipcshim_process_exported_bytes", "ipcshim_process_exported_bytes", domain=dom,
                  pid=str(e)), 1048576 + 8192 + 4096, "exporter's exported bytes")
        eq(sample(fams, "ipcshim_process_imported_bytes", "ipcshim_process_imported_bytes", domain=dom,
                  pid=str(i)), 1048576, "importer's imported bytes")
        eq(sample(fams, "ipcshim_process_alive", "ipcshim_process_alive", domain=dom, pid=str(d)), 0, "dead")
        eq(sample(fams, "ipcshim_process_alive", "ipcshim_process_alive", domain=dom, pid=str(i),
                  command="stat-scenario"), 1, "alive, with its command")
        eq(sample(fams, "ipcshim_process_handoffs_claimed", "ipcshim_process_handoffs_claimed_total",
                  domain=dom, pid=str(e)), 2, "hand-offs claimed (the two opened blocks)")
        eq(sample(fams, "ipcshim_registry_blocks", "ipcshim_registry_blocks", domain=dom, state="limbo"), 2,
           "limbo blocks")
        for kind, n in (("ipc", 2), ("pool", 1)):
            eq(sample(fams, "ipcshim_registry_blocks_by_kind", "ipcshim_registry_blocks_by_kind", domain=dom,
                      kind=kind), n, f"{kind} blocks")
        eq(sample(fams, "ipcshim_registry_lock_repairs", "ipcshim_registry_lock_repairs_total", domain=dom), 0,
           "repairs")


def test_prometheus_all_domains_is_one_exposition():
    with Scenario("leases", "proma") as a, Scenario("orphan", "promb") as b:
        status, out, err = run([STAT, "--all", "--prometheus"])
        # Registries of other releases (another ABI) may sit in /dev/shm:
        # they are named on stderr and the exposition stays whole.
        check(out.endswith("# EOF\n") and out.count("# EOF") == 1, "one # EOF at the end")
        fams, skip = parse_openmetrics(out)
        if skip:
            return skip
        domains = {s[1].get("domain") for s in fams["ipcshim_process_alive"]["samples"]}
        check({a.domain, b.domain} <= domains, f"both domains in {domains}")


def test_leaks_view_of_live_processes():
    with Scenario("leases", "leaks") as sc:
        e, i = sc.pids["exporter"], sc.pids["importer"]
        status, out, err = run([STAT, "--domain", sc.domain, "--leaks"])
        eq(status, 0, f"status ({err})")
        check(f"\npid {i} (stat-scenario)\n  holds 1.0MiB exported by pid {e} (stat-scenario), alive; open for "
              in out, out)
        check("2 open(s); call site: only in the process's own exit report" in out, out)
        check(f"\npid {e} (stat-scenario)\n" in out, out)
        check("  exported 4.0KiB " in out and "opened by no process under the shim (1 hand-off(s) unclaimed, 0 expired)" in out, out)
        check(f"  left 1.0MiB in limbo for " in out and f"still held by pid {i} (stat-scenario)" in out, out)
        # A lease is stale once open longer than --stale.
        status, out, _ = run([STAT, "--domain", sc.domain, "--leaks", "--stale", "0"])
        check(", stale" in out, out)
        j = stat_json(sc.domain, "--stale", "0")
        eq(sorted(h["stale_leases"] for h in j["holders"]), [0, 1, 2], "stale leases per holder")


def test_dead_exporters_bytes_in_the_default_view():
    with Scenario("orphan", "pinned") as sc:
        x, i = sc.pids["dead-exporter"], sc.pids["importer"]
        status, out, err = run([STAT, "--domain", sc.domain])
        eq(status, 0, f"status ({err})")
        s = sections(out)
        rows = {int(r["PID"]): r for r in s["BY PROCESS"]}
        eq((rows[i]["IMPORTED"], rows[i]["DEAD-PINNED"]), ("64.0KiB", "64.0KiB"), "importer's roll-up")
        hint = [n for n in s["NOTES"] if n.startswith(f"pid {i} (stat-scenario) holds 64.0KiB exported by "
                                                       f"pid {x} (stat-scenario), dead for ")]
        eq(len(hint), 1, f"one hint line in {s['NOTES']}")
        check("until it closes them (cudaIpcCloseMemHandle; a pool import: its free) or exits" in hint[0],
              hint[0])
        j = stat_json(sc.domain)
        imp = [h for h in j["holders"] if h["pid"] == i][0]
        eq((imp["dead_pinned_blocks"], imp["dead_pinned_bytes"]), (1, 65536), "JSON dead pinned")
        b = j["blocks"][0]
        eq((b["exporter_pid"], b["exporter_command"], b["exporter_dead"]), (x, "stat-scenario", True), "block")
        check(isinstance(b["orphaned_age_ms"], int), f"orphaned_age_ms {b['orphaned_age_ms']}")


def sim_env(domain, **extra):
    env = dict(os.environ, LD_LIBRARY_PATH=os.environ["SIMCUDA_DIR"], SIMCUDA_MACHINE=domain,
               IPCSHIM_DOMAIN=domain, LD_PRELOAD=os.environ["IPCSHIM_LIB"])
    env.update(extra)
    return env


def remove_shm(domain):
    for name in os.listdir("/dev/shm"):
        if name.endswith(f"-{UID}-{domain}") or f"-{UID}-{domain}-" in name:
            os.unlink(os.path.join("/dev/shm", name))


def test_remove_only_when_nobody_holds_it():
    with Scenario("leases", "rm") as sc:
        status, out, err = run([STAT, "--remove", sc.domain])
        eq(status, 1, "refused while in use")
        check(f"domain {sc.domain} is in use by live process(es) {sc.pids['exporter']}" in err, err)
        check(os.path.exists(shm_path(sc.domain)), "still there")
    # A real program's registry goes with its last process out...
    domain = f"obs-rm-{PID}"
    try:
        leaky = os.path.join(os.environ["E2E_BIN_DIR"], "leaky-runtime")
        status, out, err = run([leaky, "unopened", "65536"], env=sim_env(domain, IPCSHIM_EXIT_WAIT="100ms",
                                                                            IPCSHIM_LEAK_REPORT="off"))
        eq(status, 0, f"leaky: {out}{err}")
        check(not os.path.exists(shm_path(domain)), "the last process out left its registry")
        # ...but processes that were killed leave theirs: --remove is for that.
        p = subprocess.Popen([leaky, "exporter-killed", "65536", "30000"], stdout=subprocess.PIPE, text=True,
                             env=sim_env(domain, IPCSHIM_LEAK_REPORT="off"))
        for line in p.stdout:
            if line.startswith("importer"):
                break
        p.kill()
        p.wait()
        check(os.path.exists(shm_path(domain)), "killed processes left no registry")
        status, out, err = run([STAT, "--remove", domain])
        eq((status, out), (0, f"removed /dev/shm/ipcshim-{UID}-{domain}\n"), f"remove ({err})")
        check(not os.path.exists(shm_path(domain)), "gone")
        status, _, err = run([STAT, "--remove", domain])
        eq(status, 1, "a second remove finds nothing")
        status, _, _ = run([STAT, "--remove", "no/such"])
        eq(status, 2, "a bad name is a usage error")
    finally:
        remove_shm(domain)


def test_all_shows_every_domain():
    with Scenario("leases", "alla") as a, Scenario("orphan", "allb") as b:
        status, out, _ = run([STAT, "--all", "--json"])
        doms = [json.loads(line)["domain"] for line in out.splitlines() if line.startswith("{")]
        check(a.domain in doms and b.domain in doms, f"domains {doms}")
        status, out, _ = run([STAT, "--all"])
        check(f"(domain {a.domain}, ABI 6)" in out and f"(domain {b.domain}, ABI 6)" in out, out)


def test_plot_of_a_recorded_run():
    """Records a real pair of programs under the shim with --json --watch and
    draws it: a valid PNG of nonzero size."""
    py = python_with("matplotlib")
    if not py:
        return "matplotlib is not installed (Debian: python3-matplotlib)"
    domain = f"obs-plot-{PID}"
    work = f"/tmp/ipcshim-obs-plot-{PID}"
    os.makedirs(work, exist_ok=True)
    log, png = os.path.join(work, "run.jsonl"), os.path.join(work, "run.png")
    prog = os.path.join(os.environ["E2E_BIN_DIR"], "pair-runtime")
    try:
        p = subprocess.Popen([prog, "--free", "while-reading", "--hold", "1500", "--consumers", "2",
                              "--blocks", "2"], env=sim_env(domain), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 20
        while not os.path.exists(shm_path(domain)) and time.time() < deadline:
            time.sleep(0.02)
        with open(log, "w") as f:
            rec = subprocess.run([STAT, "--domain", domain, "--json", "--watch", "0.1", "--count", "25"],
                                 stdout=f, stderr=subprocess.PIPE, text=True, timeout=60)
        out, _ = p.communicate(timeout=60)
        eq(p.returncode, 0, f"pair: {out}")
        lines = open(log).read().splitlines()
        check(len(lines) >= 5, f"recorded {len(lines)} snapshot(s): {rec.stderr}")
        check(any(json.loads(line)["totals"]["limbo_bytes"] > 0 for line in lines), "limbo seen while recording")
        status, out, err = run([py, PLOT, log, "-o", png])
        eq(status, 0, f"ipcshim-plot: {out}{err}")
        data = open(png, "rb").read()
        check(len(data) > 1000, f"PNG of {len(data)} bytes")
        eq(data[:8], b"\x89PNG\r\n\x1a\n", "PNG signature")
        eq(data[12:16], b"IHDR", "PNG header chunk")
        # A log with nothing in it is an error, not an empty picture.
        status, _, err = run([py, PLOT, "/dev/null", "-o", png])
        eq(status, 1, f"empty log ({err})")
    finally:
        remove_shm(domain)
        for name in ("run.jsonl", "run.png"):
            if os.path.exists(os.path.join(work, name)):
                os.unlink(os.path.join(work, name))
        os.rmdir(work)


def png_size(path):
    data = open(path, "rb").read()
    eq(data[:8], b"\x89PNG\r\n\x1a\n", "PNG signature")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def snapshot(t_ms, holders, blocks=(), domain="plot"):
    """A snapshot of ipcshim-stat --json with the keys ipcshim-plot reads."""
    full = []
    for h in holders:
        full.append(dict({"pid": 0, "alive": True, "command": "prog", "imports": 0, "opens": 0, "exported_bytes": 0,
                          "imported_bytes": 0, "limbo_bytes": 0, "dead_pinned_bytes": 0}, **h))
    return json.dumps({"format": "ipcshim-stat", "version": 1, "domain": domain, "time_unix_ms": t_ms,
                       "holders": full, "blocks": list(blocks)})


def plot(py, lines, work, name):
    log, png = os.path.join(work, name + ".jsonl"), os.path.join(work, name + ".png")
    with open(log, "w") as f:
        f.write("\n".join(lines) + "\n")
    status, out, err = run([py, PLOT, log, "-o", png])
    eq(status, 0, f"ipcshim-plot {name}: {out}{err}")
    return out, png_size(png)


def test_plot_draws_the_dead_pinned_panel_only_with_data():
    """Without a block of a dead exporter there is no panel for it (three
    panels, a shorter picture, and a line saying so); with one, four."""
    py = python_with("matplotlib")
    if not py:
        return "matplotlib is not installed (Debian: python3-matplotlib)"
    work = tempfile.mkdtemp(prefix="ipcshim-obs-panels-")
    try:
        producer = {"pid": 10, "exported_bytes": 1 << 20}
        consumer = {"pid": 11, "imports": 1, "opens": 1, "imported_bytes": 1 << 20}
        out, (w3, h3) = plot(py, [snapshot(1000, [producer, consumer]), snapshot(1500, [producer])], work, "none")
        check("no process held blocks of a dead exporter: that panel is left out" in out, out)
        pinned = dict(consumer, dead_pinned_bytes=1 << 20)
        out, (w4, h4) = plot(py, [snapshot(1000, [producer, consumer]), snapshot(1500, [pinned])], work, "pinned")
        check("dead exporter: that panel is left out" not in out, out)
        eq(w3, w4, "same width")
        check(h4 > h3 * 1.15, f"four panels are taller than three: {h4} vs {h3}")
        # A block exported through a pool (ipcshim-stat's "kind"): its panel.
        block = {"kind": "pool", "state": "live", "exporter_pid": 10, "size": 1 << 20}
        out, (w5, h5) = plot(py, [snapshot(1000, [producer, consumer], [block]), snapshot(1500, [pinned], [block])],
                             work, "pool")
        check("stream-ordered pool: that panel is left out" not in out, out)
        check(h5 > h4 * 1.1, f"five panels are taller than four: {h5} vs {h4}")
        check("no process exported VMM memory: that panel is left out" in out, out)
        # VMM memory shared through legacy IPC (kind "vmm"): its own panel.
        vmm = dict(block, kind="vmm")
        out, (w6, h6) = plot(py, [snapshot(1000, [producer, consumer], [block, vmm]),
                                  snapshot(1500, [pinned], [block, vmm])], work, "vmm")
        check("no process exported VMM memory" not in out, out)
        check(h6 > h5 * 1.05, f"six panels are taller than five: {h6} vs {h5}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_plot_marks_a_consumer_killed_between_two_samples():
    """A consumer SIGKILLed and swept between two snapshots never shows as
    dead in the log: the plot marks it all the same, as gone while holding
    its mapping and killed (the registry's swept count grew), and marks
    nobody else. Real programs under the shim: the
    demo pair with two consumers; one snapshot while both hold the block,
    the kill, then (skipping the snapshots in which it shows dead) one once
    the producer's sweep removed it."""
    py = python_with("matplotlib")
    if not py:
        return "matplotlib is not installed (Debian: python3-matplotlib)"
    domain = f"obs-kill-{PID}"
    work = tempfile.mkdtemp(prefix="ipcshim-obs-kill-")
    prog = os.path.join(os.environ["E2E_BIN_DIR"], "pair-runtime")
    # A long hold (the test kills the pair when done): on a loaded machine the
    # sampling may reach the pair late, and the registry leaves with it.
    p = subprocess.Popen([prog, "--free", "while-reading", "--hold", "20000", "--consumers", "2", "--blocks", "1"],
                         env=sim_env(domain), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def sample():
        status, out, err = run([STAT, "--domain", domain, "--json"])
        return out.strip(), (json.loads(out) if status == 0 else None)

    try:
        deadline, first = time.time() + 30, None
        while time.time() < deadline:
            line, j = sample()
            if j and j["totals"]["leases"] == 2 and j["totals"]["limbo_blocks"] == 1:
                first = line
                break
            time.sleep(0.05)
        check(first, "the pair never reached two leases on a block in limbo")
        consumers = [h["pid"] for h in json.loads(first)["holders"] if h["pid"] != p.pid]
        eq(len(consumers), 2, f"two consumers in {first}")
        victim, other = consumers
        os.kill(victim, signal.SIGKILL)
        deadline, second = time.time() + 30, None
        while time.time() < deadline:
            line, j = sample()
            if j and victim not in [h["pid"] for h in j["holders"]]:
                second = line
                break
            time.sleep(0.05)
        check(second, f"pid {victim} was never swept")
        j = json.loads(second)
        check(other in [h["pid"] for h in j["holders"]] and j["totals"]["leases"] == 1,
              f"the other consumer still holds its lease: {second}")
        out, _ = plot(py, [first, second], work, "kill")
        gone = [line for line in out.splitlines() if f"pid {victim} " in line]
        eq(len(gone), 1, f"one mark for pid {victim}: {out}")
        check(" left between " in gone[0] and " holding 1.0MiB (killed: swept by the shim)" in gone[0], gone[0])
        check(f"pid {other} " not in out and f"pid {p.pid} " not in out, f"nobody else marked: {out}")
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
        remove_shm(domain)
        shutil.rmtree(work, ignore_errors=True)


def test_plot_version_and_help():
    status, out, err = run([sys.executable, PLOT, "--version"])
    eq(status, 0, err)
    check(re.fullmatch(r"ipcshim-plot \d+\.\d+\.\d+\n", out), out)
    status, out, err = run([sys.executable, PLOT, "--help"])
    eq(status, 0, err)
    check("--output" in out and "--version" in out and "Exit status" in out, out)
    man = open(os.path.join(SOURCE, "docs", "man", "ipcshim-plot.1")).read()
    for opt in re.findall(r"--[a-z]+", out):
        check(opt.replace("-", r"\-") in man, f"ipcshim-plot.1 documents {opt}")


if __name__ == "__main__":
    run_all(globals())
