// The fuzz targets' shared harness (common's formats, etcdutl's readers, etcd's and etcdctl's
// inputs): proptest settings with PROPTEST_CASES and a kept regressions file, and a watchdog.
#![allow(dead_code)]

use std::sync::mpsc;
use std::time::Duration;

use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};

/// Longer than any sane parse of these small files takes even in a debug build on a loaded
/// machine; a cycle of page ids runs forever.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(20);

/// `default_cases` unless PROPTEST_CASES says otherwise (long runs); failures are saved in
/// `regressions` (relative to the package: cargo runs tests there) and replayed first.
pub fn config(default_cases: u32, regressions: &'static str) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        // A hang costs CASE_TIMEOUT per shrink step: keep shrinking finite.
        max_shrink_iters: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..ProptestConfig::default()
    }
}

/// Runs `f` in its own thread (the default 2 MiB stack: deep recursion shows as a crash) and
/// returns its result; a panic in it fails the case, and so does outliving `CASE_TIMEOUT`.
pub fn watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(format!("fuzz-{what}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn the case thread");
    match rx.recv_timeout(CASE_TIMEOUT) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => panic!("{what}: the case thread ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            // The thread is left running: a hang cannot be interrupted.
            panic!("{what}: no result after {CASE_TIMEOUT:?} (a cycle or an unbounded loop)")
        }
    }
}
