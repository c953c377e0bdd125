// Compaction in the background: an applied Compact request only records the compaction point
// (reads below it are refused at once); this worker then compacts the key index in chunks and
// deletes the old revisions from the backend in bounded batches, pausing between batches.
//
// So a compaction of millions of revisions never holds the writer, the readers or the raft
// thread for long (etcd's scheduled compaction works the same way).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::store::KvStore;

/// How a compaction paces itself.
#[derive(Debug, Clone, Copy)]
pub struct CompactionConfig {
    /// Revisions scanned per backend batch (--experimental-compaction-batch-limit).
    pub batch_limit: usize,
    /// Pause between batches (--experimental-compaction-sleep-interval).
    pub sleep_interval: Duration,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            batch_limit: 1000,
            sleep_interval: Duration::from_millis(10),
        }
    }
}

/// Keys of the index compacted per hold of the store's state lock.
pub(super) const INDEX_CHUNK: usize = 10_000;

#[derive(Default)]
struct Queue {
    pending: VecDeque<i64>,
    /// A job is being worked on.
    running: bool,
    /// The store is gone: the worker ends.
    stop: bool,
}

/// The compactions scheduled and not finished yet, shared by the store and its worker.
#[derive(Default)]
pub(super) struct Jobs {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued, when one ends and at stop.
    changed: Condvar,
}

fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Jobs {
    pub(super) fn push(&self, rev: i64) {
        lock(&self.queue).pending.push_back(rev);
        self.changed.notify_all();
    }

    /// Forgets queued jobs (the store's db was replaced; a running job notices by itself).
    pub(super) fn clear(&self) {
        lock(&self.queue).pending.clear();
        self.changed.notify_all();
    }

    /// Waits until no compaction is queued or running.
    pub(super) fn wait_idle(&self) {
        let mut q = lock(&self.queue);
        while !q.stop && (q.running || !q.pending.is_empty()) {
            q = self.changed.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub(super) fn stop(&self) {
        lock(&self.queue).stop = true;
        self.changed.notify_all();
    }

    /// The next job, marking it running; None once the store is gone.
    fn next(&self) -> Option<i64> {
        let mut q = lock(&self.queue);
        q.running = false;
        self.changed.notify_all();
        loop {
            if q.stop {
                return None;
            }
            if let Some(rev) = q.pending.pop_front() {
                q.running = true;
                return Some(rev);
            }
            q = self.changed.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Starts the worker of `store`; it ends when the store is dropped.
pub(super) fn spawn_worker(store: Weak<KvStore>, jobs: Arc<Jobs>) {
    let jobs_on_failure = jobs.clone();
    let spawned = std::thread::Builder::new()
        .name("mvcc-compaction".into())
        .spawn(move || {
            while let Some(rev) = jobs.next() {
                let Some(store) = store.upgrade() else { break };
                match store.run_compaction(rev) {
                    Ok(true) => tracing::info!(compact_revision = rev, "finished scheduled compaction"),
                    Ok(false) => tracing::info!(compact_revision = rev, "compaction abandoned: the db was replaced"),
                    Err(e) => tracing::error!(compact_revision = rev, error = %e, "scheduled compaction failed"),
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the compaction worker; compactions will not free space");
        // Nobody would ever finish a job: waiters must not wait for one.
        jobs_on_failure.stop();
    }
}
