#!/usr/bin/env bash
# Benchmarks (not tests): prints throughput/latency numbers, side by side with a baseline in
# the same run, since absolute numbers drift on shared machines.
# Usage: scripts/bench.sh [wal|backend|raft|server|datascale|cluster|scale|etcdutl|all]
# server/cluster sizes: BENCH_SECS BENCH_KEYS BENCH_PREFIX_KEYS BENCH_WATCHERS BENCH_WATCH_KEYS
# BENCH_WATCH_PUTS BENCH_WATCHERS_PER_STREAM BENCH_PROGRESS_SECS BENCH_COMPACT_REVS (1000000: the issue's million),
# BENCH_ONLY=etcd|ours, BENCH_WORKLOADS=keys,put1,..., BENCH_ROUNDS=n (medians of n rounds); cluster: BENCH_AT_LEADER=1, BENCH_MIXED=1|all (see
# docs/ARCHITECTURE.md "Benchmarks"). Quick: BENCH_SECS=2 BENCH_KEYS=20000 BENCH_COMPACT_REVS=20000
# scale (issue 19's 1M random puts, memory and restart): BENCH_SCALE_PUTS BENCH_SCALE_KEYS, BENCH_ONLY,
# BENCH_SCALE_SEQUENTIAL=1 (every key alive once: issue 17's RangeStream of 1M keys)
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
run() {
  case "$1" in
    wal) cargo bench -p common --bench wal ;;
    backend) cargo bench -p common --bench backend ;;
    raft) cargo bench -p etcd --bench raft ;;
    server) scripts/deps.sh && cargo bench -p etcd --bench server ;;
    datascale) scripts/deps.sh && cargo bench -p etcd --bench datascale ;;
    cluster) scripts/deps.sh && cargo bench -p etcd --bench cluster ;;
    scale) scripts/deps.sh && cargo bench -p etcd --bench scale ;;
    etcdutl) scripts/deps.sh && cargo bench -p etcdutl --bench restore ;;
    *) echo "bench.sh: unknown benchmark '$1' (known: wal, backend, raft, server, datascale, cluster, scale, etcdutl, all)" >&2; exit 2 ;;
  esac
}
if [ "$what" = all ]; then
  for b in wal backend raft server datascale cluster etcdutl; do run "$b"; done
else
  run "$what"
fi
