#!/usr/bin/env python3
"""How much of a Go program started after ebtop is seen, and how long ebtop takes to let go
of its TLS probes (as root, on this host).

For each mode (`multi`: multi-uprobe links, the default where the kernel has them; `single`:
one link per site, EBTOP_UPROBE_LINKS=single), in turns for --rounds rounds:
  - ebtop --json --port P runs beside the Go fixture's server (tests/fixtures/tls/go, started
    before ebtop, so probed at start) and waits for `tls_installed_scanned`;
  - --runs fresh copies of the Go client (new files, so never probed before), each making
    --gets GETs on one connection, outside ebtop's PATH (probed when its exec is reported),
    then as many inside a directory on ebtop's PATH, created before ebtop started (probed
    with the installed programs, before they run);
  - ebtop is stopped with SIGINT and the time to its exit is taken (the probes are detached
    after the summary is written).
Prints per mode the client calls ebtop saw per run (out of --gets) for both kinds of client,
the files probed, the exit times and the time until `tls_installed_scanned`.

  sudo bench/tls_new_programs.py EBTOP_BINARY [--rounds 3] [--runs 6] [--gets 50]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_go(out):
    """The Go fixture (one binary: `server` and `client` subcommands)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    subprocess.run([go, "build", "-buildvcs=false", "-o", out, "."], check=True,
                   cwd=os.path.join(ROOT, "tests/fixtures/tls/go"),
                   env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"})


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_session(ebtop, gotls, tmp, mode, runs, gets):
    port = free_port()
    cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
    server = subprocess.Popen([gotls, "server", "-addr", f"127.0.0.1:{port}", "-cert", cert,
                               "-key", key], stdout=subprocess.PIPE)
    server.stdout.readline()
    on_path = tempfile.mkdtemp(dir=tmp)
    off_path = tempfile.mkdtemp(dir=tmp)
    for i in range(runs):
        shutil.copy(gotls, os.path.join(on_path, f"onpath{i}"))
        shutil.copy(gotls, os.path.join(off_path, f"offpath{i}"))
    env = {**os.environ, "PATH": on_path + ":" + os.environ.get("PATH", "")}
    if mode == "single":
        env["EBTOP_UPROBE_LINKS"] = "single"
    out = open(os.path.join(tmp, "out.json"), "w+")
    started = time.monotonic()
    e = subprocess.Popen([ebtop, "--json", "--port", str(port)], stdout=out,
                         stderr=subprocess.DEVNULL, env=env)
    scanned = None
    while scanned is None and time.monotonic() - started < 60:
        time.sleep(0.05)
        out.seek(0)
        for line in out:
            if '"tls_installed_scanned":true' in line:
                scanned = time.monotonic() - started
                break
    pids = {"off": [], "on": []}
    for kind, d, name in (("off", off_path, "offpath"), ("on", on_path, "onpath")):
        for i in range(runs):
            c = subprocess.Popen([os.path.join(d, f"{name}{i}"), "client", "-base",
                                  f"https://127.0.0.1:{port}", *(["/"] * gets)],
                                 stdout=subprocess.DEVNULL)
            pids[kind].append(c.pid)
            c.wait()
            time.sleep(0.3)
    time.sleep(1)
    t = time.monotonic()
    e.send_signal(2)
    e.wait()
    exit_s = time.monotonic() - t
    server.kill()
    server.wait()
    out.seek(0)
    seen = {p: 0 for k in pids.values() for p in k}
    files = None
    for line in out:
        v = json.loads(line)
        if v.get("type") == "call" and v.get("side") == "client" and v.get("pid") in seen:
            seen[v["pid"]] += 1
        if v.get("type") == "summary":
            files = v["kernel"].get("tls_files_probed")
    shutil.rmtree(on_path)
    shutil.rmtree(off_path)
    return {"off": [seen[p] for p in pids["off"]], "on": [seen[p] for p in pids["on"]],
            "exit_s": exit_s, "scanned_s": scanned, "files": files}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ebtop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--gets", type=int, default=50)
    ap.add_argument("--modes", default="multi,single")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    try:
        gotls = os.path.join(tmp, "gotls")
        build_go(gotls)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        os.path.join(tmp, "k.pem"), "-out", os.path.join(tmp, "c.pem"),
                        "-days", "1", "-subj", "/CN=x"], check=True, capture_output=True)
        results = {m: [] for m in a.modes.split(",")}
        for r in range(a.rounds):
            for m in results:
                res = one_session(a.ebtop, gotls, tmp, m, a.runs, a.gets)
                print(f"round {r} {m}: {res}", flush=True)
                results[m].append(res)
        for m, rs in results.items():
            off = [x for r in rs for x in r["off"]]
            on = [x for r in rs for x in r["on"]]
            print(f"{m}: calls seen of {a.gets} per new run — outside PATH median "
                  f"{statistics.median(off)} (all {off}); on PATH median {statistics.median(on)} "
                  f"(min {min(on)}); exit s median {statistics.median(r['exit_s'] for r in rs):.2f}; "
                  f"installed scanned after s {[round(r['scanned_s'] or -1, 2) for r in rs]}; "
                  f"files probed {[r['files'] for r in rs]}")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
