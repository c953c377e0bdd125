// An etcd data dir as etcdutl sees it: where its WAL, snap files and db are, whether it is a
// data dir at all, and whether a running server holds it (then nothing may write to it).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The paths of one member's data dir (etcd's layout; the WAL may live elsewhere).
#[derive(Debug, Clone)]
pub struct DataDir {
    pub data_dir: PathBuf,
    pub wal_dir: PathBuf,
    pub snap_dir: PathBuf,
    pub db: PathBuf,
}

impl DataDir {
    /// The layout under `data_dir`, the WAL in `wal_dir` when given.
    pub fn layout(data_dir: &Path, wal_dir: Option<&Path>) -> DataDir {
        let member = data_dir.join("member");
        DataDir {
            data_dir: data_dir.to_path_buf(),
            wal_dir: wal_dir
                .map(Path::to_path_buf)
                .unwrap_or_else(|| member.join("wal")),
            snap_dir: member.join("snap"),
            db: member.join("snap").join("db"),
        }
    }

    /// An existing data dir: refused with a clear error when it has neither a WAL nor a db.
    pub fn open(data_dir: &Path, wal_dir: Option<&Path>) -> Result<DataDir> {
        let d = DataDir::layout(data_dir, wal_dir);
        if !data_dir.is_dir() {
            return Err(Error::failed(format!(
                "{} is not a directory: give --data-dir the data dir of an etcd member",
                data_dir.display()
            )));
        }
        if !common::wal::exists(&d.wal_dir) && !d.db.is_file() {
            return Err(Error::failed(format!(
                "{} is not an etcd data dir: it has neither a WAL ({}) nor a db ({})",
                data_dir.display(),
                d.wal_dir.display(),
                d.db.display()
            )));
        }
        Ok(d)
    }

    /// The WAL segment files, oldest first.
    pub fn wal_files(&self) -> Vec<PathBuf> {
        let mut names = common::fileutil::read_dir_names(&self.wal_dir, ".wal").unwrap_or_default();
        names.sort();
        names.into_iter().map(|n| self.wal_dir.join(n)).collect()
    }

    /// Refuses when a running server (etcd's or ours) holds the data dir: both hold an
    /// exclusive flock on the db while running, and lock their WAL segments (ours with flock,
    /// etcd's with an open-file-description fcntl lock).
    pub fn ensure_not_running(&self) -> Result<()> {
        let mut files = vec![self.db.clone()];
        files.extend(self.wal_files());
        for f in files {
            if is_locked(&f) {
                return Err(Error::failed(format!(
                    "{} is in use by a running etcd (file {} is locked): stop the server first",
                    self.data_dir.display(),
                    f.display()
                )));
            }
        }
        Ok(())
    }
}

/// Whether another process holds a lock on `path` (flock or an OFD/POSIX write lock).
/// A file that cannot be opened is not locked by anyone.
pub fn is_locked(path: &Path) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    let fd = f.as_raw_fd();
    // Safety: flock/fcntl on a descriptor we own; the flock is released at once.
    unsafe {
        if libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) != 0 {
            return true;
        }
        libc::flock(fd, libc::LOCK_UN);
        let mut lk: libc::flock = std::mem::zeroed();
        lk.l_type = libc::F_WRLCK as libc::c_short;
        lk.l_whence = libc::SEEK_SET as libc::c_short;
        if libc::fcntl(fd, libc::F_OFD_GETLK, &mut lk) == 0
            && lk.l_type != libc::F_UNLCK as libc::c_short
        {
            return true;
        }
        let mut lk: libc::flock = std::mem::zeroed();
        lk.l_type = libc::F_WRLCK as libc::c_short;
        lk.l_whence = libc::SEEK_SET as libc::c_short;
        libc::fcntl(fd, libc::F_GETLK, &mut lk) == 0 && lk.l_type != libc::F_UNLCK as libc::c_short
    }
}

/// Refuses a target path that exists, in etcd's words (`data-dir "x" exists`).
pub fn ensure_absent(path: &Path, what: &str) -> Result<()> {
    if path.symlink_metadata().is_ok() {
        return Err(Error::failed(format!(
            "{what} {:?} exists",
            path.display().to_string()
        )));
    }
    Ok(())
}
