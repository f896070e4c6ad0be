"""What the Go net/http client probes (src/bpf/gohttp.h: roundTrip's entry per request, the
connection writer's entry per flush, writeLoop's returns per connection) cost, paired. The chains' Go app
(tests/fixtures/chains/go, FANOUT 0: per request a Redis GET, two backend calls through
net/http's client — one from the handler's goroutine, one from a goroutine it starts — and a
second Redis GET) under wrk; per round two ebtop sessions (release build, `--json
--overhead-programs --bpf-stats full`, its output cut to the overhead and summary lines), one
with the probes and one with `EBTOP_GO_HTTP=0`, the order alternating. Per session: the app's
requests per second in a window while ebtop runs, the go_http programs' runs and run time, the
HTTP client calls linked. Reports the median paired throughput ratio (probes on / off), the BPF
run time per probe hit, and what one hit's trap costs here (ebtop's own calibration,
`kernel.tls_probe_hit_ns`).

Run as root: python3 bench/go_http_ab.py target/release/ebtop [--rounds 7] [--window 5]"""
import argparse, json, os, signal, socket, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import wait_attached  # noqa: E402
from redis_toggle import quartiles  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, limit_s=10):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def wrk_rate(port, seconds):
    out = subprocess.run(["wrk", "-t1", "-c4", f"-d{seconds}s",
                          f"http://127.0.0.1:{port}/req/bench"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    raise SystemExit(f"wrk said: {out}")


def session(binary, ports, app_port, window, probes):
    env = dict(os.environ, EBTOP_GO_HTTP="1" if probes else "0")
    out = tempfile.TemporaryFile()
    args = [binary, "--json", "--overhead-programs", "--bpf-stats", "full"]
    for p in ports:
        args += ["--port", str(p)]
    e = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    keep = subprocess.Popen(["grep", "-F", "-e", '"type":"overhead"', "-e",
                             '"type":"summary"'], stdin=e.stdout, stdout=out)
    e.stdout.close()
    wait_attached(e.pid)
    time.sleep(1.0)  # the TLS lookout probes the running Go programs after the start
    rate = wrk_rate(app_port, window)
    e.send_signal(signal.SIGINT)
    e.wait()
    keep.wait()
    out.seek(0)
    runs, run_ns, linked, hit_ns = 0, 0, None, None
    for line in out:
        v = json.loads(line)
        if v["type"] == "overhead":
            for p in v.get("bpf_programs") or []:
                if p["name"].startswith("go_http_"):
                    runs += p["runs"]
                    run_ns += p["run_time_ns"]
        elif v["type"] == "summary":
            linked = (v.get("chains") or {}).get("http_client_linked")
            hit_ns = (v.get("kernel") or {}).get("tls_probe_hit_ns")
    out.close()
    return {"probes": probes, "rate": rate, "go_http_runs": runs, "go_http_run_ns": run_ns,
            "http_client_linked": linked, "tls_probe_hit_ns": hit_ns}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--window", type=int, default=5)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="go-http-ab-")
    app = os.path.join(work, "gochains")
    subprocess.run(["go", "build", "-buildvcs=false", "-o", app, "."], check=True,
                   cwd=os.path.join(ROOT, "tests/fixtures/chains/go"),
                   env=dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local"))
    redis, backend, front = free_port(), free_port(), free_port()
    procs = [
        subprocess.Popen(["redis-server", "--port", str(redis), "--save", ""],
                         stdout=subprocess.DEVNULL),
        subprocess.Popen([app, "backend", str(backend)]),
        subprocess.Popen([app, "app", str(front), str(redis), str(backend),
                          os.path.join(work, "app.log"), "0"], stdout=subprocess.DEVNULL),
    ]
    try:
        for p in (redis, backend, front):
            wait_port(p)
        wrk_rate(front, 2)  # warm up
        sessions = []
        for r in range(a.rounds):
            pair = {}
            for probes in ((False, True) if r % 2 == 0 else (True, False)):
                pair[probes] = session(a.binary, (redis, backend, front), front, a.window,
                                       probes)
                print(json.dumps(pair[probes]), file=sys.stderr)
            sessions.append(pair)
        on = [p[True] for p in sessions]
        result = {
            "throughput_ratio_on_off": quartiles([p[True]["rate"] / p[False]["rate"]
                                                  for p in sessions]),
            "rate_off_median": quartiles([p[False]["rate"] for p in sessions])["median"],
            "bpf_ns_per_hit": quartiles([s["go_http_run_ns"] / s["go_http_runs"]
                                         for s in on if s["go_http_runs"]]),
            "hits_per_request": quartiles([s["go_http_runs"] / (s["rate"] * a.window)
                                           for s in on]),
            "tls_probe_hit_ns": quartiles([s["tls_probe_hit_ns"] for s in on
                                           if s["tls_probe_hit_ns"]]),
            "sessions": sessions and [[p[False], p[True]] for p in sessions],
        }
        print(json.dumps(result, indent=1))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait()


if __name__ == "__main__":
    main()
