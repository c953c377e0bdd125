// `etcdutl repair`: fixes what can be fixed without losing an acknowledged write — a torn WAL
// tail (truncated, the old bytes kept as .broken), temp files a crash left, .snap files no WAL
// marker names — and refuses, untouched, everything else (damage inside the log or the db).

use std::path::PathBuf;

use common::backend::Db;
use common::wal::{RepairOutcome, WalError};

use crate::check::walk_wal;
use crate::datadir::DataDir;
use crate::error::{Error, Result};

/// What repair did, one line per action.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Repaired {
    pub actions: Vec<String>,
}

/// Repairs `dir` (which must not be in use by a server).
pub fn repair(dir: &DataDir) -> Result<Repaired> {
    dir.ensure_not_running()?;
    // Refuse first, change nothing: a db that fails its check or a WAL damaged before its end.
    if dir.db.exists() {
        let db = Db::open_read_only(&dir.db)
            .map_err(|e| refuse(format!("the db {} does not open: {e}", dir.db.display())))?;
        db.check()
            .map_err(|e| refuse(format!("the db {} is damaged: {e}", dir.db.display())))?;
    }
    let wal = if common::wal::exists(&dir.wal_dir) {
        let w = walk_wal(&dir.wal_dir)?;
        match &w.fault {
            None | Some(WalError::TornTail { .. }) => {}
            Some(e) => {
                return Err(refuse(format!(
                    "the WAL is damaged before its end ({e}); truncating there would drop acknowledged entries"
                )));
            }
        }
        Some(w)
    } else {
        None
    };

    let mut out = Repaired::default();
    if let Some(w) = &wal
        && matches!(w.fault, Some(WalError::TornTail { .. }))
    {
        match common::wal::repair(&dir.wal_dir)? {
            RepairOutcome::Truncated {
                file,
                offset,
                backup,
            } => out.actions.push(format!(
                "truncated the torn tail of {} at offset {offset} (old bytes kept in {})",
                file.display(),
                backup.display()
            )),
            RepairOutcome::Clean => {}
        }
    }
    // Temp files: unfinished .snap saves and db transfers, and the WAL's preallocated next
    // segments (recreated at start).
    let snapshotter = common::snap::Snapshotter::new(&dir.snap_dir);
    if dir.snap_dir.is_dir() {
        for p in snapshotter.cleanup_tmp()? {
            out.actions
                .push(format!("removed temp file {}", p.display()));
        }
    }
    for name in common::fileutil::read_dir_names(&dir.wal_dir, ".tmp").unwrap_or_default() {
        let p = dir.wal_dir.join(name);
        std::fs::remove_file(&p).map_err(crate::error::io("remove", &p))?;
        out.actions
            .push(format!("removed temp file {}", p.display()));
    }
    // .snap files no WAL marker names are never loaded (a crash between writing the file and
    // its marker, or a foreign file).
    if let Some(w) = &wal {
        let wal_after = walk_wal(&dir.wal_dir)?;
        let markers = if wal_after.fault.is_none() {
            wal_after.markers
        } else {
            w.markers.clone()
        };
        for name in common::fileutil::read_dir_names(&dir.snap_dir, ".snap").unwrap_or_default() {
            let p: PathBuf = dir.snap_dir.join(&name);
            let known = markers
                .iter()
                .any(|(i, t)| common::snap::snap_name(*t, *i) == name);
            if !known {
                std::fs::remove_file(&p).map_err(crate::error::io("remove", &p))?;
                out.actions.push(format!(
                    "removed orphaned snapshot {} (no WAL marker names it)",
                    p.display()
                ));
            }
        }
    }
    if out.actions.is_empty() {
        out.actions.push("nothing to repair".into());
    }
    Ok(out)
}

fn refuse(why: String) -> Error {
    Error::failed(format!(
        "{why}. repair fixes only a torn WAL tail, temp files and orphaned snapshots; restore this member from a snapshot (etcdutl snapshot restore) or re-add it to its cluster"
    ))
}
