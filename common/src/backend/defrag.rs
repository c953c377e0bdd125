// Whole-file rewrites and copies: defrag (compact copy, fsync, atomic rename, handle keeps
// working) and the snapshot stream (a consistent db image from one read txn, writes go on).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::buckets;
use super::db::{Db, Options, Writer};
use super::dirty::Dirty;
use super::error::{Error, Result, io};
use super::tx::{ReadTx, ReadTxn, SEQ_FILL};

/// fsyncs a directory so a rename or create inside it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "fsync directory"))
}

/// Keys copied per commit while defragmenting (bounds the memory of one write txn).
const DEFRAG_BATCH: usize = 10_000;

/// Catch-up rounds run while writes go on before the last one, which holds the writer: a
/// round replays what was written during the previous one, so each is shorter unless writes
/// outpace the copy; the cap bounds the defrag under such a load.
const CATCH_UP_ROUNDS: usize = 8;

/// Changed keys few enough to replay while writers wait (a few milliseconds of work).
const FINAL_AT: usize = 2_000;

/// Where a defrag is, for progress reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefragStep {
    /// Keys of the version the defrag started from copied so far.
    Copying { keys: u64 },
    /// A catch-up round replayed `keys` keys and buckets that writes changed meanwhile;
    /// writes still go on.
    CaughtUp { keys: usize },
    /// The last round, with writers waiting, replayed `keys`; the file is being swapped.
    Swapping { keys: usize },
    /// The handle reads and writes the new file; writers waited `writers_waited` for the
    /// last round and the swap.
    Swapped { writers_waited: std::time::Duration },
}

impl Db {
    /// Rewrites the db into a fresh compact file (every bucket copied in key order, pages 90%
    /// full as etcd does, etcd's append-only `key` bucket full), fsyncs it, renames it over
    /// the db and fsyncs the directory. The handle (and its clones) keep working on the new
    /// file; open readers keep reading the old image until they finish.
    ///
    /// Online: writers go on during the copy. Their commits record the keys they change
    /// (`Writer::dirty`), and catch-up rounds copy those keys again from a later version;
    /// only the last, short round holds the writer, so the copy equals the latest commit
    /// when it replaces the file. etcd's defrag instead holds every write for the whole copy
    /// (etcd #9222).
    pub fn defrag(&self) -> Result<()> {
        self.defrag_with(&mut |_| {})
    }

    /// `defrag`, reporting each step to `progress` (called on the defragmenting thread).
    pub fn defrag_with(&self, progress: &mut dyn FnMut(DefragStep)) -> Result<()> {
        let shared = &self.shared;
        if shared.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let _one = shared.defrag.lock().unwrap_or_else(|e| e.into_inner());
        let src = {
            let mut w = shared.writer.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(why) = &w.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            // Recording starts at exactly the version the copy reads: no commit in between.
            w.dirty = Some(Dirty::default());
            self.begin_read()
        };
        let tmp = {
            let path = &shared.path;
            let mut name = path
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            name.push(".defrag.tmp");
            path.with_file_name(name)
        };
        let result = self.copy_and_swap(src, &tmp, progress);
        shared
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .dirty = None;
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    fn copy_and_swap(
        &self,
        src: ReadTx,
        tmp: &Path,
        progress: &mut dyn FnMut(DefragStep),
    ) -> Result<()> {
        let shared = &self.shared;
        let path = shared.path.clone();
        let _ = std::fs::remove_file(tmp);
        let dst = Db::open_with(
            tmp,
            Options {
                read_only: false,
                persist_freelist: shared.opts.persist_freelist,
                no_sync: shared.opts.no_sync,
                io_observer: None,
            },
        )?;
        let mut copied = 0u64;
        for name in src.bucket_names()? {
            copy_bucket(&src, &dst, &name, &mut |n| {
                copied += n as u64;
                progress(DefragStep::Copying { keys: copied });
            })?;
        }
        drop(src);
        for _ in 0..CATCH_UP_ROUNDS {
            let (dirty, at) = {
                let mut w = shared.writer.lock().unwrap_or_else(|e| e.into_inner());
                let dirty = w.dirty.replace(Dirty::default()).unwrap_or_default();
                (dirty, self.begin_read())
            };
            let n = dirty.len();
            replay(dirty, &at, &dst)?;
            progress(DefragStep::CaughtUp { keys: n });
            if n <= FINAL_AT {
                break;
            }
        }
        // The last round: writers wait from here until the handle reads the new file.
        let mut w = shared.writer.lock().unwrap_or_else(|e| e.into_inner());
        let held = std::time::Instant::now();
        if let Some(why) = &w.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        let dirty = w.dirty.take().unwrap_or_default();
        let at = self.begin_read();
        let n = dirty.len();
        replay(dirty, &at, &dst)?;
        progress(DefragStep::Swapping { keys: n });
        // Txids keep increasing across the swap, as readers and callers expect.
        let txid = at.txid();
        drop(at);
        let next = txid.checked_add(1).ok_or_else(|| Error::TxidExhausted {
            path: path.clone(),
            txid,
        })?;
        dst.bump_txid(next)?;
        // The copy's handle stays open across the rename (the descriptor follows the file),
        // so its file, freelist and map are taken over as they are: a reopen would read the
        // whole new file again while writers wait.
        std::fs::rename(tmp, &path).map_err(io(&path, "rename defragmented file"))?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        let fresh_shared = match Arc::try_unwrap(dst.shared) {
            Ok(s) => s,
            Err(_) => {
                let why = "defrag copy handle still shared after the rename".to_string();
                w.poisoned = Some(why.clone());
                return Err(Error::Poisoned(why));
            }
        };
        let fw = fresh_shared
            .writer
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let fv = fresh_shared
            .view
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let Writer {
            file,
            file_len,
            freelist,
            ..
        } = fw;
        w.file = file;
        w.file_len = file_len;
        w.freelist = freelist;
        let mut v = shared.view.lock().unwrap_or_else(|e| e.into_inner());
        v.meta = fv.meta;
        v.map = fv.map;
        v.free_pages = fv.free_pages;
        drop((v, w));
        progress(DefragStep::Swapped {
            writers_waited: held.elapsed(),
        });
        Ok(())
    }

    /// Streams a consistent image of the latest committed version into `out` while writes go
    /// on; returns the bytes written. The image is a valid db file (both metas describe the
    /// snapshot's version). With `sha256_trailer`, the SHA-256 of the image is appended as
    /// etcd's Maintenance.Snapshot does (and `etcdctl snapshot restore` checks).
    pub fn snapshot(&self, out: &mut dyn Write, sha256_trailer: bool) -> Result<u64> {
        let tx = self.begin_read();
        write_image(&tx, out, sha256_trailer, &self.shared.path)
    }

    /// Writes the image `tx` reads (a version chosen earlier, e.g. the one matching a raft
    /// snapshot's index) to `out`.
    pub fn snapshot_of(
        &self,
        tx: &ReadTx,
        out: &mut dyn Write,
        sha256_trailer: bool,
    ) -> Result<u64> {
        write_image(tx, out, sha256_trailer, &self.shared.path)
    }

    /// Writes a snapshot to a file (temp + fsync + rename), with the sha256 trailer.
    pub fn snapshot_to_file(&self, dest: &Path, sha256_trailer: bool) -> Result<u64> {
        let mut tmp_name = dest
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        tmp_name.push(".part");
        let tmp = dest.with_file_name(tmp_name);
        let mut f = File::create(&tmp).map_err(io(&tmp, "create snapshot"))?;
        let n = self.snapshot(&mut f, sha256_trailer)?;
        f.sync_all().map_err(io(&tmp, "fsync snapshot"))?;
        drop(f);
        std::fs::rename(&tmp, dest).map_err(io(dest, "rename snapshot"))?;
        if let Some(dir) = dest.parent() {
            sync_dir(dir)?;
        }
        Ok(n)
    }
}

/// How full the copy leaves the pages of bucket `name`.
fn fill_of(name: &[u8]) -> f64 {
    // etcd's revisions only ever grow at the end, so their bucket is copied into full pages
    // (as put_seq leaves them); other buckets get inserts anywhere and keep etcd's 10% room
    // per page.
    if name == buckets::KEY {
        SEQ_FILL
    } else {
        PAGE_FILL
    }
}

/// etcd's defrag fill for buckets that get inserts anywhere.
const PAGE_FILL: f64 = 0.9;

/// Copies bucket `name` (its keys and sequence) from `src` into `dst`, where it must not
/// exist, in commits of `DEFRAG_BATCH` keys; `copied` hears of each commit's key count.
fn copy_bucket(src: &ReadTx, dst: &Db, name: &[u8], copied: &mut dyn FnMut(usize)) -> Result<()> {
    let fill = fill_of(name);
    let mut c = src.cursor(name)?;
    let mut e = c.first()?;
    let mut wtx = dst.begin_write()?;
    wtx.set_fill_percent(fill);
    wtx.create_bucket(name)?;
    wtx.set_sequence(name, src.sequence(name)?.unwrap_or(0))?;
    let mut n = 0;
    while let Some((k, v)) = e {
        wtx.put(name, k, v)?;
        n += 1;
        if n % DEFRAG_BATCH == 0 {
            wtx.commit()?;
            copied(DEFRAG_BATCH);
            // What was copied is not read again: the old file's pages leave the resident
            // set as the copy goes (issue 19: a defrag no longer maps the whole file).
            src.release_resident();
            wtx = dst.begin_write()?;
            wtx.set_fill_percent(fill);
        }
        e = c.next()?;
    }
    wtx.commit()?;
    copied(n % DEFRAG_BATCH);
    Ok(())
}

/// Makes `dst` equal `at` on everything `dirty` names, given it equalled an older version
/// everywhere else: each changed key's value (or absence) is read from `at`.
fn replay(dirty: Dirty, at: &ReadTx, dst: &Db) -> Result<()> {
    let begin = || -> Result<_> {
        let mut wtx = dst.begin_write()?;
        wtx.set_fill_percent(PAGE_FILL);
        Ok(wtx)
    };
    let mut wtx = begin()?;
    let mut n = 0;
    for (name, d) in dirty.buckets {
        let in_src = at.bucket_exists(&name)?;
        if d.whole {
            if wtx.bucket_exists(&name)? {
                wtx.delete_bucket(&name)?;
            }
            wtx.commit()?;
            if in_src {
                copy_bucket(at, dst, &name, &mut |_| {})?;
            }
            wtx = begin()?;
            continue;
        }
        if !in_src {
            if wtx.bucket_exists(&name)? {
                wtx.delete_bucket(&name)?;
            }
            continue;
        }
        if !wtx.bucket_exists(&name)? {
            wtx.create_bucket(&name)?;
        }
        // Revisions changed during the defrag are mostly new ones, at the bucket's end.
        let seq = name == buckets::KEY;
        for key in &d.keys {
            match at.get(&name, key)? {
                Some(v) if seq => wtx.put_seq(&name, key, v)?,
                Some(v) => wtx.put(&name, key, v)?,
                None => {
                    wtx.delete(&name, key)?;
                }
            }
            n += 1;
            if n % DEFRAG_BATCH == 0 {
                wtx.commit()?;
                wtx = begin()?;
            }
        }
        wtx.set_sequence(&name, at.sequence(&name)?.unwrap_or(0))?;
    }
    wtx.commit()
}

fn write_image(tx: &ReadTx, out: &mut dyn Write, sha: bool, path: &Path) -> Result<u64> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut emit = |b: &[u8]| -> Result<()> {
        if sha {
            hasher.update(b);
        }
        out.write_all(b).map_err(io(path, "write snapshot"))
    };
    let meta = tx.meta;
    let ps = meta.page_size as usize;
    // Both metas describe this version; the second one a txid lower so the first wins.
    emit(&meta.encode(0))?;
    let older = super::meta::Meta {
        txid: meta.txid.saturating_sub(1),
        ..meta
    };
    emit(&older.encode(1))?;
    const CHUNK: usize = 1 << 20;
    let mut off = 2 * ps;
    let end = meta.pgid as usize * ps;
    while off < end {
        let n = CHUNK.min(end - off);
        emit(&tx.map[off..off + n])?;
        off += n;
    }
    let mut total = end as u64;
    if sha {
        let digest = hasher.finalize();
        out.write_all(&digest).map_err(io(path, "write snapshot"))?;
        total += digest.len() as u64;
    }
    Ok(total)
}
