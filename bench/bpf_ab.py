#!/usr/bin/env python3
"""Paired BPF cost per program run of two ebtop builds under the same load (run by hand, as root).

    bench/bpf_ab.py A B [--rounds 6] [--window 4] [--go-server BIN] [-- EXTRA EBTOP ARGS]

A and B are ebtop binaries; either may end in `+NAME=VALUE` to run it with that environment
variable (e.g. `ebtop+EBTOP_BENCH_CUT=copy` for a `--features bench-cuts` build stopped before
the ring). nginx (1 worker pinned to the last CPU, `return 200 "ok"`) serves a continuous
`wrk -t1 -c50` pinned to CPU 0 for the whole run; A and B trace it in turns (`--json --port P
> /dev/null`, the order flipped every round). In each turn, once every probe is attached and the
TLS lookout is at rest, the kernel's run-time statistics are switched on for --window seconds
(and back off: they cost every BPF program on the host ~60 ns per run, both sides alike) and
each program's run time and run count over the window are read from /proc/PID/fdinfo.
`--go-server BIN`: a Go net/http server instead of nginx, `BIN backend PORT` pinned to the last
CPU (tests/fixtures/chains/go built: it answers every request "b"), for what Go's records cost.

Printed per build and program: the median ns per run over the rounds (statistics included),
each round's figure, and runs per second (a send and a receive program run twice per request).
The kernel's figure per run is exact where a throughput ratio needs many cycles to resolve a
few per cent: a change of 20 ns per run shows in 4–6 rounds on this VM.
"""
import argparse
import ctypes
import os
import signal
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import (STATS_SYSCTL, apt, bpf_stats_sysctl_on, pinned_ok_nginx, prog_stats,  # noqa: E402
                 wait_attached, wait_tls_scan)

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

PORT = 18937
NR_BPF = {"x86_64": 321, "aarch64": 280}[os.uname().machine]
BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD = 13, 15
libc = ctypes.CDLL(None, use_errno=True)


def prog_name(prog_id):
    """A BPF program's name (struct bpf_prog_info.name, 16 bytes at offset 64)."""
    attr = ctypes.create_string_buffer(struct.pack("I", prog_id), 128)
    fd = libc.syscall(NR_BPF, BPF_PROG_GET_FD_BY_ID, attr, 128)
    if fd < 0:
        return str(prog_id)
    try:
        info = ctypes.create_string_buffer(256)
        attr = ctypes.create_string_buffer(struct.pack("IIQ", fd, 256, ctypes.addressof(info)), 128)
        if libc.syscall(NR_BPF, BPF_OBJ_GET_INFO_BY_FD, attr, 128) < 0:
            return str(prog_id)
        return info.raw[64:80].split(b"\0")[0].decode() or str(prog_id)
    finally:
        os.close(fd)


def split_env(spec):
    """`path+NAME=VALUE` → (path, {NAME: VALUE}); a plain path → (path, {})."""
    if "+" not in spec:
        return spec, {}
    path, assignment = spec.split("+", 1)
    name, value = assignment.split("=", 1)
    return path, {name: value}


def one_turn(spec, extra, window):
    """{program name: (ns per run, runs per second)} of one traced window."""
    exe, env = split_env(spec)
    eb = subprocess.Popen([exe, "--json", "--port", str(PORT), *extra], stdout=subprocess.DEVNULL,
                          env={**os.environ, **env})
    try:
        wait_attached(eb.pid)
        wait_tls_scan(eb.pid)
        with open(STATS_SYSCTL, "w") as f:
            f.write("1")
        before = prog_stats(eb.pid)
        time.sleep(window)
        after = prog_stats(eb.pid)
        with open(STATS_SYSCTL, "w") as f:
            f.write("0")
        result = {}
        for prog_id, (ns, runs) in after.items():
            ns0, runs0 = before.get(prog_id, (0, 0))
            if runs - runs0 >= 100 * window:
                # Named while ebtop still holds the program.
                result[prog_name(prog_id)] = ((ns - ns0) / (runs - runs0), (runs - runs0) / window)
    finally:
        eb.send_signal(signal.SIGINT)
        eb.wait()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--go-server", help="a Go server (tests/fixtures/chains/go) instead of nginx")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # more ebtop arguments
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.extra = extra
    if os.geteuid() != 0:
        sys.exit("bpf_ab.py: needs root (loads BPF, sets kernel.bpf_stats_enabled)")
    apt("nginx", "wrk")
    bpf_stats_sysctl_on()  # restores the previous setting however this ends
    with open(STATS_SYSCTL, "w") as f:
        f.write("0")
    if args.go_server:
        last = str(os.cpu_count() - 1)
        nginx = subprocess.Popen(["taskset", "-c", last, args.go_server, "backend", str(PORT)])
    else:
        nginx = pinned_ok_nginx(PORT, "ebtop-bpfab-")
    wrk = subprocess.Popen(["taskset", "-c", "0", "wrk", "-t1", "-c50", "-d3600",
                            f"http://127.0.0.1:{PORT}/"], stdout=subprocess.DEVNULL)
    results = {args.a: {}, args.b: {}}
    try:
        time.sleep(2)
        for r in range(args.rounds):
            for spec in (args.a, args.b) if r % 2 == 0 else (args.b, args.a):
                for name, figures in one_turn(spec, args.extra, args.window).items():
                    results[spec].setdefault(name, []).append(figures)
                time.sleep(0.5)
    finally:
        wrk.kill()
        nginx.terminate()
        nginx.wait()
    for spec in (args.a, args.b):
        print(spec)
        for name, figs in sorted(results[spec].items()):
            ns = [f[0] for f in figs]
            rate = statistics.median(f[1] for f in figs)
            print(f"  {name:16} {statistics.median(ns):6.0f} ns/run  (rounds: "
                  f"{', '.join(f'{x:.0f}' for x in ns)})  {rate / 1000:.0f}K runs/s")


if __name__ == "__main__":
    main()
