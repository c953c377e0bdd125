// Atomic write groups of the batching backend: a commit, background or forced, never persists
// part of a group, and reads inside a group see its own writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::backend::{Batch, BatchConfig, Db, ReadTxn};

#[test]
fn groups_are_never_split_by_commits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    let batch = Arc::new(Batch::new(
        db,
        BatchConfig {
            interval: Duration::from_millis(1),
            limit: 7,
        },
    ));
    {
        let mut g = batch.begin();
        g.create_bucket(b"b");
        g.finish().unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let committer = {
        let (b, stop) = (batch.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                b.force_commit().unwrap();
            }
        })
    };
    let checker = {
        let (b, stop) = (batch.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // The committed state: every group wrote item-i and then count=i together.
                let tx = b.db().begin_read();
                if !tx.bucket_exists(b"b").unwrap() {
                    continue;
                }
                let count = tx
                    .get(b"b", b"count")
                    .unwrap()
                    .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
                    .unwrap_or(0);
                let mut c = tx.cursor(b"b").unwrap();
                let mut items = 0u64;
                let mut e = c.first().unwrap();
                while let Some((k, _)) = e {
                    if k.starts_with(b"item-") {
                        items += 1;
                    }
                    e = c.next().unwrap();
                }
                assert_eq!(items, count, "a commit split a write group");
                checks += 1;
            }
            checks
        })
    };
    for i in 1..=2000u64 {
        let mut g = batch.begin();
        g.put(b"b", format!("item-{i:06}").as_bytes(), b"v");
        // Reads inside the group see the group's own writes.
        assert_eq!(
            g.get(b"b", format!("item-{i:06}").as_bytes()).unwrap(),
            Some(b"v".to_vec())
        );
        g.put(b"b", b"count", &i.to_be_bytes());
        g.finish().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    committer.join().unwrap();
    let checks = checker.join().unwrap();
    assert!(checks > 0);
    batch.force_commit().unwrap();
    let tx = batch.db().begin_read();
    assert_eq!(
        tx.get(b"b", b"count").unwrap(),
        Some(&2000u64.to_be_bytes()[..])
    );
}
