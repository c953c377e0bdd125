//! Refusals on the peer port, logged once per (peer, reason): etcd 3.4 logs every refused
//! request, and a bad peer redialling every 100 ms would write about 20 lines a second.
//!
//! A peer is named by its `X-Server-From` when it sends one, else by its address without the
//! port (requests without etcd headers, and each new connection's port differs).

use std::collections::HashSet;
use std::sync::Mutex;

/// Pairs remembered before the set starts afresh: enough for every peer of any real
/// cluster, small enough that a stream of made-up senders cannot grow it without bound
/// (at worst they get logged again, as etcd logs each of them).
const REMEMBERED: usize = 4096;

/// Which (peer, reason) refusals have been logged.
#[derive(Default)]
pub struct Refusals {
    seen: Mutex<HashSet<(String, String)>>,
}

impl Refusals {
    /// True the first time `peer` is refused for `reason` (the caller logs then).
    pub fn first(&self, peer: &str, reason: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let key = (peer.to_string(), reason.to_string());
        if seen.contains(&key) {
            return false;
        }
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        seen.insert(key);
        true
    }
}

/// The address part of `ip:port` (`[v6]:port` too), as a peer's name in the set.
pub fn host_of(remote: &str) -> &str {
    match remote.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => remote,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_peer_and_reason_is_first_once() {
        let r = Refusals::default();
        assert!(r.first("a", "cluster ID mismatch deadbeef"));
        assert!(!r.first("a", "cluster ID mismatch deadbeef"));
        assert!(r.first("a", "cluster ID mismatch beef"));
        assert!(r.first("b", "cluster ID mismatch deadbeef"));
        for i in 0..REMEMBERED {
            r.first(&i.to_string(), "x");
        }
        // The set started afresh on the way: still bounded.
        assert!(r.seen.lock().unwrap().len() <= REMEMBERED);
        assert_eq!(host_of("127.0.0.1:4000"), "127.0.0.1");
        assert_eq!(host_of("[::1]:4000"), "[::1]");
        assert_eq!(host_of("unix:/tmp/x"), "unix:/tmp/x");
    }
}
