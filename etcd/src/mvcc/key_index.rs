// The history of one key in the in-memory index: its generations (a generation runs from the
// put that created the key to the delete that removed it) and the revisions of each change.
//
// Example: put@2, put@4, delete@6, put@8 gives two generations:
//   [created 2: revs 2 (v1), 4 (v2), deleted at 6] and [created 8: revs 8 (v1), alive].
// A read at revision 5 sees mod 4/version 2, at 6 or 7 nothing, at 9 mod 8/version 1.
// Compacting at 5 keeps rev 4 (the state at 5) and drops rev 2; compacting at 7 drops the whole
// first generation, tombstone included, since nothing at or after 7 can see it.

use std::num::NonZeroI64;

use super::revision::Revision;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Generation {
    /// Revision of the put that started this generation (kept even when compacted away).
    created: Revision,
    /// Version of `revs[0]`: 1 unless earlier revisions were compacted away.
    first_version: i64,
    /// Put revisions, ascending.
    revs: Vec<Revision>,
    /// The delete that ended this generation.
    tombstone: Option<Revision>,
}

impl Generation {
    fn last(&self) -> Revision {
        self.tombstone
            .or_else(|| self.revs.last().copied())
            .unwrap_or(self.created)
    }
}

/// The state of a key as of some revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAt {
    pub modified: Revision,
    pub created: Revision,
    pub version: i64,
}

/// What a compaction did to one key.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Compacted {
    /// The revision kept as the key's state at the compaction point, if the key is alive there.
    pub kept: Option<Revision>,
    /// True when no history is left and the key can leave the index.
    pub empty: bool,
}

/// A key's history. Most keys hold one revision of one live generation (a key put once, or
/// what a compaction left of it), kept inline; only a longer history allocates its
/// generations. The index holds one of these per key, so its size is the index's heap
/// (issue 19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIndex {
    repr: Repr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Repr {
    /// One live generation with one revision: `modified`, of version `version`, in the
    /// generation created at main revision `created`.
    One {
        modified: Revision,
        created: i64,
        /// Non-zero (versions start at 1), which lets the enum fit in 32 bytes.
        version: NonZeroI64,
    },
    /// Any other history (none at all included), oldest generation first, with the main
    /// revision of the key's latest change, negated when that was a delete (0: no history):
    /// a read at or after it (a count at the current revision) needs no generation.
    Gens {
        latest: i64,
        gens: Box<[Generation]>,
    },
}

impl Default for KeyIndex {
    fn default() -> KeyIndex {
        KeyIndex {
            repr: Repr::Gens {
                latest: 0,
                gens: Box::default(),
            },
        }
    }
}

const FIRST_VERSION: NonZeroI64 = NonZeroI64::new(1).unwrap();

/// The creation revision of a generation whose first revision left is `first`: the
/// creation's sub-revision is only known when that is the creation itself, and only its
/// main revision is ever reported.
fn created_rev(first: Revision, created: i64) -> Revision {
    if created == first.main {
        first
    } else {
        Revision::new(created, 0)
    }
}

/// Changes the generations as a Vec (a new generation, a compaction: both rare), boxed again
/// exactly as long as they are.
fn edit(gens: &mut Box<[Generation]>, f: impl FnOnce(&mut Vec<Generation>)) {
    let mut v = std::mem::take(gens).into_vec();
    f(&mut v);
    *gens = v.into_boxed_slice();
}

impl KeyIndex {
    pub fn new() -> KeyIndex {
        KeyIndex::default()
    }

    /// The generations and the latest change, made explicit for a change (a key held inline
    /// gets its one generation).
    fn gens_mut(&mut self) -> (&mut Box<[Generation]>, &mut i64) {
        if let Repr::One {
            modified,
            created,
            version,
        } = self.repr
        {
            self.repr = Repr::Gens {
                latest: modified.main,
                gens: Box::new([Generation {
                    created: created_rev(modified, created),
                    first_version: version.get(),
                    revs: vec![modified],
                    tombstone: None,
                }]),
            };
        }
        match &mut self.repr {
            Repr::Gens { gens, latest } => (gens, latest),
            Repr::One { .. } => unreachable!("converted above"),
        }
    }

    /// Goes back inline when the history is down to one revision of one live generation.
    fn shrink(&mut self) {
        if let Repr::Gens { gens, .. } = &self.repr
            && let [only] = &gens[..]
            && let ([rev], None) = (only.revs.as_slice(), only.tombstone)
            && let Some(version) = NonZeroI64::new(only.first_version)
        {
            self.repr = Repr::One {
                modified: *rev,
                created: only.created.main,
                version,
            };
        }
    }

    /// Records a put at `rev` (which must be later than anything recorded): as a stored
    /// put read back, of version 1 if it starts a generation.
    pub fn put(&mut self, rev: Revision) {
        self.restore(rev, rev.main, 1);
    }

    /// Records a put at `rev` read back from the backend, whose stored key-value says
    /// `create_revision` and `version`: after a compaction the first revision left of a
    /// generation is not its creation, and a put reads both from here, not from the db.
    pub fn restore(&mut self, rev: Revision, create_revision: i64, version: i64) {
        if matches!(&self.repr, Repr::Gens { gens, .. } if gens.is_empty()) {
            self.repr = Repr::One {
                modified: rev,
                created: create_revision,
                version: NonZeroI64::new(version)
                    .unwrap_or(FIRST_VERSION)
                    .max(FIRST_VERSION),
            };
            return;
        }
        let (gens, latest) = self.gens_mut();
        *latest = rev.main;
        match gens.last_mut() {
            Some(g) if g.tombstone.is_none() => g.revs.push(rev),
            _ => edit(gens, |v| {
                v.push(Generation {
                    created: created_rev(rev, create_revision),
                    first_version: version.max(1),
                    revs: vec![rev],
                    tombstone: None,
                })
            }),
        }
    }

    /// Records a delete at `rev`; false if the key is not alive (nothing to delete).
    pub fn tombstone(&mut self, rev: Revision) -> bool {
        if !self.is_alive() {
            return false;
        }
        let (gens, latest) = self.gens_mut();
        match gens.last_mut() {
            Some(g) => {
                g.tombstone = Some(rev);
                *latest = -rev.main;
                true
            }
            None => false,
        }
    }

    /// True when the key exists now (its last generation has no tombstone).
    pub fn is_alive(&self) -> bool {
        match &self.repr {
            Repr::One { .. } => true,
            Repr::Gens { latest, .. } => *latest > 0,
        }
    }

    /// The latest change of any kind (put or delete).
    pub fn modified(&self) -> Option<Revision> {
        match &self.repr {
            Repr::One { modified, .. } => Some(*modified),
            Repr::Gens { gens, .. } => gens.last().map(Generation::last),
        }
    }

    /// The key as of revision `at` (main revision), or None if it did not exist then.
    pub fn get(&self, at: i64) -> Option<KeyAt> {
        let gens = match &self.repr {
            Repr::One {
                modified,
                created,
                version,
            } => {
                return (modified.main <= at).then(|| KeyAt {
                    modified: *modified,
                    created: created_rev(*modified, *created),
                    version: version.get(),
                });
            }
            Repr::Gens { gens, .. } => gens,
        };
        for g in gens.iter().rev() {
            let Some(first) = g.revs.first() else {
                continue;
            };
            if first.main > at {
                // Created after `at`: an earlier generation may hold it.
                continue;
            }
            if g.tombstone.is_some_and(|t| t.main <= at) {
                return None;
            }
            let n = g.revs.partition_point(|r| r.main <= at);
            // n ≥ 1 since revs[0].main ≤ at.
            let modified = g.revs[n - 1];
            return Some(KeyAt {
                modified,
                created: g.created,
                version: g.first_version + n as i64 - 1,
            });
        }
        None
    }

    /// Whether the key exists as of revision `at` (`get(at).is_some()`): at or after the
    /// latest change, as a count at the current revision asks for every key, without reading
    /// the generations behind their pointer.
    pub fn alive_at(&self, at: i64) -> bool {
        match &self.repr {
            Repr::Gens { latest, .. } if *latest != 0 && at >= latest.abs() => *latest > 0,
            _ => self.get(at).is_some(),
        }
    }

    /// Every revision (puts and the delete) with main ≥ `since`, ascending: what a watcher
    /// catching up from `since` must replay for this key.
    pub fn revisions_since(&self, since: i64) -> Vec<Revision> {
        let gens = match &self.repr {
            Repr::One { modified, .. } => {
                return if modified.main >= since {
                    vec![*modified]
                } else {
                    Vec::new()
                };
            }
            Repr::Gens { gens, .. } => gens,
        };
        let mut out = Vec::new();
        for g in gens {
            out.extend(g.revs.iter().filter(|r| r.main >= since));
            if let Some(t) = g.tombstone.filter(|t| t.main >= since) {
                out.push(t);
            }
        }
        out
    }

    /// Drops the history no read at or after `at` can see. Returns the revision kept as the
    /// state at `at` (so the backend keeps its value) and whether the key is now empty.
    pub fn compact(&mut self, at: i64) -> Compacted {
        if let Repr::One { modified, .. } = self.repr {
            // One revision: kept if it is the state at `at`, and nothing to drop.
            return Compacted {
                kept: (modified.main <= at).then_some(modified),
                empty: false,
            };
        }
        let mut kept = None;
        let (gens, latest) = self.gens_mut();
        edit(gens, |v| {
            v.retain_mut(|g| {
                if g.tombstone.is_some_and(|t| t.main <= at) {
                    return false;
                }
                let n = g.revs.partition_point(|r| r.main <= at);
                if n > 0 {
                    kept = Some(g.revs[n - 1]);
                    g.revs.drain(..n - 1);
                    g.first_version += n as i64 - 1;
                }
                true
            });
        });
        let empty = gens.is_empty();
        if empty {
            *latest = 0;
        }
        self.shrink();
        Compacted { kept, empty }
    }

    /// Every revision still recorded (for rebuilding and consistency checks).
    pub fn all_revisions(&self) -> Vec<Revision> {
        self.revisions_since(i64::MIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    fn example() -> KeyIndex {
        let mut k = KeyIndex::new();
        k.put(r(2));
        k.put(r(4));
        assert!(k.tombstone(r(6)));
        k.put(r(8));
        k
    }

    #[test]
    fn reads_follow_generations() {
        let k = example();
        assert_eq!(k.get(1), None);
        assert_eq!(
            k.get(2),
            Some(KeyAt {
                modified: r(2),
                created: r(2),
                version: 1
            })
        );
        assert_eq!(
            k.get(5),
            Some(KeyAt {
                modified: r(4),
                created: r(2),
                version: 2
            })
        );
        assert_eq!(k.get(6), None);
        assert_eq!(k.get(7), None);
        assert_eq!(
            k.get(9),
            Some(KeyAt {
                modified: r(8),
                created: r(8),
                version: 1
            })
        );
        assert!(k.is_alive());
        assert_eq!(k.modified(), Some(r(8)));
        assert_eq!(k.revisions_since(4), vec![r(4), r(6), r(8)]);
    }

    #[test]
    fn a_key_put_once_costs_no_allocation() {
        // The index holds one KeyIndex per key: its size is most of the index's heap.
        assert!(std::mem::size_of::<KeyIndex>() <= 32);
        let mut k = KeyIndex::new();
        k.put(r(3));
        assert!(matches!(k.repr, Repr::One { .. }));
        k.put(r(5));
        assert!(matches!(k.repr, Repr::Gens { .. }));
        // Compaction that leaves one revision goes back inline, versions kept.
        k.compact(6);
        assert!(matches!(k.repr, Repr::One { .. }));
        assert_eq!(
            k.get(6),
            Some(KeyAt {
                modified: r(5),
                created: r(3),
                version: 2
            })
        );
        k.put(r(7));
        assert_eq!(k.get(7).map(|s| (s.created, s.version)), Some((r(3), 3)));
    }

    #[test]
    fn delete_of_a_dead_key_is_refused() {
        let mut k = KeyIndex::new();
        assert!(!k.tombstone(r(1)));
        k.put(r(2));
        assert!(k.tombstone(r(3)));
        assert!(!k.tombstone(r(4)));
        assert!(!k.is_alive());
    }

    #[test]
    fn restored_from_a_compacted_history_keeps_creation_and_versions() {
        // What compaction at 5 leaves of example() in the backend: rev 4 (created 2,
        // version 2), the tombstone at 6, rev 8 (created 8, version 1).
        let mut k = KeyIndex::new();
        k.restore(r(4), 2, 2);
        assert!(k.tombstone(r(6)));
        k.restore(r(8), 8, 1);
        let mut compacted = example();
        compacted.compact(5);
        for at in 5..10 {
            assert_eq!(k.get(at), compacted.get(at), "at {at}");
        }
        k.restore(r(10), 8, 2);
        assert_eq!(k.get(10).map(|s| (s.created, s.version)), Some((r(8), 2)));
    }

    #[test]
    fn compaction_keeps_what_later_reads_see() {
        let mut k = example();
        let c = k.compact(5);
        assert_eq!(
            c,
            Compacted {
                kept: Some(r(4)),
                empty: false
            }
        );
        // Reads at or after the compaction point are unchanged, versions included.
        assert_eq!(
            k.get(5),
            Some(KeyAt {
                modified: r(4),
                created: r(2),
                version: 2
            })
        );
        assert_eq!(k.get(9).map(|s| s.version), Some(1));

        let c = k.compact(7);
        assert_eq!(
            c,
            Compacted {
                kept: None,
                empty: false
            }
        );
        assert_eq!(k.get(7), None);
        assert_eq!(k.all_revisions(), vec![r(8)]);

        let mut k2 = KeyIndex::new();
        k2.put(r(1));
        k2.tombstone(r(2));
        assert_eq!(
            k2.compact(2),
            Compacted {
                kept: None,
                empty: true
            }
        );
    }

    #[test]
    fn versions_survive_compaction_of_a_long_generation() {
        let mut k = KeyIndex::new();
        for i in 1..=10 {
            k.put(r(i));
        }
        k.compact(7);
        assert_eq!(k.get(7).map(|s| s.version), Some(7));
        assert_eq!(k.get(10).map(|s| (s.version, s.created)), Some((10, r(1))));
        assert_eq!(k.all_revisions(), vec![r(7), r(8), r(9), r(10)]);
    }

    /// A seeded xorshift generator: the random histories repeat from run to run.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// A naive model: the full event list, read by scanning. Random puts, deletes and
    /// compactions; every read at or after the last compaction point must agree.
    #[test]
    fn agrees_with_a_naive_model_under_random_histories() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for _ in 0..300 {
            let mut k = KeyIndex::new();
            let mut events: Vec<(i64, bool)> = Vec::new(); // (main, is_put)
            let mut compacted = 0i64;
            let mut rev = 0i64;
            for _ in 0..40 {
                rev += 1 + (next() % 3) as i64;
                match next() % 5 {
                    0..=2 => {
                        k.put(r(rev));
                        events.push((rev, true));
                    }
                    3 => {
                        let alive = events.last().is_some_and(|e| e.1);
                        assert_eq!(k.tombstone(r(rev)), alive);
                        if alive {
                            events.push((rev, false));
                        }
                    }
                    _ => {
                        let at = compacted + (next() % (rev - compacted + 1) as u64) as i64;
                        k.compact(at);
                        compacted = at;
                    }
                }
                for at in compacted..=rev + 1 {
                    let want = model_get(&events, at);
                    assert_eq!(
                        k.get(at),
                        want,
                        "at {at}, events {events:?}, compacted {compacted}"
                    );
                    assert_eq!(
                        k.alive_at(at),
                        want.is_some(),
                        "alive at {at}, events {events:?}, compacted {compacted}"
                    );
                }
            }
        }
    }

    /// A history rebuilt at start from what the backend holds (`restore` of each put with its
    /// stored creation and version, then the deletes), after compactions that finished or
    /// stopped half-way (revisions deleted oldest first, the kept one never), reads as the
    /// history it was rebuilt from at every revision from the compaction point on.
    #[test]
    fn a_history_rebuilt_from_a_compacted_backend_reads_as_the_original() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        for _ in 0..2000 {
            let mut k = KeyIndex::new();
            let mut events: Vec<(i64, bool)> = Vec::new();
            // (main, Some((created, version)) for a put, None for a delete)
            let mut backend: Vec<(i64, Option<(i64, i64)>)> = Vec::new();
            let mut alive: Option<(i64, i64)> = None;
            let (mut rev, mut compacted) = (0i64, 0i64);
            for _ in 0..(5 + next() % 25) {
                rev += 1 + (next() % 3) as i64;
                match next() % 6 {
                    0..=2 => {
                        k.put(r(rev));
                        events.push((rev, true));
                        alive = Some(alive.map_or((rev, 1), |(c, v)| (c, v + 1)));
                        backend.push((rev, alive));
                    }
                    3 => {
                        assert_eq!(k.tombstone(r(rev)), alive.is_some());
                        if alive.take().is_some() {
                            events.push((rev, false));
                            backend.push((rev, None));
                        }
                    }
                    _ => {
                        let at = compacted + (next() % (rev - compacted + 1) as u64) as i64;
                        let kept = k.compact(at).kept;
                        compacted = at;
                        let done_up_to = if next().is_multiple_of(3) {
                            (next() % (at as u64 + 1)) as i64
                        } else {
                            at
                        };
                        backend.retain(|&(m, _)| m > done_up_to || Some(r(m)) == kept);
                    }
                }
                for resumed in [false, true] {
                    let mut b = KeyIndex::new();
                    for &(m, put) in &backend {
                        match put {
                            Some((created, version)) => b.restore(r(m), created, version),
                            None => {
                                b.tombstone(r(m));
                            }
                        }
                    }
                    // A compaction left half-way is finished after the restart.
                    if resumed && compacted > 0 {
                        b.compact(compacted);
                    }
                    for at in compacted..=rev + 1 {
                        let want = model_get(&events, at);
                        let msg = format!("at {at}, events {events:?}, backend {backend:?}");
                        assert_eq!(b.get(at), want, "{msg}");
                        assert_eq!(b.alive_at(at), want.is_some(), "{msg}");
                    }
                    assert_eq!(b.is_alive(), alive.is_some());
                }
            }
        }
    }

    fn model_get(events: &[(i64, bool)], at: i64) -> Option<KeyAt> {
        let mut state: Option<KeyAt> = None;
        for &(main, put) in events.iter().filter(|e| e.0 <= at) {
            state = if put {
                Some(match state {
                    Some(s) => KeyAt {
                        modified: r(main),
                        created: s.created,
                        version: s.version + 1,
                    },
                    None => KeyAt {
                        modified: r(main),
                        created: r(main),
                        version: 1,
                    },
                })
            } else {
                None
            };
        }
        state
    }
}
