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
// leader → first write acknowledged by another member).
//
// BENCH_MIXED=1 makes the second cluster a mixed one (ours leading two etcd 3.4 members).
// BENCH_MIXED=all runs four clusters side by side, each a column with its ratio to the first:
// etcd 3.4 ×3; ours + etcd 3.4 ×2 with ours leading; the same with an etcd member leading (both
// leaders are checked before every workload); etcd-rs ×3. Its workloads default to keys,
// put64, range (BENCH_WORKLOADS picks others), then failover.
//
// Run: scripts/bench.sh cluster   (needs Debian's etcd-server: scripts/deps.sh)
// Sizes: the same BENCH_* variables as benches/server.rs.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "../tests/cluster_support/mod.rs"]
mod cluster_support;

#[path = "load/mod.rs"]
mod load;

/// The load generator shares the machine with the servers it measures: its own CPU per request
/// (glibc malloc was a tenth of it) takes cores from both, so it uses the allocator ours does.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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

/// One cluster the benchmark measures: its column, the binary of each member, and the member
/// made leader (None: whichever wins).
struct Layout {
    name: &'static str,
    column: load::Column,
    bins: [&'static str; 3],
    lead: Option<usize>,
}

/// The clusters of this run, by BENCH_MIXED (see the top of this file).
fn layouts(mixed: &str) -> Vec<Layout> {
    let ours = load::SERVERS[1].1;
    let layout = |name, heading, tag, bins, lead| Layout {
        name,
        column: load::Column { heading, tag },
        bins,
        lead,
    };
    let etcd = layout("etcd", "etcd 3.4", "etcd", ["etcd"; 3], None);
    let all_ours = layout("ours", "etcd-rs", "ours", [ours; 3], None);
    let mixed_cluster = [ours, "etcd", "etcd"];
    match mixed {
        "1" => vec![
            etcd,
            layout("ours", "etcd-rs", "ours", mixed_cluster, Some(0)),
        ],
        "all" => vec![
            etcd,
            layout(
                "mixed, ours leads",
                "mix ours-led",
                "mixO",
                mixed_cluster,
                Some(0),
            ),
            layout(
                "mixed, etcd leads",
                "mix etcd-led",
                "mixE",
                mixed_cluster,
                Some(1),
            ),
            all_ours,
        ],
        _ => vec![etcd, all_ours],
    }
}

fn main() {
    let mut cfg = load::Config::from_env();
    let at_leader = std::env::var("BENCH_AT_LEADER").is_ok_and(|v| v == "1");
    let mixed = std::env::var("BENCH_MIXED").unwrap_or_default();
    let four_way = mixed == "all";
    if four_way {
        cfg.default_workloads(&["keys", "put64", "range"]);
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let layouts = layouts(&mixed);
    // BENCH_ONLY picks by name (etcd, ours) in the two-column runs.
    let mut clusters: Vec<Option<cluster_support::Cluster>> = layouts
        .iter()
        .map(|l| {
            (four_way || cfg.runs(l.name)).then(|| {
                let dir = tmp.path().join(l.column.tag);
                let c = cluster_support::Cluster::start_bins(&l.bins, &dir, &[]);
                if let Some(i) = l.lead {
                    lead(&c, i);
                }
                c
            })
        })
        .collect();
    let targets: Vec<Option<load::Target>> = clusters
        .iter()
        .zip(&layouts)
        .map(|(c, l)| {
            let c = c.as_ref()?;
            let members: Vec<String> = c.nodes.iter().map(|m| m.client_url.clone()).collect();
            let urls = if at_leader {
                vec![members[c.leader(Duration::from_secs(10))].clone()]
            } else {
                members.clone()
            };
            Some(load::Target {
                name: l.name,
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
        })
        .collect();
    let mut table = load::Table::new(layouts.iter().map(|l| l.column), true);
    for (k, w) in load::WORKLOADS.iter().enumerate() {
        if !cfg.wants(w) {
            continue;
        }
        let out = load::rounds(&cfg, k, w, layouts.len(), |i| {
            let (Some(c), Some(t)) = (&clusters[i], &targets[i]) else {
                return None;
            };
            // A mixed cluster is measured under the leader it is meant to have.
            if let Some(l) = layouts[i].lead {
                lead(c, l);
            }
            Some(load::measure(&rt, w, t, &cfg, true))
        });
        table.add(w, &out);
    }
    let mut fo = vec![0.0; layouts.len()];
    for (i, c) in clusters.iter_mut().enumerate() {
        if let Some(c) = c {
            if let Some(l) = layouts[i].lead {
                lead(c, l);
            }
            fo[i] = rt.block_on(failover(c));
        }
    }
    table.row("failover s (kill -9 leader → first write)", fo, "");
    let spread = if at_leader {
        "all clients at the leader"
    } else {
        "clients round robin over the members"
    };
    let columns = match mixed.as_str() {
        "1" => "; the 'ours' column is etcd 3.4 ×2 + ours ×1 leading",
        "all" => {
            "; mix = ours ×1 + etcd 3.4 ×2, led by ours (mixO) or by an etcd member (mixE); \
             ratios are to etcd 3.4 ×3"
        }
        _ => "",
    };
    table.print(&format!(
        "3-member cluster benchmark: {}s per timed load, 256-byte values, {spread}{columns}",
        cfg.secs
    ));
}
