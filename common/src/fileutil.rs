// File helpers shared by the WAL, snap and backend code: directory fsync, exclusive lock files,
// preallocation, zeroing a tail, purging old files, and data dirs with etcd's permission rules.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Permission of the data dir and the dirs below it, as etcd (only the owner may look inside).
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Permission of the files etcd writes into its data dir.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is locked by another process (is another etcd using this data dir?)")]
    Locked { path: PathBuf },
    #[error(
        "directory {path} exists with permission {actual:o}; etcd requires {expected:o} so that other users cannot read the data (chmod {expected:o} {path})"
    )]
    Permission {
        path: PathBuf,
        actual: u32,
        expected: u32,
    },
}

pub type Result<T> = std::result::Result<T, FileError>;

/// Wraps an io::Error with what we were doing and on which path.
pub fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FileError + 'a {
    move |source| FileError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// fsyncs a directory so that file creations, renames and removals in it are durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(io_err("open dir", dir))?;
    d.sync_all().map_err(io_err("fsync dir", dir))
}

/// Creates `dir` and its parents with mode 0700 if missing; an existing dir must be writable.
/// Like etcd's TouchDirAll: it does not change the mode of a dir that already exists. Each dir
/// it creates is made durable in its parent (fsync of the parent): otherwise a power loss may
/// take back a new data dir, and with it every write acknowledged from it.
pub fn touch_dir_all(dir: &Path) -> Result<()> {
    // The dirs to be made, innermost first.
    let mut missing = Vec::new();
    let mut p = dir;
    while !p.as_os_str().is_empty() && fs::symlink_metadata(p).is_err() {
        missing.push(p);
        match p.parent() {
            Some(q) => p = q,
            None => break,
        }
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
        .map_err(io_err("create dir", dir))?;
    for made in missing.iter().rev() {
        let parent = match made.parent() {
            Some(q) if !q.as_os_str().is_empty() => q,
            _ => Path::new("."),
        };
        fsync_dir(parent)?;
    }
    is_dir_writable(dir)
}

/// Checks that `dir` can be written by creating and removing a probe file.
pub fn is_dir_writable(dir: &Path) -> Result<()> {
    let probe = dir.join(".touch");
    fs::write(&probe, b"").map_err(io_err("write probe file in", dir))?;
    fs::remove_file(&probe).map_err(io_err("remove probe file", &probe))
}

/// Returns an error when an existing directory is more open than `expected` (etcd refuses a
/// data dir others can read).
pub fn check_dir_permission(dir: &Path, expected: u32) -> Result<()> {
    let md = fs::metadata(dir).map_err(io_err("stat", dir))?;
    let actual = md.permissions().mode() & 0o777;
    if actual != expected {
        return Err(FileError::Permission {
            path: dir.to_path_buf(),
            actual,
            expected,
        });
    }
    Ok(())
}

/// An open file holding an exclusive advisory lock (flock), released when dropped.
///
/// flock locks belong to the open file description, so a second open of the same path, even in
/// this process, cannot take the lock: the WAL purge relies on that to skip segments in use.
#[derive(Debug)]
pub struct LockedFile {
    file: File,
    path: PathBuf,
}

impl LockedFile {
    pub fn file(&self) -> &File {
        &self.file
    }
    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Points this lock at a new name after the file was renamed.
    pub fn set_path(&mut self, path: PathBuf) {
        self.path = path;
    }
}

fn flock_nonblocking(file: &File, path: &Path) -> Result<()> {
    // Safety: flock on a descriptor we own; no memory is touched.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(FileError::Locked {
            path: path.to_path_buf(),
        })
    } else {
        Err(FileError::Io {
            op: "lock",
            path: path.to_path_buf(),
            source: err,
        })
    }
}

/// Opens `path` (creating it with 0600 when `create`) and takes an exclusive lock without
/// waiting; a file locked elsewhere is `FileError::Locked`.
pub fn try_lock_file(path: &Path, write: bool, create: bool) -> Result<LockedFile> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .create(create)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
        .map_err(io_err("open", path))?;
    flock_nonblocking(&file, path)?;
    Ok(LockedFile {
        file,
        path: path.to_path_buf(),
    })
}

/// Reserves `size` bytes of disk for `file` so later appends do not allocate. With `extend` the
/// file's length becomes `size` (the WAL's 64 MB segments); otherwise only blocks are reserved.
pub fn preallocate(file: &File, size: u64, extend: bool, path: &Path) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    let mode = if extend { 0 } else { libc::FALLOC_FL_KEEP_SIZE };
    // Safety: fallocate on a descriptor we own.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, 0, size as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    // Some filesystems (tmpfs on old kernels, overlay variants) lack fallocate: fall back to
    // growing the file, which is all that correctness needs.
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINTR) if extend => {
            let len = file.metadata().map_err(io_err("stat", path))?.len();
            if len < size {
                file.set_len(size).map_err(io_err("extend", path))?;
            }
            Ok(())
        }
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
        _ => Err(FileError::Io {
            op: "preallocate",
            path: path.to_path_buf(),
            source: err,
        }),
    }
}

/// Zeroes `file` from `offset` to its end while keeping its length, so stale bytes of a torn
/// write can never be mistaken for records later.
pub fn zero_to_end(file: &File, offset: u64, path: &Path) -> Result<()> {
    let len = file.metadata().map_err(io_err("stat", path))?.len();
    file.set_len(offset).map_err(io_err("truncate", path))?;
    if len > offset {
        preallocate(file, len, true, path)?;
    }
    Ok(())
}

/// fdatasync: flushes the file's data (and the metadata needed to read it back).
pub fn fdatasync(file: &File, path: &Path) -> Result<()> {
    file.sync_data().map_err(io_err("fdatasync", path))
}

/// Names in `dir` ending with `suffix`, sorted ascending (etcd's names sort by age).
pub fn read_dir_names(dir: &Path, suffix: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err("read dir", dir))? {
        let entry = entry.map_err(io_err("read dir", dir))?;
        if let Some(name) = entry.file_name().to_str()
            && name.ends_with(suffix)
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Removes the oldest files with `suffix` in `dir` until at most `max` are left, stopping at the
/// first one that is still locked (in use by the WAL). Returns the removed paths.
/// `max == 0` means unlimited, as etcd's --max-wals/--max-snapshots.
pub fn purge_files(dir: &Path, suffix: &str, max: usize) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    if max == 0 {
        return Ok(removed);
    }
    let names = read_dir_names(dir, suffix)?;
    let excess = names.len().saturating_sub(max);
    for name in names.iter().take(excess) {
        let path = dir.join(name);
        let lock = match try_lock_file(&path, true, false) {
            Ok(l) => l,
            Err(FileError::Locked { .. }) => break,
            Err(e) => return Err(e),
        };
        fs::remove_file(&path).map_err(io_err("remove", &path))?;
        drop(lock);
        removed.push(path);
    }
    if !removed.is_empty() {
        fsync_dir(dir)?;
    }
    Ok(removed)
}

/// Writes `data` to `path` through `<path>.tmp`, fsyncs it, renames it into place and fsyncs
/// the directory: a crash leaves either the old file or the complete new one.
pub fn write_file_atomic(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(PRIVATE_FILE_MODE)
            .open(&tmp)
            .map_err(io_err("create", &tmp))?;
        f.write_all(data).map_err(io_err("write", &tmp))?;
        f.sync_all().map_err(io_err("fsync", &tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err("rename", &tmp))?;
    if let Some(dir) = path.parent() {
        fsync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_exclusive_across_opens() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let held = try_lock_file(&p, true, true).unwrap();
        assert!(matches!(
            try_lock_file(&p, true, false),
            Err(FileError::Locked { .. })
        ));
        drop(held);
        try_lock_file(&p, true, false).unwrap();
    }

    #[test]
    fn purge_keeps_max_and_stops_at_locked() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            fs::write(dir.path().join(format!("{i:016x}.snap")), b"x").unwrap();
        }
        let held =
            try_lock_file(&dir.path().join(format!("{:016x}.snap", 1)), true, false).unwrap();
        let removed = purge_files(dir.path(), ".snap", 2).unwrap();
        // Only file 0 goes: file 1 is locked, and purge never skips past a file in use.
        assert_eq!(removed.len(), 1);
        drop(held);
        let removed = purge_files(dir.path(), ".snap", 2).unwrap();
        assert_eq!(removed.len(), 2);
        assert_eq!(read_dir_names(dir.path(), ".snap").unwrap().len(), 2);
    }

    #[test]
    fn zero_to_end_keeps_length() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, vec![0xffu8; 8192]).unwrap();
        let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
        zero_to_end(&f, 100, &p).unwrap();
        let data = fs::read(&p).unwrap();
        assert_eq!(data.len(), 8192);
        assert!(data[..100].iter().all(|&b| b == 0xff));
        assert!(data[100..].iter().all(|&b| b == 0));
    }

    #[test]
    fn touch_dir_all_creates_private_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a/b/c");
        touch_dir_all(&d).unwrap();
        check_dir_permission(&d, PRIVATE_DIR_MODE).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            check_dir_permission(&d, PRIVATE_DIR_MODE),
            Err(FileError::Permission { .. })
        ));
    }
}
