#!/usr/bin/env python3
"""Paired throughput cost of ebtop's capture paths, robust to host noise (run by hand, as root).

    bench/toggle.py [--cycles 10] [--window 2]

nginx (1 worker, pinned to the last CPU, `return 200 "ok"`, no access log) under continuous
`wrk -t1 -c50` load (pinned to CPU 0) for the whole run. ebtop (`--json --port PORT > /dev/null`,
release build) is started and stopped in turns: off, socket, off, syscalls, off, … Each "on" window
starts once ebtop's BPF links stop growing (all probes attached) and its TLS lookout has read
the installed programs (its thread at rest: `-early` modes skip that wait), and lasts --window
seconds; the request rate comes from nginx's own counter (stub_status) at the window's edges.
A mode `bpftrace=NAME` runs bpftrace with bench/NAME.bt instead of ebtop (the floor of a
hook: `peer_floor`, the syscall tracepoints with a per-thread map; `sock_floor`, the socket
layer's events with a count), its window starting a second after bpftrace says it attached.
Each on/off ratio divides an on window's rate by the mean of the off windows on either side;
the report is the median (and quartiles) per mode. Modes with `-fullstats` also report ebtop's
BPF run time per request served (kernel statistics over the whole session, median over the
cycles), in all and per program. Writes bench/toggle-results.json.

With --https nginx serves TLS (self-signed, TLS 1.3, keep-alive) to `wrk https://…` and ebtop's
plaintext capture is what is measured: modes take `-notls` for `--tls off` (the ciphertext only
counted), e.g. `--https --modes socket,socket-notls`; results go to bench/tls-toggle-results.json,
with the calls ebtop wrote per request served (every request seen on both sides: 2.0).

With --go (implies --https) the server is the Go HTTPS server of tests/fixtures/tls/go
(crypto/tls and net/http, GOMAXPROCS=1, pinned like nginx) instead of nginx: Go's TLS probes
(entry and return instructions) are what is measured; results go to
bench/go-tls-toggle-results.json.
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import apt, build, wait_attached, wait_tls_scan, warn_if_bpf_stats_on  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18932


STATUS_PORT = PORT  # nginx's counter; a cleartext listener of its own with --https


def requests_total():
    body = urllib.request.urlopen(f"http://127.0.0.1:{STATUS_PORT}/status").read().decode()
    # "Active connections: N \n server accepts handled requests\n A H R \n..."
    return int(body.splitlines()[2].split()[2])


def rate_over(seconds):
    r0, t0 = requests_total(), time.monotonic()
    time.sleep(seconds)
    r1, t1 = requests_total(), time.monotonic()
    return (r1 - r0) / (t1 - t0)


def bpftrace_window(script, seconds):
    """The request rate over `seconds` with bench/SCRIPT.bt attached by bpftrace."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), script + ".bt")
    p = subprocess.Popen(["bpftrace", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if not p.stdout.readline().startswith(b"Attaching"):
            sys.exit(f"bpftrace {path}: {p.stderr.read().decode()[:300]}")
        time.sleep(1)  # "Attaching N probes..." comes before the attaching
        if p.poll() is not None:
            sys.exit(f"bpftrace {path}: {p.stderr.read().decode()[:300]}")
        return rate_over(seconds)
    finally:
        p.send_signal(signal.SIGINT)
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--modes", default="socket,syscalls",
                    help="comma-separated: socket, syscalls, socket-fullstats, socket-t2 (2 tracking "
                    "threads), socket-early (the window starts at attach, the TLS scan not "
                    "waited for), socket:--only=flow+--nice=0 (after ':', more ebtop "
                    "arguments joined by '+'; NAME=VALUE sets an environment variable), …")
    ap.add_argument("--settle", type=float, default=8.0,
                    help="seconds a --max-cpu mode runs before its window (its sample settles)")
    ap.add_argument("--other-binary", help="the ebtop that modes ending in @other run")
    ap.add_argument("--https", action="store_true", help="nginx over TLS (see above)")
    ap.add_argument("--go", action="store_true", help="the Go HTTPS server (see above)")
    ap.add_argument("--out", help="where the raw results go (default: bench/toggle-results.json, "
                    "or the --https / --go file named above); name a file of its own to keep a run")
    a = ap.parse_args()
    a.https = a.https or a.go
    global STATUS_PORT
    if os.geteuid() != 0:
        sys.exit("bench/toggle.py needs root (ebtop loads eBPF)")
    warn_if_bpf_stats_on()
    modes = a.modes.split(",")
    apt("nginx", "wrk")
    if any(m.startswith("bpftrace=") for m in modes):
        apt("bpftrace")
        if not os.path.isdir("/sys/kernel/tracing/events"):  # bpftrace needs tracefs, a fresh host may lack it
            subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=True)
    # EBTOP_BENCH_BINARY: a release binary already built (skips the build of the examples).
    binary = os.environ.get("EBTOP_BENCH_BINARY") or build()[0]
    ncpu = os.cpu_count()
    d = tempfile.mkdtemp(prefix="ebtop-toggle-")
    os.chmod(d, 0o755)
    tls = ""
    scheme = "http"
    if a.https:
        subprocess.run(["openssl", "req", "-x509", "-nodes", "-newkey", "rsa:2048", "-subj",
                        "/CN=localhost", "-days", "1", "-keyout", f"{d}/k.pem", "-out",
                        f"{d}/c.pem"], check=True, capture_output=True)
        tls = (f" ssl; ssl_certificate {d}/c.pem; ssl_certificate_key {d}/k.pem;"
               " ssl_protocols TLSv1.3")
        STATUS_PORT = PORT + 1
        scheme = "https"
    # With --https, nginx's counter is on a cleartext listener of its own.
    status_server = (f"server {{ listen 127.0.0.1:{STATUS_PORT}; location = /status {{ stub_status; }} }}"
                     if a.https else "")
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;
worker_cpu_affinity {1 << (ncpu - 1):b};
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000000;
  {status_server}
  server {{ listen 127.0.0.1:{PORT}{tls};
    location = /status {{ stub_status; }}
    location / {{ return 200 "ok"; }} }} }}
""")
    if a.go:
        go = shutil.which("go") or "/usr/local/go/bin/go"
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                           "tls", "go")
        subprocess.run([go, "build", "-o", f"{d}/gotls", "."], cwd=src, check=True,
                       env=dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0"))
        nginx = subprocess.Popen(["taskset", "-c", str(ncpu - 1), f"{d}/gotls", "server", "-addr",
                                  f"127.0.0.1:{PORT}", "-cert", f"{d}/c.pem", "-key", f"{d}/k.pem",
                                  "-status", f"127.0.0.1:{STATUS_PORT}"],
                                 env=dict(os.environ, GOMAXPROCS="1"), stdout=subprocess.DEVNULL)
    else:
        nginx = subprocess.Popen(["nginx", "-c", f"{d}/nginx.conf", "-p", d])
    time.sleep(0.5)
    wrk = subprocess.Popen(["taskset", "-c", "0", "wrk", "-t1", "-c50", "-d3600s",
                            f"{scheme}://127.0.0.1:{PORT}/"], stdout=subprocess.DEVNULL)
    time.sleep(2)
    windows = []  # (mode, rate)
    bpf_costs = []  # (mode, BPF ns per request, {program: ns per request}) for -fullstats modes
    calls_per_request = []  # (mode, calls written per request served) with --https
    budgets = []  # (mode, median ebtop_cpu_pct, median sampling ratio) for --max-cpu modes
    load = []  # the host's load average (1 min) at each budget window: the VM is shared
    try:
        for _ in range(a.cycles):
            for mode in modes:
                windows.append(("off", rate_over(a.window)))
                # Every call captured and written as JSON to /dev/null.
                # mode: HOOKS[-fullstats][-tN][@other][:ARG+ARG…] (N tracking threads; @other:
                # run --other-binary instead, e.g. the previous release, for a paired
                # comparison; ARGs: more ebtop arguments, e.g. --only=flow).
                if mode.startswith("bpftrace="):
                    windows.append((mode, bpftrace_window(mode.partition("=")[2], a.window)))
                    continue
                mode_spec, _, more = mode.partition(":")
                spec, _, which = mode_spec.partition("@")
                exe = a.other_binary if which == "other" else binary
                hooks, *opts = spec.split("-")
                extra = ["--bpf-stats", "full"] if "fullstats" in opts else []
                if "notls" in opts:
                    extra += ["--tls", "off"]
                # Per-program times are in overhead lines only on request (binaries since
                # JSON schema 2; an older --other-binary writes them always).
                if "fullstats" in opts and b"--overhead-programs" in subprocess.run(
                        [exe, "--help"], capture_output=True).stdout:
                    extra.append("--overhead-programs")
                extra += [a for o in opts if o.startswith("t") and o[1:].isdigit()
                          for a in ("--threads", o[1:])]
                # NAME=VALUE (no leading dash) goes to ebtop's environment instead.
                env = dict(os.environ)
                for arg in filter(None, more.split("+")):
                    name, eq, value = arg.partition("=")
                    if eq and not arg.startswith("-"):
                        env[name] = value
                    else:
                        extra.append(arg)
                # With full statistics the output is kept: its overhead lines give the BPF run
                # time of the whole session, divided by the requests nginx served meanwhile.
                budget = "--max-cpu" in more
                keep = "fullstats" in opts or a.https or budget
                out = tempfile.TemporaryFile() if keep else subprocess.DEVNULL
                r_start = requests_total()
                e = subprocess.Popen([exe, "--json", "--hooks", hooks, "--port", str(PORT)] + extra,
                                     stdout=out, stderr=subprocess.DEVNULL, env=env)
                if a.https:
                    # The meta line is written once every probe is attached, the TLS ones
                    # last (their links do not grow steadily: wait_attached could stop early).
                    while out.tell() == 0 and e.poll() is None:
                        time.sleep(0.05)
                        out.seek(0, os.SEEK_END)
                    r_start = requests_total()
                else:
                    wait_attached(e.pid)
                if "early" not in opts:
                    wait_tls_scan(e.pid)
                    r_start = requests_total()
                if budget:
                    # A budget captures everything until an interval (after the first) costs
                    # more, then samples, cutting captured connections from the interval after:
                    # the window starts once the sample has settled.
                    time.sleep(a.settle)
                    out.seek(0, os.SEEK_END)
                    skip_to = out.tell()
                windows.append((mode, rate_over(a.window)))
                served = requests_total() - r_start
                if budget:
                    load.append(os.getloadavg()[0])
                e.send_signal(signal.SIGINT)
                e.wait()
                if budget:
                    out.seek(skip_to)
                    cpu, ratio, user_cpu, bpf_cpu = [], [], [], []
                    for line in out:
                        rec = json.loads(line)
                        if rec.get("type") == "overhead" and rec.get("ebtop_cpu_pct") is not None:
                            cpu.append(rec["ebtop_cpu_pct"])
                            user_cpu.append(rec.get("user_cpu_pct") or 0.0)
                            bpf_cpu.append(rec.get("bpf_cpu_pct") or 0.0)
                        if rec.get("type") == "sampling" and rec.get("ratio") is not None:
                            ratio.append(rec["ratio"])
                    budgets.append((mode, statistics.median(cpu) if cpu else None,
                                    statistics.median(ratio) if ratio else 1.0,
                                    statistics.median(user_cpu) if user_cpu else None,
                                    statistics.median(bpf_cpu) if bpf_cpu else None))
                    out.close()
                elif out is not subprocess.DEVNULL:
                    out.seek(0)
                    per_prog = {}
                    calls = 0
                    for line in out:
                        rec = json.loads(line)
                        calls += rec.get("type") == "call"
                        if rec.get("type") == "overhead":
                            for pr in rec.get("bpf_programs") or []:
                                per_prog[pr["name"]] = per_prog.get(pr["name"], 0) + pr["run_time_ns"]
                    out.close()
                    bpf_costs.append((mode, sum(per_prog.values()) / max(served, 1),
                                      {k: v / max(served, 1) for k, v in per_prog.items()}))
                    calls_per_request.append((mode, calls / max(served, 1)))
        windows.append(("off", rate_over(a.window)))
    finally:
        wrk.terminate()
        nginx.terminate()
        wrk.wait()
        nginx.wait()
        shutil.rmtree(d, ignore_errors=True)
    ratios = {m: [] for m in modes}
    for i, (mode, r) in enumerate(windows):
        if mode != "off":
            base = (windows[i - 1][1] + windows[i + 1][1]) / 2
            ratios[mode].append(r / base)
    report = {}
    for mode, rs in ratios.items():
        q = statistics.quantiles(rs, n=4)
        report[mode] = {"median": round(statistics.median(rs), 3), "q1": round(q[0], 3),
                        "q3": round(q[2], 3), "n": len(rs)}
    for mode in modes:
        per_req = [c for m, c in calls_per_request if m == mode]
        if per_req:
            report[mode]["calls_per_request"] = round(statistics.median(per_req), 3)
        costs = [c for m, c, _ in bpf_costs if m == mode and "fullstats" in m]
        if costs:
            report[mode]["bpf_ns_per_request"] = round(statistics.median(costs))
            progs = {}
            for m, _, per in bpf_costs:
                if m == mode:
                    for k, v in per.items():
                        progs.setdefault(k, []).append(v)
            report[mode]["bpf_ns_per_request_by_program"] = {
                k: round(statistics.median(v)) for k, v in sorted(progs.items())}
    for mode in modes:
        mine = [b for b in budgets if b[0] == mode]
        cpu = [b[1] for b in mine if b[1] is not None]
        if cpu:
            report[mode]["ebtop_cpu_pct_median"] = round(statistics.median(cpu), 1)
            report[mode]["sampled_ratio_median"] = round(statistics.median(b[2] for b in mine), 3)
            # Its parts: ebtop's own threads, and its BPF programs as the statistics' window
            # measured them (their own cost included).
            for i, name in ((3, "user_cpu_pct_median"), (4, "bpf_cpu_pct_median")):
                part = [b[i] for b in mine if b[i] is not None]
                if part:
                    report[mode][name] = round(statistics.median(part), 1)
    if load:
        report["loadavg_1m_median"] = round(statistics.median(load), 2)
    report["off_rps_median"] = round(statistics.median(r for m, r in windows if m == "off"))
    # Time each request costs the saturated nginx worker more with ebtop on (its CPU is the
    # bottleneck): 1/on − 1/off, from the median ratio and the median off rate.
    for mode in modes:
        r = report[mode]["median"]
        report[mode]["added_us_per_request"] = round(
            (1 / r - 1) / report["off_rps_median"] * 1e6, 2) if r > 0 else None
    name = ("go-tls-toggle-results.json" if a.go else
            "tls-toggle-results.json" if a.https else "toggle-results.json")
    path = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    with open(path, "w") as f:
        json.dump({"report": report, "windows": windows, "bpf_costs": bpf_costs,
                   "budgets": budgets}, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
