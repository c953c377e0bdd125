// Opening, creating and committing the db file: meta selection, freelist load (or rebuild when
// etcd did not persist it), reader tracking for page reuse, file growth and remapping.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use memmap2::Mmap;

use super::dirty::Dirty;
use super::error::{Error, Result, corrupt, io};
use super::freelist::{self, Freelist};
use super::meta::{Meta, PGID_NO_FREELIST};
use super::node::{self, Child, Ctx, Node, Spill};
use super::page::{BUCKET_LEAF_FLAG, MAX_DEPTH, NodePage, page_bytes, u64_at, write_leaf};
use super::tx::{ReadTx, WBucket, WriteTx, tree_ctx};

pub const DEFAULT_PAGE_SIZE: u32 = 4096;

/// Sees every write and sync the db makes: a test hook for simulating power loss (keep what
/// was synced, drop or tear the rest). Writes still go to the file as usual.
pub trait IoObserver: Send + Sync {
    fn on_write(&self, offset: u64, data: &[u8]);
    fn on_set_len(&self, len: u64);
    fn on_sync(&self);
}

#[derive(Clone)]
pub struct Options {
    /// Open without writing anything, ever (etcdutl, snapshot status).
    pub read_only: bool,
    /// Write the freelist page at each commit (bbolt's default). etcd runs with
    /// NoFreelistSync (false), which makes commits cheaper and opens slower.
    pub persist_freelist: bool,
    /// Skip fdatasync (etcd's --unsafe-no-fsync); a crash may then lose or corrupt commits.
    pub no_sync: bool,
    pub io_observer: Option<Arc<dyn IoObserver>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            read_only: false,
            persist_freelist: true,
            no_sync: false,
            io_observer: None,
        }
    }
}

pub(crate) struct Writer {
    pub file: File,
    pub file_len: u64,
    pub freelist: Freelist,
    pub poisoned: Option<String>,
    /// What write transactions change while an online defrag runs (None otherwise).
    pub dirty: Option<Dirty>,
}

pub(crate) struct View {
    pub meta: Meta,
    pub map: Arc<Mmap>,
    /// Open readers by the txid they read.
    pub readers: BTreeMap<u64, usize>,
    /// Free and pending pages as of the latest commit (0 when opened read-only).
    pub free_pages: u64,
}

pub(crate) struct Shared {
    pub path: PathBuf,
    pub opts: Options,
    pub writer: Mutex<Writer>,
    pub view: Mutex<View>,
    /// Held for a whole defrag: one at a time, as they share `Writer::dirty`.
    pub defrag: Mutex<()>,
}

/// A handle on one bbolt-format db file; clones share it. See the module docs.
#[derive(Clone)]
pub struct Db {
    pub(crate) shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the file inconsistent (commits are atomic on
    // disk), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn end_read(&self, txid: u64) {
        let mut v = lock(&self.view);
        if let Some(n) = v.readers.get_mut(&txid) {
            *n -= 1;
            if *n == 0 {
                v.readers.remove(&txid);
            }
        }
    }
}

/// Drops this process's resident pages of `map` (see `Db::release_resident`).
pub(crate) fn release_map(map: &Mmap, path: &Path) {
    // Safety: the map is a shared, read-only file mapping, so dropping its pages loses
    // nothing: a later read faults the same bytes back in from the page cache or the file,
    // and readers holding slices of it see the same contents.
    if let Err(e) = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) } {
        tracing::debug!(path = %path.display(), error = %e, "madvise(DONTNEED) on the db map");
    }
}

/// Maps the file read-only: exactly its length when `reserve` is 0, else `reserve` bytes of
/// address space, reaching past the end of the file (see `map_reserve`).
pub(crate) fn map_file(file: &File, path: &Path, reserve: u64) -> Result<Mmap> {
    let mut opts = memmap2::MmapOptions::new();
    if reserve > 0 {
        let len = usize::try_from(reserve).map_err(|_| Error::Io {
            path: path.to_path_buf(),
            op: "mmap",
            source: std::io::Error::other(format!("a map of {reserve} bytes")),
        })?;
        opts.len(len);
    }
    // Safety: the map is read-only and the file is only ever grown while mapped (never
    // truncated); pages a reader can reach are not rewritten while it lives (freelist rules),
    // and other processes are kept out by the flock taken at open. A map longer than the file
    // is only read below the high-water mark of a published meta, which the file always
    // covers (commit grows the file before it publishes), so the part past the end of the
    // file, where an access would fault, is never touched.
    unsafe { opts.map(file) }.map_err(io(path, "mmap"))
}

/// Address space to map for a writable db whose image needs `needed` bytes. The file grows by
/// exactly what each commit needs (as etcd's does: its file length is its high-water mark),
/// so the map reaches ahead of the file and a commit remaps only when the image outgrows it:
/// doubling up to 1 GiB, then 1 GiB steps (etcd maps 10 GiB ahead up front).
fn map_reserve(needed: u64) -> u64 {
    const MIN: u64 = 64 << 20;
    const STEP: u64 = 1 << 30;
    if needed < STEP {
        (needed * 2).next_power_of_two().clamp(MIN, STEP)
    } else {
        (needed / STEP + 2) * STEP
    }
}

fn flock(file: &File, path: &Path, exclusive: bool) -> Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    // Safety: flock on a file descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
    if rc != 0 {
        return Err(Error::Io {
            path: path.to_path_buf(),
            op: "lock (is another process using this db?)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The image of a fresh db: two metas, an empty freelist, an empty root leaf.
pub(crate) fn init_image(page_size: u32) -> Vec<u8> {
    let ps = page_size as usize;
    let mut buf = vec![0u8; ps * 4];
    for txid in 0..2u64 {
        let m = Meta {
            page_size,
            flags: 0,
            root: 3,
            sequence: 0,
            freelist: 2,
            pgid: 4,
            txid,
        };
        buf[txid as usize * ps..(txid as usize + 1) * ps].copy_from_slice(&m.encode(txid));
    }
    freelist::encode(&mut buf[2 * ps..3 * ps], 2, 0, &[]);
    write_leaf(&mut buf[3 * ps..4 * ps], 3, 0, std::iter::empty());
    buf
}

/// Picks the valid meta with the higher txid, or says why neither is usable.
fn read_meta(file: &File, path: &Path, len: u64) -> Result<Meta> {
    let not_bbolt = |reason: String| Error::NotBbolt {
        path: path.to_path_buf(),
        reason,
    };
    if len < 1024 {
        return Err(not_bbolt(format!("file of {len} bytes is too short")));
    }
    let mut first = vec![0u8; (len as usize).min(DEFAULT_PAGE_SIZE as usize)];
    file.read_exact_at(&mut first, 0)
        .map_err(io(path, "read meta 0"))?;
    let m0 = Meta::decode(&first);
    let ps = m0
        .as_ref()
        .map(|m| m.page_size)
        .unwrap_or(DEFAULT_PAGE_SIZE) as u64;
    let m1 = if len >= 2 * ps {
        let mut second = vec![0u8; ps as usize];
        file.read_exact_at(&mut second, ps)
            .map_err(io(path, "read meta 1"))?;
        Meta::decode(&second).and_then(|m| {
            if m.page_size as u64 != ps {
                Err(format!("page size {} differs from meta 0", m.page_size))
            } else {
                Ok(m)
            }
        })
    } else {
        Err("file too short for meta 1".to_string())
    };
    let meta = match (m0, m1) {
        (Ok(a), Ok(b)) => {
            if a.txid >= b.txid {
                a
            } else {
                b
            }
        }
        (Ok(a), Err(_)) => a,
        (Err(_), Ok(b)) => b,
        (Err(e0), Err(e1)) => {
            if e0.starts_with("bad magic") || e0.contains("not a meta page") {
                return Err(not_bbolt(format!("meta 0: {e0}; meta 1: {e1}")));
            }
            return Err(Error::BothMetasInvalid {
                path: path.to_path_buf(),
                meta0: e0,
                meta1: e1,
            });
        }
    };
    let need = meta.pgid.saturating_mul(meta.page_size as u64);
    if len < need {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            len,
            need,
        });
    }
    Ok(meta)
}

/// Rebuilds the freelist from what is reachable (for files written with NoFreelistSync).
fn rebuild_freelist(ctx: Ctx<'_>, meta: &Meta) -> Result<Freelist> {
    let mut used = vec![false; meta.pgid as usize];
    used[0] = true;
    used[1] = true;
    mark_tree(ctx, meta.root, &mut used, 0)?;
    Ok(Freelist::from_ids(
        used.iter()
            .enumerate()
            .filter(|(_, u)| !**u)
            .map(|(i, _)| i as u64),
    ))
}

/// Marks every page of the tree at `pgid`, and of the buckets it holds, as used.
pub(crate) fn mark_tree(ctx: Ctx<'_>, pgid: u64, used: &mut [bool], depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(corrupt(
            pgid,
            format!("tree deeper than {MAX_DEPTH} levels"),
        ));
    }
    let bytes = page_bytes(ctx.map, ctx.page_size, ctx.hwm, pgid)?;
    let n = (bytes.len() / ctx.page_size) as u64;
    for id in pgid..pgid + n {
        if used[id as usize] {
            return Err(corrupt(pgid, format!("page {id} is reachable twice")));
        }
        used[id as usize] = true;
    }
    let p = NodePage::parse(pgid, bytes)?;
    for i in 0..p.count {
        if p.leaf {
            let (flags, _, v) = p.leaf_elem(i)?;
            // Nested buckets (bbolt allows them at any level) own pages too.
            if flags & BUCKET_LEAF_FLAG != 0 {
                if v.len() < 16 {
                    return Err(corrupt(
                        pgid,
                        format!("bucket value {i} is {} bytes", v.len()),
                    ));
                }
                let root = u64_at(v, 0);
                if root != 0 {
                    mark_tree(ctx, root, used, depth + 1)?;
                }
            }
        } else {
            let (_, child) = p.branch_elem(i)?;
            if child < 2 {
                return Err(corrupt(
                    pgid,
                    format!("branch element {i} points to meta page {child}"),
                ));
            }
            mark_tree(ctx, child, used, depth + 1)?;
        }
    }
    Ok(())
}

impl Db {
    /// Opens (or creates, unless read-only) the db at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Db> {
        Db::open_with(path, Options::default())
    }

    /// Opens an existing db without ever writing to it.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Db> {
        Db::open_with(
            path,
            Options {
                read_only: true,
                ..Options::default()
            },
        )
    }

    pub fn open_with(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let path = path.as_ref().to_path_buf();
        let file = if opts.read_only {
            File::open(&path).map_err(io(&path, "open"))?
        } else {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io(&path, "open"))?
        };
        flock(&file, &path, !opts.read_only)?;
        let mut len = file.metadata().map_err(io(&path, "stat"))?.len();
        if len == 0 && !opts.read_only {
            let img = init_image(DEFAULT_PAGE_SIZE);
            file.write_all_at(&img, 0)
                .map_err(io(&path, "write new db"))?;
            file.sync_all().map_err(io(&path, "fsync new db"))?;
            if let Some(dir) = path.parent() {
                crate::backend::defrag::sync_dir(dir)?;
            }
            len = img.len() as u64;
        }
        let meta = read_meta(&file, &path, len)?;
        let reserve = if opts.read_only { 0 } else { map_reserve(len) };
        let map = map_file(&file, &path, reserve)?;
        let ctx = tree_ctx(&map, &meta);
        let mut forget_freelist = false;
        let freelist = if opts.read_only {
            Freelist::default()
        } else if meta.freelist == PGID_NO_FREELIST {
            rebuild_freelist(ctx, &meta)?
        } else {
            let recorded = page_bytes(&map, meta.page_size as usize, meta.pgid, meta.freelist)
                .and_then(|bytes| freelist::decode(meta.freelist, bytes, meta.pgid));
            match recorded {
                Ok(ids) => Freelist::from_ids(ids),
                Err(e) => {
                    // What is reachable is the truth; the freelist is only a cache of it. The
                    // broken page is unreachable, so the rebuild counts it free; forget it so
                    // the next commit does not free it a second time.
                    tracing::warn!(path = %path.display(), error = %e, "freelist unreadable, rebuilding it from the trees");
                    let rebuilt = rebuild_freelist(ctx, &meta)?;
                    forget_freelist = true;
                    rebuilt
                }
            }
        };
        let free_pages = freelist.len() as u64;
        let mut meta = meta;
        if forget_freelist {
            meta.freelist = PGID_NO_FREELIST;
        }
        Ok(Db {
            shared: Arc::new(Shared {
                path,
                opts,
                writer: Mutex::new(Writer {
                    file,
                    file_len: len,
                    freelist,
                    poisoned: None,
                    dirty: None,
                }),
                view: Mutex::new(View {
                    meta,
                    map: Arc::new(map),
                    readers: BTreeMap::new(),
                    free_pages,
                }),
                defrag: Mutex::new(()),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Starts a read transaction on the latest committed version.
    pub fn begin_read(&self) -> ReadTx {
        let mut v = lock(&self.shared.view);
        let meta = v.meta;
        *v.readers.entry(meta.txid).or_insert(0) += 1;
        ReadTx {
            shared: self.shared.clone(),
            map: v.map.clone(),
            meta,
        }
    }

    /// Starts the write transaction, waiting for the current one to finish.
    pub fn begin_write(&self) -> Result<WriteTx<'_>> {
        if self.shared.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let mut writer = lock(&self.shared.writer);
        if let Some(why) = &writer.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        let (meta, map, min_reader) = {
            let v = lock(&self.shared.view);
            let min = v.readers.keys().next().copied().unwrap_or(u64::MAX);
            (v.meta, v.map.clone(), min.min(v.meta.txid))
        };
        // The txid comes from the file: a damaged meta can leave no number for the commit.
        if meta.txid == u64::MAX {
            return Err(Error::TxidExhausted {
                path: self.shared.path.clone(),
                txid: meta.txid,
            });
        }
        writer.freelist.release_up_to(min_reader);
        Ok(WriteTx {
            shared: &self.shared,
            writer,
            map,
            meta,
            buckets: BTreeMap::new(),
            freed: Vec::new(),
            fill: 0.5,
        })
    }

    /// Rewrites the current meta with a higher txid (defrag keeps txids increasing across the
    /// file swap), then fsyncs.
    pub(crate) fn bump_txid(&self, txid: u64) -> Result<()> {
        let shared = &self.shared;
        let w = lock(&shared.writer);
        let mut meta = lock(&shared.view).meta;
        if txid <= meta.txid {
            return Ok(());
        }
        // Never overwrite the current meta in place: a torn write must leave one valid meta.
        meta.txid = if txid % 2 == meta.txid % 2 {
            txid.checked_add(1).ok_or_else(|| Error::TxidExhausted {
                path: shared.path.clone(),
                txid,
            })?
        } else {
            txid
        };
        let txid = meta.txid;
        let ps = meta.page_size as u64;
        let page = meta.encode(txid % 2);
        w.file
            .write_all_at(&page, (txid % 2) * ps)
            .map_err(io(&shared.path, "write meta"))?;
        sync(&w, &shared.opts, &shared.path)?;
        lock(&shared.view).meta = meta;
        Ok(())
    }

    /// The meta of the latest commit (txid, high-water mark, ...).
    pub(crate) fn meta(&self) -> Meta {
        lock(&self.shared.view).meta
    }

    /// Bytes of the latest committed db image (high-water mark × page size): etcd's backend
    /// Size. The file itself may be longer (growth slack).
    pub fn size(&self) -> u64 {
        let m = self.meta();
        m.pgid * m.page_size as u64
    }

    /// `size()` less the free pages: etcd's SizeInUse (equal to `size()` when read-only).
    pub fn size_in_use(&self) -> u64 {
        let v = lock(&self.shared.view);
        v.meta.pgid.saturating_sub(v.free_pages) * v.meta.page_size as u64
    }

    /// Read transactions open now (etcd_mvcc_db_open_read_transactions).
    pub fn open_readers(&self) -> usize {
        lock(&self.shared.view).readers.values().sum()
    }

    /// The txid of the latest commit.
    pub fn txid(&self) -> u64 {
        self.meta().txid
    }

    /// Unmaps from this process the db pages it has touched (a whole scan, as the index
    /// rebuild at start does): the page cache keeps them and the next access maps a page
    /// again, so nothing changes for readers but the resident set, which then holds only
    /// what requests touch (issue 19). Best effort: a failure only leaves pages resident.
    pub fn release_resident(&self) {
        let map = lock(&self.shared.view).map.clone();
        release_map(&map, &self.shared.path);
    }
}

/// Grows the file to exactly `needed` bytes, allocating the new blocks now (fallocate) so a
/// full disk fails here, before any page is written, and the pages land in one extent.
fn grow_file(file: &File, from: u64, needed: u64, path: &Path) -> Result<()> {
    let len = (needed - from) as libc::off_t;
    // Safety: fallocate on a descriptor we own.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, from as libc::off_t, len) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        // Filesystems without fallocate: a plain extension is all correctness needs.
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINTR) => {
            file.set_len(needed).map_err(io(path, "grow file"))
        }
        _ => Err(Error::Io {
            path: path.to_path_buf(),
            op: "grow file",
            source: err,
        }),
    }
}

fn write_pages(
    w: &mut Writer,
    opts: &Options,
    path: &Path,
    mut writes: Vec<(u64, Vec<u8>)>,
    ps: u64,
) -> Result<()> {
    writes.sort_unstable_by_key(|(id, _)| *id);
    let mut i = 0;
    while i < writes.len() {
        // Coalesce runs of adjacent pages into one pwrite.
        let start = writes[i].0;
        let mut end = start + writes[i].1.len() as u64 / ps;
        let mut j = i + 1;
        while j < writes.len() && writes[j].0 == end {
            end += writes[j].1.len() as u64 / ps;
            j += 1;
        }
        let bufs: Vec<&[u8]> = writes[i..j].iter().map(|(_, b)| &b[..]).collect();
        pwritev_all(&w.file, bufs, start * ps).map_err(io(path, "write pages"))?;
        if let Some(o) = &opts.io_observer {
            for (id, b) in &writes[i..j] {
                o.on_write(id * ps, b);
            }
        }
        i = j;
    }
    Ok(())
}

/// Writes the buffers back to back at `off` with pwritev (no copy into one buffer), resuming
/// after short writes.
fn pwritev_all(file: &File, mut bufs: Vec<&[u8]>, mut off: u64) -> std::io::Result<()> {
    const IOV_MAX: usize = 1024;
    let mut idx = 0;
    while idx < bufs.len() {
        let end = (idx + IOV_MAX).min(bufs.len());
        let iov: Vec<libc::iovec> = bufs[idx..end]
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // Safety: every iovec points into a live buffer borrowed for this call, the count
        // matches the array, and the descriptor is ours.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                off as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let mut n = n as usize;
        off += n as u64;
        while n > 0 && idx < bufs.len() {
            let l = bufs[idx].len();
            if n >= l {
                n -= l;
                idx += 1;
            } else {
                bufs[idx] = &bufs[idx][n..];
                n = 0;
            }
        }
    }
    Ok(())
}

fn sync(w: &Writer, opts: &Options, path: &Path) -> Result<()> {
    if !opts.no_sync {
        w.file.sync_data().map_err(io(path, "fdatasync"))?;
    }
    if let Some(o) = &opts.io_observer {
        o.on_sync();
    }
    Ok(())
}

pub(crate) fn commit(mut tx: WriteTx<'_>) -> Result<()> {
    let shared = tx.shared;
    let path = &shared.path;
    let opts = &shared.opts;
    let ps = tx.meta.page_size as usize;
    let txid = tx.meta.txid + 1;
    let map = tx.map.clone();
    let ctx = tree_ctx(&map, &tx.meta);
    let buckets = std::mem::take(&mut tx.buckets);
    let mut freed = std::mem::take(&mut tx.freed);
    let fill = tx.fill;
    let w = &mut *tx.writer;
    let mut spill = Spill {
        page_size: ps,
        fill,
        freelist: &mut w.freelist,
        hwm: tx.meta.pgid,
        allocated: Vec::new(),
        writes: Vec::new(),
    };
    let result = (|| -> Result<Meta> {
        let mut root = Child::Page(tx.meta.root);
        for (name, b) in buckets {
            let WBucket {
                root: broot,
                seq,
                existed,
                fill: bucket_fill,
            } = b;
            let Some(mut broot) = broot else {
                if existed {
                    node::delete(&mut root, &ctx, &mut freed, &name, BUCKET_LEAF_FLAG)?;
                }
                continue;
            };
            node::rebalance(&mut broot, &ctx, &mut freed)?;
            let mut value = Vec::with_capacity(16);
            let inline = match &broot {
                Child::Mem(n) => match &**n {
                    Node::Leaf(es)
                        if 16 + n.size() <= ps / 4
                            && es.iter().all(|e| !node::is_bucket(e.flags)) =>
                    {
                        Some(Node::leaf_image(es))
                    }
                    _ => None,
                },
                Child::Page(_) => None,
            };
            match inline {
                Some(img) => {
                    value.extend_from_slice(&0u64.to_le_bytes());
                    value.extend_from_slice(&seq.to_le_bytes());
                    value.extend_from_slice(&img);
                }
                None => {
                    spill.fill = bucket_fill.unwrap_or(fill);
                    let p = spill.spill_root(broot)?;
                    spill.fill = fill;
                    value.extend_from_slice(&p.to_le_bytes());
                    value.extend_from_slice(&seq.to_le_bytes());
                }
            }
            node::put(&mut root, &ctx, &mut freed, &name, &value, BUCKET_LEAF_FLAG)?;
        }
        node::rebalance(&mut root, &ctx, &mut freed)?;
        let new_root = spill.spill_root(root)?;
        if tx.meta.freelist != PGID_NO_FREELIST {
            let bytes = page_bytes(ctx.map, ps, tx.meta.pgid, tx.meta.freelist)?;
            freed.push((tx.meta.freelist, (bytes.len() / ps) as u64));
        }
        spill.freelist.check_frees(&mut freed)?;
        for &(id, n) in &freed {
            spill.freelist.free_run(txid, id, n);
        }
        let fl_id = if opts.persist_freelist {
            // Free plus pending: what all_ids below lists.
            let n = spill.freelist.len();
            let npages = freelist::page_bytes_for(n).div_ceil(ps) as u64;
            let id = spill.alloc(npages);
            let ids = spill.freelist.all_ids();
            let mut buf = vec![0u8; npages as usize * ps];
            freelist::encode(&mut buf, id, (npages - 1) as u32, &ids);
            spill.writes.push((id, buf));
            id
        } else {
            PGID_NO_FREELIST
        };
        Ok(Meta {
            root: new_root,
            freelist: fl_id,
            pgid: spill.hwm,
            txid,
            ..tx.meta
        })
    })();
    let allocated = std::mem::take(&mut spill.allocated);
    let writes = std::mem::take(&mut spill.writes);
    let new_meta = match result {
        Ok(m) => m,
        Err(e) => {
            w.freelist.rollback(txid, &allocated, tx.meta.pgid);
            return Err(e);
        }
    };
    // Data pages first, made durable before the meta that points at them.
    let data = (|| -> Result<()> {
        // The file ends at the high-water mark, as etcd's does: no growth slack (which cost
        // up to 16 MiB of file length beyond the data, 1.34x etcd's file for 100k keys).
        let needed = new_meta.pgid * ps as u64;
        if needed > w.file_len {
            grow_file(&w.file, w.file_len, needed, path)?;
            if let Some(o) = &opts.io_observer {
                o.on_set_len(needed);
            }
            w.file_len = needed;
        }
        write_pages(w, opts, path, writes, ps as u64)?;
        sync(w, opts, path)
    })();
    if let Err(e) = data {
        w.freelist.rollback(txid, &allocated, tx.meta.pgid);
        return Err(e);
    }
    let meta_page = new_meta.encode(txid % 2);
    let meta_res = (|| -> Result<()> {
        w.file
            .write_all_at(&meta_page, (txid % 2) * ps as u64)
            .map_err(io(path, "write meta"))?;
        if let Some(o) = &opts.io_observer {
            o.on_write((txid % 2) * ps as u64, &meta_page);
        }
        sync(w, opts, path)
    })();
    if let Err(e) = meta_res {
        // The meta may or may not be on disk now: only a reopen can tell which version won.
        w.poisoned = Some(e.to_string());
        return Err(e);
    }
    let needed = new_meta.pgid * ps as u64;
    let remap = {
        let v = lock(&shared.view);
        needed > v.map.len() as u64
    };
    let new_map = if remap {
        Some(Arc::new(
            map_file(&w.file, path, map_reserve(needed)).inspect_err(|e| {
                w.poisoned = Some(e.to_string());
            })?,
        ))
    } else {
        None
    };
    let free_pages = w.freelist.len() as u64;
    let mut v = lock(&shared.view);
    v.meta = new_meta;
    v.free_pages = free_pages;
    if let Some(m) = new_map {
        v.map = m;
    }
    Ok(())
}
