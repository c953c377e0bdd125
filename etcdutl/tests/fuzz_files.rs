// Property-based fuzzing of etcdutl's readers of a member's files: check, inspect (WAL and
// db), hashkv, snapshot status and the WAL walk, on mutations of a data dir made by restore.
//
// common/tests/fuzz_formats.rs fuzzes the formats themselves; this file adds what etcdutl
// decodes on top (raft entries as requests, revision keys, mvccpb values, members, the sha256
// trailer). A case fails when a reader panics or gives no answer within the watchdog's `CASE_TIMEOUT`;
// errors and reported faults are expected. PROPTEST_CASES raises the default 512 cases; a
// failure's seed is kept in etcdutl/proptest-regressions/fuzz_files.txt.

#[path = "../../common/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::backend::{Db, buckets};
use etcdutl::datadir::DataDir;
use etcdutl::snapshot::{self, RestoreConfig};
use etcdutl::{check, hashkv, inspect};
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message;
use proto::leasepb;
use proto::mvccpb::KeyValue;

/// This file's saved failures, replayed first.
const REGRESSIONS: &str = "proptest-regressions/fuzz_files.txt";

fn rev_key(main: i64, sub: i64) -> Vec<u8> {
    let mut k = main.to_be_bytes().to_vec();
    k.push(b'_');
    k.extend_from_slice(&sub.to_be_bytes());
    k
}

/// An etcd-shaped db: revisions of mvccpb values, a tombstone, a compaction, a lease.
fn etcd_db(path: &Path) {
    let db = Db::open(path).expect("create db");
    let mut tx = db.begin_write().expect("begin");
    for b in buckets::ALL {
        tx.create_bucket(b).expect("bucket");
    }
    for rev in 2..=300i64 {
        let key = format!("key-{}", rev % 40).into_bytes();
        let kv = KeyValue {
            key: key.clone(),
            create_revision: 2,
            mod_revision: rev,
            version: rev - 1,
            value: format!("value at {rev}")
                .repeat(1 + rev as usize % 5)
                .into_bytes(),
            lease: if rev % 50 == 0 { 0x1234 } else { 0 },
        };
        let mut k = rev_key(rev, 0);
        if rev == 150 {
            k.push(b't');
        }
        tx.put(buckets::KEY, &k, &kv.encode_to_vec()).expect("put");
    }
    tx.put(buckets::META, b"consistent_index", &300u64.to_be_bytes())
        .expect("put");
    tx.put(buckets::META, b"finishedCompactRev", &rev_key(10, 0))
        .expect("put");
    tx.put(buckets::META, b"scheduledCompactRev", &rev_key(10, 0))
        .expect("put");
    let lease = leasepb::Lease {
        id: 0x1234,
        ttl: 60,
        remaining_ttl: 0,
    };
    tx.put(
        buckets::LEASE,
        &0x1234u64.to_be_bytes(),
        &lease.encode_to_vec(),
    )
    .expect("put");
    tx.commit().expect("commit");
}

/// The files of a data dir restored from an etcd-shaped snapshot: (path relative to the data
/// dir, bytes).
fn fixture() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static F: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let snap = tmp.path().join("snapshot.db");
        etcd_db(&snap);
        let data_dir = tmp.path().join("m.etcd");
        snapshot::restore(&RestoreConfig {
            snapshot: snap,
            data_dir: Some(data_dir.clone()),
            skip_hash_check: true,
            ..RestoreConfig::default()
        })
        .expect("restore");
        let mut files = Vec::new();
        let mut stack = vec![data_dir.clone()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).expect("read dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(&data_dir).expect("inside").to_path_buf();
                    let mut b = fs::read(&p).expect("read");
                    if rel.extension().is_some_and(|e| e == "wal") {
                        // The segment is preallocated to 64 MB of zeros, which readers stop at;
                        // keep a sector of them so each case does not write 64 MB.
                        let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
                        b.truncate((end.div_ceil(8) * 8 + 512).min(b.len()));
                    }
                    files.push((rel, b));
                }
            }
        }
        files.sort();
        files
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: Index, bit: u8 },
    Byte { at: Index, v: u8 },
    Truncate { at: Index },
    Insert { at: Index, bytes: Vec<u8> },
    Word { at: Index, width: usize, v: u64 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u32::MAX as u64),
        Just(u64::MAX),
        Just(1 << 60),
        any::<u64>(),
    ];
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<Index>(), any::<u8>()).prop_map(|(at, v)| Mutation::Byte { at, v }),
        any::<Index>().prop_map(|at| Mutation::Truncate { at }),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (
            any::<Index>(),
            prop::sample::select(vec![1usize, 2, 4, 8]),
            word
        )
            .prop_map(|(at, width, v)| Mutation::Word { at, width, v }),
    ]
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    if b.is_empty() {
        return;
    }
    let len = b.len();
    match m {
        Mutation::Flip { at, bit } => b[at.index(len)] ^= 1 << bit,
        Mutation::Byte { at, v } => b[at.index(len)] = *v,
        Mutation::Truncate { at } => b.truncate(at.index(len)),
        Mutation::Insert { at, bytes } => {
            let i = at.index(len + 1);
            b.splice(i..i, bytes.iter().copied());
        }
        Mutation::Word { at, width, v } => {
            let i = at.index(len) / width * width;
            if i + width <= len {
                b[i..i + width].copy_from_slice(&v.to_le_bytes()[..*width]);
            }
        }
    }
}

/// Every etcdutl reader of a data dir and its files.
fn exercise(data_dir: &Path) {
    let layout = DataDir::layout(data_dir, None);
    if let Ok(d) = DataDir::open(data_dir, None) {
        let _ = check::check(&d);
    }
    let _ = check::walk_wal(&layout.wal_dir);
    let _ = inspect::dump_wal(&layout.wal_dir, 0, &[]).map(|d| inspect::format_wal_simple(&d));
    let _ = inspect::dump_db(&layout.db).map(|d| inspect::format_db(&d, true));
    let _ = hashkv::hash_kv(&layout.db, 0);
    let _ = hashkv::hash_kv(&layout.db, 100);
    let _ = snapshot::status(&layout.db);
}

fn run_case(file: &Index, muts: &[Mutation]) {
    let files = fixture();
    let target = file.index(files.len());
    let mut out: Vec<(PathBuf, Vec<u8>)> = files.clone();
    for m in muts {
        apply(&mut out[target].1, m);
    }
    fuzz_support::watchdog("etcdutl", move || {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data_dir = tmp.path().join("m.etcd");
        for (rel, b) in &out {
            let p = data_dir.join(rel);
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).expect("mkdir");
            }
            fs::write(&p, b).expect("write");
        }
        exercise(&data_dir);
    });
}

#[test]
fn fixture_is_sound() {
    let files = fixture();
    assert!(files.iter().any(|(p, _)| p.ends_with("db")), "{files:?}");
    assert!(
        files
            .iter()
            .any(|(p, _)| p.extension().is_some_and(|e| e == "wal"))
    );
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("m.etcd");
    for (rel, b) in files {
        let p = data_dir.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, b).unwrap();
    }
    let d = DataDir::open(&data_dir, None).unwrap();
    let rep = check::check(&d).unwrap();
    assert_eq!(rep.faults(), 0, "{rep:?}");
    let h = hashkv::hash_kv(&d.db, 0).unwrap();
    assert_eq!(h.hash_revision, 300);
}

proptest! {
    #![proptest_config(fuzz_support::config(512, REGRESSIONS))]

    #[test]
    fn etcdutl_readers_never_panic(
        file in any::<Index>(),
        muts in prop::collection::vec(mutation(), 1..4),
    ) {
        run_case(&file, &muts);
    }
}
