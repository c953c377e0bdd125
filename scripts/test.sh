#!/usr/bin/env bash
# Everything a contributor must pass before landing: formatting, clippy with warnings as errors,
# and every test of the workspace (unit, simulator, compatibility tests against the real etcd).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace --no-fail-fast -- --skip faults_under_load_keep_a_linearizable_history
echo "== the CI-sized fault run (etcd/tests/chaos.rs), printing what it injected and checked"
cargo test --workspace --test chaos faults_under_load_keep_a_linearizable_history -- --nocapture
echo "== etcdctl tables against etcd-rs (real etcdctl on etcd 3.4 vs ours on etcd-rs)"
# Every table but endpoint_status, whose only difference is the version etcd-rs reports
# (3.5.x by design, where the oracle is 3.4).
# CARGO_BIN_EXE paths are not visible here, so use the target dir cargo just built. --workspace
# (not -p) keeps the features of the build above: -p etcdctl alone would rebuild (2 minutes).
target_dir="${CARGO_TARGET_DIR:-target}"
TWIN_SERVER_BIN="$(cd "$target_dir/debug" && pwd)/etcd" \
  cargo test --workspace --test compat -- \
  kv_commands txn_matches watch_matches lease_commands alarms_match make_mirror snapshot_lock_elect auth_user_role cluster_and_maintenance \
  global_flags unsupported_features tls_matches
echo "== etcdctl on a terminal against etcd-rs (real etcdctl on etcd 3.4 vs ours on etcd-rs, through a pty)"
TWIN_SERVER_BIN="$(cd "$target_dir/debug" && pwd)/etcd" \
  cargo test --workspace --test terminal
echo "== the Rust etcd-client crate's own suite (0.21.1, with its etcd 3.7 RangeStream tests) against etcd-rs"
scripts/rust-client-suite.sh "$target_dir/debug/etcd"
