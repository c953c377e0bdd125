// `etcdutl check`: verifies a stopped member's data dir end to end — the WAL's CRC chain, the
// .snap files, the db's pages and structure and its etcd contents, and that the db's consistent
// index fits the log — and reports every fault it finds.

use std::path::{Path, PathBuf};

use common::backend::{Db, ReadTxn, buckets};
use common::wal::{RecordType, Records, WalError};
use prost::Message;
use proto::raftpb::{Entry, HardState};

use crate::datadir::DataDir;
use crate::error::Result;

/// One verified aspect of the data dir.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub ok: bool,
    /// A fault `etcdutl repair` fixes without losing acknowledged data (a torn WAL tail).
    pub repairable: bool,
    pub detail: String,
}

/// Everything `check` found, in order.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub data_dir: String,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn faults(&self) -> usize {
        self.findings.iter().filter(|f| !f.ok).count()
    }

    fn add(&mut self, check: &'static str, ok: bool, detail: String) {
        self.findings.push(Finding {
            check,
            ok,
            repairable: false,
            detail,
        });
    }
}

/// What the WAL walk learned.
#[derive(Debug, Default)]
pub struct WalSummary {
    pub segments: usize,
    pub records: u64,
    pub last_index: u64,
    pub hard_state: HardState,
    /// Snapshot markers (index, term) in log order.
    pub markers: Vec<(u64, u64)>,
    /// Where the log stopped early, when it did: the fault.
    pub fault: Option<WalError>,
}

/// Reads every WAL record, checking the CRC chain across segments.
pub fn walk_wal(dir: &Path) -> Result<WalSummary> {
    let mut s = WalSummary {
        segments: common::fileutil::read_dir_names(dir, ".wal")
            .map(|n| n.len())
            .unwrap_or(0),
        ..WalSummary::default()
    };
    let records = Records::open(dir)?;
    for r in records {
        let rec = match r {
            Ok(r) => r.record,
            Err(e) => {
                s.fault = Some(e);
                break;
            }
        };
        s.records += 1;
        let data = rec.data.as_deref().unwrap_or(&[]);
        match rec.r#type {
            t if t == RecordType::Entry as i64 => {
                if let Ok(e) = Entry::decode(data) {
                    s.last_index = e.index;
                }
            }
            t if t == RecordType::State as i64 => {
                if let Ok(h) = HardState::decode(data) {
                    s.hard_state = h;
                }
            }
            t if t == RecordType::Snapshot as i64 => {
                if let Ok(m) = proto::walpb::Snapshot::decode(data) {
                    s.last_index = s.last_index.max(m.index);
                    s.markers.push((m.index, m.term));
                }
            }
            _ => {}
        }
    }
    Ok(s)
}

/// The db's consistent index (0 when absent).
pub fn consistent_index(tx: &impl ReadTxn) -> u64 {
    tx.get(buckets::META, b"consistent_index")
        .ok()
        .flatten()
        .and_then(|v| v.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

/// Every key of the `key` bucket is a revision (17 bytes, 18 for a tombstone) and every value
/// a KeyValue written at that revision: catches damage inside pages that the page structure
/// cannot show (bbolt pages carry no checksum).
fn check_key_bucket(tx: &impl ReadTxn) -> std::result::Result<u64, String> {
    let mut n = 0u64;
    let mut bad: Option<String> = None;
    tx.for_each(buckets::KEY, &mut |k, v| {
        n += 1;
        if bad.is_some() {
            return Ok(());
        }
        let shape = (k.len() == 17 || (k.len() == 18 && k[17] == b't')) && k[8] == b'_';
        if !shape {
            bad = Some(format!(
                "key bucket entry {n} has a malformed revision key {k:02x?}"
            ));
            return Ok(());
        }
        let main = i64::from_be_bytes(k[..8].try_into().unwrap_or([0; 8]));
        // A tombstone's value holds the key only (etcd writes KeyValue{key} for a delete).
        let tombstone = k.len() == 18;
        match proto::mvccpb::KeyValue::decode(v) {
            Ok(kv) if kv.mod_revision == main || (tombstone && kv.mod_revision == 0) => {}
            Ok(kv) => {
                bad = Some(format!(
                    "key bucket entry at revision {main} holds a key-value of revision {}",
                    kv.mod_revision
                ))
            }
            Err(e) => {
                bad = Some(format!(
                    "key bucket entry at revision {main} does not decode: {e}"
                ))
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    match bad {
        Some(b) => Err(b),
        None => Ok(n),
    }
}

/// Runs every check over `dir` (which must not be in use by a server).
pub fn check(dir: &DataDir) -> Result<Report> {
    let mut rep = Report {
        data_dir: dir.data_dir.display().to_string(),
        findings: Vec::new(),
    };
    let bar = crate::progress::spinner("checking");

    // The WAL.
    let wal = if common::wal::exists(&dir.wal_dir) {
        let w = walk_wal(&dir.wal_dir)?;
        match &w.fault {
            None => rep.add(
                "wal",
                true,
                format!(
                    "{} segments, {} records, CRC chain intact, last index {}, commit {}",
                    w.segments, w.records, w.last_index, w.hard_state.commit
                ),
            ),
            Some(e @ WalError::TornTail { .. }) => rep.findings.push(Finding {
                check: "wal",
                ok: false,
                repairable: true,
                detail: format!("{e}"),
            }),
            Some(e) => rep.add(
                "wal",
                false,
                format!(
                    "{e} (after {} good records; not repairable: restore from a snapshot)",
                    w.records
                ),
            ),
        }
        Some(w)
    } else {
        rep.add("wal", false, format!("no WAL in {}", dir.wal_dir.display()));
        None
    };

    // The .snap files: each must decode with a good CRC, and the newest snapshot the WAL
    // marks as committed must have its file.
    let mut snap_files: Vec<(u64, u64, PathBuf)> = Vec::new();
    let mut snap_ok = true;
    for name in common::fileutil::read_dir_names(&dir.snap_dir, ".snap").unwrap_or_default() {
        let path = dir.snap_dir.join(&name);
        match common::snap::read(&path) {
            Ok(s) => {
                let md = s.metadata.unwrap_or_default();
                snap_files.push((md.term, md.index, path));
            }
            Err(e) => {
                snap_ok = false;
                rep.add("snap", false, format!("{}: {e}", path.display()));
            }
        }
    }
    if let Some(w) = &wal {
        let newest = w
            .markers
            .iter()
            .filter(|(i, _)| *i > 0 && *i <= w.hard_state.commit.max(w.last_index))
            .max();
        if let Some((index, term)) = newest
            && !snap_files.iter().any(|(t, i, _)| t == term && i == index)
        {
            snap_ok = false;
            rep.add(
                "snap",
                false,
                format!(
                    "the WAL records a snapshot at index {index} (term {term}) but {} is missing",
                    dir.snap_dir
                        .join(common::snap::snap_name(*term, *index))
                        .display()
                ),
            );
        }
    }
    if snap_ok {
        rep.add(
            "snap",
            true,
            format!("{} .snap files, each CRC intact", snap_files.len()),
        );
    }

    // The db: pages and structure, then etcd's contents.
    let mut ci = None;
    match Db::open_read_only(&dir.db) {
        Err(e) => rep.add("db", false, format!("{}: {e}", dir.db.display())),
        Ok(db) => match db.check() {
            Err(e) => rep.add("db", false, format!("{}: {e}", dir.db.display())),
            Ok(()) => {
                let tx = db.begin_read();
                match check_key_bucket(&tx) {
                    Ok(n) => {
                        rep.add(
                            "db",
                            true,
                            format!("{} bytes, pages and structure intact, {n} revisions in the key bucket decode", tx.size()),
                        );
                        ci = Some(consistent_index(&tx));
                    }
                    Err(e) => rep.add("db", false, format!("{}: {e}", dir.db.display())),
                }
            }
        },
    }

    // The consistent index fits the log: not past its end (the db would hold writes the log
    // never had), not before the newest snapshot (the member would need that snapshot's db).
    if let (Some(ci), Some(w)) = (ci, &wal)
        && w.fault.is_none()
    {
        let snap_index = snap_files.iter().map(|(_, i, _)| *i).max().unwrap_or(0);
        if ci > w.last_index {
            rep.add(
                "consistent-index",
                false,
                format!(
                    "the db's consistent index {ci} is past the WAL's last index {}",
                    w.last_index
                ),
            );
        } else if ci < snap_index {
            rep.add(
                "consistent-index",
                false,
                format!("the db's consistent index {ci} is before the newest snapshot's index {snap_index}"),
            );
        } else {
            rep.add(
                "consistent-index",
                true,
                format!("{ci} ≤ WAL last index {}", w.last_index),
            );
        }
    }
    crate::progress::finish(bar);
    Ok(rep)
}
