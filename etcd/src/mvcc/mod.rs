// The multi-version store: revisions, the in-memory key index, and (built on the backend) the
// KV operations and watch. See docs/ARCHITECTURE.md for what exists so far.

pub mod compaction;
pub mod index;
pub mod key_index;
pub mod revision;
pub mod store;
pub mod watch_hub;

pub use compaction::CompactionConfig;
pub use index::{Index, KeyRange};
pub use key_index::{KeyAt, KeyIndex};
pub use revision::Revision;
pub use store::{
    KvStore, MvccError, PrevKvInterest, RangeResult, ReadView, TxnRead, WriteTxn, prev_kv_missing,
};
