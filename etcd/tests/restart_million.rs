// Issue 19: a member killed -9 on a data dir of a million keys, with a WAL tail of writes the
// backend had not committed yet, restarts and serves every acknowledged key with its value.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::etcdserverpb::{
    PutRequest, RangeRequest, RequestOp, TxnRequest, kv_client::KvClient, request_op,
};
use support::RealEtcd;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
/// Keys loaded before the crash (ETCD_RS_RESTART_KEYS overrides, for a quick local run).
const KEYS: usize = 1_000_000;
/// Puts per txn while loading (the server is started with --max-txn-ops of this).
const PER_TXN: usize = 1_000;
const LOADERS: usize = 4;
const TAIL_WRITERS: usize = 4;
/// Keys read back per range while checking.
const PAGE: i64 = 20_000;

fn keys() -> usize {
    std::env::var("ETCD_RS_RESTART_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KEYS)
}

fn key(i: usize) -> Vec<u8> {
    format!("k/{i:07}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    format!("v{i}").into_bytes()
}

async fn client(url: &str) -> KvClient<tonic::transport::Channel> {
    KvClient::connect(url.to_string())
        .await
        .expect("connect")
        .max_decoding_message_size(256 << 20)
}

/// Loads loader `l`'s share of keys `[0, n)`: every LOADERS-th txn of PER_TXN puts.
async fn load(url: String, l: usize, n: usize) {
    let mut c = client(&url).await;
    let txns = n.div_ceil(PER_TXN);
    for t in (l..txns).step_by(LOADERS) {
        let ops = (t * PER_TXN..((t + 1) * PER_TXN).min(n))
            .map(|i| RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: key(i),
                    value: value(i),
                    ..Default::default()
                })),
            })
            .collect();
        c.txn(TxnRequest {
            success: ops,
            ..Default::default()
        })
        .await
        .expect("load txn");
    }
}

/// Writes `t/<w>-<n>` until stopped or refused, recording each acknowledged key.
async fn tail_writer(url: String, w: usize, stop: Arc<AtomicBool>, acked: Arc<Mutex<Vec<String>>>) {
    let mut c = client(&url).await;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let k = format!("t/{w}-{n:06}");
        let put = c.put(PutRequest {
            key: k.clone().into_bytes(),
            value: k.clone().into_bytes(),
            ..Default::default()
        });
        match tokio::time::timeout(Duration::from_secs(2), put).await {
            Ok(Ok(_)) => acked.lock().unwrap().push(k),
            _ => return,
        }
        n += 1;
    }
}

#[test]
fn a_million_keys_and_a_wal_tail_survive_kill_9() {
    let n = keys();
    let tmp = tempfile::tempdir().expect("temp dir");
    let flags = [
        "--max-txn-ops",
        "1000",
        "--quota-backend-bytes",
        "8589934592",
    ];
    let mut ours = RealEtcd::start_bin(OURS, &tmp.path().join("m"), "m", &flags);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let url = ours.client_url.clone();
    let started = Instant::now();
    rt.block_on(async {
        let loaders: Vec<_> = (0..LOADERS)
            .map(|l| tokio::spawn(load(url.clone(), l, n)))
            .collect();
        for l in loaders {
            l.await.expect("loader");
        }
    });
    eprintln!("loaded {n} keys in {:?}", started.elapsed());

    // The tail: single puts while the member is killed, most of them only in the WAL (the
    // backend commits every 100 ms).
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..TAIL_WRITERS)
        .map(|w| rt.spawn(tail_writer(url.clone(), w, stop.clone(), acked.clone())))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    ours.kill9();
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for w in writers {
            w.await.expect("tail writer");
        }
    });
    let tail = acked.lock().unwrap().clone();
    assert!(
        !tail.is_empty(),
        "no tail write was acknowledged before the kill"
    );

    let restart = Instant::now();
    ours.restart_within(OURS, &flags, Duration::from_secs(300));
    eprintln!(
        "{} tail writes acknowledged; restart took {:?}",
        tail.len(),
        restart.elapsed()
    );

    rt.block_on(async {
        let mut c = client(&ours.client_url).await;
        // Every loaded key, in key order, with its value.
        let mut next = 0usize;
        let mut from = key(0);
        loop {
            let r = c
                .range(RangeRequest {
                    key: from.clone(),
                    range_end: b"k0".to_vec(),
                    limit: PAGE,
                    ..Default::default()
                })
                .await
                .expect("range")
                .into_inner();
            for kv in &r.kvs {
                assert_eq!(kv.key, key(next), "key {next} missing or out of order");
                assert_eq!(kv.value, value(next), "key {next}: wrong value");
                next += 1;
            }
            if !r.more {
                break;
            }
            from = r.kvs.last().expect("a page").key.clone();
            from.push(0);
        }
        assert_eq!(next, n, "loaded keys served after the restart");
        // Every acknowledged tail write.
        let r = c
            .range(RangeRequest {
                key: b"t/".to_vec(),
                range_end: b"t0".to_vec(),
                ..Default::default()
            })
            .await
            .expect("range tail")
            .into_inner();
        let served: std::collections::HashSet<Vec<u8>> =
            r.kvs.iter().map(|kv| kv.key.clone()).collect();
        for k in &tail {
            assert!(served.contains(k.as_bytes()), "acknowledged {k} lost");
        }
    });
}
