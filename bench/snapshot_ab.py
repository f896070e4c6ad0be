#!/usr/bin/env python3
"""The flow table's per-interval snapshot, A/B (run by hand, as root):

    bench/snapshot_ab.py N BINARY_A BINARY_B

Holds N loopback TCP connections (2N flows; needs `ulimit -n` above 2N + a margin), then runs
each binary in turns, 3 rounds: `--json --only flow_stats,overhead --overhead-programs
--bpf-stats full`, one byte each way on every connection once it is attached (so every
flow enters the table), ~5 intervals. Prints per session the median of the `snapshot`
program's run time per run (ns) and the table's TCP flows, then all of it as JSON.
"""
import json, resource, socket, subprocess, sys, threading, time
h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; resource.setrlimit(resource.RLIMIT_NOFILE, (h, h)); print("nofile", h)
N = int(sys.argv[1]); bins = sys.argv[2:]
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0)); ls.listen(4096); port = ls.getsockname()[1]
srv = []
def acceptor():
    while len(srv) < N:
        c, _ = ls.accept(); srv.append(c)
t = threading.Thread(target=acceptor); t.start()
cli = []
for i in range(N):
    s = socket.create_connection(("127.0.0.1", port)); cli.append(s)
t.join()
def poke():
    for s in cli: s.send(b"x")
    for s in srv: s.recv(1); s.send(b"y")
    for s in cli: s.recv(1)
res = {b: [] for b in bins}
for rnd in range(3):
    for b in bins:
        p = subprocess.Popen([b, "--json", "--only", "flow_stats,overhead", "--overhead-programs", "--bpf-stats", "full"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        while True:
            l = p.stdout.readline()
            if '"type":"meta"' in l: break
        poke()
        lines = []
        t0 = time.time()
        while time.time() - t0 < 5.5:
            l = p.stdout.readline(); lines.append(l)
        p.terminate(); p.wait()
        ns = []; flows = None
        for l in lines:
            if '"type":"overhead"' in l:
                o = json.loads(l)
                for pr in o.get("bpf_programs", []):
                    if pr["name"].endswith("snapshot") and pr.get("runs"):
                        ns.append(pr["run_time_ns"] / pr["runs"])
            if '"type":"flow_stats"' in l:
                flows = json.loads(l).get("tcp_flows")
        res[b].append((sorted(ns)[len(ns)//2] if ns else None, flows))
        print(b, res[b][-1], flush=True)
print(json.dumps(res))
