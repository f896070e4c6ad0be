#!/usr/bin/env python3
"""The interface flow counter's map designs under a UDP flood through a veth, paired (run by
hand, as root):

    bench/iface_maps.py [--window 3] [--cycles 6] [--senders 2]

Runs examples/iface_map_bench.rs (release): per cycle one window per design in a rotating
order — no program, ebtop's per-CPU hash (swapped per interval), one shared hash with atomic
adds, a ring record per packet — and reports datagrams/s, the ratio to the cycle's window
without a program (medians), and each program's BPF ns per packet (statistics on for one more
window each). Writes bench/iface-maps-results.json with the host's load average.
"""
import argparse, json, os, subprocess

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser()
ap.add_argument("--window", type=float, default=3)
ap.add_argument("--cycles", type=int, default=6)
ap.add_argument("--senders", type=int, default=2)
a = ap.parse_args()
subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "iface_map_bench"],
               cwd=ROOT, check=True)
exe = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                   "release", "examples", "iface_map_bench")
load_before = os.getloadavg()
out = subprocess.run([exe, str(a.window), str(a.cycles), str(a.senders)], check=True,
                     capture_output=True, text=True).stdout
r = json.loads(out)
r["loadavg_before"], r["loadavg_after"] = load_before, os.getloadavg()
r["cpus"] = os.cpu_count()
with open(os.path.join(ROOT, "bench", "iface-maps-results.json"), "w") as f:
    json.dump(r, f, indent=1)
for d in r["designs"]:
    print(f'{d["design"]:12} {d["datagrams_per_s_median"]:>10.0f} dgrams/s  '
          f'ratio {d["ratio_to_none_median"]:.3f}  bpf {d["bpf_ns_per_packet"]} ns/packet')
