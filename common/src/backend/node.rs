// The B+tree itself: read-only views over mapped pages or in-memory nodes, the ordered cursor,
// and the copy-on-write write path (materialize, put, delete, rebalance, spill into new pages).

use std::collections::HashSet;

use super::error::{Error, Result, corrupt, show};
use super::freelist::Freelist;
use super::page::{
    BUCKET_LEAF_FLAG, ELEMENT_SIZE, MAX_DEPTH, NodePage, PAGE_HEADER_SIZE, key_cmp, node_size,
    page_bytes, write_branch, write_leaf,
};

/// Where pages are read from: one mapped version of the file.
#[derive(Clone, Copy)]
pub struct Ctx<'t> {
    pub map: &'t [u8],
    pub page_size: usize,
    pub hwm: u64,
}

impl<'t> Ctx<'t> {
    pub fn node(&self, pgid: u64) -> Result<NodePage<'t>> {
        NodePage::parse(pgid, page_bytes(self.map, self.page_size, self.hwm, pgid)?)
    }

    fn view(&self, c: ChildRef<'t>) -> Result<View<'t>> {
        Ok(match c {
            ChildRef::Page(p) => View::Page(self.node(p)?),
            ChildRef::Inline(p) => View::Page(p),
            ChildRef::Mem(n) => View::Mem(n),
        })
    }
}

/// An in-memory (dirty) node of a write transaction.
#[derive(Debug)]
pub enum Node {
    Leaf(Vec<LeafEntry>),
    Branch(Vec<BranchEntry>),
}

/// A leaf entry; key and value share one allocation (materializing a page allocates once per
/// entry).
#[derive(Debug, Clone)]
pub struct LeafEntry {
    pub flags: u32,
    klen: usize,
    kv: Vec<u8>,
}

impl LeafEntry {
    pub fn new(flags: u32, key: &[u8], value: &[u8]) -> LeafEntry {
        let mut kv = Vec::with_capacity(key.len() + value.len());
        kv.extend_from_slice(key);
        kv.extend_from_slice(value);
        LeafEntry {
            flags,
            klen: key.len(),
            kv,
        }
    }
    pub fn key(&self) -> &[u8] {
        &self.kv[..self.klen]
    }
    pub fn value(&self) -> &[u8] {
        &self.kv[self.klen..]
    }
    fn set_value(&mut self, value: &[u8]) {
        self.kv.truncate(self.klen);
        self.kv.extend_from_slice(value);
    }
}

#[derive(Debug)]
pub struct BranchEntry {
    pub key: Vec<u8>,
    pub child: Child,
}

/// A subtree: still the committed page, or copied into memory because this txn changed it.
#[derive(Debug)]
pub enum Child {
    Page(u64),
    Mem(Box<Node>),
}

/// A read-only reference to a subtree root.
#[derive(Clone, Copy)]
pub enum ChildRef<'t> {
    Page(u64),
    Inline(NodePage<'t>),
    Mem(&'t Node),
}

impl<'t> From<&'t Child> for ChildRef<'t> {
    fn from(c: &'t Child) -> Self {
        match c {
            Child::Page(p) => ChildRef::Page(*p),
            Child::Mem(n) => ChildRef::Mem(n),
        }
    }
}

impl Node {
    pub fn from_page(p: &NodePage<'_>) -> Result<Node> {
        if p.leaf {
            let mut v = Vec::with_capacity(p.count);
            for i in 0..p.count {
                let (flags, k, val) = p.leaf_elem(i)?;
                v.push(LeafEntry::new(flags, k, val));
            }
            Ok(Node::Leaf(v))
        } else {
            let mut v = Vec::with_capacity(p.count);
            for i in 0..p.count {
                let (k, pgid) = p.branch_elem(i)?;
                if pgid < 2 {
                    return Err(corrupt(
                        p.pgid,
                        format!("branch element {i} points to meta page {pgid}"),
                    ));
                }
                v.push(BranchEntry {
                    key: k.to_vec(),
                    child: Child::Page(pgid),
                });
            }
            Ok(Node::Branch(v))
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Node::Leaf(v) => v.len(),
            Node::Branch(v) => v.len(),
        }
    }

    fn elem_sizes(&self) -> Vec<usize> {
        match self {
            Node::Leaf(v) => v.iter().map(|e| ELEMENT_SIZE + e.kv.len()).collect(),
            Node::Branch(v) => v.iter().map(|e| ELEMENT_SIZE + e.key.len()).collect(),
        }
    }

    pub fn size(&self) -> usize {
        PAGE_HEADER_SIZE
            + match self {
                Node::Leaf(v) => v.iter().map(|e| ELEMENT_SIZE + e.kv.len()).sum::<usize>(),
                Node::Branch(v) => v.iter().map(|e| ELEMENT_SIZE + e.key.len()).sum::<usize>(),
            }
    }

    fn underfilled(&self, page_size: usize) -> bool {
        let min_keys = if matches!(self, Node::Leaf(_)) { 1 } else { 2 };
        self.size() < page_size / 4 || self.len() < min_keys
    }

    /// A page image of this leaf (used for inline buckets, whose page id is 0).
    pub fn leaf_image(entries: &[LeafEntry]) -> Vec<u8> {
        let data: usize = entries.iter().map(|e| e.kv.len()).sum();
        let mut out = vec![0u8; node_size(entries.len(), data)];
        write_leaf(
            &mut out,
            0,
            0,
            entries.iter().map(|e| (e.flags, e.key(), e.value())),
        );
        out
    }
}

/// A read view of one node.
#[derive(Clone, Copy)]
enum View<'t> {
    Page(NodePage<'t>),
    Mem(&'t Node),
}

impl<'t> View<'t> {
    fn is_leaf(&self) -> bool {
        match self {
            View::Page(p) => p.leaf,
            View::Mem(n) => matches!(n, Node::Leaf(_)),
        }
    }
    fn len(&self) -> usize {
        match self {
            View::Page(p) => p.count,
            View::Mem(n) => n.len(),
        }
    }
    fn pgid(&self) -> u64 {
        match self {
            View::Page(p) => p.pgid,
            View::Mem(_) => 0,
        }
    }
    fn leaf(&self, i: usize) -> Result<(u32, &'t [u8], &'t [u8])> {
        match self {
            View::Page(p) => p.leaf_elem(i),
            View::Mem(Node::Leaf(v)) => v
                .get(i)
                .map(|e| (e.flags, e.key(), e.value()))
                .ok_or_else(|| corrupt(0, "in-memory leaf index out of range")),
            View::Mem(Node::Branch(_)) => Err(corrupt(0, "leaf read of an in-memory branch")),
        }
    }
    fn child(&self, i: usize) -> Result<ChildRef<'t>> {
        match self {
            View::Page(p) => {
                let (_, pgid) = p.branch_elem(i)?;
                if pgid < 2 {
                    return Err(corrupt(
                        p.pgid,
                        format!("branch element {i} points to meta page {pgid}"),
                    ));
                }
                Ok(ChildRef::Page(pgid))
            }
            View::Mem(Node::Branch(v)) => v
                .get(i)
                .map(|e| ChildRef::from(&e.child))
                .ok_or_else(|| corrupt(0, "in-memory branch index out of range")),
            View::Mem(Node::Leaf(_)) => Err(corrupt(0, "child read of an in-memory leaf")),
        }
    }
    fn lower_bound(&self, key: &[u8]) -> Result<usize> {
        match self {
            View::Page(p) => p.lower_bound(key),
            View::Mem(Node::Leaf(v)) => Ok(v.partition_point(|e| key_cmp(e.key(), key).is_lt())),
            View::Mem(Node::Branch(v)) => Ok(v.partition_point(|e| key_cmp(&e.key, key).is_lt())),
        }
    }
    fn child_index(&self, key: &[u8]) -> Result<usize> {
        match self {
            View::Page(p) => p.child_index(key),
            View::Mem(Node::Branch(v)) => Ok(v
                .partition_point(|e| key_cmp(&e.key, key).is_le())
                .saturating_sub(1)),
            View::Mem(Node::Leaf(_)) => Err(corrupt(0, "child index of an in-memory leaf")),
        }
    }
}

/// Asks the CPU to start loading a whole page at once: a binary search over a cold page is
/// otherwise a chain of dependent cache misses (element, then key, then the next element).
#[inline]
fn prefetch_page(ctx: Ctx<'_>, pgid: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        // The map reaches past the end of the file: touch nothing above the high-water mark
        // (a corrupt child id is reported by the read that follows).
        if pgid >= ctx.hwm {
            return;
        }
        let start = (pgid as usize).saturating_mul(ctx.page_size);
        if let Some(page) = ctx.map.get(start..start + ctx.page_size) {
            for line in page.chunks(64) {
                // Safety: a prefetch is only a hint; the pointer is inside the mapped page.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        line.as_ptr().cast(),
                    );
                }
            }
        }
    }
}

/// Point lookup without a cursor: descends from `root` to the leaf that may hold `key`.
pub fn find<'t>(ctx: Ctx<'t>, root: ChildRef<'t>, key: &[u8]) -> Result<Option<(u32, Entry<'t>)>> {
    let mut v = ctx.view(root)?;
    for _ in 0..MAX_DEPTH {
        if v.is_leaf() || v.len() == 0 {
            let i = v.lower_bound(key)?;
            if i < v.len() {
                let (f, k, val) = v.leaf(i)?;
                if k == key {
                    return Ok(Some((f, (k, val))));
                }
            }
            return Ok(None);
        }
        let i = v.child_index(key)?;
        let c = v.child(i)?;
        if let ChildRef::Page(p) = c {
            prefetch_page(ctx, p);
        }
        v = ctx.view(c)?;
    }
    Err(corrupt(
        v.pgid(),
        format!("tree deeper than {MAX_DEPTH} levels: a branch points back up the tree"),
    ))
}

/// An ordered cursor over one tree. Every step returns `Ok(None)` once past either end.
pub struct Cursor<'t> {
    ctx: Ctx<'t>,
    root: ChildRef<'t>,
    stack: Vec<(View<'t>, usize)>,
}

pub type Entry<'t> = (&'t [u8], &'t [u8]);

impl<'t> Cursor<'t> {
    pub(crate) fn new(ctx: Ctx<'t>, root: ChildRef<'t>) -> Cursor<'t> {
        Cursor {
            ctx,
            root,
            stack: Vec::with_capacity(8),
        }
    }

    fn push(&mut self, v: View<'t>, i: usize) -> Result<()> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(corrupt(
                v.pgid(),
                format!("tree deeper than {MAX_DEPTH} levels: a branch points back up the tree"),
            ));
        }
        self.stack.push((v, i));
        Ok(())
    }

    /// Pushes the path from `c` to its leftmost (or rightmost) leaf.
    fn push_edge(&mut self, c: ChildRef<'t>, left: bool) -> Result<()> {
        let mut v = self.ctx.view(c)?;
        loop {
            let n = v.len();
            if v.is_leaf() || n == 0 {
                let i = if left { 0 } else { n.saturating_sub(1) };
                return self.push(v, i);
            }
            let i = if left { 0 } else { n - 1 };
            self.push(v, i)?;
            v = self.ctx.view(v.child(i)?)?;
        }
    }

    fn current(&self) -> Result<Option<(u32, Entry<'t>)>> {
        match self.stack.last() {
            Some((v, i)) if v.is_leaf() && *i < v.len() => {
                let (f, k, val) = v.leaf(*i)?;
                Ok(Some((f, (k, val))))
            }
            _ => Ok(None),
        }
    }

    /// How many leaves one step may pass over: more leaves than the file has pages means a page
    /// is reached by more than one path (a corrupt tree shaped as a DAG, whose paths can be
    /// exponentially many), not that the tree is large.
    fn leaf_budget(&self) -> u64 {
        self.ctx.hwm.saturating_add(MAX_DEPTH as u64)
    }

    fn dag_error(&self) -> Error {
        corrupt(
            self.stack.last().map_or(0, |(v, _)| v.pgid()),
            "more empty leaves than pages in one step: a page is reached by two paths",
        )
    }

    /// Moves to the first entry of the next non-empty leaf; false when there is none.
    fn next_leaf(&mut self) -> Result<bool> {
        let mut budget = self.leaf_budget();
        loop {
            budget = budget.checked_sub(1).ok_or_else(|| self.dag_error())?;
            self.stack.pop();
            loop {
                match self.stack.last_mut() {
                    None => return Ok(false),
                    Some((v, i)) if *i + 1 < v.len() => {
                        *i += 1;
                        break;
                    }
                    Some(_) => {
                        self.stack.pop();
                    }
                }
            }
            let (v, i) = match self.stack.last() {
                Some(top) => *top,
                None => return Ok(false),
            };
            self.push_edge(v.child(i)?, true)?;
            if self
                .stack
                .last()
                .is_some_and(|(v, _)| v.is_leaf() && v.len() > 0)
            {
                return Ok(true);
            }
        }
    }

    fn prev_leaf(&mut self) -> Result<bool> {
        let mut budget = self.leaf_budget();
        loop {
            budget = budget.checked_sub(1).ok_or_else(|| self.dag_error())?;
            self.stack.pop();
            loop {
                match self.stack.last_mut() {
                    None => return Ok(false),
                    Some((_, i)) if *i > 0 => {
                        *i -= 1;
                        break;
                    }
                    Some(_) => {
                        self.stack.pop();
                    }
                }
            }
            let (v, i) = match self.stack.last() {
                Some(top) => *top,
                None => return Ok(false),
            };
            self.push_edge(v.child(i)?, false)?;
            if self
                .stack
                .last()
                .is_some_and(|(v, _)| v.is_leaf() && v.len() > 0)
            {
                return Ok(true);
            }
        }
    }

    pub(crate) fn first_raw(&mut self) -> Result<Option<(u32, Entry<'t>)>> {
        self.stack.clear();
        self.push_edge(self.root, true)?;
        if self.stack.last().is_some_and(|(v, _)| v.len() == 0) && !self.next_leaf()? {
            return Ok(None);
        }
        self.current()
    }

    pub(crate) fn last_raw(&mut self) -> Result<Option<(u32, Entry<'t>)>> {
        self.stack.clear();
        self.push_edge(self.root, false)?;
        if self.stack.last().is_some_and(|(v, _)| v.len() == 0) && !self.prev_leaf()? {
            return Ok(None);
        }
        self.current()
    }

    pub(crate) fn seek_raw(&mut self, key: &[u8]) -> Result<Option<(u32, Entry<'t>)>> {
        self.stack.clear();
        let mut v = self.ctx.view(self.root)?;
        loop {
            if v.is_leaf() || v.len() == 0 {
                let i = v.lower_bound(key)?;
                self.push(v, i)?;
                if i >= v.len() && !self.next_leaf()? {
                    return Ok(None);
                }
                return self.current();
            }
            let i = v.child_index(key)?;
            self.push(v, i)?;
            v = self.ctx.view(v.child(i)?)?;
        }
    }

    pub(crate) fn next_raw(&mut self) -> Result<Option<(u32, Entry<'t>)>> {
        let Some((v, i)) = self.stack.last_mut() else {
            return Ok(None);
        };
        *i += 1;
        if *i < v.len() {
            return self.current();
        }
        let (v, i) = (*v, *i);
        // The key we leave: the next leaf must start after it. Any leaf reached twice (a tree
        // whose branches share a child) repeats its keys, so it is refused on its second
        // visit and a walk never takes more steps than the file has keys.
        let left = match i.checked_sub(1) {
            Some(j) if v.is_leaf() && j < v.len() => Some(v.leaf(j)?.1),
            _ => None,
        };
        if !self.next_leaf()? {
            return Ok(None);
        }
        let cur = self.current()?;
        self.check_order(left, cur, true)?;
        Ok(cur)
    }

    pub(crate) fn prev_raw(&mut self) -> Result<Option<(u32, Entry<'t>)>> {
        let Some((v, i)) = self.stack.last_mut() else {
            return Ok(None);
        };
        if *i > 0 {
            *i -= 1;
            return self.current();
        }
        let v = *v;
        let left = if v.is_leaf() && v.len() > 0 {
            Some(v.leaf(0)?.1)
        } else {
            None
        };
        if !self.prev_leaf()? {
            return Ok(None);
        }
        let cur = self.current()?;
        self.check_order(left, cur, false)?;
        Ok(cur)
    }

    /// After a step into another leaf: its key must be beyond the one we left.
    fn check_order(
        &self,
        left: Option<&[u8]>,
        cur: Option<(u32, Entry<'t>)>,
        forward: bool,
    ) -> Result<()> {
        if let (Some(l), Some((_, (k, _)))) = (left, cur) {
            let ord = key_cmp(k, l);
            if (forward && !ord.is_gt()) || (!forward && !ord.is_lt()) {
                return Err(corrupt(
                    self.stack.last().map_or(0, |(v, _)| v.pgid()),
                    "keys do not follow the previous leaf's: a page is reached by two paths or misplaced",
                ));
            }
        }
        Ok(())
    }

    /// Moves to the first key.
    pub fn first(&mut self) -> Result<Option<Entry<'t>>> {
        Ok(self.first_raw()?.map(|e| e.1))
    }
    /// Moves to the last key.
    pub fn last(&mut self) -> Result<Option<Entry<'t>>> {
        Ok(self.last_raw()?.map(|e| e.1))
    }
    /// Moves to the first key >= `key`.
    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry<'t>>> {
        Ok(self.seek_raw(key)?.map(|e| e.1))
    }
    /// Moves to the next key.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Entry<'t>>> {
        Ok(self.next_raw()?.map(|e| e.1))
    }
    /// Moves to the previous key.
    pub fn prev(&mut self) -> Result<Option<Entry<'t>>> {
        Ok(self.prev_raw()?.map(|e| e.1))
    }
}

/// Copies a committed page into memory so this txn can change it; the page is freed at commit.
fn materialize<'c>(
    c: &'c mut Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
) -> Result<&'c mut Node> {
    if let Child::Page(pgid) = *c {
        let bytes = page_bytes(ctx.map, ctx.page_size, ctx.hwm, pgid)?;
        let node = Node::from_page(&NodePage::parse(pgid, bytes)?)?;
        freed.push((pgid, (bytes.len() / ctx.page_size) as u64));
        *c = Child::Mem(Box::new(node));
    }
    match c {
        Child::Mem(n) => Ok(n),
        Child::Page(p) => Err(corrupt(*p, "page could not be materialized")),
    }
}

/// Copies the path from `root` down to the leaf that holds (or would hold) `key` into memory,
/// and returns that leaf's entries.
fn leaf_for<'n>(
    root: &'n mut Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    key: &[u8],
) -> Result<&'n mut Vec<LeafEntry>> {
    let mut cur = materialize(root, ctx, freed)?;
    for _ in 0..MAX_DEPTH {
        cur = match cur {
            Node::Leaf(v) => return Ok(v),
            Node::Branch(v) => {
                if v.is_empty() {
                    return Err(corrupt(0, "empty in-memory branch"));
                }
                let i = v
                    .partition_point(|e| key_cmp(&e.key, key).is_le())
                    .saturating_sub(1);
                materialize(&mut v[i].child, ctx, freed)?
            }
        };
    }
    Err(corrupt(0, format!("tree deeper than {MAX_DEPTH} levels")))
}

/// Inserts or replaces `key` in the tree under `root`.
pub fn put(
    root: &mut Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    key: &[u8],
    value: &[u8],
    flags: u32,
) -> Result<()> {
    let v = leaf_for(root, ctx, freed, key)?;
    match v.binary_search_by(|e| key_cmp(e.key(), key)) {
        Ok(i) => {
            if is_bucket(v[i].flags) != is_bucket(flags) {
                return Err(Error::IncompatibleValue(show(key)));
            }
            v[i].flags = flags;
            v[i].set_value(value);
        }
        Err(i) => v.insert(i, LeafEntry::new(flags, key, value)),
    }
    Ok(())
}

/// Removes `key` from the tree under `root`; the caller checked that it exists. `flags` must
/// match the entry's kind (a value and a nested bucket are not interchangeable).
pub fn delete(
    root: &mut Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    key: &[u8],
    flags: u32,
) -> Result<()> {
    let v = leaf_for(root, ctx, freed, key)?;
    if let Ok(i) = v.binary_search_by(|e| key_cmp(e.key(), key)) {
        if is_bucket(v[i].flags) != is_bucket(flags) {
            return Err(Error::IncompatibleValue(show(key)));
        }
        v.remove(i);
    }
    Ok(())
}

/// One write of a sorted run: `Some(value)` puts, `None` deletes.
pub type KeyWrite<'k> = (&'k [u8], Option<&'k [u8]>);

/// Applies `writes` (keys strictly increasing) to the tree under `root`, visiting each node
/// they reach once: a commit of thousands of writes (a batch of puts, a compaction's deletes)
/// descends per node instead of per key. A delete of a missing key changes nothing: its leaf
/// stays the committed page. `applied` gets each key put or deleted.
pub fn apply_sorted(
    root: &mut Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    writes: &[KeyWrite<'_>],
    applied: &mut dyn FnMut(&[u8]),
) -> Result<()> {
    apply_run(root, ctx, freed, writes, applied, 0)
}

fn apply_run(
    c: &mut Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    writes: &[KeyWrite<'_>],
    applied: &mut dyn FnMut(&[u8]),
    depth: usize,
) -> Result<()> {
    if depth >= MAX_DEPTH {
        return Err(corrupt(0, format!("tree deeper than {MAX_DEPTH} levels")));
    }
    let present;
    let mut writes = writes;
    if let Child::Page(pgid) = *c {
        // Only deletes for a committed leaf: copy it only if one of them is there.
        let v = ctx.view(ChildRef::Page(pgid))?;
        if v.is_leaf() && writes.iter().all(|w| w.1.is_none()) {
            let mut found = Vec::new();
            for w in writes {
                let i = v.lower_bound(w.0)?;
                if i < v.len() && v.leaf(i)?.1 == w.0 {
                    found.push(*w);
                }
            }
            if found.is_empty() {
                return Ok(());
            }
            present = found;
            writes = &present;
        }
    }
    match materialize(c, ctx, freed)? {
        Node::Leaf(v) => merge_leaf(v, writes, applied),
        Node::Branch(v) => {
            if v.is_empty() {
                return Err(corrupt(0, "empty in-memory branch"));
            }
            // Child i takes the keys below child i+1's first key (the first child also those
            // below its own, as a descent does).
            let mut rest = writes;
            for i in 0..v.len() {
                if rest.is_empty() {
                    break;
                }
                let n = match v.get(i + 1) {
                    Some(next) => rest.partition_point(|w| key_cmp(w.0, &next.key).is_lt()),
                    None => rest.len(),
                };
                let (run, after) = rest.split_at(n);
                if !run.is_empty() {
                    apply_run(&mut v[i].child, ctx, freed, run, applied, depth + 1)?;
                }
                rest = after;
            }
            Ok(())
        }
    }
}

/// Merges sorted writes into one leaf's entries in a single pass.
fn merge_leaf(
    v: &mut Vec<LeafEntry>,
    writes: &[KeyWrite<'_>],
    applied: &mut dyn FnMut(&[u8]),
) -> Result<()> {
    let puts = writes.iter().filter(|w| w.1.is_some()).count();
    let mut old = std::mem::take(v).into_iter().peekable();
    let mut out = Vec::with_capacity(old.len() + puts);
    let mut res = Ok(());
    for &(key, value) in writes {
        while let Some(e) = old.next_if(|e| key_cmp(e.key(), key).is_lt()) {
            out.push(e);
        }
        let same = old.next_if(|e| e.key() == key);
        if let Some(e) = same {
            if is_bucket(e.flags) {
                // The writes before this one stay applied, as with one put or delete at a time.
                out.push(e);
                res = Err(Error::IncompatibleValue(show(key)));
                break;
            }
            if let Some(value) = value {
                let mut e = e;
                e.flags = 0;
                e.set_value(value);
                out.push(e);
            }
            applied(key);
        } else if let Some(value) = value {
            out.push(LeafEntry::new(0, key, value));
            applied(key);
        }
    }
    out.extend(old);
    *v = out;
    res
}

/// Frees every page of a committed subtree (a deleted bucket), reading through `ctx`.
pub fn free_tree(
    c: &Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    depth: usize,
) -> Result<()> {
    free_subtree(c, ctx, freed, &mut HashSet::new(), depth)
}

/// `seen`: the pages freed by this call. A page reached twice (branches sharing a child) is
/// corruption: freeing it twice would hand it out twice, and walking such a DAG path by path
/// takes exponential time and memory.
fn free_subtree(
    c: &Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    seen: &mut HashSet<u64>,
    depth: usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(corrupt(0, format!("tree deeper than {MAX_DEPTH} levels")));
    }
    match c {
        Child::Page(pgid) => {
            if !seen.insert(*pgid) {
                return Err(corrupt(*pgid, "page is reached twice in the freed tree"));
            }
            let bytes = page_bytes(ctx.map, ctx.page_size, ctx.hwm, *pgid)?;
            let p = NodePage::parse(*pgid, bytes)?;
            freed.push((*pgid, (bytes.len() / ctx.page_size) as u64));
            for i in 0..p.count {
                if p.leaf {
                    let (flags, _, v) = p.leaf_elem(i)?;
                    free_nested(flags, v, *pgid, ctx, freed, seen, depth)?;
                } else {
                    let (_, child) = p.branch_elem(i)?;
                    free_subtree(&Child::Page(child), ctx, freed, seen, depth + 1)?;
                }
            }
        }
        Child::Mem(n) => match &**n {
            Node::Branch(v) => {
                for e in v {
                    free_subtree(&e.child, ctx, freed, seen, depth + 1)?;
                }
            }
            Node::Leaf(v) => {
                for e in v {
                    free_nested(e.flags, e.value(), 0, ctx, freed, seen, depth)?;
                }
            }
        },
    }
    Ok(())
}

/// Frees the pages of a nested bucket (bbolt allows buckets inside buckets; etcd uses none).
fn free_nested(
    flags: u32,
    value: &[u8],
    at: u64,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    seen: &mut HashSet<u64>,
    depth: usize,
) -> Result<()> {
    if !is_bucket(flags) {
        return Ok(());
    }
    if value.len() < 16 {
        return Err(corrupt(
            at,
            format!("bucket value of {} bytes", value.len()),
        ));
    }
    match super::page::u64_at(value, 0) {
        0 => Ok(()),
        root => free_subtree(&Child::Page(root), ctx, freed, seen, depth + 1),
    }
}

/// Merges underfilled changed nodes into a sibling so deletes do not leave sparse pages, then
/// collapses a root branch with a single child.
pub fn rebalance(root: &mut Child, ctx: &Ctx<'_>, freed: &mut Vec<(u64, u64)>) -> Result<()> {
    rebalance_node(root, ctx, freed, 0)?;
    loop {
        match root {
            Child::Mem(n) => match &mut **n {
                Node::Branch(v) if v.len() == 1 => {
                    if let Some(e) = v.pop() {
                        *root = e.child;
                    }
                }
                Node::Branch(v) if v.is_empty() => {
                    *root = Child::Mem(Box::new(Node::Leaf(Vec::new())))
                }
                _ => return Ok(()),
            },
            Child::Page(_) => return Ok(()),
        }
    }
}

fn rebalance_node(
    c: &mut Child,
    ctx: &Ctx<'_>,
    freed: &mut Vec<(u64, u64)>,
    depth: usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(corrupt(0, format!("tree deeper than {MAX_DEPTH} levels")));
    }
    let Child::Mem(n) = c else { return Ok(()) };
    let Node::Branch(v) = &mut **n else {
        return Ok(());
    };
    for e in v.iter_mut() {
        rebalance_node(&mut e.child, ctx, freed, depth + 1)?;
    }
    let mut i = 0;
    while i < v.len() {
        let under = match &v[i].child {
            Child::Mem(n) => {
                if n.len() == 0 {
                    v.remove(i);
                    continue;
                }
                n.underfilled(ctx.page_size)
            }
            Child::Page(_) => false,
        };
        if !under || v.len() < 2 {
            i += 1;
            continue;
        }
        let (l, r) = if i + 1 < v.len() {
            (i, i + 1)
        } else {
            (i - 1, i)
        };
        materialize(&mut v[l].child, ctx, freed)?;
        materialize(&mut v[r].child, ctx, freed)?;
        let right = v.remove(r);
        let (Child::Mem(ln), Child::Mem(rn)) = (&mut v[l].child, right.child) else {
            return Err(corrupt(0, "sibling could not be materialized"));
        };
        match (&mut **ln, *rn) {
            (Node::Leaf(a), Node::Leaf(b)) => a.extend(b),
            (Node::Branch(a), Node::Branch(b)) => a.extend(b),
            (_, other) => {
                // Siblings of different kinds mean the tree is corrupt; keep both as they are.
                v.insert(
                    r,
                    BranchEntry {
                        key: right.key,
                        child: Child::Mem(Box::new(other)),
                    },
                );
                i += 1;
                continue;
            }
        }
        i = l;
    }
    Ok(())
}

/// Collects the page images of one commit and hands out page ids.
pub struct Spill<'f> {
    pub page_size: usize,
    pub fill: f64,
    pub freelist: &'f mut Freelist,
    pub hwm: u64,
    pub allocated: Vec<(u64, u64)>,
    pub writes: Vec<(u64, Vec<u8>)>,
}

impl Spill<'_> {
    pub fn alloc(&mut self, npages: u64) -> u64 {
        let id = match self.freelist.allocate(npages) {
            Some(id) => id,
            None => {
                let id = self.hwm;
                self.hwm += npages;
                id
            }
        };
        self.allocated.push((id, npages));
        id
    }

    /// Writes `node` into new pages, split so each holds about `fill` of a page; returns the
    /// (first key, page id) of every piece for the parent branch.
    pub fn spill(&mut self, node: Node) -> Result<Vec<(Vec<u8>, u64)>> {
        let node = match node {
            Node::Branch(v) => {
                let mut out = Vec::with_capacity(v.len());
                for e in v {
                    match e.child {
                        Child::Page(p) => out.push(BranchEntry {
                            key: e.key,
                            child: Child::Page(p),
                        }),
                        Child::Mem(n) => {
                            for (k, p) in self.spill(*n)? {
                                out.push(BranchEntry {
                                    key: k,
                                    child: Child::Page(p),
                                });
                            }
                        }
                    }
                }
                Node::Branch(out)
            }
            leaf => leaf,
        };
        let sizes = node.elem_sizes();
        let ranges = split_points(
            &sizes,
            self.page_size,
            self.fill,
            matches!(node, Node::Leaf(_)),
        );
        let mut pieces = Vec::with_capacity(ranges.len());
        for r in ranges {
            let size = PAGE_HEADER_SIZE + sizes[r.clone()].iter().sum::<usize>();
            let npages = size.div_ceil(self.page_size) as u64;
            let id = self.alloc(npages);
            let mut buf = vec![0u8; npages as usize * self.page_size];
            let overflow = (npages - 1) as u32;
            let first = match &node {
                Node::Leaf(v) => {
                    let es = &v[r];
                    write_leaf(
                        &mut buf,
                        id,
                        overflow,
                        es.iter().map(|e| (e.flags, e.key(), e.value())),
                    );
                    es.first().map(|e| e.key().to_vec()).unwrap_or_default()
                }
                Node::Branch(v) => {
                    let es = &v[r];
                    write_branch(
                        &mut buf,
                        id,
                        overflow,
                        es.iter().map(|e| match e.child {
                            Child::Page(p) => (&e.key[..], p),
                            Child::Mem(_) => (&e.key[..], 0),
                        }),
                    );
                    es.first().map(|e| e.key.clone()).unwrap_or_default()
                }
            };
            self.writes.push((id, buf));
            pieces.push((first, id));
        }
        Ok(pieces)
    }

    /// Spills a whole tree and returns its new root page id, adding branch levels as needed.
    pub fn spill_root(&mut self, root: Child) -> Result<u64> {
        let node = match root {
            Child::Page(p) => return Ok(p),
            Child::Mem(n) => *n,
        };
        let mut pieces = self.spill(node)?;
        while pieces.len() > 1 {
            let branch = Node::Branch(
                pieces
                    .into_iter()
                    .map(|(key, p)| BranchEntry {
                        key,
                        child: Child::Page(p),
                    })
                    .collect(),
            );
            pieces = self.spill(branch)?;
        }
        pieces
            .pop()
            .map(|(_, p)| p)
            .ok_or_else(|| corrupt(0, "spill produced no page"))
    }
}

/// Splits elements into page-sized pieces; a node that fits one page stays whole.
fn split_points(
    sizes: &[usize],
    page_size: usize,
    fill: f64,
    leaf: bool,
) -> Vec<std::ops::Range<usize>> {
    let total: usize = PAGE_HEADER_SIZE + sizes.iter().sum::<usize>();
    if total <= page_size || sizes.len() <= 1 {
        return std::iter::once(0..sizes.len()).collect();
    }
    let min_keys = if leaf { 1 } else { 2 };
    let threshold = ((page_size as f64) * fill) as usize;
    let mut out = Vec::new();
    let mut start = 0;
    let mut cur = PAGE_HEADER_SIZE;
    for (i, &s) in sizes.iter().enumerate() {
        let count = i - start;
        if count >= min_keys && cur + s > threshold && sizes.len() - i >= min_keys {
            out.push(start..i);
            start = i;
            cur = PAGE_HEADER_SIZE;
        }
        cur += s;
    }
    out.push(start..sizes.len());
    out
}

/// True when a leaf entry is a bucket header rather than a value.
pub fn is_bucket(flags: u32) -> bool {
    flags & BUCKET_LEAF_FLAG != 0
}
