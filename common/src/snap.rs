// etcd's raft snapshot files, `member/snap/<term:016x>-<index:016x>.snap`: a snappb envelope
// {crc: CRC-32C(data), data: marshaled raftpb.Snapshot}. The KV state itself is the db file.
//
// Saving goes through a temp file, fsync, rename and a dir fsync. Loading takes the newest file
// that reads cleanly (a corrupt one is renamed `.broken` with a warning) and, when the WAL's
// snapshot markers are given, only one the WAL also records.

use std::fs;
use std::path::{Path, PathBuf};

use prost::Message;
use proto::raftpb;
use proto::snappb;
use proto::walpb;

use crate::fileutil::{self, FileError};

const SNAP_SUFFIX: &str = ".snap";

#[derive(Debug, thiserror::Error)]
pub enum SnapError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("snap: no available snapshot")]
    NoSnapshot,
    #[error("snap: empty snapshot in {0}")]
    EmptySnapshot(PathBuf),
    #[error("snap: crc mismatch in {0}")]
    CrcMismatch(PathBuf),
    #[error("snap: cannot decode {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("snap: snapshot file doesn't exist: {0}")]
    NoDbSnapshot(PathBuf),
}

pub type Result<T> = std::result::Result<T, SnapError>;

/// The name of the .snap file for a snapshot at `term`/`index`.
pub fn snap_name(term: u64, index: u64) -> String {
    format!("{term:016x}-{index:016x}{SNAP_SUFFIX}")
}

/// Reads and verifies one .snap file.
pub fn read(path: &Path) -> Result<raftpb::Snapshot> {
    let bytes = fs::read(path).map_err(fileutil::io_err("read", path))?;
    if bytes.is_empty() {
        return Err(SnapError::EmptySnapshot(path.to_path_buf()));
    }
    let env = snappb::Snapshot::decode(&bytes[..]).map_err(|e| SnapError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let data = env
        .data
        .as_deref()
        .filter(|d| !d.is_empty())
        .ok_or_else(|| SnapError::EmptySnapshot(path.to_path_buf()))?;
    if crc32c::crc32c(data) != env.crc {
        return Err(SnapError::CrcMismatch(path.to_path_buf()));
    }
    raftpb::Snapshot::decode(data).map_err(|e| SnapError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The snapshot files of one member's snap dir.
#[derive(Debug, Clone)]
pub struct Snapshotter {
    dir: PathBuf,
}

impl Snapshotter {
    pub fn new(dir: impl Into<PathBuf>) -> Snapshotter {
        Snapshotter { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `snap` as `<term>-<index>.snap` durably. An empty snapshot (index 0) is skipped.
    pub fn save_snap(&self, snap: &raftpb::Snapshot) -> Result<()> {
        let Some(md) = snap.metadata.as_ref().filter(|m| m.index != 0) else {
            return Ok(());
        };
        let data = snap.encode_to_vec();
        let env = snappb::Snapshot {
            crc: crc32c::crc32c(&data),
            data: Some(data),
        };
        let path = self.dir.join(snap_name(md.term, md.index));
        fileutil::write_file_atomic(&path, &env.encode_to_vec())?;
        Ok(())
    }

    /// .snap file names, newest first.
    pub fn snap_names(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = fileutil::read_dir_names(&self.dir, SNAP_SUFFIX)?;
        names.reverse();
        Ok(names)
    }

    /// The newest snapshot that reads cleanly.
    pub fn load(&self) -> Result<raftpb::Snapshot> {
        self.load_matching(|_| true)
    }

    /// The newest snapshot that reads cleanly and that the WAL records with a marker, so the
    /// WAL can be replayed from it.
    pub fn load_newest_available(&self, wal_snaps: &[walpb::Snapshot]) -> Result<raftpb::Snapshot> {
        let wanted: std::collections::HashSet<String> = wal_snaps
            .iter()
            .map(|s| snap_name(s.term, s.index))
            .collect();
        self.load_matching(|name| wanted.contains(name))
    }

    fn load_matching(&self, keep: impl Fn(&str) -> bool) -> Result<raftpb::Snapshot> {
        for name in self.snap_names()? {
            if !keep(&name) {
                continue;
            }
            let path = self.dir.join(&name);
            match read(&path) {
                Ok(s) => return Ok(s),
                Err(SnapError::File(e)) => return Err(SnapError::File(e)),
                Err(e) => {
                    let mut broken = path.as_os_str().to_owned();
                    broken.push(".broken");
                    tracing::warn!(path = %path.display(), error = %e, "failed to read a snap file; renamed it .broken and trying an older one");
                    fs::rename(&path, PathBuf::from(broken))
                        .map_err(fileutil::io_err("rename", &path))?;
                }
            }
        }
        Err(SnapError::NoSnapshot)
    }

    /// Where the db received from a leader for the snapshot at `index` is kept until it
    /// replaces member/snap/db.
    pub fn db_file_path(&self, index: u64) -> PathBuf {
        self.dir.join(format!("{index:016x}.snap.db"))
    }

    /// The received db for `index`, which must exist.
    pub fn db_file_path_existing(&self, index: u64) -> Result<PathBuf> {
        let p = self.db_file_path(index);
        if p.exists() {
            Ok(p)
        } else {
            Err(SnapError::NoDbSnapshot(p))
        }
    }

    /// Removes temp files a crash left behind (unfinished .snap saves and db transfers).
    pub fn cleanup_tmp(&self) -> Result<Vec<PathBuf>> {
        let mut removed = Vec::new();
        for name in fileutil::read_dir_names(&self.dir, "")? {
            if name.ends_with(".tmp") || name.starts_with("db.tmp") {
                let p = self.dir.join(&name);
                fs::remove_file(&p).map_err(fileutil::io_err("remove", &p))?;
                removed.push(p);
            }
        }
        Ok(removed)
    }

    /// Deletes the oldest .snap files beyond `max` (etcd's --max-snapshots; 0 = keep all).
    pub fn purge(&self, max: usize) -> Result<Vec<PathBuf>> {
        Ok(fileutil::purge_files(&self.dir, SNAP_SUFFIX, max)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(term: u64, index: u64) -> raftpb::Snapshot {
        raftpb::Snapshot {
            data: Some(format!("state at {index}").into_bytes()),
            metadata: Some(raftpb::SnapshotMetadata {
                conf_state: Some(raftpb::ConfState {
                    voters: vec![1, 2, 3],
                    ..Default::default()
                }),
                index,
                term,
            }),
        }
    }

    #[test]
    fn save_and_load_newest() {
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshotter::new(dir.path());
        assert!(matches!(s.load(), Err(SnapError::NoSnapshot)));
        s.save_snap(&snap(1, 10)).unwrap();
        s.save_snap(&snap(2, 20)).unwrap();
        assert_eq!(s.load().unwrap(), snap(2, 20));
        assert!(dir.path().join(snap_name(2, 20)).exists());
        // Only what the WAL records counts.
        let only_first = [walpb::Snapshot {
            index: 10,
            term: 1,
            conf_state: None,
        }];
        assert_eq!(s.load_newest_available(&only_first).unwrap(), snap(1, 10));
    }

    #[test]
    fn corrupt_newest_falls_back_and_tmp_is_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshotter::new(dir.path());
        s.save_snap(&snap(1, 10)).unwrap();
        s.save_snap(&snap(1, 20)).unwrap();
        let newest = dir.path().join(snap_name(1, 20));
        let mut bytes = fs::read(&newest).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        fs::write(&newest, bytes).unwrap();
        fs::write(
            dir.path()
                .join("0000000000000001-0000000000000030.snap.tmp"),
            b"half",
        )
        .unwrap();
        fs::write(dir.path().join("db.tmp.123"), b"half").unwrap();

        assert_eq!(s.cleanup_tmp().unwrap().len(), 2);
        assert_eq!(s.load().unwrap(), snap(1, 10));
        assert!(!newest.exists());
        assert!(
            dir.path()
                .join(format!("{}.broken", snap_name(1, 20)))
                .exists()
        );
        assert!(matches!(read(&newest), Err(SnapError::File(_))));
    }

    #[test]
    fn empty_and_garbage_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(snap_name(1, 1));
        fs::write(&p, b"").unwrap();
        assert!(matches!(read(&p), Err(SnapError::EmptySnapshot(_))));
        fs::write(&p, b"\xff\xff\xff").unwrap();
        assert!(matches!(read(&p), Err(SnapError::Corrupt { .. })));
    }

    #[test]
    fn purge_keeps_newest() {
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshotter::new(dir.path());
        for i in 1..=6 {
            s.save_snap(&snap(1, i * 10)).unwrap();
        }
        s.purge(5).unwrap();
        let names = s.snap_names().unwrap();
        assert_eq!(names.len(), 5);
        assert_eq!(names[0], snap_name(1, 60));
        assert!(!dir.path().join(snap_name(1, 10)).exists());
    }
}
