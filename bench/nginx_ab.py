"""What nginx's upstream probe (src/bpf/ngxchain.h: ngx_chain_writer's entry, once per upstream
write) costs per proxied request, paired. One nginx (one process) proxies port F to a server
block of its own on port B (`return 200`), upstream keep-alive, under `wrk -t1 -c8`; per round
two ebtop sessions (release build, `--json --overhead-programs --bpf-stats full`, its output
cut to the overhead and summary lines), one with the probe and one with `EBTOP_NGINX=0`, the
order alternating. Per session: requests per second in a window while ebtop runs, nginx's CPU
(utime + stime of its process) per request in that window, the probe's runs and BPF run time,
`chains.proxy_linked`, and the trap cost ebtop calibrated (`kernel.tls_probe_hit_ns`).
Reports medians of the paired ratios and differences (probe on vs off).

Run as root: python3 bench/nginx_ab.py target/release/ebtop [--rounds 7] [--window 5]"""
import argparse, json, os, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import wait_attached  # noqa: E402
from redis_toggle import quartiles  # noqa: E402
from go_http_ab import free_port, wait_port  # noqa: E402

os.environ.setdefault("EBTOP_MAX_CPU", "off")
TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")

CONF = """daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream back {{ server 127.0.0.1:{b}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{f};
    location / {{
      proxy_pass http://back;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
  server {{
    listen 127.0.0.1:{b};
    keepalive_requests 1000000;
    location / {{ return 200 "ok"; }}
  }}
}}
"""


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wrk_count(port, seconds):
    out = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds}s", f"http://127.0.0.1:{port}/x"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "requests in" in line:
            return int(line.split()[0])
    raise SystemExit(f"wrk said: {out}")


def session(binary, ports, nginx_pid, front, window, probes):
    env = dict(os.environ, EBTOP_NGINX="1" if probes else "0")
    out = tempfile.TemporaryFile()
    args = [binary, "--json", "--overhead-programs", "--bpf-stats", "full"]
    for p in ports:
        args += ["--port", str(p)]
    e = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    keep = subprocess.Popen(["grep", "-F", "-e", '"type":"overhead"', "-e",
                             '"type":"summary"'], stdin=e.stdout, stdout=out)
    e.stdout.close()
    wait_attached(e.pid)
    time.sleep(1.0)
    t0 = cpu_ticks(nginx_pid)
    n = wrk_count(front, window)
    cpu_ns = (cpu_ticks(nginx_pid) - t0) * TICK_NS
    e.send_signal(signal.SIGINT)
    e.wait()
    keep.wait()
    out.seek(0)
    runs, run_ns, linked, hit_ns = 0, 0, None, None
    for line in out:
        v = json.loads(line)
        if v["type"] == "overhead":
            for p in v.get("bpf_programs") or []:
                if p["name"].startswith("ngx_chain_writer"):
                    runs += p["runs"]
                    run_ns += p["run_time_ns"]
        elif v["type"] == "summary":
            linked = (v.get("chains") or {}).get("proxy_linked")
            hit_ns = (v.get("kernel") or {}).get("tls_probe_hit_ns")
    out.close()
    return {"probes": probes, "requests": n, "rate": n / window,
            "nginx_cpu_ns_per_request": cpu_ns / n, "ngx_runs": runs, "ngx_run_ns": run_ns,
            "proxy_linked": linked, "tls_probe_hit_ns": hit_ns}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--window", type=int, default=5)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="nginx-ab-")
    front, back = free_port(), free_port()
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write(CONF.format(d=work, f=front, b=back))
    nginx = subprocess.Popen(["/usr/sbin/nginx", "-p", work, "-c",
                              os.path.join(work, "nginx.conf"), "-e",
                              os.path.join(work, "error.log")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(front)
        wrk_count(front, 2)  # warm up
        sessions = []
        for r in range(a.rounds):
            pair = {}
            for probes in ((False, True) if r % 2 == 0 else (True, False)):
                pair[probes] = session(a.binary, (front, back), nginx.pid, front, a.window,
                                       probes)
                print(json.dumps(pair[probes]), file=sys.stderr)
            sessions.append(pair)
        on = [p[True] for p in sessions]
        result = {
            "throughput_ratio_on_off": quartiles([p[True]["rate"] / p[False]["rate"]
                                                  for p in sessions]),
            "rate_off": quartiles([p[False]["rate"] for p in sessions]),
            "nginx_cpu_ns_per_request_added": quartiles(
                [p[True]["nginx_cpu_ns_per_request"] - p[False]["nginx_cpu_ns_per_request"]
                 for p in sessions]),
            "nginx_cpu_ns_per_request_off": quartiles(
                [p[False]["nginx_cpu_ns_per_request"] for p in sessions]),
            "hits_per_request": quartiles([s["ngx_runs"] / s["requests"] for s in on]),
            "bpf_ns_per_hit": quartiles([s["ngx_run_ns"] / s["ngx_runs"]
                                         for s in on if s["ngx_runs"]]),
            "tls_probe_hit_ns": quartiles([s["tls_probe_hit_ns"] for s in on
                                           if s["tls_probe_hit_ns"]]),
            "proxy_linked_per_request": quartiles([(s["proxy_linked"] or 0) / s["requests"]
                                                   for s in on]),
            "sessions": [[p[False], p[True]] for p in sessions],
        }
        print(json.dumps(result, indent=1))
    finally:
        nginx.send_signal(signal.SIGTERM)
        nginx.wait()


if __name__ == "__main__":
    main()
