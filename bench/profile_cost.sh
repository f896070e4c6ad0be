#!/bin/bash
# BPF time per run of --profile's programs during `perf bench sched pipe` (docs/performance.md,
# "Profiles"): the sched_switch program with the bench's tasks profiled and with an unrelated
# process profiled, with the gate closed (--profile-when a rule that never holds: the bench's
# tasks are the filter's but nothing is selected until a trigger), and the cpu-clock sampler. Reads run_time_ns/run_cnt from ebtop's program
# descriptors (/proc/PID/fdinfo) with kernel.bpf_stats_enabled on for the run (restored after).
# Usage (root): bench/profile_cost.sh [path/to/ebtop]
set -u
E=${1:-target/release/ebtop}
prev=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$prev' EXIT
sysctl -qw kernel.bpf_stats_enabled=1
stats() {
  for f in /proc/$1/fdinfo/*; do
    grep -q '^prog_type' "$f" 2>/dev/null || continue
    awk '/^prog_type/{t=$2} /^run_time_ns/{ns=$2} /^run_cnt/{c=$2}
         END{if (c>0) printf "prog_type %s (7 perf_event, 26 tracing): %d runs, %.0f ns/run\n", t, c, ns/c}' "$f"
  done
}
sleep 600 & idle=$!
for args in "--comm sched-pipe" "-p $idle" "--comm sched-pipe --profile-when cpu>100000%" \
    "--profile-off-cpu-min off"; do
  "$E" --json --only profile --profile $args >/dev/null 2>&1 &
  ep=$!
  sleep 3
  perf bench sched pipe -l 50000 2>&1 | awk '/usecs\/op/ {print "bench", $1, "usecs/op"}'
  echo "== --profile $args"; stats $ep
  kill -INT $ep; wait $ep
done
kill $idle
