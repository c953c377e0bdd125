#!/usr/bin/env bash
# Installs what the tests need from Debian when it is missing: the real etcd 3.4 server and Go
# etcdctl (the compatibility oracle), curl (HTTP checks), cc and make (jemalloc's build), protoc
# (the Rust etcd-client crate's own build, scripts/rust-client-suite.sh; ours needs none),
# Patroni and PostgreSQL 15 (a real client program of the JSON gateway), and etcd 3.5 (Debian
# trixie's etcd-server, unpacked into /opt/etcd-3.5, not installed: mixed clusters with 3.5
# members). Safe to run again; does nothing when all is present.
set -euo pipefail
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
# The server's allocator (jemalloc) is C, built by cargo with the system's cc and make.
{ command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1; } || missing+=(build-essential)
# tests/patroni.rs: Patroni (etcd3 backend) over PostgreSQL 15 on our server.
command -v patroni >/dev/null 2>&1 || missing+=(patroni)
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "deps.sh: installing ${missing[*]} from Debian" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# etcd 3.5 for tests/mixed_cluster.rs: trixie's package, fetched with apt through a source list
# of its own (the system's sources and packages stay bookworm's) and unpacked with dpkg -x; its
# binaries need only libc. ETCD35_DIR moves it.
etcd35="${ETCD35_DIR:-/opt/etcd-3.5}"
if [ ! -x "$etcd35/etcd" ]; then
  echo "deps.sh: fetching etcd 3.5 (Debian trixie's etcd-server) into $etcd35" >&2
  work="$(mktemp -d)"
  mkdir -p "$work/lists/partial" "$work/x"
  echo "deb http://deb.debian.org/debian trixie main" >"$work/sources.list"
  # Lists and package cache of its own too: the system's apt state is neither read nor locked.
  mkdir -p "$work/cache/archives/partial"
  apt_opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
    -o "APT::Sandbox::User=root")
  apt-get "${apt_opts[@]}" update -qq
  (cd "$work" && apt-get "${apt_opts[@]}" download -qq etcd-server etcd-client)
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/x"; done
  # Trixie's etcd is not pinned (an old version leaves the archive), but it must be a 3.5.
  # (Captured, not piped to grep -q: an early-closed pipe would fail this under pipefail.)
  v="$("$work/x/usr/bin/etcd" --version)"
  case "$v" in
    "etcd Version: 3.5."*) ;;
    *) echo "deps.sh: trixie's etcd-server is not a 3.5 release: $v" >&2; exit 1 ;;
  esac
  # Each binary is copied next to its place and renamed into it, etcd (what the -x check
  # at the top looks for) last: an interrupted fetch never looks installed.
  mkdir -p "$etcd35"
  for bin in etcdctl etcd; do
    cp "$work/x/usr/bin/$bin" "$etcd35/.$bin.tmp"
    mv "$etcd35/.$bin.tmp" "$etcd35/$bin"
  done
  rm -rf "$work"
fi
"$etcd35/etcd" --version | sed -n 1p >&2
# Debian's package may start a system etcd; our tests pick free ports, so it does not matter.
# sed reads all of it: head would close the pipe early, and with pipefail a SIGPIPE in etcd
# fails the script now and then.
etcd --version | sed -n 1p >&2
