// Watch fan-out: the watchers that are caught up ("synced") wait here, indexed by key, and one
// dispatcher thread hands each new revision's events to exactly the watchers that want them.
//
// Each event is encoded once, whatever the number of watchers; a watcher on key A never wakes
// for key B; and a stream that stops reading only fills its own bounded mailbox, after which its
// watchers leave the synced set and catch up from history later (etcd's unsynced group), so a
// slow watcher never holds back the others or the store.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::task::Waker;

use bytes::Bytes;
use prost::Message;
use proto::mvccpb::{Event, event::EventType};

use super::index::KeyRange;
use super::store::{KvStore, RECENT_BYTES, RECENT_REVS, prev_kv_missing};

/// What a mailbox holds before its stream's watchers are sent back to catch up from history.
const MAILBOX_BYTES: usize = 8 << 20;
const MAILBOX_ITEMS: usize = 8192;

/// What a watcher asks for.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub no_put: bool,
    pub no_delete: bool,
    pub prev_kv: bool,
}

impl WatchSpec {
    /// Whether this watcher wants event `e`.
    pub fn wants(&self, e: &Event) -> bool {
        let Some(kv) = e.kv.as_ref() else {
            return false;
        };
        if !KeyRange::new(&self.key, &self.range_end).contains(&kv.key) {
            return false;
        }
        let is_put = e.r#type == EventType::Put as i32;
        !(is_put && self.no_put || !is_put && self.no_delete)
    }
}

/// The events of one revision for one watcher, each an encoded `mvccpb.Event`.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub watch_id: i64,
    pub rev: i64,
    pub events: Vec<Bytes>,
}

#[derive(Default)]
struct Mail {
    items: VecDeque<Delivery>,
    bytes: usize,
    /// Events in `items` (they count in `WatchHub::pending` until taken).
    events: usize,
    /// Watchers that left the synced set (mailbox full, history not in memory): they must
    /// catch up from this revision.
    unsynced: Vec<(i64, i64)>,
}

/// A watch stream's inbox, filled by the dispatcher, emptied by the stream.
pub struct Mailbox {
    mail: Mutex<Mail>,
    /// Wakes the stream when mail arrives (the stream's own waker for its mailbox: it
    /// notes which of its sources fired, so a waiting stream registers nothing per revision).
    wake: Waker,
}

/// Values grouped by key, keys in order of their first value, each key's values in order.
pub struct Groups<K, V> {
    groups: Vec<(K, Vec<V>)>,
    /// Each key's group; built only once a second key comes (a run of one key, as a stream
    /// with one watcher has, is never hashed).
    at: HashMap<K, usize>,
    /// The caller pushes each key once (a revision of one event matches a watcher once).
    distinct: bool,
}

impl<K: Copy + Eq + std::hash::Hash, V> Groups<K, V> {
    pub fn new() -> Self {
        Groups {
            groups: Vec::new(),
            at: HashMap::new(),
            distinct: false,
        }
    }

    /// Groups for keys the caller pushes once each: nothing is looked up.
    pub fn distinct() -> Self {
        Groups {
            distinct: true,
            ..Self::new()
        }
    }

    pub fn push(&mut self, k: K, v: V) {
        if !self.distinct {
            if let Some((last, vs)) = self.groups.last_mut()
                && *last == k
            {
                vs.push(v);
                return;
            }
            if let [(first, _)] = self.groups.as_slice() {
                self.at.insert(*first, 0);
            }
            if let Some(&i) = self.at.get(&k) {
                self.groups[i].1.push(v);
                return;
            }
            if !self.groups.is_empty() {
                self.at.insert(k, self.groups.len());
            }
        }
        self.groups.push((k, vec![v]));
    }

    pub fn into_vec(self) -> Vec<(K, Vec<V>)> {
        self.groups
    }
}

impl<K: Copy + Eq + std::hash::Hash, V> Default for Groups<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

/// One watch stream's place in the hub.
pub struct StreamHandle {
    id: u64,
    pub mailbox: Arc<Mailbox>,
}

/// What a stream takes from its mailbox (see `WatchHub::take`).
pub struct Taken {
    pub deliveries: Vec<Delivery>,
    pub unsynced: Vec<(i64, i64)>,
    /// Every event up to this revision owed to the stream's synced watchers is in
    /// `deliveries` (or was taken before).
    pub through: i64,
}

type WatcherKey = (u64, i64);

struct Synced {
    spec: WatchSpec,
    /// Events of earlier revisions were sent while catching up.
    from_rev: i64,
    mailbox: Arc<Mailbox>,
}

#[derive(Default)]
struct Hub {
    /// Every revision up to this one was handed to the synced watchers.
    dispatched: i64,
    watchers: HashMap<WatcherKey, Synced>,
    /// Watchers of one key, by key.
    exact: HashMap<Vec<u8>, Vec<WatcherKey>>,
    /// Watchers of a range or prefix.
    ranges: Vec<WatcherKey>,
}

impl Hub {
    fn insert(&mut self, k: WatcherKey, s: Synced) {
        if s.spec.range_end.is_empty() {
            self.exact.entry(s.spec.key.clone()).or_default().push(k);
        } else {
            self.ranges.push(k);
        }
        self.watchers.insert(k, s);
    }

    fn remove(&mut self, k: WatcherKey) -> Option<Synced> {
        let s = self.watchers.remove(&k)?;
        if s.spec.range_end.is_empty() {
            if let Some(v) = self.exact.get_mut(&s.spec.key) {
                v.retain(|x| *x != k);
                if v.is_empty() {
                    self.exact.remove(&s.spec.key);
                }
            }
        } else {
            self.ranges.retain(|x| *x != k);
        }
        Some(s)
    }

    /// Sends every synced watcher back to catch up from `from` (the events are not in
    /// memory: a revision too big to keep, or a db replaced by the leader's snapshot).
    fn unsync_all(&mut self, from: i64) -> Vec<Arc<Mailbox>> {
        let keys: Vec<WatcherKey> = self.watchers.keys().copied().collect();
        let mut woken = Vec::new();
        for k in keys {
            if let Some(s) = self.remove(k) {
                lock(&s.mailbox.mail)
                    .unsynced
                    .push((k.1, from.max(s.from_rev)));
                woken.push(s.mailbox);
            }
        }
        woken
    }
}

/// What the store last published, as the dispatcher waits on it.
#[derive(Default)]
struct Published {
    rev: i64,
    stop: bool,
    /// The dispatcher waits on the condvar: only then is a wake worth a futex call (an
    /// unneeded notify still costs one).
    sleeping: bool,
    /// Write batches holding back the dispatcher's wake (`WatchHub::hold_wakes`).
    held: usize,
    /// Revisions, and their events' approximate bytes, published since the dispatcher was
    /// last woken while a hold kept it asleep.
    unwoken_revs: usize,
    unwoken_bytes: usize,
}

/// What a hold lets wait unwoken at most: a watcher then waits little longer for a long
/// batch, and the revisions stay among the store's recent events (the last 4096 revisions,
/// 16 MiB) until the dispatcher reads them, instead of sending every watcher to catch up
/// from the backend.
const HOLD_REVS: usize = RECENT_REVS / 16;
const HOLD_BYTES: usize = RECENT_BYTES / 16;

impl Published {
    /// Wakes the dispatcher for `size` bytes of events to hand out, unless a batch holds the
    /// wake back and what waits is still within the hold's bounds.
    fn wake_dispatcher(&mut self, wake: &Condvar, size: usize) {
        self.unwoken_revs += 1;
        self.unwoken_bytes += size;
        if self.held > 0 && self.unwoken_revs < HOLD_REVS && self.unwoken_bytes < HOLD_BYTES {
            return;
        }
        self.notify(wake);
    }

    /// Wakes the dispatcher if it sleeps, for what was published so far.
    fn notify(&mut self, wake: &Condvar) {
        self.unwoken_revs = 0;
        self.unwoken_bytes = 0;
        if self.sleeping {
            // Marked awake here so that later writes before it runs wake it no more.
            self.sleeping = false;
            wake.notify_one();
        }
    }
}

/// Until dropped, the dispatcher is not woken for published revisions (see `hold_wakes`).
#[must_use = "the hold ends when the guard is dropped"]
pub struct WakeHold(Arc<WatchHub>);

impl Drop for WakeHold {
    fn drop(&mut self) {
        let mut p = lock(&self.0.published);
        p.held -= 1;
        if p.held == 0 && p.unwoken_revs > 0 {
            p.notify(&self.0.wake);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The synced watchers of one store and its dispatcher (see the module comment).
pub struct WatchHub {
    hub: Mutex<Hub>,
    next_stream: AtomicU64,
    /// The store's current revision as last published, for the dispatcher to wait on.
    published: Mutex<Published>,
    wake: Condvar,
    /// The last dispatched revision, for streams that must wait for the dispatcher.
    dispatched_tx: tokio::sync::watch::Sender<i64>,
    /// `Hub::dispatched`, stored (Release) after the revision's deliveries are in their
    /// mailboxes: a stream taking its mail reads it first and needs no hub lock, which the
    /// dispatcher holds while it hands out a revision.
    dispatched_now: AtomicI64,
    /// Events in mailboxes not yet taken by their streams
    /// (etcd_debugging_mvcc_pending_events_total); changed under the mailbox's lock.
    pending: AtomicUsize,
}

impl WatchHub {
    pub(super) fn new(current_rev: i64) -> WatchHub {
        WatchHub {
            hub: Mutex::new(Hub {
                dispatched: current_rev,
                ..Hub::default()
            }),
            next_stream: AtomicU64::new(1),
            published: Mutex::new(Published {
                rev: current_rev,
                ..Published::default()
            }),
            wake: Condvar::new(),
            dispatched_tx: tokio::sync::watch::Sender::new(current_rev),
            dispatched_now: AtomicI64::new(current_rev),
            pending: AtomicUsize::new(0),
        }
    }

    /// Waits until the dispatcher has handed out revision `rev` (or the store is gone).
    pub async fn wait_dispatched(&self, rev: i64) {
        let mut rx = self.dispatched_tx.subscribe();
        let _ = rx.wait_for(|d| *d >= rev).await;
    }

    /// The store moved to `rev`, whose events are about `size` bytes (called by the store
    /// after each write).
    pub(super) fn published(&self, rev: i64, size: usize) {
        {
            // Nobody to deliver to: the revision counts as dispatched at once, and the
            // dispatcher is not woken (a write then costs no thread switch).
            let mut hub = lock(&self.hub);
            if hub.watchers.is_empty() && lock(&self.published).rev <= hub.dispatched {
                hub.dispatched = hub.dispatched.max(rev);
                self.dispatched_now.store(hub.dispatched, Ordering::Release);
                lock(&self.published).rev = rev;
                drop(hub);
                self.dispatched_tx.send_if_modified(|d| {
                    let moved = *d < rev;
                    *d = (*d).max(rev);
                    moved
                });
                return;
            }
        }
        let mut p = lock(&self.published);
        p.rev = rev;
        p.wake_dispatcher(&self.wake, size);
    }

    /// Holds back waking the dispatcher until the returned guard is dropped: a batch of
    /// writes then wakes it once, and it hands out their revisions together (one thread
    /// switch per batch instead of one per write); a long batch wakes it every `HOLD_REVS`
    /// revisions or `HOLD_BYTES` of events. A dispatcher already awake still hands out each
    /// revision as soon as it is published.
    pub fn hold_wakes(self: &Arc<Self>) -> WakeHold {
        lock(&self.published).held += 1;
        WakeHold(self.clone())
    }

    /// Whether the dispatcher waits for a revision to hand out (tests wait for it so that a
    /// held wake is what keeps it waiting).
    #[doc(hidden)]
    pub fn dispatcher_asleep(&self) -> bool {
        lock(&self.published).sleeping
    }

    pub(super) fn stop(&self) {
        lock(&self.published).stop = true;
        self.wake.notify_one();
    }

    /// How many watchers are synced (the rest of a stream's watchers catch up from history:
    /// etcd's slow watchers), and how many events wait in mailboxes.
    pub fn counts(&self) -> (usize, usize) {
        let hub = lock(&self.hub);
        (hub.watchers.len(), self.pending.load(Ordering::Relaxed))
    }

    /// A place for a new watch stream; `wake` is woken when mail arrives.
    pub fn open_stream(&self, wake: Waker) -> StreamHandle {
        StreamHandle {
            id: self.next_stream.fetch_add(1, Ordering::Relaxed),
            mailbox: Arc::new(Mailbox {
                mail: Mutex::new(Mail::default()),
                wake,
            }),
        }
    }

    /// Forgets every watcher of a stream that ended.
    pub fn close_stream(&self, stream: &StreamHandle) {
        let mut hub = lock(&self.hub);
        let dropped = std::mem::take(&mut lock(&stream.mailbox.mail).events);
        self.pending.fetch_sub(dropped, Ordering::Relaxed);
        let mine: Vec<WatcherKey> = hub
            .watchers
            .keys()
            .filter(|k| k.0 == stream.id)
            .copied()
            .collect();
        for k in mine {
            hub.remove(k);
        }
    }

    /// Makes a watcher that starts now synced: returns the revision its events start at
    /// (the one after the store's current revision).
    pub fn watch_from_now(
        &self,
        store: &KvStore,
        stream: &StreamHandle,
        watch_id: i64,
        spec: WatchSpec,
    ) -> i64 {
        let mut hub = lock(&self.hub);
        // Read under the hub's lock: the dispatcher cannot pass it meanwhile, and it never
        // passes the store's current revision.
        let from = store.current_rev() + 1;
        hub.insert(
            (stream.id, watch_id),
            Synced {
                spec,
                from_rev: from,
                mailbox: stream.mailbox.clone(),
            },
        );
        from
    }

    /// Makes a watcher that has sent everything before `next_rev` synced, unless the
    /// dispatcher has already handed out revision `next_rev` (then it must catch up more).
    pub fn try_sync(
        &self,
        stream: &StreamHandle,
        watch_id: i64,
        spec: &WatchSpec,
        next_rev: i64,
    ) -> bool {
        let mut hub = lock(&self.hub);
        if next_rev <= hub.dispatched {
            return false;
        }
        hub.insert(
            (stream.id, watch_id),
            Synced {
                spec: spec.clone(),
                from_rev: next_rev,
                mailbox: stream.mailbox.clone(),
            },
        );
        true
    }

    /// Takes a synced watcher out (canceled, or its stream is going away).
    pub fn remove(&self, stream: &StreamHandle, watch_id: i64) {
        lock(&self.hub).remove((stream.id, watch_id));
    }

    /// Takes everything in the stream's mailbox, with the revision it covers: a progress
    /// answer may say that revision once these deliveries are sent.
    pub fn take(&self, stream: &StreamHandle) -> Taken {
        // Read before the mail: every delivery (and unsync) of a revision up to it was put in
        // the mailbox before it was stored, so the mail taken below holds them all.
        let through = self.dispatched_now.load(Ordering::Acquire);
        let mut mail = lock(&stream.mailbox.mail);
        let deliveries = std::mem::take(&mut mail.items).into();
        mail.bytes = 0;
        self.pending
            .fetch_sub(std::mem::take(&mut mail.events), Ordering::Relaxed);
        Taken {
            deliveries,
            unsynced: std::mem::take(&mut mail.unsynced),
            through,
        }
    }

    /// Hands the revisions after the last dispatched one, up to `current`, to the synced
    /// watchers that want them.
    fn dispatch(&self, store: &KvStore, current: i64) {
        let mut hub = lock(&self.hub);
        let mut woken: Vec<Arc<Mailbox>> = Vec::new();
        while hub.dispatched < current {
            let rev = hub.dispatched + 1;
            match store.revision_events(rev) {
                Some(events) => {
                    if !hub.watchers.is_empty() {
                        dispatch_revision(&mut hub, &self.pending, rev, &events, &mut woken);
                    }
                    hub.dispatched = rev;
                }
                None => {
                    woken.extend(hub.unsync_all(rev));
                    hub.dispatched = current;
                }
            }
            self.dispatched_now.store(hub.dispatched, Ordering::Release);
        }
        let through = hub.dispatched;
        drop(hub);
        // Never backwards: a write with no watchers may have moved it meanwhile.
        self.dispatched_tx.send_if_modified(|d| {
            let moved = *d < through;
            *d = (*d).max(through);
            moved
        });
        woken.sort_by_key(|m| Arc::as_ptr(m) as usize);
        woken.dedup_by_key(|m| Arc::as_ptr(m) as usize);
        for m in woken {
            m.wake.wake_by_ref();
        }
    }
}

/// An event's encodings, made the first time a watcher needs one.
#[derive(Default)]
struct Encoded {
    with_prev: Option<Bytes>,
    without_prev: Option<Bytes>,
}

impl Encoded {
    fn get(&mut self, e: &Event, prev_kv: bool) -> Bytes {
        let slot = if prev_kv {
            &mut self.with_prev
        } else {
            &mut self.without_prev
        };
        slot.get_or_insert_with(|| {
            if prev_kv || e.prev_kv.is_none() {
                Bytes::from(e.encode_to_vec())
            } else {
                Bytes::from(
                    Event {
                        r#type: e.r#type,
                        kv: e.kv.clone(),
                        prev_kv: None,
                    }
                    .encode_to_vec(),
                )
            }
        })
        .clone()
    }
}

fn dispatch_revision(
    hub: &mut Hub,
    pending: &AtomicUsize,
    rev: i64,
    events: &[Event],
    woken: &mut Vec<Arc<Mailbox>>,
) {
    let mut encoded: Vec<Encoded> = Vec::new();
    encoded.resize_with(events.len(), Encoded::default);
    // Each matched watcher's events of this revision, in event order, watchers in order of
    // their first event. A revision of one event (most: a put) matches each watcher once.
    let mut per_watcher = if events.len() == 1 {
        Groups::distinct()
    } else {
        Groups::new()
    };
    // Watchers that want a prev_kv this revision's write did not read (it began before they
    // registered their interest): they catch up from the history, which reads it.
    let mut lacking: Vec<WatcherKey> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let Some(kv) = e.kv.as_ref() else { continue };
        let missing = prev_kv_missing(e);
        let exact = hub.exact.get(&kv.key).map(Vec::as_slice).unwrap_or(&[]);
        for k in exact.iter().chain(hub.ranges.iter()) {
            let Some(s) = hub.watchers.get(k) else {
                continue;
            };
            if rev < s.from_rev || !s.spec.wants(e) {
                continue;
            }
            if missing && s.spec.prev_kv {
                if !lacking.contains(k) {
                    lacking.push(*k);
                }
                continue;
            }
            per_watcher.push(*k, encoded[i].get(e, s.spec.prev_kv));
        }
    }
    let mut per_watcher = per_watcher.into_vec();
    if !lacking.is_empty() {
        per_watcher.retain(|(k, _)| !lacking.contains(k));
    }
    for k in lacking {
        if let Some(s) = hub.remove(k) {
            lock(&s.mailbox.mail).unsynced.push((k.1, rev));
            woken.push(s.mailbox);
        }
    }
    for (k, events) in per_watcher {
        let Some(s) = hub.watchers.get(&k) else {
            continue;
        };
        let mailbox = s.mailbox.clone();
        let size: usize = events.iter().map(Bytes::len).sum();
        let full = {
            let mut mail = lock(&mailbox.mail);
            if mail.items.len() >= MAILBOX_ITEMS || mail.bytes + size > MAILBOX_BYTES {
                // The stream does not keep up: this watcher catches up from history instead.
                mail.unsynced.push((k.1, rev));
                true
            } else {
                mail.bytes += size;
                mail.events += events.len();
                pending.fetch_add(events.len(), Ordering::Relaxed);
                mail.items.push_back(Delivery {
                    watch_id: k.1,
                    rev,
                    events,
                });
                false
            }
        };
        if full {
            hub.remove(k);
        }
        woken.push(mailbox);
    }
}

/// Starts the dispatcher of `store`; it ends when the store is dropped.
pub(super) fn spawn_dispatcher(store: Weak<KvStore>, hub: Arc<WatchHub>) {
    let spawned = std::thread::Builder::new()
        .name("watch-dispatch".into())
        .spawn(move || {
            loop {
                let current = {
                    let hub_state = lock(&hub.hub).dispatched;
                    let mut p = lock(&hub.published);
                    while !p.stop && p.rev <= hub_state {
                        p.sleeping = true;
                        p = hub.wake.wait(p).unwrap_or_else(|e| e.into_inner());
                        p.sleeping = false;
                    }
                    if p.stop {
                        return;
                    }
                    p.rev
                };
                let Some(store) = store.upgrade() else { return };
                hub.dispatch(&store, current);
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the watch dispatcher; watchers will not get events");
    }
}
