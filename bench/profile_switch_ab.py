#!/usr/bin/env python3
"""What `--profile` adds to a context switch, paired (run by hand, as root, on a quiet host):

    bench/profile_switch_ab.py [--binary target/release/ebtop] [--cycles 8] [--loops 100000]

`perf bench sched pipe` pinned to CPU 0 (two tasks passing a token through pipes: two
context switches per op) timed without ebtop and with it, alternating, per cycle: `all` is `--profile
--profile-off-cpu-min off` (on-CPU stacks at 99 Hz of every process, no off-CPU program),
`bench` is `--profile --comm sched-pipe` (on- and off-CPU stacks of the bench's own tasks:
every one of its switches takes a stack). Reports µs per op and the added µs per context
switch (median of paired differences / 2), and ebtop's CPU while the bench ran (user +
system from /proc/PID/stat, as a share of one CPU). Writes bench/profile-switch-results.json.
"""
import argparse, json, os, re, signal, statistics, subprocess, time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--binary", default=os.path.join(ROOT, "target/x86_64-unknown-linux-gnu/release/ebtop"))
ap.add_argument("--cycles", type=int, default=8)
ap.add_argument("--loops", type=int, default=100000)
a = ap.parse_args()
MODES = {"all": ["--profile-off-cpu-min", "off"], "bench": ["--comm", "sched-pipe"]}
HZ = os.sysconf("SC_CLK_TCK")


def bench():
    # Both tasks on one CPU: each op is two switches on it, no cross-CPU wake-up (whose cost on
    # a VM depends on how deeply the other CPU idles: with ebtop running it idles less, and an
    # unpinned bench ran *faster* traced).
    out = subprocess.run(["taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l", str(a.loops)],
                         check=True,
                         capture_output=True, text=True).stdout
    return float(re.search(r"([\d.]+) usecs/op", out).group(1))


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


rows = {m: {"off": [], "on": [], "cpu": []} for m in MODES}
load_before = os.getloadavg()
for cycle in range(a.cycles):
    for m, extra in (list(MODES.items()) if cycle % 2 == 0 else list(MODES.items())[::-1]):
        off = bench()
        p = subprocess.Popen([a.binary, "--json", "--only", "profile", "--profile", *extra],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)  # loaded, attached, names of the running processes read
        t0, w0 = cpu_ticks(p.pid), time.time()
        on = bench()
        t1, w1 = cpu_ticks(p.pid), time.time()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
        rows[m]["off"].append(off)
        rows[m]["on"].append(on)
        rows[m]["cpu"].append((t1 - t0) / HZ / (w1 - w0) * 100)
        print(f"cycle {cycle} {m:6} off {off:.3f} on {on:.3f} us/op  ebtop {rows[m]['cpu'][-1]:.1f}% CPU",
              flush=True)

r = {"loops": a.loops, "cycles": a.cycles, "cpus": os.cpu_count(), "loadavg_before": load_before,
     "loadavg_after": os.getloadavg(), "modes": {}}
for m, v in rows.items():
    diffs = [on - off for on, off in zip(v["on"], v["off"])]
    r["modes"][m] = {"off_us_per_op": statistics.median(v["off"]), "on_us_per_op": statistics.median(v["on"]),
                     "added_us_per_switch": statistics.median(diffs) / 2,
                     "ratio": statistics.median([on / off for on, off in zip(v["on"], v["off"])]),
                     "ebtop_cpu_pct": statistics.median(v["cpu"]), "raw": v}
    print(f"{m:6} off {r['modes'][m]['off_us_per_op']:.3f}  on {r['modes'][m]['on_us_per_op']:.3f} us/op  "
          f"+{r['modes'][m]['added_us_per_switch']:.3f} us/switch  ebtop {r['modes'][m]['ebtop_cpu_pct']:.1f}%")
with open(os.path.join(ROOT, "bench", "profile-switch-results.json"), "w") as f:
    json.dump(r, f, indent=1)
