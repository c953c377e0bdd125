// WAL save throughput with fdatasync on, next to plain std::fs writing and fdatasyncing the same
// bytes on the same disk: the WAL should cost one fdatasync plus encoding (target ≤ 1.2×).
//
// Run: scripts/bench.sh wal   (or cargo bench -p common --bench wal)

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use common::wal::{Wal, WalOptions};
use proto::raftpb::{Entry, HardState};

const ENTRY_BYTES: usize = 256;

fn entries(first: u64, n: usize) -> Vec<Entry> {
    (0..n as u64)
        .map(|i| Entry {
            term: 2,
            index: first + i,
            r#type: 0,
            data: Some(vec![b'x'; ENTRY_BYTES]),
        })
        .collect()
}

struct Run {
    saves: usize,
    elapsed: Duration,
    bytes: u64,
}

fn bench_wal(dir: &std::path::Path, batch: usize, saves: usize, sync: bool) -> Run {
    let wal_dir = dir.join(format!("wal-{batch}-{sync}"));
    let opts = WalOptions {
        unsafe_no_sync: !sync,
        ..WalOptions::default()
    };
    let mut w = Wal::create_with(&wal_dir, b"bench", opts).expect("create wal");
    let batches: Vec<Vec<Entry>> = (0..saves)
        .map(|s| entries(1 + (s * batch) as u64, batch))
        .collect();
    let start_bytes = w.stats().bytes_written;
    let start = Instant::now();
    for (s, b) in batches.iter().enumerate() {
        let st = HardState {
            term: 2,
            vote: 1,
            commit: ((s + 1) * batch) as u64,
        };
        w.save(&st, b).expect("save");
    }
    let elapsed = start.elapsed();
    Run {
        saves,
        elapsed,
        bytes: w.stats().bytes_written - start_bytes,
    }
}

/// The same number of bytes per save, written with pwrite + fdatasync with plain std::fs; with
/// `fallocate` the file is first preallocated the way a WAL segment is (unwritten extents).
fn bench_raw(
    dir: &std::path::Path,
    bytes_per_save: usize,
    saves: usize,
    fallocate: bool,
) -> Duration {
    let path = dir.join("raw");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("create raw file");
    if fallocate {
        common::fileutil::preallocate(&f, 64_000_000, true, &path).expect("preallocate");
    } else {
        f.set_len(64_000_000).expect("extend");
    }
    f.sync_all().expect("sync");
    let buf = vec![b'x'; bytes_per_save];
    let mut off = 0u64;
    let start = Instant::now();
    for _ in 0..saves {
        f.write_all_at(&buf, off).expect("write");
        f.sync_data().expect("fdatasync");
        off += buf.len() as u64;
    }
    start.elapsed()
}

fn main() {
    let base = std::env::var("BENCH_DIR").ok();
    let tmp = match &base {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("temp dir");
    println!(
        "WAL save with fdatasync, {ENTRY_BYTES}-byte entries, dir {}",
        tmp.path().display()
    );
    println!(
        "{:>6} {:>6} {:>11} {:>8} {:>11} {:>11} {:>11} {:>11} {:>8} {:>9}",
        "batch",
        "saves",
        "entries/s",
        "MB/s",
        "wal us/op",
        "no-sync us",
        "std us/op",
        "std+fa us",
        "wal/std",
        "wal/std+fa"
    );
    for (batch, saves) in [(1usize, 1000usize), (16, 500), (256, 100)] {
        let wal = bench_wal(tmp.path(), batch, saves, true);
        let nosync = bench_wal(tmp.path(), batch, saves, false);
        let per_save = (wal.bytes as usize) / wal.saves;
        let raw = bench_raw(tmp.path(), per_save, saves, false);
        let raw_fa = bench_raw(tmp.path(), per_save, saves, true);
        let secs = wal.elapsed.as_secs_f64();
        println!(
            "{:>6} {:>6} {:>11.0} {:>8.2} {:>11.1} {:>11.1} {:>11.1} {:>11.1} {:>8.2} {:>9.2}",
            batch,
            saves,
            (batch * saves) as f64 / secs,
            wal.bytes as f64 / secs / 1e6,
            secs * 1e6 / saves as f64,
            nosync.elapsed.as_secs_f64() * 1e6 / saves as f64,
            raw.as_secs_f64() * 1e6 / saves as f64,
            raw_fa.as_secs_f64() * 1e6 / saves as f64,
            secs / raw.as_secs_f64(),
            secs / raw_fa.as_secs_f64()
        );
    }
}
