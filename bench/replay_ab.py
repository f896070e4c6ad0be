#!/usr/bin/env python3
"""Paired A/B of ebtop's user-space cost per event: two binaries replay the same recording
(`-r FILE --json > /dev/null`) in turns, N rounds; for each round the CPU time (user + sys,
from wait4) of B over A. Prints each binary's median CPU time, events/s and µs/event, and the
median of the per-round ratios — the figure that survives a noisy host (one slow round moves
both of its runs' neighbours, not the median). With --same-output, first checks that both
print byte-identical JSON for the recording (an optimisation must not change what is shown).

  bench/replay_ab.py A_BINARY B_BINARY RECORDING [--rounds 15] [--same-output] [-- EXTRA ARGS]
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")


def cpu_of(binary, recording, extra):
    """CPU seconds (user + sys) of one replay, output discarded."""
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen([binary, "-r", recording, "--json", *extra], stdout=null)
        _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{binary} exited with {status}")
    return ru.ru_utime + ru.ru_stime


def output_digest(binary, recording, extra):
    out = subprocess.run([binary, "-r", recording, "--json", *extra], check=True,
                         stdout=subprocess.PIPE).stdout
    return hashlib.sha256(out).hexdigest(), out


def events_of(out):
    for line in reversed(out.splitlines()):
        obj = json.loads(line)
        if obj.get("type") == "summary":
            return obj["events"]
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("recording")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--same-output", action="store_true")
    args, extra = ap.parse_known_args()
    args.extra = [x for x in extra if x != "--"]
    da, out = output_digest(args.a, args.recording, args.extra)
    events = events_of(out)
    if args.same_output:
        db, _ = output_digest(args.b, args.recording, args.extra)
        if da != db:
            sys.exit("outputs differ")
        print("outputs identical")
    ta, tb, ratios = [], [], []
    for i in range(args.rounds):
        # Alternate which runs first so a trend in the host's load favours neither.
        if i % 2 == 0:
            a, b = cpu_of(args.a, args.recording, args.extra), cpu_of(args.b, args.recording, args.extra)
        else:
            b, a = cpu_of(args.b, args.recording, args.extra), cpu_of(args.a, args.recording, args.extra)
        ta.append(a)
        tb.append(b)
        ratios.append(b / a)
    for name, t in (("A", ta), ("B", tb)):
        m = statistics.median(t)
        print(f"{name}: median {m:.3f} s CPU, {events / m / 1e6:.2f} M events/s, "
              f"{m / events * 1e9:.0f} ns/event")
    q = statistics.quantiles(ratios, n=4)
    print(f"B/A: median {statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), "
          f"{events} events, {args.rounds} rounds")


if __name__ == "__main__":
    main()
