#!/usr/bin/env python3
"""How long ebtop's ring reader stays away from the ring, A/B (run by hand, as root):

    bench/reader_gaps.py BINARY_A BINARY_B [--rounds 3] [--seconds 6]

nginx (1 worker, `return 200`) under continuous `wrk -t1 -c50` (none with --idle); each binary in turns runs
`--json --port P > /dev/null` while bpftrace times, on its reader thread (the main thread),
every stretch between one `epoll_wait` returning and the next one starting: the time the
reader spends away from the ring (consuming a batch, flushing, and at each interval tick the
interval's work). Prints per session the number of stretches and their sum, the longest, how
many were over 1 ms and 4 ms, and those over 20 ms (when they ended); then all of it as JSON. A stretch of T at R records/s
leaves T×R records for the ring to hold. With --exec, large programs are run mid-session:
ebtop looks at each new program for TLS libraries (its memory map, its symbol tables).
"""
import argparse, json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import apt  # noqa: E402
from toggle import PORT, wait_attached  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

SCRIPT = r"""
tracepoint:syscalls:sys_exit_epoll_wait /tid == $1/ { @left = nsecs; }
tracepoint:syscalls:sys_enter_epoll_wait /tid == $1 && @left/ {
  $d = nsecs - @left;
  @n = count(); @sum_us = sum($d / 1000);
  if ($d > 1000000) { printf("{\"us\": %d, \"ended_ms\": %d}\n", $d / 1000, nsecs / 1000000); }
}
"""


def session(binary, seconds, execs=()):
    eb = subprocess.Popen([binary, "--json", "--port", str(PORT)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    wait_attached(eb.pid)
    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
    bt = subprocess.Popen(["bpftrace", "-f", "json", "-e", SCRIPT, str(eb.pid)],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(1.5 + seconds / 2)  # bpftrace attaches in about a second
    res_exec_ms = (time.clock_gettime(time.CLOCK_MONOTONIC) - t0) * 1000
    for prog in execs:
        subprocess.run([prog, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds / 2)
    stop_ms = (time.clock_gettime(time.CLOCK_MONOTONIC) - t0) * 1000
    bt.send_signal(2)
    out, _ = bt.communicate()
    eb.send_signal(2)
    eb.wait()
    res = {"long": []}
    for line in out.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("type") == "printf":
            try:
                res["long"].append(json.loads(d["data"]))
            except ValueError:
                pass
        elif d.get("type") == "map":
            for k, v in d["data"].items():
                res[k.lstrip("@")] = v
    # Stretches over 1 ms, as ms since bpftrace started (the execs ran at `exec_ms`); those
    # ending as bpftrace detaches (its own doing: ~100 ms each) are left out.
    for x in res["long"]:
        x["ended_ms"] = round(x["ended_ms"] - t0 * 1000)
    res["long"] = [x for x in res["long"] if x["ended_ms"] < stop_ms]
    res["exec_ms"] = round(res_exec_ms)
    res["max_us"] = max((x["us"] for x in res["long"]), default=0)
    res["over_1ms"] = len(res["long"])
    res["over_4ms"] = sum(x["us"] > 4000 for x in res["long"])
    res["over_20ms"] = [x for x in res["long"] if x["us"] > 20000]
    res.pop("left", None)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--exec", action="append", default=[], metavar="PROGRAM",
                    help="run PROGRAM --version in the middle of each session (a large "
                         "executable ebtop has not seen: its first look reads its symbols)")
    ap.add_argument("--idle", action="store_true",
                    help="no load: each interval tick is then the one long stretch")
    a = ap.parse_args()
    apt("nginx", "wrk", "bpftrace")
    d = tempfile.mkdtemp(prefix="ebtop-gaps-")
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000000;
  server {{ listen 127.0.0.1:{PORT}; location / {{ return 200 "ok"; }} }} }}
""")
    nginx = subprocess.Popen(["nginx", "-c", f"{d}/nginx.conf", "-p", d])
    time.sleep(0.5)
    wrk = None if a.idle else subprocess.Popen(
        ["wrk", "-t1", "-c50", "-d3600s", f"http://127.0.0.1:{PORT}/"], stdout=subprocess.DEVNULL)
    results = {a.a: [], a.b: []}
    try:
        for _ in range(a.rounds):
            for b in (a.a, a.b):
                r = session(b, a.seconds, a.exec)
                results[b].append(r)
                print(b, {k: v for k, v in r.items() if k != "long"}, flush=True)
    finally:
        if wrk:
            wrk.kill()
        nginx.terminate()
        nginx.wait()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
