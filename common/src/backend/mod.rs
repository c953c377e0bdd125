// etcd's storage backend: a crash-safe, copy-on-write mmap B+tree in bbolt's exact file format,
// so member/snap/db files and snapshots move between real etcd and us in both directions.
//
// Layers, bottom up: `page` (page header and element codecs), `meta` (the two meta pages),
// `freelist`, `node` (tree views, cursor, copy-on-write write path), `tx` (read and write
// transactions), `db` (open, commit protocol, reader tracking, remap), then the whole-file
// tools: `check` (structure check, stats, hash), `defrag` (online compaction: a copy that
// catches up with the keys writers change meanwhile, recorded by `dirty`; snapshot stream) and
// `batch` (etcd's batching layer with a read buffer).
//
// Commit protocol: dirty pages → fdatasync → next meta (slot txid % 2, FNV-1a checksum) →
// fdatasync. A crash anywhere leaves the previous meta valid. Pages freed by commit T are
// reused only after every reader of a version older than T has finished.

mod batch;
mod check;
mod db;
mod defrag;
mod dirty;
mod error;
mod freelist;
mod meta;
mod node;
mod page;
mod tx;

pub use batch::{Batch, BatchConfig, BatchWrite};
pub use check::{BucketStats, Stats};
pub use db::{DEFAULT_PAGE_SIZE, Db, IoObserver, Options};
pub use defrag::DefragStep;
pub use error::{Error, Result};
pub use node::{Cursor, Entry, KeyWrite};
pub use tx::{Bucket, ReadTx, ReadTxn, WriteTx};

/// etcd's bucket names (FORMATS.md), for callers that create an etcd-shaped db.
pub mod buckets {
    pub const KEY: &[u8] = b"key";
    pub const META: &[u8] = b"meta";
    pub const LEASE: &[u8] = b"lease";
    pub const ALARM: &[u8] = b"alarm";
    pub const CLUSTER: &[u8] = b"cluster";
    pub const MEMBERS: &[u8] = b"members";
    pub const MEMBERS_REMOVED: &[u8] = b"members_removed";
    pub const AUTH: &[u8] = b"auth";
    pub const AUTH_USERS: &[u8] = b"authUsers";
    pub const AUTH_ROLES: &[u8] = b"authRoles";
    /// Every bucket a fresh etcd 3.4 creates.
    pub const ALL: &[&[u8]] = &[
        KEY,
        META,
        LEASE,
        ALARM,
        CLUSTER,
        MEMBERS,
        MEMBERS_REMOVED,
        AUTH,
        AUTH_USERS,
        AUTH_ROLES,
    ];
}
