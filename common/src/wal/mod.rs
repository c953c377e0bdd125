// etcd's write-ahead log, byte-compatible with etcd 3.4/3.5: segment files of framed walpb
// records chained by CRC-32C, holding raft entries, hard states and snapshot markers.
//
// Lifecycle (as etcd's): `create` a new WAL (crc, metadata and an empty snapshot marker), or
// `open` an existing one at a snapshot marker and `read_all` it once, which returns the metadata,
// the last hard state and the entries after the marker and positions the WAL for appending.
// Then `save` hard states and entries (fdatasync when raft needs it), `save_snapshot` markers,
// and `release_lock_to` old segments so the purge can remove them. A segment past 64 MB is cut:
// the rest of it is trimmed, and writing goes on in a new segment pre-created in the background.
//
// A torn tail (the last frame of the last segment cut short by a crash) is reported as
// `WalError::TornTail` and fixed by `repair`; anything wrong elsewhere is an error naming the
// file and offset and is never silently dropped.

mod decoder;
mod frame;
mod name;
mod pipeline;
mod repair;

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prost::Message;
use proto::raftpb::{Entry, HardState};
use proto::walpb;

use crate::fileutil::{self, FileError, LockedFile};
use decoder::{DecodeError, Decoder};
pub use name::{parse_wal_name, wal_name};
pub use repair::{RepairOutcome, repair};

/// Size a segment is preallocated to; a segment is cut once writing passes it.
pub const SEGMENT_SIZE_BYTES: u64 = 64 * 1000 * 1000;

/// fdatasync slower than this is logged as a warning, as etcd does.
const WARN_SYNC_DURATION: Duration = Duration::from_secs(1);

/// The writer keeps this much of the tail segment past its last record written with zeros.
/// A segment is preallocated with fallocate, whose blocks stay "unwritten" until written:
/// an fdatasync after an append that reaches new blocks must also record their conversion
/// (an inode write, or a journal commit: a third I/O beside the data and the cache flush).
/// Zeroing ahead in chunks pays that once per chunk, in the fdatasync of the batch that
/// crosses into it. The file's contents are the same either way (unwritten blocks read as
/// zeros), so etcd and our readers see no difference.
const ZERO_AHEAD: u64 = 256 * 1024;
static ZEROS: [u8; ZERO_AHEAD as usize] = [0; ZERO_AHEAD as usize];

/// walpb.Record.type values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i64)]
pub enum RecordType {
    Metadata = 1,
    Entry = 2,
    State = 3,
    Crc = 4,
    Snapshot = 5,
}

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("wal: file not found in {0}")]
    FileNotFound(PathBuf),
    #[error("wal: directory {0} already exists")]
    Exists(PathBuf),
    #[error("wal: crc mismatch in {file} at offset {offset}")]
    CrcMismatch { file: PathBuf, offset: u64 },
    #[error("wal: corrupt record in {file} at offset {offset}: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error(
        "wal: torn write at the end of {file} (offset {offset}): the last record was cut short by a crash; repair the WAL (etcdutl repair) to truncate it"
    )]
    TornTail { file: PathBuf, offset: u64 },
    #[error("wal: unexpected record type {typ} in {file} at offset {offset}")]
    UnexpectedRecordType {
        typ: i64,
        file: PathBuf,
        offset: u64,
    },
    #[error("wal: conflicting metadata found")]
    MetadataConflict,
    #[error("wal: snapshot mismatch")]
    SnapshotMismatch,
    #[error("wal: snapshot not found")]
    SnapshotNotFound,
    #[error("wal: slice bounds out of range")]
    SliceOutOfRange,
    #[error("wal: segment files of {dir} do not follow one another: {names:?}")]
    BadSequence { dir: PathBuf, names: Vec<String> },
    /// A segment name (or the last entry) at u64::MAX leaves no name for the next segment.
    #[error(
        "wal: no segment can follow {file}: its sequence number or the last index is the largest possible"
    )]
    NoNextSegment { file: PathBuf },
    #[error("wal: {0} was already read; reopen the WAL to read it again")]
    AlreadyRead(PathBuf),
    #[error("wal: {0} must be read to its end (read_all) before it can be written")]
    NotReadYet(PathBuf),
    #[error("wal: opened read-only")]
    ReadOnly,
}

pub type Result<T> = std::result::Result<T, WalError>;

/// What `read_all` returns: the WAL's metadata, the last hard state, and the entries after
/// the snapshot the WAL was opened at (a later entry with the same index replaces the earlier).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReadAll {
    pub metadata: Vec<u8>,
    pub state: HardState,
    pub entries: Vec<Entry>,
}

fn empty_state(st: &HardState) -> bool {
    st.term == 0 && st.vote == 0 && st.commit == 0
}

/// Raft's rule for when a save must reach the disk before messages go out: new entries, or a
/// changed term or vote (a commit index alone can be recomputed).
pub fn must_sync(st: &HardState, prev: &HardState, entry_count: usize) -> bool {
    entry_count != 0 || st.vote != prev.vote || st.term != prev.term
}

struct Encoder {
    crc: u32,
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

impl Encoder {
    fn new(crc: u32) -> Encoder {
        Encoder {
            crc,
            buf: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn record(&mut self, typ: RecordType, data: Option<&[u8]>) {
        if let Some(d) = data {
            self.crc = crc32c::crc32c_append(self.crc, d);
        }
        frame::append_record(&mut self.buf, typ as i64, self.crc, data);
    }

    fn message(&mut self, typ: RecordType, msg: &impl Message) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        // Encoding into a Vec cannot fail: it grows as needed.
        let _ = msg.encode(&mut scratch);
        self.record(typ, Some(&scratch));
        self.scratch = scratch;
    }
}

/// Settings of an open WAL; `Default` is etcd's.
#[derive(Debug, Clone, Copy)]
pub struct WalOptions {
    /// Segment size: preallocation and the size past which a segment is cut.
    pub segment_size: u64,
    /// Skip fdatasync (etcd's --unsafe-no-fsync): a crash may then lose acknowledged writes.
    pub unsafe_no_sync: bool,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_size: SEGMENT_SIZE_BYTES,
            unsafe_no_sync: false,
        }
    }
}

/// Counters for metrics (etcd_disk_wal_fsync_duration_seconds and friends).
#[derive(Debug, Default, Clone, Copy)]
pub struct WalStats {
    pub fsyncs: u64,
    pub fsync_total: Duration,
    pub last_fsync: Duration,
    pub bytes_written: u64,
}

/// An open WAL. Written by one owner (the raft loop).
pub struct Wal {
    dir: PathBuf,
    metadata: Vec<u8>,
    state: HardState,
    /// The snapshot marker reading starts at (cleared after read_all).
    start: walpb::Snapshot,
    /// Index of the last entry saved.
    enti: u64,
    /// Locked segments, oldest first; the last is the one being written.
    locks: Vec<LockedFile>,
    decoder: Option<Decoder>,
    encoder: Option<Encoder>,
    tail_off: u64,
    /// The tail segment is written (records or zeros) up to here: see ZERO_AHEAD.
    zeroed_to: u64,
    pipeline: Option<pipeline::Pipeline>,
    read_only: bool,
    opts: WalOptions,
    stats: WalStats,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("enti", &self.enti)
            .field("segments", &self.locks.len())
            .finish()
    }
}

/// True when `dir` holds at least one WAL segment.
pub fn exists(dir: &Path) -> bool {
    fileutil::read_dir_names(dir, ".wal")
        .map(|n| n.iter().any(|n| parse_wal_name(n).is_some()))
        .unwrap_or(false)
}

/// Sorted segment names in `dir`; other files are ignored.
fn segment_names(dir: &Path) -> Result<Vec<String>> {
    let names: Vec<String> = fileutil::read_dir_names(dir, ".wal")?
        .into_iter()
        .filter(|n| parse_wal_name(n).is_some())
        .collect();
    if names.is_empty() {
        return Err(WalError::FileNotFound(dir.to_path_buf()));
    }
    Ok(names)
}

impl Wal {
    /// Creates a new WAL in `dir` (which must not exist) holding `metadata`. The first segment is
    /// written in `<dir>.tmp` and renamed into place, so a crash never leaves a half-made WAL.
    pub fn create(dir: &Path, metadata: &[u8]) -> Result<Wal> {
        Self::create_with(dir, metadata, WalOptions::default())
    }

    pub fn create_with(dir: &Path, metadata: &[u8], opts: WalOptions) -> Result<Wal> {
        if dir.exists() {
            return Err(WalError::Exists(dir.to_path_buf()));
        }
        let mut tmp_name = dir.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(fileutil::io_err("remove", &tmp))?;
        }
        fileutil::touch_dir_all(&tmp)?;
        let first = tmp.join(wal_name(0, 0));
        let f = fileutil::try_lock_file(&first, true, true)?;
        fileutil::preallocate(f.file(), opts.segment_size, true, &first)?;
        let mut w = Wal {
            dir: dir.to_path_buf(),
            metadata: metadata.to_vec(),
            state: HardState::default(),
            start: walpb::Snapshot::default(),
            enti: 0,
            locks: vec![f],
            decoder: None,
            encoder: Some(Encoder::new(0)),
            tail_off: 0,
            zeroed_to: 0,
            pipeline: None,
            read_only: false,
            opts,
            stats: WalStats::default(),
        };
        if let Some(enc) = w.encoder.as_mut() {
            enc.record(RecordType::Crc, None);
            enc.record(RecordType::Metadata, Some(metadata));
        }
        w.save_snapshot(&walpb::Snapshot::default())?;
        // The first segment's name must be durable in the dir before the dir takes the WAL's
        // name: else a power loss can leave a WAL dir without a segment, which no start
        // accepts (the parent's fsync below covers the rename, not what is inside).
        fileutil::fsync_dir(&tmp)?;
        fs::rename(&tmp, dir).map_err(fileutil::io_err("rename", &tmp))?;
        let new_path = dir.join(wal_name(0, 0));
        if let Some(l) = w.locks.last_mut() {
            l.set_path(new_path);
        }
        if let Some(parent) = dir.parent() {
            fileutil::fsync_dir(parent)?;
        }
        w.pipeline = Some(pipeline::Pipeline::start(dir, opts.segment_size));
        Ok(w)
    }

    /// Opens the WAL in `dir` for reading from the marker `snap` on and then appending. Every
    /// segment from the one holding `snap` is locked: a second writer fails with
    /// `FileError::Locked`. Call `read_all` before anything else.
    pub fn open(dir: &Path, snap: &walpb::Snapshot) -> Result<Wal> {
        Self::open_with(dir, snap, WalOptions::default())
    }

    pub fn open_with(dir: &Path, snap: &walpb::Snapshot, opts: WalOptions) -> Result<Wal> {
        let mut w = Self::open_at(dir, snap, true, opts)?;
        w.pipeline = Some(pipeline::Pipeline::start(dir, opts.segment_size));
        Ok(w)
    }

    /// Opens the WAL for reading only (no locks; a torn tail is tolerated), e.g. for offline
    /// inspection while a server may be running.
    pub fn open_for_read(dir: &Path, snap: &walpb::Snapshot) -> Result<Wal> {
        Self::open_at(dir, snap, false, WalOptions::default())
    }

    fn open_at(dir: &Path, snap: &walpb::Snapshot, write: bool, opts: WalOptions) -> Result<Wal> {
        let names = segment_names(dir)?;
        let first = name::search_index(&names, snap.index)
            .ok_or_else(|| WalError::FileNotFound(dir.to_path_buf()))?;
        let names = &names[first..];
        if !name::is_valid_seq(names) {
            return Err(WalError::BadSequence {
                dir: dir.to_path_buf(),
                names: names.to_vec(),
            });
        }
        let mut locks = Vec::new();
        let mut files = Vec::new();
        for n in names {
            let path = dir.join(n);
            if write {
                let l = fileutil::try_lock_file(&path, true, false)?;
                let reader = l
                    .file()
                    .try_clone()
                    .map_err(fileutil::io_err("dup", &path))?;
                files.push((path, reader));
                locks.push(l);
            } else {
                let f = File::open(&path).map_err(fileutil::io_err("open", &path))?;
                files.push((path, f));
            }
        }
        let decoder = Decoder::new(files).map_err(|e| {
            WalError::File(FileError::Io {
                op: "stat",
                path: dir.to_path_buf(),
                source: e,
            })
        })?;
        Ok(Wal {
            dir: dir.to_path_buf(),
            metadata: Vec::new(),
            state: HardState::default(),
            start: snap.clone(),
            enti: 0,
            locks,
            decoder: Some(decoder),
            encoder: None,
            tail_off: 0,
            zeroed_to: 0,
            pipeline: None,
            read_only: !write,
            opts,
            stats: WalStats::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn stats(&self) -> WalStats {
        self.stats
    }

    /// Index of the last entry saved or read.
    pub fn last_index(&self) -> u64 {
        self.enti
    }

    /// Reads every record from the opening snapshot marker on. In write mode the whole log must
    /// be sound (a torn tail is `TornTail`: call `repair` and reopen); afterwards the WAL
    /// appends after the last good record. Read-only mode stops quietly at a torn tail.
    pub fn read_all(&mut self) -> Result<ReadAll> {
        let mut decoder = self
            .decoder
            .take()
            .ok_or_else(|| WalError::AlreadyRead(self.dir.clone()))?;
        let mut out = ReadAll::default();
        let mut have_metadata = false;
        let mut matched = false;
        loop {
            let d = match decoder.next() {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(DecodeError::Torn { .. }) if self.read_only && decoder.is_last_segment() => {
                    break;
                }
                Err(e) => return Err(e.into_wal_error_at(decoder.is_last_segment())),
            };
            let rec = d.record;
            let data = rec.data.as_deref().unwrap_or(&[]);
            let corrupt = |reason: String| WalError::Corrupt {
                file: self.segment_path(d.file_index),
                offset: d.offset,
                reason,
            };
            match rec.r#type {
                t if t == RecordType::Entry as i64 => {
                    let e = Entry::decode(data).map_err(|e| corrupt(format!("bad entry: {e}")))?;
                    if e.index > self.start.index {
                        let up = (e.index - self.start.index - 1) as usize;
                        if up > out.entries.len() {
                            return Err(WalError::SliceOutOfRange);
                        }
                        out.entries.truncate(up);
                        self.enti = e.index;
                        out.entries.push(e);
                    }
                }
                t if t == RecordType::State as i64 => {
                    out.state = HardState::decode(data)
                        .map_err(|e| corrupt(format!("bad hard state: {e}")))?;
                }
                t if t == RecordType::Metadata as i64 => {
                    if have_metadata && out.metadata != data {
                        return Err(WalError::MetadataConflict);
                    }
                    out.metadata = data.to_vec();
                    have_metadata = true;
                }
                t if t == RecordType::Crc as i64 => {}
                t if t == RecordType::Snapshot as i64 => {
                    let s = walpb::Snapshot::decode(data)
                        .map_err(|e| corrupt(format!("bad snapshot marker: {e}")))?;
                    if s.index == self.start.index {
                        if s.term != self.start.term {
                            return Err(WalError::SnapshotMismatch);
                        }
                        matched = true;
                    }
                }
                typ => {
                    return Err(WalError::UnexpectedRecordType {
                        typ,
                        file: self.segment_path(d.file_index),
                        offset: d.offset,
                    });
                }
            }
        }
        if !matched {
            return Err(WalError::SnapshotNotFound);
        }
        if !self.read_only {
            // Bytes after the last good record may be the never-synced rest of a torn write;
            // zero them so new records are not followed by stale ones.
            let off = decoder.last_offset();
            if let Some(tail) = self.locks.last() {
                fileutil::zero_to_end(tail.file(), off, tail.path())?;
            }
            self.tail_off = off;
            self.zeroed_to = off;
            self.encoder = Some(Encoder::new(decoder.last_crc()));
        }
        self.metadata = out.metadata.clone();
        self.state = out.state;
        self.start = walpb::Snapshot::default();
        Ok(out)
    }

    fn segment_path(&self, i: usize) -> PathBuf {
        self.locks
            .get(i)
            .map(|l| l.path().to_path_buf())
            .unwrap_or_else(|| self.dir.clone())
    }

    fn encoder(&mut self) -> Result<&mut Encoder> {
        if self.read_only {
            return Err(WalError::ReadOnly);
        }
        let dir = self.dir.clone();
        self.encoder.as_mut().ok_or(WalError::NotReadYet(dir))
    }

    /// Appends `entries` and the hard state `st` (an empty state is skipped), fdatasyncs when
    /// raft requires it, and cuts a new segment when the current one is full.
    pub fn save(&mut self, st: &HardState, entries: &[Entry]) -> Result<()> {
        if empty_state(st) && entries.is_empty() {
            return Ok(());
        }
        let sync = must_sync(st, &self.state, entries.len());
        let enc = self.encoder()?;
        for e in entries {
            enc.message(RecordType::Entry, e);
        }
        if !empty_state(st) {
            enc.message(RecordType::State, st);
        }
        if let Some(last) = entries.last() {
            self.enti = last.index;
        }
        if !empty_state(st) {
            self.state = *st;
        }
        self.flush()?;
        if self.tail_off < self.opts.segment_size {
            if sync {
                self.sync()?;
            }
            return Ok(());
        }
        self.cut()
    }

    /// Writes a snapshot marker (raft snapshot at index/term) and syncs it.
    pub fn save_snapshot(&mut self, snap: &walpb::Snapshot) -> Result<()> {
        self.encoder()?.message(RecordType::Snapshot, snap);
        if self.enti < snap.index {
            self.enti = snap.index;
        }
        self.flush()?;
        self.sync()
    }

    /// Writes buffered records to the tail segment (no fsync).
    fn flush(&mut self) -> Result<()> {
        let Some(enc) = self.encoder.as_mut() else {
            return Ok(());
        };
        if enc.buf.is_empty() {
            return Ok(());
        }
        let tail = self.locks.last().ok_or(WalError::ReadOnly)?;
        let end = self.tail_off + enc.buf.len() as u64;
        if end > self.zeroed_to && end < self.opts.segment_size {
            // Zeros first, past the records: both land in the page cache and are written
            // out by the same fdatasync.
            let to = (end + ZERO_AHEAD).min(self.opts.segment_size);
            tail.file()
                .write_all_at(&ZEROS[..(to - end) as usize], end)
                .map_err(fileutil::io_err("write", tail.path()))?;
            self.zeroed_to = to;
        }
        tail.file()
            .write_all_at(&enc.buf, self.tail_off)
            .map_err(fileutil::io_err("write", tail.path()))?;
        self.tail_off = end;
        self.stats.bytes_written += enc.buf.len() as u64;
        enc.buf.clear();
        Ok(())
    }

    /// fdatasyncs the tail segment (unless --unsafe-no-fsync).
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        if self.opts.unsafe_no_sync {
            return Ok(());
        }
        let Some(tail) = self.locks.last() else {
            return Ok(());
        };
        let start = Instant::now();
        fileutil::fdatasync(tail.file(), tail.path())?;
        let took = start.elapsed();
        self.stats.fsyncs += 1;
        self.stats.fsync_total += took;
        self.stats.last_fsync = took;
        crate::observe::wal_fsync(took);
        if took > WARN_SYNC_DURATION {
            tracing::warn!(
                took = ?took,
                expected_duration = ?WARN_SYNC_DURATION,
                "slow fdatasync"
            );
        }
        Ok(())
    }

    /// Closes the full tail segment and continues in a new one that starts with the running crc,
    /// the metadata and the current hard state, so each segment can be read on its own terms.
    fn cut(&mut self) -> Result<()> {
        // Trim the unused preallocation of the old tail.
        if let Some(tail) = self.locks.last() {
            tail.file()
                .set_len(self.tail_off)
                .map_err(fileutil::io_err("truncate", tail.path()))?;
        }
        self.sync()?;
        let tail_path = self
            .locks
            .last()
            .map(|l| l.path().to_path_buf())
            .unwrap_or_else(|| self.dir.clone());
        let seq = tail_path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_wal_name)
            .map(|(seq, _)| seq)
            .unwrap_or(0);
        // The numbers come from a file name and a read entry: a damaged WAL can hold u64::MAX.
        let (Some(next_seq), Some(next_index)) = (seq.checked_add(1), self.enti.checked_add(1))
        else {
            return Err(WalError::NoNextSegment { file: tail_path });
        };
        let final_path = self.dir.join(wal_name(next_seq, next_index));
        let pipeline = self
            .pipeline
            .get_or_insert_with(|| pipeline::Pipeline::start(&self.dir, self.opts.segment_size));
        let new_tail = pipeline.take()?;
        let prev_crc = self.encoder()?.crc;
        self.locks.push(new_tail);
        self.tail_off = 0;
        self.zeroed_to = 0;
        let metadata = self.metadata.clone();
        let state = self.state;
        let enc = self.encoder()?;
        *enc = Encoder::new(prev_crc);
        enc.record(RecordType::Crc, None);
        enc.record(RecordType::Metadata, Some(&metadata));
        if !empty_state(&state) {
            enc.message(RecordType::State, &state);
        }
        self.sync()?;
        if let Some(tail) = self.locks.last_mut() {
            fs::rename(tail.path(), &final_path)
                .map_err(fileutil::io_err("rename", tail.path()))?;
            tail.set_path(final_path);
        }
        fileutil::fsync_dir(&self.dir)?;
        tracing::info!(path = %self.segment_path(self.locks.len() - 1).display(), "created a new WAL segment");
        Ok(())
    }

    /// Unlocks the segments that hold only entries before `index` (keeping the one that holds
    /// `index`), so that the purge may delete them.
    pub fn release_lock_to(&mut self, index: u64) {
        if self.locks.is_empty() {
            return;
        }
        let first_index = |l: &LockedFile| {
            l.path()
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_wal_name)
                .map(|(_, i)| i)
                .unwrap_or(0)
        };
        let keep_from = match self.locks.iter().position(|l| first_index(l) >= index) {
            Some(i) => i.saturating_sub(1),
            None => self.locks.len() - 1,
        };
        if keep_from > 0 {
            self.locks.drain(..keep_from);
        }
    }

    /// Paths of the segments this WAL holds locked, oldest first.
    pub fn locked_segments(&self) -> Vec<PathBuf> {
        self.locks.iter().map(|l| l.path().to_path_buf()).collect()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if !self.read_only && self.encoder.is_some() {
            let _ = self.sync();
        }
    }
}

/// Deletes the oldest segments beyond `max` that no WAL holds locked (etcd's --max-wals).
pub fn purge(dir: &Path, max: usize) -> Result<Vec<PathBuf>> {
    Ok(fileutil::purge_files(dir, ".wal", max)?)
}

/// One record as stored, with where it was: for inspection tools and compatibility checks.
#[derive(Debug, Clone)]
pub struct RawRecord {
    pub file: PathBuf,
    pub offset: u64,
    pub record: walpb::Record,
}

/// Every record of every segment in `dir`, in order, with the CRC chain checked. A torn tail
/// of the last segment ends the iteration with `Err(TornTail)`; corruption is an `Err` too.
pub struct Records {
    decoder: Decoder,
    paths: Vec<PathBuf>,
    done: bool,
}

impl Records {
    pub fn open(dir: &Path) -> Result<Records> {
        let names = segment_names(dir)?;
        let mut files = Vec::new();
        let mut paths = Vec::new();
        for n in &names {
            let path = dir.join(n);
            let f = File::open(&path).map_err(fileutil::io_err("open", &path))?;
            paths.push(path.clone());
            files.push((path, f));
        }
        let decoder = Decoder::new(files).map_err(|e| {
            WalError::File(FileError::Io {
                op: "stat",
                path: dir.to_path_buf(),
                source: e,
            })
        })?;
        Ok(Records {
            decoder,
            paths,
            done: false,
        })
    }
}

impl Iterator for Records {
    type Item = Result<RawRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.decoder.next() {
            Ok(Some(d)) => Some(Ok(RawRecord {
                file: self.paths.get(d.file_index).cloned().unwrap_or_default(),
                offset: d.offset,
                record: d.record,
            })),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e.into_wal_error_at(self.decoder.is_last_segment())))
            }
        }
    }
}

/// The snapshot markers in the WAL that are safe to load a .snap for: those whose index is
/// committed by the last hard state (a later marker may name a .snap that never got written).
/// A torn tail is tolerated (it holds nothing acknowledged).
pub fn valid_snapshot_entries(dir: &Path) -> Result<Vec<walpb::Snapshot>> {
    let mut snaps = Vec::new();
    let mut state = HardState::default();
    for r in Records::open(dir)? {
        let rec = match r {
            Ok(r) => r.record,
            Err(WalError::TornTail { .. }) => break,
            Err(e) => return Err(e),
        };
        let data = rec.data.as_deref().unwrap_or(&[]);
        if rec.r#type == RecordType::Snapshot as i64 {
            if let Ok(s) = walpb::Snapshot::decode(data) {
                snaps.push(s);
            }
        } else if rec.r#type == RecordType::State as i64
            && let Ok(s) = HardState::decode(data)
        {
            state = s;
        }
    }
    snaps.retain(|s| s.index <= state.commit);
    Ok(snaps)
}
