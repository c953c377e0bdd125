// Issue 19: a write burst on a 200k-key store must keep resident only the db pages it needs,
// measured as the resident pages of the db file's mapping in this process (/proc/self/smaps).
//
// The writes go through the applier (`apply::kv::put`, one write transaction per request as
// the apply loop runs them) over the real backend. Pages the backend writes (pwritev) are not
// mapped into the process; only reads through the map make pages resident. A put that reads
// the value it replaces reads a random page of the file on every put, so a burst of random
// overwrites maps nearly the whole file; a put that reads what it needs (the tree's right edge
// where the new revision goes, the root bucket, the freelist, once per commit) maps a few
// fault-around windows per commit. The bound below is derived from those pages, with room for
// every page the burst writes as well, and is a fraction of the file.

use std::sync::Arc;
use std::time::Duration;

use common::backend::{Batch, BatchConfig, Db};
use etcd::apply::kv::{self, NoLeases};
use etcd::mvcc::KvStore;
use prost::Message;
use proto::etcdserverpb::PutRequest;
use proto::mvccpb::KeyValue;

const KEYS: usize = 200_000;
const BURST: usize = 20_000;
/// Puts per backend commit during the burst (the test commits itself, so the count is exact).
const PER_COMMIT: usize = 1_000;
const VALUE: usize = 256;
const PAGE: u64 = 4096;
/// Pages a commit reads through the map at most: the `key` bucket's right edge (3 levels for
/// 200k revisions of this size; 4 allowed), the root bucket's page and the freelist page.
const PAGES_READ_PER_COMMIT: u64 = 6;
/// Linux maps up to this much around a read fault of a file mapping from the page cache
/// (`fault_around_bytes`, 64 KiB by default).
const FAULT_AROUND: u64 = 64 << 10;
const DB_NAME: &str = "residency.db";

/// Resident bytes of this process's mappings of the db file.
fn db_resident_bytes() -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let mut in_db = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: address range, perms, offset, device, inode, path.
            in_db = line.trim_end().ends_with(&format!("/{DB_NAME}"));
        } else if in_db && let Some(v) = line.strip_prefix("Rss:") {
            kib += v
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .expect("Rss value in kB");
        }
    }
    kib * 1024
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:07}").into_bytes()
}

fn put(k: Vec<u8>) -> PutRequest {
    PutRequest {
        key: k,
        value: vec![b'v'; VALUE],
        ..Default::default()
    }
}

/// splitmix64: the same random keys on every run.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn a_write_burst_keeps_only_the_pages_it_touches_resident() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = Db::open(dir.path().join(DB_NAME)).expect("open db");
    // Commits happen only when the test asks.
    let cfg = BatchConfig {
        interval: Duration::from_secs(3600),
        limit: usize::MAX,
    };
    let store = KvStore::open(Arc::new(Batch::new(db, cfg))).expect("open store");
    let mut index = 0;
    // The store: 200k keys, 1000 puts per request (a txn's worth), one commit.
    for chunk in 0..KEYS / 1000 {
        let mut w = store.write();
        for i in 0..1000 {
            kv::put(&mut w, &put(key((chunk * 1000 + i) as u64)), &NoLeases).expect("put");
        }
        index += 1;
        w.end(index, 1).expect("end");
    }
    store.backend().force_commit().expect("commit");
    let file = std::fs::metadata(dir.path().join(DB_NAME))
        .expect("db file")
        .len();
    let before = db_resident_bytes();

    // The burst: random keys of the store overwritten, one request each.
    let mut seed = 19;
    for n in 0..BURST {
        let mut w = store.write();
        let k = next(&mut seed) % KEYS as u64;
        kv::put(&mut w, &put(key(k)), &NoLeases).expect("put");
        index += 1;
        w.end(index, 1).expect("end");
        if (n + 1) % PER_COMMIT == 0 {
            store.backend().force_commit().expect("commit");
        }
    }
    store.backend().force_commit().expect("commit");
    let after = db_resident_bytes();

    // What the burst needs: every page it writes (each revision a leaf element of 16 bytes,
    // its 17-byte revision key and the key-value), and per commit, one fault-around window
    // for each page it reads.
    let kv_len = KeyValue {
        key: key(0),
        create_revision: 1 << 20,
        mod_revision: 1 << 20,
        version: 1 << 10,
        value: vec![b'v'; VALUE],
        lease: 0,
    }
    .encoded_len() as u64;
    let written = (BURST as u64 * (16 + 17 + kv_len)).div_ceil(PAGE) * PAGE;
    let commits = (BURST / PER_COMMIT) as u64 + 2;
    let bound = written + commits * PAGES_READ_PER_COMMIT * FAULT_AROUND;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "db file {:.1} MiB; resident {:.1} MiB after the load, {:.1} MiB after the burst; bound {:.1} MiB",
        mib(file),
        mib(before),
        mib(after),
        mib(bound)
    );
    // The bound must mean something: well below the file, which the old code mapped whole.
    assert!(
        bound * 3 < file,
        "the bound ({bound} bytes) is too close to the file size ({file})"
    );
    assert!(
        after <= bound,
        "{:.1} MiB of the {:.1} MiB db file resident after {BURST} puts (bound {:.1} MiB): \
         some request reads pages it does not need",
        mib(after),
        mib(file),
        mib(bound)
    );
}
