#!/usr/bin/env bash
# Installs what the tests need from Debian when it is missing: the real etcd 3.4 server and Go
# etcdctl (the compatibility oracle), curl (HTTP checks), cc and make (jemalloc's build),
# Patroni and PostgreSQL 15 (a real client program of the JSON gateway). Safe to run again;
# does nothing when all is present.
set -euo pipefail
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v curl >/dev/null 2>&1 || missing+=(curl)
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
# Debian's package may start a system etcd; our tests pick free ports, so it does not matter.
# sed reads all of it: head would close the pipe early, and with pipefail a SIGPIPE in etcd
# fails the script now and then.
etcd --version | sed -n 1p >&2
