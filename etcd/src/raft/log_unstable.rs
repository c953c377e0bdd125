//! The tail of the log that raft holds but the caller has not yet persisted: entries appended
//! since the last `advance`, and a snapshot received from the leader but not yet installed.

use proto::raftpb::{Entry, Snapshot};

use super::storage::snapshot_index_term;

/// Entries (and possibly a snapshot) waiting to be written to stable storage.
///
/// Two jobs: it answers log queries for indexes past what the storage holds, and it is what a
/// `Ready` hands out for persisting. `entries[i]` has index `offset + i`; `offset` may be below
/// the storage's last index when a new leader overwrote a suffix that was already persisted,
/// and the caller's append then truncates storage accordingly.
#[derive(Debug, Clone, Default)]
pub struct Unstable {
    /// A snapshot to install, which supersedes everything in storage.
    pub snapshot: Option<Snapshot>,
    /// Entries not yet persisted, starting at `offset`.
    pub entries: Vec<Entry>,
    /// Index of `entries[0]`.
    pub offset: u64,
}

impl Unstable {
    /// An empty unstable log whose next entry will have index `offset`.
    pub fn new(offset: u64) -> Self {
        Unstable {
            snapshot: None,
            entries: Vec::new(),
            offset,
        }
    }

    /// The first index known only here: the index after a pending snapshot.
    pub fn maybe_first_index(&self) -> Option<u64> {
        self.snapshot.as_ref().map(|s| snapshot_index_term(s).0 + 1)
    }

    /// The last index known here, from the entries or else the pending snapshot.
    pub fn maybe_last_index(&self) -> Option<u64> {
        if !self.entries.is_empty() {
            return Some(self.offset + self.entries.len() as u64 - 1);
        }
        self.snapshot.as_ref().map(|s| snapshot_index_term(s).0)
    }

    /// The term at `index` if it is known here.
    pub fn maybe_term(&self, index: u64) -> Option<u64> {
        if index < self.offset {
            let (si, st) = self.snapshot.as_ref().map(snapshot_index_term)?;
            return (si == index).then_some(st);
        }
        let last = self.maybe_last_index()?;
        if index > last {
            return None;
        }
        Some(self.entries[(index - self.offset) as usize].term)
    }

    /// The caller persisted entries up to `(index, term)`: forget them. A mismatching term
    /// means the entry was replaced after that Ready was taken, so it stays.
    pub fn stable_to(&mut self, index: u64, term: u64) {
        if self.maybe_term(index) == Some(term) && index >= self.offset {
            let n = (index + 1 - self.offset) as usize;
            self.entries.drain(..n);
            self.offset = index + 1;
        }
    }

    /// The caller installed the snapshot at `index`: forget it.
    pub fn stable_snap_to(&mut self, index: u64) {
        if self
            .snapshot
            .as_ref()
            .is_some_and(|s| snapshot_index_term(s).0 == index)
        {
            self.snapshot = None;
        }
    }

    /// Holds a snapshot that replaces the whole log.
    pub fn restore(&mut self, snap: Snapshot) {
        self.offset = snapshot_index_term(&snap).0 + 1;
        self.entries.clear();
        self.snapshot = Some(snap);
    }

    /// Appends `ents`, dropping whatever they overwrite. Takes the entries by value so a
    /// proposal's data is moved into the log, not copied.
    pub fn truncate_and_append(&mut self, ents: impl Into<Vec<Entry>>) {
        let ents = ents.into();
        let Some(after) = ents.first().map(|e| e.index) else {
            return;
        };
        let end = self.offset + self.entries.len() as u64;
        if after == end {
            // The common case: a plain extension.
        } else if after <= self.offset {
            // Replaces everything held here (and, once persisted, part of storage).
            self.offset = after;
            self.entries.clear();
        } else {
            self.entries.truncate((after - self.offset) as usize);
        }
        self.entries.extend(ents);
    }

    /// Entries in `[lo, hi)`.
    ///
    /// # Panics
    /// If the range is not within the entries held: the caller (the raft log) checked already.
    pub fn slice(&self, lo: u64, hi: u64) -> &[Entry] {
        let end = self.offset + self.entries.len() as u64;
        assert!(
            lo <= hi && lo >= self.offset && hi <= end,
            "unstable.slice[{lo},{hi}) out of bound [{},{end})",
            self.offset
        );
        &self.entries[(lo - self.offset) as usize..(hi - self.offset) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::raftpb::SnapshotMetadata;

    fn ent(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Entry::default()
        }
    }

    fn snap(index: u64, term: u64) -> Snapshot {
        Snapshot {
            data: None,
            metadata: Some(SnapshotMetadata {
                index,
                term,
                conf_state: None,
            }),
        }
    }

    fn unstable(entries: Vec<Entry>, offset: u64, snapshot: Option<Snapshot>) -> Unstable {
        Unstable {
            snapshot,
            entries,
            offset,
        }
    }

    #[test]
    fn first_last_and_term() {
        // (unstable, first, last, term of index 4, term of index 5)
        let cases = [
            (
                unstable(vec![ent(5, 1)], 5, None),
                None,
                Some(5),
                None,
                Some(1),
            ),
            (unstable(vec![], 0, None), None, None, None, None),
            (
                unstable(vec![ent(5, 1)], 5, Some(snap(4, 1))),
                Some(5),
                Some(5),
                Some(1),
                Some(1),
            ),
            (
                unstable(vec![], 5, Some(snap(4, 2))),
                Some(5),
                Some(4),
                Some(2),
                None,
            ),
        ];
        for (i, (u, first, last, t4, t5)) in cases.into_iter().enumerate() {
            assert_eq!(u.maybe_first_index(), first, "case {i}");
            assert_eq!(u.maybe_last_index(), last, "case {i}");
            assert_eq!(u.maybe_term(4), t4, "case {i}");
            assert_eq!(u.maybe_term(5), t5, "case {i}");
        }
    }

    #[test]
    fn stable_to_ignores_replaced_entries() {
        // (entries, offset, stable_to index, term, remaining offset, remaining len)
        let cases = [
            // persisted what was handed out
            (vec![ent(5, 1)], 5, 5, 1, 6, 0),
            (vec![ent(5, 1), ent(6, 1)], 5, 5, 1, 6, 1),
            // entry 6 was replaced by a term-2 entry after the Ready was taken
            (vec![ent(6, 2)], 6, 6, 1, 6, 1),
            // out of range
            (vec![ent(5, 1)], 5, 4, 1, 5, 1),
            (vec![ent(5, 1)], 5, 6, 1, 5, 1),
        ];
        for (i, (ents, off, idx, term, woff, wlen)) in cases.into_iter().enumerate() {
            let mut u = unstable(ents, off, None);
            u.stable_to(idx, term);
            assert_eq!((u.offset, u.entries.len()), (woff, wlen), "case {i}");
        }
    }

    #[test]
    fn truncate_and_append_cases() {
        // (entries at offset 5, appended, want offset, want entries)
        let cases = [
            // extend
            (vec![ent(6, 2)], 5, vec![ent(5, 1), ent(6, 2)]),
            // replace everything
            (vec![ent(5, 2), ent(6, 2)], 5, vec![ent(5, 2), ent(6, 2)]),
            (vec![ent(4, 2)], 4, vec![ent(4, 2)]),
        ];
        for (i, (app, woff, want)) in cases.into_iter().enumerate() {
            let mut u = unstable(vec![ent(5, 1)], 5, None);
            u.truncate_and_append(app);
            assert_eq!((u.offset, &u.entries), (woff, &want), "case {i}");
        }
        // truncate in the middle
        let mut u = unstable(vec![ent(5, 1), ent(6, 1), ent(7, 1)], 5, None);
        u.truncate_and_append(&[ent(6, 2)]);
        assert_eq!(u.entries, vec![ent(5, 1), ent(6, 2)]);
    }

    #[test]
    fn restore_and_stable_snap() {
        let mut u = unstable(vec![ent(5, 1)], 5, None);
        u.restore(snap(6, 2));
        assert_eq!((u.offset, u.entries.len()), (7, 0));
        assert_eq!(u.maybe_last_index(), Some(6));
        u.stable_snap_to(5);
        assert!(u.snapshot.is_some());
        u.stable_snap_to(6);
        assert!(u.snapshot.is_none());
    }
}
