// Crash test of the WAL: a child process saving entries with fdatasync is killed -9 at random
// moments; every entry it reported saved must be read back after repair. Its own test binary,
// because a fork in a parallel test briefly holds other tests' lock files open.

mod wal_fixtures;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::wal::{self, Wal, WalError, WalOptions};
use proto::raftpb::Entry;
use wal_fixtures::{entry, hs, metadata, zero};

const CHILD_ENV: &str = "ETCD_RS_WAL_CRASH_CHILD";

/// The writer side of the crash test: appends entries forever, printing each index once its
/// save (with fdatasync) returned.
fn crash_child(dir: &Path) -> ! {
    use std::io::Write;
    let opts = WalOptions {
        segment_size: 256 * 1024,
        ..Default::default()
    };
    let mut w = if dir.exists() {
        let mut w = match Wal::open_with(dir, &zero(), opts) {
            Ok(w) => w,
            Err(e) => panic!("child open: {e}"),
        };
        match w.read_all() {
            Ok(_) => w,
            Err(WalError::TornTail { .. }) => {
                drop(w);
                wal::repair(dir).unwrap();
                let mut w = Wal::open_with(dir, &zero(), opts).unwrap();
                w.read_all().unwrap();
                w
            }
            Err(e) => panic!("child read_all: {e}"),
        }
    } else {
        Wal::create_with(dir, &metadata(), opts).unwrap()
    };
    let mut next = w.last_index() + 1;
    let out = std::io::stdout();
    loop {
        let batch: Vec<Entry> = (next..next + 3)
            .map(|i| entry(i, 1, 100 + (i % 900) as usize))
            .collect();
        let last = next + 2;
        w.save(&hs(1, last), &batch).unwrap();
        let mut o = out.lock();
        writeln!(o, "saved {last}").unwrap();
        o.flush().unwrap();
        next = last + 1;
    }
}

#[test]
fn kill_9_mid_write_loses_no_acknowledged_entry() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        crash_child(Path::new(&dir));
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let exe = std::env::current_exe().unwrap();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut acked = 0u64;
    for round in 0..24 {
        let mut child = Command::new(&exe)
            .args([
                "kill_9_mid_write_loses_no_acknowledged_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait = Duration::from_millis(20 + seed % 120);
        let reader = std::thread::spawn(move || {
            let mut max = 0u64;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("saved ") {
                    max = max.max(n.trim().parse().unwrap());
                }
            }
            max
        });
        std::thread::sleep(wait);
        child.kill().unwrap();
        child.wait().unwrap();
        let max = reader.join().unwrap();
        acked = acked.max(max);

        // Recover as the server does: a torn tail is repaired, then everything is read.
        let mut w = Wal::open(&dir, &zero()).unwrap();
        let got = match w.read_all() {
            Err(WalError::TornTail { .. }) => {
                drop(w);
                wal::repair(&dir).unwrap();
                let mut w = Wal::open(&dir, &zero()).unwrap();
                w.read_all()
                    .unwrap_or_else(|e| panic!("round {round}: {e}"))
            }
            other => other.unwrap_or_else(|e| panic!("round {round}: {e}")),
        };
        let last = got.entries.last().map(|e| e.index).unwrap_or(0);
        assert!(
            last >= acked,
            "round {round}: acknowledged up to {acked}, WAL has up to {last}"
        );
        for (i, e) in got.entries.iter().enumerate() {
            assert_eq!(e.index, i as u64 + 1, "round {round}: gap in the log");
            assert_eq!(e, &entry(e.index, 1, 100 + (e.index % 900) as usize));
        }
    }
    assert!(acked > 0, "the child never acknowledged a write");
}
