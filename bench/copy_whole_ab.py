#!/usr/bin/env python3
"""What copying Redis sends whole costs, paired (run by hand, as root).

    bench/copy_whole_ab.py BINARY [--cycles 4] [--pipeline 100] [--data 100] [-n 100000]

A redis-server of its own; per cycle, in alternating order, one ebtop session with
`--copy-whole 262144` (the default) and one with `--copy-whole 0` (a head and a tail, as before
issue 43 item 2), each around the same redis-benchmark run (`-P pipeline -d data -t set,get`,
4 connections): writes of ~pipeline × (data + 30) bytes, above the default snaplen. Per
session: BPF run time and runs of the capture programs (`--bpf-stats full`), ebtop's CPU,
records, bytes copied whole, ring losses, calls shown, and redis-benchmark's rate. Prints the
medians per mode and the added BPF time per record copied whole and per KiB it added.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18977
TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")


def cpu_ns(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_NS


def session(binary, whole, args):
    out = tempfile.TemporaryFile(mode="w+")
    eb = subprocess.Popen([binary, "--json", "--port", str(PORT), "--bpf-stats", "full",
                           "--overhead-programs", "--copy-whole", str(whole)], stdout=out)
    while True:
        out.seek(0)
        if out.readline():
            break
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.monotonic()
    bench = subprocess.run(["redis-benchmark", "-p", str(PORT), "-n", str(args.n), "-c", "4",
                            "-P", str(args.pipeline), "-d", str(args.data), "-t", "set,get",
                            "--csv"], capture_output=True, text=True, check=True)
    wall = time.monotonic() - t0
    time.sleep(1.2)  # one more interval: the last overhead line covers the run
    cpu = cpu_ns(eb.pid)
    eb.send_signal(2)
    eb.wait()
    rps = [float(l.split(",")[1].strip('"')) for l in bench.stdout.splitlines()[1:]]
    bpf_ns = runs = 0
    summary = None
    out.seek(0)
    for line in out:
        rec = json.loads(line)
        if rec.get("type") == "overhead":
            for p in rec.get("bpf_programs") or []:
                if p["name"].startswith("cap_") or p["name"].startswith("sys_"):
                    bpf_ns += p["run_time_ns"]
                    runs += p["runs"]
        elif rec.get("type") == "summary":
            summary = rec
    k = summary["kernel"]
    return {"whole": whole, "bpf_ns": bpf_ns, "runs": runs, "cpu_ns": cpu, "wall_s": wall,
            "rps": statistics.mean(rps), "records": k["events"], "lost": k["lost"],
            "copied_whole": k.get("copied_whole", 0),
            "copied_whole_bytes": k.get("copied_whole_bytes", 0), "calls": summary["calls"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--pipeline", type=int, default=100)
    ap.add_argument("--data", type=int, default=100)
    ap.add_argument("-n", type=int, default=100000)
    args = ap.parse_args()
    server = subprocess.Popen(["redis-server", "--port", str(PORT), "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    rows = []
    try:
        for c in range(args.cycles):
            order = [262144, 0] if c % 2 == 0 else [0, 262144]
            for whole in order:
                rows.append(session(args.binary, whole, args))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.terminate()
    med = {}
    for whole in (262144, 0):
        rs = [r for r in rows if r["whole"] == whole]
        med[whole] = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "whole"}
        m = med[whole]
        print(f"copy-whole {whole}: BPF {m['bpf_ns'] / m['runs']:.0f} ns/run, "
              f"ebtop CPU {m['cpu_ns'] / 1e6:.0f} ms, {m['records']:.0f} records, "
              f"{m['copied_whole']:.0f} whole ({m['copied_whole_bytes'] / 2**20:.1f} MiB added), "
              f"lost {m['lost']:.0f}, calls {m['calls']:.0f}, redis-benchmark {m['rps']:.0f}/s")
    on, off = med[262144], med[0]
    added = on["bpf_ns"] - off["bpf_ns"]
    if on["copied_whole"]:
        print(f"added BPF time: {added / 1e6:.1f} ms = {added / on['copied_whole']:.0f} ns per "
              f"record copied whole, {added / (on['copied_whole_bytes'] / 1024):.0f} ns per KiB")


if __name__ == "__main__":
    sys.exit(main())
