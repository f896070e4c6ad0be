#!/usr/bin/env python3
"""Paired live A/B of --otlp's cost (issue 48): `ebtop --json --tls off` (A) and the same with
`--otlp URL` (B), in turns, while wrk saturates an HTTP server on PORT; ebtop's CPU (user +
sys of all its threads, from /proc, over the load alone: start-up left out) per call, and the
median over the rounds of B - A per call. Needs a collector at URL (scripts/otelcol builds one;
a file exporter to /dev/null will do) and a server on PORT (nginx returning a fixed body).

  bench/otlp_ab.py EBTOP URL ROUNDS SECONDS [PORT]
"""
import json, os, signal, subprocess, sys, time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")
BIN, URL, ROUNDS, SECS = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
PORT = sys.argv[5] if len(sys.argv) > 5 else "18089"
OUT = "/tmp/ebtop-otlp-ab.jsonl"
tick = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def run(otlp):
    args = [BIN, "--json", "--port", PORT, "--tls", "off"] + (["--otlp", URL] if otlp else [])
    out = open(OUT, "w")
    p = subprocess.Popen(args, stdout=out, stderr=subprocess.DEVNULL)
    while True:
        time.sleep(0.2)
        try:
            if '"type":"meta"' in open(OUT).read(4096): break
        except FileNotFoundError: pass
    time.sleep(1)
    c0 = cpu(p.pid)
    subprocess.run(["wrk", "-t1", "-c8", f"-d{SECS}s", f"http://127.0.0.1:{PORT}/"], stdout=subprocess.DEVNULL)
    time.sleep(1.5)
    c1 = cpu(p.pid)
    p.send_signal(signal.SIGINT); p.wait()
    s = json.loads(open(OUT).read().strip().splitlines()[-1])
    return c1 - c0, s["calls"], s.get("otlp")
res = []
for r in range(ROUNDS):
    order = [False, True] if r % 2 == 0 else [True, False]
    got = {o: run(o) for o in order}
    a, b = got[False], got[True]
    res.append((a[0] / a[1] * 1e6, b[0] / b[1] * 1e6))
    print(f"round {r}: A {a[0]:.2f}s/{a[1]} calls = {res[-1][0]:.2f} us/call; B {b[0]:.2f}s/{b[1]} = {res[-1][1]:.2f} us/call {b[2]}", flush=True)
import statistics
print("median A us/call", statistics.median(x[0] for x in res), "B", statistics.median(x[1] for x in res),
      "B-A", statistics.median(x[1] - x[0] for x in res))
