// WAL behaviour through its public API on real files: segment cuts, reopening at snapshot
// markers, torn tails, corruption in the middle, and kill -9 of a writer mid-save.

mod wal_fixtures;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::wal::{self, RepairOutcome, Wal, WalError, WalOptions};
use proto::raftpb::{Entry, HardState};
use proto::walpb;
use wal_fixtures::{entry, hs, metadata, zero};

fn small_segments() -> WalOptions {
    WalOptions {
        segment_size: 64 * 1024,
        ..Default::default()
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

#[test]
fn round_trip_across_segment_cuts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let mut w = Wal::create_with(&dir, &metadata(), small_segments()).unwrap();
    let mut written = Vec::new();
    for i in 1..=2000u64 {
        let e = entry(i, 1 + i / 500, 100 + (i as usize % 300));
        w.save(&hs(1 + i / 500, i), std::slice::from_ref(&e))
            .unwrap();
        written.push(e);
    }
    drop(w);
    let segs = segments(&dir);
    assert!(
        segs.len() >= 5,
        "expected several segment cuts, got {}",
        segs.len()
    );
    // A cut segment is trimmed to its records; names carry the next entry index.
    for pair in segs.windows(2) {
        let (_, i0) = wal::parse_wal_name(pair[0].file_name().unwrap().to_str().unwrap()).unwrap();
        let (_, i1) = wal::parse_wal_name(pair[1].file_name().unwrap().to_str().unwrap()).unwrap();
        assert!(i1 > i0);
    }

    let mut w = Wal::open_with(&dir, &zero(), small_segments()).unwrap();
    let got = w.read_all().unwrap();
    assert_eq!(got.metadata, metadata());
    assert_eq!(got.state, hs(1 + 2000 / 500, 2000));
    assert_eq!(got.entries, written);

    // Appending after a reopen continues the crc chain: a second reopen reads everything.
    let e = entry(2001, 5, 50);
    w.save(&hs(5, 2001), std::slice::from_ref(&e)).unwrap();
    drop(w);
    written.push(e);
    let mut w = Wal::open_for_read(&dir, &zero()).unwrap();
    assert_eq!(w.read_all().unwrap().entries, written);
}

#[test]
fn reopen_at_snapshot_marker_in_the_middle() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let mut w = Wal::create_with(&dir, &metadata(), small_segments()).unwrap();
    let mut all = Vec::new();
    for i in 1..=1000u64 {
        let e = entry(i, 2, 200);
        w.save(&hs(2, i), std::slice::from_ref(&e)).unwrap();
        all.push(e);
        if i == 600 {
            w.save_snapshot(&walpb::Snapshot {
                index: 600,
                term: 2,
                conf_state: None,
            })
            .unwrap();
        }
    }
    drop(w);
    let marker = walpb::Snapshot {
        index: 600,
        term: 2,
        conf_state: None,
    };
    let mut w = Wal::open_with(&dir, &marker, small_segments()).unwrap();
    let got = w.read_all().unwrap();
    assert_eq!(got.entries, all[600..].to_vec());
    drop(w);

    // A marker with the wrong term, or one never written, is refused.
    let mut w = Wal::open_for_read(
        &dir,
        &walpb::Snapshot {
            index: 600,
            term: 3,
            conf_state: None,
        },
    )
    .unwrap();
    assert!(matches!(w.read_all(), Err(WalError::SnapshotMismatch)));
    let mut w = Wal::open_for_read(
        &dir,
        &walpb::Snapshot {
            index: 601,
            term: 2,
            conf_state: None,
        },
    )
    .unwrap();
    assert!(matches!(w.read_all(), Err(WalError::SnapshotNotFound)));

    let valid = wal::valid_snapshot_entries(&dir).unwrap();
    assert_eq!(
        valid.iter().map(|s| s.index).collect::<Vec<_>>(),
        vec![0, 600]
    );
}

#[test]
fn later_entries_replace_earlier_ones_with_the_same_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let mut w = Wal::create(&dir, &metadata()).unwrap();
    let first: Vec<Entry> = (1..=5).map(|i| entry(i, 1, 10)).collect();
    w.save(&hs(1, 2), &first).unwrap();
    // A new leader overwrote the log from index 3 in term 2.
    let second: Vec<Entry> = (3..=4).map(|i| entry(i, 2, 20)).collect();
    w.save(&hs(2, 4), &second).unwrap();
    drop(w);
    let mut w = Wal::open(&dir, &zero()).unwrap();
    let got = w.read_all().unwrap().entries;
    let want: Vec<Entry> = first[..2].iter().chain(second.iter()).cloned().collect();
    assert_eq!(got, want);
}

/// Writes `n` entries into a fresh WAL and returns (dir, entries, offset of the last record
/// frame in the last segment, end offset of that frame).
fn wal_with_big_last_record(root: &Path, n: u64) -> (PathBuf, Vec<Entry>, u64, u64) {
    let dir = root.join("wal");
    let mut w = Wal::create(&dir, &metadata()).unwrap();
    let mut all = Vec::new();
    for i in 1..=n {
        let e = entry(i, 1, if i == n { 600 } else { 40 });
        w.save(&HardState::default(), std::slice::from_ref(&e))
            .unwrap();
        all.push(e);
    }
    drop(w);
    // Find the last frame by walking the length words.
    let seg = segments(&dir).pop().unwrap();
    let bytes = fs::read(&seg).unwrap();
    let mut off = 0usize;
    let mut last = 0usize;
    loop {
        let wlen = u64::from_le_bytes(bytes[off..off + 8].try_into().unwrap());
        if wlen == 0 {
            break;
        }
        let len = (wlen & 0x00ff_ffff_ffff_ffff) as usize;
        let pad = if wlen >> 63 == 1 {
            ((wlen >> 56) & 7) as usize
        } else {
            0
        };
        last = off;
        off += 8 + len + pad;
    }
    (dir, all, last as u64, off as u64)
}

#[test]
fn torn_tail_at_every_offset_of_the_last_record_is_repaired_without_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, all, last_start, last_end) = wal_with_big_last_record(tmp.path(), 20);
    let seg = segments(&dir).pop().unwrap();
    let pristine = fs::read(&seg).unwrap();
    let mut checked = 0;
    for cut in (last_start + 1)..last_end {
        fs::write(&seg, &pristine[..cut as usize]).unwrap();
        // The writer refuses to start on a torn tail...
        let mut w = Wal::open(&dir, &zero()).unwrap();
        match w.read_all() {
            Err(WalError::TornTail { file, offset }) => {
                assert_eq!(file, seg);
                assert_eq!(offset, last_start);
            }
            other => panic!("cut at {cut}: expected a torn tail, got {other:?}"),
        }
        drop(w);
        // ...repair truncates exactly the torn record, and nothing before it is lost.
        match wal::repair(&dir).unwrap() {
            RepairOutcome::Truncated { offset, backup, .. } => {
                assert_eq!(offset, last_start);
                fs::remove_file(backup).unwrap();
            }
            RepairOutcome::Clean => panic!("cut at {cut}: repair found nothing"),
        }
        let mut w = Wal::open(&dir, &zero()).unwrap();
        let got = w.read_all().unwrap();
        assert_eq!(got.entries, all[..all.len() - 1].to_vec(), "cut at {cut}");
        drop(w);
        checked += 1;
    }
    assert!(checked >= 200, "only {checked} offsets checked");
}

#[test]
fn unwritten_sector_in_the_last_record_is_a_torn_tail() {
    // Power loss in a preallocated segment: the length word reached the disk, a later sector
    // of the record did not (it reads as zeros).
    let tmp = tempfile::tempdir().unwrap();
    let (dir, all, last_start, last_end) = wal_with_big_last_record(tmp.path(), 20);
    let seg = segments(&dir).pop().unwrap();
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    let sector_start = (last_start + 8).div_ceil(512) * 512;
    assert!(sector_start < last_end);
    let n = (last_end - sector_start).min(512) as usize;
    f.write_all_at(&vec![0u8; n], sector_start).unwrap();
    drop(f);
    let mut w = Wal::open(&dir, &zero()).unwrap();
    assert!(matches!(w.read_all(), Err(WalError::TornTail { .. })));
    drop(w);
    assert!(matches!(
        wal::repair(&dir).unwrap(),
        RepairOutcome::Truncated { .. }
    ));
    let mut w = Wal::open(&dir, &zero()).unwrap();
    assert_eq!(w.read_all().unwrap().entries, all[..all.len() - 1].to_vec());
}

#[test]
fn flipped_byte_in_a_middle_record_is_an_error_naming_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _all, last_start, _) = wal_with_big_last_record(tmp.path(), 20);
    let seg = segments(&dir).pop().unwrap();
    let mut bytes = fs::read(&seg).unwrap();
    // Walk to the 10th frame and flip a byte inside its data.
    let mut off = 0usize;
    for _ in 0..10 {
        let wlen = u64::from_le_bytes(bytes[off..off + 8].try_into().unwrap());
        let len = (wlen & 0x00ff_ffff_ffff_ffff) as usize;
        let pad = if wlen >> 63 == 1 {
            ((wlen >> 56) & 7) as usize
        } else {
            0
        };
        off += 8 + len + pad;
    }
    assert!((off as u64) < last_start);
    bytes[off + 8 + 12] ^= 0x01;
    fs::write(&seg, &bytes).unwrap();

    for read_only in [false, true] {
        let mut w = if read_only {
            Wal::open_for_read(&dir, &zero()).unwrap()
        } else {
            Wal::open(&dir, &zero()).unwrap()
        };
        let err = w.read_all().unwrap_err();
        match &err {
            WalError::CrcMismatch { file, offset } | WalError::Corrupt { file, offset, .. } => {
                assert_eq!(file, &seg);
                assert_eq!(*offset, off as u64);
            }
            other => panic!("expected a corruption error, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains(seg.to_str().unwrap()) && msg.contains(&off.to_string()),
            "{msg}"
        );
    }
    // Repair refuses: this is not a torn tail, and the file is left as it was.
    assert!(wal::repair(&dir).is_err());
    assert_eq!(fs::read(&seg).unwrap(), bytes);
}

#[test]
fn two_writers_cannot_open_one_wal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let w = Wal::create(&dir, &metadata()).unwrap();
    let err = Wal::open(&dir, &zero()).unwrap_err();
    assert!(
        err.to_string().contains("locked by another process"),
        "{err}"
    );
    drop(w);
    let mut w = Wal::open(&dir, &zero()).unwrap();
    w.read_all().unwrap();
}

#[test]
fn release_lock_to_lets_purge_remove_old_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let mut w = Wal::create_with(&dir, &metadata(), small_segments()).unwrap();
    for i in 1..=1500u64 {
        w.save(&hs(1, i), &[entry(i, 1, 300)]).unwrap();
    }
    let before = segments(&dir).len();
    assert!(before > 4);
    // Everything is locked: nothing can go.
    assert!(wal::purge(&dir, 2).unwrap().is_empty());
    w.release_lock_to(1400);
    let removed = wal::purge(&dir, 2).unwrap();
    assert!(!removed.is_empty());
    let left = segments(&dir);
    // The segment holding index 1400 and everything after it survive.
    assert!(left.len() >= 2);
    drop(w);
    let first_left = wal::parse_wal_name(left[0].file_name().unwrap().to_str().unwrap()).unwrap();
    assert!(first_left.1 <= 1400);
}

#[test]
fn create_refuses_existing_dir_and_open_refuses_empty() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(matches!(
        Wal::create(tmp.path(), b"m"),
        Err(WalError::Exists(_))
    ));
    assert!(matches!(
        Wal::open(tmp.path(), &zero()),
        Err(WalError::FileNotFound(_))
    ));
}

/// The byte ranges of `path` the filesystem holds as allocated but unwritten (they read as
/// zeros, and writing them changes the file's extent map), or None where FIEMAP is missing.
fn unwritten_ranges(path: &Path) -> Option<Vec<(u64, u64)>> {
    use std::os::fd::AsRawFd;
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_FLAG_SYNC: u64 = 1;
    const FIEMAP_EXTENT_UNWRITTEN: u64 = 0x800;
    const EXTENTS: usize = 256;
    // struct fiemap as u64 words (little-endian halves): start, length, flags | mapped << 32,
    // extent_count | reserved << 32; then struct fiemap_extent, 7 words each: logical,
    // physical, length, 2 reserved, flags | reserved << 32, reserved.
    let mut buf = vec![0u64; 4 + EXTENTS * 7];
    buf[1] = u64::MAX;
    buf[2] = FIEMAP_FLAG_SYNC;
    buf[3] = EXTENTS as u64;
    let f = fs::File::open(path).unwrap();
    // Safety: the buffer is laid out as the kernel's struct fiemap with room for EXTENTS.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP as _, buf.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    let mapped = ((buf[2] >> 32) as usize).min(EXTENTS);
    let ranges = (0..mapped)
        .map(|i| &buf[4 + i * 7..4 + (i + 1) * 7])
        .filter(|e| e[5] & FIEMAP_EXTENT_UNWRITTEN != 0)
        .map(|e| (e[0], e[0] + e[2]))
        .collect();
    Some(ranges)
}

/// Offset just past the last non-zero byte of `path` (records end there, give or take their
/// padding).
fn end_of_data(path: &Path) -> u64 {
    let b = fs::read(path).unwrap();
    b.iter().rposition(|&x| x != 0).map_or(0, |i| i as u64 + 1)
}

#[test]
fn tail_is_written_ahead_of_the_records_and_reads_back() {
    // Segments of 2 MB and 1-4 KiB entries: several zeroing steps per segment, two cuts, and
    // a reopen in the middle (the writer then starts zeroing from the reopened tail).
    let opts = || WalOptions {
        segment_size: 2_000_000,
        ..Default::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let mut w = Wal::create_with(&dir, &metadata(), opts()).unwrap();
    let mut written = Vec::new();
    let mut next = 1u64;
    let mut save = |w: &mut Wal, written: &mut Vec<Entry>, n: u64| {
        for _ in 0..n {
            let e = entry(next, 1, 1000 + (next as usize * 37) % 3000);
            w.save(&hs(1, next), std::slice::from_ref(&e)).unwrap();
            written.push(e);
            next += 1;
        }
    };
    save(&mut w, &mut written, 1000);
    drop(w);
    let mut w = Wal::open_with(&dir, &zero(), opts()).unwrap();
    assert_eq!(w.read_all().unwrap().entries, written);
    save(&mut w, &mut written, 1000);
    let segs = segments(&dir);
    assert!(segs.len() >= 3, "expected two cuts, got {segs:?}");
    let tail = segs.last().unwrap().clone();
    let end = end_of_data(&tail);
    match unwritten_ranges(&tail) {
        // An append there would make each fdatasync write the inode too.
        Some(unwritten) => {
            let ahead = (end, end + 128 * 1024);
            assert!(
                unwritten.iter().all(|&(a, b)| b <= ahead.0 || a >= ahead.1),
                "the 128 KiB past the last record ({end}) are still unwritten: {unwritten:?}"
            );
        }
        None => eprintln!("FIEMAP unsupported here: only the read-back is checked"),
    }
    assert_eq!(fs::metadata(&tail).unwrap().len(), 2_000_000);
    drop(w);
    let mut w = Wal::open_for_read(&dir, &zero()).unwrap();
    let got = w.read_all().unwrap();
    assert_eq!(got.entries, written);
    assert_eq!(got.state, hs(1, next - 1));
}
