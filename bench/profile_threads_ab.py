#!/usr/bin/env python3
"""What `--profile-threads` costs, paired (run by hand, as root):

    bench/profile_threads_ab.py [--binary target/release/ebtop] [--cycles 8] [--secs 6] [--threads 32]

A load of THREADS threads runs throughout (each: ~0.2 ms of work in one of four functions,
then a 2 ms sleep: on- and off-CPU stacks in every thread). Per cycle ebtop profiles it twice,
`--profile -p LOAD` without and with `--profile-threads` (order alternating), SECS each, and
reports per run: ebtop's CPU (user + system from /proc/PID/stat, share of one CPU), its peak
RSS (VmHWM) and the session's stacks (entries of the `profile` lines of span `session`);
then the medians of the paired ratios (threads / not). The kernel's table is the same either
way (its key always holds the thread). Writes bench/profile-threads-results.json.
"""
import argparse, json, os, signal, statistics, subprocess, tempfile, time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/ebtop"))
ap.add_argument("--cycles", type=int, default=8)
ap.add_argument("--secs", type=float, default=6)
ap.add_argument("--threads", type=int, default=32)
a = ap.parse_args()
HZ = os.sysconf("SC_CLK_TCK")

LOAD = r"""
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
volatile unsigned long sink;
__attribute__((noinline)) void f0(void) { for (int i = 0; i < 200000; i++) sink++; }
__attribute__((noinline)) void f1(void) { for (int i = 0; i < 200000; i++) sink++; }
__attribute__((noinline)) void f2(void) { for (int i = 0; i < 200000; i++) sink++; }
__attribute__((noinline)) void f3(void) { for (int i = 0; i < 200000; i++) sink++; }
static void *run(void *arg) {
    long n = (long)arg;
    struct timespec ts = {0, 2000000};
    for (unsigned k = 0;; k++) {
        switch ((n + k) % 4) { case 0: f0(); break; case 1: f1(); break; case 2: f2(); break; default: f3(); }
        nanosleep(&ts, NULL);
    }
    return NULL;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    pthread_t t;
    for (long i = 1; i < n; i++) pthread_create(&t, NULL, run, (void *)i);
    run(0);
}
"""


def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def hwm_kib(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmHWM:"):
            return int(l.split()[1])
    return 0


def once(load_pid, threads):
    out = tempfile.NamedTemporaryFile(delete=False)
    args = [a.binary, "--json", "--only", "profile", "--profile", "-p", str(load_pid)]
    if threads:
        args.append("--profile-threads")
    p = subprocess.Popen(args, stdout=out, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # loaded and attached
    t0, w0 = ticks(p.pid), time.time()
    time.sleep(a.secs)
    t1, w1 = ticks(p.pid), time.time()
    hwm = hwm_kib(p.pid)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)
    stacks = 0
    for l in open(out.name):
        v = json.loads(l)
        if v.get("type") == "profile" and v.get("span") == "session":
            stacks += len(v["stacks"])
    os.unlink(out.name)
    return {"cpu_pct": (t1 - t0) / HZ / (w1 - w0) * 100, "hwm_kib": hwm, "stacks": stacks}


with tempfile.TemporaryDirectory() as d:
    src, binp = os.path.join(d, "load.c"), os.path.join(d, "load")
    open(src, "w").write(LOAD)
    subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", "-o", binp, src], check=True)
    load = subprocess.Popen([binp, str(a.threads)])
    try:
        time.sleep(1)
        rows = []
        for c in range(a.cycles):
            order = [False, True] if c % 2 == 0 else [True, False]
            r = {}
            for threads in order:
                r["threads" if threads else "plain"] = once(load.pid, threads)
            rows.append(r)
            print(f"cycle {c}: plain {r['plain']}  threads {r['threads']}", flush=True)
    finally:
        load.kill()
        load.wait()

ratio = lambda k: statistics.median(r["threads"][k] / max(r["plain"][k], 1e-9) for r in rows)
med = lambda m, k: statistics.median(r[m][k] for r in rows)
res = {
    "threads": a.threads, "secs": a.secs, "cycles": a.cycles, "cpus": os.cpu_count(),
    "loadavg": os.getloadavg(), "rows": rows,
    "median_cpu_pct": {"plain": med("plain", "cpu_pct"), "threads": med("threads", "cpu_pct")},
    "median_hwm_kib": {"plain": med("plain", "hwm_kib"), "threads": med("threads", "hwm_kib")},
    "median_stacks": {"plain": med("plain", "stacks"), "threads": med("threads", "stacks")},
    "paired_ratio": {k: ratio(k) for k in ("cpu_pct", "hwm_kib", "stacks")},
}
print(json.dumps({k: v for k, v in res.items() if k != "rows"}, indent=1))
json.dump(res, open(os.path.join(ROOT, "bench/profile-threads-results.json"), "w"), indent=1)
