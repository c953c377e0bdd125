// Snapshots by --snapshot-count: writes produce .snap files (at most --max-snapshots kept),
// WAL segments beyond --max-wals are purged, and a restart starts from the newest snapshot.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use proto::etcdserverpb::{PutRequest, RangeRequest, kv_client::KvClient};
use support::RealEtcd;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

#[test]
fn snapshot_count_makes_snapshots_and_restart_uses_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ours");
    let flags = ["--snapshot-count", "100", "--max-snapshots", "3"];
    let mut ours = RealEtcd::start_bin(OURS, &dir, "node", &flags);
    let url = ours.client_url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = KvClient::connect(url.clone()).await.unwrap();
        for i in 0..1000 {
            c.put(PutRequest {
                key: format!("key-{i:04}").into_bytes(),
                value: format!("v{i}").into_bytes(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
    });
    let snaps: Vec<_> = std::fs::read_dir(dir.join("member/snap"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        .collect();
    assert!(
        !snaps.is_empty() && snaps.len() <= 3,
        "{} snap files",
        snaps.len()
    );

    ours.restart(OURS, &flags);
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    let restarted = log
        .lines()
        .rfind(|l| l.contains("restarting local member"))
        .expect("a restart line");
    let v: serde_json::Value = serde_json::from_str(restarted).unwrap();
    assert!(v["snapshot_index"].as_u64().unwrap() > 900, "{restarted}");
    rt.block_on(async {
        let mut c = KvClient::connect(url).await.unwrap();
        let r = c
            .range(RangeRequest {
                key: b"key-".to_vec(),
                range_end: b"key.".to_vec(),
                count_only: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.count, 1000);
        assert_eq!(r.header.unwrap().revision, 1001);
    });
}

#[test]
fn wal_segments_beyond_max_wals_are_purged_after_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ours");
    let flags = ["--snapshot-count", "10", "--max-wals", "1"];
    let mut ours = RealEtcd::start_bin(OURS, &dir, "node", &flags);
    let url = ours.client_url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // ~150 MB of entries: two cuts of the 64 MB segments, snapshots all along.
    rt.block_on(async {
        let mut c = KvClient::connect(url.clone()).await.unwrap();
        for i in 0..150 {
            c.put(PutRequest {
                key: format!("big-{i:03}").into_bytes(),
                value: vec![b'x'; 1 << 20],
                ..Default::default()
            })
            .await
            .unwrap();
        }
    });
    let wals = || -> usize {
        std::fs::read_dir(dir.join("member/wal"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
            .count()
    };
    assert_eq!(wals(), 1, "segments left beyond --max-wals 1");
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    assert!(log.contains("purged file"), "no purge logged");
    // What remains restarts with every key.
    ours.restart(OURS, &flags);
    rt.block_on(async {
        let mut c = KvClient::connect(url).await.unwrap();
        let r = c
            .range(RangeRequest {
                key: b"big-".to_vec(),
                range_end: b"big.".to_vec(),
                count_only: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.count, 150);
    });
}
