// The chaos suite's history checker: etcd-style revision reasoning over every operation the
// clients invoked (invoke/complete times, results) and the revision history each member keeps.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};

/// Nanoseconds since the run started.
pub type Nanos = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Put { key: String, value: String },
    Get { key: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The server acknowledged the put at this revision.
    Put { revision: i64 },
    /// The read ran at `revision` and saw the key at `found` = (value, mod_revision), or no key.
    Get {
        revision: i64,
        found: Option<(String, i64)>,
    },
    /// An error or a timeout: a put may or may not have happened; a read tells nothing.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct Op {
    pub client: usize,
    pub call: Call,
    pub invoke: Nanos,
    pub complete: Nanos,
    pub outcome: Outcome,
}

/// One change in a member's history (a watch of the whole keyspace from the first revision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub revision: i64,
    pub key: String,
    pub value: String,
    /// A delete (a lease's expiry); the workload itself only puts.
    pub deleted: bool,
}

/// The workload's keys; other keys (the lease checks') count only for the revision sequence.
pub const WORKLOAD_PREFIX: &str = "chaos/";

/// Checks the histories and the operations; every anomaly found, as a sentence.
///
/// - the members' histories are equal, strictly ordered and gap-free from `first_revision`;
/// - every acknowledged put is in the history at its revision, with its key and value;
/// - every write in the history was invoked by a client, once (no phantom, no duplicate);
/// - revisions respect real time: an operation that completed before another was invoked has
///   a lower (a read: not higher) revision, so the revision order is a linearization;
/// - every read saw exactly the key's state at its revision in that order.
pub fn check(ops: &[Op], histories: &[Vec<Event>], first_revision: i64) -> Vec<String> {
    let mut bad = Vec::new();
    let Some(history) = histories.first() else {
        return vec!["no member history".into()];
    };
    for (i, h) in histories.iter().enumerate().skip(1) {
        if h != history {
            let at = h
                .iter()
                .zip(history)
                .position(|(a, b)| a != b)
                .unwrap_or(h.len().min(history.len()));
            bad.push(format!(
                "member {i}'s history differs from member 0's at entry {at} ({} vs {} events)",
                h.len(),
                history.len()
            ));
        }
    }
    // One revision may hold several events (a lease revoked with its keys), never a gap.
    let mut prev = first_revision - 1;
    for e in history {
        if e.revision != prev + 1 && (e.revision != prev || prev < first_revision) {
            bad.push(format!(
                "history jumps from revision {prev} to {} (missing or reordered revisions)",
                e.revision
            ));
        }
        prev = e.revision;
    }
    let history: Vec<&Event> = history
        .iter()
        .filter(|e| e.key.starts_with(WORKLOAD_PREFIX))
        .collect();
    for e in &history {
        if e.deleted {
            bad.push(format!(
                "revision {} deletes {}, which no client deleted",
                e.revision, e.key
            ));
        }
    }
    let by_rev: BTreeMap<i64, &Event> = history.iter().map(|e| (e.revision, *e)).collect();

    // Who wrote what: values are unique per invocation.
    let mut invoked: HashMap<&str, &Op> = HashMap::new();
    for op in ops {
        if let Call::Put { value, .. } = &op.call
            && invoked.insert(value.as_str(), op).is_some()
        {
            bad.push(format!("the workload put value {value} twice"));
        }
    }
    let mut seen_values = HashSet::new();
    // Writes with the revision the history gives them; completion is unknown (never) for
    // puts whose answer was lost.
    let mut writes: Vec<(Nanos, Option<Nanos>, i64)> = Vec::new();
    for e in &history {
        if !seen_values.insert(e.value.as_str()) {
            bad.push(format!(
                "value {} applied twice (revision {})",
                e.value, e.revision
            ));
        }
        match invoked.get(e.value.as_str()) {
            None => bad.push(format!(
                "revision {} holds {}={}, which no client wrote",
                e.revision, e.key, e.value
            )),
            Some(op) => {
                if let Call::Put { key, .. } = &op.call
                    && key != &e.key
                {
                    bad.push(format!(
                        "value {} was put on {key}, applied on {}",
                        e.value, e.key
                    ));
                }
                let done = matches!(op.outcome, Outcome::Put { .. }).then_some(op.complete);
                writes.push((op.invoke, done, e.revision));
            }
        }
    }
    for op in ops {
        if let (Call::Put { key, value }, Outcome::Put { revision }) = (&op.call, &op.outcome) {
            match by_rev.get(revision) {
                Some(e) if &e.key == key && &e.value == value => {}
                Some(e) => bad.push(format!(
                    "acknowledged put {key}={value} at revision {revision} lost: the history has {}={} there",
                    e.key, e.value
                )),
                None => bad.push(format!(
                    "acknowledged put {key}={value} at revision {revision} lost: no such revision"
                )),
            }
        }
    }

    // Real time: every completed operation with the revision it observed or made.
    // (revision, invoke, complete, is_write)
    let mut timed: Vec<(i64, Nanos, Nanos, bool)> = Vec::new();
    for op in ops {
        match &op.outcome {
            Outcome::Put { revision } => timed.push((*revision, op.invoke, op.complete, true)),
            Outcome::Get { revision, .. } => timed.push((*revision, op.invoke, op.complete, false)),
            Outcome::Unknown => {}
        }
    }
    // (a) what completed before an operation was invoked is not newer than what it observes.
    let mut by_complete: Vec<(Nanos, i64, bool)> = timed.iter().map(|t| (t.2, t.0, t.3)).collect();
    by_complete.extend(writes.iter().filter_map(|w| w.1.map(|c| (c, w.2, true))));
    by_complete.sort_unstable();
    let mut by_invoke: Vec<&(i64, Nanos, Nanos, bool)> = timed.iter().collect();
    by_invoke.sort_unstable_by_key(|t| t.1);
    let (mut j, mut max_write, mut max_any) = (0, i64::MIN, i64::MIN);
    for t in &by_invoke {
        while j < by_complete.len() && by_complete[j].0 < t.1 {
            max_any = max_any.max(by_complete[j].1);
            if by_complete[j].2 {
                max_write = max_write.max(by_complete[j].1);
            }
            j += 1;
        }
        // A write gets a revision above everything finished before it began; a read sees
        // at least every write finished before it began, and never goes back in time.
        let (floor_rev, what) = if t.3 {
            (max_any.saturating_add(1), "put")
        } else {
            (max_write.max(max_any), "read")
        };
        if t.0 < floor_rev {
            bad.push(format!(
                "{what} invoked at {} ns observed revision {}, but revision {} had completed before it began",
                t.1,
                t.0,
                floor_rev - i64::from(t.3)
            ));
        }
    }
    // (b) a write invoked after an operation completed has a higher revision than it observed.
    let mut by_write_invoke: Vec<(Nanos, i64)> = writes.iter().map(|w| (w.0, w.2)).collect();
    by_write_invoke.sort_unstable();
    let mut done: Vec<(Nanos, i64)> = timed.iter().map(|t| (t.2, t.0)).collect();
    done.sort_unstable();
    let (mut j, mut max_done) = (0, i64::MIN);
    for (inv, rev) in by_write_invoke {
        while j < done.len() && done[j].0 < inv {
            max_done = max_done.max(done[j].1);
            j += 1;
        }
        if rev <= max_done {
            bad.push(format!(
                "the write at revision {rev} was invoked at {inv} ns, after an operation that observed revision {max_done} had completed"
            ));
        }
    }

    // Reads: the key's state at the read's revision.
    let mut per_key: HashMap<&str, Vec<(i64, &str)>> = HashMap::new();
    for e in &history {
        per_key
            .entry(e.key.as_str())
            .or_default()
            .push((e.revision, e.value.as_str()));
    }
    let last = history
        .last()
        .map(|e| e.revision)
        .unwrap_or(first_revision - 1);
    for op in ops {
        let (Call::Get { key }, Outcome::Get { revision, found }) = (&op.call, &op.outcome) else {
            continue;
        };
        if *revision > last {
            bad.push(format!(
                "a read of {key} ran at revision {revision}, beyond the history's {last}"
            ));
            continue;
        }
        let state = per_key.get(key.as_str()).and_then(|v| {
            let n = v.partition_point(|(r, _)| r <= revision);
            n.checked_sub(1).map(|i| (v[i].1.to_string(), v[i].0))
        });
        if &state != found {
            bad.push(format!(
                "a read of {key} at revision {revision} saw {found:?}; the history has {state:?}"
            ));
        }
    }
    bad
}

/// One lease of the lease client: granted with `ttl_secs`, one key put on it, then read
/// now and then until after its TTL.
#[derive(Clone, Debug)]
pub struct LeaseOp {
    pub key: String,
    pub ttl_secs: i64,
    /// When the grant was invoked: the lease cannot start (nor end) earlier.
    pub grant_invoke: Nanos,
    /// When the put with the lease was acknowledged (None: it was not).
    pub put_complete: Option<Nanos>,
    /// Linearizable reads of the key: (invoke, complete, found).
    pub reads: Vec<(Nanos, Nanos, bool)>,
}

/// A lease never expires before its TTL: a read that began after the leased put was
/// acknowledged and ended before grant + TTL finds the key.
pub fn check_leases(leases: &[LeaseOp]) -> Vec<String> {
    let mut bad = Vec::new();
    for l in leases {
        let Some(put) = l.put_complete else { continue };
        let ttl_end = l.grant_invoke + l.ttl_secs as u64 * 1_000_000_000;
        for &(invoke, complete, found) in &l.reads {
            if invoke > put && complete < ttl_end && !found {
                bad.push(format!(
                    "{} was gone {} ms after its lease's grant began, before its TTL of {} s",
                    l.key,
                    (complete - l.grant_invoke) / 1_000_000,
                    l.ttl_secs
                ));
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(client: usize, key: &str, value: &str, t: (Nanos, Nanos), rev: Option<i64>) -> Op {
        Op {
            client,
            call: Call::Put {
                key: format!("{WORKLOAD_PREFIX}{key}"),
                value: value.into(),
            },
            invoke: t.0,
            complete: t.1,
            outcome: rev.map_or(Outcome::Unknown, |revision| Outcome::Put { revision }),
        }
    }

    fn get(key: &str, t: (Nanos, Nanos), rev: i64, found: Option<(&str, i64)>) -> Op {
        Op {
            client: 9,
            call: Call::Get {
                key: format!("{WORKLOAD_PREFIX}{key}"),
            },
            invoke: t.0,
            complete: t.1,
            outcome: Outcome::Get {
                revision: rev,
                found: found.map(|(v, r)| (v.to_string(), r)),
            },
        }
    }

    fn ev(revision: i64, key: &str, value: &str) -> Event {
        Event {
            revision,
            key: format!("{WORKLOAD_PREFIX}{key}"),
            value: value.into(),
            deleted: false,
        }
    }

    fn good() -> (Vec<Op>, Vec<Event>) {
        let ops = vec![
            put(0, "a", "v1", (0, 10), Some(2)),
            put(1, "b", "v2", (5, 20), Some(3)),
            // Lost answer, but applied.
            put(2, "a", "v3", (21, 0), None),
            get("a", (40, 50), 4, Some(("v3", 4))),
            get("b", (1, 4), 1, None),
            // Failed and never applied.
            put(0, "a", "v4", (60, 70), None),
        ];
        let h = vec![ev(2, "a", "v1"), ev(3, "b", "v2"), ev(4, "a", "v3")];
        (ops, h)
    }

    #[test]
    fn a_correct_history_passes() {
        let (ops, h) = good();
        assert_eq!(check(&ops, &[h.clone(), h], 2), Vec::<String>::new());
    }

    #[test]
    fn a_lost_acknowledged_write_is_found() {
        let (ops, mut h) = good();
        h.remove(1);
        h[1].revision = 3;
        let bad = check(&ops, &[h], 2);
        assert!(bad.iter().any(|b| b.contains("lost")), "{bad:?}");
    }

    #[test]
    fn a_stale_read_is_found() {
        let (mut ops, h) = good();
        // Invoked after v2 (revision 3) was acknowledged, yet reads revision 2.
        ops.push(get("b", (30, 35), 2, None));
        let bad = check(&ops, &[h], 2);
        assert!(
            bad.iter()
                .any(|b| b.contains("had completed before it began")),
            "{bad:?}"
        );
    }

    #[test]
    fn a_read_of_the_wrong_value_is_found() {
        let (mut ops, h) = good();
        ops.push(get("a", (40, 50), 4, Some(("v1", 2))));
        let bad = check(&ops, &[h], 2);
        assert!(bad.iter().any(|b| b.contains("the history has")), "{bad:?}");
    }

    #[test]
    fn phantoms_duplicates_gaps_and_diverging_members_are_found() {
        let (ops, h) = good();
        let mut phantom = h.clone();
        phantom.push(ev(5, "a", "nobody"));
        assert!(
            check(&ops, &[phantom], 2)
                .iter()
                .any(|b| b.contains("no client wrote"))
        );
        let mut dup = h.clone();
        dup.push(ev(5, "a", "v1"));
        assert!(
            check(&ops, &[dup], 2)
                .iter()
                .any(|b| b.contains("applied twice"))
        );
        let mut gap = h.clone();
        gap[2].revision = 6;
        assert!(check(&ops, &[gap], 2).iter().any(|b| b.contains("jumps")));
        let mut other = h.clone();
        other.pop();
        assert!(
            check(&ops, &[h, other], 2)
                .iter()
                .any(|b| b.contains("differs"))
        );
    }

    #[test]
    fn a_write_ordered_against_real_time_is_found() {
        // v2 was invoked after v1 was acknowledged but got the lower revision.
        let ops = vec![
            put(0, "a", "v1", (0, 10), Some(3)),
            put(1, "b", "v2", (20, 30), Some(2)),
        ];
        let h = vec![ev(2, "b", "v2"), ev(3, "a", "v1")];
        let bad = check(&ops, &[h], 2);
        assert!(!bad.is_empty());
    }

    #[test]
    fn other_keys_and_their_deletes_count_only_for_the_revision_sequence() {
        let (ops, mut h) = good();
        let lease = |revision, deleted| Event {
            revision,
            key: "lease/1".into(),
            value: String::new(),
            deleted,
        };
        h.push(lease(5, false));
        h.push(lease(6, true));
        assert_eq!(check(&ops, &[h.clone()], 2), Vec::<String>::new());
        h.push(lease(8, true));
        assert!(check(&ops, &[h], 2).iter().any(|b| b.contains("jumps")));
    }

    #[test]
    fn a_lease_gone_before_its_ttl_is_found() {
        let secs = 1_000_000_000;
        let l = LeaseOp {
            key: "lease/1".into(),
            ttl_secs: 2,
            grant_invoke: 0,
            put_complete: Some(secs / 10),
            // Found, then gone after 2.5 s (fine), but also gone at 1.5 s (not fine).
            reads: vec![(secs / 2, secs, true), (2 * secs, 5 * secs / 2, false)],
        };
        assert!(check_leases(std::slice::from_ref(&l)).is_empty());
        let mut early = l;
        early.reads.push((secs, 3 * secs / 2, false));
        assert_eq!(check_leases(&[early]).len(), 1);
    }
}
