// Backend behaviour tests: kill -9 crash rounds (the test binary re-runs itself as the child),
// concurrent readers during commits, defrag, snapshots during writes, corrupt and bad files,
// read-only opens and the batching layer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::backend::{Batch, BatchConfig, Db, Error, Options, ReadTxn};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const CRASH_ENV: &str = "BACKEND_CRASH_CHILD_DB";

/// The writes of crash-test commit `i` (deterministic, so the parent can replay them).
fn crash_commit_ops(
    i: u64,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut rng = Rng(i * 7919);
    let mut ops = Vec::new();
    for _ in 0..1 + rng.below(300) {
        let k = format!("key{:05}", rng.below(5000)).into_bytes();
        if rng.below(4) == 0 {
            model.remove(&k);
            ops.push((k, None));
        } else {
            let len = if rng.below(50) == 0 {
                10_000
            } else {
                rng.below(200) as usize
            };
            let v = vec![(i % 251) as u8; len];
            model.insert(k.clone(), v.clone());
            ops.push((k, Some(v)));
        }
    }
    model.insert(b"counter".to_vec(), i.to_be_bytes().to_vec());
    ops.push((b"counter".to_vec(), Some(i.to_be_bytes().to_vec())));
    ops
}

/// The child side of `crash_kill9_rounds`: commits forever, printing each committed number.
#[test]
fn crash_child() {
    let Ok(path) = std::env::var(CRASH_ENV) else {
        return;
    };
    // Odd rounds run as etcd does: no freelist page, rebuilt from the trees at each open.
    let opts = Options {
        persist_freelist: std::env::var("BACKEND_CRASH_NO_FREELIST").is_err(),
        ..Options::default()
    };
    let db = Db::open_with(&path, opts).unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.create_bucket_if_not_exists(b"b").unwrap();
    tx.commit().unwrap();
    let start = db
        .begin_read()
        .get(b"b", b"counter")
        .unwrap()
        .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
        .unwrap_or(0);
    let mut scratch = BTreeMap::new();
    for i in start + 1.. {
        let mut tx = db.begin_write().unwrap();
        for (k, v) in crash_commit_ops(i, &mut scratch) {
            match v {
                Some(v) => tx.put(b"b", &k, &v).unwrap(),
                None => {
                    tx.delete(b"b", &k).unwrap();
                }
            }
        }
        tx.commit().unwrap();
        println!("committed {i}");
    }
}

#[test]
fn crash_kill9_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(42);
    let mut rounds_with_commits = 0;
    let mut counter_at_end = 0;
    for round in 0..30 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CRASH_ENV, &path)
            .env(
                if round % 2 == 1 {
                    "BACKEND_CRASH_NO_FREELIST"
                } else {
                    "BACKEND_CRASH_UNUSED"
                },
                "1",
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut last = None;
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("committed ") {
                    last = n.trim().parse::<u64>().ok();
                }
            }
            last
        });
        std::thread::sleep(Duration::from_millis(30 + rng.below(300)));
        child.kill().unwrap();
        child.wait().unwrap();
        let last_reported = reader.join().unwrap();
        let db = Db::open(&path).unwrap_or_else(|e| panic!("round {round}: reopen: {e}"));
        db.check()
            .unwrap_or_else(|e| panic!("round {round}: check: {e}"));
        let tx = db.begin_read();
        let counter = if tx.bucket_exists(b"b").unwrap() {
            tx.get(b"b", b"counter")
                .unwrap()
                .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
                .unwrap_or(0)
        } else {
            0
        };
        counter_at_end = counter;
        if let Some(last) = last_reported {
            rounds_with_commits += 1;
            assert!(
                counter == last || counter == last + 1,
                "round {round}: child reported commit {last}, db holds {counter}"
            );
        }
        // The content must be exactly the replayed state of that commit.
        let mut model = BTreeMap::new();
        for i in 1..=counter {
            crash_commit_ops(i, &mut model);
        }
        if counter > 0 {
            let mut got = BTreeMap::new();
            tx.for_each(b"b", &mut |k, v| {
                got.insert(k.to_vec(), v.to_vec());
                Ok(())
            })
            .unwrap();
            assert!(
                got == model,
                "round {round}: content differs from commit {counter}"
            );
        }
    }
    // The kills must land while the child is committing, not before it starts.
    assert!(
        rounds_with_commits >= 15,
        "only {rounds_with_commits} rounds saw commits"
    );
    eprintln!(
        "crash test: {rounds_with_commits} rounds with commits, {counter_at_end} commits in all"
    );
}

#[test]
fn readers_see_consistent_states_during_1000_commits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(
        dir.path().join("db"),
        Options {
            no_sync: true,
            ..Options::default()
        },
    )
    .unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.create_bucket(b"b").unwrap();
    tx.commit().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..3 {
        let db = db.clone();
        let done = done.clone();
        readers.push(std::thread::spawn(move || {
            let mut last = 0u64;
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) || reads < 5 {
                let tx = db.begin_read();
                let mut version = None;
                let mut n = 0;
                tx.for_each(b"b", &mut |k, v| {
                    if k.starts_with(b"a") {
                        let g = u64::from_be_bytes(v[..8].try_into().unwrap());
                        assert!(
                            version.is_none_or(|x| x == g),
                            "reader {r}: mixed versions in one txn"
                        );
                        version = Some(g);
                        n += 1;
                    }
                    Ok(())
                })
                .unwrap();
                let g = version.unwrap_or(0);
                assert!(n == 0 || n == 200, "reader {r}: {n} keys");
                assert!(g >= last, "reader {r}: went back from {last} to {g}");
                // Re-read within the same txn: unchanged even though commits go on.
                if reads % 10 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                    let again = tx
                        .get(b"b", b"a000")
                        .unwrap()
                        .map(|v| u64::from_be_bytes(v[..8].try_into().unwrap()));
                    assert_eq!(again.unwrap_or(0), g);
                }
                last = g;
                reads += 1;
            }
            reads
        }));
    }
    // A long-lived reader: pages it can see must not be reused while commits go on.
    let long = {
        let db = db.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let tx = db.begin_read();
            let dump = |tx: &common::backend::ReadTx| {
                let mut m = BTreeMap::new();
                tx.for_each(b"b", &mut |k, v| {
                    m.insert(k.to_vec(), v.to_vec());
                    Ok(())
                })
                .unwrap();
                m
            };
            let first = dump(&tx);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(
                dump(&tx) == first,
                "a long-lived reader saw its pages change"
            );
        })
    };
    let mut rng = Rng(3);
    for i in 1..=1000u64 {
        let mut tx = db.begin_write().unwrap();
        for a in 0..200 {
            let mut v = i.to_be_bytes().to_vec();
            v.extend(std::iter::repeat_n(7u8, rng.below(100) as usize));
            tx.put(b"b", format!("a{a:03}").as_bytes(), &v).unwrap();
        }
        for _ in 0..20 {
            let k = format!("z{}", rng.below(2000));
            if rng.below(2) == 0 {
                tx.put(b"b", k.as_bytes(), &[1u8; 300]).unwrap();
            } else {
                tx.delete(b"b", k.as_bytes()).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    long.join().unwrap();
    for r in readers {
        assert!(r.join().unwrap() >= 5);
    }
    db.check().unwrap();
}

fn fill(db: &Db, n: usize) {
    let mut tx = db.begin_write().unwrap();
    tx.create_bucket_if_not_exists(b"key").unwrap();
    for i in 0..n {
        tx.put(b"key", format!("k{i:08}").as_bytes(), &[i as u8; 100])
            .unwrap();
    }
    tx.commit().unwrap();
}

#[test]
fn defrag_shrinks_and_keeps_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path).unwrap();
    fill(&db, 30_000);
    let mut rng = Rng(9);
    let mut tx = db.begin_write().unwrap();
    let mut kept = BTreeMap::new();
    for i in 0..30_000usize {
        let k = format!("k{i:08}").into_bytes();
        if rng.below(4) != 0 {
            tx.delete(b"key", &k).unwrap();
        } else {
            kept.insert(k, vec![i as u8; 100]);
        }
    }
    tx.commit().unwrap();
    let mut tx = db.begin_write().unwrap();
    assert_eq!(tx.next_sequence(b"key").unwrap(), 1);
    assert_eq!(tx.next_sequence(b"key").unwrap(), 2);
    tx.commit().unwrap();
    let reader = db.begin_read(); // an old reader must survive the defrag
    let before = std::fs::metadata(&path).unwrap().len();
    let hash_before = db.hash(&[]).unwrap();
    let txid_before = db.txid();
    db.defrag().unwrap();
    assert!(
        db.txid() > txid_before,
        "txids must keep increasing across defrag"
    );
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(db.size() <= after && db.size_in_use() <= db.size());
    assert!(after * 2 < before, "defrag: {before} -> {after} bytes");
    assert_eq!(db.hash(&[]).unwrap(), hash_before);
    assert_eq!(db.begin_read().sequence(b"key").unwrap(), Some(2));
    db.check().unwrap();
    let mut got = BTreeMap::new();
    db.begin_read()
        .for_each(b"key", &mut |k, v| {
            got.insert(k.to_vec(), v.to_vec());
            Ok(())
        })
        .unwrap();
    assert!(got == kept);
    assert_eq!(
        reader.range(b"key", b"k", Some(b"l"), 0).unwrap().len(),
        kept.len()
    );
    drop(reader);
    // The handle keeps working, and the new file reopens.
    let mut tx = db.begin_write().unwrap();
    tx.put(b"key", b"after", b"defrag").unwrap();
    tx.commit().unwrap();
    drop(db);
    let db = Db::open(&path).unwrap();
    assert_eq!(
        db.begin_read().get(b"key", b"after").unwrap(),
        Some(&b"defrag"[..])
    );
    db.check().unwrap();
}

/// Every bucket's keys and sequence, for comparing whole dbs.
type Image = BTreeMap<Vec<u8>, (u64, BTreeMap<Vec<u8>, Vec<u8>>)>;

fn image_of(db: &Db) -> Image {
    let tx = db.begin_read();
    let mut out = Image::new();
    for name in tx.bucket_names().unwrap() {
        let mut keys = BTreeMap::new();
        tx.for_each(&name, &mut |k, v| {
            keys.insert(k.to_vec(), v.to_vec());
            Ok(())
        })
        .unwrap();
        let seq = tx.sequence(&name).unwrap().unwrap_or(0);
        out.insert(name, (seq, keys));
    }
    out
}

/// The writes a test makes while a defrag runs, round `r`: overwrites and deletes on both
/// sides of the copy's cursor, new keys, a sequence bump, and bucket creation and deletion.
fn write_during_defrag(db: &Db, r: usize) {
    let mut tx = db.begin_write().unwrap();
    for i in [5usize, 7, 19_000, 25_000, 29_999] {
        let k = format!("k{:08}", i + r);
        if i % 2 == 1 {
            tx.delete(b"key", k.as_bytes()).unwrap();
        } else {
            tx.put(b"key", k.as_bytes(), format!("round {r}").as_bytes())
                .unwrap();
        }
    }
    for i in 0..3_000 {
        tx.put(b"key", format!("z{r}-{i:05}").as_bytes(), &[r as u8; 50])
            .unwrap();
    }
    tx.next_sequence(b"key").unwrap();
    match r {
        0 => {
            tx.create_bucket(b"extra").unwrap();
            tx.put(b"extra", b"made", b"during the copy").unwrap();
        }
        _ => {
            tx.delete_bucket(b"gone").unwrap();
            tx.put(b"extra", b"more", b"during a catch-up round")
                .unwrap();
        }
    }
    tx.commit().unwrap();
}

#[test]
fn defrag_lets_writers_commit_and_keeps_what_they_wrote() {
    use common::backend::DefragStep;
    use std::sync::mpsc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path).unwrap();
    fill(&db, 30_000);
    let mut tx = db.begin_write().unwrap();
    tx.create_bucket(b"gone").unwrap();
    tx.put(b"gone", b"x", b"deleted during the defrag").unwrap();
    tx.commit().unwrap();
    // The writes run on another thread, as a server's would: the defrag's progress callback
    // asks for a round and waits for its commit, which could never happen if the defrag
    // held the writer.
    let (ask, asked) = mpsc::channel::<usize>();
    let (done, committed) = mpsc::channel::<()>();
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            for r in asked {
                write_during_defrag(&db, r);
                done.send(()).unwrap();
            }
        })
    };
    let mut steps = Vec::new();
    let txid_before = db.txid();
    db.defrag_with(&mut |step| {
        let round = match step {
            DefragStep::Copying { keys } if keys >= 10_000 && steps.is_empty() => Some(0),
            DefragStep::CaughtUp { .. } if steps.len() == 1 => Some(1),
            _ => None,
        };
        if let Some(r) = round {
            ask.send(r).unwrap();
            committed
                .recv_timeout(Duration::from_secs(60))
                .expect("a writer committed while the defrag ran");
            steps.push(step);
        }
    })
    .unwrap();
    drop(ask);
    writer.join().unwrap();
    assert_eq!(
        steps.len(),
        2,
        "writes during the copy and a catch-up round"
    );
    assert!(db.txid() > txid_before);

    // The model: the fill, then both rounds applied to a db that never defragmented.
    let model_dir = tempfile::tempdir().unwrap();
    let model = Db::open(model_dir.path().join("db")).unwrap();
    fill(&model, 30_000);
    let mut tx = model.begin_write().unwrap();
    tx.create_bucket(b"gone").unwrap();
    tx.commit().unwrap();
    write_during_defrag(&model, 0);
    write_during_defrag(&model, 1);
    let want = image_of(&model);
    assert!(!want.contains_key(&b"gone"[..]));
    assert_eq!(want[&b"key"[..]].0, 2);
    let got = image_of(&db);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, (seq, keys)) in &want {
        assert_eq!(got[name].0, *seq, "sequence of {name:?}");
        assert!(got[name].1 == *keys, "keys of bucket {name:?} differ");
    }
    db.check().unwrap();
    drop(db);
    let db = Db::open(&path).unwrap();
    assert!(image_of(&db) == want, "the defragmented file reopens equal");
    db.check().unwrap();
    assert!(!dir.path().join("db.defrag.tmp").exists());
}

#[test]
fn snapshot_while_writing_is_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    fill(&db, 20_000);
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in 0..30u64 {
                let mut tx = db.begin_write().unwrap();
                for j in 0..500 {
                    tx.put(
                        b"key",
                        format!("k{:08}", (i * 500 + j) % 20_000).as_bytes(),
                        &[200; 100],
                    )
                    .unwrap();
                }
                tx.commit().unwrap();
            }
        })
    };
    let snap = dir.path().join("snap.db");
    let n = db.snapshot_to_file(&snap, true).unwrap();
    writer.join().unwrap();
    let bytes = std::fs::read(&snap).unwrap();
    assert_eq!(bytes.len() as u64, n);
    assert_eq!(bytes.len() % 512, 32, "sha256 trailer");
    let img = dir.path().join("img.db");
    std::fs::write(&img, &bytes[..bytes.len() - 32]).unwrap();
    let s = Db::open_read_only(&img).unwrap();
    s.check().unwrap();
    assert_eq!(s.stats().unwrap().buckets[0].keys, 20_000);
}

#[test]
fn bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk");
    std::fs::write(&p, vec![0x5a; 16384]).unwrap();
    assert!(
        matches!(Db::open(&p), Err(Error::NotBbolt { .. })),
        "{:?}",
        Db::open(&p).err()
    );
    std::fs::write(&p, b"short").unwrap();
    assert!(matches!(Db::open(&p), Err(Error::NotBbolt { .. })));

    let good = dir.path().join("db");
    let db = Db::open(&good).unwrap();
    fill(&db, 5000);
    drop(db);
    let bytes = std::fs::read(&good).unwrap();
    let t = dir.path().join("trunc");
    std::fs::write(&t, &bytes[..bytes.len() / 3]).unwrap();
    let e = Db::open(&t).err().unwrap();
    assert!(matches!(e, Error::Truncated { .. }), "{e}");

    let mut both = bytes.clone();
    both[60] ^= 0xff;
    both[4096 + 60] ^= 0xff;
    let b = dir.path().join("both");
    std::fs::write(&b, &both).unwrap();
    let e = Db::open(&b).err().unwrap();
    assert!(matches!(e, Error::BothMetasInvalid { .. }), "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");

    // One bad meta: the other one is used.
    let mut one = bytes.clone();
    let m = Db::open_read_only(&good).unwrap().txid() % 2;
    one[(m as usize) * 4096 + 60] ^= 0xff;
    let o = dir.path().join("one");
    std::fs::write(&o, &one).unwrap();
    let db = Db::open_read_only(&o).unwrap();
    db.check().unwrap();
    drop(db);

    // A corrupt freelist page: a read-write open rebuilds the freelist from the trees.
    let mut fl = bytes.clone();
    let txid = Db::open_read_only(&good).unwrap().txid();
    let meta_off = (txid % 2) as usize * 4096 + 16;
    let fl_pg = u64::from_le_bytes(fl[meta_off + 32..meta_off + 40].try_into().unwrap()) as usize;
    assert_eq!(
        u16::from_le_bytes([fl[fl_pg * 4096 + 8], fl[fl_pg * 4096 + 9]]),
        0x10
    );
    fl[fl_pg * 4096 + 10..fl_pg * 4096 + 12].copy_from_slice(&0xfff0u16.to_le_bytes());
    let f = dir.path().join("freelist");
    std::fs::write(&f, &fl).unwrap();
    let e = Db::open_read_only(&f).unwrap().check().unwrap_err();
    assert!(e.to_string().contains(&format!("page {fl_pg}")), "{e}");
    let db = Db::open(&f).unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.put(b"key", b"new", b"v").unwrap();
    tx.commit().unwrap();
    db.check().unwrap();
    assert_eq!(db.stats().unwrap().buckets[0].keys, 5001);
}

#[test]
fn read_only_open_never_writes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    fill(&Db::open(&p).unwrap(), 1000);
    let before = std::fs::read(&p).unwrap();
    // Another test of this binary may fork a child at the moment the writer's file is open:
    // until the child execs (the descriptor is close-on-exec) it shares the writer's flock.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let db = loop {
        match Db::open_read_only(&p) {
            Ok(db) => break db,
            Err(e) if std::time::Instant::now() < deadline && e.to_string().contains("lock") => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("open read-only: {e}"),
        }
    };
    assert!(matches!(db.begin_write(), Err(Error::ReadOnly)));
    assert!(matches!(db.defrag(), Err(Error::ReadOnly)));
    assert_eq!(
        db.begin_read()
            .range(b"key", b"", Some(b"\xff"), 0)
            .unwrap()
            .len(),
        1000
    );
    db.check().unwrap();
    drop(db);
    assert!(std::fs::read(&p).unwrap() == before);
    assert!(Db::open_read_only(dir.path().join("missing")).is_err());
}

/// Every way of reading a corrupt file returns errors (naming a page), never panics.
#[test]
fn corrupt_pages_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("db");
    let db = Db::open(&good).unwrap();
    fill(&db, 20_000);
    drop(db);
    let bytes = std::fs::read(&good).unwrap();
    let pages = bytes.len() / 4096;
    let read_all = |p: &std::path::Path| -> Result<usize, Error> {
        let db = Db::open_read_only(p)?;
        let tx = db.begin_read();
        let mut n = 0;
        for b in tx.bucket_names()? {
            let mut c = tx.cursor(&b)?;
            let mut e = c.first()?;
            while e.is_some() {
                n += 1;
                e = c.next()?;
            }
            let mut e = c.last()?;
            while e.is_some() {
                e = c.prev()?;
            }
            c.seek(b"k00010000")?;
        }
        db.check()?;
        db.stats()?;
        Ok(n)
    };
    assert_eq!(read_all(&good).unwrap(), 20_000);
    // Targeted: wrong page id in a header, impossible count, bad flags, element out of bounds.
    let meta_root = {
        let db = Db::open_read_only(&good).unwrap();
        db.stats().unwrap().page_count
    };
    assert!(meta_root > 10);
    let mut rng = Rng(5);
    let mut errors = 0;
    for round in 0..300 {
        let mut img = bytes.clone();
        let pg = 2 + rng.below(pages as u64 - 2) as usize;
        let base = pg * 4096;
        match round % 5 {
            0 => img[base..base + 8].copy_from_slice(&(pg as u64 + 1).to_le_bytes()),
            1 => img[base + 10..base + 12].copy_from_slice(&0xfff0u16.to_le_bytes()),
            2 => img[base + 8..base + 10].copy_from_slice(&0x40u16.to_le_bytes()),
            3 => {
                let e = base + 16 + 16 * rng.below(4) as usize;
                img[e + 4..e + 8].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
            }
            _ => {
                for _ in 0..8 {
                    let off = base + rng.below(4096) as usize;
                    img[off] = rng.next() as u8;
                }
            }
        }
        let p = dir.path().join("bad");
        std::fs::write(&p, &img).unwrap();
        // Writing into a corrupt file: errors are fine, panics are not.
        let write_some = |p: &std::path::Path| -> Result<(), Error> {
            let db = Db::open(p)?;
            let mut tx = db.begin_write()?;
            for i in (0..20_000).step_by(97) {
                let k = format!("k{i:08}");
                if i % 2 == 0 {
                    tx.delete(b"key", k.as_bytes())?;
                } else {
                    tx.put(b"key", k.as_bytes(), &[1; 300])?;
                }
            }
            tx.commit()?;
            db.check()
        };
        if round % 3 == 0 {
            let wp = dir.path().join("bad-rw");
            std::fs::write(&wp, &img).unwrap();
            if std::panic::catch_unwind(|| write_some(&wp)).is_err() {
                panic!("round {round}: writing into a file with corrupt page {pg} panicked");
            }
        }
        match std::panic::catch_unwind(|| read_all(&p)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                errors += 1;
                let s = e.to_string();
                if round % 5 < 3 {
                    assert!(s.contains("page"), "round {round}: {s}");
                }
            }
            Err(_) => panic!("round {round}: corrupt page {pg} caused a panic"),
        }
    }
    assert!(errors > 100, "only {errors} corruptions detected");
}

#[test]
fn batch_layer_reads_pending_writes_and_commits() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    let db = Db::open(&p).unwrap();
    let batch = Batch::new(
        db.clone(),
        BatchConfig {
            interval: Duration::from_millis(50),
            limit: 1000,
        },
    );
    assert!(matches!(
        batch.put(b"nope", b"k", b"v"),
        Err(Error::BucketNotFound(_))
    ));
    assert!(matches!(batch.put(b"key", b"", b"v"), Err(Error::KeyEmpty)));
    batch.create_bucket(b"key").unwrap();
    let t0 = db.txid();
    batch.put_seq(b"key", b"a", b"1").unwrap();
    batch.put_seq(b"key", b"c", b"3").unwrap();
    assert_eq!(batch.get(b"key", b"a").unwrap(), Some(b"1".to_vec()));
    batch.force_commit().unwrap();
    assert!(db.txid() > t0);
    batch.put(b"key", b"b", b"2").unwrap();
    batch.delete(b"key", b"c").unwrap();
    let r = batch.range(b"key", b"a", Some(b"z"), 0).unwrap();
    assert_eq!(
        r,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec())
        ]
    );
    assert_eq!(batch.range(b"key", b"a", Some(b"z"), 1).unwrap().len(), 1);
    // The ticker commits on its own (polled, no timing assertion).
    let t1 = db.txid();
    for _ in 0..200 {
        if db.txid() > t1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(db.txid() > t1, "interval commit never happened");
    assert_eq!(db.begin_read().get(b"key", b"b").unwrap(), Some(&b"2"[..]));
    // The op limit forces a commit.
    let t2 = db.txid();
    for i in 0..1000 {
        batch
            .put(b"key", format!("n{i:04}").as_bytes(), b"v")
            .unwrap();
    }
    assert!(db.txid() > t2);
    batch.put(b"key", b"pending", b"x").unwrap();
    let mut img = Vec::new();
    batch.snapshot(&mut img, false).unwrap();
    let sp = dir.path().join("snap.db");
    std::fs::write(&sp, &img).unwrap();
    assert_eq!(
        Db::open_read_only(&sp)
            .unwrap()
            .begin_read()
            .get(b"key", b"pending")
            .unwrap(),
        Some(&b"x"[..])
    );
    batch.delete(b"key", b"pending").unwrap();
    batch.defrag().unwrap();
    batch.close().unwrap();
    drop(db);
    let db = Db::open(&p).unwrap();
    assert_eq!(
        db.begin_read()
            .range(b"key", b"", Some(b"\xff"), 0)
            .unwrap()
            .len(),
        1002
    );
}

#[test]
fn file_growth_and_remap_keep_open_readers_valid() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    let db = Db::open(&p).unwrap();
    fill(&db, 100);
    let old = db.begin_read();
    let len0 = std::fs::metadata(&p).unwrap().len();
    // Grow the file many times over (each growth remaps) while `old` stays open.
    for round in 0..8u64 {
        let mut tx = db.begin_write().unwrap();
        for i in 0..2000u64 {
            tx.put(
                b"key",
                format!("g{round}-{i:06}").as_bytes(),
                &[round as u8; 1000],
            )
            .unwrap();
        }
        for i in 0..100 {
            tx.put(b"key", format!("k{i:08}").as_bytes(), &[0xee; 100])
                .unwrap();
        }
        tx.commit().unwrap();
    }
    assert!(std::fs::metadata(&p).unwrap().len() > 8 * len0);
    let all = old.range(b"key", b"", Some(b"\xff"), 0).unwrap();
    assert_eq!(all.len(), 100);
    assert!(
        all.iter()
            .enumerate()
            .all(|(i, (_, v))| *v == &[i as u8; 100][..])
    );
    let st = db.stats().unwrap();
    assert_eq!(st.buckets[0].keys, 100 + 8 * 2000);
    drop(old);
    db.check().unwrap();
}

#[test]
fn sequential_puts_pack_pages_densely() {
    let dir = tempfile::tempdir().unwrap();
    let leaves = |seq: bool| {
        let db = Db::open(dir.path().join(format!("db-{seq}"))).unwrap();
        let mut tx = db.begin_write().unwrap();
        tx.create_bucket(b"key").unwrap();
        tx.commit().unwrap();
        for batch in 0..20u64 {
            let mut tx = db.begin_write().unwrap();
            for i in batch * 1000..(batch + 1) * 1000 {
                let k = i.to_be_bytes();
                if seq {
                    tx.put_seq(b"key", &k, &[7; 100]).unwrap();
                } else {
                    tx.put(b"key", &k, &[7; 100]).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        db.check().unwrap();
        let st = db.stats().unwrap();
        assert_eq!(st.buckets[0].keys, 20_000);
        st.buckets[0].leaf_pages
    };
    let (plain, seq) = (leaves(false), leaves(true));
    assert!(seq * 10 < plain * 7, "put_seq: {seq} leaves, put: {plain}");
}

#[test]
fn size_limits_and_large_values() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    let db = Db::open(&p).unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.create_bucket(b"b").unwrap();
    let max_key = vec![b'k'; 32768];
    tx.put(b"b", &max_key, b"max").unwrap();
    assert!(matches!(
        tx.put(b"b", &[b'k'; 32769], b"x"),
        Err(Error::KeyTooLarge(32769))
    ));
    assert!(matches!(tx.put(b"b", b"", b"x"), Err(Error::KeyEmpty)));
    assert!(matches!(tx.create_bucket(b""), Err(Error::KeyEmpty)));
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    tx.put(b"b", b"big", &big).unwrap();
    tx.put(b"b", b"empty", b"").unwrap();
    tx.commit().unwrap();
    drop(db);
    let db = Db::open(&p).unwrap();
    db.check().unwrap();
    {
        let r = db.begin_read();
        assert_eq!(r.get(b"b", &max_key).unwrap(), Some(&b"max"[..]));
        let b = r.bucket(b"b").unwrap();
        assert_eq!(b.get(b"empty").unwrap(), Some(&b""[..]));
        assert_eq!(
            b.cursor().first().unwrap().map(|(k, _)| k),
            Some(&b"big"[..])
        );
        assert!(matches!(r.bucket(b"nope"), Err(Error::BucketNotFound(_))));
        assert!(r.get(b"b", b"big").unwrap() == Some(&big[..]));
        assert_eq!(r.get(b"b", b"empty").unwrap(), Some(&b""[..]));
        let st = db.stats().unwrap();
        assert!(st.buckets[0].overflow_pages >= 5_000_000 / 4096);
    }
    // Freed overflow runs are reused once no reader needs them.
    let size = db.size();
    for round in 0..3 {
        let mut tx = db.begin_write().unwrap();
        tx.put(b"b", b"big", &big[round..]).unwrap();
        tx.commit().unwrap();
    }
    assert!(
        db.size() < size * 3,
        "overflow pages were not reused: {} -> {}",
        size,
        db.size()
    );
    let mut tx = db.begin_write().unwrap();
    assert!(tx.delete(b"b", b"big").unwrap());
    tx.commit().unwrap();
    db.check().unwrap();
    assert!(db.size_in_use() < size / 2);
}

/// etcd's way (NoFreelistSync): no freelist page; a reopen rebuilds it from the trees. Files
/// move between both modes.
#[test]
fn unpersisted_freelist_roundtrips_between_modes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    let mut model = BTreeMap::new();
    let mut rng = Rng(11);
    for round in 0..12 {
        let opts = Options {
            persist_freelist: round % 3 != 0,
            ..Options::default()
        };
        let db = Db::open_with(&p, opts).unwrap();
        db.check().unwrap();
        for _ in 0..3 {
            let mut tx = db.begin_write().unwrap();
            tx.create_bucket_if_not_exists(b"b").unwrap();
            for _ in 0..500 {
                let k = format!("k{:05}", rng.below(4000)).into_bytes();
                if rng.below(3) == 0 {
                    tx.delete(b"b", &k).unwrap();
                    model.remove(&k);
                } else {
                    let v = vec![round as u8; rng.below(400) as usize];
                    tx.put(b"b", &k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            tx.commit().unwrap();
        }
        db.check().unwrap();
        let mut got = BTreeMap::new();
        db.begin_read()
            .for_each(b"b", &mut |k, v| {
                got.insert(k.to_vec(), v.to_vec());
                Ok(())
            })
            .unwrap();
        assert!(got == model, "round {round}");
    }
}

/// Readers of the batching layer see every write at once and never a gap, while the ticker
/// and the op limit commit underneath them.
#[test]
fn batch_readers_see_a_gapless_prefix_while_commits_happen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(
        dir.path().join("db"),
        Options {
            no_sync: true,
            ..Options::default()
        },
    )
    .unwrap();
    let batch = Arc::new(Batch::new(
        db.clone(),
        BatchConfig {
            interval: Duration::from_millis(5),
            limit: 700,
        },
    ));
    batch.create_bucket(b"key").unwrap();
    batch.force_commit().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let batch = batch.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut last = 0;
                let mut reads = 0;
                while !done.load(Ordering::Relaxed) || reads < 3 {
                    let all = batch.range(b"key", b"", Some(b"\xff"), 0).unwrap();
                    for (i, (k, _)) in all.iter().enumerate() {
                        assert_eq!(k, format!("k{i:06}").as_bytes(), "gap before {i}");
                    }
                    assert!(all.len() >= last, "went back from {last} to {}", all.len());
                    last = all.len();
                    reads += 1;
                }
            })
        })
        .collect();
    for i in 0..20_000 {
        let k = format!("k{i:06}");
        batch.put_seq(b"key", k.as_bytes(), b"v").unwrap();
        assert_eq!(
            batch.get(b"key", k.as_bytes()).unwrap(),
            Some(b"v".to_vec())
        );
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    batch.force_commit().unwrap();
    assert_eq!(
        db.begin_read()
            .range(b"key", b"", Some(b"\xff"), 0)
            .unwrap()
            .len(),
        20_000
    );
    db.check().unwrap();
}
