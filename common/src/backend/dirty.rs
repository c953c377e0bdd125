// What write transactions change while an online defrag copies the db: the keys and buckets
// the copy must take again from a later version before it may replace the file.

use std::collections::{BTreeMap, BTreeSet};

/// One bucket's changes since the defrag last looked.
#[derive(Default)]
pub(crate) struct DirtyBucket {
    /// Keys put or deleted (their new value is read from the source when replayed).
    pub keys: BTreeSet<Vec<u8>>,
    /// The bucket was created or deleted: its keys are all copied again (rare: etcd creates
    /// its buckets at start and never deletes them).
    pub whole: bool,
}

/// The changed keys and buckets, recorded by write transactions while a defrag runs. Names
/// only, never values: the memory grows with the keys written during the defrag, not with
/// their sizes, and the replay reads each value once from a consistent version.
#[derive(Default)]
pub(crate) struct Dirty {
    pub buckets: BTreeMap<Vec<u8>, DirtyBucket>,
    keys: usize,
}

impl Dirty {
    fn entry(&mut self, bucket: &[u8]) -> &mut DirtyBucket {
        // Looked up first: the bucket name is allocated only the first time.
        if !self.buckets.contains_key(bucket) {
            self.buckets.insert(bucket.to_vec(), DirtyBucket::default());
        }
        self.buckets
            .get_mut(bucket)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// A put or delete of `key` (its sequence number changing counts as a change too).
    pub fn key(&mut self, bucket: &[u8], key: &[u8]) {
        let b = self.entry(bucket);
        if !b.whole && !b.keys.contains(key) {
            b.keys.insert(key.to_vec());
            self.keys += 1;
        }
    }

    /// The bucket's sequence number may have changed.
    pub fn sequence(&mut self, bucket: &[u8]) {
        self.entry(bucket);
    }

    /// The bucket was created or deleted.
    pub fn whole(&mut self, bucket: &[u8]) {
        let b = self.entry(bucket);
        let dropped = std::mem::take(&mut b.keys).len();
        b.whole = true;
        self.keys -= dropped;
    }

    /// How many keys and buckets a replay has to look at.
    pub fn len(&self) -> usize {
        self.keys + self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_key_once_and_a_whole_bucket_drops_its_keys() {
        let mut d = Dirty::default();
        d.key(b"key", b"a");
        d.key(b"key", b"a");
        d.key(b"key", b"b");
        d.sequence(b"meta");
        assert_eq!(d.len(), 2 + 2);
        d.whole(b"key");
        d.key(b"key", b"c");
        assert_eq!(d.len(), 2);
        assert!(d.buckets[&b"key"[..]].whole);
        assert!(d.buckets[&b"key"[..]].keys.is_empty());
    }
}
