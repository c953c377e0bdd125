#!/usr/bin/env bash
# Research tool (not part of the test suite): runs real etcd 3.4 clusters on 127.0.0.1 with
# plain-HTTP peer URLs, captures the loopback traffic on the peer ports with tcpdump, drives
# every peer-protocol situation docs/RAFTHTTP.md describes, and probes the peer endpoints with
# curl. Everything lands in $OUT (default /tmp/rafthttp-captures), one folder per scenario:
#   <scenario>/cap.pcap      the capture (tcp ports 41101-41109: the peer ports)
#   <scenario>/m<N>.log      each member's log (zap, stderr)
#   <scenario>/steps.log     what was done and when (seconds since the capture started)
#   <scenario>/members.txt   member IDs (name=hex id), for the decoder's --ids
#   probes/NN-*.txt          curl -i answers of the peer endpoints (probes scenario)
#
# Usage: scripts/capture-rafthttp.sh [scenario ...]    (default: all, about 5 minutes)
#   scenarios: bootstrap leases membership snapshot restart wrongcluster removed corrupt probes
#              probes2 multiurl fakepeer fakestream v2snap
# Needs: etcd/etcdctl 3.4 (scripts/deps.sh), tcpdump, curl, python3; root for tcpdump on lo;
#        tshark + protobuf-compiler for the decoder (see write_decoder at the end).
# Ports: clients 41001-41009, peers 41101-41109 (member N uses 4100N / 4110N; 41109 = fake peer).
# Every scenario starts from empty data dirs, so member IDs are the same on every run
# (m1=9ee4bcfe6709567f m2=c1dda8f7168399ba m3=69aa302db9d76d0a, cluster a5abae239280891e for
# {m1,m2}, ddf4329fc855aa38 for {m1,m2,m3}): the hex in docs/RAFTHTTP.md can be found again.
set -uo pipefail

OUT=${OUT:-/tmp/rafthttp-captures}
export ETCDCTL_API=3
mkdir -p "$OUT"
command -v etcd >/dev/null || { echo "etcd missing: run scripts/deps.sh" >&2; exit 1; }
command -v tcpdump >/dev/null || { echo "tcpdump missing: apt-get install tcpdump" >&2; exit 1; }
etcd --version > "$OUT/etcd-version.txt"

T0=0
DIR=""
TCPDUMP_PID=""
declare -A PIDS

now() { python3 -c "import time; print(f'{time.time()-$T0:.3f}')"; }
step() { echo "$(now) $*" | tee -a "$DIR/steps.log"; }
curl_ep() { echo "http://127.0.0.1:4100$1"; }
peer_ep() { echo "http://127.0.0.1:4110$1"; }
ctl() { local i=$1; shift; etcdctl --dial-timeout=3s --command-timeout=10s --endpoints "$(curl_ep "$i")" "$@"; }

begin() { # begin <scenario>: fresh folder, start the capture
  DIR="$OUT/$1"; rm -rf "$DIR"; mkdir -p "$DIR"; PIDS=()
  for p in $(seq 41001 41009) $(seq 41101 41109); do
    if ss -ltn "sport = :$p" | grep -q LISTEN; then echo "port $p busy" >&2; exit 1; fi
  done
  tcpdump -i lo -s 0 -U -w "$DIR/cap.pcap" 'tcp portrange 41101-41109' >"$DIR/tcpdump.log" 2>&1 &
  TCPDUMP_PID=$!
  sleep 1
  T0=$(python3 -c 'import time; print(time.time())')
  step "begin $1 (capture t=0 is about this line)"
}

end() {
  for n in "${!PIDS[@]}"; do kill "${PIDS[$n]}" 2>/dev/null; done
  sleep 2
  for n in "${!PIDS[@]}"; do kill -9 "${PIDS[$n]}" 2>/dev/null; wait "${PIDS[$n]}" 2>/dev/null; done
  sleep 1; kill "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2>/dev/null
  step "end"
}

# start <n> <initial-cluster> <state> [extra flags...]: member m<n> on client 4100n, peer 4110n
start() {
  local i=$1 ic=$2 state=$3; shift 3
  etcd --name "m$i" --data-dir "$DIR/d$i" --logger zap --log-outputs stderr \
    --listen-client-urls "$(curl_ep "$i")" --advertise-client-urls "$(curl_ep "$i")" \
    --listen-peer-urls "$(peer_ep "$i")" --initial-advertise-peer-urls "$(peer_ep "$i")" \
    --initial-cluster "$ic" --initial-cluster-token "${TOKEN:-tok}" --initial-cluster-state "$state" \
    "$@" >>"$DIR/m$i.log" 2>&1 &
  PIDS[m$i]=$!
  step "started m$i pid ${PIDS[m$i]} state=$state $*"
}
stop() { kill "${PIDS[m$1]}"; wait "${PIDS[m$1]}" 2>/dev/null; unset "PIDS[m$1]"; step "stopped m$1 (SIGTERM)"; }
kill9() { kill -9 "${PIDS[m$1]}"; wait "${PIDS[m$1]}" 2>/dev/null; unset "PIDS[m$1]"; step "killed m$1 (SIGKILL)"; }
ic() { local s="" i; for i in "$@"; do s="${s:+$s,}m$i=$(peer_ep "$i")"; done; echo "$s"; }
wait_healthy() { local i; for i in "$@"; do for _ in $(seq 60); do ctl "$i" endpoint health >/dev/null 2>&1 && break; sleep 0.5; done; done; step "healthy: $*"; }
leader_idx() { # the N of the leader, asked through member $1
  ctl "$1" endpoint status --cluster -w json | python3 -c "import json,sys; d=json.load(sys.stdin); print([x['Endpoint'][-1] for x in d if x['Status']['leader']==x['Status']['header']['member_id']][0])"; }
save_members() { # name=hex id lines, for the decoder's --ids
  ctl "$1" member list -w json | python3 -c "import json,sys; [print(f\"{m.get('name') or 'unstarted'}={m['ID']:x}\") for m in json.load(sys.stdin)['members']]" >"$DIR/members.txt"
  ctl "$1" member list -w table >>"$DIR/steps.log" 2>&1; }
puts() { # puts <n> <count> <prefix>: fast writes through the JSON gateway of member n (keep-alive)
  python3 - "$1" "$2" "$3" <<'EOF'
import sys, http.client, json, base64
c = http.client.HTTPConnection("127.0.0.1", 41000 + int(sys.argv[1]), timeout=10)
for i in range(int(sys.argv[2])):
    k = base64.b64encode(f"{sys.argv[3]}{i:06d}".encode()).decode(); v = base64.b64encode(b"v" * 64).decode()
    c.request("POST", "/v3/kv/put", json.dumps({"key": k, "value": v})); r = c.getresponse(); r.read()
    assert r.status == 200, r.status
EOF
  step "wrote $2 keys $3* through m$1"
}

# ---------------------------------------------------------------- scenarios
bootstrap() { # 2 then idle: stream setup, elections, attributes/version entries, heartbeats, a put
  begin bootstrap
  start 1 "$(ic 1 2)" new; start 2 "$(ic 1 2)" new
  wait_healthy 1 2; save_members 1
  ctl 1 put foo bar >/dev/null; step "put foo bar via m1"
  ctl 2 put foo2 bar2 >/dev/null; step "put foo2 bar2 via m2"
  sleep 12; step "idle 12s done"
  end
}

leases() { # lease grant / keep-alive / timetolive / revoke sent to the follower
  begin leases
  start 1 "$(ic 1 2)" new; start 2 "$(ic 1 2)" new
  wait_healthy 1 2; save_members 1
  local st l f lid
  st=$(ctl 1 endpoint status --cluster -w json)
  echo "$st" > "$DIR/status.json"
  l=$(python3 -c "import json,sys; d=json.load(sys.stdin); print([x['Endpoint'][-1] for x in d if x['Status']['leader']==x['Status']['header']['member_id']][0])" <<<"$st")
  f=$(( l == 1 ? 2 : 1 )); step "leader m$l follower m$f"
  lid=$(ctl $f lease grant 60 | awk '{print $2}'); step "lease grant 60 via follower m$f -> $lid"
  ctl $f put --lease="$lid" lk lv >/dev/null; step "put lk with lease via m$f"
  sleep 1
  ctl $f lease keep-alive --once "$lid" >>"$DIR/steps.log"; step "lease keep-alive --once via follower m$f"
  ctl $f lease timetolive "$lid" >>"$DIR/steps.log"; step "lease timetolive via follower m$f"
  ctl $f lease timetolive --keys "$lid" >>"$DIR/steps.log"; step "lease timetolive --keys via follower m$f"
  ctl $f lease timetolive 1234 >>"$DIR/steps.log" 2>&1; step "lease timetolive of an unknown lease via m$f"
  ctl $f lease keep-alive --once 1234 >>"$DIR/steps.log" 2>&1; step "keep-alive --once of an unknown lease via m$f"
  ctl $f lease revoke "$lid" >>"$DIR/steps.log"; step "lease revoke via follower m$f"
  timeout 4 etcdctl --endpoints "$(curl_ep $f)" lease keep-alive "$(ctl $f lease grant 30 | awk '{print $2}')" >>"$DIR/steps.log" 2>&1; step "4s of keep-alive stream via m$f"
  end
}

membership() { # 3 members; add; learner add + promote (via a follower: /members/promote); remove; move-leader
  begin membership
  start 1 "$(ic 1 2 3)" new; start 2 "$(ic 1 2 3)" new; start 3 "$(ic 1 2 3)" new
  wait_healthy 1 2 3; save_members 1
  ctl 1 put a 1 >/dev/null
  sleep 6 # etcd refuses reconfiguration ("etcdserver: unhealthy cluster") until every member has been connected 5s
  ctl 1 member add m4 --peer-urls="$(peer_ep 4)" >"$DIR/add4.txt"; step "member add m4"
  start 4 "$(ic 1 2 3 4)" existing; wait_healthy 4; sleep 6
  ctl 1 member add m5 --learner --peer-urls="$(peer_ep 5)" >"$DIR/add5.txt"; step "member add m5 --learner"
  start 5 "$(ic 1 2 3 4 5)" existing; sleep 8; step "m5 started (learner)"
  save_members 1
  local id5 id4 id1 id2
  id5=$(awk -F= '$1=="m5"{print $2}' "$DIR/members.txt"); id4=$(awk -F= '$1=="m4"{print $2}' "$DIR/members.txt")
  id1=$(awk -F= '$1=="m1"{print $2}' "$DIR/members.txt"); id2=$(awk -F= '$1=="m2"{print $2}' "$DIR/members.txt")
  # promote through every member: the leader applies it, a follower forwards it over /members/promote/<id>
  local lead fol
  lead=$(leader_idx 1); fol=$(( lead == 1 ? 2 : 1 ))
  ctl $fol member promote "$id5" >>"$DIR/steps.log" 2>&1; step "member promote m5 via follower m$fol (leader m$lead)"
  ctl $fol member promote "$id5" >>"$DIR/steps.log" 2>&1; step "member promote m5 again (already a voter) via follower m$fol"
  ctl $fol member promote "$id4" >>"$DIR/steps.log" 2>&1; step "member promote m4 (a voter) via follower m$fol"
  ctl 1 member remove "$id4" >>"$DIR/steps.log" 2>&1; step "member remove m4"
  sleep 3; unset "PIDS[m4]"
  ctl 1 member update "$id2" --peer-urls="$(peer_ep 2)" >>"$DIR/steps.log" 2>&1; step "member update m2 (same URL)"
  # move the leader to each member in turn (needs the leader's endpoint)
  for target in "$id1" "$id2" "$id5"; do
    lead=$(leader_idx 1)
    ctl "$lead" move-leader "$target" >>"$DIR/steps.log" 2>&1; step "move-leader to $target via m$lead"
    sleep 1
  done
  save_members 1
  sleep 2
  end
}

snapshot() { # follower stopped while the leader writes past --snapshot-count + 5000 kept entries
  begin snapshot
  local f="--snapshot-count 100"
  start 1 "$(ic 1 2 3)" new $f; start 2 "$(ic 1 2 3)" new $f; start 3 "$(ic 1 2 3)" new $f
  wait_healthy 1 2 3; save_members 1
  stop 3
  puts 1 6000 k
  start 3 "$(ic 1 2 3)" new $f; wait_healthy 3
  sleep 5
  ctl 3 get k005999 >>"$DIR/steps.log"; step "m3 has the last key"
  end
}

restart() { # kill -9 of a follower and of the leader, restart: stream reconnects, pipeline use
  begin restart
  start 1 "$(ic 1 2 3)" new; start 2 "$(ic 1 2 3)" new; start 3 "$(ic 1 2 3)" new
  wait_healthy 1 2 3; save_members 1
  kill9 3; puts 1 50 x; sleep 1
  start 3 "$(ic 1 2 3)" new; wait_healthy 3; sleep 3
  kill9 1; sleep 4; puts 2 20 y
  start 1 "$(ic 1 2 3)" new; wait_healthy 1; sleep 4
  end
}

wrongcluster() { # a member of another cluster (other token) dials our members; then the reverse
  begin wrongcluster
  start 1 "$(ic 1 2)" new; start 2 "$(ic 1 2)" new; wait_healthy 1 2; save_members 1
  # m3 believes in a cluster {m1,m2,m3} with another token: other member IDs and cluster ID
  TOKEN=other start 3 "$(ic 1 2 3)" new
  sleep 8
  stop 3
  end
}

removed() { # a removed member comes back and talks to the cluster
  begin removed
  start 1 "$(ic 1 2 3)" new; start 2 "$(ic 1 2 3)" new; start 3 "$(ic 1 2 3)" new
  wait_healthy 1 2 3; save_members 1
  local id3; id3=$(awk -F= '$1=="m3"{print $2}' "$DIR/members.txt")
  sleep 6; stop 3
  ctl 1 member remove "$id3" >>"$DIR/steps.log"; step "member remove m3 (stopped)"
  start 3 "$(ic 1 2 3)" new; sleep 6
  kill9 3 2>/dev/null
  end
}

probes() { # curl against a running member's peer URL
  begin probes
  start 1 "$(ic 1 2)" new; start 2 "$(ic 1 2)" new; wait_healthy 1 2; save_members 1
  local P CID id1 id2 H n=0
  local lead fol; lead=$(leader_idx 1); fol=$(( lead == 1 ? 2 : 1 )); P=$(peer_ep "$lead") # probe the leader
  id1=$(awk -F= -v m="m$lead" '$1==m{print $2}' "$DIR/members.txt"); id2=$(awk -F= -v m="m$fol" '$1==m{print $2}' "$DIR/members.txt")
  CID=$(curl -s -D - -o /dev/null "$P/members" | awk -F': ' 'tolower($1)=="x-etcd-cluster-id"{print $2}' | tr -d '\r')
  echo "leader=m$lead cid=$CID leaderid=$id1 followerid=$id2" >"$DIR/ids.txt"
  mkdir -p "$DIR/probes"
  H=(-H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-Server-Version: 3.4.23" -H "X-Min-Cluster-Version: 3.0.0" -H "X-PeerURLs: $(peer_ep "$fol")")
  p() { # p <label> curl-args...
    n=$((n+1)); local f; f=$(printf '%s/probes/%02d-%s.txt' "$DIR" "$n" "$1"); shift
    { echo "\$ curl $*"; curl -sS -i --max-time "${MAXT:-5}" "$@"; local rc=$?; echo; echo "[curl exit $rc]"; } >"$f" 2>&1
    step "probe $(basename "$f")"
  }
  ctl 1 put pk pv >/dev/null
  p members-get "$P/members"
  p members-get-wrongcid -H "X-Etcd-Cluster-ID: 1234" "$P/members"
  p members-post -X POST "$P/members"
  p members-head -I "$P/members"
  p version-get "$P/version"
  p version-post -X POST "$P/version"
  p probing-get "$P/raft/probing"
  p probing-post -X POST "$P/raft/probing"
  p hashkv-get "$P/members/hashkv"
  p hashkv-post-rev0 -X POST -d '{"revision":0}' "$P/members/hashkv"
  p hashkv-post-rev2 -X POST -d '{"revision":2}' "$P/members/hashkv"
  p hashkv-post-future -X POST -d '{"revision":99999}' "$P/members/hashkv"
  p hashkv-post-bad -X POST -d 'garbage' "$P/members/hashkv"
  p hashkv-post-empty -X POST "$P/members/hashkv"
  p promote-get "$P/members/promote/$id2"
  p promote-post-voter -X POST "$P/members/promote/$id2"
  p promote-post-unknown -X POST "$P/members/promote/1234"
  p promote-post-badid -X POST "$P/members/promote/zz"
  p leases-get "$P/leases"
  p leases-post-bad -X POST --data-binary 'garbage' "$P/leases"
  # LeaseKeepAliveRequest{ID=0x1234} (field 1 varint) and LeaseInternalRequest{LeaseTimeToLiveRequest{ID=0x1234}}
  printf '\x08\xb4\x24' >"$DIR/ka.bin"; printf '\x0a\x03\x08\xb4\x24' >"$DIR/ttl.bin"
  p leases-post-unknown -X POST -H "Content-Type: application/protobuf" --data-binary @"$DIR/ka.bin" "$P/leases"
  p leases-internal-get "$P/leases/internal"
  p leases-internal-post-unknown -X POST -H "Content-Type: application/protobuf" --data-binary @"$DIR/ttl.bin" "$P/leases/internal"
  p leases-internal-post-bad -X POST --data-binary 'garbage' "$P/leases/internal"
  local lid; lid=$(ctl 1 lease grant 100 | awk '{print $2}')
  python3 -c "
import sys
def v(x):
    o=b''
    while x>=0x80: o+=bytes([x&0x7f|0x80]); x>>=7
    return o+bytes([x])
i=int('$lid',16)
open('$DIR/ka2.bin','wb').write(b'\x08'+v(i))
inner=b'\x08'+v(i)+b'\x10\x01'
open('$DIR/ttl2.bin','wb').write(b'\x0a'+v(len(inner))+inner)"
  p leases-post-granted -X POST -H "Content-Type: application/protobuf" --data-binary @"$DIR/ka2.bin" "$P/leases"
  p leases-internal-post-granted -X POST -H "Content-Type: application/protobuf" --data-binary @"$DIR/ttl2.bin" "$P/leases/internal"
  p leases-post-to-follower -X POST -H "Content-Type: application/protobuf" --data-binary @"$DIR/ka2.bin" "$(peer_ep "$fol")/leases"
  p downgrade-enabled "$P/downgrade/enabled"
  p root "$P/"
  p unknown "$P/nonexistent"
  p raft-unknown "$P/raft/unknown"
  p health "$P/health"
  p metrics-head -o /dev/null -w '%{http_code}\n' "$P/metrics"
  # /raft (pipeline): a MsgHeartbeatResp from m2 to m1 at term 0 (harmless), with and without headers
  python3 -c "
def v(x):
    o=b''
    while x>=0x80: o+=bytes([x&0x7f|0x80]); x>>=7
    return o+bytes([x])
to=int('$id1',16); fr=int('$id2',16)
m=b'\x08\x09\x10'+v(to)+b'\x18'+v(fr)+b'\x20\x00\x28\x00\x30\x00\x40\x00\x50\x00\x58\x00'
open('$DIR/hbresp.bin','wb').write(m)"
  p raft-get "${H[@]}" "$P/raft"
  p raft-post-noheaders -X POST --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-ok -X POST "${H[@]}" -H "X-Raft-To: $id1" -H "Content-Type: application/protobuf" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-wrongcid -X POST -H "X-Etcd-Cluster-ID: 1234" -H "X-Server-From: $id2" -H "X-Server-Version: 3.4.23" -H "Content-Type: application/protobuf" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-garbage -X POST "${H[@]}" -H "Content-Type: application/protobuf" --data-binary 'garbage!' "$P/raft"
  p raft-post-empty -X POST "${H[@]}" -H "Content-Type: application/protobuf" "$P/raft"
  p raft-post-oldversion -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-Server-Version: 2.0.0" -H "X-Min-Cluster-Version: 2.0.0" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-futureminversion -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-Server-Version: 9.9.0" -H "X-Min-Cluster-Version: 9.9.0" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-nominversion -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-Server-Version: 3.4.23" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-noversion -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-3.5 -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-Server-Version: 3.5.9" -H "X-Min-Cluster-Version: 3.0.0" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-post-big -X POST "${H[@]}" --data-binary @<(head -c 600000 /dev/zero) "$P/raft"
  # streams (each answer is held open: curl stops after 3s)
  MAXT=3 p stream-message-noheaders "$P/raft/stream/message/$id2"
  MAXT=3 p stream-message-wrongcid -H "X-Etcd-Cluster-ID: 1234" -H "X-Server-From: $id2" -H "X-Server-Version: 3.4.23" "$P/raft/stream/message/$id2"
  MAXT=3 p stream-message-unknownfrom "${H[@]}" -H "X-Raft-To: $id1" "$P/raft/stream/message/1234"
  MAXT=3 p stream-message-wrongto "${H[@]}" -H "X-Raft-To: 1234" "$P/raft/stream/message/$id2"
  MAXT=3 p stream-message-badid "${H[@]}" -H "X-Raft-To: $id1" "$P/raft/stream/message/zz"
  MAXT=3 p stream-message-oldversion -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-Server-Version: 2.0.0" -H "X-Raft-To: $id1" "$P/raft/stream/message/$id2"
  MAXT=3 p stream-message-futureminversion -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-Server-Version: 9.9.0" -H "X-Min-Cluster-Version: 9.9.0" -H "X-Raft-To: $id1" "$P/raft/stream/message/$id2"
  MAXT=3 p stream-unknowntype "${H[@]}" -H "X-Raft-To: $id1" "$P/raft/stream/foo/$id2"
  MAXT=3 p stream-post -X POST "${H[@]}" -H "X-Raft-To: $id1" "$P/raft/stream/message/$id2"
  MAXT=3 p stream-msgappv1-path "${H[@]}" -H "X-Raft-To: $id1" "$P/raft/stream/$id2"
  MAXT=4 p stream-message-ok "${H[@]}" -H "X-Raft-To: $id1" -o "$DIR/probes/stream-message-ok.bin" "$P/raft/stream/message/$id2"
  sleep 3
  MAXT=4 p stream-msgapp-ok "${H[@]}" -H "X-Raft-To: $id1" -o "$DIR/probes/stream-msgapp-ok.bin" "$P/raft/stream/msgapp/$id2"
  sleep 3
  p snapshot-get "${H[@]}" "$P/raft/snapshot"
  p snapshot-post-garbage -X POST "${H[@]}" -H "X-Raft-To: $id1" --data-binary 'garbage!' "$P/raft/snapshot"
  p snapshot-post-wrongcid -X POST -H "X-Etcd-Cluster-ID: 1234" -H "X-Server-From: $id2" -H "X-Server-Version: 3.4.23" --data-binary 'garbage!' "$P/raft/snapshot"
  # a MsgHeartbeatResp framed as a snapshot message (not MsgSnap)
  python3 -c "
m=open('$DIR/hbresp.bin','rb').read(); open('$DIR/snapnotsnap.bin','wb').write(len(m).to_bytes(8,'big')+m)"
  p snapshot-post-notsnap -X POST "${H[@]}" -H "X-Raft-To: $id1" --data-binary @"$DIR/snapnotsnap.bin" "$P/raft/snapshot"
  sleep 2
  end
}

corrupt() { # --experimental-initial-corrupt-check and periodic check: /members/hashkv between members
  begin corrupt
  local f="--experimental-initial-corrupt-check=true --experimental-corrupt-check-time=5s"
  start 1 "$(ic 1 2)" new $f; start 2 "$(ic 1 2)" new $f; wait_healthy 1 2; save_members 1
  ctl 1 put a 1 >/dev/null; ctl 1 put a 2 >/dev/null; ctl 1 compact 2 >/dev/null 2>&1
  sleep 7
  stop 2; start 2 "$(ic 1 2)" new $f; wait_healthy 2; sleep 6
  end
}

probes2() { # more curl probes: hashkv as GET with a body, promote by decimal ID, version matrix,
            # removed/unknown senders, an oversized /raft body
  begin probes2
  start 1 "$(ic 1 2)" new; start 2 "$(ic 1 2)" new; wait_healthy 1 2; save_members 1
  local lead P CID id1 id2 idl idx n=0 H
  lead=$(leader_idx 1); P=$(peer_ep "$lead")
  id1=$(awk -F= -v m="m$lead" '$1==m{print $2}' "$DIR/members.txt")
  id2=$(awk -F= -v m="m$(( lead == 1 ? 2 : 1 ))" '$1==m{print $2}' "$DIR/members.txt")
  CID=$(curl -s -D - -o /dev/null "$P/members" | awk -F': ' 'tolower($1)=="x-etcd-cluster-id"{print $2}' | tr -d '\r')
  echo "leader=m$lead cid=$CID leaderid=$id1 followerid=$id2" >"$DIR/ids.txt"
  mkdir -p "$DIR/probes"
  p() { n=$((n+1)); local f; f=$(printf '%s/probes/%02d-%s.txt' "$DIR" "$n" "$1"); shift
    { echo "\$ curl $*"; curl -sS -i --max-time "${MAXT:-5}" "$@"; local rc=$?; echo; echo "[curl exit $rc]"; } >"$f" 2>&1; step "probe $(basename "$f")"; }
  ctl 1 put a 1 >/dev/null; ctl 1 put a 2 >/dev/null; ctl 1 put b 1 >/dev/null; ctl 1 compact 3 >/dev/null
  p hashkv-get-rev0 -X GET -H "Content-Type: application/json" -d '{"revision":0}' "$P/members/hashkv"
  p hashkv-get-rev4 -X GET -d '{"revision":4}' "$P/members/hashkv"
  p hashkv-get-compacted -X GET -d '{"revision":2}' "$P/members/hashkv"
  p hashkv-get-future -X GET -d '{"revision":99999}' "$P/members/hashkv"
  p hashkv-get-garbage -X GET -d 'garbage' "$P/members/hashkv"
  p hashkv-get-empty-object -X GET -d '{}' "$P/members/hashkv"
  p hashkv-get-follower -X GET -d '{"revision":0}' "$(peer_ep $(( lead == 1 ? 2 : 1 )))/members/hashkv"
  sleep 6 # reconfiguration needs every member connected for 5s
  idl=$(ctl 1 member add m3 --learner --peer-urls="$(peer_ep 3)" -w json | python3 -c "import json,sys; print(json.load(sys.stdin)['member']['ID'])")
  step "member add m3 --learner (never started): id (decimal) $idl"
  p promote-learner-notready -X POST "$P/members/promote/$idl"
  ctl 1 member promote "$(printf '%x' "$idl")" >>"$DIR/steps.log" 2>&1; step "etcdctl member promote of the unstarted learner"
  p promote-voter-decimal -X POST "$P/members/promote/$(python3 -c "print(int('$id2',16))")"
  p promote-hex-of-learner -X POST "$P/members/promote/$(printf '%x' "$idl")"
  ctl 1 member remove "$(printf '%x' "$idl")" >>"$DIR/steps.log" 2>&1; step "member remove of the learner (now a removed ID)"
  idx=$(printf '%x' "$idl")
  python3 -c "
def v(x):
    o=b''
    while x>=0x80: o+=bytes([x&0x7f|0x80]); x>>=7
    return o+bytes([x])
to=int('$id1',16); fr=int('$id2',16)
base=b'\x08\x09\x10'+v(to)+b'\x18'+v(fr)+b'\x20\x00\x28\x00\x30\x00\x40\x00\x50\x00\x58\x00'
open('$DIR/hbresp.bin','wb').write(base)
open('$DIR/hbresp-60k.bin','wb').write(base+b'\x62'+v(60000)+b'x'*60000)
open('$DIR/hbresp-600k.bin','wb').write(base+b'\x62'+v(600000)+b'x'*600000)
open('$DIR/hbresp-fromremoved.bin','wb').write(b'\x08\x09\x10'+v(to)+b'\x18'+v(int('$idx',16))+b'\x20\x00\x28\x00\x30\x00\x40\x00\x50\x00\x58\x00')"
  H=(-H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" -H "X-PeerURLs: http://127.0.0.1:41109")
  for sv in 3.0.0 3.3.0 3.4.0 3.5.0 3.6.0 4.0.0 2.3.8; do
    p "raft-serverversion-$sv" -X POST "${H[@]}" -H "X-Server-Version: $sv" -H "X-Min-Cluster-Version: 3.0.0" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  done
  for mv in 2.3.0 3.4.0 3.4.23 3.4.24 3.5.0; do
    p "raft-minclusterversion-$mv" -X POST "${H[@]}" -H "X-Server-Version: 3.5.0" -H "X-Min-Cluster-Version: $mv" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  done
  p raft-60k -X POST "${H[@]}" -H "X-Server-Version: 3.4.23" -H "X-Min-Cluster-Version: 3.0.0" --data-binary @"$DIR/hbresp-60k.bin" "$P/raft"
  p raft-600k -X POST "${H[@]}" -H "X-Server-Version: 3.4.23" -H "X-Min-Cluster-Version: 3.0.0" --data-binary @"$DIR/hbresp-600k.bin" "$P/raft"
  p raft-from-unknown -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: 1234" -H "X-Server-Version: 3.4.23" -H "X-Min-Cluster-Version: 3.0.0" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-from-removed -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $idx" -H "X-Server-Version: 3.4.23" -H "X-Min-Cluster-Version: 3.0.0" --data-binary @"$DIR/hbresp-fromremoved.bin" "$P/raft"
  p raft-wrong-to -X POST "${H[@]}" -H "X-Server-Version: 3.4.23" -H "X-Min-Cluster-Version: 3.0.0" -H "X-Raft-To: 1234" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  p raft-no-from -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-Version: 3.4.23" -H "X-Min-Cluster-Version: 3.0.0" --data-binary @"$DIR/hbresp.bin" "$P/raft"
  MAXT=2 p stream-from-removed -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $idx" -H "X-Server-Version: 3.4.23" -H "X-Raft-To: $id1" "$P/raft/stream/message/$idx"
  MAXT=2 p stream-v3.0.0 "${H[@]}" -H "X-Server-Version: 3.0.0" -H "X-Raft-To: $id1" "$P/raft/stream/foo/$id2"
  MAXT=2 p stream-noclusterid -H "X-Server-From: $id2" -H "X-Server-Version: 3.4.23" -H "X-Raft-To: $id1" "$P/raft/stream/message/$id2"
  p snapshot-post-from-removed -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $idx" -H "X-Server-Version: 3.4.23" --data-binary 'garbage!' "$P/raft/snapshot"
  p snapshot-post-noversion -X POST -H "X-Etcd-Cluster-ID: $CID" -H "X-Server-From: $id2" --data-binary 'garbage!' "$P/raft/snapshot"
  python3 -c "open('$DIR/shortsnap.bin','wb').write((1000).to_bytes(8,'big')+b'x'*10)"
  p snapshot-post-truncated -X POST "${H[@]}" -H "X-Server-Version: 3.4.23" --data-binary @"$DIR/shortsnap.bin" "$P/raft/snapshot"
  p members-get-follower "$(peer_ep $(( lead == 1 ? 2 : 1 )))/members"
  p version-get-follower "$(peer_ep $(( lead == 1 ? 2 : 1 )))/version"
  p members-hashkv-head -I "$P/members/hashkv"
  p leases-internal-empty -X POST -H "Content-Type: application/protobuf" "$P/leases/internal"
  p leases-empty -X POST -H "Content-Type: application/protobuf" "$P/leases"
  sleep 2
  end
}

multiurl() { # a member advertising two peer URLs: how X-PeerURLs and /members list them
  begin multiurl
  local ic2="m1=$(peer_ep 1),m1=http://127.0.0.1:41107,m2=$(peer_ep 2)"
  etcd --name m1 --data-dir "$DIR/d1" --logger zap --log-outputs stderr \
    --listen-client-urls "$(curl_ep 1)" --advertise-client-urls "$(curl_ep 1),http://127.0.0.1:41007" \
    --listen-peer-urls "$(peer_ep 1),http://127.0.0.1:41107" --initial-advertise-peer-urls "$(peer_ep 1),http://127.0.0.1:41107" \
    --initial-cluster "$ic2" --initial-cluster-token tok --initial-cluster-state new >>"$DIR/m1.log" 2>&1 &
  PIDS[m1]=$!; step "started m1 with two peer URLs"
  start 2 "$ic2" new; wait_healthy 1 2; save_members 1
  curl -s "$(peer_ep 2)/members" >"$DIR/members.json"; sleep 3
  end
}

fakepeer() { # a 3.4 member joins (state existing) a "cluster" served by a fake peer claiming other versions
  local cv
  for cv in 3.5.0 3.4.0 not_decided 3.3.0; do
    begin "fakepeer-$cv"
    python3 - "$cv" >"$DIR/fake.log" 2>&1 <<'PYEOF' &
import sys, json, http.server
cv = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, code, body, ctype="application/json", extra=()):
        b = body.encode()
        self.send_response(code); self.send_header("Content-Type", ctype); self.send_header("Content-Length", str(len(b)))
        for k, v in extra: self.send_header(k, v)
        self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        if self.path == "/members":
            self.reply(200, json.dumps([{"id": 1, "peerURLs": ["http://127.0.0.1:41109"], "name": "fake", "clientURLs": ["http://127.0.0.1:41009"]},
                                        {"id": 2, "peerURLs": ["http://127.0.0.1:41101"]}]), extra=[("X-Etcd-Cluster-Id", "1234")])
        elif self.path == "/version":
            self.reply(200, json.dumps({"etcdserver": "3.5.9" if cv != "3.3.0" else "3.3.0", "etcdcluster": cv}))
        else:
            self.reply(404, "404 page not found\n", "text/plain; charset=utf-8")
    def log_message(self, *a): sys.stderr.write((a[0] % a[1:]) + "\n")
http.server.ThreadingHTTPServer(("127.0.0.1", 41109), H).serve_forever()
PYEOF
    PIDS[fake]=$!; sleep 1
    start 1 "fake=http://127.0.0.1:41109,m1=$(peer_ep 1)" existing
    sleep 6
    step "m1 log tail: $(grep -v '"level":"info"' "$DIR/m1.log" | tail -2 | cut -c1-400)"
    end
  done
}

fakestream() { # what a 3.4 member does with a silent stream, a garbage stream and a 200 without headers
  begin fakestream
  python3 - >"$DIR/fake.log" 2>&1 <<'PYEOF' &
import sys, json, http.server, time, socketserver
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, code, body, ctype="application/json", extra=()):
        b = body.encode()
        self.send_response(code); self.send_header("Content-Type", ctype); self.send_header("Content-Length", str(len(b)))
        for k, v in extra: self.send_header(k, v)
        self.end_headers(); self.wfile.write(b)
    def stream(self, first):
        self.send_response(200); self.send_header("X-Etcd-Cluster-Id", "1234"); self.send_header("X-Server-Version", "3.4.23")
        self.send_header("Transfer-Encoding", "chunked"); self.end_headers(); self.wfile.flush()
        t0 = time.time()
        try:
            if first: self.wfile.write(b"%x\r\n%s\r\n" % (len(first), first)); self.wfile.flush()
            while time.time() - t0 < 30:
                if self.rfile.peek if False else None: pass
                time.sleep(0.2)
                self.wfile.write(b""); self.wfile.flush()
        except Exception as e:
            pass
        sys.stderr.write(f"stream {self.path} ended after {time.time()-t0:.2f}s\n")
    def do_GET(self):
        if self.path == "/members":
            self.reply(200, json.dumps([{"id": 1, "peerURLs": ["http://127.0.0.1:41109"], "name": "fake", "clientURLs": ["http://127.0.0.1:41009"]},
                                        {"id": 2, "peerURLs": ["http://127.0.0.1:41101"]}]), extra=[("X-Etcd-Cluster-Id", "1234")])
        elif self.path == "/version":
            self.reply(200, json.dumps({"etcdserver": "3.4.23", "etcdcluster": "3.4.0"}))
        elif self.path == "/raft/probing":
            self.reply(200, json.dumps({"OK": True, "Now": "2026-01-01T00:00:00Z"}), "text/plain; charset=utf-8")
        elif self.path.startswith("/raft/stream/message/"):
            self.stream(b"")            # silent after the header
        elif self.path.startswith("/raft/stream/msgapp/"):
            self.stream(b"\x07garbage")  # an unknown msgappv2 type byte
        else:
            self.reply(404, "404 page not found\n", "text/plain; charset=utf-8")
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0")); self.rfile.read(n)
        self.send_response(204); self.send_header("X-Etcd-Cluster-Id", "1234"); self.end_headers()
    def log_message(self, *a): sys.stderr.write(f"{time.time():.3f} " + (a[0] % a[1:]) + "\n")
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
S(("127.0.0.1", 41109), H).serve_forever()
PYEOF
  PIDS[fake]=$!; sleep 1
  start 1 "fake=http://127.0.0.1:41109,m1=$(peer_ep 1)" existing
  sleep 20
  end
}

v2snap() { # the v2 store JSON with a learner and a removed member: read from m1's newest .snap file
  begin v2snap
  start 1 "$(ic 1 2)" new --snapshot-count 100; start 2 "$(ic 1 2)" new --snapshot-count 100
  wait_healthy 1 2; sleep 6
  ctl 1 member add m3 --learner --peer-urls="$(peer_ep 3)" >>"$DIR/steps.log"; step "member add m3 --learner (not started)"
  sleep 6
  local id4
  id4=$(ctl 1 member add m4 --peer-urls="$(peer_ep 4)" -w json | python3 -c "import json,sys; print('%x' % json.load(sys.stdin)['member']['ID'])")
  step "member add m4 (not started): $id4"
  ctl 1 member remove "$id4" >>"$DIR/steps.log"; step "member remove m4"
  puts 1 150 s; sleep 2; save_members 1
  python3 - "$DIR/d1/member/snap" >"$DIR/v2store.json" <<'PYEOF'
import sys, os
def varint(b, i):
    r = s = 0
    while True:
        x = b[i]; i += 1; r |= (x & 0x7f) << s; s += 7
        if x < 0x80: return r, i
def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i)
        if k & 7 == 0: v, i = varint(b, i)
        else: n, i = varint(b, i); v = b[i:i+n]; i += n
        yield k >> 3, v
d = sys.argv[1]; f = sorted(x for x in os.listdir(d) if x.endswith(".snap"))[-1]
snap = dict(fields(open(os.path.join(d, f), "rb").read()))[2]       # snappb.Snapshot.data
print(dict(fields(snap))[1].decode())                                  # raftpb.Snapshot.data
PYEOF
  step "v2 store of $(ls "$DIR/d1/member/snap" | grep snap$ | tail -1) -> v2store.json"
  end
}

# ---------------------------------------------------------------- the decoder
# Written next to the captures: $OUT/flows.py (TCP reassembly through tshark) and $OUT/rh.py (HTTP
# and rafthttp decoding; raft entry payloads through protoc and proto/proto). Needs tshark and
# protoc (apt-get install tshark protobuf-compiler).
#   python3 $OUT/rh.py $OUT/bootstrap/cap.pcap --ids "$(paste -sd, $OUT/bootstrap/members.txt)" [--skip-probing] [--max-frames N] [--only CONN,...]
#   python3 $OUT/flows.py $OUT/bootstrap/cap.pcap list|dump CONN|raw CONN c2s|s2c FILE
write_decoder() {
  cat >"$OUT/flows.py" <<'PYEOF'
#!/usr/bin/env python3
"""Reassemble TCP flows from a pcap (via tshark) and print them.

usage: flows.py PCAP list                 -> one line per TCP connection
       flows.py PCAP dump STREAM [N]      -> both directions, segment by segment (hex+ascii), N bytes max per segment
       flows.py PCAP raw STREAM DIR OUT   -> write the reassembled bytes of one direction (c2s|s2c) to OUT
"""
import subprocess, sys, collections

def load(pcap):
    out = subprocess.run(["tshark", "-r", pcap, "-o", "tcp.desegment_tcp_streams:FALSE", "-T", "fields",
                          "-e", "tcp.stream", "-e", "frame.time_relative", "-e", "tcp.srcport", "-e", "tcp.dstport",
                          "-e", "tcp.flags.str", "-e", "tcp.seq_raw", "-e", "tcp.payload"],
                         capture_output=True, text=True).stdout
    flows = collections.OrderedDict()
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 7: continue
        st, t, sp, dp, flags, seq, pl = int(f[0]), float(f[1]), int(f[2]), int(f[3]), f[4], int(f[5]), f[6]
        fl = flows.setdefault(st, {"client": None, "server": None, "segs": [], "start": t, "end": t, "flags": []})
        if fl["client"] is None:
            fl["client"], fl["server"] = sp, dp  # first packet is the SYN from the client
        fl["end"] = t
        d = "c2s" if sp == fl["client"] else "s2c"
        if "F" in flags or "R" in flags:
            fl["flags"].append((t, d, "FIN" if "F" in flags else "RST"))
        if pl:
            fl["segs"].append((t, d, seq, bytes.fromhex(pl.replace(":", ""))))
    # drop retransmissions (same seq seen twice)
    for fl in flows.values():
        seen = set(); segs = []
        for s in fl["segs"]:
            k = (s[1], s[2])
            if k in seen: continue
            seen.add(k); segs.append(s)
        fl["segs"] = segs
    return flows

def data(fl, d):
    return b"".join(s[3] for s in fl["segs"] if s[1] == d)

def first_line(b):
    return b.split(b"\r\n", 1)[0].decode("latin1")

def main():
    pcap, cmd = sys.argv[1], sys.argv[2]
    flows = load(pcap)
    if cmd == "list":
        for st, fl in flows.items():
            c, s = data(fl, "c2s"), data(fl, "s2c")
            print(f"{st:4d} {fl['start']:9.3f}-{fl['end']:9.3f} {fl['client']:5d}->{fl['server']:5d} c2s={len(c):8d} s2c={len(s):8d} "
                  f"{first_line(c)[:70]!s} | {first_line(s)[:40]} | {fl['flags'][:2]}")
    elif cmd == "dump":
        st = int(sys.argv[3]); n = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
        fl = flows[st]
        for t, d, seq, b in fl["segs"]:
            print(f"--- {t:.6f} {d} {len(b)} bytes")
            if all(32 <= x < 127 or x in (9, 10, 13) for x in b[:n]):
                print(b[:n].decode())
            else:
                for i in range(0, min(len(b), n), 16):
                    chunk = b[i:i+16]
                    print(f"{i:06x}  {chunk.hex(' '):<48}  {''.join(chr(x) if 32 <= x < 127 else '.' for x in chunk)}")
        print("flags:", fl["flags"])
    elif cmd == "raw":
        st, d, out = int(sys.argv[3]), sys.argv[4], sys.argv[5]
        open(out, "wb").write(data(flows[st], d))

if __name__ == "__main__":
    main()
PYEOF
  cat >"$OUT/rh.py" <<'PYEOF'
#!/usr/bin/env python3
"""Decode etcd 3.4 rafthttp traffic from a pcap into a readable transcript.

usage: rh.py PCAP [--ports 41101,41102] [--max-frames N] [--hex] [--ids m1=...,m2=...]
Prints every TCP connection to a peer port: the HTTP requests/responses with all headers, and
bodies decoded by path (message stream, msgappv2 stream, /raft POST, /raft/snapshot, JSON, ...).
"""
import sys, os, subprocess, json, bisect, argparse, collections
sys.path.insert(0, os.path.dirname(__file__))
from flows import load

PROTO_DIR = os.environ.get("PROTO_DIR", "/work/main/proto/proto")
MSGTYPES = ["MsgHup", "MsgBeat", "MsgProp", "MsgApp", "MsgAppResp", "MsgVote", "MsgVoteResp", "MsgSnap",
            "MsgHeartbeat", "MsgHeartbeatResp", "MsgUnreachable", "MsgSnapStatus", "MsgCheckQuorum",
            "MsgTransferLeader", "MsgTimeoutNow", "MsgReadIndex", "MsgReadIndexResp", "MsgPreVote", "MsgPreVoteResp"]
ENTRYTYPES = ["EntryNormal", "EntryConfChange", "EntryConfChangeV2"]
CCTYPES = ["AddNode", "RemoveNode", "UpdateNode", "AddLearnerNode"]
NAMES = {}

# ---------------------------------------------------------------- protobuf
def varint(b, i):
    r = s = 0
    while True:
        x = b[i]; i += 1
        r |= (x & 0x7f) << s; s += 7
        if x < 0x80: return r, i

def fields(b):
    """yield (fieldno, wiretype, value) ; value = int or bytes"""
    i = 0
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0: v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i); v = b[i:i+n]; i += n
        elif w == 1: v = int.from_bytes(b[i:i+8], "little"); i += 8
        elif w == 5: v = int.from_bytes(b[i:i+4], "little"); i += 4
        else: raise ValueError(f"bad wire type {w}")
        yield f, w, v

def idn(x):
    h = f"{x:x}"
    return NAMES.get(h, h)

def dec_confstate(b):
    d = collections.defaultdict(list); present = []
    for f, w, v in fields(b):
        present.append(f)
        if w == 2 and f in (1, 2, 3, 4):  # packed
            j = 0
            while j < len(v):
                x, j = varint(v, j); d[f].append(x)
        else:
            d[f].append(v)
    return {"voters": [idn(x) for x in d[1]], "learners": [idn(x) for x in d[2]],
            "voters_outgoing": [idn(x) for x in d[3]], "learners_next": [idn(x) for x in d[4]],
            "auto_leave": d[5][0] if d[5] else None, "_fields": present}

def dec_snapshot(b, show_data=True):
    r = {"_fields": []}
    for f, w, v in fields(b):
        r["_fields"].append(f)
        if f == 1: r["data_len"] = len(v); r["data"] = v
        if f == 2:
            md = {"_fields": []}
            for f2, w2, v2 in fields(v):
                md["_fields"].append(f2)
                if f2 == 1: md["conf_state"] = dec_confstate(v2)
                if f2 == 2: md["index"] = v2
                if f2 == 3: md["term"] = v2
            r["metadata"] = md
    return r

def dec_entry(b):
    e = {"_fields": []}
    for f, w, v in fields(b):
        e["_fields"].append(f)
        if f == 1: e["Type"] = v
        if f == 2: e["Term"] = v
        if f == 3: e["Index"] = v
        if f == 4: e["Data"] = v
    return e

def dec_message(b):
    m = {"_fields": [], "entries": []}
    for f, w, v in fields(b):
        m["_fields"].append(f)
        if f == 1: m["type"] = v
        elif f == 2: m["to"] = v
        elif f == 3: m["from"] = v
        elif f == 4: m["term"] = v
        elif f == 5: m["logTerm"] = v
        elif f == 6: m["index"] = v
        elif f == 7: m["entries"].append(dec_entry(v))
        elif f == 8: m["commit"] = v
        elif f == 9: m["snapshot"] = dec_snapshot(v)
        elif f == 10: m["reject"] = v
        elif f == 11: m["rejectHint"] = v
        elif f == 12: m["context"] = v
    return m

_pcache = {}
def protoc_decode(typ, data, proto="etcdserverpb/raft_internal.proto"):
    k = (typ, data)
    if k in _pcache: return _pcache[k]
    p = subprocess.run(["protoc", "-I", PROTO_DIR, f"--decode={typ}", proto], input=data, capture_output=True)
    r = p.stdout.decode(errors="replace").strip() if p.returncode == 0 else None
    _pcache[k] = r
    return r

def oneline(s):
    return " ".join(x.strip() for x in s.splitlines())

def fmt_entry_data(e):
    d = e.get("Data")
    if d is None: return "no Data"
    t = e.get("Type", 0)
    if t == 1:
        cc = {}
        for f, w, v in fields(d):
            cc[f] = v
        ctx = cc.get(4, b"")
        return (f"ConfChange{{ID={cc.get(1)} Type={CCTYPES[cc.get(2,0)]} NodeID={idn(cc.get(3,0))} fields={[f for f,_,_ in fields(d)]}}} "
                f"Context={ctx.decode(errors='replace')}")
    if t == 0:
        r = protoc_decode("etcdserverpb.InternalRaftRequest", d)
        if r is not None:
            return "InternalRaftRequest{" + oneline(r) + "}"
        r = protoc_decode("etcdserverpb.Request", d, "etcdserverpb/etcdserver.proto")
        if r is not None:
            return "v2 Request{" + oneline(r) + "} raw=" + d.hex()
        return "undecodable " + d.hex()
    return "data " + d.hex()

def fmt_message(m, full_entries=3):
    t = MSGTYPES[m.get("type", 0)] if m.get("type", 0) < len(MSGTYPES) else str(m.get("type"))
    s = (f"{t} to={idn(m.get('to',0))} from={idn(m.get('from',0))} term={m.get('term')} logTerm={m.get('logTerm')} "
         f"index={m.get('index')} commit={m.get('commit')} reject={m.get('reject')} rejectHint={m.get('rejectHint')} "
         f"entries={len(m['entries'])} fields={m['_fields']}")
    if "context" in m: s += f" context={m['context'].hex()}({m['context']!r})"
    if "snapshot" in m:
        sn = m["snapshot"]; md = sn.get("metadata", {})
        s += f" snapshot{{fields={sn['_fields']} data_len={sn.get('data_len')} md={ {k: v for k, v in md.items()} }}}"
    out = [s]
    for e in m["entries"][:full_entries]:
        out.append(f"      entry {ENTRYTYPES[e.get('Type',0)]} term={e.get('Term')} index={e.get('Index')} fields={e['_fields']} {fmt_entry_data(e)}")
    if len(m["entries"]) > full_entries:
        out.append(f"      ... {len(m['entries']) - full_entries} more entries")
    return "\n".join(out)

# ---------------------------------------------------------------- HTTP
class Stream:
    """bytes of one direction with a map offset -> timestamp"""
    def __init__(self, segs):
        self.offs, self.times, parts, o = [], [], [], 0
        for t, b in segs:
            self.offs.append(o); self.times.append(t); parts.append(b); o += len(b)
        self.b = b"".join(parts)
    def t(self, off):
        i = bisect.bisect_right(self.offs, off) - 1
        return self.times[max(i, 0)] if self.times else 0.0

def parse_http(st, i):
    """parse one HTTP message at offset i. returns (startline, headers[list], body, body_offsets, next_i, complete)"""
    b = st.b
    j = b.find(b"\r\n\r\n", i)
    if j < 0: return None
    head = b[i:j].decode("latin1").split("\r\n")
    start, hdrs = head[0], [tuple(h.split(": ", 1)) for h in head[1:]]
    hd = {k.lower(): v for k, v in hdrs}
    k = j + 4
    body, boffs = b"", []   # boffs: list of (body_offset, stream_offset)
    if "content-length" in hd:
        n = int(hd["content-length"]); body = b[k:k+n]; boffs = [(0, k)]
        return start, hdrs, body, boffs, k + n, len(body) == n
    if hd.get("transfer-encoding") == "chunked":
        parts = []; blen = 0
        while True:
            e = b.find(b"\r\n", k)
            if e < 0: return start, hdrs, b"".join(parts), boffs, len(b), False
            n = int(b[k:e].split(b";")[0], 16)
            if n == 0:
                return start, hdrs, b"".join(parts), boffs, e + 4, True
            boffs.append((blen, e + 2)); parts.append(b[e+2:e+2+n]); blen += n
            if e + 2 + n > len(b): return start, hdrs, b"".join(parts), boffs, len(b), False
            k = e + 2 + n + 2
    if start.startswith("HTTP/") and start.split(" ")[1] in ("204", "304"):
        return start, hdrs, b"", [], k, True
    if start.startswith("HTTP/"):
        # response without length: body until close
        return start, hdrs, b[k:], [(0, k)], len(b), True
    return start, hdrs, b"", [], k, True

def body_time(st, boffs, off):
    best = boffs[0][1] if boffs else 0
    base = 0
    for bo, so in boffs:
        if bo <= off: base, best = bo, so
        else: break
    return st.t(best + (off - base))

def decode_message_stream(body, st, boffs, maxf, hb_summary=True):
    i, n, out, hb = 0, 0, [], []
    while i + 8 <= len(body):
        ln = int.from_bytes(body[i:i+8], "big")
        t = body_time(st, boffs, i)
        if i + 8 + ln > len(body):
            out.append(f"    {t:9.3f} [truncated frame len={ln}]"); break
        fr = body[i+8:i+8+ln]
        m = dec_message(fr)
        if m.get("type") == 8 and m.get("to", 0) == 0 and m.get("from", 0) == 0:
            hb.append(t)
            if len(hb) <= 2: out.append(f"    {t:9.3f} len={ln} LINK-HEARTBEAT bytes={body[i:i+8+ln].hex()}")
        else:
            n += 1
            if n <= maxf:
                out.append(f"    {t:9.3f} len={ln} " + fmt_message(m))
                if n <= 3: out.append(f"              frame hex: {body[i:i+8+ln][:200].hex()}")
        i += 8 + ln
    if n > maxf: out.append(f"    ... {n - maxf} more messages")
    if hb:
        gaps = [round(b - a, 3) for a, b in zip(hb, hb[1:])]
        out.append(f"    link heartbeats: {len(hb)} at {hb[0]:.3f}..{hb[-1]:.3f} gaps(first 10)={gaps[:10]}")
    return out

def decode_msgappv2(body, st, boffs, maxf, local, remote):
    i, n, out, hb = 0, 0, [], []
    term = index = 0
    while i < len(body):
        t = body_time(st, boffs, i)
        typ = body[i]
        if typ == 0:
            hb.append(t)
            if len(hb) <= 2: out.append(f"    {t:9.3f} 0x00 linkHeartbeat")
            i += 1; continue
        if typ == 1:
            if i + 9 > len(body): break
            cnt = int.from_bytes(body[i+1:i+9], "big"); j = i + 9; ents = []
            for _ in range(cnt):
                ln = int.from_bytes(body[j:j+8], "big"); ents.append(dec_entry(body[j+8:j+8+ln])); j += 8 + ln
            commit = int.from_bytes(body[j:j+8], "big"); j += 8
            n += 1
            if n <= maxf:
                out.append(f"    {t:9.3f} 0x01 AppEntries count={cnt} commit={commit} => MsgApp term={term} logTerm={term} index={index} "
                           f"(state before: term={term} index={index}) entry indexes={[e.get('Index') for e in ents][:10]} entry terms={sorted(set(e.get('Term') for e in ents))}")
                if n <= 3: out.append(f"              frame hex: {body[i:j][:240].hex()}")
                for e in ents[:2]:
                    out.append(f"      entry {ENTRYTYPES[e.get('Type',0)]} term={e.get('Term')} index={e.get('Index')} fields={e['_fields']} {fmt_entry_data(e)}")
            index += cnt
            i = j; continue
        if typ == 2:
            ln = int.from_bytes(body[i+1:i+9], "big")
            if i + 9 + ln > len(body): out.append(f"    {t:9.3f} [truncated]"); break
            m = dec_message(body[i+9:i+9+ln])
            n += 1
            if n <= maxf:
                out.append(f"    {t:9.3f} 0x02 MsgApp-full len={ln} " + fmt_message(m))
                if n <= 3: out.append(f"              frame hex: {body[i:i+9+ln][:240].hex()}")
            term = m.get("term", 0); index = m.get("index", 0) + len(m["entries"])
            i += 9 + ln; continue
        out.append(f"    {t:9.3f} UNKNOWN type byte {typ:#x} rest={body[i:i+32].hex()}"); break
    if n > maxf: out.append(f"    ... {n - maxf} more frames")
    if hb:
        gaps = [round(b - a, 3) for a, b in zip(hb, hb[1:])]
        out.append(f"    link heartbeats: {len(hb)} at {hb[0]:.3f}..{hb[-1]:.3f} gaps(first 10)={gaps[:10]}")
    return out

def decode_body(path, method, body, st, boffs, maxf, is_resp, hdrs, status=''):
    out = []
    if not body: return out
    hd = {k.lower(): v for k, v in hdrs}
    if is_resp and status != "200" or (is_resp and path.startswith("/raft/stream") and status != "200"):
        return ["    body: " + repr(body[:500])]
    if is_resp and path.startswith("/raft/stream/message/"):
        return decode_message_stream(body, st, boffs, maxf)
    if is_resp and path.startswith("/raft/stream/msgapp/"):
        return decode_msgappv2(body, st, boffs, maxf, None, None)
    if not is_resp and path == "/raft" and method == "POST":
        try:
            return ["    body raftpb.Message: " + fmt_message(dec_message(body)), f"    body hex: {body[:300].hex()}"]
        except Exception as e:
            return [f"    undecodable ({e}) {body[:100].hex()}"]
    if not is_resp and path == "/raft/snapshot":
        ln = int.from_bytes(body[:8], "big")
        m = dec_message(body[8:8+ln])
        rest = body[8+ln:]
        out.append(f"    snapshot body: total={len(body)} first 8 bytes (BE len)={body[:8].hex()} -> {ln}; message:")
        out.append("    " + fmt_message(m))
        if "snapshot" in m and "data" in m["snapshot"]:
            out.append(f"    Snapshot.data ({m['snapshot']['data_len']} bytes): {m['snapshot']['data'][:3000].decode(errors='replace')}")
        out.append(f"    message hex (first 160): {body[:160].hex()}")
        out.append(f"    after message: {len(rest)} bytes; first 64: {rest[:64].hex()}; bbolt magic at 16? {rest[16:20].hex()}")
        return out
    ct = hd.get("content-type", "")
    if "json" in ct or body[:1] in (b"{", b"["):
        out.append("    body: " + body[:3000].decode(errors="replace"))
        return out
    if "protobuf" in ct or not all(32 <= x < 127 or x in (9, 10, 13) for x in body[:200]):
        out.append(f"    body ({len(body)} bytes) hex: {body[:300].hex()}")
        return out
    out.append("    body: " + body[:1000].decode(errors="replace").replace("\n", "\\n"))
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap"); ap.add_argument("--max-frames", type=int, default=20)
    ap.add_argument("--ids", default=""); ap.add_argument("--only", default="")
    ap.add_argument("--skip-probing", action="store_true")
    a = ap.parse_args()
    for kv in filter(None, a.ids.split(",")):
        k, v = kv.split("="); NAMES[v] = k
    flows = load(a.pcap)
    for sid, fl in flows.items():
        if a.only and str(sid) not in a.only.split(","): continue
        c = Stream([(t, b) for t, d, s, b in fl["segs"] if d == "c2s"])
        s = Stream([(t, b) for t, d, s, b in fl["segs"] if d == "s2c"])
        if not c.b and not s.b:
            print(f"== conn {sid} {fl['client']}->{fl['server']} t={fl['start']:.3f} no data flags={fl['flags']}"); continue
        if a.skip_probing and c.b.startswith(b"GET /raft/probing"): continue
        print(f"== conn {sid} {fl['client']}->{fl['server']} t={fl['start']:.3f}..{fl['end']:.3f} closed={fl['flags']}")
        ci = si = 0
        while ci < len(c.b):
            rq = parse_http(c, ci)
            if rq is None:
                print(f"  [client junk {len(c.b)-ci} bytes] {c.b[ci:ci+80]!r}"); break
            start, hdrs, body, boffs, ci2, ok = rq
            method, path = (start.split(" ") + ["", ""])[:2]
            print(f"  {c.t(ci):9.3f} >> {start}")
            for k, v in hdrs: print(f"       {k}: {v}")
            if body: print(f"       [request body {len(body)} bytes{'' if ok else ', incomplete'}]")
            for l in decode_body(path, method, body, c, boffs, a.max_frames, False, hdrs): print(l)
            ci = ci2
            if si < len(s.b):
                rs = parse_http(s, si)
                if rs is None:
                    print(f"  [server junk] {s.b[si:si+200]!r}"); si = len(s.b); continue
                start, hdrs, body, boffs, si2, ok = rs
                print(f"  {s.t(si):9.3f} << {start}")
                for k, v in hdrs: print(f"       {k}: {v}")
                print(f"       [response body {len(body)} bytes{'' if ok else ', stream not finished'}]")
                for l in decode_body(path, method, body, s, boffs, a.max_frames, True, hdrs, start.split(' ')[1] if ' ' in start else ''): print(l)
                si = si2
        if si < len(s.b):
            print(f"  [server extra {len(s.b)-si} bytes] {s.b[si:si+200]!r}")

if __name__ == "__main__":
    main()
PYEOF
  echo "decoder: python3 $OUT/rh.py <pcap> --ids \"\$(paste -sd, <scenario>/members.txt)\"" >&2
}
write_decoder

scenarios=("$@")
[ ${#scenarios[@]} -eq 0 ] && scenarios=(bootstrap leases membership snapshot restart wrongcluster removed corrupt probes probes2 multiurl fakepeer fakestream v2snap)
for s in "${scenarios[@]}"; do "$s"; done
echo "captures in $OUT"
