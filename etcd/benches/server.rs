// Server benchmark, ours next to the real etcd 3.4 in the same run on the same disk: put
// throughput with 1 and 64 clients, linearizable and serializable range throughput, watch
// event delivery latency to 100 watchers, peak RSS after loading keys, and db size (also per
// revision written). Prints ratios (ours / etcd); absolute numbers drift.
//
// Run: scripts/bench.sh server   (needs Debian's etcd-server: scripts/deps.sh)

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proto::etcdserverpb::{PutRequest, RangeRequest, kv_client::KvClient};
use tonic::transport::Channel;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

async fn connect(url: &str) -> KvClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut c) = KvClient::connect(url.to_string()).await
            && c.range(RangeRequest {
                key: b"x".to_vec(),
                ..Default::default()
            })
            .await
            .is_ok()
        {
            return c;
        }
        assert!(Instant::now() < deadline, "server at {url} did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Operations per second of `clients` concurrent loops for `secs`.
async fn load(url: &str, clients: usize, secs: f64, op: &'static str) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    // Several clients share one connection, as clientv3 programs do.
    let conns: Vec<KvClient<Channel>> = {
        let mut v = Vec::new();
        for _ in 0..clients.div_ceil(16) {
            v.push(connect(url).await);
        }
        v
    };
    for i in 0..clients {
        let mut c = conns[i % conns.len()].clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < stop_at {
                let ok = match op {
                    "put" => c
                        .put(PutRequest {
                            key: format!("bench-{i}-{}", n % 1000).into_bytes(),
                            value: vec![b'v'; 256],
                            ..Default::default()
                        })
                        .await
                        .is_ok(),
                    "range-l" | "range-s" => c
                        .range(RangeRequest {
                            key: format!("load-{:06}", n % 10_000).into_bytes(),
                            serializable: op == "range-s",
                            ..Default::default()
                        })
                        .await
                        .is_ok(),
                    _ => false,
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

async fn load_keys(url: &str, n: usize) {
    let mut tasks = Vec::new();
    for w in 0..32 {
        let mut c = connect(url).await;
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(32) {
                let _ = c
                    .put(PutRequest {
                        key: format!("load-{i:06}").into_bytes(),
                        value: vec![b'x'; 256],
                        ..Default::default()
                    })
                    .await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Delivery latency of put events to `watchers` watchers (one stream each, over 4 connections):
/// from sending the put to each watcher's receipt. Returns (p50, p99) in milliseconds.
async fn watch_latency(url: &str, puts: usize, watchers: usize) -> (f64, f64) {
    use proto::etcdserverpb::{
        WatchCreateRequest, WatchRequest, watch_client::WatchClient, watch_request,
    };
    use std::collections::HashMap;
    use std::sync::Mutex;
    let sent: Arc<Mutex<HashMap<Vec<u8>, Instant>>> = Arc::default();
    let lat: Arc<Mutex<Vec<f64>>> = Arc::default();
    let mut chans = Vec::new();
    for _ in 0..4 {
        chans.push(
            tonic::transport::Endpoint::from_shared(url.to_string())
                .expect("url")
                .connect()
                .await
                .expect("connect"),
        );
    }
    let mut tasks = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(watchers.max(1));
    for i in 0..watchers {
        let mut wc = WatchClient::new(chans[i % 4].clone());
        let (sent, lat, ready) = (sent.clone(), lat.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let _ = tx
                .send(WatchRequest {
                    request_union: Some(watch_request::RequestUnion::CreateRequest(
                        WatchCreateRequest {
                            key: b"wl/".to_vec(),
                            range_end: b"wl0".to_vec(),
                            ..Default::default()
                        },
                    )),
                })
                .await;
            let Ok(resp) = wc
                .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
            else {
                return;
            };
            let mut stream = resp.into_inner();
            let mut seen = 0;
            while seen < puts {
                let Ok(Some(r)) = stream.message().await else {
                    return;
                };
                if r.created {
                    let _ = ready.send(()).await;
                    continue;
                }
                let now = Instant::now();
                for e in &r.events {
                    let Some(kv) = &e.kv else { continue };
                    if let Some(t) = sent.lock().unwrap_or_else(|e| e.into_inner()).get(&kv.key) {
                        lat.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((now - *t).as_secs_f64() * 1000.0);
                    }
                    seen += 1;
                }
            }
            drop(tx);
        }));
    }
    for _ in 0..watchers {
        let _ = ready_rx.recv().await;
    }
    let mut kv = connect(url).await;
    for i in 0..puts {
        let key = format!("wl/{i:05}").into_bytes();
        sent.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), Instant::now());
        let _ = kv
            .put(PutRequest {
                key,
                value: vec![b'v'; 256],
                ..Default::default()
            })
            .await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    let mut v = lat.lock().unwrap_or_else(|e| e.into_inner()).clone();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

/// A gauge from the server's /metrics (both servers serve it on the client port).
fn metric(url: &str, name: &str) -> f64 {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let Ok(mut s) = std::net::TcpStream::connect(host) else {
        return 0.0;
    };
    let req = format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n");
    let mut body = String::new();
    if s.write_all(req.as_bytes()).is_err() || s.read_to_string(&mut body).is_err() {
        return 0.0;
    }
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let keys: usize = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    let mut results = Vec::new();
    let only = std::env::var("BENCH_ONLY").ok();
    let watchers: usize = std::env::var("BENCH_WATCHERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    for (name, bin) in [("etcd", "etcd"), ("ours", OURS)] {
        if only.as_deref().is_some_and(|o| o != name) {
            results.push((name, (0.0, 0.0, 0.0, 0.0, (0.0, 0.0), 0), 0, 0, 0.0));
            continue;
        }
        // The test support starts a server on free ports and waits until it is healthy.
        let s = support::RealEtcd::start_bin(bin, &tmp.path().join(name), "bench", &[]);
        let url = s.client_url.clone();
        let r = rt.block_on(async {
            connect(&url).await;
            let put1 = load(&url, 1, secs, "put").await;
            let put64 = load(&url, 64, secs, "put").await;
            load_keys(&url, keys).await;
            let rl = load(&url, 64, secs, "range-l").await;
            let rs = load(&url, 64, secs, "range-s").await;
            let wl = watch_latency(&url, 200, watchers).await;
            let rev = connect(&url)
                .await
                .range(RangeRequest {
                    key: b"x".to_vec(),
                    ..Default::default()
                })
                .await
                .ok()
                .and_then(|r| r.into_inner().header)
                .map(|h| h.revision)
                .unwrap_or(0);
            (put1, put64, rl, rs, wl, rev)
        });
        let rss = s.child.as_ref().map(|c| peak_rss_kb(c.id())).unwrap_or(0);
        let in_use = metric(&url, "etcd_mvcc_db_total_size_in_use_in_bytes");
        let db = std::fs::metadata(s.data_dir.join("member/snap/db"))
            .map(|m| m.len())
            .unwrap_or(0);
        results.push((name, r, rss, db, in_use));
    }
    let (_, e, e_rss, e_db, e_use) = results[0];
    let (_, o, o_rss, o_db, o_use) = results[1];
    rows.push(("put/s, 1 client".into(), e.0, o.0));
    rows.push(("put/s, 64 clients".into(), e.1, o.1));
    rows.push(("range/s linearizable, 64 clients".into(), e.2, o.2));
    rows.push(("range/s serializable, 64 clients".into(), e.3, o.3));
    rows.push((
        format!("watch delivery ms p50, {watchers} watchers"),
        e.4.0,
        o.4.0,
    ));
    rows.push((
        format!("watch delivery ms p99, {watchers} watchers"),
        e.4.1,
        o.4.1,
    ));
    rows.push((
        format!("peak RSS KiB after {keys} keys"),
        e_rss as f64,
        o_rss as f64,
    ));
    rows.push(("db size bytes".into(), e_db as f64, o_db as f64));
    // The faster server writes more revisions in the same seconds: per revision is the fair
    // comparison of the two files.
    let per_rev = |db: u64, rev: i64| if rev > 0 { db as f64 / rev as f64 } else { 0.0 };
    rows.push((
        "db bytes per revision".into(),
        per_rev(e_db, e.5),
        per_rev(o_db, o.5),
    ));
    // The file grows in steps; the pages in use are what the data takes.
    rows.push((
        "db bytes in use per revision".into(),
        per_rev(e_use as u64, e.5),
        per_rev(o_use as u64, o.5),
    ));
    println!("server benchmark: {secs}s per load, 256-byte values, same machine and disk");
    println!(
        "{:<40} {:>14} {:>14} {:>10}",
        "", "etcd 3.4", "etcd-rs", "ours/etcd"
    );
    for (n, a, b) in rows {
        let ratio = if a > 0.0 { b / a } else { 0.0 };
        println!("{n:<40} {a:>14.2} {b:>14.2} {ratio:>10.2}");
    }
}
