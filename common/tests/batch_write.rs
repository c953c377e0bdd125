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

/// `range_keys` lists exactly the keys `range` does, committed data under pending puts and
/// deletes (what a compaction scans while writers go on), with the same limit.
#[test]
fn range_keys_are_the_keys_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    let batch = Batch::new(
        db,
        BatchConfig {
            interval: Duration::from_secs(3600),
            limit: 100_000,
        },
    );
    let mut g = batch.begin();
    g.create_bucket(b"b");
    for i in 0..500u32 {
        g.put(b"b", format!("k{i:04}").as_bytes(), &[7u8; 300]);
    }
    g.finish().unwrap();
    batch.force_commit().unwrap();
    // Pending over the committed: some deleted, some overwritten, some new between them.
    let mut g = batch.begin();
    for i in (0..500u32).step_by(7) {
        g.delete(b"b", format!("k{i:04}").as_bytes());
    }
    for i in (0..500u32).step_by(11) {
        g.put(b"b", format!("k{i:04}").as_bytes(), b"new");
        g.put(b"b", format!("k{i:04}x").as_bytes(), b"added");
    }
    g.finish().unwrap();
    for (start, end, limit) in [
        (&b"k"[..], &b"l"[..], 0),
        (b"k0100", b"k0300", 0),
        (b"k0100", b"k0300", 37),
        (b"a", b"b", 0),
    ] {
        let pairs = batch.range(b"b", start, Some(end), limit).unwrap();
        let keys = batch.range_keys(b"b", start, end, limit).unwrap();
        let want: Vec<Vec<u8>> = pairs.into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, want, "[{start:?}, {end:?}) limit {limit}");
    }
    // 72 deleted, 7 of them (multiples of 77) put again, 46 added.
    assert_eq!(
        batch.range_keys(b"b", b"k", b"l", 0).unwrap().len(),
        500 - 72 + 7 + 46
    );
}

/// A group's sorted deletes (a compaction's batch) hide the keys at once, alone in the group
/// or beside other writes to the bucket, and a commit removes them from the file.
#[test]
fn sorted_deletes_in_a_group_are_seen_and_committed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    let batch = Batch::new(db, BatchConfig::default());
    let key = |i: u32| format!("k{i:05}").into_bytes();
    let mut g = batch.begin();
    g.create_bucket(b"b");
    for i in 0..3000 {
        g.put(b"b", &key(i), b"v");
    }
    g.finish().unwrap();
    batch.force_commit().unwrap();
    // Alone in its group: the bulk path.
    let mut g = batch.begin();
    g.delete_sorted(b"b", (0..1000).map(key).collect());
    assert_eq!(g.get(b"b", &key(999)).unwrap(), None);
    g.finish().unwrap();
    // Beside a put to the same bucket in the group.
    let mut g = batch.begin();
    g.put(b"b", &key(5000), b"w");
    g.delete_sorted(b"b", (1000..2000).step_by(2).map(key).collect());
    g.finish().unwrap();
    let seen = |b: &Batch| {
        b.range(b"b", b"k", Some(b"l"), 0)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>()
    };
    let mut want: Vec<Vec<u8>> = (1001..2000).step_by(2).map(key).collect();
    want.extend((2000..3000).map(key));
    want.push(key(5000));
    assert_eq!(seen(&batch), want);
    batch.force_commit().unwrap();
    assert_eq!(seen(&batch), want);
    let tx = batch.db().begin_read();
    assert_eq!(tx.get(b"b", &key(0)).unwrap(), None);
    assert_eq!(tx.get(b"b", &key(1001)).unwrap(), Some(&b"v"[..]));
}
