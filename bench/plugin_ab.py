#!/usr/bin/env python3
"""Paired cost of the HTTP enrich plugin (examples/plugins/json_code.wat, issue 46): ebtop's CPU
per span with it against none, on the same saturation traffic (run by hand, as root).

    bench/plugin_ab.py [--seconds 6] [--rounds 15] [--binary target/release/ebtop] [--out FILE]

nginx (1 worker pinned to the last CPU) answers every request 200 with a 256-byte JSON body
(no error code in it: the plugin scans the whole body, its most expensive path) under
`wrk -t1 -c50` (pinned to CPU 0) for --seconds, recorded by ebtop (`--json --port PORT -w`).
An enrich plugin changes nothing in the kernel (what is captured, copied and sent up is the
same with it or without it): its whole cost is ebtop's user-space work per call, which a
replay of the recording measures without the noise of the load generator. The recording is
then replayed in turns, without the plugin (A) and with it (B), --rounds times; per round the
CPU time (user + sys, from wait4) of each, and B/A. Reports the median CPU µs per span of
each, the median of the paired ratios, the median added ns per span ((B − A) / spans of the
round), and the plugin's own ns per call (its `ns_per_call` in the summary: the time inside
wasmi, ebtop's input and answer handling included). Writes bench/plugin-ab-results.json
(--out: elsewhere, for a trial run on a busy host whose figures are not to be kept).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = 18934
BODY = '{"items": [1, 2, 3], "total": 3, "next": null, "note": "' + "x" * 198 + '"}'
assert len(BODY) == 256


def nginx(d):
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;
worker_cpu_affinity {1 << (os.cpu_count() - 1):b};
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000000; default_type application/json;
  server {{ listen 127.0.0.1:{PORT}; location / {{ return 200 '{BODY}'; }} }} }}
""")
    p = subprocess.Popen(["nginx", "-c", f"{d}/nginx.conf", "-p", d])
    time.sleep(0.5)
    return p


def replay(binary, rec, extra):
    """(CPU seconds, summary) of one replay, its call lines discarded."""
    p = subprocess.Popen([binary, "-r", rec, "--json", *extra], stdout=subprocess.PIPE)
    last = b""
    for line in p.stdout:
        last = line
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{binary} exited with {status}")
    return ru.ru_utime + ru.ru_stime, json.loads(last)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/ebtop"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/plugin-ab-results.json"))
    args = ap.parse_args()
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"{args.binary}: not built (cargo build --release)")
    d = tempfile.mkdtemp(prefix="ebtop-plugin-ab-")
    os.chmod(d, 0o755)
    wasm = f"{d}/json_code.wasm"
    subprocess.run(["cargo", "run", "-q", "--example", "wat2wasm", "--",
                    f"{ROOT}/examples/plugins/json_code.wat", wasm], cwd=ROOT, check=True)
    rec = f"{d}/http.ebt"
    srv = nginx(d)
    try:
        eb = subprocess.Popen([args.binary, "--json", "--port", str(PORT), "-w", rec],
                              stdout=subprocess.DEVNULL)
        time.sleep(3)  # attached
        wrk = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c50", f"-d{args.seconds}s",
                              f"http://127.0.0.1:{PORT}/"], capture_output=True, text=True)
        eb.send_signal(2)
        eb.wait()
    finally:
        srv.terminate()
        srv.wait()
    rps = next(l for l in wrk.stdout.splitlines() if "Requests/sec" in l).split()[-1]
    a_cpu, b_cpu, ratios, added, plugin_ns = [], [], [], [], []
    spans = None
    for _ in range(args.rounds):
        ca, sa = replay(args.binary, rec, [])
        cb, sb = replay(args.binary, rec, ["--plugin", wasm])
        spans = sa["calls"]
        assert sb["calls"] == spans, (sb["calls"], spans)
        p = sb["plugins"][0]
        # Each call handed to the plugin, or counted as not (bytes lost in the recording).
        assert p["calls"] + p["enrich_skipped"] == spans and not p["disabled"], p
        a_cpu.append(ca)
        b_cpu.append(cb)
        ratios.append(cb / ca)
        added.append((cb - ca) / spans * 1e9)
        plugin_ns.append(p["ns_per_call"])
        skipped = p["enrich_skipped"]
    q = lambda v: statistics.quantiles(v, n=4)
    res = {
        "rps_recorded": float(rps),
        "spans": spans,
        "enrich_skipped": skipped,
        "rounds": args.rounds,
        "cpu_us_per_span_without": statistics.median(a_cpu) / spans * 1e6,
        "cpu_us_per_span_with": statistics.median(b_cpu) / spans * 1e6,
        "ratio_median": statistics.median(ratios),
        "ratio_quartiles": [q(ratios)[0], q(ratios)[2]],
        "added_ns_per_span_median": statistics.median(added),
        "plugin_ns_per_call_median": statistics.median(plugin_ns),
    }
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
