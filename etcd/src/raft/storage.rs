//! The read side of raft's durable log (`Storage`) and `MemStorage`, the in-memory
//! implementation the server keeps next to its WAL and the tests use on its own.

use prost::Message as _;
use proto::raftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};

use super::errors::StorageError;

/// A storage `Result`.
pub type StorageResult<T> = std::result::Result<T, StorageError>;

/// What raft needs to start: the persisted hard state and the membership it last knew.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RaftState {
    /// Term, vote and commit index as last persisted.
    pub hard_state: HardState,
    /// Voters and learners as of the latest snapshot.
    pub conf_state: ConfState,
}

/// The durable part of the log, as raft reads it. Raft never writes through this trait: the
/// caller persists what a `Ready` hands out and then appends it to its storage itself.
///
/// Indexes are raft log indexes; ranges are half-open `[low, high)`. Every method returns
/// owned data (raft keeps none of it by reference). An index at or below the last compaction
/// yields [`StorageError::Compacted`]; an index past the last entry yields
/// [`StorageError::Unavailable`].
pub trait Storage {
    /// The hard state and conf state to start from.
    fn initial_state(&self) -> StorageResult<RaftState>;
    /// Entries in `[low, high)`, cut after the first entry that takes the total encoded size
    /// over `max_size` (at least one entry is always returned when the range is not empty).
    fn entries(&self, low: u64, high: u64, max_size: u64) -> StorageResult<Vec<Entry>>;
    /// The term of the entry at `index`. The index of the latest snapshot is answered too
    /// (with the snapshot's term), although its entry is gone.
    fn term(&self, index: u64) -> StorageResult<u64>;
    /// The first index that may still be read with `entries` (snapshot index + 1).
    fn first_index(&self) -> StorageResult<u64>;
    /// The index of the last entry (the snapshot index when there is none after it).
    fn last_index(&self) -> StorageResult<u64>;
    /// The latest snapshot, for sending to a follower that needs compacted entries.
    fn snapshot(&self) -> StorageResult<Snapshot>;
}

/// Encoded size of an entry, the unit of every raft size limit.
pub(crate) fn entry_size(e: &Entry) -> u64 {
    e.encoded_len() as u64
}

/// Keeps the longest prefix of `ents` whose total size is within `max_size`, but never fewer
/// than one entry, so a single oversized entry still makes progress.
pub(crate) fn limit_size(ents: &mut Vec<Entry>, max_size: u64) {
    if ents.len() <= 1 || max_size == u64::MAX {
        return;
    }
    let mut size = 0u64;
    let mut keep = 0;
    for e in ents.iter() {
        size = size.saturating_add(entry_size(e));
        if keep > 0 && size > max_size {
            break;
        }
        keep += 1;
    }
    ents.truncate(keep);
}

/// Index and term carried by a snapshot (zero for an empty one).
pub(crate) fn snapshot_index_term(s: &Snapshot) -> (u64, u64) {
    s.metadata.as_ref().map_or((0, 0), |m| (m.index, m.term))
}

/// An in-memory log: a snapshot, the entries after it and the hard state.
///
/// `ents[0]` is a placeholder standing for the snapshot (its index and term), so that the term
/// of the snapshot index can be answered and offsets are simple.
#[derive(Debug, Clone)]
pub struct MemStorage {
    hard_state: HardState,
    snapshot: Snapshot,
    ents: Vec<Entry>,
}

impl Default for MemStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStorage {
    /// An empty log with no members; a new cluster is then set up with `RawNode::bootstrap`
    /// (as etcd does, writing the initial members as conf change entries).
    pub fn new() -> Self {
        MemStorage {
            hard_state: HardState::default(),
            snapshot: Snapshot {
                data: None,
                metadata: Some(SnapshotMetadata::default()),
            },
            ents: vec![Entry::default()],
        }
    }

    /// An empty log whose membership is given up front (useful in tests; a node added later
    /// learns such a membership only from a snapshot).
    pub fn new_with_conf_state(voters: &[u64], learners: &[u64]) -> Self {
        let mut s = Self::new();
        if let Some(m) = s.snapshot.metadata.as_mut() {
            m.conf_state = Some(ConfState {
                voters: voters.to_vec(),
                learners: learners.to_vec(),
                ..ConfState::default()
            });
        }
        s
    }

    fn offset(&self) -> u64 {
        self.ents[0].index
    }

    fn last(&self) -> u64 {
        self.offset() + self.ents.len() as u64 - 1
    }

    /// The hard state as last set.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// Records the hard state from a `Ready`.
    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    /// Replaces the log with a snapshot received from the leader. A snapshot not newer than
    /// the one held is refused.
    pub fn apply_snapshot(&mut self, snap: Snapshot) -> StorageResult<()> {
        let (index, term) = snapshot_index_term(&snap);
        if index <= self.offset() {
            return Err(StorageError::SnapshotOutOfDate);
        }
        self.snapshot = snap;
        self.ents = vec![Entry {
            term,
            index,
            ..Entry::default()
        }];
        if self.hard_state.commit < index {
            self.hard_state.commit = index;
        }
        Ok(())
    }

    /// Makes a snapshot at `index` (which the caller has applied) with the membership and
    /// state machine data as of that index. It does not compact; call `compact` for that.
    pub fn create_snapshot(
        &mut self,
        index: u64,
        conf_state: Option<ConfState>,
        data: Vec<u8>,
    ) -> StorageResult<&Snapshot> {
        let (snap_index, _) = snapshot_index_term(&self.snapshot);
        if index <= snap_index {
            return Err(StorageError::SnapshotOutOfDate);
        }
        if index > self.last() {
            return Err(StorageError::Unavailable);
        }
        let term = self.ents[(index - self.offset()) as usize].term;
        let mut meta = self.snapshot.metadata.take().unwrap_or_default();
        meta.index = index;
        meta.term = term;
        if let Some(cs) = conf_state {
            meta.conf_state = Some(cs);
        }
        self.snapshot = Snapshot {
            data: Some(data),
            metadata: Some(meta),
        };
        Ok(&self.snapshot)
    }

    /// Drops the entries before `compact_index`; that index becomes the new placeholder.
    /// The caller must not compact past what it has applied.
    pub fn compact(&mut self, compact_index: u64) -> StorageResult<()> {
        if compact_index <= self.offset() {
            return Err(StorageError::Compacted);
        }
        if compact_index > self.last() {
            return Err(StorageError::Unavailable);
        }
        let cut = (compact_index - self.offset()) as usize;
        let placeholder = Entry {
            term: self.ents[cut].term,
            index: compact_index,
            ..Entry::default()
        };
        self.ents.drain(..=cut);
        self.ents.insert(0, placeholder);
        Ok(())
    }

    /// Drops the entries up to `index` as `compact` does, and moves the snapshot's index and
    /// term there, its conf state and data as they were. Only for a server whose snapshots
    /// for followers are built from its state machine at send time (etcd-rs rebuilds every
    /// MsgSnap at its applied index), so that the log held in memory can be shorter than the
    /// last snapshot file leaves it: raft then tracks a follower sent a snapshot from `index`.
    pub fn compact_to_mark(&mut self, index: u64) -> StorageResult<()> {
        self.compact(index)?;
        let meta = self.snapshot.metadata.get_or_insert_with(Default::default);
        meta.index = self.ents[0].index;
        meta.term = self.ents[0].term;
        Ok(())
    }

    /// The index the snapshot stands at (0 before any).
    pub fn snapshot_index(&self) -> u64 {
        snapshot_index_term(&self.snapshot).0
    }

    /// Appends entries from a `Ready`, replacing any conflicting suffix. Entries already
    /// compacted away are skipped.
    ///
    /// # Panics
    /// If the entries leave a gap after the last stored entry: the caller skipped a Ready.
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first_new) = entries.first().map(|e| e.index) else {
            return;
        };
        let first = self.offset() + 1;
        let last_new = first_new + entries.len() as u64 - 1;
        if last_new < first {
            return;
        }
        let skip = first.saturating_sub(first_new) as usize;
        let entries = &entries[skip..];
        let at = entries[0].index - self.offset();
        assert!(
            at <= self.ents.len() as u64,
            "missing log entry [last: {}, append at: {}]",
            self.last(),
            entries[0].index
        );
        self.ents.truncate(at as usize);
        self.ents.extend_from_slice(entries);
    }
}

impl Storage for MemStorage {
    fn initial_state(&self) -> StorageResult<RaftState> {
        Ok(RaftState {
            hard_state: self.hard_state,
            conf_state: self
                .snapshot
                .metadata
                .as_ref()
                .and_then(|m| m.conf_state.clone())
                .unwrap_or_default(),
        })
    }

    fn entries(&self, low: u64, high: u64, max_size: u64) -> StorageResult<Vec<Entry>> {
        if low <= self.offset() {
            return Err(StorageError::Compacted);
        }
        if high > self.last() + 1 || low > high {
            return Err(StorageError::Unavailable);
        }
        let off = self.offset();
        let mut ents = self.ents[(low - off) as usize..(high - off) as usize].to_vec();
        limit_size(&mut ents, max_size);
        Ok(ents)
    }

    fn term(&self, index: u64) -> StorageResult<u64> {
        if index < self.offset() {
            return Err(StorageError::Compacted);
        }
        if index > self.last() {
            return Err(StorageError::Unavailable);
        }
        Ok(self.ents[(index - self.offset()) as usize].term)
    }

    fn first_index(&self) -> StorageResult<u64> {
        Ok(self.offset() + 1)
    }

    fn last_index(&self) -> StorageResult<u64> {
        Ok(self.last())
    }

    fn snapshot(&self) -> StorageResult<Snapshot> {
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Entry::default()
        }
    }

    /// A storage compacted at 3 holding entries 4 and 5, as in the cases below.
    fn storage_3_to_5() -> MemStorage {
        let mut s = MemStorage::new();
        s.append(&[ent(1, 1), ent(2, 2), ent(3, 3), ent(4, 4), ent(5, 5)]);
        s.compact(3).unwrap();
        s
    }

    #[test]
    fn term_answers_from_the_snapshot_index_on() {
        let s = storage_3_to_5();
        let cases = [
            (2, Err(StorageError::Compacted)),
            (3, Ok(3)),
            (4, Ok(4)),
            (5, Ok(5)),
            (6, Err(StorageError::Unavailable)),
        ];
        for (i, want) in cases {
            assert_eq!(s.term(i), want, "index {i}");
        }
        assert_eq!(s.first_index(), Ok(4));
        assert_eq!(s.last_index(), Ok(5));
    }

    #[test]
    fn entries_respect_bounds_and_size() {
        let s = storage_3_to_5();
        let one = entry_size(&ent(4, 4));
        let cases = [
            // at or below the compaction point
            (3, 5, u64::MAX, Err(StorageError::Compacted)),
            // past the end
            (4, 7, u64::MAX, Err(StorageError::Unavailable)),
            // whole range
            (4, 6, u64::MAX, Ok(vec![ent(4, 4), ent(5, 5)])),
            // size limit keeps at least one entry
            (4, 6, 0, Ok(vec![ent(4, 4)])),
            (4, 6, one, Ok(vec![ent(4, 4)])),
            (4, 6, 2 * one, Ok(vec![ent(4, 4), ent(5, 5)])),
        ];
        for (lo, hi, max, want) in cases {
            assert_eq!(s.entries(lo, hi, max), want, "[{lo},{hi}) max {max}");
        }
    }

    #[test]
    fn compact_refuses_the_past_and_the_future() {
        let mut s = storage_3_to_5();
        assert_eq!(s.compact(2), Err(StorageError::Compacted));
        assert_eq!(s.compact(3), Err(StorageError::Compacted));
        assert_eq!(s.compact(6), Err(StorageError::Unavailable));
        s.compact(4).unwrap();
        assert_eq!(s.term(4), Ok(4));
        assert_eq!(s.first_index(), Ok(5));
    }

    #[test]
    fn append_truncates_conflicts_and_skips_compacted() {
        let cases: Vec<(Vec<Entry>, Vec<Entry>)> = vec![
            // all already compacted
            (
                vec![ent(1, 1), ent(2, 2)],
                vec![ent(3, 3), ent(4, 4), ent(5, 5)],
            ),
            // the appended entries are the log's new tail: whatever followed them goes
            (vec![ent(3, 3), ent(4, 4)], vec![ent(3, 3), ent(4, 4)]),
            // conflicting suffix replaced
            (
                vec![ent(4, 6), ent(5, 6)],
                vec![ent(3, 3), ent(4, 6), ent(5, 6)],
            ),
            // straddling the compaction point
            (
                vec![ent(2, 3), ent(3, 3), ent(4, 5)],
                vec![ent(3, 3), ent(4, 5)],
            ),
            // plain extension
            (
                vec![ent(6, 5)],
                vec![ent(3, 3), ent(4, 4), ent(5, 5), ent(6, 5)],
            ),
        ];
        for (i, (input, want)) in cases.into_iter().enumerate() {
            let mut s = storage_3_to_5();
            s.append(&input);
            assert_eq!(s.ents, want, "case {i}");
        }
    }

    #[test]
    fn compact_to_mark_moves_the_snapshot_index_with_the_log() {
        let mut s = storage_3_to_5();
        let cs = ConfState {
            voters: vec![1, 2],
            ..ConfState::default()
        };
        s.create_snapshot(3, Some(cs.clone()), b"v2".to_vec())
            .expect("snapshot at 3");
        s.compact_to_mark(4).expect("4 is in the log");
        assert_eq!(s.first_index(), Ok(5));
        assert_eq!(s.term(4), Ok(4));
        assert_eq!(s.term(3), Err(StorageError::Compacted));
        let snap = s.snapshot().expect("a snapshot");
        assert_eq!(snapshot_index_term(&snap), (4, 4));
        assert_eq!(snap.data(), b"v2");
        assert_eq!(snap.metadata.and_then(|m| m.conf_state), Some(cs));
        assert_eq!(s.compact_to_mark(4), Err(StorageError::Compacted));
        assert_eq!(s.compact_to_mark(6), Err(StorageError::Unavailable));
        // A snapshot file taken later at an index already passed is not recorded again.
        assert_eq!(
            s.create_snapshot(4, None, Vec::new()).map(|_| ()),
            Err(StorageError::SnapshotOutOfDate)
        );
    }

    #[test]
    #[should_panic(expected = "missing log entry")]
    fn append_with_a_gap_panics() {
        storage_3_to_5().append(&[ent(7, 5)]);
    }

    #[test]
    fn snapshots_replace_the_log() {
        let mut s = storage_3_to_5();
        let cs = ConfState {
            voters: vec![1, 2, 3],
            ..ConfState::default()
        };
        let snap = s
            .create_snapshot(4, Some(cs.clone()), b"data".to_vec())
            .unwrap();
        assert_eq!(snapshot_index_term(snap), (4, 4));
        assert_eq!(
            s.create_snapshot(4, None, vec![]).err(),
            Some(StorageError::SnapshotOutOfDate)
        );
        assert_eq!(s.initial_state().unwrap().conf_state, cs);

        let mut follower = MemStorage::new();
        follower.apply_snapshot(s.snapshot().unwrap()).unwrap();
        assert_eq!(follower.first_index(), Ok(5));
        assert_eq!(follower.last_index(), Ok(4));
        assert_eq!(follower.term(4), Ok(4));
        assert_eq!(follower.hard_state().commit, 4);
        assert_eq!(
            follower.apply_snapshot(s.snapshot().unwrap()),
            Err(StorageError::SnapshotOutOfDate)
        );
    }
}
