"""Where a process's threads spend their time, sampled from /proc (no perf needed: a lent machine
may have none): each thread's state, the kernel function it sleeps in (wchan) and the system call
it is in, HZ times a second, plus the scheduler's own totals (time run, time waiting on a run
queue, switches) between start and stop. Used by bench/scale.py --sample-hz."""
import collections
import os
import threading
import time


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def _schedstat(pid, tid):
    """(ns on a CPU, ns waiting on a run queue, voluntary switches, involuntary switches)."""
    s = _read(f"/proc/{pid}/task/{tid}/schedstat")
    st = _read(f"/proc/{pid}/task/{tid}/status")
    if s is None or st is None:
        return None
    run_ns, wait_ns = (int(x) for x in s.split()[:2])
    sw = {k: int(v) for k, v in (line.split(":\t") for line in st.splitlines()
                                 if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))}
    return run_ns, wait_ns, sw["voluntary_ctxt_switches"], sw["nonvoluntary_ctxt_switches"]


SYSCALLS = {0: "read", 1: "write", 7: "poll", 202: "futex", 232: "epoll_wait", 230: "clock_nanosleep",
            281: "epoll_pwait", 441: "epoll_pwait2", 20: "writev", 17: "pread64", 16: "ioctl",
            321: "bpf", 35: "nanosleep"}


class ThreadSampler:
    """Samples every thread of `pid` at `hz` from a background thread until stop()."""

    def __init__(self, pid, hz):
        self.pid, self.period = pid, 1.0 / hz
        self.counts = collections.defaultdict(collections.Counter)
        self.samples = 0
        self._stop = threading.Event()
        self._sched0 = self._sched()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tids(self):
        try:
            return os.listdir(f"/proc/{self.pid}/task")
        except FileNotFoundError:
            return []

    def _sched(self):
        out = {}
        for tid in self._tids():
            stat = _read(f"/proc/{self.pid}/task/{tid}/stat")
            s = _schedstat(self.pid, tid)
            if stat and s:
                out[tid] = (stat[stat.index("(") + 1:stat.rindex(")")], s)
        return out

    def _run(self):
        next_t = time.monotonic()
        while not self._stop.is_set():
            for tid in self._tids():
                stat = _read(f"/proc/{self.pid}/task/{tid}/stat")
                if not stat:
                    continue
                name = stat[stat.index("(") + 1:stat.rindex(")")]
                state = stat[stat.rindex(")") + 2]
                if state == "R":
                    key = "R"
                else:
                    wchan = (_read(f"/proc/{self.pid}/task/{tid}/wchan") or "?").strip() or "?"
                    sc = (_read(f"/proc/{self.pid}/task/{tid}/syscall") or "?").split()
                    nr = int(sc[0]) if sc and sc[0].lstrip("-").isdigit() else None
                    call = SYSCALLS.get(nr, str(nr))
                    if call in ("write", "writev") and len(sc) > 1:
                        call += f"(fd {int(sc[1], 16)})"
                    key = f"{state} {wchan} {call}"
                self.counts[name][key] += 1
            self.samples += 1
            next_t += self.period
            time.sleep(max(0.0, next_t - time.monotonic()))

    def stop(self, secs):
        """Stops sampling; per thread name: the share of samples in each state (the most
        common first) and, from the scheduler, cores run, cores waiting to run, and switches
        per second over `secs`."""
        self._stop.set()
        self._thread.join()
        sched1 = self._sched()
        out = {}
        for tid, (name, (r1, w1, v1, n1)) in sched1.items():
            r0, w0, v0, n0 = self._sched0.get(tid, (name, (0, 0, 0, 0)))[1]
            if tid == str(self.pid):
                out.setdefault(name, {"sched": []})["main"] = True  # ebtop's pipeline thread
            out.setdefault(name, {"sched": []})["sched"].append({
                "run_cores": round((r1 - r0) / 1e9 / secs, 3),
                "runqueue_wait_cores": round((w1 - w0) / 1e9 / secs, 3),
                "voluntary_per_s": round((v1 - v0) / secs),
                "involuntary_per_s": round((n1 - n0) / secs)})
        for name, c in self.counts.items():
            total = sum(c.values())
            out.setdefault(name, {"sched": []})["states"] = {
                k: round(v / total, 3) for k, v in c.most_common(8)}
        return out
