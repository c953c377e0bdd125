// The MVCC store over the real backend: revisions and versions as etcd assigns them, reads of
// the past, compaction, restart, and the same data as the real etcd 3.4 on its own db file.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::Arc;

use common::backend::{Batch, BatchConfig, Db};
use etcd::mvcc::{KeyRange, KvStore, MvccError};
use proto::mvccpb::event::EventType;

fn open(path: &Path) -> Arc<KvStore> {
    let db = Db::open(path).unwrap();
    KvStore::open(Arc::new(Batch::new(db, BatchConfig::default()))).unwrap()
}

fn one(key: &[u8]) -> KeyRange<'_> {
    KeyRange::new(key, b"")
}

#[test]
fn revisions_versions_and_reads_of_the_past() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("db"));
    assert_eq!(s.current_rev(), 1);

    let mut w = s.write();
    assert_eq!(w.put(b"foo", b"bar", 0).unwrap(), None);
    let (events, rev) = w.end(5, 2).unwrap();
    assert_eq!(rev, 2);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].r#type, EventType::Put as i32);

    let mut w = s.write();
    let prev = w.put(b"foo", b"baz", 0).unwrap().unwrap();
    assert_eq!(prev.value, b"bar");
    w.put(b"zoo", b"1", 7).unwrap();
    // Inside the txn, reads see its own writes.
    assert_eq!(w.range(one(b"zoo"), 0, 0).unwrap().kvs[0].value, b"1");
    w.end(6, 2).unwrap();
    assert_eq!(s.consistent_index(), 6);

    let now = s.range(KeyRange::new(b"a", b"\0"), 0, 0).unwrap();
    assert_eq!(now.rev, 3);
    let foo = &now.kvs[0];
    assert_eq!(
        (foo.create_revision, foo.mod_revision, foo.version),
        (2, 3, 2)
    );
    assert_eq!(now.kvs[1].lease, 7);
    let past = s.range(one(b"foo"), 2, 0).unwrap();
    assert_eq!(past.kvs[0].value, b"bar");
    assert!(matches!(
        s.range(one(b"foo"), 4, 0),
        Err(MvccError::FutureRev)
    ));

    // Limit with count of all matches.
    let lim = s.range(KeyRange::new(b"a", b"\0"), 0, 1).unwrap();
    assert_eq!((lim.kvs.len(), lim.count), (1, 2));

    let mut w = s.write();
    let gone = w.delete_range(KeyRange::new(b"f", b"g")).unwrap();
    assert_eq!(gone.len(), 1);
    let (ev, rev) = w.end(7, 2).unwrap();
    assert_eq!(rev, 4);
    assert_eq!(ev[0].r#type, EventType::Delete as i32);
    assert_eq!(ev[0].prev_kv.as_ref().unwrap().value, b"baz");
    assert!(s.range(one(b"foo"), 0, 0).unwrap().kvs.is_empty());

    // A txn that changes nothing does not create a revision.
    let mut w = s.write();
    assert!(w.delete_range(one(b"nothing")).unwrap().is_empty());
    assert_eq!(w.end(8, 2).unwrap().1, 4);

    // Recreated keys start a new generation.
    let mut w = s.write();
    w.put(b"foo", b"again", 0).unwrap();
    w.end(9, 3).unwrap();
    let foo = s.range(one(b"foo"), 0, 0).unwrap().kvs[0].clone();
    assert_eq!((foo.create_revision, foo.version), (5, 1));
}

#[test]
fn compaction_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let s = open(&path);
        for i in 0..10 {
            let mut w = s.write();
            w.put(b"k", format!("v{i}").as_bytes(), 0).unwrap();
            w.put(format!("other{i}").as_bytes(), b"x", 0).unwrap();
            w.end(10 + i, 2).unwrap();
        }
        let mut w = s.write();
        w.delete_range(KeyRange::new(b"other0", b"other5")).unwrap();
        w.end(20, 2).unwrap();
        assert_eq!(s.current_rev(), 12);
        s.compact(8).unwrap();
        assert!(matches!(s.compact(8), Err(MvccError::Compacted)));
        assert!(matches!(
            s.range(one(b"k"), 7, 0),
            Err(MvccError::Compacted)
        ));
        assert_eq!(s.range(one(b"k"), 8, 0).unwrap().kvs[0].value, b"v6");
        s.backend().force_commit().unwrap();
    }
    // After a restart: the same data, revision, consistent index and compaction point.
    let s = open(&path);
    assert_eq!(s.current_rev(), 12);
    assert_eq!(s.consistent_index(), 20);
    assert_eq!(s.compact_rev(), 8);
    assert!(matches!(
        s.range(one(b"k"), 7, 0),
        Err(MvccError::Compacted)
    ));
    assert_eq!(s.range(one(b"k"), 8, 0).unwrap().kvs[0].value, b"v6");
    let all = s.range(KeyRange::new(b"other", b"otherz"), 0, 0).unwrap();
    assert_eq!(all.kvs.len(), 5);
    assert_eq!(s.range(one(b"k"), 0, 0).unwrap().kvs[0].version, 10);
    // Only what reads at or after 8 need is left of "k": v6..v9.
    let rows = s
        .backend()
        .range(b"key", &[0u8; 17], Some(&[0xffu8; 18]), 0)
        .unwrap();
    let k_rows = rows
        .iter()
        .filter(|(_, v)| {
            use prost::Message;
            proto::mvccpb::KeyValue::decode(v.as_slice()).unwrap().key == b"k"
        })
        .count();
    assert_eq!(k_rows, 4);
}

/// A put that does not ask for the old value takes the creation revision and version from the
/// index, also after a restart that rebuilt the index from a compacted history, and its event
/// says when it lacks the prev_kv it had.
#[test]
fn puts_without_the_old_value_number_versions_like_etcd() {
    use etcd::mvcc::prev_kv_missing;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let s = open(&path);
        for i in 0..5 {
            let mut w = s.write();
            assert_eq!(
                w.put_with(b"k", format!("v{i}").as_bytes(), 0, false)
                    .unwrap(),
                None
            );
            w.end(10 + i, 2).unwrap();
        }
        // k: created at 2, versions 1..5 at revisions 2..6; compacting at 4 keeps 4..6 only.
        s.compact(4).unwrap();
        s.backend().force_commit().unwrap();
    }
    let s = open(&path);
    let mut w = s.write();
    assert_eq!(w.put_with(b"k", b"v5", 0, false).unwrap(), None);
    assert_eq!(w.put_with(b"new", b"n", 0, false).unwrap(), None);
    let (events, _) = w.end(20, 2).unwrap();
    let k = s.range(one(b"k"), 0, 0).unwrap().kvs[0].clone();
    assert_eq!((k.create_revision, k.version, k.mod_revision), (2, 6, 7));
    assert!(prev_kv_missing(&events[0]), "k had a value before");
    assert!(!prev_kv_missing(&events[1]), "new had none");

    // Asked for, the old value comes back and the versions still agree.
    let mut w = s.write();
    let prev = w.put_with(b"k", b"v6", 0, true).unwrap().unwrap();
    assert_eq!((prev.value.as_slice(), prev.version), (&b"v5"[..], 6));
    let (deleted, prevs) = w.delete_range_with(one(b"new"), false).unwrap();
    assert_eq!((deleted, prevs.len()), (1, 0));
    let (events, _) = w.end(21, 2).unwrap();
    assert_eq!(events[0].prev_kv.as_ref().unwrap().value, b"v5");
    assert!(
        prev_kv_missing(&events[1]),
        "a delete always replaces a value"
    );
    let k = s.range(one(b"k"), 0, 0).unwrap().kvs[0].clone();
    assert_eq!((k.create_revision, k.version), (2, 7));

    // While a watcher wants prev_kv, every write reads the old values into its events.
    let interest = s.prev_kv_interest();
    let mut w = s.write();
    let read = w.put_with(b"k", b"v7", 0, false).unwrap();
    assert_eq!(read.map(|p| p.value), Some(b"v6".to_vec()));
    let (events, _) = w.end(22, 2).unwrap();
    assert_eq!(events[0].prev_kv.as_ref().unwrap().value, b"v6");
    drop(interest);
    let mut w = s.write();
    w.put_with(b"k", b"v8", 0, false).unwrap();
    let (events, _) = w.end(23, 2).unwrap();
    assert!(events[0].prev_kv.is_none());
}

/// A write that began before a prev_kv watcher registered its interest did not read the old
/// value: the hub sends that watcher back to the history (which reads it) instead of
/// delivering the event without its prev_kv.
#[test]
fn a_prev_kv_watcher_is_never_handed_an_event_without_it() {
    use etcd::mvcc::watch_hub::WatchSpec;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("db"));
    let mut w = s.write();
    w.put_with(b"k", b"v1", 0, false).unwrap();
    w.end(1, 1).unwrap();
    let hub = s.watch_hub().clone();
    let stream = hub.open_stream(std::task::Waker::noop().clone());
    let mut w = s.write();
    assert_eq!(w.put_with(b"k", b"v2", 0, false).unwrap(), None);
    let _interest = s.prev_kv_interest();
    let spec = WatchSpec {
        key: b"k".to_vec(),
        range_end: Vec::new(),
        no_put: false,
        no_delete: false,
        prev_kv: true,
    };
    let from = hub.watch_from_now(&s, &stream, 7, spec);
    let (events, rev) = w.end(2, 1).unwrap();
    assert!(events[0].prev_kv.is_none());
    assert_eq!(rev, from);
    let deadline = Instant::now() + Duration::from_secs(10);
    let taken = loop {
        let t = hub.take(&stream);
        if !t.unsynced.is_empty() || !t.deliveries.is_empty() {
            break t;
        }
        assert!(Instant::now() < deadline, "revision {rev} never dispatched");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(taken.deliveries.is_empty());
    assert_eq!(taken.unsynced, vec![(7, rev)]);
}

/// A watcher (id 1) on key `k` of `s`, once the dispatcher sleeps: the hub, the watcher's
/// stream and the first revision it will get.
fn watcher_with_the_dispatcher_asleep(
    s: &KvStore,
) -> (
    Arc<etcd::mvcc::watch_hub::WatchHub>,
    etcd::mvcc::watch_hub::StreamHandle,
    i64,
) {
    use std::time::{Duration, Instant};
    let hub = s.watch_hub().clone();
    let stream = hub.open_stream(std::task::Waker::noop().clone());
    let spec = etcd::mvcc::watch_hub::WatchSpec {
        key: b"k".to_vec(),
        range_end: Vec::new(),
        no_put: false,
        no_delete: false,
        prev_kv: false,
    };
    let from = hub.watch_from_now(s, &stream, 1, spec);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !hub.dispatcher_asleep() {
        assert!(Instant::now() < deadline, "the dispatcher never waited");
        std::thread::sleep(Duration::from_millis(5));
    }
    (hub, stream, from)
}

/// The writes of one apply batch wake the dispatcher once, when the batch lets go of the
/// wake (not once per write): nothing is handed out while it holds it, and every revision of
/// the batch is handed out, in order, once it lets go.
#[test]
fn a_batch_holding_the_dispatchers_wake_gets_all_its_revisions_handed_out_after_it() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("db"));
    let (hub, stream, from) = watcher_with_the_dispatcher_asleep(&s);
    let held = hub.hold_wakes();
    for i in 0..3u64 {
        let mut w = s.write();
        w.put(b"k", format!("v{i}").as_bytes(), 0).unwrap();
        w.end(i + 1, 1).unwrap();
    }
    // Asleep when the hold began, the dispatcher is not woken by the batch's writes.
    std::thread::sleep(Duration::from_millis(100));
    assert!(hub.dispatcher_asleep());
    let taken = hub.take(&stream);
    assert!(
        taken.deliveries.is_empty(),
        "revisions handed out while the batch held the wake"
    );
    drop(held);
    assert_eq!(handed_out(&hub, &stream, 3), vec![from, from + 1, from + 2]);
}

/// A hold does not keep a long batch's revisions from the dispatcher: past a bound (256
/// revisions, a sixteenth of the recent events the store keeps) it is woken all the same.
#[test]
fn a_long_batch_holding_the_wake_still_wakes_the_dispatcher() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("db"));
    let (hub, stream, _) = watcher_with_the_dispatcher_asleep(&s);
    let _held = hub.hold_wakes();
    for i in 0..300u64 {
        let mut w = s.write();
        w.put(b"k", b"v", 0).unwrap();
        w.end(i + 1, 1).unwrap();
    }
    handed_out(&hub, &stream, 256);
}

/// The revisions handed out to `stream`, taken until there are at least `n` (10 s at most).
fn handed_out(
    hub: &etcd::mvcc::watch_hub::WatchHub,
    stream: &etcd::mvcc::watch_hub::StreamHandle,
    n: usize,
) -> Vec<i64> {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut revs = Vec::new();
    while revs.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} revisions handed out: {revs:?}",
            revs.len()
        );
        revs.extend(hub.take(stream).deliveries.iter().map(|d| d.rev));
        std::thread::sleep(Duration::from_millis(10));
    }
    revs
}

/// Reads the db file of a real etcd 3.4 and sees exactly what its etcdctl sees.
#[test]
fn reads_a_real_etcd_db_like_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let mut etcd = support::RealEtcd::start(&tmp.path().join("d"), "mvcc");
    etcd.etcdctl_ok(&["put", "a", "1"]);
    etcd.etcdctl_ok(&["put", "b", "2"]);
    etcd.etcdctl_ok(&["put", "a", "3"]);
    etcd.etcdctl_ok(&["del", "b"]);
    etcd.etcdctl_ok(&["put", "c", "4"]);
    let json = etcd.etcdctl_ok(&["get", "", "--from-key", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rev = v["header"]["revision"].as_i64().unwrap();
    etcd.stop();

    let db_path = etcd.data_dir.join("member/snap/db");
    let s = open(&db_path);
    assert_eq!(s.current_rev(), rev);
    assert!(s.consistent_index() > 0);
    let got = s.range(KeyRange::new(b"\0", b"\0"), 0, 0).unwrap();
    let want = v["kvs"].as_array().unwrap();
    assert_eq!(got.kvs.len(), want.len());
    for (g, w) in got.kvs.iter().zip(want) {
        assert_eq!(g.create_revision, w["create_revision"].as_i64().unwrap());
        assert_eq!(g.mod_revision, w["mod_revision"].as_i64().unwrap());
        assert_eq!(g.version, w["version"].as_i64().unwrap());
    }
    assert_eq!(got.kvs[0].value, b"3");
    // History is there too: "b" at the revision before its delete.
    assert_eq!(s.range(one(b"b"), 3, 0).unwrap().kvs[0].value, b"2");
}

#[test]
fn recent_events_in_memory_equal_the_backends() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("db"));
    for i in 0..40u32 {
        let index = u64::from(i) + 1;
        let mut w = s.write();
        w.put(
            format!("k{}", i % 7).as_bytes(),
            format!("v{i}").as_bytes(),
            0,
        )
        .unwrap();
        if i % 5 == 0 {
            w.put(b"txn-a", b"x", 0).unwrap();
            w.put(b"txn-b", b"y", 0).unwrap();
        }
        if i % 9 == 0 {
            w.delete_range(KeyRange::new(b"k", b"l")).unwrap();
        }
        w.end(index, 1).unwrap();
    }
    let cur = s.current_rev();
    for from in 2..=cur {
        for to in from..=cur {
            let mut mem = s
                .events_cached(from, to, 0)
                .expect("recent revisions are in memory");
            for e in &mut mem {
                e.prev_kv = None;
            }
            assert_eq!(mem, s.events(from, to, 0).unwrap(), "events {from}..={to}");
        }
    }
    // A limit still returns whole revisions.
    let limited = s.events_cached(2, cur, 3).unwrap();
    let last = limited
        .last()
        .and_then(|e| e.kv.as_ref())
        .map(|k| k.mod_revision)
        .unwrap();
    assert_eq!(
        limited.len(),
        s.events(2, last, 0).unwrap().len(),
        "the last revision is complete"
    );
    // Compacted history is never served from memory.
    s.compact(cur - 2).unwrap();
    assert!(s.events_cached(cur - 3, cur, 0).is_none());
    assert!(s.events_cached(cur - 2, cur, 0).is_some());
}

/// A Range and a read-only Txn while an apply is in progress (its write transaction open, its
/// writes half done) answer at once, from the revision before it: they take neither the
/// writer's lock nor the backend's, and never see half an apply.
#[test]
fn reads_during_a_long_apply_do_not_wait_for_it() {
    use etcd::apply::kv;
    use proto::etcdserverpb::{
        Compare, RangeRequest, RequestOp, TxnRequest, compare::CompareResult,
        compare::CompareTarget, compare::TargetUnion, request_op, response_op,
    };
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("db"));
    let mut w = s.write();
    for i in 0..1000 {
        w.put(format!("k{i:04}").as_bytes(), b"old", 0).unwrap();
    }
    w.end(1, 1).unwrap();
    let before = s.current_rev();

    // The "apply": overwrites every key, then waits (its transaction open) until the
    // readers are done, or gives up after a while so a blocked reader fails the test
    // instead of hanging it.
    let (half_done_tx, half_done_rx) = std::sync::mpsc::channel();
    let (readers_done_tx, readers_done_rx) = std::sync::mpsc::channel::<()>();
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            let mut w = s.write();
            for i in 0..1000 {
                w.put(format!("k{i:04}").as_bytes(), b"new", 0).unwrap();
            }
            half_done_tx.send(()).unwrap();
            let waited = readers_done_rx.recv_timeout(std::time::Duration::from_secs(20));
            w.end(2, 1).unwrap();
            waited.is_ok()
        })
    };
    half_done_rx.recv().unwrap();

    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let reader = {
        let s = s.clone();
        std::thread::spawn(move || {
            let range = kv::range(
                &s,
                &RangeRequest {
                    key: b"k".to_vec(),
                    range_end: b"l".to_vec(),
                    ..Default::default()
                },
            )
            .unwrap();
            let txn = TxnRequest {
                compare: vec![Compare {
                    key: b"k0000".to_vec(),
                    target: CompareTarget::Value as i32,
                    result: CompareResult::Equal as i32,
                    target_union: Some(TargetUnion::Value(b"old".to_vec())),
                    ..Default::default()
                }],
                success: vec![RequestOp {
                    request: Some(request_op::Request::RequestRange(RangeRequest {
                        key: b"k0999".to_vec(),
                        ..Default::default()
                    })),
                }],
                ..Default::default()
            };
            let mut view = s.read_view();
            let t = kv::read_only_txn(&mut view, &txn).unwrap();
            done_tx.send((range, t, view.rev())).unwrap();
        })
    };
    let (range, txn, view_rev) = done_rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the reads waited for the open write transaction");
    readers_done_tx.send(()).unwrap();
    reader.join().unwrap();
    assert!(
        writer.join().unwrap(),
        "the writer was not released by the readers"
    );

    assert_eq!(range.count, 1000);
    assert!(range.kvs.iter().all(|kv| kv.value == b"old"));
    assert_eq!(range.header.unwrap().revision, before);
    assert!(txn.succeeded, "the compare saw half an apply");
    assert_eq!(view_rev, before);
    match &txn.responses[0].response {
        Some(response_op::Response::ResponseRange(r)) => assert_eq!(r.kvs[0].value, b"old"),
        other => panic!("unexpected response {other:?}"),
    }
    // Once the apply ends, reads see all of it.
    let after = s.range(KeyRange::new(b"k", b"l"), 0, 0).unwrap();
    assert!(after.kvs.iter().all(|kv| kv.value == b"new"));
}

/// A compaction runs in the background: the write that schedules it ends at once, reads
/// below the compaction point are refused from then on, writes go on while the old
/// revisions are deleted, and once it finishes every current key is intact.
#[test]
fn compaction_runs_in_the_background_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    let s = KvStore::open_with(
        Arc::new(Batch::new(db, BatchConfig::default())),
        etcd::mvcc::CompactionConfig {
            batch_limit: 100,
            sleep_interval: std::time::Duration::from_millis(1),
        },
    )
    .unwrap();
    let mut index = 1;
    for round in 0..20 {
        let mut w = s.write();
        for k in 0..500 {
            w.put(
                format!("k{k:03}").as_bytes(),
                format!("v{round}").as_bytes(),
                0,
            )
            .unwrap();
        }
        w.end(index, 1).unwrap();
        index += 1;
    }
    let at = s.current_rev();
    let mut w = s.write();
    w.compact(at).unwrap();
    w.end(index, 1).unwrap();
    index += 1;
    assert!(matches!(
        s.range(one(b"k000"), at - 1, 0),
        Err(MvccError::Compacted)
    ));
    // Writes are applied while the worker deletes 9,500 old revisions in batches of 100.
    for k in 0..500 {
        let mut w = s.write();
        w.put(format!("k{k:03}").as_bytes(), b"after", 0).unwrap();
        w.end(index, 1).unwrap();
        index += 1;
    }
    s.wait_compactions();
    let now = s.range(KeyRange::new(b"k", b"l"), 0, 0).unwrap();
    assert_eq!(now.count, 500);
    assert!(now.kvs.iter().all(|kv| kv.value == b"after"));
    let at_compaction = s.range(KeyRange::new(b"k", b"l"), at, 0).unwrap();
    assert!(at_compaction.kvs.iter().all(|kv| kv.value == b"v19"));
    // Only the state at the compaction point and the writes after it are left.
    s.backend().force_commit().unwrap();
    let left = s
        .backend()
        .range(common::backend::buckets::KEY, &[0], Some(&[0xff]), 0)
        .unwrap()
        .len();
    assert_eq!(left, 500 + 500);
}

/// A compaction batch deletes up to the batch limit and reads past the revisions it keeps:
/// with kept and deleted revisions interleaved across many scan chunks, exactly the kept
/// ones are left.
#[test]
fn compaction_batches_count_deletions_and_keep_every_live_revision() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    let s = KvStore::open_with(
        Arc::new(Batch::new(db, BatchConfig::default())),
        etcd::mvcc::CompactionConfig {
            batch_limit: 7,
            sleep_interval: std::time::Duration::ZERO,
        },
    )
    .unwrap();
    // 3000 keys put once (kept), each followed by two puts of one hot key (all but its last
    // deleted), then a stretch of 500 hot puts with nothing kept.
    let mut index = 1;
    let mut put = |k: &[u8], v: &[u8]| {
        let mut w = s.write();
        w.put(k, v, 0).unwrap();
        w.end(index, 1).unwrap();
        index += 1;
    };
    for i in 0..3000 {
        put(format!("k{i:04}").as_bytes(), b"v");
        put(b"hot", b"a");
        put(b"hot", b"b");
    }
    for _ in 0..500 {
        put(b"hot", b"c");
    }
    let at = s.current_rev();
    let mut w = s.write();
    w.compact(at).unwrap();
    w.end(index, 1).unwrap();
    s.wait_compactions();
    s.backend().force_commit().unwrap();
    let left = s
        .backend()
        .range(common::backend::buckets::KEY, &[0], Some(&[0xff]), 0)
        .unwrap()
        .len();
    assert_eq!(
        left,
        3000 + 1,
        "the 3000 keys and the hot key's last revision"
    );
    let now = s.range(KeyRange::new(b"\0", b"\0"), 0, 0).unwrap();
    assert_eq!(now.count, 3001);
}

/// A streamed range counts the rest of its range after its last page: a compaction past the
/// view's revision in between must refuse the count (the index no longer knows that past),
/// not answer it from what is left.
#[test]
fn a_count_below_a_compaction_that_came_after_the_view_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("db"));
    let mut index = 1;
    let mut put = |key: &[u8]| {
        let mut w = s.write();
        w.put(key, b"v", 0).unwrap();
        w.end(index, 1).unwrap();
        index += 1;
    };
    put(b"a");
    put(b"b");
    let view = s.read_view();
    let at = view.rev();
    assert_eq!(view.count(KeyRange::new(b"a", b"c"), at).unwrap(), 2);
    put(b"a");
    put(b"b");
    let mut w = s.write();
    w.compact(s.current_rev()).unwrap();
    w.end(index, 1).unwrap();
    s.wait_compactions();
    assert!(matches!(
        view.count(KeyRange::new(b"a", b"c"), at),
        Err(MvccError::Compacted)
    ));
    assert!(matches!(
        view.count(KeyRange::new(b"a", b"c"), 0),
        Err(MvccError::Compacted)
    ));
}
