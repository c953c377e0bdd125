// Crash loop: clients write continuously while the server is killed -9 and restarted ten
// times; every acknowledged write must be there afterwards with its value, and each client's
// writes must carry strictly increasing revisions.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::etcdserverpb::{PutRequest, RangeRequest, kv_client::KvClient};
use support::RealEtcd;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const WRITERS: usize = 4;

/// (writer, n) → revision the server acknowledged.
type Acked = Arc<Mutex<BTreeMap<(usize, u64), i64>>>;

async fn writer(url: String, w: usize, acked: Acked, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(ch) = tonic::transport::Endpoint::from_shared(url.clone()).map(|e| {
            e.connect_timeout(Duration::from_millis(200))
                .timeout(Duration::from_secs(2))
                .connect_lazy()
        }) else {
            return;
        };
        let mut c = KvClient::new(ch);
        while !stop.load(Ordering::Relaxed) {
            let req = PutRequest {
                key: format!("w{w}-{n:06}").into_bytes(),
                value: format!("value {n} of writer {w}").into_bytes(),
                ..Default::default()
            };
            match c.put(req).await {
                Ok(resp) => {
                    let rev = resp.into_inner().header.map(|h| h.revision).unwrap_or(0);
                    acked.lock().unwrap().insert((w, n), rev);
                    n += 1;
                }
                Err(_) => {
                    // Not acknowledged: the same key is written again after the restart.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    break;
                }
            }
        }
    }
}

#[test]
fn acknowledged_writes_survive_a_crash_loop() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ours = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "node", &[]);
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            rt.spawn(writer(
                ours.client_url.clone(),
                w,
                acked.clone(),
                stop.clone(),
            ))
        })
        .collect();

    let mut seed = 0x1234_5678_9abc_def0u64;
    for _round in 0..10 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(150 + seed % 300));
        ours.restart(OURS, &[]);
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        rt.block_on(h).unwrap();
    }

    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 50,
        "too few writes were acknowledged: {}",
        acked.len()
    );
    eprintln!(
        "{} writes acknowledged across 10 kill -9 restarts",
        acked.len()
    );
    let url = ours.client_url.clone();
    rt.block_on(async move {
        let mut c = KvClient::connect(url).await.unwrap();
        let all = c
            .range(RangeRequest {
                key: b"w".to_vec(),
                range_end: b"x".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let stored: BTreeMap<Vec<u8>, (Vec<u8>, i64)> = all
            .kvs
            .into_iter()
            .map(|kv| (kv.key, (kv.value, kv.mod_revision)))
            .collect();
        let mut last_rev = [0i64; WRITERS];
        for ((w, n), rev) in &acked {
            let key = format!("w{w}-{n:06}").into_bytes();
            let (value, mod_rev) = stored.get(&key).unwrap_or_else(|| {
                panic!(
                    "acknowledged write {} is lost",
                    String::from_utf8_lossy(&key)
                )
            });
            assert_eq!(value, &format!("value {n} of writer {w}").into_bytes());
            assert_eq!(
                mod_rev,
                rev,
                "revision of {}",
                String::from_utf8_lossy(&key)
            );
            assert!(
                *rev > last_rev[*w],
                "revisions of writer {w} do not increase"
            );
            last_rev[*w] = *rev;
        }
    });
}
