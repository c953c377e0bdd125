// etcd's on-disk formats and the file tools under them: the WAL, the .snap files, the
// bbolt-format backend and the small fsync/lock/preallocate helpers they share.
//
// Everything here reads and writes files exactly as etcd 3.4/3.5 does (../shared/FORMATS.md),
// so data dirs and snapshots move between etcd and us in both directions.

pub mod backend;
pub mod fileutil;
pub mod gofmt;
pub mod observe;
pub mod snap;
pub mod wal;
