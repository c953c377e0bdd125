// `etcdutl backup`: a consistent copy of a stopped member's data dir — the WAL (checked), the
// .snap files, and with --with-v3 a consistent image of the db — built in a staging dir and
// renamed into place, so a failed backup leaves nothing half-made.

use std::fs;
use std::path::{Path, PathBuf};

use common::backend::Db;

use crate::check::walk_wal;
use crate::datadir::{DataDir, ensure_absent};
use crate::error::{Error, Result, io};

#[derive(Debug, Clone, serde::Serialize)]
pub struct BackedUp {
    pub wal_segments: usize,
    pub snap_files: usize,
    pub db_bytes: Option<u64>,
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).map_err(io("copy", from))?;
    let f = fs::File::open(to).map_err(io("open", to))?;
    f.sync_all().map_err(io("sync", to))?;
    Ok(())
}

/// Copies `src` to a new data dir at `backup_dir` (its WAL in `backup_wal_dir` when given).
pub fn backup(
    src: &DataDir,
    backup_dir: &Path,
    backup_wal_dir: Option<&Path>,
    with_v3: bool,
) -> Result<BackedUp> {
    src.ensure_not_running()?;
    ensure_absent(backup_dir, "backup-dir")?;
    if let Some(w) = backup_wal_dir {
        ensure_absent(w, "backup-wal-dir")?;
    }
    let w = walk_wal(&src.wal_dir)?;
    if let Some(e) = w.fault {
        return Err(Error::failed(format!(
            "the WAL of {} does not read to its end ({e}); run etcdutl check / repair first",
            src.data_dir.display()
        )));
    }
    let mut stage = backup_dir.as_os_str().to_owned();
    stage.push(format!(".backup.{}", std::process::id()));
    let stage = PathBuf::from(stage);
    let _ = fs::remove_dir_all(&stage);
    let result = (|| -> Result<BackedUp> {
        let dst = DataDir::layout(&stage, None);
        common::fileutil::touch_dir_all(&dst.snap_dir)?;
        common::fileutil::touch_dir_all(&dst.wal_dir)?;
        let wal_files = src.wal_files();
        for f in &wal_files {
            if let Some(name) = f.file_name() {
                copy(f, &dst.wal_dir.join(name))?;
            }
        }
        let snaps = common::fileutil::read_dir_names(&src.snap_dir, ".snap").unwrap_or_default();
        for n in &snaps {
            let p = src.snap_dir.join(n);
            common::snap::read(&p)?;
            copy(&p, &dst.snap_dir.join(n))?;
        }
        let db_bytes = if with_v3 {
            let bar = crate::progress::spinner("copying the db");
            let db = Db::open_read_only(&src.db).map_err(|e| {
                Error::failed(format!("cannot open the db {}: {e}", src.db.display()))
            })?;
            let n = db.snapshot_to_file(&dst.db, false)?;
            crate::progress::finish(bar);
            Some(n)
        } else {
            None
        };
        Ok(BackedUp {
            wal_segments: wal_files.len(),
            snap_files: snaps.len(),
            db_bytes,
        })
    })();
    let done = match result {
        Ok(d) => d,
        Err(e) => {
            let _ = fs::remove_dir_all(&stage);
            return Err(e);
        }
    };
    if let Some(w) = backup_wal_dir {
        if let Some(p) = w.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(p).map_err(io("mkdir", p))?;
        }
        let from = stage.join("member").join("wal");
        fs::rename(&from, w).map_err(io("rename", &from))?;
    }
    if let Some(p) = backup_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(p).map_err(io("mkdir", p))?;
    }
    fs::rename(&stage, backup_dir).map_err(io("rename", &stage))?;
    Ok(done)
}
