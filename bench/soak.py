#!/usr/bin/env python3
"""Soak: ebtop --json for a long time at a fixed HTTP rate plus connection and process churn.

Run as root, by hand (not in CI):  bench/soak.py [--minutes 30] [--rate 20000]
  - nginx (1 worker) on loopback, examples/loadgen at --rate requests/s (open loop, 16
    keep-alive connections) for the whole run;
  - churn: a new curl process (new connection, new process, exec + exit) every 100 ms;
  - ebtop --json --port PORT; call lines are dropped by grep (40K lines/s would fill a disk),
    every other line (overhead, lost, summary) is kept.
Samples ebtop's RSS (of which ring-buffer mappings) and CPU (user+sys from /proc, BPF run time
from fdinfo) every 10 s. Prints a JSON report: the first and last 5 minutes side by side, lost
events, and calls counted against the clients' own counts; writes bench/soak-results.json (--results).
"""
import argparse, json, os, signal, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import (HZ, PORT, Nginx, apt, bpf_run_ns, bpf_stats_sysctl_on, build, cpu_ticks,  # noqa: E402
                 rss_split_kb)

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

SAMPLE_S = 10


def churn(stop, counts):
    """One curl every 100 ms: a new process and a new connection each time."""
    while not stop.is_set():
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                            f"http://127.0.0.1:{PORT}/"], capture_output=True, text=True)
        counts["ok" if r.stdout == "200" else "failed"] += 1
        stop.wait(0.1)


def window(samples, t_from, t_to):
    """Mean RSS and CPU % of a core (user+sys, and BPF) over the samples in [t_from, t_to)."""
    s = [x for x in samples if t_from <= x["t"] < t_to]
    if len(s) < 2:
        return None
    dt = s[-1]["t"] - s[0]["t"]
    return {
        "from_s": round(s[0]["t"]), "to_s": round(s[-1]["t"]),
        "rss_mb_mean": round(sum(x["rss_kb"] for x in s) / len(s) / 1024, 1),
        "rss_mb_max": round(max(x["rss_kb"] for x in s) / 1024, 1),
        "rss_own_mb_mean": round(sum(x["rss_kb"] - x["rings_kb"] for x in s) / len(s) / 1024, 1),
        "cpu_pct": round((s[-1]["ticks"] - s[0]["ticks"]) / HZ / dt * 100, 1),
        "bpf_pct": round((s[-1]["bpf_ns"] - s[0]["bpf_ns"]) / 1e9 / dt * 100, 1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--ebtop-args", default="", help="more ebtop options, e.g. '--threads 2'")
    ap.add_argument("--results", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "soak-results.json"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/soak.py needs root (ebtop loads eBPF)")
    apt("nginx", "curl")
    binary, examples = build()
    seconds = int(a.minutes * 60)
    tmp = tempfile.mkdtemp(prefix="ebtop-soak-")
    out_path = os.path.join(tmp, "lines.jsonl")
    # ebtop's own figures (--bpf-stats full) need no sysctl; BPF time for the samples below
    # is read from fdinfo, which needs statistics on: restored afterwards.
    bpf_stats_sysctl_on()
    nginx = Nginx()
    with open(out_path, "w") as out:
        ebtop = subprocess.Popen([binary, "--json", "--port", str(PORT), *a.ebtop_args.split()],
                                 stdout=subprocess.PIPE)
        grep = subprocess.Popen(["grep", "--line-buffered", "-v", '"type":"call"'],
                                stdin=ebtop.stdout, stdout=out)
        ebtop.stdout.close()
        time.sleep(2)  # attach
        stop, counts = threading.Event(), {"ok": 0, "failed": 0}
        churner = threading.Thread(target=churn, args=(stop, counts))
        churner.start()
        load = subprocess.Popen([f"{examples}/loadgen", f"127.0.0.1:{PORT}", "/", str(a.rate),
                                 str(seconds), "16"], stdout=subprocess.PIPE, text=True)
        t0, samples = time.time(), []
        while load.poll() is None:
            rss, rings = rss_split_kb(ebtop.pid)
            samples.append({"t": time.time() - t0, "rss_kb": rss, "rings_kb": rings,
                            "ticks": cpu_ticks(ebtop.pid), "bpf_ns": bpf_run_ns(ebtop.pid)})
            time.sleep(SAMPLE_S)
        loaded = json.loads(load.stdout.read())
        stop.set()
        churner.join()
        time.sleep(2)  # last records in
        ebtop.send_signal(signal.SIGINT)
        ebtop.wait(timeout=120)
        grep.wait(timeout=60)
    nginx.stop()
    lines = [json.loads(l) for l in open(out_path)]
    summary = next(l for l in reversed(lines) if l["type"] == "summary")
    lost_lines = [l for l in lines if l["type"] == "lost"]
    end = samples[-1]["t"]
    report = {
        "minutes": a.minutes, "rate": a.rate, "loadgen": loaded, "churn_curl": counts,
        "first_5_min": window(samples, 0, 300), "last_5_min": window(samples, end - 300, end + 1),
        "lost_events": summary.get("kernel", {}).get("lost"), "lost_lines": len(lost_lines),
        # Every request the clients completed, counted once per side.
        "requests_sent": loaded["sent"] + counts["ok"] + counts["failed"],
        "calls_server": summary.get("calls_server"), "calls_client": summary.get("calls_client"),
        "gaps": summary.get("tracker", {}).get("gaps"),
        "summary": summary,
    }
    with open(a.results, "w") as f:
        json.dump({"report": report, "samples": samples}, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "summary"}, indent=1))


if __name__ == "__main__":
    main()
