// `etcdutl repair`: fixes what can be fixed without losing an acknowledged write — a torn WAL
// tail (truncated, the old bytes kept as .broken), temp files a crash left, .snap files no WAL
// marker names — and refuses, untouched, everything else (damage inside the log or the db).

use std::path::PathBuf;

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
    // Refuse first, change nothing: any fault check finds other than a torn WAL tail (damage
    // inside the log or the db, a missing snapshot) cannot be fixed without losing data.
    let report = crate::check::check(dir)?;
    let unfixable: Vec<String> = report
        .findings
        .iter()
        .filter(|f| !f.ok && !f.repairable)
        .map(|f| format!("{}: {}", f.check, f.detail))
        .collect();
    if !unfixable.is_empty() {
        return Err(refuse(unfixable.join("; ")));
    }
    let wal = if common::wal::exists(&dir.wal_dir) {
        Some(walk_wal(&dir.wal_dir)?)
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
