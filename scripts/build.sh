#!/usr/bin/env bash
# Builds the three binaries (etcd, etcdctl, etcdutl) in release mode and puts them in bin/.
# Usage: scripts/build.sh && bin/etcd
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "build.sh: cargo not found; install Rust (rustup) first" >&2; exit 1; }
# jemalloc, the server's allocator, is C: cargo builds it with the system's cc and make.
if ! command -v cc >/dev/null || ! command -v make >/dev/null; then
  echo "build.sh: a C compiler and make are needed (apt-get install build-essential)" >&2
  exit 1
fi
cargo build --release --bin etcd --bin etcdctl --bin etcdutl
mkdir -p bin
for b in etcd etcdctl etcdutl; do
  cp -f "target/release/$b" "bin/$b"
done
echo "built: bin/etcd bin/etcdctl bin/etcdutl"
