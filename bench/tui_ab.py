#!/usr/bin/env python3
"""Paired A/B of the terminal UI's CPU per span (run by hand, as root).

    bench/tui_ab.py A_BINARY B_BINARY [--rounds 6] [--rate 20000] [--seconds 8]

nginx (1 worker pinned to the last CPU, `return 200 "ok"`) gets --rate requests/s from
examples/loadgen (open loop, 32 connections) for --seconds while ebtop's terminal UI (`--port
P`, in a 160×45 tmux session) traces it; the two binaries alternate (ABBA…). ebtop's CPU
(user + sys) is counted from once its probes are attached and its TLS lookout is at rest until
loadgen ends, divided by the spans (2 per request). Prints each binary's median and the ratio
of the medians.
"""
import argparse, json, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import (HZ, apt, build, cpu_ticks, pinned_ok_nginx, wait_attached,  # noqa: E402
                 wait_tls_scan, warn_if_bpf_stats_on)

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18934


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--seconds", type=int, default=8)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/tui_ab.py needs root (ebtop loads eBPF)")
    warn_if_bpf_stats_on()
    apt("nginx", "tmux")
    _, examples = build()
    nginx = pinned_ok_nginx(PORT, "ebtop-tui-ab-")
    per_span = {a.a: [], a.b: []}
    try:
        for r in range(a.rounds):
            for binary in ([a.a, a.b] if r % 2 == 0 else [a.b, a.a]):
                subprocess.run("tmux kill-session -t ebtop-tui-ab 2>/dev/null", shell=True)
                subprocess.run(["tmux", "new-session", "-d", "-s", "ebtop-tui-ab", "-x", "160",
                                "-y", "45", f"{binary} --port {PORT}"], check=True)
                time.sleep(0.5)
                pid = int(subprocess.run(["pgrep", "-n", "-x", os.path.basename(binary)[:15]],
                                         capture_output=True, text=True).stdout.split()[0])
                wait_attached(pid)
                wait_tls_scan(pid)
                t0 = cpu_ticks(pid)
                out = subprocess.run([f"{examples}/loadgen", f"127.0.0.1:{PORT}", "/",
                                      str(a.rate), str(a.seconds), "32"],
                                     capture_output=True, text=True, check=True).stdout
                t1 = cpu_ticks(pid)
                sent = json.loads(out)["sent"]
                subprocess.run("tmux send-keys -t ebtop-tui-ab q", shell=True)
                time.sleep(1)
                subprocess.run("tmux kill-session -t ebtop-tui-ab 2>/dev/null", shell=True)
                us = (t1 - t0) / HZ * 1e6 / (2 * sent)
                per_span[binary].append(round(us, 3))
                print(f"{binary}: {us:.3f} µs/span", file=sys.stderr)
    finally:
        nginx.terminate()
        nginx.wait()
    for binary, v in per_span.items():
        print(f"{binary}: median {statistics.median(v):.3f} µs/span {v}")
    print(f"B/A (medians): {statistics.median(per_span[a.b]) / statistics.median(per_span[a.a]):.3f}")


if __name__ == "__main__":
    main()
