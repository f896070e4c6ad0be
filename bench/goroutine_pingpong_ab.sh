#!/bin/bash
# Paired: per round, the ping-pong plain, with a uprobe on runtime.execute, with one on
# runtime.casgstatus (perf counting events: the uprobe's trap and a count, no BPF program);
# order rotated per round. Prints ns per goroutine switch and probe hits.
# Build first: go build -o /tmp/pingpong/pingpong bench/goroutine_pingpong.go; then, as root:
#   perf probe -x /tmp/pingpong/pingpong -a runtime.execute -a exepush=runtime.execute+10 -a casg=runtime.casgstatus
cd /tmp/pingpong
N=${N:-500000}
for r in $(seq 1 ${ROUNDS:-7}); do
  for m in $(case $((r % 3)) in 0) echo plain execute exepush casg;; 1) echo execute exepush casg plain;; 2) echo exepush casg plain execute;; esac); do
    case $m in
      plain) v=$(GOMAXPROCS=1 taskset -c 1 ./pingpong $N); h=0;;
      execute) out=$(GOMAXPROCS=1 perf stat -x, -e probe_pingpong:runtime -- taskset -c 1 ./pingpong $N 2>/tmp/pp.err); v=$out; h=$(cut -d, -f1 /tmp/pp.err | tail -1);;
      exepush) out=$(GOMAXPROCS=1 perf stat -x, -e probe_pingpong:exepush -- taskset -c 1 ./pingpong $N 2>/tmp/pp.err); v=$out; h=$(cut -d, -f1 /tmp/pp.err | tail -1);;
      casg) out=$(GOMAXPROCS=1 perf stat -x, -e probe_pingpong:casg -- taskset -c 1 ./pingpong $N 2>/tmp/pp.err); v=$out; h=$(cut -d, -f1 /tmp/pp.err | tail -1);;
    esac
    echo "$r $m $v $h"
  done
done
