"""The paired on/off loop the protocol toggle benchmarks share (kafka_toggle.py,
mongo_toggle.py): under a load that runs the whole time, off and on windows alternate; ebtop
(`--json --overhead-programs --port PORT --bpf-stats full`, release build, its output filtered
by grep to the overhead and summary lines) runs through each on window. Per session: the
requests the server counted from just before ebtop started to just after it stopped (ground
truth for "every call counted": each request is two spans, the client's and the server's),
ebtop's CPU in the window, its BPF run time and ring losses."""
import json, os, signal, socket, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from toggle import wait_attached  # noqa: E402
from redis_toggle import cpu_ns, quartiles, session_totals  # noqa: E402

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")


def run(binary, port, rate_over, served_total, cycles, window, settle=1.0):
    """`rate_over(seconds)`: the load's rate over the next `seconds`; `served_total()`: the
    server's running count of requests. Returns (windows, sessions)."""
    windows, sessions = [], []
    for _ in range(cycles):
        windows.append(("off", rate_over(window)))
        out = tempfile.TemporaryFile()
        before = served_total()
        e = subprocess.Popen([binary, "--json", "--overhead-programs", "--port", str(port),
                              "--bpf-stats", "full"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        keep = subprocess.Popen(["grep", "-F", "-e", '"type":"overhead"', "-e",
                                 '"type":"summary"'], stdin=e.stdout, stdout=out)
        e.stdout.close()
        wait_attached(e.pid)
        served0, cpu0 = served_total(), cpu_ns(e.pid)
        windows.append(("on", rate_over(window)))
        served, cpu = served_total() - served0, cpu_ns(e.pid) - cpu0
        e.send_signal(signal.SIGINT)
        e.wait()
        keep.wait()
        time.sleep(settle)  # the server logs the last requests ebtop may have seen
        served_session = served_total() - before
        bpf_ns, calls, lost = session_totals(out)
        out.close()
        sessions.append({"served": served, "served_session": served_session, "calls": calls,
                         "cpu_ns": cpu, "bpf_ns": bpf_ns, "lost": lost})
    windows.append(("off", rate_over(window)))
    return windows, sessions


def report(windows, sessions, **extra):
    ratios = [r / ((windows[i - 1][1] + windows[i + 1][1]) / 2)
              for i, (m, r) in enumerate(windows) if m == "on"]
    return {
        "throughput_ratio": quartiles(ratios),
        "off_rate_median": quartiles([r for m, r in windows if m == "off"])["median"],
        # ebtop's calls of a session against the two spans of each request the server counted:
        # every call counted puts them between the window's spans (ebtop ran through the
        # window) and the spans from before ebtop's start to after its stop (the server
        # counts the requests of ebtop's own start and stop too, before capture or after).
        "calls_per_window_span": quartiles([s["calls"] / max(2 * s["served"], 1)
                                            for s in sessions]),
        "sessions_within_bounds": sum(2 * s["served"] <= s["calls"] <= 2 * s["served_session"]
                                      for s in sessions),
        # ebtop's CPU in the window (load and attach excluded) per span served in it.
        "user_space_ns_per_span": quartiles([s["cpu_ns"] / max(2 * s["served"], 1)
                                             for s in sessions]),
        # The BPF run time of the whole session per call it printed.
        "bpf_ns_per_span": quartiles([s["bpf_ns"] / max(s["calls"], 1) for s in sessions]),
        "ring_lost": sum(s["lost"] for s in sessions),
        **extra,
    }


def write(name, windows, sessions, rep):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    with open(path, "w") as f:
        json.dump({"report": rep, "windows": windows, "sessions": sessions}, f, indent=1)
    print(json.dumps(rep, indent=1))


def wait_listening(port, server, what, timeout=120):
    """Waits until 127.0.0.1:port accepts connections; exits if `server` ends or time runs out."""
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                sys.exit(f"{what} did not start")
            time.sleep(0.2)


class Progress:
    """A load generator's per-second progress lines read by a thread: `parse(line)` gives
    (time, rate) or None; `rate_over(seconds)` sleeps and gives the mean rate of the reports
    inside the window (its first second left out, the report of its last second waited for)."""

    def __init__(self, stream, parse):
        self.points, self.lock, self.parse = [], threading.Lock(), parse
        threading.Thread(target=self.read, args=(stream,), daemon=True).start()

    def read(self, stream):
        for line in stream:
            point = self.parse(line.decode(errors="replace"))
            if point:
                with self.lock:
                    self.points.append(point)

    def rate_over(self, seconds):
        t0 = time.time()
        time.sleep(seconds)
        t1 = time.time()
        time.sleep(1.2)
        with self.lock:
            inside = [r for t, r in self.points if t0 + 1 <= t <= t1 + 0.2]
        return sum(inside) / len(inside) if inside else 0.0
