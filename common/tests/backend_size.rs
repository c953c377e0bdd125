// How big the db file gets: an etcd-shaped load must stay within what its data needs (no
// growth slack, full key-bucket pages, freed pages reused), and a commit that cannot grow the
// file must leave the db consistent.

use std::sync::Mutex;

use common::backend::{Db, ReadTxn, buckets};

/// The file-size limit test changes a process-wide limit: tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const PS: u64 = 4096;
/// About the size of an etcd mvccpb.KeyValue holding a 256-byte value and a short key.
const VALUE: usize = 300;

/// etcd's key-bucket key: revision main, '_', revision sub (17 bytes).
fn rev_key(main: u64) -> Vec<u8> {
    let mut k = main.to_be_bytes().to_vec();
    k.push(b'_');
    k.extend_from_slice(&0u64.to_be_bytes());
    k
}

/// Appends revisions `from..to` in commits of `per_commit`, each also setting the consistent
/// index, as the server's batch commits do. A reader opened after each commit lives until
/// after the next one (etcd's read txn is replaced at each commit the same way).
fn append(db: &Db, from: u64, to: u64, per_commit: u64) {
    let mut reader = None;
    let mut rev = from;
    while rev < to {
        let mut tx = db.begin_write().unwrap();
        let end = (rev + per_commit).min(to);
        for r in rev..end {
            tx.put_seq(buckets::KEY, &rev_key(r), &[b'v'; VALUE])
                .unwrap();
        }
        tx.put(buckets::META, b"consistent_index", &end.to_be_bytes())
            .unwrap();
        tx.commit().unwrap();
        reader = Some(db.begin_read());
        rev = end;
    }
    drop(reader);
}

fn file_len(db: &Db) -> u64 {
    std::fs::metadata(db.path()).unwrap().len()
}

#[test]
fn etcd_shaped_load_stays_as_small_as_its_data() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    let mut tx = db.begin_write().unwrap();
    for b in buckets::ALL {
        tx.create_bucket(b).unwrap();
    }
    tx.commit().unwrap();
    let keys = 30_000;
    append(&db, 1, keys + 1, 300);
    db.check().unwrap();
    let st = db.stats().unwrap();
    let kb = st.buckets.iter().find(|b| b.name == buckets::KEY).unwrap();
    assert_eq!(kb.keys, keys);
    // The file ends at the high-water mark, as etcd's: growth slack is file size for nothing.
    assert_eq!(
        file_len(&db),
        st.page_count * PS,
        "file length vs high-water mark"
    );
    // Appended keys fill their pages (etcd's 0.9 fill leaves 11 of these entries a page, 89.8%;
    // ours 12).
    let fill = kb.leaf_bytes as f64 / ((kb.leaf_pages + kb.overflow_pages) * PS) as f64;
    assert!(fill > 0.95, "key bucket leaf fill {fill:.3}");
    // Pages: full leaves of whole entries, their branches (1%), the metas, the root, the
    // freelist and what the last commits freed (a path of a few pages each). With 0.9 fill
    // the leaves alone would be 2728.
    let entry = 16 + 17 + VALUE as u64;
    let leaves = keys.div_ceil((PS - 16) / entry);
    let bound = leaves + leaves / 50 + 2 + 1 + 1 + 16;
    assert!(
        st.page_count <= bound,
        "{} pages for {leaves} leaves of data (bound {bound}); key bucket {kb:?}",
        st.page_count,
    );
    assert!(st.free_pages <= 16, "{} free pages", st.free_pages);

    // A compaction removes the older half; later appends reuse its pages instead of growing
    // the file.
    let hwm = st.page_count;
    let mut rev = 1;
    while rev <= keys / 2 {
        let mut tx = db.begin_write().unwrap();
        for r in rev..(rev + 1000).min(keys / 2 + 1) {
            tx.delete(buckets::KEY, &rev_key(r)).unwrap();
        }
        tx.commit().unwrap();
        rev += 1000;
    }
    append(&db, keys + 1, keys + 1 + keys / 2, 300);
    db.check().unwrap();
    let st = db.stats().unwrap();
    assert!(
        st.page_count <= hwm + hwm / 20,
        "high-water mark {} after compaction and as many appends, {hwm} before",
        st.page_count
    );
    assert_eq!(file_len(&db), st.page_count * PS);

    // Defrag packs the key bucket as full as appends do.
    db.defrag().unwrap();
    db.check().unwrap();
    let st = db.stats().unwrap();
    let kb = st.buckets.iter().find(|b| b.name == buckets::KEY).unwrap();
    let fill = kb.leaf_bytes as f64 / ((kb.leaf_pages + kb.overflow_pages) * PS) as f64;
    assert!(fill > 0.95, "key bucket leaf fill after defrag {fill:.3}");
    assert_eq!(file_len(&db), st.page_count * PS);
}

#[test]
fn a_commit_that_cannot_grow_the_file_leaves_the_db_consistent() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path).unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.create_bucket(buckets::KEY).unwrap();
    tx.create_bucket(buckets::META).unwrap();
    tx.commit().unwrap();
    append(&db, 1, 2000, 500);
    let len = file_len(&db);

    // Cap file sizes just above the current length, so the next big commit cannot grow it.
    // Safety: plain libc calls; SIGXFSZ is ignored so the failing write returns EFBIG instead
    // of killing the test process, and the old limit is restored before any assert.
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let failed = unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut old), 0);
        let cap = libc::rlimit {
            rlim_cur: len + PS,
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &cap), 0);
        let mut tx = db.begin_write().unwrap();
        for r in 2000..4000 {
            tx.put_seq(buckets::KEY, &rev_key(r), &[b'v'; VALUE])
                .unwrap();
        }
        let res = tx.commit();
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &old), 0);
        res
    };
    assert!(failed.is_err(), "the commit past the size cap succeeded");
    assert_eq!(
        db.begin_read()
            .range(buckets::KEY, b"", Some(b"\xff"), 0)
            .unwrap()
            .len(),
        1999
    );

    // The pages the failed commit took above the high-water mark must not be handed out as
    // free ones: the next commits would write outside the image or twice into one page.
    append(&db, 2000, 6000, 500);
    db.check().unwrap();
    drop(db);
    let db = Db::open(&path).unwrap();
    db.check().unwrap();
    let n = db
        .begin_read()
        .range(buckets::KEY, b"", Some(b"\xff"), 0)
        .unwrap()
        .len();
    assert_eq!(n, 5999);
}
