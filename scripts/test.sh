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
cargo test --workspace --no-fail-fast
