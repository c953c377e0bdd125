// A FUSE passthrough filesystem that can lose power: every byte written since the file's last
// fsync/fdatasync is forgotten by `PowerFs::power_cut`, as a disk's volatile cache would be.
//
// Model. Files' data: before a write (or a truncation/extension) changes a file, the bytes it
// overwrites and the file's length are kept in that file's undo log; fsync or fdatasync of the
// file (through any handle) empties the log. `power_cut` answers EIO to everything from then on,
// plays every log backwards (each file goes back to what it held at its last sync), unmounts
// and mounts again, so the kernel's page cache, which survives a kill -9, is gone too. A write
// through a handle opened O_SYNC/O_DSYNC is synced at once. `power_cut` is the worst case of
// a real disk, none of the unsynced writes survive; `power_cut_keeping_some` lets a seeded
// random subset of them survive (each whole, applied in order over the synced contents), as a
// disk that wrote back part of its cache in any order.
//
// Names: create, mkdir, unlink, rmdir and rename are durable only once every directory they
// change has been fsynced after them (POSIX's rule; a file's own fsync does not make its name
// durable). Until then the power cut undoes them, newest first: a file or directory made since
// disappears with all it holds, a removed one comes back (removals wait in a trash directory
// beside the backing one), a rename goes back and brings back what it replaced. Journaling
// filesystems usually keep more (ext4 commits names in order), so this is stricter than most.
//
// Not modelled: torn writes (a write survives whole or not at all), names that partly survive,
// fsync errors. Hard links, symlinks, xattrs and fcntl/flock locks are not served through FUSE
// (the kernel keeps flock locks itself). fallocate answers EOPNOTSUPP, so callers take their
// set_len fallback (common::fileutil::preallocate, the db's grow_file).
#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// Attributes and entries are never cached by the kernel: every stat and lookup asks us, so
/// what a member sees after a power cut is what the backing files hold.
const TTL: Duration = Duration::ZERO;
/// Removed tails are read back in chunks this big; all-zero chunks are not kept (a truncated
/// 64 MB WAL segment is mostly zeros).
const CHUNK: usize = 64 * 1024;

/// One change to a file's data since its last sync, with what it destroyed.
enum Change {
    /// Bytes at `off` overwritten by a write (only those that existed before it), and what
    /// it wrote.
    Write {
        off: u64,
        old: Vec<u8>,
        new: Vec<u8>,
    },
    /// The length went from `from` to `to`; a shrink kept the non-zero chunks it cut off.
    SetLen {
        from: u64,
        to: u64,
        cut: Vec<(u64, Vec<u8>)>,
    },
}

/// The changes to one file since its last sync.
struct UndoLog {
    synced_len: u64,
    changes: Vec<Change>,
}

struct Handle {
    file: File,
    ino: u64,
    sync_writes: bool,
}

#[derive(Default)]
struct State {
    /// Our inode numbers ↔ paths relative to the backing dir ("" is the root).
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    undo: HashMap<u64, UndoLog>,
    /// Namespace changes not yet durable, oldest first.
    pending: Vec<Pending>,
    /// Removed files and directories wait here (outside the mount), in case a power cut
    /// brings their names back.
    trash: PathBuf,
    next_trash: u64,
    /// After a power cut every request fails: the disk is gone until the next mount.
    dead: bool,
    /// Counters for the report.
    stats: Stats,
}

/// What the filesystem saw, for the test's report.
#[derive(Default, Clone, Copy, Debug)]
pub struct Stats {
    pub writes: u64,
    pub fsyncs: u64,
    pub dir_fsyncs: u64,
    /// At the last power cut: files rolled back and bytes of changes undone.
    pub files_rolled_back: u64,
    pub changes_undone: u64,
    /// At the last power cut: unsynced changes that survived it (`power_cut_keeping_some`).
    pub changes_kept: u64,
    /// At the last power cut: namespace changes undone.
    pub names_undone: u64,
}

/// A namespace change, with what undoing it needs. Inodes, not paths: a later change that did
/// become durable (a rename of the parent) may have moved things.
enum NsOp {
    /// A file or directory made at `ino` (undone with all it holds).
    Create { ino: u64 },
    /// `parent`/`name` (inode `ino`) unlinked or rmdir'ed; it waits at `trash`.
    Remove {
        ino: u64,
        parent: u64,
        name: OsString,
        trash: PathBuf,
    },
    /// `ino` moved away from `parent`/`name`; the inode its new name replaced waits in the
    /// trash.
    Rename {
        ino: u64,
        parent: u64,
        name: OsString,
        replaced: Option<(u64, PathBuf)>,
    },
}

/// A namespace change and the directories that must still be fsynced for it to be durable
/// (POSIX's rule: fsync of a file does not make its name durable, only fsync of the directory;
/// a rename between directories needs both).
struct Pending {
    op: NsOp,
    dirs: Vec<u64>,
}

struct Fs {
    backing: PathBuf,
    state: Arc<Mutex<State>>,
}

fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Reads `[from, to)` of `f` as the chunks holding a non-zero byte.
fn nonzero_chunks(f: &File, from: u64, to: u64) -> io::Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut off = from;
    while off < to {
        let n = ((to - off) as usize).min(CHUNK);
        let mut buf = vec![0u8; n];
        f.read_exact_at(&mut buf, off)?;
        if buf.iter().any(|&b| b != 0) {
            out.push((off, buf));
        }
        off += n as u64;
    }
    Ok(out)
}

impl State {
    fn ino_for(&mut self, rel: &Path) -> u64 {
        if let Some(&i) = self.inos.get(rel) {
            return i;
        }
        let i = self.next_ino;
        self.next_ino += 1;
        self.paths.insert(i, rel.to_path_buf());
        self.inos.insert(rel.to_path_buf(), i);
        i
    }

    /// Moves `rel` (relative to `backing`) into the trash: its inode keeps its number, open
    /// handles and undo log, so a power cut can bring it back.
    fn move_to_trash(&mut self, backing: &Path, rel: &Path) -> io::Result<(u64, PathBuf)> {
        let ino = self.ino_for(rel);
        let trash = self.trash.join(self.next_trash.to_string());
        self.next_trash += 1;
        std::fs::rename(backing.join(rel), &trash)?;
        self.inos.remove(rel);
        self.paths.insert(ino, trash.clone());
        Ok((ino, trash))
    }

    /// Records the paths of everything at or below `from` as being at `to` now.
    fn move_paths(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(u64, PathBuf)> = self
            .paths
            .iter()
            .filter_map(|(&i, p)| {
                let rest = p.strip_prefix(from).ok()?;
                Some((
                    i,
                    if rest.as_os_str().is_empty() {
                        to.to_path_buf()
                    } else {
                        to.join(rest)
                    },
                ))
            })
            .collect();
        for (i, p) in moved {
            if let Some(old) = self.paths.insert(i, p.clone()) {
                self.inos.remove(&old);
            }
            if p.is_relative() {
                self.inos.insert(p, i);
            }
        }
    }

    fn note(&mut self, op: NsOp, mut dirs: Vec<u64>) {
        dirs.dedup();
        self.pending.push(Pending { op, dirs });
    }

    /// Undoes one namespace change on the backing dir.
    fn undo_ns(&mut self, backing: &Path, op: &NsOp) -> io::Result<()> {
        let path = |st: &State, ino: u64| {
            st.paths
                .get(&ino)
                .map(|p| backing.join(p))
                .ok_or_else(|| io::Error::other(format!("inode {ino} has no path")))
        };
        let rel_child = |st: &State, parent: u64, name: &OsStr| {
            st.paths
                .get(&parent)
                .map(|p| p.join(name))
                .ok_or_else(|| io::Error::other(format!("inode {parent} has no path")))
        };
        match op {
            NsOp::Create { ino } => {
                let p = path(self, *ino)?;
                if p.is_dir() {
                    std::fs::remove_dir_all(&p)?;
                } else {
                    std::fs::remove_file(&p)?;
                }
                if let Some(old) = self.paths.remove(ino) {
                    self.inos.remove(&old);
                }
            }
            NsOp::Remove {
                ino,
                parent,
                name,
                trash,
            } => {
                let dest = rel_child(self, *parent, name)?;
                std::fs::rename(trash, backing.join(&dest))?;
                self.paths.insert(*ino, dest.clone());
                self.inos.insert(dest, *ino);
            }
            NsOp::Rename {
                ino,
                parent,
                name,
                replaced,
            } => {
                let cur = self
                    .paths
                    .get(ino)
                    .cloned()
                    .ok_or_else(|| io::Error::other(format!("inode {ino} has no path")))?;
                let dest = rel_child(self, *parent, name)?;
                std::fs::rename(backing.join(&cur), backing.join(&dest))?;
                self.move_paths(&cur, &dest);
                if let Some((rino, trash)) = replaced {
                    std::fs::rename(trash, backing.join(&cur))?;
                    self.paths.insert(*rino, cur.clone());
                    self.inos.insert(cur, *rino);
                }
            }
        }
        Ok(())
    }

    /// Notes that `f` (inode `ino`) is about to change, so that a power cut can undo it.
    fn before_change(
        &mut self,
        ino: u64,
        f: &File,
        change: impl FnOnce(u64) -> io::Result<Change>,
    ) -> io::Result<()> {
        let len = f.metadata()?.len();
        let c = change(len)?;
        self.undo
            .entry(ino)
            .or_insert_with(|| UndoLog {
                synced_len: len,
                changes: Vec::new(),
            })
            .changes
            .push(c);
        Ok(())
    }

    fn log_write(&mut self, ino: u64, f: &File, off: u64, data: &[u8]) -> io::Result<()> {
        self.before_change(ino, f, |len| {
            let end = (off + data.len() as u64).min(len);
            let mut old = vec![0u8; end.saturating_sub(off) as usize];
            f.read_exact_at(&mut old, off)?;
            Ok(Change::Write {
                off,
                old,
                new: data.to_vec(),
            })
        })
    }

    fn log_set_len(&mut self, ino: u64, f: &File, to: u64) -> io::Result<()> {
        self.before_change(ino, f, |len| {
            let cut = if to < len {
                nonzero_chunks(f, to, len)?
            } else {
                Vec::new()
            };
            Ok(Change::SetLen { from: len, to, cut })
        })
    }
}

/// Plays `log` backwards on `f`. Going back from the newest change, after undoing change k the
/// bytes below the length before k are right again (bytes above it may be left over from later
/// writes, and the last set_len drops them).
fn roll_back(f: &File, log: &UndoLog) -> io::Result<()> {
    for c in log.changes.iter().rev() {
        match c {
            Change::Write { off, old, .. } => f.write_all_at(old, *off)?,
            Change::SetLen { from, to, cut } => {
                if to < from {
                    f.set_len(*to)?;
                    f.set_len(*from)?;
                    for (off, bytes) in cut {
                        f.write_all_at(bytes, *off)?;
                    }
                }
            }
        }
    }
    f.set_len(log.synced_len)
}

/// Plays again, in their order, the changes of `log` that `keep` picks, on `f` as it was at
/// its last sync: the unsynced writes that happened to reach the disk before the power went.
fn replay_some(f: &File, log: &UndoLog, keep: &mut impl FnMut() -> bool) -> io::Result<u64> {
    let mut kept = 0;
    for c in &log.changes {
        if !keep() {
            continue;
        }
        kept += 1;
        match c {
            Change::Write { off, new, .. } => f.write_all_at(new, *off)?,
            Change::SetLen { to, .. } => f.set_len(*to)?,
        }
    }
    Ok(kept)
}

impl Fs {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn real(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }

    fn attr(&self, ino: u64, md: &std::fs::Metadata) -> FileAttr {
        let t = |s: i64, ns: i64| {
            if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, ns as u32)
            } else {
                UNIX_EPOCH
            }
        };
        let ft = md.file_type();
        let kind = if ft.is_dir() {
            FileType::Directory
        } else if ft.is_symlink() {
            FileType::Symlink
        } else {
            FileType::RegularFile
        };
        FileAttr {
            ino: INodeNo(ino),
            size: md.len(),
            blocks: md.blocks(),
            atime: t(md.atime(), md.atime_nsec()),
            mtime: t(md.mtime(), md.mtime_nsec()),
            ctime: t(md.ctime(), md.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind,
            perm: (md.mode() & 0o7777) as u16,
            nlink: md.nlink() as u32,
            uid: md.uid(),
            gid: md.gid(),
            rdev: md.rdev() as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The path of inode `ino`, or ENOENT; EIO once the power is off.
    fn path_of(&self, st: &State, ino: INodeNo) -> Result<PathBuf, Errno> {
        if st.dead {
            return Err(Errno::EIO);
        }
        st.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn child(&self, st: &State, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path_of(st, parent)?.join(name))
    }

    fn entry_of(&self, st: &mut State, rel: &Path) -> Result<FileAttr, Errno> {
        let md = std::fs::symlink_metadata(self.real(rel)).map_err(errno)?;
        let ino = st.ino_for(rel);
        Ok(self.attr(ino, &md))
    }

    /// unlink or rmdir: the name goes, the inode waits in the trash.
    fn remove(
        &self,
        st: &mut State,
        parent: INodeNo,
        name: &OsStr,
        rel: &Path,
    ) -> Result<(), Errno> {
        let (ino, trash) = st.move_to_trash(&self.backing, rel).map_err(errno)?;
        st.note(
            NsOp::Remove {
                ino,
                parent: parent.0,
                name: name.to_os_string(),
                trash,
            },
            vec![parent.0],
        );
        Ok(())
    }

    fn open_handle(&self, st: &mut State, ino: u64, rel: &Path, flags: i32) -> Result<u64, Errno> {
        let acc = flags & libc::O_ACCMODE;
        let mut oo = OpenOptions::new();
        // Always readable: a write first reads the bytes it overwrites, for the undo log.
        oo.read(true)
            .write(acc == libc::O_WRONLY || acc == libc::O_RDWR);
        // The kernel gives every write its offset; O_APPEND here would move them.
        oo.custom_flags(flags & (libc::O_NOATIME | libc::O_NOFOLLOW));
        let file = oo.open(self.real(rel)).map_err(errno)?;
        if flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY {
            st.log_set_len(ino, &file, 0).map_err(errno)?;
            file.set_len(0).map_err(errno)?;
        }
        let fh = st.next_fh;
        st.next_fh += 1;
        st.handles.insert(
            fh,
            Handle {
                file,
                ino,
                sync_writes: flags & (libc::O_SYNC | libc::O_DSYNC) != 0,
            },
        );
        Ok(fh)
    }
}

fn to_system_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.lock();
        match self
            .child(&st, parent, name)
            .and_then(|rel| self.entry_of(&mut st, &rel))
        {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let mut st = self.lock();
        match self
            .path_of(&st, ino)
            .and_then(|rel| self.entry_of(&mut st, &rel))
        {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.lock();
        let res = (|| -> Result<FileAttr, Errno> {
            let rel = self.path_of(&st, ino)?;
            let real = self.real(&rel);
            if let Some(size) = size {
                let f = match fh.and_then(|h| st.handles.get(&h.0)) {
                    Some(h) => h.file.try_clone().map_err(errno)?,
                    None => OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&real)
                        .map_err(errno)?,
                };
                st.log_set_len(ino.0, &f, size).map_err(errno)?;
                f.set_len(size).map_err(errno)?;
            }
            if let Some(mode) = mode {
                std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::chown(&real, uid, gid).map_err(errno)?;
            }
            if atime.is_some() || mtime.is_some() {
                let f = File::open(&real).map_err(errno)?;
                let mut t = std::fs::FileTimes::new();
                if let Some(a) = atime {
                    t = t.set_accessed(to_system_time(a));
                }
                if let Some(m) = mtime {
                    t = t.set_modified(to_system_time(m));
                }
                f.set_times(t).map_err(errno)?;
            }
            self.entry_of(&mut st, &rel)
        })();
        match res {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let res = self.child(&st, parent, name).and_then(|rel| {
            std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), mode & !umask)
                .create(self.real(&rel))
                .map_err(errno)?;
            let a = self.entry_of(&mut st, &rel)?;
            st.note(NsOp::Create { ino: a.ino.0 }, vec![parent.0]);
            Ok(a)
        });
        match res {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.lock();
        let res = self.child(&st, parent, name).and_then(|rel| {
            if std::fs::symlink_metadata(self.real(&rel))
                .map_err(errno)?
                .is_dir()
            {
                return Err(Errno::from_i32(libc::EISDIR));
            }
            self.remove(&mut st, parent, name, &rel)
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.lock();
        let res = self.child(&st, parent, name).and_then(|rel| {
            let real = self.real(&rel);
            if !std::fs::symlink_metadata(&real).map_err(errno)?.is_dir() {
                return Err(Errno::from_i32(libc::ENOTDIR));
            }
            if std::fs::read_dir(&real).map_err(errno)?.next().is_some() {
                return Err(Errno::from_i32(libc::ENOTEMPTY));
            }
            self.remove(&mut st, parent, name, &rel)
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let res = (|| -> Result<(), Errno> {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let from = self.child(&st, parent, name)?;
            let to = self.child(&st, newparent, newname)?;
            let ino = st.ino_for(&from);
            // A name it replaces goes to the trash first, to come back if the rename is undone.
            let replaced = match std::fs::symlink_metadata(self.real(&to)) {
                Ok(_) => Some(st.move_to_trash(&self.backing, &to).map_err(errno)?),
                Err(_) => None,
            };
            if let Err(e) = std::fs::rename(self.real(&from), self.real(&to)) {
                if let Some((rino, trash)) = &replaced {
                    let _ = std::fs::rename(trash, self.real(&to));
                    st.paths.insert(*rino, to.clone());
                    st.inos.insert(to.clone(), *rino);
                }
                return Err(errno(e));
            }
            st.move_paths(&from, &to);
            st.note(
                NsOp::Rename {
                    ino,
                    parent: parent.0,
                    name: name.to_os_string(),
                    replaced,
                },
                vec![parent.0, newparent.0],
            );
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.lock();
        let res = self
            .path_of(&st, ino)
            .and_then(|rel| self.open_handle(&mut st, ino.0, &rel, flags.0));
        // No FOPEN_KEEP_CACHE: each open drops the kernel's cached pages of the file.
        match res {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.lock();
        let res = (|| -> Result<(FileAttr, u64), Errno> {
            let rel = self.child(&st, parent, name)?;
            let real = self.real(&rel);
            let mut oo = OpenOptions::new();
            oo.write(true).create(true).mode(mode & !umask);
            if flags & libc::O_EXCL != 0 {
                oo.create_new(true);
            }
            let existed = real.exists();
            drop(oo.open(&real).map_err(errno)?);
            let attr = self.entry_of(&mut st, &rel)?;
            if !existed {
                st.note(NsOp::Create { ino: attr.ino.0 }, vec![parent.0]);
            }
            let fh = self.open_handle(&mut st, attr.ino.0, &rel, flags)?;
            Ok((attr, fh))
        })();
        match res {
            Ok((a, fh)) => {
                reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let st = self.lock();
        if st.dead {
            return reply.error(Errno::EIO);
        }
        let Some(h) = st.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let mut buf = vec![0u8; size as usize];
        let mut n = 0;
        while n < buf.len() {
            match h.file.read_at(&mut buf[n..], offset + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(errno(e)),
            }
        }
        reply.data(&buf[..n]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = self.lock();
        if st.dead {
            return reply.error(Errno::EIO);
        }
        let res = (|| -> io::Result<()> {
            let h = st
                .handles
                .get(&fh.0)
                .ok_or(io::Error::from_raw_os_error(libc::EBADF))?;
            let (f, ino, sync) = (h.file.try_clone()?, h.ino, h.sync_writes);
            st.stats.writes += 1;
            if sync {
                f.write_all_at(data, offset)?;
                f.sync_data()?;
                // Over-approximates O_DSYNC (it syncs the written range only): nothing of this
                // file is left to undo.
                st.undo.remove(&ino);
            } else {
                st.log_write(ino, &f, offset, data)?;
                f.write_all_at(data, offset)?;
            }
            Ok(())
        })();
        match res {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() is no sync.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.lock().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        if st.dead {
            return reply.error(Errno::EIO);
        }
        let Some(h) = st.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let r = if datasync {
            h.file.sync_data()
        } else {
            h.file.sync_all()
        };
        let ino = h.ino;
        match r {
            Ok(()) => {
                // Everything written to the file so far is on the disk, whichever handle wrote it.
                st.undo.remove(&ino);
                st.stats.fsyncs += 1;
                reply.ok()
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let st = self.lock();
        match self.path_of(&st, ino) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = self.lock();
        let res = (|| -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Errno> {
            let rel = self.path_of(&st, ino)?;
            let mut out = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            let mut names = Vec::new();
            for e in std::fs::read_dir(self.real(&rel)).map_err(errno)? {
                let e = e.map_err(errno)?;
                let kind = match e.file_type() {
                    Ok(t) if t.is_dir() => FileType::Directory,
                    Ok(t) if t.is_symlink() => FileType::Symlink,
                    _ => FileType::RegularFile,
                };
                names.push((e.file_name(), kind));
            }
            names.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, kind) in names {
                let i = st.ino_for(&rel.join(&name));
                out.push((i, kind, name));
            }
            Ok(out)
        })();
        match res {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let res = self.path_of(&st, ino).and_then(|rel| {
            File::open(self.real(&rel))
                .and_then(|d| d.sync_all())
                .map_err(errno)
        });
        match res {
            Ok(()) => {
                st.stats.dir_fsyncs += 1;
                // Every change in this directory so far is durable here (and fully durable once
                // the other directory of a rename is synced too).
                for p in &mut st.pending {
                    p.dirs.retain(|&d| d != ino.0);
                }
                st.pending.retain(|p| !p.dirs.is_empty());
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let path = match std::ffi::CString::new(self.backing.as_os_str().as_encoded_bytes()) {
            Ok(p) => p,
            Err(_) => return reply.error(Errno::EINVAL),
        };
        // SAFETY: statvfs fills the zeroed struct we own from a NUL-terminated path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
            return reply.error(errno(io::Error::last_os_error()));
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        );
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // The members run as root, who may do anything; only existence is checked.
        let st = self.lock();
        match self.path_of(&st, ino) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        // Not worth an undo model of its own: callers fall back to set_len, which has one.
        reply.error(Errno::from_i32(libc::EOPNOTSUPP));
    }
}

/// A mounted `Fs` over a backing directory, that can lose power and come back.
pub struct PowerFs {
    backing: PathBuf,
    mountpoint: PathBuf,
    state: Arc<Mutex<State>>,
    session: Option<BackgroundSession>,
}

impl PowerFs {
    /// Mounts a passthrough of `backing` (a directory on a real disk) on `mountpoint`. Panics
    /// with the reason when FUSE is unusable here: the test must not pass without it.
    pub fn mount(backing: &Path, mountpoint: &Path) -> PowerFs {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: the power-loss tests need FUSE (modprobe fuse, or a container with /dev/fuse)"
        );
        // SAFETY: geteuid has no preconditions.
        assert!(
            unsafe { libc::geteuid() } == 0,
            "the power-loss tests mount a FUSE filesystem with mount(2): run them as root"
        );
        std::fs::create_dir_all(backing).expect("create the backing dir");
        std::fs::create_dir_all(backing.with_extension("trash")).expect("create the trash dir");
        std::fs::create_dir_all(mountpoint).expect("create the mount point");
        let mut fs = PowerFs {
            backing: backing.to_path_buf(),
            mountpoint: mountpoint.to_path_buf(),
            state: Arc::default(),
            session: None,
        };
        fs.start();
        fs
    }

    fn start(&mut self) {
        let mut st = State {
            next_ino: 2,
            next_fh: 1,
            ..State::default()
        };
        st.paths.insert(INodeNo::ROOT.0, PathBuf::new());
        st.inos.insert(PathBuf::new(), INodeNo::ROOT.0);
        {
            let old = self.lock();
            st.stats = old.stats;
            st.next_trash = old.next_trash;
        }
        st.trash = self.backing.with_extension("trash");
        *self.lock() = st;
        let mut cfg = Config::default();
        cfg.mount_options = vec![MountOption::FSName("powerloss".into()), MountOption::RW];
        let fs = Fs {
            backing: self.backing.clone(),
            state: self.state.clone(),
        };
        let session = fuser::spawn_mount(fs, &self.mountpoint, &cfg).unwrap_or_else(|e| {
            panic!(
                "cannot mount the FUSE filesystem on {}: {e} (the power-loss tests need FUSE)",
                self.mountpoint.display()
            )
        });
        self.session = Some(session);
        // The mount must really be ours before a member writes through it.
        let md = std::fs::metadata(&self.mountpoint).expect("stat the mount point");
        assert_eq!(
            md.ino(),
            INodeNo::ROOT.0,
            "{} is not the FUSE mount",
            self.mountpoint.display()
        );
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// How many file changes a power cut would undo now.
    pub fn unsynced_changes(&self) -> usize {
        self.lock().undo.values().map(|l| l.changes.len()).sum()
    }

    /// The namespace changes a power cut would undo now, described.
    pub fn unsynced_names(&self) -> Vec<String> {
        let st = self.lock();
        let name = |ino: &u64| {
            st.paths
                .get(ino)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| format!("inode {ino}"))
        };
        st.pending
            .iter()
            .map(|p| match &p.op {
                NsOp::Create { ino } => format!("create {}", name(ino)),
                NsOp::Remove {
                    parent, name: n, ..
                } => {
                    format!("remove {}/{}", name(parent), n.to_string_lossy())
                }
                NsOp::Rename {
                    ino,
                    parent,
                    name: n,
                    ..
                } => format!(
                    "rename {}/{} -> {}",
                    name(parent),
                    n.to_string_lossy(),
                    name(ino)
                ),
            })
            .collect()
    }

    /// The power goes off: every file goes back to its contents at its last sync, and the
    /// filesystem is mounted again with nothing cached. Stop the processes using it first
    /// (kill -9 is the point): after the cut they would only get EIO.
    pub fn power_cut(&mut self) {
        self.cut(None)
    }

    /// A power cut after which each unsynced change to a file's data survives or not, by a
    /// coin of `seed` (kept ones in the order they were made, over the synced contents): a
    /// disk that wrote some of its cache back, in any order, before it died. Names are still
    /// all lost as in `power_cut`.
    pub fn power_cut_keeping_some(&mut self, seed: u64) {
        self.cut(Some(seed))
    }

    fn cut(&mut self, seed: Option<u64>) {
        let mut rng = seed.map(|s| s | 1);
        let mut keep = move || match rng.as_mut() {
            Some(r) => {
                *r ^= *r << 13;
                *r ^= *r >> 7;
                *r ^= *r << 17;
                *r % 2 == 0
            }
            None => false,
        };
        {
            let mut st = self.lock();
            st.dead = true;
            st.handles.clear();
            let mut logs: Vec<(u64, UndoLog)> = st.undo.drain().collect();
            logs.sort_by_key(|(ino, _)| *ino);
            let mut kept = 0;
            st.stats.files_rolled_back = logs.len() as u64;
            st.stats.changes_undone = logs.iter().map(|(_, l)| l.changes.len() as u64).sum();
            for (ino, log) in logs {
                // A file whose name is gone has nothing left to roll back.
                let Some(rel) = st.paths.get(&ino).cloned() else {
                    continue;
                };
                let real = self.backing.join(&rel);
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&real)
                    .unwrap_or_else(|e| panic!("open {} to roll it back: {e}", real.display()));
                roll_back(&f, &log).unwrap_or_else(|e| panic!("roll back {}: {e}", real.display()));
                kept += replay_some(&f, &log, &mut keep)
                    .unwrap_or_else(|e| panic!("replay on {}: {e}", real.display()));
            }
            st.stats.changes_kept = kept;
            // Then the names, newest first: each change not made durable by a directory fsync
            // is undone.
            let pending = std::mem::take(&mut st.pending);
            st.stats.names_undone = pending.len() as u64;
            for p in pending.iter().rev() {
                st.undo_ns(&self.backing, &p.op)
                    .unwrap_or_else(|e| panic!("undo a namespace change on a power cut: {e}"));
            }
        }
        self.unmount();
        self.start();
    }

    fn unmount(&mut self) {
        let Some(s) = self.session.take() else {
            return;
        };
        if let Err(e) = s.umount_and_join() {
            // Something still holds it (a member not yet reaped): detach it lazily so the
            // next mount gets a fresh superblock all the same.
            eprintln!(
                "unmounting {}: {e}; detaching it",
                self.mountpoint.display()
            );
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
        }
    }
}

impl Drop for PowerFs {
    fn drop(&mut self) {
        self.unmount();
    }
}
