// Snapshots by --snapshot-count: writes produce .snap files (at most --max-snapshots kept),
// WAL segments beyond --max-wals are purged, a restart starts from the newest snapshot, and
// Maintenance.Snapshot streams the db without holding it in memory.

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

/// Reads a Maintenance snapshot slowly, from a settled heap: its messages and the server's
/// heap growth (anonymous RSS over the settled base) at its peak.
async fn read_snapshot_slowly(
    m: &mut proto::etcdserverpb::maintenance_client::MaintenanceClient<tonic::transport::Channel>,
    pid: u32,
) -> (Vec<proto::etcdserverpb::SnapshotResponse>, u64) {
    let mut base = support::rss_anon_bytes(pid);
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let now = support::rss_anon_bytes(pid);
        let settled = now.abs_diff(base) < 1 << 20;
        base = now;
        if settled {
            break;
        }
    }
    let mut stream = m
        .snapshot(proto::etcdserverpb::SnapshotRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut blobs = Vec::new();
    let mut peak = 0u64;
    let mut n = 0;
    while let Some(msg) = stream.message().await.unwrap() {
        n += 1;
        if n % 64 == 0 {
            // Slow reader: the server must wait, not buffer ahead.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            peak = peak.max(support::rss_anon_bytes(pid).saturating_sub(base));
        }
        blobs.push(msg);
    }
    (blobs, peak)
}

/// A client that reads a 96 MiB db's snapshot slowly: the server sends it as the client takes
/// it, from one read transaction over the mapped file, so its heap grows by a few 32 KiB
/// messages, not by the db (which a whole image in memory would add).
#[test]
fn maintenance_snapshot_streams_without_holding_the_db_in_memory() {
    use proto::etcdserverpb::{
        RequestOp, TxnRequest, maintenance_client::MaintenanceClient, request_op::Request,
    };
    use sha2::Digest;
    const TXNS: usize = 96;
    const PER_TXN: usize = 100;
    const VALUE: usize = 10 * 1024;
    /// What the writes make the db at least (96 txns x 100 x 10 KiB, less page sharing).
    const DB_AT_LEAST: u64 = 90 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ours");
    let ours = RealEtcd::start_bin(OURS, &dir, "node", &["--max-txn-ops", "1000"]);
    let pid = ours.child.as_ref().map(|c| c.id()).expect("server pid");
    let url = ours.client_url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (blobs, sha, (first_growth, peak_growth), db_bytes) = rt.block_on(async {
        let mut c = KvClient::connect(url.clone()).await.unwrap();
        for t in 0..TXNS {
            let success = (0..PER_TXN)
                .map(|i| RequestOp {
                    request: Some(Request::RequestPut(PutRequest {
                        key: format!("big/{t:03}/{i:03}").into_bytes(),
                        value: vec![b'v'; VALUE],
                        ..Default::default()
                    })),
                })
                .collect();
            c.txn(TxnRequest {
                success,
                ..Default::default()
            })
            .await
            .unwrap();
        }
        // The writes' last backend commits may not have run yet, and a snapshot begins by
        // committing them: that commit's pages were most likely what CI twice measured as the
        // snapshot's (37 and 48 MiB). So the first snapshot is taken once the db file holds
        // most of the writes (at 90 MiB a fifth of the final 113 MiB may still be pending) and
        // is bounded loosely: the commit fits, a whole image in memory does not. The second,
        // with nothing left to commit, is bounded tightly; it alone would not do, since
        // jemalloc keeps what the first freed and the second could reuse it unseen.
        let db_file = dir.join("member/snap/db");
        let committed_by = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::metadata(&db_file).map_or(0, |m| m.len()) < DB_AT_LEAST {
            assert!(
                std::time::Instant::now() < committed_by,
                "the writes were not committed to {} within 60 s",
                db_file.display()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let mut m = MaintenanceClient::connect(url.clone())
            .await
            .unwrap()
            .max_decoding_message_size(usize::MAX);
        let (_, first_peak) = read_snapshot_slowly(&mut m, pid).await;
        let (mut blobs, peak) = read_snapshot_slowly(&mut m, pid).await;
        let sha = blobs.pop().expect("checksum message").blob;
        let db: u64 = blobs.iter().map(|b| b.blob.len() as u64).sum();
        (blobs, sha, (first_peak, peak), db)
    });
    assert!(db_bytes > DB_AT_LEAST, "the db is only {db_bytes} bytes");
    // etcd's framing: remaining_bytes counts down to 0, then the sha256 of the db alone.
    let mut left = db_bytes;
    let mut hasher = sha2::Sha256::new();
    for b in &blobs {
        left -= b.blob.len() as u64;
        assert_eq!(b.remaining_bytes, left);
        hasher.update(&b.blob);
    }
    assert_eq!(sha, hasher.finalize().to_vec(), "the trailing sha256");
    eprintln!(
        "snapshot of {db_bytes} bytes; server heap grew by at most {first_growth} bytes (first, \
         with the last commit) and {peak_growth} bytes (second)"
    );
    assert!(
        first_growth < 64 << 20,
        "the server's heap grew by {first_growth} bytes while sending a {db_bytes}-byte snapshot \
         (and committing the last writes)"
    );
    assert!(
        peak_growth < 32 << 20,
        "the server's heap grew by {peak_growth} bytes while sending a {db_bytes}-byte snapshot"
    );
}
