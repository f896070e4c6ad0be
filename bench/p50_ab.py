#!/usr/bin/env python3
"""Paired response times at a fixed rate, traced against untraced (run by hand, as root): the
issue-12 target "at a fixed 10K RPS, p50 RT +≤ 5%", measured so that this host's noise (the
untraced p50 alone moves by ±15% from one run to the next) cancels out.

    bench/p50_ab.py BINARY [--rate 10000] [--seconds 8] [--rounds 10] [-- EXTRA EBTOP ARGS]

nginx (1 worker pinned to the last CPU, `return 200 "ok"`) gets --rate requests/s from
examples/loadgen (open loop, 32 connections, latency from each request's scheduled send time)
for --seconds, once untraced and once while `BINARY --json --port P > /dev/null` traces it
(started first, measured once every probe is attached), in turns (the order flips every round).
Per round: traced / untraced of p50, p90 and p99; printed: each round and the median ratio of
each percentile, with the untraced and traced medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import apt, build, pinned_ok_nginx, wait_attached, wait_tls_scan, warn_if_bpf_stats_on  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18935
PERCENTILES = ("p50_ns", "p90_ns", "p99_ns")


def load(examples, rate, seconds):
    out = subprocess.run([f"{examples}/loadgen", f"127.0.0.1:{PORT}", "/", str(rate),
                          str(seconds), "32"], capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    if r["errors"]:
        sys.exit(f"loadgen saw {r['errors']} errors: {out}")
    return r


def traced(binary, extra, examples, rate, seconds):
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen([binary, "--json", "--port", str(PORT), *extra], stdout=null)
    try:
        wait_attached(p.pid)
        wait_tls_scan(p.pid)
        return load(examples, rate, seconds)
    finally:
        p.send_signal(2)
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=10)
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.extra = extra
    if os.geteuid() != 0:
        sys.exit("bench/p50_ab.py needs root (ebtop loads eBPF)")
    warn_if_bpf_stats_on()
    apt("nginx")
    _, examples = build()
    nginx = pinned_ok_nginx(PORT, "ebtop-p50-ab-")
    rows = []
    try:
        for r in range(a.rounds):
            order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
            got = {}
            for mode in order:
                got[mode] = (load(examples, a.rate, a.seconds) if mode == "off"
                             else traced(a.binary, a.extra, examples, a.rate, a.seconds))
            ratios = {p: got["on"][p] / got["off"][p] for p in PERCENTILES}
            rows.append((got, ratios))
            print(f"round {r + 1}: p50 {got['off']['p50_ns'] / 1e3:.0f} -> "
                  f"{got['on']['p50_ns'] / 1e3:.0f} µs ({ratios['p50_ns']:.3f}), p90 "
                  f"{ratios['p90_ns']:.3f}, p99 {ratios['p99_ns']:.3f}", file=sys.stderr)
    finally:
        nginx.terminate()
        nginx.wait()
    print(f"{a.binary} {' '.join(a.extra)} at {a.rate} requests/s, {a.rounds} rounds:")
    for p in PERCENTILES:
        off = statistics.median(g["off"][p] for g, _ in rows) / 1e3
        on = statistics.median(g["on"][p] for g, _ in rows) / 1e3
        ratios = sorted(r[p] for _, r in rows)
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        print(f"  {p[:3]}: untraced {off:.0f} µs, traced {on:.0f} µs; traced/untraced median "
              f"{statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f})")


if __name__ == "__main__":
    main()
