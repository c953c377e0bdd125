// The MVCC key-value store: the in-memory index over the backend's `key` bucket, where every
// change is stored under its revision. One writer (the apply loop), many concurrent readers.
//
// Locks, always taken in this order: `write` (one writer), then `state`. A write's backend
// group holds no lock while open: its values join the backend at its end, before the revision
// that names them becomes current. Readers take `state` only to pick revisions from the index
// and release it before reading values from the backend.
// The compaction worker (compaction.rs) takes `compaction_batch`, then a backend write group,
// or `state` alone for a chunk of the index.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use common::backend::{self, Batch, BatchWrite, buckets};
use prost::Message;
use proto::mvccpb::{Event, KeyValue, event::EventType};

use super::compaction::{self, CompactionConfig, Jobs};
use super::index::{Index, KeyRange};
use super::revision::{Revision, is_tombstone};
use super::watch_hub::{self, WatchHub};

const CONSISTENT_INDEX_KEY: &[u8] = b"consistent_index";
const TERM_KEY: &[u8] = b"term";
const SCHEDULED_COMPACT_KEY: &[u8] = b"scheduledCompactRev";
const FINISHED_COMPACT_KEY: &[u8] = b"finishedCompactRev";

#[derive(Debug, thiserror::Error)]
pub enum MvccError {
    #[error("mvcc: required revision has been compacted")]
    Compacted,
    #[error("mvcc: required revision is a future revision")]
    FutureRev,
    #[error("mvcc: backend: {0}")]
    Backend(#[from] backend::Error),
    #[error("mvcc: corrupt store: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, MvccError>;

struct State {
    index: Index,
    current_rev: i64,
    compact_rev: i64,
    consistent_index: u64,
    term: u64,
    /// Keys alive at the current revision (etcd_debugging_mvcc_keys_total).
    live: i64,
    /// The live keys that carry a lease, as the rebuild at open found them; the lessor takes
    /// them once (`take_leased_keys`), so a restart never reads every value again for them.
    leased: Vec<(Vec<u8>, i64)>,
}

/// The result of a read: key-values in key order, how many keys matched, and the store's
/// current revision (what etcd reports in the header, whatever revision was read).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RangeResult {
    pub kvs: Vec<KeyValue>,
    pub count: usize,
    pub rev: i64,
}

/// What the server runs after each finished compaction.
type CompactedHook = Box<dyn Fn(i64) + Send + Sync>;

pub struct KvStore {
    backend: Arc<Batch>,
    write: Mutex<()>,
    state: RwLock<State>,
    /// The current revision, for watchers to wait on (they read the events themselves).
    rev_tx: tokio::sync::watch::Sender<i64>,
    /// The events of the latest revisions, so watchers that keep up read memory, not the
    /// backend.
    recent: Mutex<Recent>,
    /// Compactions scheduled and not finished (worked on in the background).
    jobs: Arc<Jobs>,
    compaction: CompactionConfig,
    /// Held by the compaction worker for each batch of deletes, and by `restore`, so a
    /// compaction of the old db never deletes from the new one.
    compaction_batch: Mutex<()>,
    /// Moves each time the db is replaced; a compaction started before stops.
    generation: AtomicU64,
    /// Called after each finished compaction (the server gives freed heap back then).
    on_compacted: Mutex<Option<CompactedHook>>,
    /// Synced watchers and the fan-out of each revision's events to them.
    hub: Arc<WatchHub>,
    counts: OpCounts,
    /// Watchers that asked for prev_kv (see `prev_kv_interest`).
    prev_kv_watchers: Arc<AtomicUsize>,
}

/// Held while a watcher that wants prev_kv exists: writes then read the values they replace
/// into their events, so that watcher is served from memory. Without one no write reads an
/// old value it does not return.
pub struct PrevKvInterest(Arc<AtomicUsize>);

impl Drop for PrevKvInterest {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// True when `e` had a previous key-value that it does not carry (the write did not read it,
/// see `WriteTxn::put_with`): a delete always replaces one, a put of version > 1 too.
pub fn prev_kv_missing(e: &Event) -> bool {
    e.prev_kv.is_none()
        && (e.r#type == EventType::Delete as i32 || e.kv.as_ref().is_some_and(|k| k.version > 1))
}

/// etcd's mvcc operation counters (etcd_mvcc_{range,put,delete,txn}_total and
/// etcd_debugging_mvcc_total_put_size_in_bytes): writes count on every member that applies
/// them, reads on the member that serves them.
#[derive(Default)]
pub struct OpCounts {
    pub ranges: AtomicU64,
    pub puts: AtomicU64,
    pub deletes: AtomicU64,
    pub txns: AtomicU64,
    /// Key and value bytes of every put.
    pub put_bytes: AtomicU64,
}

/// The operations of one transaction, added to `OpCounts` when it ends.
#[derive(Default, Clone, Copy)]
struct Tally {
    ranges: u64,
    puts: u64,
    deletes: u64,
    put_bytes: u64,
}

impl OpCounts {
    /// As etcd counts: each operation by its kind (a compare is a range), and the
    /// transaction itself only when it did more than one.
    fn record(&self, t: Tally) {
        // Most views and write transactions count nothing (internal reads, raw writes).
        if t.ranges + t.puts + t.deletes == 0 {
            return;
        }
        let r = Ordering::Relaxed;
        self.ranges.fetch_add(t.ranges, r);
        self.puts.fetch_add(t.puts, r);
        self.deletes.fetch_add(t.deletes, r);
        self.put_bytes.fetch_add(t.put_bytes, r);
        if t.ranges + t.puts + t.deletes > 1 {
            self.txns.fetch_add(1, r);
        }
    }
}

/// Revisions a compaction scans between releases of the db pages the scan mapped.
const RELEASE_EVERY_SCANNED: usize = 16_384;

/// Revisions kept in `Recent` at most, and their approximate bytes.
pub(super) const RECENT_REVS: usize = 4096;
pub(super) const RECENT_BYTES: usize = 16 << 20;

/// The events of consecutive latest revisions (with their prev_kv when a write read it).
#[derive(Default)]
struct Recent {
    revs: std::collections::VecDeque<(i64, Arc<Vec<Event>>, usize)>,
    bytes: usize,
}

fn approx_size(events: &[Event]) -> usize {
    events
        .iter()
        .map(|e| {
            let kv = e.kv.as_ref().map_or(0, |k| k.key.len() + k.value.len());
            let prev = e
                .prev_kv
                .as_ref()
                .map_or(0, |k| k.key.len() + k.value.len());
            kv + prev + 64
        })
        .sum()
}

impl Recent {
    /// Keeps `rev`'s events; their approximate size.
    fn push(&mut self, rev: i64, events: Arc<Vec<Event>>) -> usize {
        // Revisions must stay consecutive for a read to trust what it finds.
        if self.revs.back().is_some_and(|(r, _, _)| *r + 1 != rev) {
            self.revs.clear();
            self.bytes = 0;
        }
        let size = approx_size(&events);
        if size > RECENT_BYTES {
            // One revision bigger than the whole budget (a delete of a large range) is not
            // kept, nor what came before it: watchers read those from the backend.
            self.revs.clear();
            self.bytes = 0;
            return size;
        }
        self.revs.push_back((rev, events, size));
        self.bytes += size;
        while self.revs.len() > RECENT_REVS || (self.bytes > RECENT_BYTES && self.revs.len() > 1) {
            if let Some((_, _, n)) = self.revs.pop_front() {
                self.bytes -= n;
            }
        }
        size
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_u64(v: Option<Vec<u8>>) -> u64 {
    v.and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

/// Values read per look at the backend: a Range of thousands of keys costs a handful of
/// read transactions, and an apply never waits long behind one.
const READ_CHUNK: usize = 256;

/// Keys picked from the index with their state as of the read revision.
pub type Picked = Vec<(Vec<u8>, super::KeyAt)>;

/// Refuses a read at `at` past `newest` or below the compaction point.
fn check_at(st: &State, at: i64, newest: i64) -> Result<()> {
    if at > newest {
        return Err(MvccError::FutureRev);
    }
    if at < st.compact_rev {
        return Err(MvccError::Compacted);
    }
    Ok(())
}

/// Validates `at` against the store's revisions and picks the keys of `range` from the
/// index: (keys with their state, how many keys match in all).
fn pick(
    st: &State,
    range: KeyRange<'_>,
    at: i64,
    newest: i64,
    limit: usize,
) -> Result<(Picked, usize)> {
    check_at(st, at, newest)?;
    let picked = st.index.range(range, at, limit);
    let count = if limit == 0 || picked.len() < limit {
        picked.len()
    } else {
        st.index.count(range, at)
    };
    Ok((picked, count))
}

fn rev_key_upper_bound() -> [u8; 18] {
    [0xff; 18]
}

/// Creates etcd's buckets when missing and rebuilds the index from the `key` bucket; also
/// returns the scheduled compaction revision (> the finished one when a crash interrupted it).
fn load_state(backend: &Batch) -> Result<(State, i64)> {
    {
        let mut g = backend.begin();
        for b in buckets::ALL {
            g.create_bucket(b);
        }
        g.finish()?;
    }
    let consistent_index = read_u64(backend.get(buckets::META, CONSISTENT_INDEX_KEY)?);
    let term = read_u64(backend.get(buckets::META, TERM_KEY)?);
    let rev_of = |v: Option<Vec<u8>>| v.as_deref().and_then(Revision::from_bytes).map(|r| r.main);
    let finished = rev_of(backend.get(buckets::META, FINISHED_COMPACT_KEY)?).unwrap_or(0);
    let scheduled = rev_of(backend.get(buckets::META, SCHEDULED_COMPACT_KEY)?).unwrap_or(0);

    let mut index = Index::new();
    // Revisions come in order, so each key's last write decides its lease.
    let mut leased: std::collections::HashMap<Vec<u8>, i64> = std::collections::HashMap::new();
    let mut current_rev = 1; // etcd's first write gets revision 2
    let mut start = Revision::new(0, 0).to_bytes().to_vec();
    let end = rev_key_upper_bound();
    loop {
        let chunk = backend.range(buckets::KEY, &start, Some(&end), 10_000)?;
        let Some((last, _)) = chunk.last() else { break };
        let mut next = last.clone();
        next.push(0);
        for (k, v) in &chunk {
            let rev = Revision::from_bytes(k).ok_or_else(|| {
                MvccError::Corrupt(format!("bad revision key {k:?} in the key bucket"))
            })?;
            let kv = KeyValue::decode(v.as_slice())
                .map_err(|e| MvccError::Corrupt(format!("bad key-value at revision {rev}: {e}")))?;
            if is_tombstone(k) {
                index.tombstone(&kv.key, rev);
                leased.remove(&kv.key);
            } else {
                index.restore(&kv.key, rev, kv.create_revision, kv.version);
                if kv.lease != 0 {
                    leased.insert(kv.key, kv.lease);
                } else {
                    leased.remove(&kv.key);
                }
            }
            current_rev = current_rev.max(rev.main);
        }
        start = next;
    }
    let current_rev = current_rev.max(finished).max(scheduled);
    let live = index.count(KeyRange::new(&[0], &[0]), current_rev) as i64;
    Ok((
        State {
            live,
            index,
            current_rev,
            compact_rev: finished,
            consistent_index,
            term,
            leased: leased.into_iter().collect(),
        },
        scheduled,
    ))
}

impl KvStore {
    /// Opens the store over `backend`, creating etcd's buckets when missing and rebuilding the
    /// index from the `key` bucket. An interrupted compaction is resumed in the background.
    pub fn open(backend: Arc<Batch>) -> Result<Arc<KvStore>> {
        KvStore::open_with(backend, CompactionConfig::default())
    }

    /// `open` with the compaction's pace.
    pub fn open_with(backend: Arc<Batch>, compaction: CompactionConfig) -> Result<Arc<KvStore>> {
        let (state, scheduled) = load_state(&backend)?;
        // The rebuild read the whole key bucket; requests need only some of it.
        backend.db().release_resident();
        let jobs = Arc::new(Jobs::default());
        let hub = Arc::new(WatchHub::new(state.current_rev));
        let store = Arc::new(KvStore {
            backend,
            write: Mutex::new(()),
            rev_tx: tokio::sync::watch::Sender::new(state.current_rev),
            state: RwLock::new(state),
            recent: Mutex::new(Recent::default()),
            jobs: jobs.clone(),
            compaction: CompactionConfig {
                batch_limit: compaction.batch_limit.max(1),
                ..compaction
            },
            compaction_batch: Mutex::new(()),
            generation: AtomicU64::new(0),
            on_compacted: Mutex::new(None),
            hub: hub.clone(),
            counts: OpCounts::default(),
            prev_kv_watchers: Arc::new(AtomicUsize::new(0)),
        });
        compaction::spawn_worker(Arc::downgrade(&store), jobs);
        watch_hub::spawn_dispatcher(Arc::downgrade(&store), hub);
        store.resume_compaction(scheduled);
        Ok(store)
    }

    /// Registers a watcher that wants prev_kv for as long as the result lives. Events written
    /// while nobody held one lack their prev_kv (`prev_kv_missing`); such a watcher reads
    /// those from the backend.
    pub fn prev_kv_interest(&self) -> PrevKvInterest {
        self.prev_kv_watchers.fetch_add(1, Ordering::Relaxed);
        PrevKvInterest(self.prev_kv_watchers.clone())
    }

    fn prev_wanted(&self) -> bool {
        self.prev_kv_watchers.load(Ordering::Relaxed) > 0
    }

    /// Calls `f` with the revision of each compaction that finished.
    pub fn on_compacted(&self, f: impl Fn(i64) + Send + Sync + 'static) {
        *lock(&self.on_compacted) = Some(Box::new(f));
    }

    /// Replaces everything with the image in `db` (a follower installing the leader's
    /// snapshot): the backend continues over `db` and the index is rebuilt from it. Watchers
    /// see the revision move and catch up from the new store.
    pub fn restore(&self, db: common::backend::Db) -> Result<()> {
        let _guard = lock(&self.write);
        let _batch = lock(&self.compaction_batch);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.jobs.clear();
        self.backend.replace_db(db);
        let (state, scheduled) = load_state(&self.backend)?;
        self.backend.db().release_resident();
        let rev = state.current_rev;
        *lock(&self.recent) = Recent::default();
        *self.state_mut() = state;
        self.resume_compaction(scheduled);
        self.rev_tx.send_replace(rev);
        self.hub.published(rev, 0);
        Ok(())
    }

    /// The live keys with a lease as of the last open or restore, with their leases; only the
    /// first call after it gets them (the lessor attaches them at start and after a
    /// snapshot is installed).
    pub fn take_leased_keys(&self) -> Vec<(Vec<u8>, i64)> {
        std::mem::take(&mut self.state_mut().leased)
    }

    /// Schedules again a compaction a crash interrupted (its mark is newer than the finished
    /// one); otherwise makes the index refuse reads below the finished compaction point (the
    /// index was rebuilt from what compaction kept).
    fn resume_compaction(&self, scheduled: i64) {
        let mut st = self.state_mut();
        let finished = st.compact_rev;
        if scheduled > finished {
            tracing::info!(revision = scheduled, "resuming an interrupted compaction");
            st.compact_rev = scheduled;
            drop(st);
            self.jobs.push(scheduled);
        } else if finished > 0 {
            st.index.compact(finished);
        }
    }

    /// Waits until every scheduled compaction has finished (or was abandoned).
    pub fn wait_compactions(&self) {
        self.jobs.wait_idle();
    }

    fn state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn state_mut(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a reader or writer holds the index now (a write would wait for it).
    pub fn index_busy(&self) -> bool {
        self.state.try_write().is_err()
    }

    pub fn backend(&self) -> &Arc<Batch> {
        &self.backend
    }

    pub fn current_rev(&self) -> i64 {
        self.state().current_rev
    }

    /// Keys alive at the current revision (etcd's keys_total gauge).
    pub fn live_keys(&self) -> i64 {
        self.state().live
    }

    pub fn compact_rev(&self) -> i64 {
        self.state().compact_rev
    }

    /// The raft index of the last entry applied to this store (persisted with its writes).
    pub fn consistent_index(&self) -> u64 {
        self.state().consistent_index
    }

    pub fn term(&self) -> u64 {
        self.state().term
    }

    /// Keys of `range` as of `rev` (0 = now), at most `limit` (0 = all); `count` counts all.
    pub fn range(&self, range: KeyRange<'_>, rev: i64, limit: usize) -> Result<RangeResult> {
        self.counts.ranges.fetch_add(1, Ordering::Relaxed);
        self.read_view().range(range, rev, limit)
    }

    /// The operation counters for /metrics.
    pub fn op_counts(&self) -> &OpCounts {
        &self.counts
    }

    /// A consistent read of the store as of its current revision, taking no writer's lock:
    /// reads through it see that revision whatever is applied meanwhile.
    pub fn read_view(&self) -> ReadView<'_> {
        ReadView {
            store: self,
            rev: self.current_rev(),
            tally: Tally::default(),
        }
    }

    /// The values of the picked keys, a chunk of keys per look at the backend. Values under
    /// a revision never change, so reading them in several looks is as consistent as one;
    /// only a compaction can remove them, which the caller learns as `Compacted`.
    fn load_values(&self, picked: Picked, at: i64) -> Result<Vec<KeyValue>> {
        let mut kvs = Vec::with_capacity(picked.len());
        for chunk in picked.chunks(READ_CHUNK) {
            let keys: Vec<[u8; super::revision::REV_BYTES_LEN]> =
                chunk.iter().map(|(_, s)| s.modified.to_bytes()).collect();
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let values = self.backend.get_many(buckets::KEY, &refs)?;
            for ((key, s), v) in chunk.iter().zip(values) {
                match v {
                    Some(v) => kvs.push(KeyValue::decode(v.as_slice()).map_err(|e| {
                        MvccError::Corrupt(format!("bad key-value at revision {}: {e}", s.modified))
                    })?),
                    None if self.compact_rev() > at => return Err(MvccError::Compacted),
                    None => {
                        return Err(MvccError::Corrupt(format!(
                            "key {:?} at revision {} is in the index but not in the backend",
                            String::from_utf8_lossy(key),
                            s.modified
                        )));
                    }
                }
            }
        }
        Ok(kvs)
    }

    /// A receiver that changes whenever the current revision does.
    pub fn subscribe_rev(&self) -> tokio::sync::watch::Receiver<i64> {
        self.rev_tx.subscribe()
    }

    /// What `events(from, to, limit)` returns, with each event's prev_kv, when every revision
    /// asked for is still in memory (whole revisions: the last may pass `limit`); None when
    /// the backend must be read.
    pub fn events_cached(&self, from: i64, to: i64, limit: usize) -> Option<Vec<Event>> {
        self.events_cached_for(from, to, limit, |_| true)
            .map(|(events, _)| events)
    }

    /// The events of revisions `[from, to]` that `wanted` selects, when all of those
    /// revisions are still in memory, with the last revision looked at: at most `limit`
    /// selected events (0 = all), whole revisions, so the last revision may pass `limit`.
    /// Only the selected events are copied.
    pub fn events_cached_for(
        &self,
        from: i64,
        to: i64,
        limit: usize,
        mut wanted: impl FnMut(&Event) -> bool,
    ) -> Option<(Vec<Event>, i64)> {
        if from > to {
            return Some((Vec::new(), to));
        }
        if from < self.compact_rev() {
            return None;
        }
        let recent = lock(&self.recent);
        let (first, _, _) = recent.revs.front()?;
        let (last, _, _) = recent.revs.back()?;
        if from < *first || to > *last {
            return None;
        }
        let mut out = Vec::new();
        let mut through = from - 1;
        let skip = (from - first) as usize;
        for (rev, events, _) in recent.revs.iter().skip(skip) {
            if *rev > to || (limit > 0 && out.len() >= limit) {
                break;
            }
            out.extend(events.iter().filter(|e| wanted(e)).cloned());
            through = *rev;
        }
        Some((out, through))
    }

    /// The events of revision `rev` when they are still in memory.
    pub fn revision_events(&self, rev: i64) -> Option<Arc<Vec<Event>>> {
        let recent = lock(&self.recent);
        let (first, _, _) = recent.revs.front()?;
        let i = usize::try_from(rev - first).ok()?;
        let (r, events, _) = recent.revs.get(i)?;
        (*r == rev).then(|| events.clone())
    }

    /// The watchers that are caught up, and the fan-out of new events to them.
    pub fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.hub
    }

    /// The changes with main revision in `[from, to]`, in revision order, at most `limit`
    /// (0 = all): what a watcher catching up from `from` replays. Deletes carry the key and
    /// their revision only, as etcd's events do.
    pub fn events(&self, from: i64, to: i64, limit: usize) -> Result<Vec<Event>> {
        if from > to {
            return Ok(Vec::new());
        }
        if from < self.compact_rev() {
            return Err(MvccError::Compacted);
        }
        let start = Revision::new(from, 0).to_bytes();
        let end = Revision::new(to + 1, 0).to_bytes();
        let rows = self
            .backend
            .range(buckets::KEY, &start, Some(&end), limit)?;
        let mut out = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            let rev = Revision::from_bytes(&k).ok_or_else(|| {
                MvccError::Corrupt(format!("bad revision key {k:?} in the key bucket"))
            })?;
            let mut kv = KeyValue::decode(v.as_slice())
                .map_err(|e| MvccError::Corrupt(format!("bad key-value at revision {rev}: {e}")))?;
            let typ = if is_tombstone(&k) {
                kv.mod_revision = rev.main;
                EventType::Delete
            } else {
                EventType::Put
            };
            out.push(Event {
                r#type: typ as i32,
                kv: Some(kv),
                prev_kv: None,
            });
        }
        if from < self.compact_rev() {
            // A compaction ran while we read: what we read may have holes.
            return Err(MvccError::Compacted);
        }
        Ok(out)
    }

    /// etcd's HashKV: CRC-32C over the `key` bucket's name and every key and value with main
    /// revision ≤ `rev` (0 = now). Returns (hash, revision hashed, compact revision). After a
    /// compaction only the revisions a read at the compaction point needs are left, so this is
    /// the same hash etcd computes for the same history.
    pub fn hash_kv(&self, rev: i64) -> Result<(u32, i64, i64)> {
        // A compaction half done would hash revisions another member already deleted.
        self.wait_compactions();
        let (cur, compact) = {
            let st = self.state();
            (st.current_rev, st.compact_rev)
        };
        let rev = if rev <= 0 { cur } else { rev };
        if rev > cur {
            return Err(MvccError::FutureRev);
        }
        if rev < compact {
            return Err(MvccError::Compacted);
        }
        let mut h = crc32c::crc32c(buckets::KEY);
        let end = Revision::new(rev + 1, 0).to_bytes();
        let mut start = Revision::new(0, 0).to_bytes().to_vec();
        loop {
            let chunk = self
                .backend
                .range(buckets::KEY, &start, Some(&end), 10_000)?;
            let Some((last, _)) = chunk.last() else { break };
            let mut next = last.clone();
            next.push(0);
            for (k, v) in &chunk {
                h = crc32c::crc32c_append(h, k);
                h = crc32c::crc32c_append(h, v);
            }
            start = next;
        }
        Ok((h, rev, compact))
    }

    /// Starts the write transaction of one applied request. Only one exists at a time.
    pub fn write(&self) -> WriteTxn<'_> {
        let guard = lock(&self.write);
        let group = self.backend.begin();
        let begin_rev = self.state().current_rev;
        WriteTxn {
            store: self,
            _guard: guard,
            group: Some(group),
            begin_rev,
            sub: 0,
            events: Vec::new(),
            compact_to: None,
            tally: Tally::default(),
        }
    }

    /// Compacts history at `rev` and waits until the old revisions are deleted (for tools
    /// and tests; an applied request schedules it through its write transaction instead).
    pub fn compact(&self, rev: i64) -> Result<()> {
        {
            let _guard = lock(&self.write);
            self.check_compaction(rev, self.current_rev())?;
            let mut g = self.backend.begin();
            g.put(
                buckets::META,
                SCHEDULED_COMPACT_KEY,
                &Revision::new(rev, 0).to_bytes(),
            );
            g.finish()?;
            self.state_mut().compact_rev = rev;
            self.jobs.push(rev);
        }
        self.wait_compactions();
        Ok(())
    }

    fn check_compaction(&self, rev: i64, current: i64) -> Result<()> {
        if rev <= self.compact_rev() {
            return Err(MvccError::Compacted);
        }
        if rev > current {
            return Err(MvccError::FutureRev);
        }
        Ok(())
    }

    /// The compaction worker's job: compacts the index at `rev` in chunks, then deletes from
    /// the backend, batch by batch, the revisions no read at or after `rev` can see, and
    /// records the compaction as finished. Returns false when the db was replaced meanwhile.
    pub(super) fn run_compaction(&self, rev: i64) -> Result<bool> {
        let generation = self.generation.load(Ordering::SeqCst);
        let current = || self.generation.load(Ordering::SeqCst) == generation;
        let mut keep: Vec<Revision> = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (kept, next) = {
                let mut st = self.state_mut();
                if !current() {
                    return Ok(false);
                }
                st.index
                    .compact_chunk(rev, after.as_deref(), compaction::INDEX_CHUNK)
            };
            keep.extend(kept);
            match next {
                Some(k) => after = Some(k),
                None => break,
            }
            std::thread::yield_now();
        }
        // The scan below goes up the revisions in order: the kept ones, sorted, are passed
        // by a cursor instead of looked up per revision.
        keep.sort_unstable();
        let mut kept = 0;
        let end = Revision::new(rev + 1, 0).to_bytes();
        let mut start = Revision::new(0, 0).to_bytes().to_vec();
        let limit = self.compaction.batch_limit;
        let mut scanned = 0usize;
        loop {
            let more = {
                let _batch = lock(&self.compaction_batch);
                if !current() {
                    return Ok(false);
                }
                // A batch deletes up to `limit` revisions (etcd's flag: "maximum revisions
                // deleted in each compaction batch"); the revisions kept are read past
                // without counting, so a history of mostly live keys is not paced per key.
                let mut doomed: Vec<Vec<u8>> = Vec::with_capacity(limit);
                let mut more = true;
                'scan: while more {
                    let chunk = self.backend.range_keys(buckets::KEY, &start, &end, limit)?;
                    more = chunk.len() == limit;
                    scanned += chunk.len();
                    if let Some(last) = chunk.last() {
                        start = last.clone();
                        start.push(0);
                    }
                    for k in chunk {
                        if doomed.len() == limit {
                            // This one starts the next batch.
                            start = k;
                            more = true;
                            break 'scan;
                        }
                        let Some(r) = Revision::from_bytes(&k) else {
                            continue;
                        };
                        while keep.get(kept).is_some_and(|&x| x < r) {
                            kept += 1;
                        }
                        if keep.get(kept) != Some(&r) || is_tombstone(&k) {
                            doomed.push(k);
                        }
                    }
                }
                let mut g = self.backend.begin();
                g.delete_sorted(buckets::KEY, doomed);
                g.finish()?;
                if scanned >= RELEASE_EVERY_SCANNED {
                    scanned = 0;
                    // The revisions scanned are not read again: their pages leave the resident
                    // set as the scan goes, so a compaction of millions of revisions does not
                    // map the whole key bucket (issue 19).
                    self.backend.db().release_resident();
                }
                more
            };
            if !more {
                break;
            }
            std::thread::sleep(self.compaction.sleep_interval);
        }
        {
            let _batch = lock(&self.compaction_batch);
            if !current() {
                return Ok(false);
            }
            let mut g = self.backend.begin();
            g.put(
                buckets::META,
                FINISHED_COMPACT_KEY,
                &Revision::new(rev, 0).to_bytes(),
            );
            g.finish()?;
        }
        self.backend.db().release_resident();
        if let Some(f) = lock(&self.on_compacted).as_ref() {
            f(rev);
        }
        Ok(true)
    }
}

impl Drop for KvStore {
    fn drop(&mut self) {
        self.jobs.stop();
        self.hub.stop();
    }
}

/// The store as of one revision (see `KvStore::read_view`): a read-only Txn evaluates its
/// compares and reads on one of these, so it sees one revision and never waits for applies.
pub struct ReadView<'a> {
    store: &'a KvStore,
    rev: i64,
    /// A read-only Txn's compares and ranges.
    tally: Tally,
}

impl Drop for ReadView<'_> {
    fn drop(&mut self) {
        self.store.counts.record(self.tally);
    }
}

impl ReadView<'_> {
    /// The revision this view reads.
    pub fn rev(&self) -> i64 {
        self.rev
    }

    /// Keys of `range` as of `rev` (0 = the view's revision, which no read may pass).
    pub fn range(&self, range: KeyRange<'_>, rev: i64, limit: usize) -> Result<RangeResult> {
        let at = if rev <= 0 { self.rev } else { rev };
        let (picked, count) = {
            let st = self.store.state();
            pick(&st, range, at, self.rev, limit)?
        };
        Ok(RangeResult {
            kvs: self.store.load_values(picked, at)?,
            count,
            rev: self.rev,
        })
    }

    /// Counts this view as one range in /metrics (a streamed range reads it in pages).
    pub fn counted_as_range(mut self) -> Self {
        self.tally.ranges = 1;
        self
    }

    /// A page of a streamed range: up to `limit` keys of `range` alive at `at` (0 = the
    /// view's revision) with their state, in key order, without counting the others.
    pub fn pick_page(&self, range: KeyRange<'_>, at: i64, limit: usize) -> Result<Picked> {
        let at = if at <= 0 { self.rev } else { at };
        let st = self.store.state();
        check_at(&st, at, self.rev)?;
        Ok(st.index.range(range, at, limit))
    }

    /// The key-values of keys picked at `at` (`pick_page`); `Compacted` when a compaction
    /// removed them meanwhile.
    pub fn values(&self, picked: Picked, at: i64) -> Result<Vec<KeyValue>> {
        let at = if at <= 0 { self.rev } else { at };
        self.store.load_values(picked, at)
    }

    /// How many keys of `range` are alive at `at` (0 = the view's revision); `Compacted` when
    /// a compaction passed `at` since the pages were picked (the index no longer knows).
    pub fn count(&self, range: KeyRange<'_>, at: i64) -> Result<usize> {
        let at = if at <= 0 { self.rev } else { at };
        let st = self.store.state();
        check_at(&st, at, self.rev)?;
        Ok(st.index.count(range, at))
    }
}

/// Reads inside a transaction: a read-only Txn reads a `ReadView`, a Txn that writes reads
/// its own `WriteTxn` (seeing its own writes).
pub trait TxnRead {
    fn txn_range(&mut self, range: KeyRange<'_>, rev: i64, limit: usize) -> Result<RangeResult>;
}

impl TxnRead for ReadView<'_> {
    fn txn_range(&mut self, range: KeyRange<'_>, rev: i64, limit: usize) -> Result<RangeResult> {
        self.tally.ranges += 1;
        self.range(range, rev, limit)
    }
}

impl TxnRead for WriteTxn<'_> {
    fn txn_range(&mut self, range: KeyRange<'_>, rev: i64, limit: usize) -> Result<RangeResult> {
        self.tally.ranges += 1;
        self.range(range, rev, limit)
    }
}

/// The changes of one applied request: puts and deletes at revision `begin_rev + 1`, visible
/// to other readers only once `end` makes them the current revision.
pub struct WriteTxn<'a> {
    store: &'a KvStore,
    _guard: MutexGuard<'a, ()>,
    /// Taken by `end`; still here on drop means the apply failed half-way.
    group: Option<BatchWrite<'a>>,
    begin_rev: i64,
    sub: i64,
    events: Vec<Event>,
    /// A compaction this transaction schedules (started once the transaction ends).
    compact_to: Option<i64>,
    tally: Tally,
}

impl<'a> WriteTxn<'a> {
    fn group(&mut self) -> &mut BatchWrite<'a> {
        // Only `end` and drop take the group, and both consume the transaction.
        self.group.as_mut().unwrap_or_else(|| unreachable!())
    }

    /// The revision this transaction writes at.
    pub fn rev(&self) -> i64 {
        self.begin_rev + 1
    }

    fn read_rev(&self) -> i64 {
        if self.sub > 0 {
            self.begin_rev + 1
        } else {
            self.begin_rev
        }
    }

    fn load(&mut self, rev: Revision) -> Result<KeyValue> {
        let v = self
            .group()
            .get(buckets::KEY, &rev.to_bytes())?
            .ok_or_else(|| {
                MvccError::Corrupt(format!(
                    "revision {rev} is in the index but not in the backend"
                ))
            })?;
        KeyValue::decode(v.as_slice())
            .map_err(|e| MvccError::Corrupt(format!("bad key-value at revision {rev}: {e}")))
    }

    /// Reads inside the transaction, seeing its own writes.
    pub fn range(&mut self, range: KeyRange<'_>, rev: i64, limit: usize) -> Result<RangeResult> {
        let cur = self.read_rev();
        let (at, picked, count) = {
            let st = self.store.state();
            let at = if rev <= 0 { cur } else { rev };
            let (picked, count) = pick(&st, range, at, cur, limit)?;
            (at, picked, count)
        };
        let mut kvs = Vec::with_capacity(picked.len());
        for (_, s) in picked {
            kvs.push(self.load(s.modified)?);
        }
        Ok(RangeResult {
            kvs,
            count,
            rev: at,
        })
    }

    /// The current key-value of `key` (for prev_kv, ignore_value and ignore_lease).
    pub fn get(&mut self, key: &[u8]) -> Result<Option<KeyValue>> {
        let cur = self.read_rev();
        let s = self.store.state().index.get(key, cur);
        match s {
            Some(s) => Ok(Some(self.load(s.modified)?)),
            None => Ok(None),
        }
    }

    /// Writes `key` = `value` with `lease`; returns the previous key-value if there was one.
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<Option<KeyValue>> {
        self.put_with(key, value, lease, true)
    }

    /// `put` that reads the previous value from the backend only when `want_prev` asks for
    /// it or a watcher wants prev_kv (`prev_kv_interest`), and returns it when it read it;
    /// otherwise it returns None and the event carries no prev_kv. The creation revision and
    /// version come from the index, as etcd's do: reading the old value's page on every put
    /// made a random-key load pull the whole db file into memory (issue 19).
    pub fn put_with(
        &mut self,
        key: &[u8],
        value: &[u8],
        lease: i64,
        want_prev: bool,
    ) -> Result<Option<KeyValue>> {
        self.tally.puts += 1;
        self.tally.put_bytes += (key.len() + value.len()) as u64;
        let cur = self.read_rev();
        let at = self.store.state().index.get(key, cur);
        let prev = match at {
            Some(s) if want_prev || self.store.prev_wanted() => Some(self.load(s.modified)?),
            _ => None,
        };
        let rev = Revision::new(self.rev(), self.sub);
        let (created, version) = match at {
            Some(s) => (s.created.main, s.version + 1),
            None => (rev.main, 1),
        };
        // The index is what etcd trusts too; the tests check it agrees with the backend.
        debug_assert!(
            prev.as_ref()
                .is_none_or(|p| (p.create_revision, p.version + 1) == (created, version)),
            "key {key:?}: the index says created {created} version {}, the backend {:?}",
            version - 1,
            prev.as_ref().map(|p| (p.create_revision, p.version))
        );
        let kv = KeyValue {
            key: key.to_vec(),
            create_revision: created,
            mod_revision: rev.main,
            version,
            value: value.to_vec(),
            lease,
        };
        // Revisions only grow: sequential puts keep the key bucket's pages full, as etcd's.
        self.group()
            .put_seq(buckets::KEY, &rev.to_bytes(), &kv.encode_to_vec());
        {
            let mut st = self.store.state_mut();
            st.index.put(key, rev);
            if at.is_none() {
                st.live += 1;
            }
        }
        self.sub += 1;
        self.events.push(Event {
            r#type: EventType::Put as i32,
            kv: Some(kv),
            prev_kv: prev.clone(),
        });
        Ok(prev)
    }

    /// Deletes the keys of `range` alive now; returns the deleted key-values.
    pub fn delete_range(&mut self, range: KeyRange<'_>) -> Result<Vec<KeyValue>> {
        self.delete_range_with(range, true).map(|(_, prevs)| prevs)
    }

    /// Deletes the keys of `range` alive now; returns how many, and the deleted key-values
    /// when `want_prev` asks for them (read from the backend, as for events when a watcher
    /// wants prev_kv; otherwise no value page is read, see `put_with`).
    pub fn delete_range_with(
        &mut self,
        range: KeyRange<'_>,
        want_prev: bool,
    ) -> Result<(usize, Vec<KeyValue>)> {
        self.tally.deletes += 1;
        let load = want_prev || self.store.prev_wanted();
        let cur = self.read_rev();
        let victims: Vec<(Vec<u8>, Revision)> = {
            let st = self.store.state();
            st.index
                .range(range, cur, 0)
                .into_iter()
                .map(|(k, s)| (k, s.modified))
                .collect()
        };
        let count = victims.len();
        let mut deleted = Vec::with_capacity(if want_prev { count } else { 0 });
        for (key, modified) in victims {
            let prev = if load {
                Some(self.load(modified)?)
            } else {
                None
            };
            let rev = Revision::new(self.rev(), self.sub);
            let tomb = KeyValue {
                key: key.clone(),
                ..Default::default()
            };
            self.group().put_seq(
                buckets::KEY,
                &rev.to_tombstone_bytes(),
                &tomb.encode_to_vec(),
            );
            {
                let mut st = self.store.state_mut();
                st.index.tombstone(&key, rev);
                st.live -= 1;
            }
            self.sub += 1;
            self.events.push(Event {
                r#type: EventType::Delete as i32,
                kv: Some(KeyValue {
                    key,
                    mod_revision: rev.main,
                    ..Default::default()
                }),
                prev_kv: prev.clone(),
            });
            if want_prev && let Some(p) = prev {
                deleted.push(p);
            }
        }
        Ok((count, deleted))
    }

    /// Schedules a compaction at `rev` with this transaction: reads below `rev` are refused
    /// once it ends, and the worker deletes the old revisions in the background.
    pub fn compact(&mut self, rev: i64) -> Result<()> {
        self.store.check_compaction(rev, self.read_rev())?;
        self.group().put(
            buckets::META,
            SCHEDULED_COMPACT_KEY,
            &Revision::new(rev, 0).to_bytes(),
        );
        self.compact_to = Some(rev);
        Ok(())
    }

    /// Reads a key of another bucket, seeing this transaction's writes.
    pub fn get_raw(&mut self, bucket: &[u8], key: &[u8]) -> Option<Vec<u8>> {
        self.group().get(bucket, key).ok().flatten()
    }

    /// Writes a key of another bucket in the same atomic group (leases, auth, membership).
    pub fn put_raw(&mut self, bucket: &[u8], key: &[u8], value: &[u8]) {
        self.group().put(bucket, key, value);
    }

    pub fn delete_raw(&mut self, bucket: &[u8], key: &[u8]) {
        self.group().delete(bucket, key);
    }

    /// Ends the transaction as the apply of raft entry `index` in `term`: the consistent index
    /// is stored in the same atomic group, and the changes become the current revision.
    /// Returns the events for watchers and the store's revision afterwards.
    pub fn end(mut self, index: u64, term: u64) -> Result<(Arc<Vec<Event>>, i64)> {
        self.store.counts.record(self.tally);
        let g = self.group();
        g.put(buckets::META, CONSISTENT_INDEX_KEY, &index.to_be_bytes());
        g.put(buckets::META, TERM_KEY, &term.to_be_bytes());
        // The values must be in the backend before the revision that names them is current:
        // a reader picks revisions up to the current one and reads their values at once.
        let finished = match self.group.take() {
            Some(g) => g.finish(),
            None => Ok(()),
        };
        let (rev, events) = self.publish(Some((index, term)));
        finished?;
        Ok((events, rev))
    }

    /// Makes the written changes the current revision (their events first go to the
    /// store's recent events, so a watcher woken by the new revision finds them there).
    fn publish(&mut self, applied: Option<(u64, u64)>) -> (i64, Arc<Vec<Event>>) {
        let events = Arc::new(std::mem::take(&mut self.events));
        let size = if self.sub > 0 {
            lock(&self.store.recent).push(self.begin_rev + 1, events.clone())
        } else {
            0
        };
        let mut st = self.store.state_mut();
        if self.sub > 0 {
            st.current_rev = self.begin_rev + 1;
        }
        if let Some((index, term)) = applied {
            st.consistent_index = index;
            st.term = term;
        }
        if let Some(at) = self.compact_to.take() {
            st.compact_rev = at;
            self.store.jobs.push(at);
        }
        let rev = st.current_rev;
        drop(st);
        self.store.rev_tx.send_if_modified(|r| {
            let changed = *r != rev;
            *r = rev;
            changed
        });
        if self.sub > 0 {
            self.store.hub.published(rev, size);
        }
        (rev, events)
    }
}

impl Drop for WriteTxn<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.group.take() {
            // An apply that failed half-way: keep the index and the revision consistent with
            // what reached the backend buffer, and say so.
            if self.sub > 0 {
                tracing::error!(
                    revision = self.begin_rev + 1,
                    "a write transaction ended without being applied completely"
                );
            }
            if let Err(e) = g.finish() {
                tracing::error!(error = %e, "backend commit after a failed apply");
            }
            self.publish(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_event(value_len: usize) -> Arc<Vec<Event>> {
        Arc::new(vec![Event {
            kv: Some(proto::mvccpb::KeyValue {
                key: b"k".to_vec(),
                value: vec![0; value_len],
                ..Default::default()
            }),
            ..Default::default()
        }])
    }

    #[test]
    fn a_revision_over_the_budget_is_not_kept() {
        let mut r = Recent::default();
        r.push(1, one_event(10));
        r.push(2, one_event(10));
        assert_eq!(r.revs.len(), 2);
        r.push(3, one_event(RECENT_BYTES + 1));
        assert!(r.revs.is_empty());
        assert_eq!(r.bytes, 0);
        r.push(4, one_event(10));
        assert_eq!(r.revs.len(), 1);
        // Older revisions give way to stay within the budget.
        r.push(5, one_event(RECENT_BYTES - 100));
        assert_eq!(r.revs.iter().map(|x| x.0).collect::<Vec<_>>(), [5]);
    }
}
