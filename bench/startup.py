#!/usr/bin/env python3
"""Time from exec to the `meta` line, and from `meta` to the end of a `--duration` run
(issue 43 item 7: meta within 300 ms of launch on an idle host; --duration counts from meta
and ends within 100 ms of it; issue 42 item 2: discovery off the critical path).

  bench/startup.py [--binary PATH] [--runs N] [--duration 1s] [-- EXTRA EBTOP ARGS]

Run as root. Prints one line per run and the median and worst of each figure, as JSON on the
last line (bench/notes.md and docs/performance.md quote them).
"""
import argparse
import json
import os
import subprocess
import statistics
import sys
import time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")


def one_run(binary, duration_s, extra):
    t0 = time.monotonic()
    p = subprocess.Popen(
        [binary, "--json", "--duration", f"{duration_s}s", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    first = p.stdout.readline()
    t_meta = time.monotonic()
    t_end = t_meta
    for line in p.stdout:
        if line.startswith(b'{"type":"summary"'):
            t_end = time.monotonic()
    p.wait()
    t_exit = time.monotonic()
    kind = json.loads(first).get("type") if first else None
    return {
        "meta_ms": (t_meta - t0) * 1000,
        "meta_to_summary_ms": (t_end - t_meta) * 1000,
        "meta_to_exit_ms": (t_exit - t_meta) * 1000,
        "over_duration_ms": (t_end - t_meta) * 1000 - duration_s * 1000,
        "first_type": kind,
        "rc": p.returncode,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/release/ebtop")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/startup.py: run as root")
    runs = []
    for i in range(a.runs):
        r = one_run(a.binary, a.duration, a.extra)
        runs.append(r)
        print(
            f"run {i}: meta {r['meta_ms']:.0f} ms, summary {r['meta_to_summary_ms']:.0f} ms and exit "
            f"{r['meta_to_exit_ms']:.0f} ms after meta "
            f"(duration {a.duration * 1000:.0f}), first line {r['first_type']}, rc {r['rc']}",
            flush=True,
        )
    out = {
        "runs": a.runs,
        "duration_ms": a.duration * 1000,
        "meta_ms_median": statistics.median(r["meta_ms"] for r in runs),
        "meta_ms_max": max(r["meta_ms"] for r in runs),
        "over_duration_ms_median": statistics.median(r["over_duration_ms"] for r in runs),
        "over_duration_ms_max": max(r["over_duration_ms"] for r in runs),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
