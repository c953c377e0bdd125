// Leases: TTL-bound grants that keys attach to. Grants and revocations go through raft and
// are stored in the `lease` bucket; keep-alives and expiry are the leader's own business
// (expired leases are revoked by proposing a revoke), as in etcd.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::apply::kv::LeaseLookup;

/// etcd's largest lease TTL in seconds.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

#[derive(Debug, Clone)]
struct Lease {
    ttl: i64,
    expiry: Instant,
    keys: BTreeSet<Vec<u8>>,
}

#[derive(Debug, Default)]
struct Leases {
    by_id: BTreeMap<i64, Lease>,
    /// The lease of each attached key (etcd's item map): a write learns which lease its key
    /// leaves without reading the old value from the db.
    of_key: HashMap<Vec<u8>, i64>,
}

/// The set of live leases and the keys attached to each.
#[derive(Debug)]
pub struct Lessor {
    leases: Mutex<Leases>,
    /// The shortest TTL granted: leases must outlive a leader election.
    min_ttl: i64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Lessor {
    /// `min_ttl` in seconds (etcd: 1.5 election timeouts, rounded up).
    pub fn new(min_ttl: i64) -> Lessor {
        Lessor {
            leases: Mutex::new(Leases::default()),
            min_ttl,
        }
    }

    pub fn min_ttl(&self) -> i64 {
        self.min_ttl
    }

    /// The TTL a grant of `ttl` really gets.
    pub fn effective_ttl(&self, ttl: i64) -> i64 {
        ttl.max(self.min_ttl)
    }

    /// Records a granted lease (from the apply of a grant, or loaded at start).
    pub fn grant(&self, id: i64, ttl: i64) {
        let lease = Lease {
            ttl,
            expiry: Instant::now() + Duration::from_secs(ttl.max(0) as u64),
            keys: BTreeSet::new(),
        };
        let mut ls = lock(&self.leases);
        if let Some(old) = ls.by_id.insert(id, lease) {
            ls.forget_keys(id, old.keys.iter());
        }
    }

    /// Forgets a lease; returns its keys (to delete) or None when it does not exist.
    pub fn revoke(&self, id: i64) -> Option<Vec<Vec<u8>>> {
        let mut ls = lock(&self.leases);
        let l = ls.by_id.remove(&id)?;
        ls.forget_keys(id, l.keys.iter());
        Some(l.keys.into_iter().collect())
    }

    pub fn attach(&self, id: i64, key: &[u8]) {
        let mut ls = lock(&self.leases);
        if let Some(l) = ls.by_id.get_mut(&id) {
            l.keys.insert(key.to_vec());
            ls.of_key.insert(key.to_vec(), id);
        }
    }

    pub fn detach(&self, id: i64, key: &[u8]) {
        let mut ls = lock(&self.leases);
        if let Some(l) = ls.by_id.get_mut(&id) {
            l.keys.remove(key);
        }
        if ls.of_key.get(key) == Some(&id) {
            ls.of_key.remove(key);
        }
    }

    /// The lease `key` is attached to, 0 for none.
    pub fn lease_of(&self, key: &[u8]) -> i64 {
        lock(&self.leases).of_key.get(key).copied().unwrap_or(0)
    }

    /// Renews a lease for its full TTL; returns the TTL, or None when it does not exist.
    /// Only the leader renews (followers forward), so this counts etcd's "renewed leases
    /// seen by the leader".
    pub fn renew(&self, id: i64) -> Option<i64> {
        let mut ls = lock(&self.leases);
        let l = ls.by_id.get_mut(&id)?;
        l.expiry = Instant::now() + Duration::from_secs(l.ttl.max(0) as u64);
        crate::metrics::METRICS.lease_renewed.inc();
        Some(l.ttl)
    }

    /// (remaining seconds, granted TTL, keys) of a lease.
    pub fn time_to_live(&self, id: i64) -> Option<(i64, i64, Vec<Vec<u8>>)> {
        let ls = lock(&self.leases);
        let l = ls.by_id.get(&id)?;
        let left = l.expiry.saturating_duration_since(Instant::now());
        // Rounded up, as etcd reports whole seconds that have not fully elapsed.
        let secs = left.as_secs() as i64 + i64::from(left.subsec_nanos() > 0);
        Some((secs, l.ttl, l.keys.iter().cloned().collect()))
    }

    pub fn ids(&self) -> Vec<i64> {
        lock(&self.leases).by_id.keys().copied().collect()
    }

    /// Leases whose time is up.
    pub fn expired(&self) -> Vec<i64> {
        let now = Instant::now();
        lock(&self.leases)
            .by_id
            .iter()
            .filter(|(_, l)| l.expiry <= now)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Takes over the leases of `other` (rebuilt from a store whose contents were replaced).
    pub fn replace_with(&self, other: Lessor) {
        let fresh = std::mem::take(&mut *lock(&other.leases));
        *lock(&self.leases) = fresh;
    }

    /// Gives every lease at least `extra` more time: a new leader does not know when the old
    /// one last renewed them, so it must not expire them early.
    pub fn extend_all(&self, extra: Duration) {
        let now = Instant::now();
        for l in lock(&self.leases).by_id.values_mut() {
            l.expiry = l
                .expiry
                .max(now + Duration::from_secs(l.ttl.max(0) as u64) + extra);
        }
    }
}

impl Leases {
    /// Drops the key-to-lease entries of `keys` that still name lease `id`.
    fn forget_keys<'a>(&mut self, id: i64, keys: impl Iterator<Item = &'a Vec<u8>>) {
        for k in keys {
            if self.of_key.get(k) == Some(&id) {
                self.of_key.remove(k);
            }
        }
    }
}

impl LeaseLookup for Lessor {
    fn lease_exists(&self, id: i64) -> bool {
        lock(&self.leases).by_id.contains_key(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_attach_revoke() {
        let l = Lessor::new(2);
        assert_eq!(l.effective_ttl(1), 2);
        l.grant(7, 10);
        l.attach(7, b"a");
        l.attach(7, b"b");
        l.detach(7, b"a");
        let (left, granted, keys) = l.time_to_live(7).unwrap();
        assert!((9..=10).contains(&left));
        assert_eq!(granted, 10);
        assert_eq!(keys, vec![b"b".to_vec()]);
        assert_eq!((l.lease_of(b"a"), l.lease_of(b"b")), (0, 7));
        assert!(l.lease_exists(7));
        assert_eq!(l.revoke(7), Some(vec![b"b".to_vec()]));
        assert_eq!(l.revoke(7), None);
        assert_eq!(l.lease_of(b"b"), 0);
        assert!(l.expired().is_empty());
        l.grant(8, 0);
        assert_eq!(l.expired(), vec![8]);
    }
}
