//! Errors of the raft state machine and of its log storage, with etcd's wording because the
//! server surfaces some of these strings to clients and operators.

use thiserror::Error;

/// A `Result` whose error is a raft [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// What the raft state machine refuses, and why.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The log storage could not answer (see [`StorageError`]).
    #[error(transparent)]
    Store(#[from] StorageError),
    /// A proposal was not accepted: no leader is known, forwarding is disabled, a leader
    /// transfer is in progress, or this node is not a member. The caller should retry or fail
    /// the request (etcd answers `etcdserver: no leader` when no leader is known).
    #[error("raft: proposal dropped")]
    ProposalDropped,
    /// A message type that only the local node may generate (tick-driven or report) arrived
    /// through `step`, i.e. from the network.
    #[error("raft: cannot step raft local message")]
    StepLocalMsg,
    /// A response-type message arrived from a node this raft does not track.
    #[error("raft: cannot step as peer not found")]
    StepPeerNotFound,
    /// A message that cannot be decoded into something raft understands.
    #[error("raft: malformed message: {0}")]
    MalformedMessage(String),
    /// The configuration was rejected; the text names the offending values.
    #[error("raft: invalid config: {0}")]
    ConfigInvalid(String),
    /// The persisted state handed to raft at start-up contradicts itself.
    #[error("raft: corrupt persisted state: {0}")]
    CorruptState(String),
}

/// Errors of the [`Storage`](super::Storage) contract.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum StorageError {
    /// The requested index is at or below the last compaction: only a snapshot can help.
    #[error("requested index is unavailable due to compaction")]
    Compacted,
    /// The requested index is beyond the last entry the storage holds.
    #[error("requested entry at index is unavailable")]
    Unavailable,
    /// A snapshot older than the one already held was offered.
    #[error("requested index is older than the existing snapshot")]
    SnapshotOutOfDate,
    /// The storage is producing a snapshot and cannot hand one out right now; raft retries later.
    #[error("snapshot is temporarily unavailable")]
    SnapshotTemporarilyUnavailable,
}
