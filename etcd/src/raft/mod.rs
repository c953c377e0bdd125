//! Raft consensus as a pure state machine: no I/O, clock, threads or OS randomness. The caller
//! ticks it, steps messages in, proposes, and carries out the `Ready` batches it hands out.
//!
//! # Using it
//!
//! ```
//! use etcd::raft::{Config, MemStorage, Peer, RawNode};
//!
//! /// One pass of the caller's loop (a real server persists to its WAL, sends the messages
//! /// to peers and applies committed entries to its state machine).
//! fn handle_ready(node: &mut RawNode<MemStorage>) -> Vec<Vec<u8>> {
//!     let mut applied = Vec::new();
//!     while node.has_ready() {
//!         let rd = node.ready();
//!         if let Some(hs) = rd.hard_state {
//!             node.storage_mut().set_hard_state(hs);
//!         }
//!         node.storage_mut().append(&rd.entries);
//!         // (send rd.messages here)
//!         for e in &rd.committed_entries {
//!             applied.push(e.data().to_vec());
//!         }
//!         node.advance(rd);
//!     }
//!     applied
//! }
//!
//! // A new single-member cluster: the members are written into the log at term 1, and must
//! // be applied before the node may campaign.
//! let mut node = RawNode::new(&Config::new(1), MemStorage::new()).unwrap();
//! node.bootstrap(&[Peer { id: 1, context: None }]).unwrap();
//! handle_ready(&mut node);
//! node.campaign().unwrap();
//! handle_ready(&mut node);
//! assert_eq!(node.leader_id(), 1);
//!
//! node.propose(b"hello".to_vec()).unwrap();
//! assert_eq!(handle_ready(&mut node), vec![b"hello".to_vec()]);
//! ```
//!
//! See [`Ready`] for the exact order of duties, and `tests/` for the paper tests and the
//! deterministic simulator.
//!
//! # Restarting
//!
//! Rebuild the storage from what was persisted (the WAL's hard state and entries, the latest
//! snapshot via `MemStorage::apply_snapshot`) and create the node with `Config::applied` set
//! to the index the state machine already holds (etcd passes the snapshot index). Committed
//! entries after it come out again in the first Readies, conf changes included: apply those
//! again with [`RawNode::apply_conf_change`] (the membership starts from the snapshot's). A
//! node does not campaign while it has committed conf changes left to apply.
//!
//! A member of the initial cluster whose storage holds nothing at all (it crashed before its
//! bootstrap Ready reached disk) must `bootstrap` again rather than restart empty: it promised
//! nothing to anyone, while replaying the cluster's log from scratch would pass through a
//! one-member configuration in which it could elect itself (the simulator found this).
//!
//! # What raft refuses
//!
//! Nothing that arrives through [`RawNode::step`] makes raft panic: unknown types, local-only
//! types, messages without a sender or from this node, terms or indexes beyond 2^62, and
//! responses from unknown peers are refused with an [`Error`]; inconsistent appends and
//! snapshots are dropped and logged. A `panic!` means raft's own invariants broke (e.g. the
//! caller skipped a Ready or applied past the commit index).
//!
//! # Layout
//!
//! - `raw_node`: the caller's API ([`RawNode`], [`Ready`]).
//! - `raft`: terms, roles and one step function per role.
//! - `log`, `log_unstable`, `storage`: the log across durable storage and the unstable tail.
//! - `tracker`, `quorum`: per-peer progress and flow control; majority arithmetic.
//! - `read_only`: ReadIndex.
//! - `config`, `errors`, `status`.

pub mod config;
pub mod errors;
pub mod log;
pub mod log_unstable;
pub mod quorum;
#[allow(clippy::module_inception)]
pub mod raft;
pub mod raw_node;
pub mod read_only;
pub mod status;
pub mod storage;
pub mod tracker;

#[cfg(test)]
mod tests;

pub use self::config::{Config, NONE};
pub use self::errors::{Error, Result, StorageError};
pub use self::raft::{CAMPAIGN_TRANSFER, SoftState, StateRole};
pub use self::raw_node::{Peer, RawNode, Ready, SnapshotStatus};
pub use self::read_only::ReadState;
pub use self::status::{PeerProgress, Status};
pub use self::storage::{MemStorage, RaftState, Storage};
pub use self::tracker::ProgressState;
