// Backend benchmark: 1M keys (32 B keys, 256 B values) in our bbolt-format backend and in redb,
// used the same way in the same run: batched random put, sequential put, random get, range
// scans of 1000, file sizes after load and after deleting half + defrag/compact.
//
// Run: scripts/bench.sh backend   (BENCH_KEYS=100000 for a quick run)

use std::time::{Duration, Instant};

use common::backend::{Db, ReadTxn};
use redb::{ReadableDatabase, TableDefinition};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("key");
const BUCKET: &[u8] = b"key";
const BATCH: usize = 10_000;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Keys in random order (32 bytes, unique).
fn rand_key(i: u64) -> [u8; 32] {
    let mut k = [0u8; 32];
    k.copy_from_slice(format!("{:016x}{:016x}", mix(i), i).as_bytes());
    k
}

/// Keys in increasing order (32 bytes).
fn seq_key(i: u64) -> [u8; 32] {
    let mut k = [0u8; 32];
    k.copy_from_slice(format!("{i:032}").as_bytes());
    k
}

fn value(i: u64) -> [u8; 256] {
    let mut v = [0u8; 256];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i as usize + j) as u8;
    }
    v
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

struct Row {
    name: &'static str,
    ours: f64,
    redb: f64,
    unit: &'static str,
}

fn ours_load(db: &Db, n: u64, key: fn(u64) -> [u8; 32], fill: f64) -> Duration {
    let t = Instant::now();
    let mut tx = db.begin_write().expect("begin");
    tx.create_bucket_if_not_exists(BUCKET).expect("bucket");
    tx.commit().expect("commit");
    for start in (0..n).step_by(BATCH) {
        let mut tx = db.begin_write().expect("begin");
        tx.set_fill_percent(fill);
        for i in start..(start + BATCH as u64).min(n) {
            tx.put(BUCKET, &key(i), &value(i)).expect("put");
        }
        tx.commit().expect("commit");
    }
    t.elapsed()
}

fn redb_load(db: &redb::Database, n: u64, key: fn(u64) -> [u8; 32]) -> Duration {
    let t = Instant::now();
    for start in (0..n).step_by(BATCH) {
        let tx = db.begin_write().expect("begin");
        {
            let mut table = tx.open_table(TABLE).expect("table");
            for i in start..(start + BATCH as u64).min(n) {
                table.insert(&key(i)[..], &value(i)[..]).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    t.elapsed()
}

fn main() {
    let n: u64 = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let gets: u64 = n.min(200_000);
    let scans: u64 = 2_000;
    let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))
        .expect("tempdir");
    println!(
        "backend bench: {n} keys of 32 B, values of 256 B, batches of {BATCH}, fsync on every commit"
    );
    let mut rows = Vec::new();

    // Random put.
    let ours_path = dir.path().join("ours-rand.db");
    let ours = Db::open(&ours_path).expect("open");
    let t_ours = ours_load(&ours, n, rand_key, 0.5);
    let redb_path = dir.path().join("redb-rand.redb");
    let mut rdb = redb::Database::create(&redb_path).expect("redb");
    let t_redb = redb_load(&rdb, n, rand_key);
    rows.push(Row {
        name: "random put (batches of 10k), keys/s",
        ours: n as f64 / secs(t_ours),
        redb: n as f64 / secs(t_redb),
        unit: "higher is better",
    });

    // Sequential put (fill 0.9, as etcd does for its key bucket).
    {
        let p = dir.path().join("ours-seq.db");
        let o = Db::open(&p).expect("open");
        let t_o = ours_load(&o, n, seq_key, 0.9);
        let rp = dir.path().join("redb-seq.redb");
        let r = redb::Database::create(&rp).expect("redb");
        let t_r = redb_load(&r, n, seq_key);
        rows.push(Row {
            name: "sequential put (batches of 10k), keys/s",
            ours: n as f64 / secs(t_o),
            redb: n as f64 / secs(t_r),
            unit: "higher is better",
        });
        let so = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        let sr = std::fs::metadata(&rp).map(|m| m.len()).unwrap_or(0);
        rows.push(Row {
            name: "file size after sequential load, MB",
            ours: so as f64 / 1e6,
            redb: sr as f64 / 1e6,
            unit: "lower is better",
        });
    }

    // Random get and range scans: alternated three times, best of each (the machine is shared).
    let probes: Vec<[u8; 32]> = (0..gets).map(|i| rand_key(mix(i ^ 0x5555) % n)).collect();
    let starts: Vec<[u8; 32]> = (0..scans).map(|i| rand_key(mix(i ^ 0xaaaa) % n)).collect();
    let (mut get_o, mut get_r, mut scan_o, mut scan_r) =
        (Duration::MAX, Duration::MAX, Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        let t = Instant::now();
        {
            let tx = ours.begin_read();
            let mut found = 0usize;
            for k in &probes {
                found += tx
                    .get(BUCKET, k)
                    .expect("get")
                    .map(|v| v.len())
                    .unwrap_or(0);
            }
            assert_eq!(found, gets as usize * 256);
        }
        get_o = get_o.min(t.elapsed());
        let t = Instant::now();
        {
            let tx = rdb.begin_read().expect("read");
            let table = tx.open_table(TABLE).expect("table");
            let mut found = 0usize;
            for k in &probes {
                found += table
                    .get(&k[..])
                    .expect("get")
                    .map(|v| v.value().len())
                    .unwrap_or(0);
            }
            assert_eq!(found, gets as usize * 256);
        }
        get_r = get_r.min(t.elapsed());
        let t = Instant::now();
        let mut total_o = 0usize;
        {
            let tx = ours.begin_read();
            let bucket = tx.bucket(BUCKET).expect("bucket");
            for s in &starts {
                let mut c = bucket.cursor();
                let mut e = c.seek(s).expect("seek");
                let mut k = 0;
                while let Some((_, v)) = e {
                    total_o += v.len();
                    k += 1;
                    if k == 1000 {
                        break;
                    }
                    e = c.next().expect("next");
                }
            }
        }
        scan_o = scan_o.min(t.elapsed());
        let t = Instant::now();
        let mut total_r = 0usize;
        {
            let tx = rdb.begin_read().expect("read");
            let table = tx.open_table(TABLE).expect("table");
            for s in &starts {
                for e in table.range(&s[..]..).expect("range").take(1000) {
                    let (_, v) = e.expect("entry");
                    total_r += v.value().len();
                }
            }
        }
        scan_r = scan_r.min(t.elapsed());
        assert_eq!(total_o, total_r);
    }
    rows.push(Row {
        name: "random get (best of 3), gets/s",
        ours: gets as f64 / secs(get_o),
        redb: gets as f64 / secs(get_r),
        unit: "higher is better",
    });
    rows.push(Row {
        name: "range scan of 1000 (best of 3), scans/s",
        ours: scans as f64 / secs(scan_o),
        redb: scans as f64 / secs(scan_r),
        unit: "higher is better",
    });

    let size_o = std::fs::metadata(&ours_path).map(|m| m.len()).unwrap_or(0);
    let size_r = std::fs::metadata(&redb_path).map(|m| m.len()).unwrap_or(0);
    let st = ours.stats().expect("stats");
    println!(
        "ours after random load: file {:.1} MB, in use {:.1} MB ({} pages, {} free), depth {}",
        size_o as f64 / 1e6,
        (st.page_count - st.free_pages) as f64 * 4096.0 / 1e6,
        st.page_count,
        st.free_pages,
        st.buckets.first().map(|b| b.depth).unwrap_or(0)
    );
    rows.push(Row {
        name: "file size after random load, MB",
        ours: size_o as f64 / 1e6,
        redb: size_r as f64 / 1e6,
        unit: "lower is better",
    });

    // Delete half, then defrag / compact.
    let t = Instant::now();
    for start in (0..n).step_by(2 * BATCH) {
        let mut tx = ours.begin_write().expect("begin");
        for i in (start..(start + 2 * BATCH as u64).min(n)).step_by(2) {
            tx.delete(BUCKET, &rand_key(i)).expect("delete");
        }
        tx.commit().expect("commit");
    }
    ours.defrag().expect("defrag");
    let t_ours = t.elapsed();
    let t = Instant::now();
    for start in (0..n).step_by(2 * BATCH) {
        let tx = rdb.begin_write().expect("begin");
        {
            let mut table = tx.open_table(TABLE).expect("table");
            for i in (start..(start + 2 * BATCH as u64).min(n)).step_by(2) {
                table.remove(&rand_key(i)[..]).expect("remove");
            }
        }
        tx.commit().expect("commit");
    }
    rdb.compact().expect("compact");
    let t_redb = t.elapsed();
    rows.push(Row {
        name: "delete half + defrag/compact, s",
        ours: secs(t_ours),
        redb: secs(t_redb),
        unit: "lower is better",
    });
    let size_o = std::fs::metadata(&ours_path).map(|m| m.len()).unwrap_or(0);
    let size_r = std::fs::metadata(&redb_path).map(|m| m.len()).unwrap_or(0);
    rows.push(Row {
        name: "file size after delete half + defrag, MB",
        ours: size_o as f64 / 1e6,
        redb: size_r as f64 / 1e6,
        unit: "lower is better",
    });
    assert_eq!(
        ours.begin_read()
            .get(BUCKET, &rand_key(1))
            .expect("get")
            .map(|v| v.len()),
        Some(256)
    );

    println!(
        "{:<44} {:>14} {:>14} {:>12}  ",
        "measure", "ours", "redb", "ours/redb"
    );
    for r in rows {
        println!(
            "{:<44} {:>14.1} {:>14.1} {:>12.2}  ({})",
            r.name,
            r.ours,
            r.redb,
            r.ours / r.redb,
            r.unit
        );
    }
}
