#!/usr/bin/env python3
"""How long ebtop's ring reader stays away from the ring, A/B (run by hand, as root):

    bench/reader_gaps.py BINARY_A BINARY_B [--rounds 3] [--seconds 6]

nginx (1 worker, `return 200`) under continuous `wrk -t1 -c50` (none with --idle); each binary in turns runs
`--json --port P > /dev/null` while bpftrace times, on its reader thread (the main thread),
every stretch between one `epoll_wait` returning and the next one starting: the time the
reader spends away from the ring (consuming a batch, flushing, and at each interval tick the
interval's work). Prints per session the number of stretches, the longest, how many were
over 1 ms and 4 ms, and their sum; then all of it as JSON. A stretch of T at R records/s
leaves T×R records for the ring to hold.
"""
import argparse, json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import apt  # noqa: E402
from toggle import PORT, wait_attached  # noqa: E402

SCRIPT = r"""
tracepoint:syscalls:sys_exit_epoll_wait /tid == $1/ { @left = nsecs; }
tracepoint:syscalls:sys_enter_epoll_wait /tid == $1 && @left/ {
  $d = nsecs - @left;
  @n = count(); @sum_us = sum($d / 1000); @max_us = max($d / 1000);
  if ($d > 1000000) { @over_1ms = count(); }
  if ($d > 4000000) { @over_4ms = count(); }
}
"""


def session(binary, seconds):
    eb = subprocess.Popen([binary, "--json", "--port", str(PORT)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    wait_attached(eb.pid)
    bt = subprocess.Popen(["bpftrace", "-f", "json", "-e", SCRIPT, str(eb.pid)],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(seconds + 1.5)  # bpftrace attaches in about a second
    bt.send_signal(2)
    out, _ = bt.communicate()
    eb.send_signal(2)
    eb.wait()
    res = {}
    for line in out.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("type") == "map":
            for k, v in d["data"].items():
                res[k.lstrip("@")] = v
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6)
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
                r = session(b, a.seconds)
                results[b].append(r)
                print(b, r, flush=True)
    finally:
        if wrk:
            wrk.kill()
        nginx.terminate()
        nginx.wait()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
