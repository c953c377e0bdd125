// Restore benchmark: builds an etcd-shaped snapshot of ~1 GiB (BENCH_SNAPSHOT_MB to change it)
// with the backend library, then times `etcdutl snapshot status`, `snapshot restore` and
// `check` on it under /usr/bin/time -v (wall time and peak RSS of the process).
//
// Run: scripts/bench.sh etcdutl

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::backend::{Db, buckets};
use prost::Message;

const VALUE: usize = 1024;
/// Bytes each key takes in the db file (revision key, KeyValue, page overhead), measured.
const ON_DISK: usize = 1378;
const BATCH: usize = 20_000;

/// etcd's revision key: main (u64 BE), '_', sub (u64 BE).
fn rev_key(main: i64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[..8].copy_from_slice(&main.to_be_bytes());
    k[8] = b'_';
    k
}

fn build(path: &Path, mb: usize) -> usize {
    let db = Db::open(path).expect("create the db");
    let mut tx = db.begin_write().expect("write tx");
    for b in buckets::ALL {
        tx.create_bucket_if_not_exists(b).expect("bucket");
    }
    tx.commit().expect("commit");
    let n = mb * 1024 * 1024 / ON_DISK;
    let value = vec![b'v'; VALUE];
    let mut i = 0;
    while i < n {
        let mut tx = db.begin_write().expect("write tx");
        tx.set_fill_percent(1.0);
        for _ in 0..BATCH.min(n - i) {
            let rev = i as i64 + 2;
            let kv = proto::mvccpb::KeyValue {
                key: format!("/bench/key/{i:010}").into_bytes(),
                create_revision: rev,
                mod_revision: rev,
                version: 1,
                value: value.clone(),
                lease: 0,
            };
            tx.put_seq(buckets::KEY, &rev_key(rev), &kv.encode_to_vec())
                .expect("put");
            i += 1;
        }
        tx.commit().expect("commit");
    }
    let mut tx = db.begin_write().expect("write tx");
    tx.put(
        buckets::META,
        b"consistent_index",
        &(n as u64).to_be_bytes(),
    )
    .expect("meta");
    tx.commit().expect("commit");
    n
}

/// Runs etcdutl under /usr/bin/time -v; returns (wall seconds, peak RSS in MiB).
fn timed(args: &[&str]) -> (f64, f64) {
    let utl = env!("CARGO_BIN_EXE_etcdutl");
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(utl)
        .args(args)
        .output()
        .expect("run /usr/bin/time");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "etcdutl {args:?} failed: {err}");
    let field = |name: &str| {
        err.lines()
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    let rss_kb: f64 = field("Maximum resident set size (kbytes):")
        .parse()
        .unwrap_or(0.0);
    let wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss):");
    let secs = wall
        .split(':')
        .fold(0.0, |acc, p| acc * 60.0 + p.parse::<f64>().unwrap_or(0.0));
    (secs, rss_kb / 1024.0)
}

fn main() {
    let mb: usize = std::env::var("BENCH_SNAPSHOT_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let tmp = tempfile::tempdir().expect("temp dir");
    let db = tmp.path().join("src.db");
    let started = Instant::now();
    let n = build(&db, mb);
    let snap = tmp.path().join("snapshot.db");
    let size = Db::open_read_only(&db)
        .expect("open")
        .snapshot_to_file(&snap, true)
        .expect("snapshot with sha256 trailer");
    std::fs::remove_file(&db).ok();
    println!(
        "snapshot: {n} keys, {:.1} MiB, built in {:.1}s",
        size as f64 / 1048576.0,
        started.elapsed().as_secs_f64()
    );
    let s = snap.to_str().expect("utf-8 path");
    let (t, rss) = timed(&["snapshot", "status", s]);
    println!("etcdutl snapshot status:  {t:>6.2}s  peak RSS {rss:>7.1} MiB");
    let dir = tmp.path().join("restored");
    let d = dir.to_str().expect("utf-8 path");
    let (t, rss) = timed(&["snapshot", "restore", s, "--data-dir", d]);
    println!(
        "etcdutl snapshot restore: {t:>6.2}s  peak RSS {rss:>7.1} MiB  ({:.0} MiB/s)",
        size as f64 / 1048576.0 / t.max(0.001)
    );
    let (t, rss) = timed(&["check", "--data-dir", d]);
    println!("etcdutl check:            {t:>6.2}s  peak RSS {rss:>7.1} MiB");
    // The real etcdctl's restore of the same file, as the baseline.
    let real = tmp.path().join("real");
    let started = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "restore", s, "--data-dir"])
        .arg(&real)
        .output();
    if let Ok(out) = out
        && out.status.success()
    {
        let err = String::from_utf8_lossy(&out.stderr);
        let rss = err
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("Maximum resident set size (kbytes):")
                    .map(|v| v.trim().parse::<f64>().unwrap_or(0.0))
            })
            .unwrap_or(0.0);
        println!(
            "etcd 3.4 etcdctl restore: {:>6.2}s  peak RSS {:>7.1} MiB",
            started.elapsed().as_secs_f64(),
            rss / 1024.0
        );
    }
}
