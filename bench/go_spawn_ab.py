"""What goroutine creation's probes (src/bpf/gospawn.h: newproc's entry and newproc.func1's
call of runqput, two per `go` statement) cost per goroutine created, paired. A Go program
(bench/gospawn) creates goroutines that only end, in batches of 1,000, and prints its own
rate every 500 ms; per round two ebtop sessions (release build, `--json --overhead-programs
--bpf-stats full`: BPF statistics on only while ebtop reads them), one with the probes and
one with `EBTOP_GO_SPAWN=0`, the order alternating. Per session: the program's ns per
goroutine created in a window while ebtop runs, the go_spawn programs' runs and run time.
Reports the median paired difference and ratio of ns per creation (probes on − off), the
probes' hits per creation and BPF run time per hit.

Run as root: python3 bench/go_spawn_ab.py target/release/ebtop [--rounds 7] [--window 4]
[--gomaxprocs 1]"""
import argparse, json, os, signal, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import wait_attached  # noqa: E402
from redis_toggle import quartiles  # noqa: E402

os.environ.setdefault("EBTOP_MAX_CPU", "off")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Rate:
    """The Go program's reports, read as they come."""

    def __init__(self, proc):
        self.lines, self.lock = [], threading.Lock()
        threading.Thread(target=self.read, args=(proc,), daemon=True).start()

    def read(self, proc):
        for line in proc.stdout:
            n, ns = line.split()
            with self.lock:
                self.lines.append((time.monotonic(), int(n), int(ns)))

    def window(self, seconds):
        """ns per goroutine over the reports of the next `seconds`, and goroutines made."""
        t0 = time.monotonic()
        time.sleep(seconds)
        with self.lock:
            got = [(n, ns) for t, n, ns in self.lines if t > t0]
        n, ns = sum(g[0] for g in got), sum(g[1] for g in got)
        return ns / n, n


def session(binary, pid, rate, window, probes):
    env = dict(os.environ, EBTOP_GO_SPAWN="1" if probes else "0")
    out = tempfile.TemporaryFile()
    args = [binary, "--json", "--overhead-programs", "--bpf-stats", "full", "--pid", str(pid)]
    e = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    keep = subprocess.Popen(["grep", "-F", "-e", '"type":"overhead"'], stdin=e.stdout,
                            stdout=out)
    e.stdout.close()
    wait_attached(e.pid)
    time.sleep(1.0)  # the TLS lookout probes the running Go program after the start
    ns, made = rate.window(window)
    e.send_signal(signal.SIGINT)
    e.wait()
    keep.wait()
    out.seek(0)
    runs, run_ns, cpu = 0, 0, []
    for line in out:
        v = json.loads(line)
        if v.get("user_cpu_pct") is not None:
            cpu.append(v["user_cpu_pct"])
        for p in v.get("bpf_programs") or []:
            if p["name"].startswith("go_spawn_"):
                runs += p["runs"]
                run_ns += p["run_time_ns"]
    out.close()
    # ebtop's own CPU (its user-space threads), the median of its per-second overhead lines.
    cpu = sorted(cpu)[len(cpu) // 2] if cpu else None
    return {"probes": probes, "ns_per_spawn": ns, "spawns": made, "go_spawn_runs": runs,
            "go_spawn_run_ns": run_ns, "ebtop_cpu_pct": cpu}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--gomaxprocs", type=int, default=0,
                    help="GOMAXPROCS of the Go program (1: ebtop's reader has the other CPU, "
                         "so the program's time is the probes' own: traps and BPF runs)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="go-spawn-ab-")
    prog = os.path.join(work, "gospawn")
    subprocess.run(["go", "build", "-buildvcs=false", "-o", prog, "."], check=True,
                   cwd=os.path.join(ROOT, "bench/gospawn"),
                   env=dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local"))
    env = dict(os.environ, GOMAXPROCS=str(a.gomaxprocs)) if a.gomaxprocs else None
    p = subprocess.Popen([prog], stdout=subprocess.PIPE, text=True, env=env)
    try:
        rate = Rate(p)
        rate.window(2)  # warm up
        sessions = []
        for r in range(a.rounds):
            pair = {}
            for probes in ((False, True) if r % 2 == 0 else (True, False)):
                pair[probes] = session(a.binary, p.pid, rate, a.window, probes)
                print(json.dumps(pair[probes]), file=sys.stderr)
            sessions.append(pair)
        on = [s[True] for s in sessions]
        result = {
            "ns_per_spawn_added": quartiles([s[True]["ns_per_spawn"] - s[False]["ns_per_spawn"]
                                             for s in sessions]),
            "ratio_on_off": quartiles([s[True]["ns_per_spawn"] / s[False]["ns_per_spawn"]
                                       for s in sessions]),
            "ns_per_spawn_off": quartiles([s[False]["ns_per_spawn"] for s in sessions]),
            "hits_per_spawn": quartiles([s["go_spawn_runs"] / s["spawns"] for s in on]),
            "bpf_ns_per_hit": quartiles([s["go_spawn_run_ns"] / s["go_spawn_runs"]
                                         for s in on if s["go_spawn_runs"]]),
            "ebtop_cpu_pct_added": quartiles([s[True]["ebtop_cpu_pct"] - s[False]["ebtop_cpu_pct"]
                                              for s in sessions
                                              if s[True]["ebtop_cpu_pct"] is not None
                                              and s[False]["ebtop_cpu_pct"] is not None]),
            "spawns_per_s_on": quartiles([s["spawns"] / a.window for s in on]),
            "sessions": [[s[False], s[True]] for s in sessions],
        }
        print(json.dumps(result, indent=1))
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait()


if __name__ == "__main__":
    main()
