// Model-based tests of the backend: random puts, deletes, bucket ops, commits, rollbacks and
// reopens checked against a BTreeMap model, plus the power-loss simulation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::backend::{Db, Error, IoObserver, Options, ReadTxn};

/// splitmix64: a tiny seeded generator so failures replay from the printed seed.
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

type Model = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>;

fn value(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.below(100) {
        0 => 4096 + rng.below(20_000) as usize, // overflow pages
        1..=10 => 0,
        _ => rng.below(300) as usize,
    };
    let b = rng.next() as u8;
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

fn key(rng: &mut Rng, space: u64) -> Vec<u8> {
    let n = rng.below(space);
    match rng.below(10) {
        0 => format!("long-{n:06}-{}", "x".repeat(rng.below(600) as usize)).into_bytes(),
        _ => format!("k{n:06}").into_bytes(),
    }
}

/// Compares the whole db (forward and backward, plus seeks) with the model.
fn verify(tx: &impl ReadTxn, model: &Model, rng: &mut Rng, ctx: &str, space: u64) {
    let names = tx.bucket_names().unwrap();
    let want: Vec<&Vec<u8>> = model.keys().collect();
    assert_eq!(
        names.iter().collect::<Vec<_>>(),
        want,
        "{ctx}: bucket names"
    );
    for (b, m) in model {
        let mut c = tx.cursor(b).unwrap();
        let mut got = Vec::new();
        let mut e = c.first().unwrap();
        while let Some((k, v)) = e {
            got.push((k.to_vec(), v.to_vec()));
            e = c.next().unwrap();
        }
        let exp: Vec<(Vec<u8>, Vec<u8>)> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(
            got.len(),
            exp.len(),
            "{ctx}: bucket {:?} key count",
            String::from_utf8_lossy(b)
        );
        assert!(
            got == exp,
            "{ctx}: bucket {:?} content differs",
            String::from_utf8_lossy(b)
        );
        let mut back = Vec::new();
        let mut e = c.last().unwrap();
        while let Some((k, _)) = e {
            back.push(k.to_vec());
            e = c.prev().unwrap();
        }
        back.reverse();
        assert!(
            back == exp.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "{ctx}: backward scan"
        );
        for _ in 0..20 {
            let probe = key(rng, space);
            let exp = m
                .range(probe.clone()..)
                .next()
                .map(|(k, v)| (k.clone(), v.clone()));
            let got = c
                .seek(&probe)
                .unwrap()
                .map(|(k, v)| (k.to_vec(), v.to_vec()));
            assert_eq!(
                got,
                exp,
                "{ctx}: seek {:?}",
                String::from_utf8_lossy(&probe)
            );
            assert_eq!(
                tx.get(b, &probe).unwrap().map(<[u8]>::to_vec),
                m.get(&probe).cloned()
            );
        }
        // Range with a limit.
        let start = key(rng, space);
        let end = key(rng, space);
        if start < end {
            let got = tx.range(b, &start, Some(&end), 7).unwrap();
            let exp: Vec<_> = m.range(start.clone()..end.clone()).take(7).collect();
            assert_eq!(got.len(), exp.len(), "{ctx}: range");
            for ((gk, gv), (ek, ev)) in got.iter().zip(exp) {
                assert_eq!((&gk[..], &gv[..]), (&ek[..], &ev[..]));
            }
        }
    }
}

fn run_model(seed: u64, ops: usize, space: u64) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut rng = Rng(seed);
    let mut db = Db::open(&path).unwrap();
    let mut committed: Model = BTreeMap::new();
    let bucket_names: Vec<Vec<u8>> = (0..5).map(|i| format!("bucket{i}").into_bytes()).collect();
    let mut done = 0;
    while done < ops {
        let mut work = committed.clone();
        let mut tx = db.begin_write().unwrap();
        let big = rng.below(10) == 0;
        let n = 1 + rng.below(if big { 2000 } else { 60 }) as usize;
        for _ in 0..n {
            done += 1;
            let b = &bucket_names[rng.below(bucket_names.len() as u64) as usize];
            // Big key spaces keep their buckets longer so the trees grow deep.
            let bucket_delete = space < 10_000 || rng.below(50) == 0;
            match rng.below(100) {
                0 if bucket_delete => {
                    if work.remove(b).is_some() {
                        tx.delete_bucket(b).unwrap();
                    } else {
                        assert!(matches!(tx.delete_bucket(b), Err(Error::BucketNotFound(_))));
                    }
                }
                1..=3 => {
                    if work.contains_key(b) {
                        assert!(matches!(tx.create_bucket(b), Err(Error::BucketExists(_))));
                    } else {
                        tx.create_bucket(b).unwrap();
                        work.insert(b.clone(), BTreeMap::new());
                    }
                }
                4..=40 => {
                    let k = match work.get(b).and_then(|m| {
                        let i = rng.below(m.len().max(1) as u64) as usize;
                        m.keys().nth(i).cloned()
                    }) {
                        Some(k) if rng.below(2) == 0 => k,
                        _ => key(&mut rng, space),
                    };
                    match work.get_mut(b) {
                        Some(m) => assert_eq!(tx.delete(b, &k).unwrap(), m.remove(&k).is_some()),
                        None => assert!(tx.delete(b, &k).is_err()),
                    }
                }
                41..=43 => {
                    // A sorted run, as the batching layer commits: puts, deletes of keys that
                    // are there and of keys that are not.
                    let mut run: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
                    for _ in 0..1 + rng.below(if big { 600 } else { 40 }) {
                        let existing = work.get(b).and_then(|m| {
                            let i = rng.below(m.len().max(1) as u64) as usize;
                            m.keys().nth(i).cloned()
                        });
                        let k = match existing {
                            Some(k) if rng.below(2) == 0 => k,
                            _ => key(&mut rng, space),
                        };
                        let v = (rng.below(2) == 0).then(|| value(&mut rng));
                        run.insert(k, v);
                    }
                    let writes: Vec<(&[u8], Option<&[u8]>)> = run
                        .iter()
                        .map(|(k, v)| (k.as_slice(), v.as_deref()))
                        .collect();
                    match work.get_mut(b) {
                        Some(m) => {
                            tx.apply_sorted(b, &writes).unwrap();
                            for (k, v) in run {
                                match v {
                                    Some(v) => m.insert(k, v),
                                    None => m.remove(&k),
                                };
                            }
                        }
                        None => assert!(matches!(
                            tx.apply_sorted(b, &writes),
                            Err(Error::BucketNotFound(_))
                        )),
                    }
                }
                _ => {
                    let k = key(&mut rng, space);
                    let v = value(&mut rng);
                    match work.get_mut(b) {
                        Some(m) => {
                            // put_seq only changes how full split pages are left.
                            if rng.below(5) == 0 {
                                tx.put_seq(b, &k, &v).unwrap();
                            } else {
                                tx.put(b, &k, &v).unwrap();
                            }
                            m.insert(k, v);
                        }
                        None => assert!(tx.put(b, &k, &v).is_err()),
                    }
                }
            }
        }
        if rng.below(10) == 0 {
            verify(&tx, &work, &mut rng, &format!("seed {seed} in-txn"), space);
        }
        match rng.below(10) {
            0 => tx.rollback(),
            _ => {
                tx.commit().unwrap();
                committed = work;
            }
        }
        if rng.below(15) == 0 {
            drop(db);
            db = Db::open(&path).unwrap();
        }
        let r = db.begin_read();
        verify(
            &r,
            &committed,
            &mut rng,
            &format!("seed {seed} after {done} ops"),
            space,
        );
        drop(r);
        db.check()
            .unwrap_or_else(|e| panic!("seed {seed} after {done} ops: {e}"));
    }
    drop(db);
    let db = Db::open(&path).unwrap();
    verify(
        &db.begin_read(),
        &committed,
        &mut rng,
        &format!("seed {seed} final reopen"),
        space,
    );
    db.check().unwrap();
    let depth = db
        .stats()
        .unwrap()
        .buckets
        .iter()
        .map(|b| b.depth)
        .max()
        .unwrap_or(0);
    // Delete everything: the file must not keep sparse trees (rebalance) and stays valid.
    let mut tx = db.begin_write().unwrap();
    for (b, m) in &committed {
        for k in m.keys() {
            assert!(tx.delete(b, k).unwrap());
        }
    }
    tx.commit().unwrap();
    db.check().unwrap();
    for b in db.stats().unwrap().buckets {
        assert_eq!(b.keys, 0);
        assert!(
            b.depth <= 1 && b.branch_pages == 0,
            "empty bucket still has depth {}",
            b.depth
        );
    }
    depth
}

#[test]
fn model_random_ops_seed_1() {
    assert!(run_model(1, 12_000, 3000) >= 2);
}

#[test]
fn model_random_ops_seed_2() {
    assert!(run_model(0xdead_beef, 12_000, 3000) >= 2);
}

/// A larger key space: trees three and four levels deep, many splits and merges.
#[test]
fn model_random_ops_deep_trees() {
    let depth = run_model(77, 60_000, 200_000);
    assert!(depth >= 3, "trees only reached depth {depth}");
}

/// More seeds on demand: BACKEND_MODEL_SEEDS=200 cargo test -p common --test backend_model.
#[test]
fn model_random_ops_extra_seeds() {
    let n: u64 = std::env::var("BACKEND_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in 100..100 + n {
        run_model(seed, 12_000, if seed % 2 == 0 { 3000 } else { 100_000 });
    }
}

/// A sorted run refuses keys out of order (a repeated key too) and changes nothing then; a
/// delete of a missing key in a run is no change.
#[test]
fn a_sorted_run_refuses_keys_out_of_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db")).unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.create_bucket(b"b").unwrap();
    let (a, z): (&[u8], &[u8]) = (b"a", b"z");
    assert!(matches!(
        tx.apply_sorted(b"b", &[(z, Some(a)), (a, Some(a))]),
        Err(Error::Unsorted(_))
    ));
    assert!(matches!(
        tx.apply_sorted(b"b", &[(a, Some(a)), (a, None)]),
        Err(Error::Unsorted(_))
    ));
    assert_eq!(tx.get(b"b", a).unwrap(), None);
    tx.commit().unwrap();
    let mut tx = db.begin_write().unwrap();
    tx.apply_sorted(b"b", &[(a, Some(z))]).unwrap();
    assert_eq!(tx.get(b"b", a).unwrap(), Some(z));
    tx.apply_sorted(b"b", &[(a, None), (z, None)]).unwrap();
    assert_eq!(tx.get(b"b", a).unwrap(), None);
    tx.commit().unwrap();
}

/// Records every write and sync; builds the image a power cut at any moment could leave.
#[derive(Default)]
struct PowerLog {
    events: Mutex<Vec<Ev>>,
}

#[derive(Clone)]
enum Ev {
    Write(u64, Vec<u8>),
    SetLen(u64),
    Sync,
}

impl IoObserver for PowerLog {
    fn on_write(&self, offset: u64, data: &[u8]) {
        self.events
            .lock()
            .unwrap()
            .push(Ev::Write(offset, data.to_vec()));
    }
    fn on_set_len(&self, len: u64) {
        self.events.lock().unwrap().push(Ev::SetLen(len));
    }
    fn on_sync(&self) {
        self.events.lock().unwrap().push(Ev::Sync);
    }
}

fn apply(img: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if img.len() < end {
        img.resize(end, 0);
    }
    img[off as usize..end].copy_from_slice(data);
}

#[test]
fn power_loss_keeps_last_synced_commit() {
    power_loss(true);
}

/// The same without a freelist page (etcd's NoFreelistSync): reopen rebuilds it.
#[test]
fn power_loss_keeps_last_synced_commit_without_freelist_page() {
    power_loss(false);
}

fn power_loss(persist_freelist: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    drop(Db::open(&path).unwrap());
    let base = std::fs::read(&path).unwrap();
    let log = Arc::new(PowerLog::default());
    let db = Db::open_with(
        &path,
        Options {
            io_observer: Some(log.clone()),
            persist_freelist,
            ..Options::default()
        },
    )
    .unwrap();
    let mut rng = Rng(7);
    let mut states: Vec<Model> = vec![BTreeMap::new()];
    // After commit i, the index of its last (meta) sync event.
    let mut commit_sync_at: Vec<usize> = Vec::new();
    let mut model: Model = BTreeMap::new();
    for i in 0..60 {
        let mut tx = db.begin_write().unwrap();
        if i == 0 {
            tx.create_bucket(b"b").unwrap();
            model.insert(b"b".to_vec(), BTreeMap::new());
        }
        let m = model.get_mut(&b"b"[..]).unwrap();
        for _ in 0..rng.below(200) + 1 {
            let k = key(&mut rng, 3000);
            if rng.below(3) == 0 {
                tx.delete(b"b", &k).unwrap();
                m.remove(&k);
            } else {
                let v = value(&mut rng);
                tx.put(b"b", &k, &v).unwrap();
                m.insert(k, v);
            }
        }
        tx.commit().unwrap();
        states.push(model.clone());
        commit_sync_at.push(log.events.lock().unwrap().len() - 1);
    }
    drop(db);
    let events = log.events.lock().unwrap().clone();
    for round in 0..80 {
        let cut = rng.below(events.len() as u64 + 1) as usize;
        // Durable: everything up to the last sync before the cut.
        let last_sync = events[..cut].iter().rposition(|e| matches!(e, Ev::Sync));
        let mut img = base.clone();
        let durable_end = last_sync.map(|i| i + 1).unwrap_or(0);
        for e in &events[..durable_end] {
            match e {
                Ev::Write(off, d) => apply(&mut img, *off, d),
                Ev::SetLen(l) => img.resize(*l as usize, 0),
                Ev::Sync => {}
            }
        }
        // Unsynced writes: each dropped, kept, or torn at a 512-byte sector boundary.
        for e in &events[durable_end..cut] {
            match e {
                Ev::Write(off, d) => match rng.below(3) {
                    0 => {}
                    1 => apply(&mut img, *off, d),
                    _ => {
                        let keep = (rng.below(d.len() as u64 / 512 + 1) * 512) as usize;
                        apply(&mut img, *off, &d[..keep.min(d.len())]);
                    }
                },
                Ev::SetLen(l) => {
                    if rng.below(2) == 0 {
                        img.resize(*l as usize, 0);
                    }
                }
                Ev::Sync => {}
            }
        }
        // Commits whose meta sync happened before the cut are durable.
        let durable_commits = commit_sync_at.iter().filter(|&&s| s < cut).count();
        let p = dir.path().join(format!("crash{round}"));
        std::fs::write(&p, &img).unwrap();
        let db = Db::open(&p).unwrap_or_else(|e| panic!("round {round} cut {cut}: {e}"));
        db.check()
            .unwrap_or_else(|e| panic!("round {round} cut {cut}: {e}"));
        let tx = db.begin_read();
        let seen = (durable_commits..=durable_commits + 1)
            .filter(|&i| i < states.len())
            .find(|&i| {
                let mut r = Rng(round);
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    verify(&tx, &states[i], &mut r, "", 3000)
                }))
                .is_ok()
            });
        assert!(
            seen.is_some(),
            "round {round}: after a cut at event {cut} the db is neither commit {durable_commits} nor the next"
        );
        drop(tx);
        drop(db);
        std::fs::remove_file(&p).unwrap();
    }
}
