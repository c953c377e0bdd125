// Matches applied entries to the client requests waiting for them: a request registers its id
// before proposing, and the apply step hands the result to that id (if anyone still waits).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

pub struct Wait<T> {
    waiting: Mutex<HashMap<u64, oneshot::Sender<T>>>,
}

impl<T> Default for Wait<T> {
    fn default() -> Self {
        Wait {
            waiting: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Wait<T> {
    pub fn register(&self, id: u64) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        rx
    }

    /// Delivers `value` to the waiter of `id`; false when nobody waits (another member's
    /// request, or a client that gave up).
    pub fn trigger(&self, id: u64, value: T) -> bool {
        let tx = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        match tx {
            Some(tx) => tx.send(value).is_ok(),
            None => false,
        }
    }

    /// Forgets `id` (the client timed out).
    pub fn cancel(&self, id: u64) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Request ids unique across members and restarts: the member's low 16 bits, then the start
/// time in milliseconds, then a counter (etcd's scheme, so ids never repeat after a restart).
pub struct IdGen {
    prefix: u64,
    next: std::sync::atomic::AtomicU64,
}

impl IdGen {
    pub fn new(member_id: u64) -> IdGen {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        IdGen {
            prefix: (member_id & 0xffff) << 48,
            next: std::sync::atomic::AtomicU64::new((ms & 0xff_ffff_ffff) << 8),
        }
    }

    pub fn next(&self) -> u64 {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.prefix | (n & 0x0000_ffff_ffff_ffff)
    }
}
