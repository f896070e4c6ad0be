#!/usr/bin/env python3
"""The UDP flood (scenario F), paired (run by hand, as root, nothing else of yours running):

    bench/udp_toggle.py [--window 2] [--cycles 8] [--senders 1] [--modes on,on@other]
                        [--other-binary PATH] [--stats]

Per cycle one window per mode in a rotating order, each paired with a window of the same
cycle without ebtop: examples/udp_flood (release) sends 64-byte datagrams on loopback from
unconnected sockets as fast as it goes for the window. A mode is `on` (ebtop --json, the
flow table and the capture loaded, as by default), `on@other` (the same with
--other-binary: an A/B of two builds in one run), `noflows` (`--only call,overhead`: no flow table),
`cut:STAGE` (a bench-cuts build's EBTOP_BENCH_CUT) or `nopeerhooks` (a bench-cuts build
without the flow table's cgroup hooks that stash unconnected UDP peers) or `notls`
(`--tls off`); parts join with `+`
(`cut:hook+noflows`: the two length tracepoints' programs returning at entry, nothing else
per datagram — the floor of tracing sends at all; `cut:unhooked+noflows`: ebtop running
without them, the floor below that). Reports datagrams/s and the median
of each mode's paired ratios; with --stats one more window per mode with BPF statistics on
and `--overhead-programs`: each program's ns per run and runs per datagram. Writes
bench/udp-toggle-results.json with the host's load average.
"""
import argparse, json, os, signal, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import wait_attached, wait_tls_scan  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))

ap = argparse.ArgumentParser()
ap.add_argument("--window", type=float, default=2)
ap.add_argument("--cycles", type=int, default=8)
ap.add_argument("--senders", type=int, default=1)
ap.add_argument("--modes", default="on")
ap.add_argument("--binary", default=os.path.join(TARGET, "x86_64-unknown-linux-gnu", "release", "ebtop"))
ap.add_argument("--other-binary")
ap.add_argument("--stats", action="store_true")
ap.add_argument("--stats-windows", type=int, default=1, help="statistics windows per mode (medians)")
ap.add_argument("--out", default=os.path.join(ROOT, "bench", "udp-toggle-results.json"))
ap.add_argument("--no-build", action="store_true", help="use target/release/examples/udp_flood as it is")
a = ap.parse_args()
modes = a.modes.split(",")
if not a.no_build:
    subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "udp_flood"], cwd=ROOT,
                   check=True)
flood = os.path.join(TARGET, "release", "examples", "udp_flood")


def flood_window():
    out = subprocess.run([flood, str(a.window), str(a.senders)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["sent_per_s"]


def start(mode, extra=()):
    binary, args, env = a.binary, ["--json"], dict(os.environ)
    if mode.endswith("@other"):
        binary, mode = a.other_binary, mode[: -len("@other")]
    for part in mode.split("+"):
        if part == "noflows":
            args += ["--only", "call,overhead"]
        elif part.startswith("cut:"):
            env["EBTOP_BENCH_CUT"] = part[4:]
        elif part == "nopeerhooks":
            env["EBTOP_BENCH_NO_PEER_HOOKS"] = "1"
        elif part == "notls":
            args += ["--tls", "off"]
        elif part != "on":
            sys.exit(f"unknown mode {mode}")
    out = open(f"/tmp/udp_toggle.{os.getpid()}.jsonl", "w+")
    p = subprocess.Popen([binary, *args, *extra], stdout=out, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 20
    while time.time() < deadline:  # the session has started once its meta line is out
        out.seek(0)
        if '"type":"meta"' in out.read(4096):
            break
        time.sleep(0.05)
    else:
        p.kill()
        sys.exit(f"{mode}: no meta line in 20 s")
    # The window starts once every probe is attached and the TLS lookout's first read of the
    # installed programs (0.3-1 s of CPU on this VM, once per session) is over: the flood is
    # measured traced, not ebtop's start (before 2026-11-30 it was not waited for, and the
    # ratios of earlier sections include it).
    wait_attached(p.pid)
    wait_tls_scan(p.pid)
    return p, out


def stop(p, out):
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)
    out.seek(0)
    lines = []
    for l in out:
        if not l.startswith("{"):
            continue
        try:
            lines.append(json.loads(l))
        except json.JSONDecodeError as e:
            sys.exit(f"ebtop wrote a line that is not JSON ({e}): {l[:400]!r}")
    out.close()
    os.unlink(out.name)
    return lines


load_before = os.getloadavg()
rows = {m: {"on": [], "off": [], "ratio": []} for m in modes}
for cycle in range(a.cycles):
    order = modes[cycle % len(modes):] + modes[: cycle % len(modes)]
    for m in order:
        off = flood_window()
        p, out = start(m)
        on = flood_window()
        stop(p, out)
        rows[m]["off"].append(off)
        rows[m]["on"].append(on)
        rows[m]["ratio"].append(on / off)
        print(f"cycle {cycle} {m:14} off {off:>9.0f} on {on:>9.0f} ratio {on / off:.3f}", flush=True)

stats = {}
if a.stats:
    for m in modes:
        p, out = start(m, ["--bpf-stats", "full", "--overhead-programs", "--delay", "1s"])
        sent = flood_window()
        lines = stop(p, out)
        progs = {}
        for o in lines:
            if o.get("type") != "overhead":
                continue
            for g in o.get("bpf_programs") or []:
                q = progs.setdefault(g["name"], {"runs": 0, "run_time_ns": 0})
                q["runs"] += g.get("runs") or 0
                q["run_time_ns"] += g.get("run_time_ns") or 0
        dgrams = sent * a.window
        stats[m] = {name: {"ns_per_run": round(q["run_time_ns"] / q["runs"]) if q["runs"] else None,
                           "runs_per_datagram": round(q["runs"] / dgrams, 3),
                           "ns_per_datagram": round(q["run_time_ns"] / dgrams)}
                    for name, q in progs.items() if q["runs"]}
        print(m, json.dumps(stats[m], indent=1))

r = {"window_s": a.window, "cycles": a.cycles, "senders": a.senders, "cpus": os.cpu_count(),
     "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "modes": {}}
for m, v in rows.items():
    q = statistics.quantiles(v["ratio"], n=4) if len(v["ratio"]) > 1 else [v["ratio"][0]] * 3
    r["modes"][m] = {"off_median": statistics.median(v["off"]), "on_median": statistics.median(v["on"]),
                     "ratio_median": statistics.median(v["ratio"]), "ratio_iqr": [q[0], q[2]],
                     "ratios": v["ratio"], "bpf": stats.get(m)}
    print(f"{m:14} ratio {r['modes'][m]['ratio_median']:.3f} ({q[0]:.3f}-{q[2]:.3f})  "
          f"off {r['modes'][m]['off_median']:.0f}  on {r['modes'][m]['on_median']:.0f}")
with open(a.out, "w") as f:
    json.dump(r, f, indent=1)
