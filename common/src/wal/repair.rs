// Repairs the one kind of WAL damage that loses nothing acknowledged: a torn last record at the
// end of the last segment (a write the crash interrupted before its fsync returned).

use std::fs;
use std::path::{Path, PathBuf};

use super::decoder::{DecodeError, Decoder};
use super::{Result, WalError, segment_names};
use crate::fileutil;

/// What `repair` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The last segment reads to its end: nothing to do.
    Clean,
    /// The last segment was cut at `offset`; its old bytes were kept in `backup`.
    Truncated {
        file: PathBuf,
        offset: u64,
        backup: PathBuf,
    },
}

/// Truncates a torn tail of the last segment in `dir` after copying the segment to
/// `<name>.broken`. Corruption that is not a torn tail is returned as an error, untouched.
pub fn repair(dir: &Path) -> Result<RepairOutcome> {
    let names = segment_names(dir)?;
    let Some(last) = names.last() else {
        return Err(WalError::FileNotFound(dir.to_path_buf()));
    };
    let path = dir.join(last);
    let lock = fileutil::try_lock_file(&path, true, false)?;
    let reader = lock
        .file()
        .try_clone()
        .map_err(fileutil::io_err("dup", &path))?;
    let mut decoder = Decoder::new(vec![(path.clone(), reader)])
        .map_err(fileutil::io_err("stat", &path))
        .map_err(WalError::File)?;
    loop {
        match decoder.next() {
            Ok(Some(_)) => continue,
            Ok(None) => return Ok(RepairOutcome::Clean),
            Err(DecodeError::Torn { offset, .. }) => {
                let mut backup_name = path.as_os_str().to_owned();
                backup_name.push(".broken");
                let backup = PathBuf::from(backup_name);
                fs::copy(&path, &backup).map_err(fileutil::io_err("copy", &path))?;
                lock.file()
                    .set_len(offset)
                    .map_err(fileutil::io_err("truncate", &path))?;
                fileutil::fdatasync(lock.file(), &path)?;
                tracing::info!(file = %path.display(), offset, backup = %backup.display(), "repaired torn WAL tail");
                return Ok(RepairOutcome::Truncated {
                    file: path,
                    offset,
                    backup,
                });
            }
            Err(e) => return Err(e.into_wal_error()),
        }
    }
}
