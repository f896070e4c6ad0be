#!/usr/bin/env python3
"""ebtop's cost at h2load saturation over cleartext HTTP/2, paired (run by hand, as root).

    bench/h2load_toggle.py [--cycles 6] [--window 3] [--streams 16]

nghttpd (--no-tls, pinned to the last CPU) serves a small file; h2load (`-c 4 -m STREAMS`,
pinned to CPU 0) runs for WINDOW seconds at a time, alternately without and with ebtop
(`--json --port PORT --bpf-stats full --overhead-programs`, release build, output filtered by
grep to its overhead and summary lines). h2load's own requests/s of each window is the rate;
each "on" window is divided by the mean of the "off" windows on either side. Each request is
two spans (h2load's and nghttpd's). Reports medians (and quartiles) over the cycles and writes
bench/h2load-toggle-results.json (issue 15).
"""
import argparse, json, os, re, shutil, signal, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import build  # noqa: E402
from toggle import wait_attached  # noqa: E402
from redis_toggle import cpu_ns, quartiles, session_totals  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18944


def h2load_window(seconds, streams):
    """h2load for `seconds`: (requests/s, requests done)."""
    out = subprocess.run(["taskset", "-c", "0", "h2load", "-c", "4", "-m", str(streams), "-t", "1",
                          "-D", str(seconds), f"http://127.0.0.1:{PORT}/index.html"],
                         capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out).group(1))
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", out).group(1))
    return rate, done


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--window", type=int, default=3)
    ap.add_argument("--streams", type=int, default=16)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/h2load_toggle.py needs root (ebtop loads eBPF)")
    for tool in ("nghttpd", "h2load"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing: scripts/deps installs it")
    binary, _ = build()
    ncpu = os.cpu_count()
    d = tempfile.mkdtemp(prefix="ebtop-h2load-toggle-")
    with open(os.path.join(d, "index.html"), "w") as f:
        f.write("hello\n")
    server = subprocess.Popen(["taskset", "-c", str(ncpu - 1), "nghttpd", "--no-tls", "-d", d,
                               str(PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    windows, sessions = [], []
    try:
        h2load_window(1, a.streams)  # warm up
        for _ in range(a.cycles):
            windows.append(("off", h2load_window(a.window, a.streams)[0]))
            out = tempfile.TemporaryFile()
            e = subprocess.Popen([binary, "--json", "--overhead-programs", "--port", str(PORT),
                                  "--bpf-stats", "full"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            keep = subprocess.Popen(["grep", "-F", "-e", '"type":"overhead"', "-e",
                                     '"type":"summary"'], stdin=e.stdout, stdout=out)
            e.stdout.close()
            wait_attached(e.pid)
            cpu0 = cpu_ns(e.pid)
            rate, done = h2load_window(a.window, a.streams)
            cpu = cpu_ns(e.pid) - cpu0
            windows.append(("on", rate))
            e.send_signal(signal.SIGINT)
            e.wait()
            keep.wait()
            bpf_ns, calls, lost = session_totals(out)
            out.close()
            sessions.append({"requests": done, "calls": calls, "cpu_ns": cpu, "bpf_ns": bpf_ns,
                             "lost": lost})
        windows.append(("off", h2load_window(a.window, a.streams)[0]))
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(d, ignore_errors=True)
    ratios = [r / ((windows[i - 1][1] + windows[i + 1][1]) / 2)
              for i, (m, r) in enumerate(windows) if m == "on"]
    report = {
        "throughput_ratio": quartiles(ratios),
        "off_requests_per_s_median": round(statistics.median(r for m, r in windows if m == "off")),
        # Every request of the window is seen from both sides: exactly 2 (h2load's requests
        # run only while ebtop is attached).
        "calls_per_request": quartiles([s["calls"] / max(s["requests"], 1) for s in sessions]),
        "user_space_ns_per_span": quartiles([s["cpu_ns"] / max(2 * s["requests"], 1)
                                             for s in sessions]),
        "bpf_ns_per_span": quartiles([s["bpf_ns"] / max(s["calls"], 1) for s in sessions]),
        "ring_lost": sum(s["lost"] for s in sessions),
        "streams": a.streams,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h2load-toggle-results.json")
    with open(path, "w") as f:
        json.dump({"report": report, "windows": windows, "sessions": sessions}, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
