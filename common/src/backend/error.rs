// Errors of the bbolt-format backend: I/O, files that are not (or no longer) valid bbolt dbs,
// corrupt pages (always named by page id), and misuse of buckets and transactions.

use std::path::PathBuf;

/// Everything the backend can fail with. Corruption errors name the page, so an operator can
/// run `check()` (etcdutl) and decide whether to restore from a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {op} failed: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a bbolt database ({reason})")]
    NotBbolt { path: PathBuf, reason: String },
    #[error(
        "{path}: file is truncated: {len} bytes, but the meta says {need} bytes are in use; restore from a snapshot"
    )]
    Truncated { path: PathBuf, len: u64, need: u64 },
    #[error(
        "{path}: both meta pages are invalid (meta 0: {meta0}; meta 1: {meta1}); restore from a snapshot"
    )]
    BothMetasInvalid {
        path: PathBuf,
        meta0: String,
        meta1: String,
    },
    #[error("corrupt page {pgid}: {reason}; run check() and restore from a snapshot")]
    CorruptPage { pgid: u64, reason: String },
    #[error("bucket {0:?} not found")]
    BucketNotFound(String),
    #[error("bucket {0:?} already exists")]
    BucketExists(String),
    #[error("key {0:?} holds a bucket, not a value (or the other way round)")]
    IncompatibleValue(String),
    #[error("key is empty; bbolt keys must be 1..=32768 bytes")]
    KeyEmpty,
    #[error("key of {0} bytes is too large; bbolt keys must be at most 32768 bytes")]
    KeyTooLarge(usize),
    #[error("value of {0} bytes is too large; bbolt values must be below 2 GiB")]
    ValueTooLarge(usize),
    #[error("writes out of order: key {0:?} does not sort after the key before it")]
    Unsorted(String),
    #[error("the database was opened read-only; writes are refused")]
    ReadOnly,
    #[error(
        "{path}: txid {txid} is the largest possible, no transaction can follow it; restore from a snapshot"
    )]
    TxidExhausted { path: PathBuf, txid: u64 },
    #[error("an earlier commit failed half-way ({0}); close and re-open the database")]
    Poisoned(String),
}

pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn corrupt(pgid: u64, reason: impl Into<String>) -> Error {
    Error::CorruptPage {
        pgid,
        reason: reason.into(),
    }
}

pub(crate) fn io(path: &std::path::Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { path, op, source }
}

pub(crate) fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
