#!/usr/bin/env python3
"""ebtop's cost at MongoDB (FerretDB) saturation, paired (run by hand, as root).

    bench/mongo_toggle.py [--cycles 6] [--window 4] [--threads 4]

FerretDB (scripts/ferretdb, SQLite handler, pinned to the last CPU) under a continuous pymongo
loop (the test venv's Python, pinned to CPU 0: THREADS threads of `find_one` by `_id` on a
10-document collection: FerretDB's SQLite handler reads a collection whole per query, so a
bigger one measures FerretDB) for the whole run; ebtop toggled by bench/paired_sessions.py. A
window's rate: FerretDB's own request counter (`ferretdb_client_requests_total`, its debug
metrics) over the window; the same counter is the ground truth for the calls. Writes
bench/mongo-toggle-results.json.
"""
import argparse, os, shutil, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import build  # noqa: E402
import paired_sessions  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = 18937
DEBUG_PORT = PORT + 1
PYTHON = "/var/cache/ebtop-tests/membio-venv/bin/python"

LOAD = """
import sys, threading, pymongo

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")
c = pymongo.MongoClient(f"mongodb://127.0.0.1:{sys.argv[1]}/")
t = c.bench.docs
t.drop()
t.insert_many([{"_id": i, "v": "x" * 64} for i in range(10)])
def loop(k):
    i = k
    while True:
        t.find_one({"_id": i % 10})
        i += 7
for k in range(int(sys.argv[2])):
    threading.Thread(target=loop, args=(k,), daemon=True).start()
threading.Event().wait()
"""


def requests_total():
    """FerretDB's count of the requests it received (every command, every opcode)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{DEBUG_PORT}/debug/metrics").read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith("ferretdb_client_requests_total{"))


def rate_over(seconds):
    c0, t0 = requests_total(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = requests_total(), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--binary", help="ebtop to measure (default: scripts/build-release's)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/mongo_toggle.py needs root (ebtop loads eBPF)")
    if not os.access(PYTHON, os.X_OK):
        sys.exit(f"{PYTHON} is missing: scripts/deps makes it")
    binary = a.binary or build()[0]
    ferret = subprocess.run([os.path.join(ROOT, "scripts/ferretdb")], check=True,
                            capture_output=True, text=True).stdout.strip()
    ncpu = os.cpu_count()
    d = tempfile.mkdtemp(prefix="ebtop-mongo-toggle-")
    os.mkdir(os.path.join(d, "db"))
    server = subprocess.Popen(
        ["taskset", "-c", str(ncpu - 1), ferret, "--handler=sqlite",
         f"--sqlite-url=file:{d}/db/", f"--listen-addr=127.0.0.1:{PORT}", f"--state-dir={d}",
         f"--debug-addr=127.0.0.1:{DEBUG_PORT}", "--log-level=warn", "--telemetry=disable"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load = None
    try:
        paired_sessions.wait_listening(PORT, server, "FerretDB", timeout=60)
        load = subprocess.Popen(["taskset", "-c", "0", PYTHON, "-c", LOAD, str(PORT),
                                 str(a.threads)], stdout=subprocess.DEVNULL)
        time.sleep(4)
        windows, sessions = paired_sessions.run(binary, PORT, rate_over, requests_total,
                                                a.cycles, a.window, settle=0.2)
    finally:
        if load:
            load.terminate()
            load.wait()
        server.terminate()
        server.wait()
        shutil.rmtree(d, ignore_errors=True)
    rep = paired_sessions.report(windows, sessions, threads=a.threads, rate="requests/s")
    paired_sessions.write("mongo-toggle-results.json", windows, sessions, rep)


if __name__ == "__main__":
    main()
