// Process-wide observers for disk latencies (each WAL fdatasync, each backend commit), so the
// server's metrics see every one without this crate depending on the server.

use std::sync::OnceLock;
use std::time::Duration;

static WAL_FSYNC: OnceLock<fn(Duration)> = OnceLock::new();
static BACKEND_COMMIT: OnceLock<fn(Duration)> = OnceLock::new();

/// Calls `f` with the duration of every WAL fdatasync from now on (first caller wins).
pub fn on_wal_fsync(f: fn(Duration)) {
    let _ = WAL_FSYNC.set(f);
}

/// Calls `f` with the duration of every backend commit from now on (first caller wins).
pub fn on_backend_commit(f: fn(Duration)) {
    let _ = BACKEND_COMMIT.set(f);
}

pub(crate) fn wal_fsync(took: Duration) {
    if let Some(f) = WAL_FSYNC.get() {
        f(took);
    }
}

pub(crate) fn backend_commit(took: Duration) {
    if let Some(f) = BACKEND_COMMIT.get() {
        f(took);
    }
}
