#!/usr/bin/env python3
"""ebtop's own CPU at fixed nginx request rates under its default budget (run by hand, as root).

    bench/budget_rate.py [--rates 10000,25000,40000] [--seconds 12] [-- EXTRA EBTOP ARGS]

nginx (1 worker pinned to the last CPU, `return 200 "ok"`) gets each rate from
examples/loadgen (16 keep-alive connections, open loop); ebtop (`--json --port PORT --only
endpoint,overhead`, release build, EBTOP_MAX_CPU unset: the default budget) runs alongside.
Per rate: ebtop's CPU per interval (`overhead` lines' `ebtop_cpu_pct`, the first interval — the
start-up's — left out), and the intervals with a `sampling` line (some traffic sampled out).
Answers "up to what load does the default budget capture every call here".
"""
import argparse, json, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import build, pinned_ok_nginx  # noqa: E402

PORT = 18955


def one_rate(binary, examples, rate, seconds, extra):
    load = subprocess.Popen([f"{examples}/loadgen", f"127.0.0.1:{PORT}", "/", str(rate),
                             str(seconds + 8), "16"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1)
    env = dict(os.environ)
    env.pop("EBTOP_MAX_CPU", None)
    p = subprocess.Popen([binary, "--json", "--port", str(PORT), "--only", "endpoint,overhead"]
                         + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=env)
    t0, cpu, sampled, budget = time.time(), [], 0, None
    try:
        while time.time() - t0 < seconds:
            line = p.stdout.readline()
            if not line:
                break
            v = json.loads(line)
            if v.get("type") == "overhead":
                cpu.append(v.get("ebtop_cpu_pct"))
                budget = v.get("max_cpu_pct")
            elif v.get("type") == "sampling":
                sampled += 1
    finally:
        p.terminate()
        p.wait()
        out, _ = load.communicate()
    got = json.loads(out.decode() or "{}")
    cpu = [c for c in cpu[1:] if c is not None]
    return {"rate": rate, "achieved_rps": got.get("achieved_rps"), "budget": budget,
            "cpu_pct": cpu, "cpu_pct_median": statistics.median(cpu) if cpu else None,
            "intervals": len(cpu), "sampled_intervals": sampled}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="10000,25000,40000")
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/budget_rate.py needs root (ebtop loads eBPF)")
    binary = os.environ.get("EBTOP_BENCH_BINARY")
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "target/release/examples")
    if not binary:
        binary, examples = build()
    nginx = pinned_ok_nginx(PORT, "ebtop-budget-rate-")
    time.sleep(0.5)
    results = []
    try:
        for r in a.rates.split(","):
            res = one_rate(binary, examples, int(r), a.seconds, a.extra)
            print(json.dumps(res), flush=True)
            results.append(res)
    finally:
        nginx.terminate()
        nginx.wait()
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "budget-rate-results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
