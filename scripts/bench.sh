#!/usr/bin/env bash
# Benchmarks (not tests): prints throughput/latency numbers, side by side with a baseline in
# the same run, since absolute numbers drift on shared machines.
# Usage: scripts/bench.sh [wal|backend|all]
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
case "$what" in
  wal) cargo bench -p common --bench wal ;;
  backend) cargo bench -p common --bench backend ;;
  all) cargo bench -p common --bench wal && cargo bench -p common --bench backend ;;
  *) echo "bench.sh: unknown benchmark '$what' (known: wal, backend, all)" >&2; exit 2 ;;
esac
