// Transactions: read-only snapshots of one committed version, and the single writer whose
// changes live in memory (copy-on-write) until commit writes them as new pages.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, MutexGuard};

use memmap2::Mmap;

use super::db::{Shared, Writer};
use super::error::{Error, Result, corrupt, show};
use super::meta::Meta;
use super::node::{self, Child, ChildRef, Ctx, Cursor, Entry, Node};
/// The visitor [`ReadTxn::for_each`] calls on each key and value.
pub type Visit<'f> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'f;

use super::page::{BUCKET_LEAF_FLAG, MAX_KEY_SIZE, MAX_VALUE_SIZE, NodePage, u64_at};

/// Where a transaction's pages are read from: its map of the file, up to its meta's
/// high-water mark. A free function, so a writer can hold it while it changes its buckets.
pub(crate) fn tree_ctx<'m>(map: &'m Mmap, meta: &Meta) -> Ctx<'m> {
    Ctx {
        map: &map[..],
        page_size: meta.page_size as usize,
        hwm: meta.pgid,
    }
}

/// Read access shared by [`ReadTx`] and [`WriteTx`]. Values borrow the transaction.
pub trait ReadTxn {
    #[doc(hidden)]
    fn ctx(&self) -> Ctx<'_>;
    #[doc(hidden)]
    fn bucket_root(&self, name: &[u8]) -> Result<Option<ChildRef<'_>>>;

    /// Names of all top-level buckets, sorted.
    fn bucket_names(&self) -> Result<Vec<Vec<u8>>>;

    fn bucket_exists(&self, name: &[u8]) -> Result<bool> {
        Ok(self.bucket_root(name)?.is_some())
    }

    /// A handle on one bucket, resolved once: cheaper than naming the bucket on every call in
    /// a hot loop (like redb's open_table).
    fn bucket(&self, name: &[u8]) -> Result<Bucket<'_>> {
        let root = self
            .bucket_root(name)?
            .ok_or_else(|| Error::BucketNotFound(show(name)))?;
        Ok(Bucket {
            ctx: self.ctx(),
            root,
        })
    }

    /// A cursor over `bucket`; the bucket must exist.
    fn cursor(&self, bucket: &[u8]) -> Result<Cursor<'_>> {
        let root = self
            .bucket_root(bucket)?
            .ok_or_else(|| Error::BucketNotFound(show(bucket)))?;
        Ok(Cursor::new(self.ctx(), root))
    }

    fn get(&self, bucket: &[u8], key: &[u8]) -> Result<Option<&[u8]>> {
        let root = self
            .bucket_root(bucket)?
            .ok_or_else(|| Error::BucketNotFound(show(bucket)))?;
        Ok(node::find(self.ctx(), root, key)?.map(|(_, (_, v))| v))
    }

    /// Keys in `[start, end)` (or just `start` when `end` is None), at most `limit` of them
    /// (0 = no limit) — etcd's UnsafeRange.
    fn range(
        &self,
        bucket: &[u8],
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry<'_>>> {
        let mut c = self.cursor(bucket)?;
        let mut out = Vec::new();
        let Some(end) = end else {
            if let Some((k, v)) = c.seek(start)?
                && k == start
            {
                out.push((k, v));
            }
            return Ok(out);
        };
        let mut e = c.seek(start)?;
        while let Some((k, v)) = e {
            if k >= end || (limit > 0 && out.len() >= limit) {
                break;
            }
            out.push((k, v));
            e = c.next()?;
        }
        Ok(out)
    }

    /// Calls `f` on every key and value of `bucket`, in order.
    fn for_each(&self, bucket: &[u8], f: &mut Visit<'_>) -> Result<()> {
        let mut c = self.cursor(bucket)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            f(k, v)?;
            e = c.next()?;
        }
        Ok(())
    }
}

/// One bucket of a transaction, for repeated reads.
#[derive(Clone, Copy)]
pub struct Bucket<'t> {
    ctx: Ctx<'t>,
    root: ChildRef<'t>,
}

impl<'t> Bucket<'t> {
    pub fn get(&self, key: &[u8]) -> Result<Option<&'t [u8]>> {
        Ok(node::find(self.ctx, self.root, key)?.map(|(_, (_, v))| v))
    }

    pub fn cursor(&self) -> Cursor<'t> {
        Cursor::new(self.ctx, self.root)
    }
}

/// Looks `name` up in the root tree of a committed version.
fn committed_bucket<'t>(ctx: Ctx<'t>, root: u64, name: &[u8]) -> Result<Option<ChildRef<'t>>> {
    match node::find(ctx, ChildRef::Page(root), name)? {
        Some((flags, (_, v))) => {
            if flags & BUCKET_LEAF_FLAG == 0 {
                return Err(Error::IncompatibleValue(show(name)));
            }
            decode_bucket(root, v).map(Some)
        }
        None => Ok(None),
    }
}

/// A bucket value: {root pgid, sequence}, then an inline page image when root is 0.
fn decode_bucket(at: u64, v: &[u8]) -> Result<ChildRef<'_>> {
    if v.len() < 16 {
        return Err(corrupt(
            at,
            format!("bucket value of {} bytes, need at least 16", v.len()),
        ));
    }
    match u64_at(v, 0) {
        0 => {
            let p = NodePage::parse(at, &v[16..])?;
            // An inline bucket is one leaf; a branch here would lead into pages the bucket
            // does not own.
            if !p.leaf {
                return Err(corrupt(at, "inline bucket page is not a leaf"));
            }
            Ok(ChildRef::Inline(p))
        }
        p if p < 2 => Err(corrupt(at, format!("bucket root points to meta page {p}"))),
        p => Ok(ChildRef::Page(p)),
    }
}

fn committed_names(ctx: Ctx<'_>, root: u64) -> Result<Vec<Vec<u8>>> {
    let mut c = Cursor::new(ctx, ChildRef::Page(root));
    let mut out = Vec::new();
    let mut e = c.first_raw()?;
    while let Some((flags, (k, _))) = e {
        if flags & BUCKET_LEAF_FLAG != 0 {
            out.push(k.to_vec());
        }
        e = c.next_raw()?;
    }
    Ok(out)
}

/// A consistent read-only view of the db as of its start; commits made later do not show.
/// Any number may be open, on any threads; pages it can see are not reused while it lives.
pub struct ReadTx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) map: Arc<Mmap>,
    pub(crate) meta: Meta,
}

impl ReadTx {
    /// Unmaps the pages this process has read of the file this transaction reads (see
    /// `Db::release_resident`): a whole scan (defrag, snapshot) keeps only what it reads next.
    pub fn release_resident(&self) {
        super::db::release_map(&self.map, &self.shared.path);
    }

    /// The txid of the version this transaction reads.
    pub fn txid(&self) -> u64 {
        self.meta.txid
    }

    /// The bucket's sequence number (bbolt's Bucket.Sequence); None when it does not exist.
    pub fn sequence(&self, bucket: &[u8]) -> Result<Option<u64>> {
        if !self.bucket_exists(bucket)? {
            return Ok(None);
        }
        bucket_seq(self.ctx(), self.meta.root, bucket).map(Some)
    }

    /// Bytes of the db image this transaction sees (high-water mark × page size).
    pub fn size(&self) -> u64 {
        self.meta.pgid * self.meta.page_size as u64
    }
}

impl Drop for ReadTx {
    fn drop(&mut self) {
        self.shared.end_read(self.meta.txid);
    }
}

impl ReadTxn for ReadTx {
    fn ctx(&self) -> Ctx<'_> {
        tree_ctx(&self.map, &self.meta)
    }
    fn bucket_root(&self, name: &[u8]) -> Result<Option<ChildRef<'_>>> {
        committed_bucket(self.ctx(), self.meta.root, name)
    }
    fn bucket_names(&self) -> Result<Vec<Vec<u8>>> {
        committed_names(self.ctx(), self.meta.root)
    }
}

/// How full `put_seq` leaves split pages. etcd asks bbolt for 0.9 on its key bucket, but the
/// room it leaves is never used: keys only arrive after the last one, so no page but the
/// last ever grows again (compaction only removes). Full pages hold one more etcd revision of
/// a 256 B value per page (12, not 11): 8% fewer pages for the same keys. bbolt reads and
/// extends such pages as any other (its own limit for the setting is 1.0).
pub(crate) const SEQ_FILL: f64 = 1.0;

/// A bucket this write txn changed; `root` None means deleted.
pub(crate) struct WBucket {
    pub root: Option<Child>,
    pub seq: u64,
    pub existed: bool,
    /// Fill percent for this bucket's splits (set by sequential puts), else the txn's.
    pub fill: Option<f64>,
}

/// The one write transaction. Changes are visible to itself at once and to others after
/// [`WriteTx::commit`]; dropping it without commit rolls back.
pub struct WriteTx<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) writer: MutexGuard<'a, Writer>,
    pub(crate) map: Arc<Mmap>,
    pub(crate) meta: Meta,
    pub(crate) buckets: BTreeMap<Vec<u8>, WBucket>,
    pub(crate) freed: Vec<(u64, u64)>,
    pub(crate) fill: f64,
}

impl ReadTxn for WriteTx<'_> {
    fn ctx(&self) -> Ctx<'_> {
        tree_ctx(&self.map, &self.meta)
    }
    fn bucket_root(&self, name: &[u8]) -> Result<Option<ChildRef<'_>>> {
        match self.buckets.get(name) {
            Some(b) => Ok(b.root.as_ref().map(ChildRef::from)),
            None => committed_bucket(self.ctx(), self.meta.root, name),
        }
    }
    fn bucket_names(&self) -> Result<Vec<Vec<u8>>> {
        let mut names: BTreeSet<Vec<u8>> = committed_names(self.ctx(), self.meta.root)?
            .into_iter()
            .collect();
        for (n, b) in &self.buckets {
            if b.root.is_some() {
                names.insert(n.clone());
            } else {
                names.remove(n);
            }
        }
        Ok(names.into_iter().collect())
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::KeyEmpty);
    }
    if key.len() > MAX_KEY_SIZE {
        return Err(Error::KeyTooLarge(key.len()));
    }
    Ok(())
}

impl<'a> WriteTx<'a> {
    /// The txid this transaction will commit as.
    pub fn txid(&self) -> u64 {
        self.meta.txid + 1
    }

    /// How full split pages are left (bbolt's FillPercent, 0.1..=1.0; default 0.5). Use a high
    /// value when appending keys in order, as etcd's defrag does.
    pub fn set_fill_percent(&mut self, fill: f64) {
        self.fill = fill.clamp(0.1, 1.0);
    }

    /// Loads a bucket into the changed set (once per txn) and returns its tree.
    fn bucket_mut(&mut self, name: &[u8]) -> Result<&mut WBucket> {
        if !self.buckets.contains_key(name) {
            let ctx = tree_ctx(&self.map, &self.meta);
            let (root, seq) = match committed_bucket(ctx, self.meta.root, name)? {
                None => return Err(Error::BucketNotFound(show(name))),
                Some(ChildRef::Page(p)) => (Child::Page(p), bucket_seq(ctx, self.meta.root, name)?),
                Some(ChildRef::Inline(p)) => (
                    Child::Mem(Box::new(Node::from_page(&p)?)),
                    bucket_seq(ctx, self.meta.root, name)?,
                ),
                Some(ChildRef::Mem(_)) => return Err(corrupt(0, "committed bucket in memory")),
            };
            self.buckets.insert(
                name.to_vec(),
                WBucket {
                    root: Some(root),
                    seq,
                    existed: true,
                    fill: None,
                },
            );
        }
        match self.buckets.get_mut(name) {
            Some(b) if b.root.is_some() => Ok(b),
            _ => Err(Error::BucketNotFound(show(name))),
        }
    }

    /// Creates an empty bucket; an existing one is an error.
    pub fn create_bucket(&mut self, name: &[u8]) -> Result<()> {
        check_key(name)?;
        if self.bucket_exists(name)? {
            return Err(Error::BucketExists(show(name)));
        }
        let existed = match self.buckets.get(name) {
            Some(b) => b.existed,
            None => false,
        };
        if let Some(d) = self.writer.dirty.as_mut() {
            d.whole(name);
        }
        self.buckets.insert(
            name.to_vec(),
            WBucket {
                root: Some(Child::Mem(Box::new(Node::Leaf(Vec::new())))),
                seq: 0,
                existed,
                fill: None,
            },
        );
        Ok(())
    }

    pub fn create_bucket_if_not_exists(&mut self, name: &[u8]) -> Result<()> {
        if self.bucket_exists(name)? {
            return Ok(());
        }
        self.create_bucket(name)
    }

    /// The bucket's sequence number (bbolt's Bucket.Sequence).
    pub fn sequence(&mut self, bucket: &[u8]) -> Result<u64> {
        Ok(self.bucket_mut(bucket)?.seq)
    }

    pub fn set_sequence(&mut self, bucket: &[u8], seq: u64) -> Result<()> {
        self.bucket_mut(bucket)?.seq = seq;
        if let Some(d) = self.writer.dirty.as_mut() {
            d.sequence(bucket);
        }
        Ok(())
    }

    /// Increments and returns the bucket's sequence number (bbolt's NextSequence).
    pub fn next_sequence(&mut self, bucket: &[u8]) -> Result<u64> {
        if let Some(d) = self.writer.dirty.as_mut() {
            d.sequence(bucket);
        }
        let b = self.bucket_mut(bucket)?;
        b.seq += 1;
        Ok(b.seq)
    }

    /// Deletes a bucket and all its keys; its pages are freed at commit.
    pub fn delete_bucket(&mut self, name: &[u8]) -> Result<()> {
        self.bucket_mut(name)?;
        if let Some(d) = self.writer.dirty.as_mut() {
            d.whole(name);
        }
        let ctx = tree_ctx(&self.map, &self.meta);
        if let Some(b) = self.buckets.get_mut(name)
            && let Some(root) = b.root.take()
        {
            node::free_tree(&root, &ctx, &mut self.freed, 0)?;
        }
        Ok(())
    }

    pub fn put(&mut self, bucket: &[u8], key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        if value.len() > MAX_VALUE_SIZE {
            return Err(Error::ValueTooLarge(value.len()));
        }
        self.bucket_mut(bucket)?;
        if let Some(d) = self.writer.dirty.as_mut() {
            d.key(bucket, key);
        }
        let ctx = tree_ctx(&self.map, &self.meta);
        match self.buckets.get_mut(bucket).and_then(|b| b.root.as_mut()) {
            Some(root) => node::put(root, &ctx, &mut self.freed, key, value, 0),
            None => Err(Error::BucketNotFound(show(bucket))),
        }
    }

    /// A put of a key that sorts after every key of the bucket (etcd's UnsafeSeqPut, used for
    /// revisions): this bucket's pages are split full (`SEQ_FILL`) instead of half, so an
    /// append-only bucket stays dense.
    pub fn put_seq(&mut self, bucket: &[u8], key: &[u8], value: &[u8]) -> Result<()> {
        self.put(bucket, key, value)?;
        self.mark_sequential(bucket);
        Ok(())
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&mut self, bucket: &[u8], key: &[u8]) -> Result<bool> {
        if self.get(bucket, key)?.is_none() {
            return Ok(false);
        }
        self.bucket_mut(bucket)?;
        if let Some(d) = self.writer.dirty.as_mut() {
            d.key(bucket, key);
        }
        let ctx = tree_ctx(&self.map, &self.meta);
        match self.buckets.get_mut(bucket).and_then(|b| b.root.as_mut()) {
            Some(root) => node::delete(root, &ctx, &mut self.freed, key, 0).map(|()| true),
            None => Err(Error::BucketNotFound(show(bucket))),
        }
    }

    /// Puts and deletes in one bucket, keys strictly increasing (a sorted map's order): each
    /// node they reach is visited once, where `put` and `delete` descend from the root for
    /// every key. Deleting a missing key is no change, as with `delete`.
    pub fn apply_sorted(&mut self, bucket: &[u8], writes: &[node::KeyWrite<'_>]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        for (i, &(key, value)) in writes.iter().enumerate() {
            check_key(key)?;
            if let Some(v) = value
                && v.len() > MAX_VALUE_SIZE
            {
                return Err(Error::ValueTooLarge(v.len()));
            }
            if i > 0 && writes[i - 1].0 >= key {
                return Err(Error::Unsorted(show(key)));
            }
        }
        self.bucket_mut(bucket)?;
        let ctx = tree_ctx(&self.map, &self.meta);
        let Some(root) = self.buckets.get_mut(bucket).and_then(|b| b.root.as_mut()) else {
            return Err(Error::BucketNotFound(show(bucket)));
        };
        let mut dirty = self.writer.dirty.as_mut();
        node::apply_sorted(root, &ctx, &mut self.freed, writes, &mut |key| {
            if let Some(d) = dirty.as_mut() {
                d.key(bucket, key);
            }
        })
    }

    /// Marks `bucket` as written in key order (etcd's revisions): its pages are split full
    /// (`SEQ_FILL`) at commit instead of half.
    pub fn mark_sequential(&mut self, bucket: &[u8]) {
        if let Some(b) = self.buckets.get_mut(bucket) {
            b.fill = Some(SEQ_FILL);
        }
    }

    /// Writes every change durably: dirty pages, fdatasync, the next meta, fdatasync.
    pub fn commit(self) -> Result<()> {
        super::db::commit(self)
    }

    /// Discards every change (the same as dropping the transaction).
    pub fn rollback(self) {}
}

fn bucket_seq(ctx: Ctx<'_>, root: u64, name: &[u8]) -> Result<u64> {
    let mut c = Cursor::new(ctx, ChildRef::Page(root));
    match c.seek_raw(name)? {
        Some((_, (k, v))) if k == name && v.len() >= 16 => Ok(u64_at(v, 8)),
        _ => Ok(0),
    }
}
