// Bounds on the raft loop's inbox: client proposals and reads wait for a place (back-pressure
// on the API), peers' messages beyond the bound are dropped as etcd drops them (raft resends).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Proposals and linearizable reads queued for the raft loop at once; more wait for a place.
pub const REQUEST_SLOTS: usize = 8192;
/// Peer messages queued at once (etcd's receive buffer per peer is 4096 messages).
pub const PEER_SLOTS: usize = 4096;
/// At most one warning per this long about dropped peer messages.
const DROP_WARN_EVERY: Duration = Duration::from_secs(1);

/// A place in the raft loop's inbox, given back when the loop takes the message.
pub type Slot = OwnedSemaphorePermit;

pub struct Inbox {
    requests: Arc<Semaphore>,
    peers: Arc<Semaphore>,
    last_drop_warn: Mutex<Option<Instant>>,
}

impl Default for Inbox {
    fn default() -> Inbox {
        Inbox::with_slots(REQUEST_SLOTS, PEER_SLOTS)
    }
}

impl Inbox {
    pub fn with_slots(requests: usize, peers: usize) -> Inbox {
        Inbox {
            requests: Arc::new(Semaphore::new(requests)),
            peers: Arc::new(Semaphore::new(peers)),
            last_drop_warn: Mutex::new(None),
        }
    }

    /// Waits for a place for a client's proposal or read (the caller bounds the wait).
    pub async fn request_slot(&self) -> Option<Slot> {
        // The semaphore is never closed; None would only mean it was.
        self.requests.clone().acquire_owned().await.ok()
    }

    /// A place for a peer's message, or None (and a warning now and then) when the loop is
    /// that far behind: the message is dropped, and raft sends it again.
    pub fn peer_slot(&self, from: u64) -> Option<Slot> {
        match self.peers.clone().try_acquire_owned() {
            Ok(s) => Some(s),
            Err(_) => {
                let mut last = self
                    .last_drop_warn
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if last.is_none_or(|t| t.elapsed() >= DROP_WARN_EVERY) {
                    *last = Some(Instant::now());
                    tracing::warn!(
                        from = %crate::membership::id_hex(from),
                        "dropped internal Raft message since receiving buffer is full (overloaded network)"
                    );
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_messages_beyond_the_bound_are_refused_until_one_is_taken() {
        let inbox = Inbox::with_slots(1, 2);
        let a = inbox.peer_slot(1).expect("first");
        let _b = inbox.peer_slot(1).expect("second");
        assert!(inbox.peer_slot(1).is_none());
        drop(a);
        assert!(inbox.peer_slot(1).is_some());
    }

    #[tokio::test]
    async fn requests_wait_for_a_place() {
        let inbox = Arc::new(Inbox::with_slots(1, 1));
        let held = inbox.request_slot().await.expect("slot");
        let waiter = {
            let inbox = inbox.clone();
            tokio::spawn(async move { inbox.request_slot().await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "a second request got past a full inbox"
        );
        drop(held);
        assert!(waiter.await.expect("join"));
    }
}
