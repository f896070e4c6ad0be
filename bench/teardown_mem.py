#!/usr/bin/env python3
"""ebtop's own memory in scenario D (examples/many_conns: N connections held, 1,000 new/s, then
all closed at once when it exits), while the connections are held and at their mass close,
for one or more ebtop binaries run in turn (A B A B ...: the host's load is shared alike).

Memory is RSS less the `bpf` mappings (the kernel's rings mapped into ebtop), from
/proc/PID/smaps every 0.25 s. Also checked per run: every flow end shown or counted lost
(`flow_end` lines vs `flow_stats.ends`, `ends_lost`) and how long the teardown's interval
took to write.

    sudo bench/teardown_mem.py --rounds 2 target/release/ebtop /tmp/ebtop-before \\
        --many-conns target/release/examples/many_conns
"""

import argparse, json, os, signal, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import rss_split_kb, wait_attached, wait_tls_scan  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")


def sampler(pid, out_path, stop, samples):
    while not stop.is_set():
        try:
            total, bpf = rss_split_kb(pid)
        except (OSError, ValueError):
            return
        samples.append((time.monotonic(), (total - bpf) / 1024, os.path.getsize(out_path)))
        time.sleep(0.25)


def one_run(binary, many_conns, conns, secs, tmp, args, after_s, diag=False):
    out_path = os.path.join(tmp, "out.jsonl")
    err_path = os.path.join(tmp, "err.txt")
    env = dict(os.environ, EBTOP_DEBUG_FLOW_MEMORY="1") if diag else None
    with open(out_path, "w") as out, open(err_path, "w") as err:
        e = subprocess.Popen([binary, "--json"] + args, stdout=out,
                             stderr=err if diag else subprocess.DEVNULL, env=env)
    wait_attached(e.pid)
    wait_tls_scan(e.pid)
    samples, stop = [], threading.Event()
    t = threading.Thread(target=sampler, args=(e.pid, out_path, stop, samples))
    t.start()
    mc_start = time.monotonic()
    mc = subprocess.Popen([many_conns, str(conns), "1000", str(secs)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    held_from = None
    for line in mc.stderr:
        if "holding" in line:
            held_from = time.monotonic()  # the last worker's: all held after it
    mc.wait()
    closed_at = time.monotonic()
    # The teardown's interval is out within a few seconds (its flow_end lines took 1.5-3.5 s
    # to write here); a longer window would count what else comes (the TLS lookout reading
    # programs other work on the host starts, say).
    time.sleep(after_s)
    stop.set()
    t.join()
    e.send_signal(signal.SIGINT)
    e.wait(timeout=120)
    ends = 0
    stats = None
    big = (0, None)  # the interval with the most flow_end lines: (count, its ts)
    per_ts = {}
    # Where each interval's flow_end lines begin in the output, and where its flow_stats line
    # ends: with the output's size sampled, how long the interval took to write.
    span = {}
    with open(out_path, "rb") as f:
        at = 0
        for raw in f:
            line = raw.decode()
            at += len(raw)
            if '"flow_end"' in line or '"flow_stats"' in line:
                v = json.loads(line)
                if v["type"] == "flow_end":
                    ends += 1
                    per_ts[v["ts"]] = per_ts.get(v["ts"], 0) + 1
                    span.setdefault(v["ts"], [at - len(raw), at])
                else:
                    stats = v
                    if v["ts"] in span:
                        span[v["ts"]][1] = at
    for ts, n in per_ts.items():
        big = max(big, (n, ts))
    write_s = None
    if big[1]:
        first, last = span[big[1]]
        began = next((t for (t, _, size) in samples if size > first), None)
        done = next((t for (t, _, size) in samples if size >= last), None)
        write_s = round(done - began, 2) if began and done else None
    # The workers hold their connections until `secs` after they started, then close them
    # all and exit: held from the last one's "holding" line to then (less 2 s either side:
    # the first reads of the new table, a worker's late start).
    teardown = mc_start + secs
    held = [m for (ts, m, _) in samples if held_from and held_from + 2 <= ts <= teardown - 2]
    after = [m for (ts, m, _) in samples if ts >= teardown - 2]
    return {
        "binary": binary,
        "held_mb": [round(min(held), 1), round(max(held), 1)] if held else None,
        "teardown_peak_mb": round(max(after), 1) if after else None,
        "after_mb": round(after[-1], 1) if after else None,
        "flow_end_lines": ends,
        "ends_written": stats and stats["ends"],
        "ends_lost": stats and stats["ends_lost"],
        "largest_interval_ends": big[0],
        # From its first flow_end line to its flow_stats line (±0.25 s: the sampling).
        "largest_interval_write_s": write_s,
        "samples": [(round(ts - mc_start, 2), round(m, 1)) for (ts, m, _) in samples],
        # --diag: the flow table reader's structure sizes after each poll.
        "diag": [l.strip() for l in open(err_path) if l.startswith("flow memory:")] if diag
        else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--many-conns", default="target/release/examples/many_conns")
    ap.add_argument("--conns", type=int, default=100_000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--after", type=float, default=15, help="seconds watched after the close")
    ap.add_argument("--ebtop-args", default="", help="more ebtop options, e.g. '--tls off'")
    ap.add_argument("--diag", action="store_true",
                    help="EBTOP_DEBUG_FLOW_MEMORY=1: the flow table's structure sizes per poll, "
                    "saved with the samples")
    ap.add_argument("--save", help="write every run with its samples (s from the start, MB) here")
    a = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for b in a.binaries:
                res = one_run(b, a.many_conns, a.conns, a.seconds, tmp, a.ebtop_args.split(),
                              a.after, a.diag)
                res["round"] = r
                samples, diag = res.pop("samples"), res.pop("diag")
                print(json.dumps(res), flush=True)
                res["samples"], res["diag"] = samples, diag
                results.append(res)
                time.sleep(3)
    if a.save:
        with open(a.save, "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(r) for r in results) + "\n]\n")
    return results


if __name__ == "__main__":
    main()
