#!/usr/bin/env python3
"""Replay throughput of the sharded pipeline: `ebtop -r FILE --json --threads N > /dev/null` for
each N, in turns, R rounds. Per N: median wall time → events/s, and the CPU of each thread
(from /proc/PID/task/*/stat, sampled every 5 ms: the last sample before the exit is used, so a
thread's figure may miss up to 5 ms) split into the pipeline thread (source, dealing, applying
results, aggregates, output) and the tracking workers (decode, tracking, parsing, call lines).
Per-core capacity of each stage = events / that stage's CPU seconds.

  bench/replay_threads.py BINARY RECORDING [--threads 1,2,3] [--rounds 5]

A recording to use: `ebtop -w FILE --port P --duration 20s` while wrk loads nginx on port P
(bench/notes.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """{tid: (name, cpu seconds)} of a running process."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def run(binary, recording, threads):
    t0 = time.monotonic()
    p = subprocess.Popen([binary, "-r", recording, "--json", "--threads", str(threads)],
                         stdout=subprocess.DEVNULL)
    last = {}
    while p.poll() is None:
        last.update(thread_cpu(p.pid))
        time.sleep(0.005)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{binary} exited with {p.returncode}")
    workers = sum(c for n, c in last.values() if n.startswith("ebtop-track"))
    main = sum(c for n, c in last.values() if not n.startswith("ebtop-track"))
    return wall, main, workers


def events_of(binary, recording):
    out = subprocess.run([binary, "-r", recording, "--json", "--threads", "1"], check=True,
                         stdout=subprocess.PIPE).stdout
    return json.loads(out.splitlines()[-1])["events"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("recording")
    ap.add_argument("--threads", default="1,2,3")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    counts = [int(x) for x in a.threads.split(",")]
    events = events_of(a.binary, a.recording)
    res = {n: [] for n in counts}
    for _ in range(a.rounds):
        for n in counts:
            res[n].append(run(a.binary, a.recording, n))
    print(f"{events} events, {a.rounds} rounds, {os.cpu_count()} CPUs")
    print("threads | wall s | M events/s | pipeline thread CPU s | workers CPU s | "
          "pipeline M events/s/core | workers M events/s/core")
    for n in counts:
        wall = statistics.median(r[0] for r in res[n])
        main_cpu = statistics.median(r[1] for r in res[n])
        work_cpu = statistics.median(r[2] for r in res[n])
        per_main = events / main_cpu / 1e6 if main_cpu else float("nan")
        per_work = events / work_cpu / 1e6 if work_cpu else float("nan")
        print(f"{n} | {wall:.3f} | {events / wall / 1e6:.2f} | {main_cpu:.2f} | {work_cpu:.2f} | "
              f"{per_main:.2f} | {per_work:.2f}")


if __name__ == "__main__":
    main()
