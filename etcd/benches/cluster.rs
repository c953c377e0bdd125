// Three-member cluster benchmark: a 3-member etcd 3.4 cluster next to a 3-member etcd-rs
// cluster with the same flags in the same run, both up for the whole run on free loopback ports.
//
// The workloads are issue 15's table, the same as the one-member server benchmark (load/mod.rs
// describes each exactly). Clients spread their requests over the three members as clientv3
// 3.4's round-robin balancer does (request n of client c goes to member (c + n) % 3, so
// followers forward writes and serve linearizable reads by read index); BENCH_AT_LEADER=1
// sends everything to the leader instead. Server CPU is summed over the three members, peak
// RSS too; the db size is the largest member's. The raft term before and after the compaction
// shows whether it cost the cluster its leader. Last, leader failover time (kill -9 of the
// leader → first write acknowledged by another member). BENCH_MIXED=1 makes the second
// cluster a mixed one (ours leading two etcd 3.4 members).
//
// Run: scripts/bench.sh cluster   (needs Debian's etcd-server: scripts/deps.sh)
// Sizes: the same BENCH_* variables as benches/server.rs.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "../tests/cluster_support/mod.rs"]
mod cluster_support;

#[path = "load/mod.rs"]
mod load;

use std::time::{Duration, Instant};

use proto::etcdserverpb::{PutRequest, kv_client::KvClient};
use tonic::transport::{Channel, Endpoint};

async fn client(url: &str) -> Option<KvClient<Channel>> {
    Endpoint::from_shared(url.to_string())
        .ok()?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .ok()
        .map(KvClient::new)
}

/// Seconds from the kill of the leader to the first write acknowledged by another member.
async fn failover(c: &mut cluster_support::Cluster) -> f64 {
    let leader = c.leader(Duration::from_secs(10));
    let others: Vec<String> = (0..c.nodes.len())
        .filter(|i| *i != leader)
        .map(|i| c.nodes[i].client_url.clone())
        .collect();
    let mut clients = Vec::new();
    for u in &others {
        clients.push(client(u).await.expect("connect to a surviving member"));
    }
    let started = Instant::now();
    c.nodes[leader].kill9();
    loop {
        for cl in clients.iter_mut() {
            let ok = cl
                .put(PutRequest {
                    key: b"failover".to_vec(),
                    value: b"x".to_vec(),
                    ..Default::default()
                })
                .await
                .is_ok();
            if ok {
                return started.elapsed().as_secs_f64();
            }
        }
        if started.elapsed() > Duration::from_secs(30) {
            return f64::NAN;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Moves leadership to member `to` (etcdctl move-leader on the leader).
fn lead(c: &cluster_support::Cluster, to: usize) {
    let id = c.member_id_hex(&c.nodes[to].name);
    for _ in 0..50 {
        let l = c.leader(Duration::from_secs(10));
        if l == to {
            return;
        }
        let _ = c.nodes[l].etcdctl(&["move-leader", &id]);
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("leadership never moved to {}", c.nodes[to].name);
}

fn main() {
    let cfg = load::Config::from_env();
    let at_leader = std::env::var("BENCH_AT_LEADER").is_ok_and(|v| v == "1");
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    // BENCH_MIXED=1: the second cluster is etcd 3.4 with one member of ours (which leads),
    // to show what joining ours does to an etcd cluster.
    let mixed = std::env::var("BENCH_MIXED").is_ok_and(|v| v == "1");
    let mut clusters = load::SERVERS.map(|(name, bin)| {
        cfg.runs(name).then(|| {
            let dir = tmp.path().join(name);
            if mixed && bin != "etcd" {
                let c = cluster_support::Cluster::start_bins(&[bin, "etcd", "etcd"], &dir, &[]);
                lead(&c, 0);
                c
            } else {
                cluster_support::Cluster::start(bin, &dir, 3, false, &[])
            }
        })
    });
    let targets = std::array::from_fn(|i| {
        let c = clusters[i].as_ref()?;
        let members: Vec<String> = c.nodes.iter().map(|m| m.client_url.clone()).collect();
        let urls = if at_leader {
            vec![members[c.leader(Duration::from_secs(10))].clone()]
        } else {
            members.clone()
        };
        Some(load::Target {
            name: load::SERVERS[i].0,
            urls,
            members,
            pids: c
                .nodes
                .iter()
                .flat_map(|m| m.child.as_ref())
                .map(|ch| ch.id())
                .collect(),
            data_dirs: c.nodes.iter().map(|m| m.data_dir.clone()).collect(),
        })
    });
    let mut table = load::run_suite(&rt, &cfg, &targets, true);
    let mut fo = [0.0; 2];
    for (i, c) in clusters.iter_mut().enumerate() {
        if let Some(c) = c {
            fo[i] = rt.block_on(failover(c));
        }
    }
    table.row("failover s (kill -9 leader → first write)", fo, "");
    let spread = if at_leader {
        "all clients at the leader"
    } else {
        "clients round robin over the members"
    };
    let second = if mixed {
        "; the 'ours' column is etcd 3.4 ×2 + ours ×1 leading"
    } else {
        ""
    };
    table.print(&format!(
        "3-member cluster benchmark: {}s per timed load, 256-byte values, {spread}{second}",
        cfg.secs
    ));
}
