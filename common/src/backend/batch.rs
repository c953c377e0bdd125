// etcd's batching layer: writes go to a pending buffer that readers see at once, and are
// committed as one write txn every interval or after N ops, or on demand (snapshot, defrag,
// shutdown).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::db::Db;
use super::error::{Error, Result, show};
use super::page::{MAX_KEY_SIZE, MAX_VALUE_SIZE};
use super::tx::ReadTxn;

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::KeyEmpty);
    }
    if key.len() > MAX_KEY_SIZE {
        return Err(Error::KeyTooLarge(key.len()));
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
pub struct BatchConfig {
    /// etcd's --backend-batch-interval.
    pub interval: Duration,
    /// etcd's --backend-batch-limit.
    pub limit: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            interval: Duration::from_millis(100),
            limit: 10_000,
        }
    }
}

/// One bucket's uncommitted writes: key → Some(value) or None (deleted).
type BucketWrites = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Uncommitted writes, per bucket.
#[derive(Default)]
struct Buffer {
    created: Vec<Vec<u8>>,
    /// Buckets written with put_seq (split full at commit, `tx::SEQ_FILL`).
    seq: BTreeSet<Vec<u8>>,
    keys: BTreeMap<Vec<u8>, BucketWrites>,
    ops: usize,
}

#[derive(Default)]
struct Buffers {
    pending: Buffer,
    /// The buffer being committed right now: still visible until the commit is done.
    committing: Option<Arc<Buffer>>,
    /// Buckets known to exist (committed or pending), so bad writes fail at once rather than
    /// at a background commit.
    known: BTreeSet<Vec<u8>>,
}

struct Inner {
    /// Behind a lock only so a follower can swap in the leader's image (`replace_db`).
    db: RwLock<Db>,
    cfg: BatchConfig,
    bufs: RwLock<Buffers>,
    commit_lock: Mutex<()>,
    /// Held by a defrag and by whoever replaces the db file from outside (`hold_file`), so a
    /// defrag never renames its copy over a file installed meanwhile.
    file: Mutex<()>,
    stop: Mutex<bool>,
    wake: Condvar,
    last_error: Mutex<Option<String>>,
}

/// The batching backend. Cloning is not offered; share it in an `Arc`.
pub struct Batch {
    inner: Arc<Inner>,
    ticker: Option<JoinHandle<()>>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn db(&self) -> Db {
        read(&self.db).clone()
    }

    fn commit(&self) -> Result<()> {
        let _one = lock(&self.commit_lock);
        let buf = {
            let mut b = write(&self.bufs);
            if b.pending.ops == 0 && b.pending.created.is_empty() {
                return Ok(());
            }
            let buf = Arc::new(std::mem::take(&mut b.pending));
            b.committing = Some(buf.clone());
            buf
        };
        let start = std::time::Instant::now();
        let res = (|| {
            let db = self.db();
            let mut tx = db.begin_write()?;
            for name in &buf.created {
                tx.create_bucket_if_not_exists(name)?;
            }
            let mut writes = Vec::new();
            for (bucket, keys) in &buf.keys {
                writes.clear();
                writes.extend(keys.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
                tx.apply_sorted(bucket, &writes)?;
                if buf.seq.contains(bucket) {
                    tx.mark_sequential(bucket);
                }
            }
            tx.commit()
        })();
        if res.is_ok() {
            crate::observe::backend_commit(start.elapsed());
        }
        let mut b = write(&self.bufs);
        if res.is_err() {
            // Keep the writes: put them back under anything written since.
            let mut merged = Arc::try_unwrap(buf).unwrap_or_else(|a| Buffer {
                created: a.created.clone(),
                seq: a.seq.clone(),
                keys: a.keys.clone(),
                ops: a.ops,
            });
            let newer = std::mem::take(&mut b.pending);
            merged.created.extend(newer.created);
            merged.seq.extend(newer.seq);
            for (bucket, keys) in newer.keys {
                merged.keys.entry(bucket).or_default().extend(keys);
            }
            merged.ops += newer.ops;
            b.pending = merged;
        }
        b.committing = None;
        res
    }
}

impl Batch {
    /// Wraps `db`; a background thread commits every `cfg.interval`.
    pub fn new(db: Db, cfg: BatchConfig) -> Batch {
        let inner = Arc::new(Inner {
            db: RwLock::new(db),
            cfg,
            bufs: RwLock::new(Buffers::default()),
            commit_lock: Mutex::new(()),
            file: Mutex::new(()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            last_error: Mutex::new(None),
        });
        let t = inner.clone();
        let ticker = std::thread::Builder::new()
            .name("backend-batch".into())
            .spawn(move || {
                let mut stop = lock(&t.stop);
                while !*stop {
                    stop = t
                        .wake
                        .wait_timeout(stop, t.cfg.interval)
                        .map(|r| r.0)
                        .unwrap_or_else(|e| e.into_inner().0);
                    if *stop {
                        break;
                    }
                    drop(stop);
                    if let Err(e) = t.commit() {
                        tracing::error!(error = %e, "backend batch commit failed");
                        *lock(&t.last_error) = Some(e.to_string());
                    }
                    stop = lock(&t.stop);
                }
            })
            .ok();
        Batch { inner, ticker }
    }

    pub fn db(&self) -> Db {
        self.inner.db()
    }

    /// Drops every pending write and continues over `db` instead (a follower installing the
    /// leader's snapshot image). Readers and writers wait for the swap; readers that already
    /// hold the old file's transactions finish on it.
    pub fn replace_db(&self, db: Db) {
        let _one = lock(&self.inner.commit_lock);
        let mut b = write(&self.inner.bufs);
        *b = Buffers::default();
        *write(&self.inner.db) = db;
    }

    /// The last background commit error, if any (the writes stay pending and are retried).
    pub fn last_error(&self) -> Option<String> {
        lock(&self.inner.last_error).clone()
    }

    /// Whether `more` writes would bring the pending ones to the batch limit, where the
    /// writer that reaches it commits at once (an fdatasync of the db in its own thread).
    pub fn commit_due(&self, more: usize) -> bool {
        read(&self.inner.bufs).pending.ops + more >= self.inner.cfg.limit
    }

    fn after_op(&self, ops: usize) -> Result<()> {
        if ops >= self.inner.cfg.limit {
            self.inner.commit()?;
        }
        Ok(())
    }

    pub fn create_bucket(&self, name: &[u8]) -> Result<()> {
        check_key(name)?;
        let mut b = write(&self.inner.bufs);
        b.known.insert(name.to_vec());
        b.pending.created.push(name.to_vec());
        b.pending.keys.entry(name.to_vec()).or_default();
        Ok(())
    }

    /// Refuses writes that the commit would refuse, while the caller can still see the error.
    fn validate(&self, b: &mut Buffers, bucket: &[u8], key: &[u8], value_len: usize) -> Result<()> {
        check_key(key)?;
        if value_len > MAX_VALUE_SIZE {
            return Err(Error::ValueTooLarge(value_len));
        }
        if !b.known.contains(bucket) {
            if !self.inner.db().begin_read().bucket_exists(bucket)? {
                return Err(Error::BucketNotFound(show(bucket)));
            }
            b.known.insert(bucket.to_vec());
        }
        Ok(())
    }

    pub fn put(&self, bucket: &[u8], key: &[u8], value: &[u8]) -> Result<()> {
        let ops = {
            let mut b = write(&self.inner.bufs);
            self.validate(&mut b, bucket, key, value.len())?;
            b.pending
                .keys
                .entry(bucket.to_vec())
                .or_default()
                .insert(key.to_vec(), Some(value.to_vec()));
            b.pending.ops += 1;
            b.pending.ops
        };
        self.after_op(ops)
    }

    /// etcd's UnsafeSeqPut: a put of keys in increasing order (revisions); the bucket's pages
    /// are split full at commit.
    pub fn put_seq(&self, bucket: &[u8], key: &[u8], value: &[u8]) -> Result<()> {
        {
            let mut b = write(&self.inner.bufs);
            self.validate(&mut b, bucket, key, value.len())?;
            b.pending.seq.insert(bucket.to_vec());
        }
        self.put(bucket, key, value)
    }

    pub fn delete(&self, bucket: &[u8], key: &[u8]) -> Result<()> {
        let ops = {
            let mut b = write(&self.inner.bufs);
            self.validate(&mut b, bucket, key, 0)?;
            b.pending
                .keys
                .entry(bucket.to_vec())
                .or_default()
                .insert(key.to_vec(), None);
            b.pending.ops += 1;
            b.pending.ops
        };
        self.after_op(ops)
    }

    /// Commits everything pending now (before a snapshot, defrag or shutdown).
    pub fn force_commit(&self) -> Result<()> {
        self.inner.commit()
    }

    fn bucket_known(&self, b: &Buffers, tx: &impl ReadTxn, bucket: &[u8]) -> Result<bool> {
        Ok(b.pending.keys.contains_key(bucket)
            || b.committing
                .as_ref()
                .is_some_and(|c| c.keys.contains_key(bucket))
            || tx.bucket_exists(bucket)?)
    }

    /// Reads `key` including pending writes.
    pub fn get(&self, bucket: &[u8], key: &[u8]) -> Result<Option<Vec<u8>>> {
        let b = read(&self.inner.bufs);
        self.get_in(&b, bucket, key)
    }

    fn get_in(&self, b: &Buffers, bucket: &[u8], key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_over(b, None, bucket, key)
    }

    /// `get_in` with `top` (a write group's own writes) over the pending writes.
    fn get_over(
        &self,
        b: &Buffers,
        top: Option<&Buffer>,
        bucket: &[u8],
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        for buf in [top, Some(&b.pending), b.committing.as_deref()]
            .into_iter()
            .flatten()
        {
            if let Some(v) = buf.keys.get(bucket).and_then(|m| m.get(key)) {
                return Ok(v.clone());
            }
        }
        let tx = self.inner.db().begin_read();
        if !tx.bucket_exists(bucket)? {
            let in_top = top.is_some_and(|t| t.keys.contains_key(bucket));
            return if in_top || self.bucket_known(b, &tx, bucket)? {
                Ok(None)
            } else {
                Err(Error::BucketNotFound(show(bucket)))
            };
        }
        Ok(tx.get(bucket, key)?.map(<[u8]>::to_vec))
    }

    /// Reads many keys of one bucket, pending writes included, with one look at the buffers
    /// and one read transaction: what a Range of many keys needs, without a transaction per
    /// key. Keep `keys` short (a few hundred): writers wait while this runs.
    pub fn get_many(&self, bucket: &[u8], keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let b = read(&self.inner.bufs);
        let tx = self.inner.db().begin_read();
        let committed = if tx.bucket_exists(bucket)? {
            Some(tx.bucket(bucket)?)
        } else if self.bucket_known(&b, &tx, bucket)? {
            None
        } else {
            return Err(Error::BucketNotFound(show(bucket)));
        };
        let pending = b.pending.keys.get(bucket);
        let committing = b.committing.as_ref().and_then(|c| c.keys.get(bucket));
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let buffered = pending
                .and_then(|m| m.get(*key))
                .or_else(|| committing.and_then(|m| m.get(*key)));
            out.push(match buffered {
                Some(v) => v.clone(),
                None => match &committed {
                    Some(bucket) => bucket.get(key)?.map(<[u8]>::to_vec),
                    None => None,
                },
            });
        }
        Ok(out)
    }

    /// etcd's UnsafeRange over committed data merged with pending writes: keys in
    /// `[start, end)` (just `start` when `end` is None), at most `limit` (0 = all).
    pub fn range(
        &self,
        bucket: &[u8],
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let b = read(&self.inner.bufs);
        self.range_in(&b, bucket, start, end, limit)
    }

    fn range_in(
        &self,
        b: &Buffers,
        bucket: &[u8],
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.range_over(b, None, bucket, start, end, limit)
    }

    /// `range` without the values: the keys in `[start, end)`, at most `limit` (0 = all).
    /// A compaction reads only which revisions exist, and copying each value out of the
    /// mapped pages would cost more than the scan itself.
    pub fn range_keys(
        &self,
        bucket: &[u8],
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let b = read(&self.inner.bufs);
        self.range_with(&b, None, bucket, start, end, limit, |k, _| k.to_vec())
    }

    /// `range_in` with `top` (a write group's own writes) over the pending writes.
    fn range_over(
        &self,
        b: &Buffers,
        top: Option<&Buffer>,
        bucket: &[u8],
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let Some(end) = end else {
            return Ok(self
                .get_over(b, top, bucket, start)?
                .map(|v| vec![(start.to_vec(), v)])
                .unwrap_or_default());
        };
        self.range_with(b, top, bucket, start, end, limit, |k, v| {
            (k.to_vec(), v.to_vec())
        })
    }

    /// The pairs in `[start, end)` of the committed data under the pending writes (and
    /// `top`), each made into what `take` makes of it.
    #[allow(clippy::too_many_arguments)]
    fn range_with<T>(
        &self,
        b: &Buffers,
        top: Option<&Buffer>,
        bucket: &[u8],
        start: &[u8],
        end: &[u8],
        limit: usize,
        take: impl Fn(&[u8], &[u8]) -> T,
    ) -> Result<Vec<T>> {
        let tx = self.inner.db().begin_read();
        let in_top = top.is_some_and(|t| t.keys.contains_key(bucket));
        if !in_top && !self.bucket_known(b, &tx, bucket)? {
            return Err(Error::BucketNotFound(show(bucket)));
        }
        // Overlay: committing, then pending, then the group's own writes on top.
        let mut overlay: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
        for buf in [b.committing.as_deref(), Some(&b.pending), top]
            .into_iter()
            .flatten()
        {
            if let Some(m) = buf.keys.get(bucket) {
                for (k, v) in m.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end))) {
                    overlay.insert(k, v.as_deref());
                }
            }
        }
        let mut out = Vec::new();
        let mut ov = overlay.into_iter().peekable();
        let mut cur = if tx.bucket_exists(bucket)? {
            Some(tx.cursor(bucket)?)
        } else {
            None
        };
        let mut e = match cur.as_mut() {
            Some(c) => c.seek(start)?,
            None => None,
        };
        let full = |out: &Vec<T>| limit > 0 && out.len() >= limit;
        loop {
            if full(&out) {
                break;
            }
            let committed = e.filter(|(k, _)| *k < end);
            match (committed, ov.peek().copied()) {
                (None, None) => break,
                (Some((k, v)), None) => {
                    out.push(take(k, v));
                    e = cur.as_mut().map(|c| c.next()).transpose()?.flatten();
                }
                (None, Some((ok, ovv))) => {
                    ov.next();
                    if let Some(v) = ovv {
                        out.push(take(ok, v));
                    }
                }
                (Some((k, v)), Some((ok, ovv))) => {
                    if ok <= k {
                        ov.next();
                        if ok == k {
                            e = cur.as_mut().map(|c| c.next()).transpose()?.flatten();
                        }
                        if let Some(v) = ovv {
                            out.push(take(ok, v));
                        }
                    } else {
                        out.push(take(k, v));
                        e = cur.as_mut().map(|c| c.next()).transpose()?.flatten();
                    }
                }
            }
        }
        Ok(out)
    }

    /// Commits what is pending, then streams a snapshot (Maintenance.Snapshot).
    pub fn snapshot(&self, out: &mut dyn std::io::Write, sha256_trailer: bool) -> Result<u64> {
        self.inner.commit()?;
        self.inner.db().snapshot(out, sha256_trailer)
    }

    /// Commits what is pending, then defragments online (`Db::defrag`): reads, writes and
    /// background commits go on; commits wait only for the last, short catch-up round.
    pub fn defrag(&self) -> Result<()> {
        self.defrag_with(&mut |_| {})
    }

    /// `defrag`, reporting its steps (`Db::defrag_with`).
    pub fn defrag_with(&self, progress: &mut dyn FnMut(super::DefragStep)) -> Result<()> {
        let _file = lock(&self.inner.file);
        self.inner.commit()?;
        self.inner.db().defrag_with(progress)
    }

    /// Keeps defrags out while the caller replaces the db file (a follower renaming the
    /// leader's snapshot image over it before `replace_db`); waits for a running defrag.
    pub fn hold_file(&self) -> std::sync::MutexGuard<'_, ()> {
        lock(&self.inner.file)
    }

    /// Starts a group of writes that no commit can split: the group's writes stay its own
    /// until it is `finish`ed (or dropped), when they join the pending writes at once, so a
    /// crash persists all of the group or none of it (etcd applies one raft entry, with its
    /// consistent index, this way). Readers and commits never wait for an open group; reads
    /// through the group see its own writes.
    pub fn begin(&self) -> BatchWrite<'_> {
        BatchWrite {
            batch: self,
            local: Some(Buffer::default()),
        }
    }

    /// Stops the background commits and commits what is pending.
    pub fn close(mut self) -> Result<()> {
        self.stop_ticker();
        self.inner.commit()
    }

    fn stop_ticker(&mut self) {
        *lock(&self.inner.stop) = true;
        self.inner.wake.notify_all();
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.stop_ticker();
        if let Err(e) = self.inner.commit() {
            tracing::error!(error = %e, "backend batch commit at close failed");
        }
    }
}

/// An atomic group of writes to a `Batch` (see `Batch::begin`); reads see the group's writes.
pub struct BatchWrite<'a> {
    batch: &'a Batch,
    /// The group's writes, until `finish` (or drop) hands them to the batch.
    local: Option<Buffer>,
}

impl BatchWrite<'_> {
    fn local(&mut self) -> &mut Buffer {
        // Only `finish`/drop take the buffer out, and both consume the group.
        self.local.as_mut().unwrap_or_else(|| unreachable!())
    }

    pub fn create_bucket(&mut self, name: &[u8]) {
        let b = self.local();
        b.created.push(name.to_vec());
        b.keys.entry(name.to_vec()).or_default();
    }

    pub fn put(&mut self, bucket: &[u8], key: &[u8], value: &[u8]) {
        let b = self.local();
        b.keys
            .entry(bucket.to_vec())
            .or_default()
            .insert(key.to_vec(), Some(value.to_vec()));
        b.ops += 1;
    }

    /// etcd's UnsafeSeqPut inside a group: keys in increasing order (revisions); the bucket's
    /// pages are split full at commit.
    pub fn put_seq(&mut self, bucket: &[u8], key: &[u8], value: &[u8]) {
        if !self.local().seq.contains(bucket) {
            self.local().seq.insert(bucket.to_vec());
        }
        self.put(bucket, key, value);
    }

    pub fn delete(&mut self, bucket: &[u8], key: &[u8]) {
        let b = self.local();
        b.keys
            .entry(bucket.to_vec())
            .or_default()
            .insert(key.to_vec(), None);
        b.ops += 1;
    }

    /// Deletes `keys`, given in increasing order (a compaction's revisions): the keys are
    /// moved in, and into a group with no other write to `bucket` they go in one bulk build
    /// instead of one search per key.
    pub fn delete_sorted(&mut self, bucket: &[u8], keys: Vec<Vec<u8>>) {
        let b = self.local();
        b.ops += keys.len();
        let writes = keys.into_iter().map(|k| (k, None));
        match b.keys.get_mut(bucket) {
            Some(m) if !m.is_empty() => m.extend(writes),
            _ => {
                b.keys.insert(bucket.to_vec(), writes.collect());
            }
        }
    }

    pub fn get(&mut self, bucket: &[u8], key: &[u8]) -> Result<Option<Vec<u8>>> {
        let bufs = read(&self.batch.inner.bufs);
        self.batch.get_over(&bufs, self.local.as_ref(), bucket, key)
    }

    pub fn range(
        &mut self,
        bucket: &[u8],
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let bufs = read(&self.batch.inner.bufs);
        self.batch
            .range_over(&bufs, self.local.as_ref(), bucket, start, end, limit)
    }

    /// Hands the group's writes to the batch in one step: readers and commits see all of
    /// them or none. Returns the pending op count.
    fn merge(&mut self) -> usize {
        let Some(local) = self.local.take() else {
            return 0;
        };
        let mut b = write(&self.batch.inner.bufs);
        b.known.extend(local.created.iter().cloned());
        let p = &mut b.pending;
        p.created.extend(local.created);
        p.seq.extend(local.seq);
        for (bucket, keys) in local.keys {
            match p.keys.get_mut(&bucket) {
                Some(m) => m.extend(keys),
                None => {
                    p.keys.insert(bucket, keys);
                }
            }
        }
        p.ops += local.ops;
        p.ops
    }

    /// Ends the group; commits at once when the pending ops reached the batch limit.
    pub fn finish(mut self) -> Result<()> {
        let ops = self.merge();
        self.batch.after_op(ops)
    }
}

impl Drop for BatchWrite<'_> {
    fn drop(&mut self) {
        self.merge();
    }
}
