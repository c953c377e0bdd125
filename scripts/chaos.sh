#!/usr/bin/env bash
# Long fault-injection runs of our cluster (etcd/tests/chaos.rs) on a release build; each run
# prints its seed, operation and fault counts, and fails on any anomaly.
#
#   scripts/chaos.sh [seconds] [members] [rounds]
#   CHAOS_FAULTS="kill -9 leader,kill -9 follower" scripts/chaos.sh 3600 5
#   CHAOS_SEED=1796169109 scripts/chaos.sh 60        # replay one run's choices
#
# As root each member's data dir is a tmpfs of its own ("disk full" shrinks it). A run killed
# from outside (kill -9, a timeout) leaves them mounted, and its members running: list them
# with `findmnt -t tmpfs | grep '/\.tmp'` and `umount -l` them once no member runs.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
members="${2:-3}"
rounds="${3:-1}"
# The faults use the Go etcdctl (move-leader, health); deps.sh installs it when missing.
scripts/deps.sh
for ((r = 1; r <= rounds; r++)); do
  echo "== chaos round $r of $rounds: $members members, $secs s"
  CHAOS_SECS="$secs" CHAOS_MEMBERS="$members" \
    cargo test --release -p etcd --test chaos faults_under_load -- --nocapture 2>&1 |
    grep -E '^chaos:|anomal|panicked|^test result'
done
