#!/usr/bin/env python3
"""ebtop on a many-core host at saturation: are all calls counted, is nothing lost, and what
does it cost? (run by hand, as root; issue 12's "nginx 8 workers + wrk 8 threads" scenario).

    bench/scale.py --ebtop BIN [--nginx nginx] [--wrk wrk] [--workers 8] [--wrk-threads 8]
                   [--conns 256] [--seconds 8] [--modes base,auto,base,t1,base] [--out FILE]

Needs no package manager and no network (a lent machine may have neither): pass the binaries
(bench/device_pack.sh packs ebtop, nginx and wrk with their libraries into one folder).

nginx (N workers, `return 200 "ok"`, no access log; its request counter on a listener of its
own) is loaded by `wrk -tT -cC -dS` in runs one after the other. A mode:
  base      no ebtop
  auto, tN  `ebtop --json --port P [--threads N] > pipe` started first (the run begins once
            every probe is attached), wrk, one more second, then SIGINT; the summary line
            gives calls per side and every loss counter
  ...-sys   the same on the syscall-tracepoint path (--hooks syscalls)
  ...-ringN with --ringbuf-mb N (the event ring's size)
  ...-niceN with --nice N (e.g. auto-nice0: the capture threads at the load's priority)
  ...-old   the binary given by --ebtop-old instead (paired A/B of two builds)
  ...-dN    with --delay N (seconds between interval reports)
  ...-bpf   with --bpf-stats full: the BPF programs' run time per span too (statistics on
            cost every program run ~60-110 ns, so throughput is a little lower in this mode)
Ground truth per run: wrk's completed requests (each one a client call) and nginx's own
counter over ebtop's whole session (each one a server call; a request wrk left in flight at
its end is served but never read, so the client side may be short by up to --conns of those
and counts them in parse.unanswered_requests). ebtop's user+sys CPU while wrk ran (from
/proc/PID/stat), per span (two per request); peak RSS from wait4 (ring mappings included).
--sample-hz N samples ebtop's threads (state, wchan, system call) while wrk runs, with the
scheduler's run and run-queue times (bench/threadstates.py); --timeline DIR keeps each traced
run's output but its call lines (every interval's loss and overhead) as DIR/NN-MODE.jsonl,
and each interval's ring records, records lost and RSS in the run's result (`intervals`).
Writes a JSON list of runs to --out (default bench/scale-results.json) and a table to stdout.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import HZ, bpf_run_ns, cpu_ticks, warn_if_bpf_stats_on  # noqa: E402
from replay_threads import thread_cpu  # noqa: E402
from threadstates import ThreadSampler  # noqa: E402
from toggle import wait_attached  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18942
STATUS_PORT = PORT + 1


def requests_total():
    body = urllib.request.urlopen(f"http://127.0.0.1:{STATUS_PORT}/status").read().decode()
    return int(body.splitlines()[2].split()[2])


def run_wrk(a):
    out = subprocess.run([a.wrk, f"-t{a.wrk_threads}", f"-c{a.conns}", f"-d{a.seconds}s",
                          f"http://127.0.0.1:{PORT}/"], capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)\b", out.stdout)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    secs = float(m.group(2)) * {"ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(3)]
    return int(m.group(1)), secs, out.stdout, int(errors.group(1)) if errors else 0


def busiest(before, after, secs):
    """Per thread name, the cores each thread of that name used over `secs` (highest first),
    from two `thread_cpu` readings."""
    per = {}
    for tid, (name, t1) in after.items():
        t0 = before.get(tid, (name, 0))[1]
        per.setdefault(name, []).append(round((t1 - t0) / secs, 2))
    return {k: sorted(v, reverse=True) for k, v in sorted(per.items())}


def one_run(a, mode):
    rec = {"mode": mode, "workers": a.workers, "wrk_threads": a.wrk_threads, "conns": a.conns}
    ebtop = tail = None
    if mode != "base":
        spec, *opts = mode.split("-")
        cmd = [a.ebtop_old if "old" in opts else a.ebtop, "--json", "--port", str(PORT), "--hooks",
               "syscalls" if "sys" in opts else "socket"]
        if "bpf" in opts:
            cmd += ["--bpf-stats", "full"]
        cmd += [a for o in opts if o.startswith("ring") for a in ("--ringbuf-mb", o[4:])]
        cmd += [a for o in opts if o.startswith("d") and o[1:].isdigit()
                for a in ("--delay", o[1:] + "s")]
        nice = next((o[4:] for o in opts if o.startswith("nice")), None)
        if nice is not None:
            cmd += ["--nice", nice]
        if spec.startswith("t"):
            cmd += ["--threads", spec[1:]]
        # The summary is the last line: keep the tail only (the call lines, ~1M/s, are formatted
        # and written as with `> /dev/null`, and dropped by tail). With --timeline, every line
        # but the calls is kept (each interval's loss, overhead and stats).
        if a.timeline:
            os.makedirs(a.timeline, exist_ok=True)
            tail_out = open(os.path.join(a.timeline, f"{a.run_index:02d}-{mode}.jsonl"), "w+b")
            keep = ["grep", "-v", "-F", '{"type":"call",']
        else:
            tail_out = tempfile.TemporaryFile()
            keep = ["tail", "-n", "3"]
        ebtop = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        # At ebtop's own priority: a reader slower than ebtop would hold it back.
        tail = subprocess.Popen(["nice", "-n", nice or "-10", *keep],
                                stdin=ebtop.stdout, stdout=tail_out)
        ebtop.stdout.close()
        wait_attached(ebtop.pid)
    r0 = requests_total()
    c0 = cpu_ticks(ebtop.pid) / HZ if ebtop else 0
    b0 = bpf_run_ns(ebtop.pid) if ebtop else 0
    th0 = thread_cpu(ebtop.pid) if ebtop else {}
    tail0 = cpu_ticks(tail.pid) if tail else 0
    sampler = ThreadSampler(ebtop.pid, a.sample_hz) if ebtop and a.sample_hz else None
    done, secs, text, non2xx = run_wrk(a)
    if sampler:
        rec["threads"] = sampler.stop(secs)
    th1 = thread_cpu(ebtop.pid) if ebtop else {}
    tail1 = cpu_ticks(tail.pid) if tail else 0
    c1 = cpu_ticks(ebtop.pid) / HZ if ebtop else 0
    b1 = bpf_run_ns(ebtop.pid) if ebtop else 0
    rec.update(wrk_requests=done, wrk_seconds=secs, rps=done / secs, non_2xx=non2xx)
    if ebtop is not None:
        time.sleep(1.0)
        ebtop.send_signal(signal.SIGINT)
        _, status, ru = os.wait4(ebtop.pid, 0)
        ebtop.returncode = os.waitstatus_to_exitcode(status)
        tail.wait()
        tail_out.seek(0)
        summary, intervals = None, []
        for line in tail_out.read().decode().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("type") == "summary":
                summary = obj
            elif obj.get("type") == "overhead":
                # With --timeline: when records were lost, and how ebtop's memory went.
                intervals.append({"ring_events": obj.get("ring_events"),
                                  "ring_lost": obj.get("ring_lost"),
                                  "rss_mb": round(obj.get("rss_bytes", 0) / 2**20)})
        if intervals:
            rec["intervals"] = intervals
        served = requests_total() - r0  # ebtop is gone: no request after its end is counted
        k, t, p = (summary or {}).get("kernel", {}), (summary or {}).get("tracker", {}), \
            (summary or {}).get("parse", {})
        spans = (summary or {}).get("calls", 0)
        rec.update(
            exit=ebtop.returncode, nginx_served=served,
            calls_client=(summary or {}).get("calls_client"),
            calls_server=(summary or {}).get("calls_server"),
            kernel_events=k.get("events"), kernel_lost=k.get("lost"),
            missed_runs=k.get("missed_runs"), gaps=t.get("gaps"),
            damaged=p.get("damaged_messages"), desyncs=p.get("desyncs"),
            unmatched=p.get("unmatched_responses"), unanswered=p.get("unanswered_requests"),
            ebtop_cpu_s_total=ru.ru_utime + ru.ru_stime, ebtop_maxrss_mb=ru.ru_maxrss / 1024,
            session_s=(summary or {}).get("duration_ns", 0) / 1e9,
            # While wrk ran (start-up and exit left out); spans: both sides of wrk's requests.
            ebtop_cpu_s=c1 - c0, spans_per_s=2 * done / secs,
            # Cores each of ebtop's threads used while wrk ran (the pipeline thread is "ebtop",
            # the tracking threads "ebtop-track-N"), and the output's reader (`tail`).
            thread_cores=busiest(th0, th1, secs), tail_cores=round((tail1 - tail0) / HZ / secs, 2),
            cpu_us_per_span=(c1 - c0) / max(2 * done, 1) * 1e6,
            # Only with statistics on the whole time (-bpf): sampled ones cover a tenth.
            bpf_us_per_span=(b1 - b0) / 1e3 / max(2 * done, 1) if "-bpf" in mode else None)
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebtop", required=True)
    ap.add_argument("--ebtop-old", help="the binary of the modes ending in -old")
    ap.add_argument("--nginx", default="nginx")
    ap.add_argument("--wrk", default="wrk")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--wrk-threads", type=int, default=8)
    ap.add_argument("--conns", type=int, default=256)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--modes", default="base,auto,base,t1,base")
    ap.add_argument("--sample-hz", type=int, default=0,
                    help="sample ebtop's threads' states this often while wrk runs (0: off)")
    ap.add_argument("--timeline", help="keep every output line but the calls of each traced run "
                    "in this folder (NN-MODE.jsonl)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "scale-results.json"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/scale.py needs root (ebtop loads eBPF)")
    warn_if_bpf_stats_on()
    d = tempfile.mkdtemp(prefix="ebtop-scale-")
    os.chmod(d, 0o755)
    temps = " ".join(f"{k}_temp_path {d}/{k};" for k in ("client_body", "proxy", "fastcgi",
                                                          "uwsgi", "scgi"))
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(f"""worker_processes {a.workers}; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 1000000000; {temps}
  server {{ listen 127.0.0.1:{STATUS_PORT}; location = /status {{ stub_status; }} }}
  server {{ listen 127.0.0.1:{PORT}; location / {{ return 200 "ok"; }} }} }}
""")
    nginx = subprocess.Popen([a.nginx, "-e", f"{d}/error.log", "-c", f"{d}/nginx.conf", "-p", d])
    runs = []
    try:
        for _ in range(50):
            try:
                requests_total()
                break
            except OSError:
                time.sleep(0.1)
        for a.run_index, mode in enumerate(a.modes.split(",")):
            rec = one_run(a, mode)
            runs.append(rec)
            print(json.dumps(rec), flush=True)
    finally:
        nginx.terminate()
        nginx.wait()
    with open(a.out, "w") as f:
        json.dump({"cpus": os.cpu_count(), "kernel": os.uname().release, "runs": runs}, f,
                  indent=1)
    base = [r["rps"] for r in runs if r["mode"] == "base"]
    print(f"\n{os.cpu_count()} CPUs, nginx {a.workers} workers, wrk -t{a.wrk_threads} "
          f"-c{a.conns} -d{a.seconds}s; baseline RPS {base}")
    print("| mode | RPS | traced/baseline | wrk requests | client calls | nginx served | "
          "server calls | lost | gaps | unanswered | ebtop CPU s | CPU µs/span | BPF µs/span | "
          "max RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(runs):
        if r["mode"] == "base":
            continue
        around = [runs[j]["rps"] for j in (i - 1, i + 1)
                  if 0 <= j < len(runs) and runs[j]["mode"] == "base"]
        ratio = r["rps"] / (sum(around) / len(around)) if around else float("nan")
        print(f"| {r['mode']} | {r['rps']:.0f} | {ratio:.3f} | {r['wrk_requests']} | "
              f"{r['calls_client']} | {r['nginx_served']} | {r['calls_server']} | "
              f"{r['kernel_lost']} | {r['gaps']} | {r['unanswered']} | {r['ebtop_cpu_s']:.2f} | "
              f"{r['cpu_us_per_span']:.2f} | "
              f"{'' if r['bpf_us_per_span'] is None else format(r['bpf_us_per_span'], '.2f')} | "
              f"{r['ebtop_maxrss_mb']:.1f} |")
    sampled = [r for r in runs if r.get("threads")]
    if sampled:
        print("\n| mode | pipeline thread: on a CPU / waiting for one (cores) | its samples "
              "running or runnable | tracking threads: blocked sending / waiting on their ring / "
              "running or runnable |")
        print("|---|---|---|---|")
        for r in sampled:
            print(f"| {r['mode']} | {thread_summary(r['threads'])} |")


def thread_summary(threads):
    """The pipeline thread's scheduler times and share of samples running, and the range over
    the tracking threads of their shares blocked on the results channel (a futex), waiting on
    their ring (epoll) and running."""
    # The pipeline thread is the main one (results from before "main" was noted: the one
    # named as the binary, ebtop or ebtop-old).
    pipe = next((v for v in threads.values() if v.get("main")), None) or next(
        (v for k, v in threads.items() if k in ("ebtop", "ebtop-old")), None)
    track = [v["states"] for k, v in threads.items() if k.startswith("ebtop-track")]

    def share(states, call):
        return sum(v for k, v in states.items() if k == call or k.endswith(" " + call))

    def spread(call):
        vals = [share(st, call) for st in track]
        return f"{min(vals):.0%}–{max(vals):.0%}" if vals else "–"

    if pipe:
        sc = pipe["sched"][0]
        head = (f"{sc['run_cores']:.2f} / {sc['runqueue_wait_cores']:.2f} | "
                f"{pipe['states'].get('R', 0):.0%}")
    else:
        head = "– | –"
    return f"{head} | {spread('futex')} / {spread('epoll_wait')} / {spread('R')}"


if __name__ == "__main__":
    main()
