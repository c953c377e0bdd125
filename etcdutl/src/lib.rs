// etcdutl as a library: offline work on etcd data dirs and snapshot files (status, restore,
// check, inspect, repair, backup, defrag, hashkv), used by the `etcdutl` binary and by etcdctl.
//
// etcdctl's deprecated `snapshot status|restore` call `snapshot` here, so both tools give
// the same results, texts and files.

pub mod backup;
pub mod check;
pub mod datadir;
pub mod defrag;
pub mod error;
pub mod hashkv;
pub mod inspect;
pub mod output;
pub mod progress;
pub mod repair;
pub mod snapshot;

pub use error::{Error, Result};
