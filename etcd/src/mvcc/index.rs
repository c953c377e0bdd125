// The in-memory key index: key → KeyIndex, ordered by key, answering which revision holds each
// key of a range at a given revision. Values live in the backend under those revisions.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::key_index::{KeyAt, KeyIndex};
use super::revision::Revision;

/// A key range as the v3 API gives it: `end` empty = just `key`; `end` = "\0" = every key ≥
/// `key`; otherwise [key, end).
#[derive(Debug, Clone, Copy)]
pub struct KeyRange<'a> {
    pub key: &'a [u8],
    pub end: &'a [u8],
}

impl<'a> KeyRange<'a> {
    pub fn new(key: &'a [u8], end: &'a [u8]) -> KeyRange<'a> {
        KeyRange { key, end }
    }

    pub fn is_single(&self) -> bool {
        self.end.is_empty()
    }

    fn bounds(&self) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
        if self.end == [0] {
            (Bound::Included(self.key), Bound::Unbounded)
        } else {
            (Bound::Included(self.key), Bound::Excluded(self.end))
        }
    }

    /// True when the range selects nothing (end ≤ key for a real range).
    pub fn is_empty_range(&self) -> bool {
        !self.is_single() && self.end != [0] && self.end <= self.key
    }

    /// True when `k` falls in this range.
    pub fn contains(&self, k: &[u8]) -> bool {
        if self.is_single() {
            return k == self.key;
        }
        if self.end == [0] {
            return k >= self.key;
        }
        k >= self.key && k < self.end
    }
}

#[derive(Debug, Default)]
pub struct Index {
    /// Boxed slices, not Vecs: a million keys save 8 bytes each (no capacity).
    keys: BTreeMap<Box<[u8]>, KeyIndex>,
}

impl Index {
    pub fn new() -> Index {
        Index::default()
    }

    pub fn put(&mut self, key: &[u8], rev: Revision) {
        match self.keys.get_mut(key) {
            Some(ki) => ki.put(rev),
            None => {
                let mut ki = KeyIndex::new();
                ki.put(rev);
                self.keys.insert(key.into(), ki);
            }
        }
    }

    /// `put` of a revision read back from the backend (see `KeyIndex::restore`).
    pub fn restore(&mut self, key: &[u8], rev: Revision, create_revision: i64, version: i64) {
        match self.keys.get_mut(key) {
            Some(ki) => ki.restore(rev, create_revision, version),
            None => {
                let mut ki = KeyIndex::new();
                ki.restore(rev, create_revision, version);
                self.keys.insert(key.into(), ki);
            }
        }
    }

    /// Records a delete; false when the key was not alive.
    pub fn tombstone(&mut self, key: &[u8], rev: Revision) -> bool {
        self.keys.get_mut(key).is_some_and(|ki| ki.tombstone(rev))
    }

    pub fn get(&self, key: &[u8], at: i64) -> Option<KeyAt> {
        self.keys.get(key)?.get(at)
    }

    /// Calls `f(key, state)` for each key of `range` alive at revision `at`, in key order,
    /// until `f` returns false.
    pub fn visit(&self, range: KeyRange<'_>, at: i64, mut f: impl FnMut(&[u8], KeyAt) -> bool) {
        for (k, ki) in self.histories(range) {
            if let Some(s) = ki.get(at)
                && !f(k, s)
            {
                return;
            }
        }
    }

    /// The histories of the keys of `range`, in key order.
    fn histories(&self, range: KeyRange<'_>) -> impl Iterator<Item = (&[u8], &KeyIndex)> {
        let (one, span) = if range.is_single() {
            (self.keys.get_key_value(range.key), None)
        } else if range.is_empty_range() {
            (None, None)
        } else {
            (None, Some(self.keys.range::<[u8], _>(range.bounds())))
        };
        one.into_iter()
            .chain(span.into_iter().flatten())
            .map(|(k, ki)| (&**k, ki))
    }

    /// The keys of `range` alive at `at` with their state, at most `limit` (0 = no limit).
    pub fn range(&self, range: KeyRange<'_>, at: i64, limit: usize) -> Vec<(Vec<u8>, KeyAt)> {
        let mut out = Vec::new();
        self.visit(range, at, |k, s| {
            out.push((k.to_vec(), s));
            limit == 0 || out.len() < limit
        });
        out
    }

    /// How many keys of `range` are alive at `at`.
    pub fn count(&self, range: KeyRange<'_>, at: i64) -> usize {
        self.histories(range)
            .filter(|(_, ki)| ki.alive_at(at))
            .count()
    }

    /// Keys of `range` alive now (for DeleteRange), in order.
    pub fn alive_keys(&self, range: KeyRange<'_>) -> Vec<Vec<u8>> {
        self.range(range, i64::MAX, 0)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// Compacts every key at `at`; returns the revisions that must stay in the backend as the
    /// state at `at` (everything else at or below `at` may be deleted).
    pub fn compact(&mut self, at: i64) -> std::collections::HashSet<Revision> {
        let mut keep = std::collections::HashSet::new();
        self.keys.retain(|_, ki| {
            let c = ki.compact(at);
            if let Some(r) = c.kept {
                keep.insert(r);
            }
            !c.empty
        });
        keep
    }

    /// Compacts at `at` the keys after `after` (all keys when None), at most `max` of them:
    /// returns the revisions that must stay in the backend as those keys' state at `at`, and
    /// the last key visited when more keys follow. A compaction in chunks lets writers and
    /// readers in between.
    pub fn compact_chunk(
        &mut self,
        at: i64,
        after: Option<&[u8]>,
        max: usize,
    ) -> (Vec<Revision>, Option<Vec<u8>>) {
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let mut keep = Vec::new();
        let mut emptied = Vec::new();
        let mut last = None;
        let mut visited = 0;
        for (k, ki) in self.keys.range_mut::<[u8], _>((lower, Bound::Unbounded)) {
            if visited == max {
                break;
            }
            visited += 1;
            let c = ki.compact(at);
            if let Some(r) = c.kept {
                keep.push(r);
            }
            if c.empty {
                emptied.push(k.clone());
            }
            last = Some(k);
        }
        let next = if visited == max {
            last.map(|k| k.to_vec())
        } else {
            None
        };
        for k in emptied {
            self.keys.remove(&k);
        }
        (keep, next)
    }

    /// Number of keys with any history in the index.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    #[test]
    fn ranges_prefixes_and_from_key() {
        let mut ix = Index::new();
        ix.put(b"a", r(1));
        ix.put(b"b", r(2));
        ix.put(b"ba", r(3));
        ix.put(b"c", r(4));
        assert!(ix.tombstone(b"b", r(5)));
        assert!(!ix.tombstone(b"zz", r(6)));

        let keys = |rng, at, limit| -> Vec<Vec<u8>> {
            ix.range(rng, at, limit)
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(
            keys(KeyRange::new(b"b", b"c"), 4, 0),
            vec![b"b".to_vec(), b"ba".to_vec()]
        );
        assert_eq!(keys(KeyRange::new(b"b", b"c"), 5, 0), vec![b"ba".to_vec()]);
        assert_eq!(
            keys(KeyRange::new(b"a", b"\0"), 5, 2),
            vec![b"a".to_vec(), b"ba".to_vec()]
        );
        assert_eq!(keys(KeyRange::new(b"c", b"a"), 5, 0), Vec::<Vec<u8>>::new());
        assert_eq!(ix.count(KeyRange::new(b"\0", b"\0"), 5), 3);
        assert_eq!(ix.get(b"b", 3).map(|s| s.modified), Some(r(2)));
        assert_eq!(ix.alive_keys(KeyRange::new(b"a", b"\0")).len(), 3);
    }

    #[test]
    fn compaction_returns_the_revisions_to_keep_and_drops_dead_keys() {
        let mut ix = Index::new();
        ix.put(b"x", r(1));
        ix.put(b"x", r(2));
        ix.put(b"y", r(3));
        ix.tombstone(b"y", r(4));
        ix.put(b"z", r(5));
        let keep = ix.compact(4);
        assert_eq!(keep, [r(2)].into_iter().collect());
        assert_eq!(ix.len(), 2);
        assert_eq!(ix.get(b"x", 4).map(|s| s.version), Some(2));
    }
}
