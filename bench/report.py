#!/usr/bin/env python3
"""Turns bench/results.json into docs/performance-history.md (targets met, or their measured distance),
followed by the dated sections of bench/notes.md. docs/performance.md, the newest figure of each
scenario, is kept by hand from this file and the paired benchmarks' results."""
import json, os, statistics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
r = json.load(open(os.path.join(ROOT, "bench/results.json")))
out = []
w = out.append


def med(rows, key):
    vals = [x[key] for x in rows if x.get(key) is not None]
    return statistics.median(vals) if vals else None


def verdict(ok):
    return "met" if ok else "**not met**"


m = r["machine"]
w("> **The dated history.** This file keeps every measurement as it was made: the tables `bench/run.py`")
w(f"> last wrote ({m['date']}) and then each dated step (from 2026-11-23) with what it changed and why.")
w("> Later sections often supersede earlier ones and the tables at the top. The newest figure of each")
w("> scenario, with its date, host and script, is in [performance.md](performance.md).\n")
w("# Performance\n")
w(f"Measured {m['date']} on `{m['host']}`: {m['cpus']} × {m['cpu']}, kernel {m['kernel']}. "
  f"Release binary {r['binary_bytes'] / 1e6:.1f} MB. Regenerate: `sudo bench/run.py` (raw numbers: bench/results.json).\n")
w("Scenario B: nginx (1 worker, 650-byte page) on loopback, wrk `-t1 -c64`. A span is one call seen from one side "
  "(each request is two spans: wrk's client call and nginx's server call). CPU per span = (ebtop user+sys + its BPF "
  "programs' run time) / spans.\n")

sat = r["b_saturation"]
base = med([x for x in sat if x["mode"] == "baseline"], "rps")
w("## B (a): saturation\n")
w("| mode | RPS (median) | traced/baseline | ebtop CPU s | BPF s | CPU µs/span | peak RSS MB | spans | lost |")
w("|---|---|---|---|---|---|---|---|---|")
for mode in ["baseline", "json", "tui", "record"]:
    rows = [x for x in sat if x["mode"] == mode]
    rps = med(rows, "rps")
    if mode == "baseline":
        w(f"| baseline | {rps:.0f} | 1.00 | | | | | | |")
        continue
    w(f"| {mode} | {rps:.0f} | {rps / base:.3f} | {med(rows, 'user_s'):.2f} | {med(rows, 'bpf_s'):.2f} | "
      f"{med(rows, 'cpu_us_per_span'):.2f} | {med(rows, 'rss_kb') / 1024:.1f} | {med(rows, 'spans'):.0f}"
      f"{'' if all(x.get('spans_measured') for x in rows) else ' (offered)'} | {med(rows, 'lost') if med(rows, 'lost') is not None else 'n/a'} |")
w("")
fixed = r["b_fixed"]
w("## B (b): fixed rates (examples/loadgen: open loop, latency from the scheduled send time)\n")
w("| rate | mode | achieved RPS | p50 µs | p90 µs | p99 µs | nginx CPU % | ebtop CPU s | BPF s | lost |")
w("|---|---|---|---|---|---|---|---|---|---|")
for x in fixed:
    w(f"| {x['rate']:.0f} | {x['mode']} | {x['achieved_rps']} | {x['p50_ns'] / 1e3:.0f} | {x['p90_ns'] / 1e3:.0f} | "
      f"{x['p99_ns'] / 1e3:.0f} | {x['nginx_cpu_pct']:.1f} | {x.get('user_s', '')} | {x.get('bpf_s', '')} | {x.get('lost', '')} |")
w("")

json_rows = [x for x in sat if x["mode"] == "json"]
cpu_span = med(json_rows, "cpu_us_per_span")
ratio = med(json_rows, "rps") / base
p50_incr = []
for rate in sorted({x["rate"] for x in fixed}):
    b = next(x for x in fixed if x["rate"] == rate and x["mode"] == "baseline")
    t = next(x for x in fixed if x["rate"] == rate and x["mode"] == "json")
    p50_incr.append((rate, (t["p50_ns"] - b["p50_ns"]) / b["p50_ns"] * 100))
rep = r.get("replay", {})
d = r.get("d_many_flows", {})
f = r.get("f_udp", {})
w("## Targets\n")
w("| target | measured | |")
w("|---|---|---|")
w(f"| ≤ 1 µs ebtop CPU (user + BPF) per span (json) | {cpu_span:.2f} µs | {verdict(cpu_span <= 1)} |")
w(f"| traced nginx ≥ 0.90× baseline RPS at saturation (json) | {ratio:.3f} | {verdict(ratio >= 0.90)} |")
for rate, inc in p50_incr:
    # One untraced and one traced run: the untraced p50 alone moves ±15% between runs here,
    # so a result under +5% is not taken as met (bench/p50_ab.py's paired figure decides).
    ok = "**not met**" if inc > 5 else "one run each, within noise: see the paired p50 in bench/notes.md"
    w(f"| p50 RT +≤ 5% at {rate:.0f} RPS | {inc:+.1f}% | {ok} |")
lost = med(json_rows, "lost")
w(f"| 0 lost events at saturation ({med(json_rows, 'spans') / 10 if json_rows else 0:.0f} spans/s) | {lost} | {verdict(lost == 0)} |")
rss = med(json_rows, "rss_kb") / 1024
w(f"| RSS ≤ 20 MB (json, saturation; peak VmHWM) | {rss:.1f} MB | {verdict(rss <= 20)} |")
rings, now = med(json_rows, "rss_rings_kb"), med(json_rows, "rss_now_kb")
if rings is not None and now is not None:
    own = (now - rings) / 1024
    w(f"| … of which not the ring-buffer mappings (see Memory below) ≤ 20 MB | {own:.1f} MB "
      f"({rings / 1024:.1f} MB are the mmapped rings) | {verdict(own <= 20)} |")
if d:
    w(f"| 100K flows (scenario D) ≤ 64 MB RSS | {d['rss_kb'] / 1024:.1f} MB with {d['held']} held connections | {verdict(d['rss_kb'] / 1024 <= 64)} |")
    if d.get("rss_rings_kb") is not None:
        own = (d["rss_now_kb"] - d["rss_rings_kb"]) / 1024
        w(f"| … of which not the ring-buffer mappings ≤ 64 MB | {own:.1f} MB | {verdict(own <= 64)} |")
if rep:
    w(f"| replay ≥ 1M events/s | {rep['events_per_s'] / 1e6:.2f} M/s ({rep['events']} events) | {verdict(rep['events_per_s'] >= 1e6)} |")
w("")
if f:
    w("## F: UDP flood\n")
    w(f"Datagrams/s without ebtop {f['baseline_sent_per_s']:.0f}, with {f['traced_sent_per_s']:.0f}; ebtop CPU {f['user_s']:.2f} s + BPF {f['bpf_s']:.2f} s "
      f"over {f['seconds']} s; lost {f['lost']}; datagrams of no known protocol skipped in the kernel: {f['skipped_unknown']}.\n")
if d:
    w("## D: many flows\n")
    when = f" (measured {d['measured']}, `bench/run.py --only-d --update`)" if d.get("measured") else ""
    owners = (f"; server-side flows {d['server_flows']}, never given an owner {d['server_flows_unowned']}"
              if "server_flows" in d else "")
    w(f"{d['held']} connections held, {d['short_connections']} short connections, {d['trickle_writes']} trickle writes in {d['seconds']} s{when}: "
      f"ebtop CPU {d['user_s']:.2f} s + BPF {d['bpf_s']:.2f} s, peak RSS {d['rss_kb'] / 1024:.1f} MB, lost {d['lost']}{owners}.\n")
    if d.get("flow_created") is not None:
        w(f"Flow table: {d['flow_created']} TCP flows entered, {d['flow_ends']} ended, flow ends lost {d['flow_ends_lost']}, "
          f"stale {d['flow_stale']}, closes the kernel skipped and ebtop recovered {d['flow_closes_recovered']} "
          f"(missed program runs {d['flow_missed_events']}); flows reported under more than one id "
          f"{d['flows_under_several_ids']}.\n")
peer = r.get("peer_bpftrace", {})
w("## Peers\n")
if "error" in peer:
    w(f"bpftrace floor: could not run ({peer['error']}).")
elif peer:
    w(f"bpftrace on the same tracepoints doing only a map update (the floor any capture pays): {peer['rps']:.0f} RPS "
      f"({peer['rps'] / base:.3f}× baseline), BPF {peer['bpf_s'] * 1e6 / max(peer['spans'], 1):.2f} µs per span, user {peer['user_s']:.2f} s.")
w("kyanos needs kprobes (`sock_alloc`, `security_socket_*`) and DeepFlow's agent needs kprobes or fentry for its socket "
  "hooks: neither loads on this kernel (CONFIG_KPROBES off, fentry EPERM), so they have no row here.\n")
if r.get("micro"):
    w("## Micro-benchmarks (criterion, `cargo bench --bench parsers`)\n")
    w("| bench | time | throughput |")
    w("|---|---|---|")
    for b in r["micro"]:
        w(f"| {b['bench']} | {b['time']} | {b.get('throughput') or ''} |")
    w("")
prof = r.get("profile", {})
if prof and "error" not in prof:
    w("## Profile: where the CPU per span goes (json mode, saturation)\n")
    spans = max(prof["spans"], 1)
    w(f"{prof['rps']:.0f} RPS, {spans} spans: user space {prof['user_s'] * 1e6 / spans:.2f} µs/span, "
      f"BPF {prof['bpf_s'] * 1e6 / spans:.2f} µs/span.\n")
    ov = prof.get("overhead") or {}
    progs = [p for p in ov.get("bpf_programs", []) if p.get("runs")]
    if progs:
        w(f"BPF programs in the busiest interval ({ov.get('ring_events_per_s', 0) or 0:.0f} ring-buffer events/s; "
          "kernel BPF statistics):\n")
        w("| program | runs/s | ns/run | CPU % of one core |")
        w("|---|---|---|---|")
        for p in sorted(progs, key=lambda p: -p["run_time_ns"]):
            w(f"| {p['name']} | {p['runs_per_s']:.0f} | {p['ns_per_run']:.0f} | {p['cpu_pct']:.1f} |")
        w("")
    if peer and "error" not in peer and peer.get("spans"):
        w(f"For scale, the bpftrace floor (one map update per enter/exit, nothing read or copied) costs "
          f"{peer['bpf_s'] * 1e9 / (peer['spans'] / 2):.0f} ns of BPF per request here, i.e. "
          f"{peer['bpf_s'] * 1e6 / peer['spans']:.2f} µs per span before any capture work.\n")
    w("User space by category (perf, software clock, % of ebtop's user+kernel samples):\n")
    w("| category | % |")
    w("|---|---|")
    for name, pct in prof["categories"]:
        if pct >= 0.5:
            w(f"| {name} | {pct:.1f} |")
    w("")
    w("<details><summary>Top symbols</summary>\n")
    w("| % | symbol |")
    w("|---|---|")
    for s in prof["top"]:
        w(f"| {s['pct']:.2f} | `{s['sym'][:90]}` |")
    w("\n</details>\n")
notes = os.path.join(ROOT, "bench/notes.md")
if os.path.exists(notes):
    w(open(notes).read())
open(os.path.join(ROOT, "docs/performance-history.md"), "w").write("\n".join(out) + "\n")
print("wrote docs/performance-history.md (docs/performance.md, the newest figures, is kept by hand)")
