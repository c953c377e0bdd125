// The fault-injection suite: a 3- (or 5-) member cluster of our binary under a recorded client
// workload while members are killed, paused, partitioned (the leader alone or in a minority),
// restarted, moved off leadership and run out of disk.
//
// Every operation is recorded with its invoke and complete times; at the end the members'
// revision histories, their HashKV and a watcher that lived through the faults are checked
// (chaos_check: no acknowledged write lost, a linearizable order, reads that saw that order).
// The CI run is short; `scripts/chaos.sh` runs it longer (CHAOS_SECS, CHAOS_MEMBERS, CHAOS_SEED,
// CHAOS_FAULTS).

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

mod chaos_check;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaos_check::{Call, Event, LeaseOp, Nanos, Op, Outcome};
use cluster_support::{Cluster, Tmpfs};
use proto::etcdserverpb::{
    HashKvRequest, LeaseGrantRequest, PutRequest, RangeRequest, WatchCreateRequest, WatchRequest,
    kv_client::KvClient, lease_client::LeaseClient, maintenance_client::MaintenanceClient,
    watch_client::WatchClient, watch_request,
};
use tonic::transport::Channel;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const FAST: &[&str] = &["--heartbeat-interval", "50", "--election-timeout", "500"];
const PREFIX: &str = chaos_check::WORKLOAD_PREFIX;
const LEASE_PREFIX: &str = "lease/";
/// Short leases, so many expire during a run (etcd's minimum TTL with a 500 ms election
/// timeout is below this).
const LEASE_TTL: i64 = 2;
const KEYS: u64 = 8;
/// Each member's data dir is a tmpfs of its own (when the run may mount one) this big; the
/// "disk full" fault shrinks it to what is in use.
const DISK: &str = "size=2g";
/// Values put (outside the workload's keys) while a member's disk is full, so that its db
/// must grow: the WAL's current segment is preallocated and the db reuses freed pages.
const BALLAST_PUTS: usize = 4;
const BALLAST_BYTES: usize = 256 * 1024;
const CLIENTS: usize = 6;
/// The first revision a client's write can have (revision 1 is the empty store).
const FIRST_REVISION: i64 = 2;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: a seeded, reproducible choice of operations and faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct Recorder {
    start: Instant,
    stop: AtomicBool,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }
}

async fn connect(endpoint: &str) -> Option<Channel> {
    tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .ok()?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .ok()
}

/// One client: puts of unique values and linearizable gets on a few keys, on one member
/// until it fails, then the next.
async fn client(c: usize, endpoints: Vec<String>, seed: u64, rec: Arc<Recorder>) {
    let mut rng = Rng((seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
    let mut at = c % endpoints.len();
    let mut kv: Option<KvClient<Channel>> = None;
    let mut n = 0u64;
    while !rec.stop.load(Ordering::SeqCst) {
        if kv.is_none() {
            kv = connect(&endpoints[at]).await.map(KvClient::new);
            if kv.is_none() {
                at = (at + 1) % endpoints.len();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        let Some(k) = kv.as_mut() else { continue };
        let key = format!("{PREFIX}k{}", rng.below(KEYS));
        n += 1;
        let invoke = rec.now();
        let (call, outcome) = if rng.below(100) < 60 {
            let value = format!("c{c}-{n}");
            let r = k
                .put(PutRequest {
                    key: key.clone().into_bytes(),
                    value: value.clone().into_bytes(),
                    ..Default::default()
                })
                .await;
            let outcome = match r {
                Ok(resp) => Outcome::Put {
                    revision: resp.into_inner().header.map_or(0, |h| h.revision),
                },
                Err(_) => Outcome::Unknown,
            };
            (Call::Put { key, value }, outcome)
        } else {
            let r = k
                .range(RangeRequest {
                    key: key.clone().into_bytes(),
                    ..Default::default()
                })
                .await;
            let outcome = match r {
                Ok(resp) => {
                    let resp = resp.into_inner();
                    Outcome::Get {
                        revision: resp.header.map_or(0, |h| h.revision),
                        found: resp.kvs.first().map(|kv| {
                            (
                                String::from_utf8_lossy(&kv.value).into_owned(),
                                kv.mod_revision,
                            )
                        }),
                    }
                }
                Err(_) => Outcome::Unknown,
            };
            (Call::Get { key }, outcome)
        };
        let complete = rec.now();
        let failed = outcome == Outcome::Unknown;
        rec.ops.lock().unwrap_or_else(|e| e.into_inner()).push(Op {
            client: c,
            call,
            invoke,
            complete,
            outcome,
        });
        if failed {
            kv = None;
            at = (at + 1) % endpoints.len();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Grants short leases, puts a key on each and reads it every 400 ms until past its TTL
/// (chaos_check::check_leases: no key is gone before its lease's TTL).
async fn lease_client(endpoints: Vec<String>, rec: Arc<Recorder>, out: Arc<Mutex<Vec<LeaseOp>>>) {
    let mut at = 0;
    let mut n = 0u64;
    while !rec.stop.load(Ordering::SeqCst) {
        let Some(ch) = connect(&endpoints[at]).await else {
            at = (at + 1) % endpoints.len();
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (mut lease, mut kv) = (LeaseClient::new(ch.clone()), KvClient::new(ch));
        n += 1;
        let key = format!("{LEASE_PREFIX}{n}");
        let grant_invoke = rec.now();
        let granted = lease
            .lease_grant(LeaseGrantRequest {
                ttl: LEASE_TTL,
                id: 0,
            })
            .await;
        let Ok(granted) = granted.map(|r| r.into_inner()) else {
            at = (at + 1) % endpoints.len();
            continue;
        };
        let put = kv
            .put(PutRequest {
                key: key.clone().into_bytes(),
                value: b"leased".to_vec(),
                lease: granted.id,
                ..Default::default()
            })
            .await;
        let mut op = LeaseOp {
            key: key.clone(),
            ttl_secs: granted.ttl,
            grant_invoke,
            put_complete: put.is_ok().then(|| rec.now()),
            reads: Vec::new(),
        };
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let invoke = rec.now();
            if let Ok(r) = kv
                .range(RangeRequest {
                    key: key.clone().into_bytes(),
                    ..Default::default()
                })
                .await
            {
                op.reads
                    .push((invoke, rec.now(), !r.into_inner().kvs.is_empty()));
            }
        }
        out.lock().unwrap_or_else(|e| e.into_inner()).push(op);
    }
}

/// Watches the whole keyspace from `from` on one member until it has every event up to `to` (or the
/// stream fails: the events so far).
async fn watch_from(endpoint: &str, from: i64, to: i64, out: &mut Vec<Event>) -> bool {
    let Some(ch) = connect(endpoint).await else {
        return false;
    };
    let mut w = WatchClient::new(ch);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let create = WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(
            WatchCreateRequest {
                // The whole keyspace: the lease keys' puts and expiries take revisions too.
                key: vec![0],
                range_end: vec![0],
                start_revision: from,
                ..Default::default()
            },
        )),
    };
    if tx.send(create).await.is_err() {
        return false;
    }
    let Ok(resp) = w
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    else {
        return false;
    };
    let mut stream = resp.into_inner();
    loop {
        if out.last().is_some_and(|e| e.revision >= to) {
            return true;
        }
        match tokio::time::timeout(Duration::from_secs(3), stream.message()).await {
            Ok(Ok(Some(m))) => {
                if m.canceled || m.compact_revision != 0 {
                    return false;
                }
                for e in m.events {
                    if let Some(kv) = e.kv {
                        out.push(Event {
                            revision: kv.mod_revision,
                            key: String::from_utf8_lossy(&kv.key).into_owned(),
                            value: String::from_utf8_lossy(&kv.value).into_owned(),
                            deleted: e.r#type == 1,
                        });
                    }
                }
            }
            _ => return false,
        }
    }
}

/// A watcher that lives through the faults: on an error it resumes on the next member from
/// the revision after the last it saw, so its events must still be ordered, unique and whole.
async fn live_watcher(endpoints: Vec<String>, stop: Arc<Mutex<Option<i64>>>) -> Vec<Event> {
    let mut events = Vec::new();
    let mut at = 0;
    loop {
        let target = *stop.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = target
            && events.last().is_some_and(|e: &Event| e.revision >= t)
        {
            return events;
        }
        let from = events.last().map_or(FIRST_REVISION, |e| e.revision + 1);
        // Until told where to stop, watch "forever" (an unreachable revision).
        let to = target.unwrap_or(i64::MAX);
        if !watch_from(&endpoints[at], from, to, &mut events).await {
            at = (at + 1) % endpoints.len();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn all_healthy(c: &mut Cluster) {
    for m in &mut c.nodes {
        if m.child.is_none() {
            m.spawn(OURS);
        }
        m.wait_healthy(Duration::from_secs(60));
    }
}

/// Injects one fault by name; returns when the cluster is whole again. `disks` are the
/// members' data dirs (empty when the run cannot mount them); `stats` counts what faults did.
fn inject(
    c: &mut Cluster,
    disks: &[Tmpfs],
    fault: &str,
    rng: &mut Rng,
    stats: &mut BTreeMap<&'static str, usize>,
) {
    let n = c.nodes.len();
    let leader = c.leader(Duration::from_secs(30));
    let follower = (leader + 1 + rng.below(n as u64 - 1) as usize) % n;
    let pause = Duration::from_millis(1000 + rng.below(2000));
    match fault {
        "kill -9 leader" | "kill -9 follower" => {
            let i = if fault.ends_with("leader") {
                leader
            } else {
                follower
            };
            c.nodes[i].kill9();
            std::thread::sleep(pause);
            c.nodes[i].spawn(OURS);
        }
        "SIGSTOP pause" => {
            let i = rng.below(n as u64) as usize;
            c.nodes[i].signal(libc::SIGSTOP);
            std::thread::sleep(pause);
            c.nodes[i].signal(libc::SIGCONT);
        }
        "isolate leader" | "isolate follower" => {
            let i = if fault.ends_with("leader") {
                leader
            } else {
                follower
            };
            c.isolate(i, true);
            std::thread::sleep(pause + Duration::from_secs(1));
            c.isolate(i, false);
        }
        "leader in a minority" => {
            // The leader and as many others as stay short of a majority on one side, the
            // rest on the other (5 members: 2|3; 3 members: the leader alone); clients still
            // reach every member, so the old leader must neither commit nor serve a stale read.
            let mut minority = vec![leader];
            while minority.len() < (n - 1) / 2 {
                let j = rng.below(n as u64) as usize;
                if !minority.contains(&j) {
                    minority.push(j);
                }
            }
            let names: Vec<&str> = c.nodes.iter().map(|m| m.name.as_str()).collect();
            let ids = c.member_ids_hex(&names);
            let split = |block: bool| {
                for (y, m) in c.nodes.iter().enumerate() {
                    for (x, id) in ids.iter().enumerate() {
                        if minority.contains(&x) != minority.contains(&y) {
                            m.proxy.as_ref().expect("proxied").block_from(id, block);
                        }
                    }
                }
            };
            split(true);
            std::thread::sleep(pause + Duration::from_secs(1));
            split(false);
            // The majority side should have chosen a leader of its own meanwhile.
            if !minority.contains(&c.leader(Duration::from_secs(30))) {
                *stats
                    .entry("the majority elected a new leader")
                    .or_default() += 1;
            }
        }
        "one-way cut from leader" => {
            let id = c.member_id_hex(&c.nodes[leader].name);
            let proxy = c.nodes[follower].proxy.as_ref().expect("proxied");
            proxy.block_from(&id, true);
            std::thread::sleep(pause + Duration::from_secs(1));
            proxy.block_from(&id, false);
        }
        "rolling restart" => {
            for i in 0..n {
                c.nodes[i].stop();
                c.nodes[i].spawn(OURS);
                c.nodes[i].wait_healthy(Duration::from_secs(60));
            }
        }
        "move leader" => {
            let to = c.member_id_hex(&c.nodes[follower].name);
            let ep = c.nodes[leader].client_url.clone();
            let out = std::process::Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &ep, "move-leader", &to])
                .output()
                .expect("run etcdctl");
            // A leader that changed meanwhile refuses; that is no fault of the cluster's.
            if !out.status.success() {
                eprintln!(
                    "move-leader refused: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        "replace follower" => replace_member(c, leader, follower),
        "slow leader link" => {
            // Every byte to the leader's peer port waits, longer than a heartbeat interval
            // and around the election timeout: late votes and appends, maybe an election.
            let proxy = c.nodes[leader].proxy.as_ref().expect("proxied");
            proxy.set_delay(100 + rng.below(500));
            std::thread::sleep(pause + Duration::from_secs(1));
            proxy.set_delay(0);
        }
        "lossy links" => {
            // Every member's peer traffic loses 5-30% of its chunks for a while: stalls of
            // one or more retransmission timeouts, around the election timeout.
            let loss = 5 + rng.below(26);
            for node in &c.nodes {
                node.proxy.as_ref().expect("proxied").set_loss(loss);
            }
            std::thread::sleep(pause + Duration::from_secs(1));
            for node in &c.nodes {
                node.proxy.as_ref().expect("proxied").set_loss(0);
            }
        }
        "disk full" => {
            // Any member, the leader as often as the others: its disk keeps no room beyond
            // what is in use, so the next page its db or WAL needs is refused. Big values
            // written meanwhile make its db grow. A member that meets the full disk stops (as
            // etcd panics) saying so; one that needed no page rides it out.
            let i = rng.below(n as u64) as usize;
            let disk = &disks[i];
            let log_from = std::fs::metadata(c.nodes[i].log_path()).map_or(0, |m| m.len());
            // A member may take a page between the look and the remount: look again.
            let full = (0..20).any(|_| disk.try_resize(&format!("size={}k", disk.used() / 1024)));
            if !full {
                *stats
                    .entry("disk full not made (the disk kept growing)")
                    .or_default() += 1;
                all_healthy(c);
                return;
            }
            let via = (i + 1) % n;
            for k in 0..BALLAST_PUTS {
                let key = format!("ballast/{k}");
                c.nodes[via].etcdctl_with_input(&["put", &key], &[b'x'; BALLAST_BYTES]);
            }
            let until = Instant::now() + pause + Duration::from_secs(1);
            let mut stopped = None;
            while stopped.is_none() && Instant::now() < until {
                stopped = c.nodes[i].exited();
                std::thread::sleep(Duration::from_millis(50));
            }
            disk.resize(DISK);
            // One that met it just now may still be on its way out.
            let until = Instant::now() + Duration::from_secs(2);
            while stopped.is_none() && Instant::now() < until {
                stopped = c.nodes[i].exited();
                std::thread::sleep(Duration::from_millis(50));
            }
            if let Some(st) = stopped {
                let log = std::fs::read(c.nodes[i].log_path()).unwrap_or_default();
                let since = String::from_utf8_lossy(&log[(log_from as usize).min(log.len())..]);
                assert!(
                    !st.success() && since.contains("No space left on device"),
                    "{} stopped ({st}) on a full disk without saying so:\n{}",
                    c.nodes[i].name,
                    c.nodes[i].log_tail(20)
                );
                *stats.entry("disk full stopped the member").or_default() += 1;
                c.nodes[i].kill9();
                c.nodes[i].spawn(OURS);
            } else {
                *stats.entry("disk full ridden out").or_default() += 1;
            }
        }
        other => panic!("unknown fault {other}"),
    }
    all_healthy(c);
}

/// Membership changes under load: the follower is removed (it stops), comes back with an
/// empty data dir as a learner at the same URLs, catches up and is promoted.
fn replace_member(c: &mut Cluster, leader: usize, i: usize) {
    let name = c.nodes[i].name.clone();
    let id = c.member_id_hex(&name);
    c.nodes[leader].etcdctl_ok(&["member", "remove", &id]);
    c.nodes[i].kill9();
    // The data dir may be a mount point: empty it rather than remove it.
    for entry in std::fs::read_dir(&c.nodes[i].data_dir).expect("read the removed member's dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        }
        .expect("wipe the removed member's data");
    }
    let added = c.nodes[leader].etcdctl_ok(&[
        "member",
        "add",
        &name,
        "--learner",
        &format!("--peer-urls={}", c.nodes[i].advertise_peer),
    ]);
    let added = cluster_support::parse_member_add(&added);
    c.nodes[i].initial_cluster = added.initial_cluster;
    c.nodes[i].state = "existing";
    c.nodes[i].spawn(OURS);
    // Under load a request may also time out or meet a leader change: try again.
    cluster_support::promote_when_ready(
        &c.nodes[leader],
        &added.id,
        Duration::from_secs(60),
        &["timed out", "leader changed", "no leader"],
    );
}

const FAULTS: &[&str] = &[
    "replace follower",
    "slow leader link",
    "lossy links",
    "kill -9 leader",
    "kill -9 follower",
    "SIGSTOP pause",
    "isolate leader",
    "isolate follower",
    "leader in a minority",
    "one-way cut from leader",
    "move leader",
    "rolling restart",
    "disk full",
];

fn run(members: usize, secs: u64, seed: u64) {
    eprintln!("chaos: {members} members, {secs} s of faults, CHAOS_SEED={seed}");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = cluster_support::members(dir.path(), members, true, FAST, |_| {});
    // A disk of its own per member, which the "disk full" fault fills (mounting needs root).
    let disks: Vec<Tmpfs> = if Tmpfs::can_mount() {
        nodes
            .iter()
            .map(|m| {
                std::fs::create_dir_all(&m.data_dir).expect("create a data dir");
                Tmpfs::mount(&m.data_dir, DISK)
            })
            .collect()
    } else {
        eprintln!("chaos: not root, so no tmpfs per member: \"disk full\" is not injected");
        Vec::new()
    };
    for m in &mut nodes {
        m.spawn(OURS);
    }
    for m in &mut nodes {
        m.wait_healthy(Duration::from_secs(30));
    }
    let mut c = Cluster {
        bin: OURS.to_string(),
        nodes,
    };
    let endpoints: Vec<String> = c.nodes.iter().map(|m| m.client_url.clone()).collect();
    let rec = Arc::new(Recorder {
        start: Instant::now(),
        stop: AtomicBool::new(false),
        ops: Mutex::new(Vec::new()),
    });
    let watch_until: Arc<Mutex<Option<i64>>> = Arc::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| rt.spawn(client(i, endpoints.clone(), seed, rec.clone())))
        .collect();
    let watcher = rt.spawn(live_watcher(endpoints.clone(), watch_until.clone()));
    let leases: Arc<Mutex<Vec<LeaseOp>>> = Arc::default();
    let lease_task = rt.spawn(lease_client(endpoints.clone(), rec.clone(), leases.clone()));

    // CHAOS_FAULTS="kill -9 leader,isolate leader" narrows the kinds (long kill runs).
    let wanted = std::env::var("CHAOS_FAULTS").ok();
    let chosen: Vec<&str> = FAULTS
        .iter()
        .copied()
        .filter(|f| {
            wanted
                .as_ref()
                .is_none_or(|list| list.split(',').any(|x| x.trim() == *f))
        })
        .filter(|f| *f != "disk full" || !disks.is_empty())
        .collect();
    assert!(!chosen.is_empty(), "CHAOS_FAULTS names none of {FAULTS:?}");
    let mut rng = Rng(seed | 1);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut stats: BTreeMap<&'static str, usize> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut order: Vec<&str> = Vec::new();
    while Instant::now() < deadline {
        if order.is_empty() {
            // Each round injects every fault once, in a seeded order.
            order = chosen.clone();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let fault = order.pop().unwrap_or("SIGSTOP pause");
        inject(&mut c, &disks, fault, &mut rng, &mut stats);
        *counts.entry(fault).or_default() += 1;
        std::thread::sleep(Duration::from_millis(500 + rng.below(1000)));
    }
    rec.stop.store(true, Ordering::SeqCst);
    for t in clients {
        rt.block_on(t).expect("client task");
    }
    rt.block_on(lease_task).expect("lease task");
    all_healthy(&mut c);

    // Every lease expires once the cluster is whole (the leader revokes them).
    let expired = rt.block_on(async {
        for _ in 0..300 {
            for ep in &endpoints {
                if let Some(ch) = connect(ep).await
                    && let Ok(r) = KvClient::new(ch)
                        .range(RangeRequest {
                            key: LEASE_PREFIX.as_bytes().to_vec(),
                            range_end: b"lease0".to_vec(),
                            count_only: true,
                            ..Default::default()
                        })
                        .await
                    && r.into_inner().count == 0
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    });
    assert!(
        expired,
        "leased keys are still there 30 s after the faults ended"
    );

    // The final revision (a linearizable read), then every member's whole history.
    let last = rt.block_on(async {
        for _ in 0..100 {
            for ep in &endpoints {
                if let Some(ch) = connect(ep).await
                    && let Ok(r) = KvClient::new(ch)
                        .range(RangeRequest {
                            key: vec![0],
                            range_end: vec![0],
                            count_only: true,
                            ..Default::default()
                        })
                        .await
                {
                    return r.into_inner().header.map_or(0, |h| h.revision);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no member answers a read after the faults");
    });
    *watch_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(last);
    let mut histories = Vec::new();
    let mut hashes = Vec::new();
    for ep in &endpoints {
        let mut h = Vec::new();
        let whole = rt.block_on(async {
            for _ in 0..50 {
                if watch_from(
                    ep,
                    h.last().map_or(FIRST_REVISION, |e: &Event| e.revision + 1),
                    last,
                    &mut h,
                )
                .await
                {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            false
        });
        assert!(
            whole,
            "{ep} never delivered its history up to revision {last}"
        );
        h.retain(|e| e.revision <= last);
        histories.push(h);
        let hash = rt.block_on(async {
            let ch = connect(ep).await.expect("connect for hashkv");
            MaintenanceClient::new(ch)
                .hash_kv(HashKvRequest { revision: last })
                .await
                .expect("hashkv")
                .into_inner()
                .hash
        });
        hashes.push(hash);
    }
    let live = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), watcher).await })
        .expect("the live watcher never caught up")
        .expect("watcher task");
    let ops = std::mem::take(&mut *rec.ops.lock().unwrap_or_else(|e| e.into_inner()));
    let leases = std::mem::take(&mut *leases.lock().unwrap_or_else(|e| e.into_inner()));

    let acked = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Put { .. }))
        .count();
    let reads = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Get { .. }))
        .count();
    let unknown = ops.iter().filter(|o| o.outcome == Outcome::Unknown).count();
    eprintln!(
        "chaos: {} operations ({acked} acknowledged puts, {reads} reads, {unknown} failed or unanswered), final revision {last}",
        ops.len()
    );
    eprintln!("chaos: faults injected: {counts:?}");
    if !stats.is_empty() {
        eprintln!("chaos: what they did: {stats:?}");
    }
    // With ballast written, a full disk stops its member: if two never did, the fault is
    // not biting (a disk that is not the data dir's, or room left somewhere).
    if counts.get("disk full").is_some_and(|&d| d >= 2) {
        assert!(
            stats
                .get("disk full stopped the member")
                .is_some_and(|&s| s > 0),
            "{} disk fulls and no member stopped: {stats:?}",
            counts["disk full"]
        );
    }
    let lease_reads: usize = leases.iter().map(|l| l.reads.len()).sum();
    let gone_after_ttl: usize = leases
        .iter()
        .map(|l| l.reads.iter().filter(|r| !r.2).count())
        .sum();
    eprintln!(
        "chaos: {} leases of {LEASE_TTL} s granted, {lease_reads} reads of their keys ({gone_after_ttl} found them expired)",
        leases.len()
    );
    let mut live = live;
    live.retain(|e| e.revision <= last);
    let mut with_live = histories.clone();
    with_live.push(live);
    let mut anomalies = chaos_check::check(&ops, &with_live, FIRST_REVISION);
    anomalies.extend(chaos_check::check_leases(&leases));
    assert!(
        hashes.windows(2).all(|w| w[0] == w[1]),
        "members' HashKV at revision {last} differ: {hashes:?}"
    );
    assert!(
        anomalies.is_empty(),
        "{} anomalies (seed {seed}), first ones:\n{}",
        anomalies.len(),
        anomalies[..anomalies.len().min(20)].join("\n")
    );
    assert!(
        acked >= 100,
        "only {acked} acknowledged puts: the workload did not run"
    );
    assert!(reads >= 50, "only {reads} reads: the workload did not run");
    assert!(
        leases.len() >= 5,
        "only {} leases: the lease client did not run",
        leases.len()
    );
    eprintln!(
        "chaos: no anomalies; HashKV {:#x} on every member",
        hashes[0]
    );
}

#[test]
fn faults_under_load_keep_a_linearizable_history() {
    let seed = env_or("CHAOS_SEED", {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    run(env_or("CHAOS_MEMBERS", 3), env_or("CHAOS_SECS", 60), seed);
}
