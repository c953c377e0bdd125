#!/usr/bin/env bash
# Runs the Rust etcd-client crate's own test suite (0.21.1, the crates.io release) against
# etcd-rs, set up as its Justfile sets up etcd 3.7: root/rootpwd, token TTL 2 s, then its
# RangeStream tests on a member with --max-request-bytes 10240. Usage: rust-client-suite.sh BIN
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
version=0.21.1
sha256=c46b85f82f5189ce66d901425833ee2d94440a571e8071252db5776cc66dea63
cache="${CARGO_TARGET_DIR:-$PWD/target}/client-suites"
src="$cache/etcd-client-$version"
mkdir -p "$cache"
if [ ! -f "$src/Cargo.toml" ]; then
  curl -sSfL -o "$cache/etcd-client.crate" \
    "https://static.crates.io/crates/etcd-client/etcd-client-$version.crate"
  echo "$sha256  $cache/etcd-client.crate" | sha256sum -c --quiet -
  tar xzf "$cache/etcd-client.crate" -C "$cache"
  # Its own workspace: it is unpacked under ours.
  printf '\n[workspace]\n' >>"$src/Cargo.toml"
fi
# Its tests dial localhost:2379; refuse to start over something already listening there.
if (exec 3<>/dev/tcp/127.0.0.1/2379) 2>/dev/null; then
  echo "rust-client-suite.sh: port 2379 is taken; the etcd-client tests need it" >&2
  exit 1
fi
suite() { (cd "$src" && CARGO_TARGET_DIR="$cache/target" cargo test --locked "$@"); }
suite --no-run -q
data="$(mktemp -d)"
pid=""
stop() { [ -z "$pid" ] || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }; pid=""; }
trap 'stop; rm -rf "$data"' EXIT
start() {
  rm -rf "$data/member"
  "$bin" --data-dir "$data/member" "$@" >"$data/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl endpoint health >/dev/null 2>&1 && return
    sleep 0.1
  done
  tail -20 "$data/log" >&2
  echo "rust-client-suite.sh: $bin did not start" >&2
  exit 1
}
start --auth-token-ttl 2
ETCDCTL_API=3 etcdctl user add root --new-user-password=rootpwd >/dev/null
ETCDCTL_API=3 etcdctl user grant-role root root >/dev/null
suite
stop
start --max-request-bytes 10240
suite --test client test_get_stream -- --ignored
stop
