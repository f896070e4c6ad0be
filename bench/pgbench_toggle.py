#!/usr/bin/env python3
"""ebtop's cost at pgbench -S saturation, paired (run by hand, as root).

    bench/pgbench_toggle.py [--cycles 6] [--window 4] [--mode prepared] [--clients 8]

A throwaway PostgreSQL cluster (initdb into a temp dir, run as nobody, fsync off, pinned to the
last CPU with its backends) under continuous `pgbench -S -M MODE -c N -j 1` load (pinned to
CPU 0, `--progress 1 --progress-timestamp`) for the whole run: issue 14's benchmark. ebtop
(`--json --port PORT --bpf-stats full`, release build) is started and stopped in turns; its
output is filtered by grep to the overhead and summary lines. A window's rate is the mean of
pgbench's per-second progress reports that fall inside it; each on/off ratio divides an on
window's rate by the mean of the off windows on either side. Each select-only transaction is
one statement, so two spans (pgbench's and the backend's). Reports medians (and quartiles)
over the cycles; writes bench/pgbench-toggle-results.json.
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import build  # noqa: E402
from toggle import wait_attached  # noqa: E402
from redis_toggle import cpu_ns, quartiles  # noqa: E402
import paired_sessions  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18934
NOBODY = 65534


def server_bindir():
    versions = sorted((int(v), v) for v in os.listdir("/usr/lib/postgresql") if v.isdigit())
    return f"/usr/lib/postgresql/{versions[-1][1]}/bin"


def as_nobody():
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def pgbench_progress(line):
    """pgbench's `progress: <unix time> s, <tps> tps, …`: (that time, tps)."""
    f = line.split()
    if len(f) >= 5 and f[0] == "progress:" and f[4] == "tps,":
        return float(f[1]), float(f[3])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--mode", default="prepared", choices=["simple", "extended", "prepared"])
    ap.add_argument("--clients", type=int, default=8)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/pgbench_toggle.py needs root (ebtop loads eBPF)")
    if shutil.which("pgbench") is None or not os.path.isdir("/usr/lib/postgresql"):
        sys.exit("PostgreSQL is missing: scripts/deps installs it")
    binary, _ = build()
    ncpu = os.cpu_count()
    bindir = server_bindir()
    d = tempfile.mkdtemp(prefix="ebtop-pgbench-toggle-")
    os.chmod(d, 0o755)
    data = os.path.join(d, "data")
    os.mkdir(data)
    os.chown(data, NOBODY, NOBODY)
    subprocess.run([f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"],
                   preexec_fn=as_nobody, cwd=d, stdout=subprocess.DEVNULL, check=True)
    server = subprocess.Popen(["taskset", "-c", str(ncpu - 1), f"{bindir}/postgres", "-D", data,
                               "-p", str(PORT), "-h", "127.0.0.1", "-c", "unix_socket_directories=",
                               "-c", "fsync=off", "-c", "ssl=off"],
                              preexec_fn=as_nobody, cwd=d, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    conn = ["-h", "127.0.0.1", "-p", str(PORT), "-U", "postgres"]
    for _ in range(100):
        if subprocess.run(["psql", *conn, "-c", "select 1", "postgres"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            break
        time.sleep(0.1)
    subprocess.run(["psql", *conn, "-q", "-c", "create database bench", "postgres"], check=True)
    subprocess.run(["pgbench", *conn, "-i", "-s", "10", "-q", "bench"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load = subprocess.Popen(["taskset", "-c", "0", "pgbench", *conn, "-n", "-S", "-M", a.mode,
                             "-c", str(a.clients), "-j", "1", "-T", "100000", "--progress", "1",
                             "--progress-timestamp", "bench"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    progress = paired_sessions.Progress(load.stderr, pgbench_progress)
    time.sleep(3)
    windows, sessions = [], []
    try:
        for _ in range(a.cycles):
            windows.append(("off", progress.rate_over(a.window)))
            out = tempfile.TemporaryFile()
            e = subprocess.Popen([binary, "--json", "--overhead-programs", "--port", str(PORT), "--bpf-stats", "full"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            keep = subprocess.Popen(["grep", "-F", "-e", '"type":"overhead"', "-e",
                                     '"type":"summary"'], stdin=e.stdout, stdout=out)
            e.stdout.close()
            wait_attached(e.pid)
            cpu0, t0 = cpu_ns(e.pid), time.time()
            rate = progress.rate_over(a.window)
            windows.append(("on", rate))
            cpu = cpu_ns(e.pid) - cpu0
            served = rate * (time.time() - t0)  # transactions while ebtop's CPU was measured
            e.send_signal(signal.SIGINT)
            e.wait()
            keep.wait()
            out.seek(0)
            bpf_ns, calls, lost = 0, 0, 0
            for line in out:
                rec = json.loads(line)
                if rec.get("type") == "overhead":
                    bpf_ns += sum(p["run_time_ns"] for p in rec.get("bpf_programs") or [])
                elif rec.get("type") == "summary":
                    calls = rec["calls"]
                    lost = rec["kernel"]["lost"]
            out.close()
            sessions.append({"served": served, "calls": calls, "cpu_ns": cpu, "bpf_ns": bpf_ns,
                             "lost": lost})
        windows.append(("off", progress.rate_over(a.window)))
    finally:
        load.terminate()
        load.wait()
        server.send_signal(signal.SIGINT)
        server.wait()
        shutil.rmtree(d, ignore_errors=True)
    ratios = [r / ((windows[i - 1][1] + windows[i + 1][1]) / 2)
              for i, (m, r) in enumerate(windows) if m == "on"]
    report = {
        "throughput_ratio": quartiles(ratios),
        "off_tps_median": round(sorted(r for m, r in windows if m == "off")[
            len([1 for m, _ in windows if m == "off"]) // 2]),
        # ebtop's CPU in the window per span (a transaction: pgbench's and the backend's call).
        "user_space_ns_per_span": quartiles([s["cpu_ns"] / max(2 * s["served"], 1)
                                             for s in sessions]),
        # The BPF run time of the whole session per call it printed.
        "bpf_ns_per_span": quartiles([s["bpf_ns"] / max(s["calls"], 1) for s in sessions]),
        "ring_lost": sum(s["lost"] for s in sessions),
        "mode": a.mode,
        "clients": a.clients,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pgbench-toggle-results.json")
    with open(path, "w") as f:
        json.dump({"report": report, "windows": windows, "sessions": sessions}, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
