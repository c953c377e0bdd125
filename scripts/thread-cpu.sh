#!/usr/bin/env bash
# Per-thread CPU of running servers, for benchmarks: sums utime+stime (clock ticks) and voluntary
# context switches by thread name over every process matching a pattern, until they all exit.
#
# Start it, then the benchmark; it prints the last sample taken while the servers ran:
#   scripts/thread-cpu.sh & BENCH_ONLY=ours BENCH_WORKLOADS=watch scripts/bench.sh server; wait
# The pattern (first argument) defaults to our bench servers: "release/etcd --name".
# One thread's change shows here through noise that moves a whole run's ratio by ±10%.
set -euo pipefail
pattern="${1:-release/etcd --name}"
want="${2:-raft-loop}" # a sample counts once this thread is up (the server has started)
last=""
seen=0
while true; do
  pids=$(pgrep -f "$pattern" || true)
  if [ -n "$pids" ]; then
    seen=1
    sample=$(
      for p in $pids; do
        for t in /proc/"$p"/task/*; do
          name=$(cat "$t/comm" 2>/dev/null) || continue
          ticks=$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null) || continue
          vol=$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status" 2>/dev/null) || continue
          echo "$name $ticks $vol"
        done
      done | awk '{c[$1] += $2; v[$1] += $3} END {for (k in c) printf "%-18s %8d %10d\n", k, c[k], v[k]}' | sort
    )
    if grep -q "^$want " <<<"$sample"; then
      last="$sample"
    fi
  elif [ "$seen" = 1 ]; then
    printf "%-18s %8s %10s\n" thread ticks voluntary
    printf "%s\n" "$last"
    exit 0
  fi
  sleep 0.1
done
