// Whole-file inspection: check() walks every page and verifies structure (for etcdutl and the
// crash tests), stats() counts pages and keys, hash() is etcd's crc32c hash of all buckets.

use super::db::Db;
use super::error::{Result, corrupt};
use super::freelist;
use super::meta::PGID_NO_FREELIST;
use super::node::{ChildRef, Ctx, Cursor};
use super::page::{BUCKET_LEAF_FLAG, MAX_DEPTH, NodePage, page_bytes, u64_at};
use super::tx::{ReadTx, ReadTxn};

/// Usage of the whole file and of each bucket.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub page_size: u32,
    /// The high-water mark: pages 0..page_count exist in the db image.
    pub page_count: u64,
    /// Pages free for reuse (including those waiting for old readers), as of the latest
    /// commit's freelist.
    pub free_pages: u64,
    /// Pages the persisted freelist takes (0 when the file does not persist it, as etcd's).
    pub freelist_pages: u64,
    /// Depth of the root tree (the tree of bucket names).
    pub root_depth: usize,
    pub buckets: Vec<BucketStats>,
}

#[derive(Debug, Clone, Default)]
pub struct BucketStats {
    pub name: Vec<u8>,
    pub keys: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    pub depth: usize,
    pub branch_pages: u64,
    pub leaf_pages: u64,
    pub overflow_pages: u64,
    /// Bytes in use on this bucket's leaf / branch pages (headers, elements, keys, values):
    /// against the pages' size, how full the bucket's pages are.
    pub leaf_bytes: u64,
    pub branch_bytes: u64,
    pub inline: bool,
}

struct Walk<'a> {
    ctx: Ctx<'a>,
    used: Vec<bool>,
    buckets: Vec<BucketStats>,
}

impl Walk<'_> {
    /// Visits a tree; verifies ids, flags, bounds, key order, depth; counts into `st`.
    /// `depth` is the level within this bucket's tree (for the stats); `level` counts nested
    /// buckets too, so that a chain of buckets one page each cannot recurse once per page.
    fn tree(
        &mut self,
        root: ChildRef<'_>,
        st: &mut BucketStats,
        root_tree: bool,
        depth: usize,
        level: usize,
    ) -> Result<()> {
        if level > MAX_DEPTH {
            let pgid = match root {
                ChildRef::Page(p) => p,
                ChildRef::Inline(p) => p.pgid,
                ChildRef::Mem(_) => 0,
            };
            return Err(corrupt(
                pgid,
                format!("trees and nested buckets deeper than {MAX_DEPTH} levels"),
            ));
        }
        let (p, pgid) = match root {
            ChildRef::Page(pgid) => {
                let bytes = page_bytes(self.ctx.map, self.ctx.page_size, self.ctx.hwm, pgid)?;
                let n = (bytes.len() / self.ctx.page_size) as u64;
                for id in pgid..pgid + n {
                    if self.used[id as usize] {
                        return Err(corrupt(pgid, format!("page {id} is reachable twice")));
                    }
                    self.used[id as usize] = true;
                }
                st.overflow_pages += n - 1;
                (NodePage::parse(pgid, bytes)?, pgid)
            }
            ChildRef::Inline(p) => {
                st.inline = true;
                if !p.leaf {
                    return Err(corrupt(p.pgid, "inline bucket page is not a leaf"));
                }
                (p, p.pgid)
            }
            ChildRef::Mem(_) => return Err(corrupt(0, "check of an uncommitted tree")),
        };
        st.depth = st.depth.max(depth + 1);
        let on_page = matches!(root, ChildRef::Page(_));
        if p.leaf {
            st.leaf_pages += u64::from(on_page);
        } else {
            st.branch_pages += 1;
        }
        if on_page {
            let used = p.used_bytes()? as u64;
            if p.leaf {
                st.leaf_bytes += used;
            } else {
                st.branch_bytes += used;
            }
        }
        let mut prev: Option<&[u8]> = None;
        for i in 0..p.count {
            let k = p.key(i)?;
            if prev.is_some_and(|pk| pk >= k) {
                return Err(corrupt(pgid, format!("keys out of order at element {i}")));
            }
            prev = Some(k);
            if p.leaf {
                let (flags, k, v) = p.leaf_elem(i)?;
                if root_tree || flags & BUCKET_LEAF_FLAG != 0 {
                    if flags & BUCKET_LEAF_FLAG == 0 {
                        continue;
                    }
                    if v.len() < 16 {
                        return Err(corrupt(
                            pgid,
                            format!("bucket value {i} is {} bytes", v.len()),
                        ));
                    }
                    let mut bs = BucketStats {
                        name: k.to_vec(),
                        ..BucketStats::default()
                    };
                    let broot = u64_at(v, 0);
                    let child = if broot == 0 {
                        ChildRef::Inline(NodePage::parse(pgid, &v[16..])?)
                    } else {
                        ChildRef::Page(broot)
                    };
                    self.tree(child, &mut bs, false, 0, level + 1)?;
                    if root_tree {
                        self.buckets.push(bs);
                    } else {
                        // A nested bucket counts as one key of its parent.
                        st.keys += 1;
                        st.key_bytes += k.len() as u64;
                    }
                } else {
                    st.keys += 1;
                    st.key_bytes += k.len() as u64;
                    st.value_bytes += v.len() as u64;
                }
            } else {
                let (_, child) = p.branch_elem(i)?;
                if child < 2 {
                    return Err(corrupt(
                        pgid,
                        format!("branch element {i} points to meta page {child}"),
                    ));
                }
                // A child's smallest key must not sort before the branch key that leads to it.
                let bk = p.key(i)?;
                let c = self.ctx.node(child)?;
                if c.count > 0 && c.key(0)? < bk {
                    return Err(corrupt(
                        child,
                        format!("first key sorts before its branch key in page {pgid}"),
                    ));
                }
                self.tree(ChildRef::Page(child), st, root_tree, depth + 1, level + 1)?;
            }
        }
        Ok(())
    }
}

/// Walks the version `tx` reads; returns the walk (pages marked, buckets counted) and the
/// root tree's stats.
fn walk(tx: &ReadTx) -> Result<(Walk<'_>, BucketStats)> {
    let ctx = tx.ctx();
    let mut w = Walk {
        ctx,
        used: vec![false; tx.meta.pgid as usize],
        buckets: Vec::new(),
    };
    w.used[0] = true;
    w.used[1] = true;
    let mut root = BucketStats::default();
    w.tree(ChildRef::Page(tx.meta.root), &mut root, true, 0, 0)?;
    Ok((w, root))
}

impl Db {
    /// Verifies every page of the latest committed version: ids match positions, flags and
    /// element bounds are valid, keys are ordered, no page is reachable twice, and every page
    /// is either reachable or free. Returns the first problem as a corrupt-page error.
    pub fn check(&self) -> Result<()> {
        let tx = self.begin_read();
        let (mut w, _) = walk(&tx)?;
        let meta = tx.meta;
        let ps = meta.page_size as usize;
        if meta.freelist != PGID_NO_FREELIST {
            let bytes = page_bytes(&tx.map, ps, meta.pgid, meta.freelist)?;
            for id in meta.freelist..meta.freelist + (bytes.len() / ps) as u64 {
                if w.used[id as usize] {
                    return Err(corrupt(id, "freelist page is also reachable from a tree"));
                }
                w.used[id as usize] = true;
            }
            for id in freelist::decode(meta.freelist, bytes, meta.pgid)? {
                if w.used[id as usize] {
                    return Err(corrupt(
                        id,
                        format!(
                            "page is both reachable and listed free in freelist page {}",
                            meta.freelist
                        ),
                    ));
                }
                w.used[id as usize] = true;
            }
            if let Some(id) = w.used.iter().position(|u| !u) {
                return Err(corrupt(
                    id as u64,
                    "page is neither reachable nor free (leaked)",
                ));
            }
        }
        Ok(())
    }

    /// Page and key counts of the latest committed version.
    pub fn stats(&self) -> Result<Stats> {
        let tx = self.begin_read();
        let (w, root) = walk(&tx)?;
        let meta = tx.meta;
        let (free_pages, freelist_pages) = if meta.freelist != PGID_NO_FREELIST {
            let ps = meta.page_size as usize;
            let bytes = page_bytes(&tx.map, ps, meta.pgid, meta.freelist)?;
            let ids = freelist::decode(meta.freelist, bytes, meta.pgid)?;
            (ids.len() as u64, (bytes.len() / ps) as u64)
        } else {
            (w.used.iter().filter(|u| !**u).count() as u64, 0)
        };
        Ok(Stats {
            page_size: meta.page_size,
            page_count: meta.pgid,
            free_pages,
            freelist_pages,
            root_depth: root.depth,
            buckets: w.buckets,
        })
    }

    /// etcd's backend hash: CRC-32C over each bucket's name, then its keys and values in
    /// order, skipping the (bucket, key) pairs in `ignore`.
    pub fn hash(&self, ignore: &[(&[u8], &[u8])]) -> Result<u32> {
        let tx = self.begin_read();
        hash_tx(&tx, ignore)
    }
}

pub(crate) fn hash_tx(tx: &impl ReadTxn, ignore: &[(&[u8], &[u8])]) -> Result<u32> {
    let mut h = 0u32;
    for name in tx.bucket_names()? {
        h = crc32c::crc32c_append(h, &name);
        let mut c: Cursor<'_> = tx.cursor(&name)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            if !ignore
                .iter()
                .any(|(b, ik)| *b == name.as_slice() && *ik == k)
            {
                h = crc32c::crc32c_append(h, k);
                h = crc32c::crc32c_append(h, v);
            }
            e = c.next()?;
        }
    }
    Ok(h)
}
