#!/usr/bin/env python3
"""ebtop's cost at redis-benchmark saturation, paired (run by hand, as root).

    bench/redis_toggle.py [--cycles 8] [--window 3] [--pipeline 16]

redis-server (pinned to the last CPU, no persistence) under continuous `redis-benchmark -c 50
-P N -t get,set -l` load (pinned to CPU 0) for the whole run: the DeepFlow-style Redis scenario
(issue 13). ebtop (`--json --port PORT --bpf-stats full`, release build, output kept in a
temporary file) is started and stopped in turns. Per "on" window (it starts once ebtop's BPF
links stop growing): the commands redis-server processed (INFO stats) and ebtop's own CPU (user + sys from
/proc/PID/stat) in the window, each command being two spans (redis-benchmark's and
redis-server's); per session the calls ebtop printed, the BPF run time of its programs and the
ring buffer's losses (ebtop's output is filtered by grep to its overhead and summary lines). Each on/off ratio divides an on window's command rate by the mean of the off
windows on either side. Reports medians (and quartiles) over the cycles; writes
bench/redis-toggle-results.json.
"""
import argparse, json, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import build  # noqa: E402
from toggle import wait_attached  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18933
TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")


def commands_total():
    """redis-server's own count of commands processed (INFO stats, one bulk reply)."""
    with socket.create_connection(("127.0.0.1", PORT)) as s:
        s.sendall(b"INFO stats\r\n")
        data = b""
        while b"\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n")
        want = int(head[1:]) + 2
        while len(body) < want:
            body += s.recv(65536)
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":")[1])
    raise RuntimeError("no total_commands_processed in INFO")


def rate_over(seconds):
    c0, t0 = commands_total(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = commands_total(), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def cpu_ns(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_NS  # utime + stime


def session_totals(out):
    """(BPF run time ns, calls, ring losses) of one ebtop session's overhead and summary lines."""
    out.seek(0)
    bpf_ns, calls, lost = 0, 0, 0
    for line in out:
        rec = json.loads(line)
        if rec.get("type") == "overhead":
            bpf_ns += sum(p["run_time_ns"] for p in rec.get("bpf_programs") or [])
        elif rec.get("type") == "summary":
            calls, lost = rec["calls"], rec["kernel"]["lost"]
    return bpf_ns, calls, lost


def quartiles(xs):
    if len(xs) < 2:
        return {"median": round(xs[0], 3) if xs else None, "n": len(xs)}
    q = statistics.quantiles(xs, n=4)
    return {"median": round(statistics.median(xs), 3), "q1": round(q[0], 3),
            "q3": round(q[2], 3), "n": len(xs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--pipeline", type=int, default=16)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/redis_toggle.py needs root (ebtop loads eBPF)")
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing: scripts/deps installs it")
    binary, _ = build()
    ncpu = os.cpu_count()
    d = tempfile.mkdtemp(prefix="ebtop-redis-toggle-")
    server = subprocess.Popen(["taskset", "-c", str(ncpu - 1), "redis-server", "--port", str(PORT),
                               "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--protected-mode", "no", "--dir", d], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    load = subprocess.Popen(["taskset", "-c", "0", "redis-benchmark", "-p", str(PORT), "-c", "50",
                             "-P", str(a.pipeline), "-t", "get,set", "-l", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    windows, sessions = [], []
    try:
        for _ in range(a.cycles):
            windows.append(("off", rate_over(a.window)))
            # Millions of call lines a second: only the overhead and summary lines are kept
            # (grep's CPU counts against the on window, not against ebtop's own).
            out = tempfile.TemporaryFile()
            e = subprocess.Popen([binary, "--json", "--overhead-programs", "--port", str(PORT), "--bpf-stats", "full"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            keep = subprocess.Popen(["grep", "-F", "-e", '"type":"overhead"', "-e",
                                     '"type":"summary"'], stdin=e.stdout, stdout=out)
            e.stdout.close()
            wait_attached(e.pid)
            served0, cpu0 = commands_total(), cpu_ns(e.pid)
            windows.append(("on", rate_over(a.window)))
            served, cpu = commands_total() - served0, cpu_ns(e.pid) - cpu0
            e.send_signal(signal.SIGINT)
            e.wait()
            keep.wait()
            bpf_ns, calls, lost = session_totals(out)
            out.close()
            sessions.append({"served": served, "calls": calls, "cpu_ns": cpu, "bpf_ns": bpf_ns,
                             "lost": lost})
        windows.append(("off", rate_over(a.window)))
    finally:
        load.terminate()
        server.terminate()
        load.wait()
        server.wait()
        shutil.rmtree(d, ignore_errors=True)
    ratios = [r / ((windows[i - 1][1] + windows[i + 1][1]) / 2)
              for i, (m, r) in enumerate(windows) if m == "on"]
    report = {
        "throughput_ratio": quartiles(ratios),
        "off_commands_per_s_median": round(statistics.median(r for m, r in windows if m == "off")),
        # Each command is two spans (client and server side); calls of the whole session over
        # the commands of its measured window: a little above 2 (attach and stop outside it).
        "spans_per_command": quartiles([s["calls"] / max(s["served"], 1) for s in sessions]),
        # ebtop's CPU in the window (load and attach excluded) per span the load made in it.
        "user_space_ns_per_span": quartiles([s["cpu_ns"] / max(2 * s["served"], 1)
                                             for s in sessions]),
        # The BPF run time of the whole session per span it printed.
        "bpf_ns_per_span": quartiles([s["bpf_ns"] / max(s["calls"], 1) for s in sessions]),
        "ring_lost": sum(s["lost"] for s in sessions),
        "pipeline": a.pipeline,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "redis-toggle-results.json")
    with open(path, "w") as f:
        json.dump({"report": report, "windows": windows, "sessions": sessions}, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
