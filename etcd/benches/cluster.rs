// Three-member cluster benchmark, ours next to the real etcd 3.4 with the same flags in the
// same run: put and linearizable range throughput with 64 clients spread over the members,
// and leader failover time (kill -9 of the leader → first acknowledged write).
//
// Run: scripts/bench.sh cluster   (needs Debian's etcd-server: scripts/deps.sh)

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "../tests/cluster_support/mod.rs"]
mod cluster_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proto::etcdserverpb::{PutRequest, RangeRequest, kv_client::KvClient};
use tonic::transport::{Channel, Endpoint};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

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

/// Operations per second of 64 clients (16 per connection) spread over `urls` for `secs`.
async fn load(urls: &[String], secs: f64, op: &'static str) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_secs_f64(secs);
    let mut conns = Vec::new();
    for i in 0..4 {
        conns.push(client(&urls[i % urls.len()]).await.expect("connect"));
    }
    let mut tasks = Vec::new();
    for i in 0..64 {
        let mut c = conns[i % conns.len()].clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < stop_at {
                let ok = if op == "put" {
                    c.put(PutRequest {
                        key: format!("bench-{i}-{}", n % 1000).into_bytes(),
                        value: vec![b'v'; 256],
                        ..Default::default()
                    })
                    .await
                    .is_ok()
                } else {
                    c.range(RangeRequest {
                        key: format!("bench-{i}-{}", n % 1000).into_bytes(),
                        ..Default::default()
                    })
                    .await
                    .is_ok()
                };
                if ok {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    done.load(Ordering::Relaxed) as f64 / secs
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
        clients.push(client(u).await.expect("connect"));
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

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let only = std::env::var("BENCH_ONLY").ok();
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut results = Vec::new();
    for (name, bin) in [("etcd", "etcd"), ("ours", OURS)] {
        if only.as_deref().is_some_and(|o| o != name) {
            results.push((0.0, 0.0, 0.0));
            continue;
        }
        let mut c = cluster_support::Cluster::start(bin, &tmp.path().join(name), 3, false, &[]);
        let urls: Vec<String> = c.nodes.iter().map(|m| m.client_url.clone()).collect();
        let r = rt.block_on(async {
            let put = load(&urls, secs, "put").await;
            let range = load(&urls, secs, "range").await;
            let fo = failover(&mut c).await;
            (put, range, fo)
        });
        results.push(r);
    }
    let (e, o) = (results[0], results[1]);
    println!(
        "3-member cluster benchmark: {secs}s per load, 64 clients over all members, 256-byte values"
    );
    println!(
        "{:<44} {:>12} {:>12} {:>10}",
        "", "etcd 3.4", "etcd-rs", "ours/etcd"
    );
    for (n, a, b) in [
        ("put/s", e.0, o.0),
        ("range/s linearizable", e.1, o.1),
        ("failover s (kill -9 leader → first write)", e.2, o.2),
    ] {
        let ratio = if a > 0.0 { b / a } else { 0.0 };
        println!("{n:<44} {a:>12.2} {b:>12.2} {ratio:>10.2}");
    }
}
