#!/usr/bin/env python3
"""ebtop's cost at Kafka producer saturation, paired (run by hand, as root).

    bench/kafka_toggle.py [--cycles 6] [--window 4] [--record-size 100]

A single-node Kafka 4.4 broker (scripts/kafka, KRaft, pinned to the last CPU, its request log
on) under continuous `kafka-producer-perf-test` load (ProducerPerformance, pinned to CPU 0,
`--throughput -1`, acks=1, progress every second) for the whole run; ebtop toggled by
bench/paired_sessions.py. A window's rate is the mean of the producer's per-second records/s
reports inside it. Ground truth for the calls: the broker's request log (one line per
completed request; Produce and the producer's Metadata). Writes bench/kafka-toggle-results.json.
"""
import argparse, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import build  # noqa: E402
import paired_sessions  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = 18936


def producer_progress(line):
    """ProducerPerformance's `N records sent, X records/sec (…)`: (now, X)."""
    f = line.split()
    if len(f) >= 5 and f[1] == "records" and f[2] == "sent,":
        return time.time(), float(f[3])
    return None


class RequestLog:
    """Counts the broker's completed requests on the benchmark's listener, reading the log as
    it grows."""

    def __init__(self, path):
        self.path, self.offset, self.count, self.rest = path, 0, 0, b""

    def total(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.count
        self.offset += len(data)
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        self.count += sum(1 for l in lines if l.startswith(b"Completed request:")
                          and f'"connection":"127.0.0.1:{PORT}-'.encode() in l)
        return self.count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--binary", help="ebtop to measure (default: scripts/build-release's)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/kafka_toggle.py needs root (ebtop loads eBPF)")
    if shutil.which("java") is None:
        sys.exit("java is missing: scripts/deps installs it")
    binary = a.binary or build()[0]
    lib = subprocess.run([os.path.join(ROOT, "scripts/kafka")], check=True,
                         capture_output=True, text=True).stdout.strip()
    ncpu = os.cpu_count()
    d = tempfile.mkdtemp(prefix="ebtop-kafka-toggle-")
    broker = subprocess.Popen(["taskset", "-c", str(ncpu - 1), os.path.join(ROOT, "scripts/kafka"),
                               "broker", d, str(PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = RequestLog(os.path.join(d, "requests.log"))
    load = None
    try:
        paired_sessions.wait_listening(PORT, broker, "the broker")
        load = subprocess.Popen(
            ["taskset", "-c", "0", "java", "-Xmx512m", "-cp", f"{lib}/*",
             "org.apache.kafka.tools.ProducerPerformance", "--bootstrap-server",
             f"127.0.0.1:{PORT}", "--topic", "bench", "--num-records", "1000000000",
             "--throughput", "-1", "--record-size", str(a.record_size),
             "--reporting-interval", "1000", "--command-property", "acks=1", "linger.ms=0",
             "client.id=perf"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        progress = paired_sessions.Progress(load.stdout, producer_progress)
        time.sleep(8)  # topic created, JIT warm
        windows, sessions = paired_sessions.run(binary, PORT, progress.rate_over, log.total,
                                                a.cycles, a.window)
    finally:
        if load:
            load.terminate()
            load.wait()
        broker.terminate()
        broker.wait()
        shutil.rmtree(d, ignore_errors=True)
    rep = paired_sessions.report(windows, sessions, record_size=a.record_size,
                                 rate="records/s")
    paired_sessions.write("kafka-toggle-results.json", windows, sessions, rep)


if __name__ == "__main__":
    main()
