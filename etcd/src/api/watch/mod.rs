// The Watch service: one loop per client stream, run by its response body. Watchers that are
// caught up get their events from the store's watch hub (mvcc::watch_hub), which hands each
// revision to exactly the watchers that want it; a watcher behind (a start revision in the
// past, or a stream that did not keep up) catches up from the store's history here, then
// joins the hub.

mod frame;
mod wake;

pub use frame::{WatchFrame, WatchServer};

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use prost::Message;
use proto::etcdserverpb::{
    WatchCreateRequest, WatchRequest, WatchResponse, watch_create_request::FilterType,
    watch_request::RequestUnion,
};
use proto::mvccpb::Event;
use tokio_stream::Stream as _;
use tonic::{Request, Response, Status, Streaming};

use super::errors;
use crate::metrics::METRICS;
use crate::mvcc::watch_hub::{Delivery, Groups, StreamHandle, WatchHub, WatchSpec};
use crate::mvcc::{KeyRange, KvStore, MvccError, PrevKvInterest, prev_kv_missing};
use crate::server::EtcdServer;

/// Events read from the history per round, so one busy watcher cannot build a huge message.
const EVENTS_PER_ROUND: usize = 1000;
/// Bytes of events per response (whole revisions; a single larger revision goes whole).
const ROUND_BYTES: usize = 1 << 20;

/// Revisions of one synced watcher waiting in its stream's mailbox beyond which they go
/// merged into fewer responses: etcd keeps 128 responses per watcher before it treats the
/// watcher as behind and catches it up in batches.
const MERGE_BEHIND: usize = 128;

/// Responses queued per stream before its loop lets the client take them: with rounds of
/// about ROUND_BYTES, this bounds what a client that stops reading makes us hold.
const STREAM_BUFFER: usize = 4;

fn rev_of(e: &Event) -> i64 {
    e.kv.as_ref().map(|k| k.mod_revision).unwrap_or(0)
}

/// Cuts `events` (read through revision `through`) at the first revision boundary past
/// ROUND_BYTES; returns what is left and the last revision it covers.
fn trim_round(mut events: Vec<Event>, through: i64) -> (Vec<Event>, i64) {
    let Some(first_rev) = events.first().map(rev_of) else {
        return (events, through);
    };
    let mut size = 0;
    for i in 0..events.len() {
        let rev = rev_of(&events[i]);
        if size > ROUND_BYTES && rev > first_rev && rev != rev_of(&events[i - 1]) {
            events.truncate(i);
            return (events, rev - 1);
        }
        size += events[i].encoded_len();
    }
    (events, through)
}

/// Deliveries grouped by watcher, watchers in order of first delivery, each watcher's in
/// revision order.
fn by_watcher(deliveries: Vec<Delivery>) -> Vec<(i64, Vec<Delivery>)> {
    let mut groups = Groups::new();
    for d in deliveries {
        groups.push(d.watch_id, d);
    }
    groups.into_vec()
}

pub struct WatchService {
    pub server: Arc<EtcdServer>,
}

struct Watcher {
    spec: WatchSpec,
    /// The next revision to send events from.
    next_rev: i64,
    /// In the hub, which delivers its events; otherwise it catches up from history.
    synced: bool,
    progress_notify: bool,
    /// Split responses larger than --max-request-bytes (etcd's fragment option).
    fragment: bool,
    /// With prev_kv: makes writes put the old values in their events while this lives.
    _prev_interest: Option<PrevKvInterest>,
}

/// Responses the stream's loop made and its answer stream has not yet handed to the client.
type Out = Arc<Mutex<VecDeque<WatchFrame>>>;

/// Gives the answer stream its turn: pending once, without a wake-up, because the answer
/// stream takes a queued frame before it polls the loop again (see AnswerStream).
struct TakeTurn(bool);

impl Future for TakeTurn {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A Watch call's answer: polling it runs the stream's loop (run_stream) until that has
/// queued a frame, so an event goes from the hub's mailbox into the response body in the
/// task that writes the body, not through a task and a channel of its own. When the client
/// goes away, hyper drops it, and the loop with it (StreamState's Drop leaves the hub).
struct AnswerStream {
    queue: Out,
    run: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The queue may hold frames: only the loop fills it, and only while this polls it, so
    /// after the queue was found empty it stays so until the loop runs again.
    maybe_queued: bool,
}

impl AnswerStream {
    fn pop(&self) -> Option<WatchFrame> {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }
}

impl tokio_stream::Stream for AnswerStream {
    type Item = Result<WatchFrame, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.maybe_queued {
            if let Some(f) = self.pop() {
                return Poll::Ready(Some(Ok(f)));
            }
            self.maybe_queued = false;
        }
        let Some(run) = self.run.as_mut() else {
            return Poll::Ready(None);
        };
        // The loop only waits with nothing queued on what will wake this task (the
        // mailbox, the client's side, the ticker), or in TakeTurn with frames queued.
        let done = run.as_mut().poll(cx).is_ready();
        if done {
            self.run = None;
        }
        match self.pop() {
            Some(f) => {
                self.maybe_queued = true;
                Poll::Ready(Some(Ok(f)))
            }
            None if done => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

struct StreamState {
    server: Arc<EtcdServer>,
    store: Arc<KvStore>,
    hub: Arc<WatchHub>,
    handle: StreamHandle,
    /// The stream's metadata (its token), checked again at each watch creation, as etcd does.
    auth_req: Request<()>,
    out: Out,
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
    /// The highest header revision of a response sent on this stream: a progress answer
    /// never names less (a watcher caught up from history may be ahead of the hub).
    sent_rev: i64,
}

/// The stream leaves the hub however its loop ends: its own way, or dropped with the answer
/// stream when the client goes away (even one that never closed its own side).
impl Drop for StreamState {
    fn drop(&mut self) {
        self.hub.close_stream(&self.handle);
        METRICS.watch_streams.dec();
        METRICS.watchers.sub(self.watchers.len() as i64);
    }
}

impl StreamState {
    fn header(&self, rev: i64) -> Option<proto::etcdserverpb::ResponseHeader> {
        self.server.header(rev)
    }

    fn watch_permitted(&self, c: &WatchCreateRequest) -> bool {
        super::auth::identity(&self.server, &self.auth_req).is_ok_and(|ai| {
            self.server
                .auth()
                .check(&ai, &c.key, &c.range_end, crate::auth::Access::Read)
                .is_ok()
        })
    }

    /// Queues `f` for the client; once STREAM_BUFFER frames wait, lets the client's side
    /// take them before going on.
    async fn send(&mut self, f: WatchFrame) {
        if let Some(h) = &f.head.header {
            self.sent_rev = self.sent_rev.max(h.revision);
        }
        let queued = {
            let mut q = self.out.lock().unwrap_or_else(|e| e.into_inner());
            q.push_back(f);
            q.len()
        };
        if queued >= STREAM_BUFFER {
            TakeTurn(false).await;
        }
    }

    /// Sends `events` to watcher `id` (split as its fragment option says).
    async fn send_events(&mut self, id: i64, header_rev: i64, events: Vec<Bytes>) {
        let Some(fragment) = self.watchers.get(&id).map(|w| w.fragment) else {
            return;
        };
        METRICS.watch_events.add(events.len() as u64);
        let frame = WatchFrame {
            head: WatchResponse {
                header: self.header(header_rev),
                watch_id: id,
                ..Default::default()
            },
            events,
        };
        if !fragment {
            return self.send(frame).await;
        }
        // etcd's limit: the request limit plus its allowance for gRPC overhead.
        let limit = self.server.cfg().max_request_bytes + super::serve::GRPC_OVERHEAD_BYTES;
        for part in frame.fragments(limit) {
            self.send(part).await;
        }
    }

    async fn create(&mut self, c: WatchCreateRequest) -> bool {
        let current = self.store.current_rev();
        let id = if c.watch_id != 0 {
            if self.watchers.contains_key(&c.watch_id) {
                // etcd refuses a duplicate id with a canceled creation.
                self.send(
                    WatchResponse {
                        header: self.header(current),
                        watch_id: c.watch_id,
                        created: true,
                        canceled: true,
                        cancel_reason: "etcdserver: duplicate watch ID".into(),
                        ..Default::default()
                    }
                    .into(),
                )
                .await;
                return true;
            }
            c.watch_id
        } else {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id
        };
        if !self.watch_permitted(&c) {
            self.send(
                WatchResponse {
                    header: self.header(current),
                    // etcd answers a denied watch with no id (-1) and the whole gRPC
                    // error text as the reason.
                    watch_id: -1,
                    created: true,
                    canceled: true,
                    cancel_reason: format!(
                        "rpc error: code = PermissionDenied desc = {}",
                        errors::PERMISSION_DENIED.message
                    ),
                    ..Default::default()
                }
                .into(),
            )
            .await;
            return true;
        }
        if c.watch_id == 0 {
            // An id the server chose is never handed out again on this stream, as etcd's:
            // a late answer of a canceled watch must not look like one of its successor's.
            self.next_id = id + 1;
        }
        let spec = WatchSpec {
            key: c.key,
            range_end: c.range_end,
            no_put: c.filters.contains(&(FilterType::Noput as i32)),
            no_delete: c.filters.contains(&(FilterType::Nodelete as i32)),
            prev_kv: c.prev_kv,
        };
        // Before the watcher joins the hub, so most events it is handed carry their prev_kv
        // (the hub sends it back to the history for any that do not).
        let prev_interest = spec.prev_kv.then(|| self.store.prev_kv_interest());
        let (next_rev, synced) = if c.start_revision <= 0 {
            let from = self
                .hub
                .watch_from_now(&self.store, &self.handle, id, spec.clone());
            (from, true)
        } else {
            (c.start_revision, false)
        };
        METRICS.watchers.inc();
        self.watchers.insert(
            id,
            Watcher {
                spec,
                next_rev,
                synced,
                progress_notify: c.progress_notify,
                fragment: c.fragment,
                _prev_interest: prev_interest,
            },
        );
        self.send(
            WatchResponse {
                header: self.header(current),
                watch_id: id,
                created: true,
                ..Default::default()
            }
            .into(),
        )
        .await;
        true
    }

    async fn cancel(&mut self, id: i64) -> bool {
        if self.watchers.remove(&id).is_none() {
            return true;
        }
        METRICS.watchers.dec();
        self.hub.remove(&self.handle, id);
        self.send(
            WatchResponse {
                header: self.header(self.store.current_rev()),
                watch_id: id,
                canceled: true,
                ..Default::default()
            }
            .into(),
        )
        .await;
        true
    }

    /// Sends what the hub delivered to this stream's synced watchers: one response per
    /// revision, as etcd sends a synced watcher, unless a watcher fell more than
    /// MERGE_BEHIND revisions behind (etcd then catches it up with merged responses too):
    /// its revisions go merged into responses of about ROUND_BYTES. Watchers the hub let go
    /// catch up from history. Returns the revision the deliveries cover.
    async fn drain(&mut self) -> i64 {
        let taken = self.hub.take(&self.handle);
        for (id, ds) in by_watcher(taken.deliveries) {
            let merge = ds.len() > MERGE_BEHIND;
            let mut events: Vec<Bytes> = Vec::new();
            let mut size = 0;
            let mut last_rev = 0;
            for d in ds {
                let Some(w) = self.watchers.get_mut(&id) else {
                    break;
                };
                if !w.synced || d.rev < w.next_rev {
                    continue;
                }
                w.next_rev = d.rev + 1;
                if (!merge || size > ROUND_BYTES) && !events.is_empty() {
                    self.send_events(id, last_rev, std::mem::take(&mut events))
                        .await;
                    size = 0;
                }
                size += d.events.iter().map(Bytes::len).sum::<usize>();
                last_rev = d.rev;
                if events.is_empty() {
                    events = d.events;
                } else {
                    events.extend(d.events);
                }
            }
            if !events.is_empty() {
                self.send_events(id, last_rev, events).await;
            }
        }
        for (id, from) in taken.unsynced {
            if let Some(w) = self.watchers.get_mut(&id) {
                w.synced = false;
                w.next_rev = w.next_rev.max(from);
            }
        }
        taken.through
    }

    /// Drains the mailbox once the hub has handed out every revision this stream's responses
    /// named; returns the revision the deliveries cover, then at least any named before. A
    /// watcher caught up from history reads up to the store's revision, which the hub may not
    /// have dispatched yet: a progress answer of the hub's revision alone would go back.
    async fn drain_past_sent(&mut self) -> i64 {
        loop {
            self.hub.wait_dispatched(self.sent_rev).await;
            let through = self.drain().await;
            if through >= self.sent_rev {
                return through;
            }
        }
    }

    /// Brings every watcher that is behind up to date from the store's history, then hands
    /// it to the hub.
    async fn catch_up(&mut self) -> bool {
        let ids: Vec<i64> = self
            .watchers
            .iter()
            .filter(|(_, w)| !w.synced)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if !self.catch_up_one(id).await {
                return false;
            }
        }
        true
    }

    async fn catch_up_one(&mut self, id: i64) -> bool {
        let store = self.store.clone();
        loop {
            let current = store.current_rev();
            let Some(w) = self.watchers.get(&id) else {
                return true;
            };
            if w.next_rev > current {
                if self.hub.try_sync(&self.handle, id, &w.spec, w.next_rev) {
                    if let Some(w) = self.watchers.get_mut(&id) {
                        w.synced = true;
                    }
                    return true;
                }
                // The hub already handed out a later revision: read up to it first.
                tokio::task::yield_now().await;
                continue;
            }
            let from = w.next_rev;
            let spec = w.spec.clone();
            let (events, through) = match read_history(&store, &spec, from, current).await {
                Ok(r) => r,
                Err(MvccError::Compacted) => {
                    if self.watchers.remove(&id).is_some() {
                        METRICS.watchers.dec();
                    }
                    // No cancel_reason, as etcd: clients read the compact_revision (clientv3
                    // turns it into ErrCompacted).
                    let resp = WatchResponse {
                        header: self.header(0),
                        watch_id: id,
                        canceled: true,
                        compact_revision: store.compact_rev(),
                        ..Default::default()
                    };
                    self.send(resp.into()).await;
                    return true;
                }
                Err(e) => {
                    tracing::error!(error = %e, "watch cannot read the history");
                    return false;
                }
            };
            if let Some(w) = self.watchers.get_mut(&id) {
                w.next_rev = through + 1;
            }
            if events.is_empty() {
                continue;
            }
            let encoded = events
                .iter()
                .map(|e| {
                    if spec.prev_kv || e.prev_kv.is_none() {
                        Bytes::from(e.encode_to_vec())
                    } else {
                        Bytes::from(
                            Event {
                                prev_kv: None,
                                ..e.clone()
                            }
                            .encode_to_vec(),
                        )
                    }
                })
                .collect();
            self.send_events(id, current, encoded).await;
        }
    }

    /// Answers a progress request: once every watcher is caught up and everything the hub
    /// delivered up to some revision is sent, that revision (never more than what was sent:
    /// a progress answer must not overtake an event).
    async fn progress(&mut self) -> bool {
        // The hub first catches up with the store, so the answer is as fresh as a read.
        self.hub.wait_dispatched(self.store.current_rev()).await;
        loop {
            if !self.catch_up().await {
                return false;
            }
            let through = self.drain_past_sent().await;
            if self.watchers.values().all(|w| w.synced) {
                self.send(
                    WatchResponse {
                        header: self.header(through),
                        watch_id: -1,
                        ..Default::default()
                    }
                    .into(),
                )
                .await;
                return true;
            }
        }
    }

    /// --experimental-watch-progress-notify-interval: each synced watcher that asked for
    /// progress notifications hears the revision everything it was owed is sent through.
    async fn notify_progress(&mut self) -> bool {
        let through = self.drain_past_sent().await;
        let ids: Vec<i64> = self
            .watchers
            .iter()
            .filter(|(_, w)| w.progress_notify && w.synced)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.send(
                WatchResponse {
                    header: self.header(through),
                    watch_id: id,
                    ..Default::default()
                }
                .into(),
            )
            .await;
        }
        true
    }
}

/// Events of `[from, current]` for `spec`, about one round's worth (whole revisions), with
/// each event's prev_kv when asked; returns them with the last revision they cover. Recent
/// revisions come from memory, older ones from the backend.
async fn read_history(
    store: &Arc<KvStore>,
    spec: &WatchSpec,
    from: i64,
    current: i64,
) -> Result<(Vec<Event>, i64), MvccError> {
    if let Some((events, through)) =
        store.events_cached_for(from, current, EVENTS_PER_ROUND, |e| spec.wants(e))
    {
        let (mut events, through) = trim_round(events, through);
        if spec.prev_kv {
            fill_prev_kvs(store, &mut events).await;
        }
        return Ok((events, through));
    }
    let s = store.clone();
    let read = tokio::task::spawn_blocking(move || s.events(from, current, EVENTS_PER_ROUND))
        .await
        .map_err(|e| MvccError::Corrupt(format!("watch history reader failed: {e}")))??;
    // A full round may end inside a revision: resume from the last complete one; when the
    // round holds one revision only, read all of it (a txn's events travel together).
    let (events, through) = if read.len() >= EVENTS_PER_ROUND {
        let last = read.last().map(rev_of).unwrap_or(current);
        if last > from {
            (read, last - 1)
        } else {
            let s = store.clone();
            let all = tokio::task::spawn_blocking(move || s.events(from, from, 0))
                .await
                .map_err(|e| MvccError::Corrupt(format!("watch history reader failed: {e}")))??;
            (all, from)
        }
    } else {
        (read, current)
    };
    let (events, through) = trim_round(events, through);
    let mut mine: Vec<Event> = events
        .into_iter()
        .filter(|e| rev_of(e) <= through && spec.wants(e))
        .collect();
    if spec.prev_kv {
        fill_prev_kvs(store, &mut mine).await;
    }
    Ok((mine, through))
}

/// Reads from the backend the prev_kv of the events that had one and do not carry it (read
/// from the history, or written while no watcher wanted prev_kv): the key as of the
/// revision before. A prev_kv compacted away meanwhile stays missing, as in etcd.
async fn fill_prev_kvs(store: &Arc<KvStore>, events: &mut [Event]) {
    let missing: Vec<(usize, Vec<u8>, i64)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| prev_kv_missing(e))
        .filter_map(|(i, e)| {
            e.kv.as_ref()
                .map(|kv| (i, kv.key.clone(), kv.mod_revision - 1))
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    let s = store.clone();
    let found = tokio::task::spawn_blocking(move || {
        missing
            .into_iter()
            .map(|(i, key, before)| {
                let prev = s
                    .range(KeyRange::new(&key, b""), before, 1)
                    .ok()
                    .and_then(|r| r.kvs.into_iter().next());
                (i, prev)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for (i, prev) in found {
        events[i].prev_kv = prev;
    }
}

/// Turns of a stream's loop between those that look at the client's requests first.
const INBOUND_TURN: u32 = 16;

/// What woke a stream's loop.
enum Wake {
    Inbound(Option<Result<WatchRequest, Status>>),
    Mailbox,
    Tick,
}

async fn run_stream(
    server: Arc<EtcdServer>,
    auth_req: Request<()>,
    mut inbound: Streaming<WatchRequest>,
    out: Out,
) {
    let interval = server.cfg().experimental_watch_progress_notify_interval;
    let mut ticker = tokio::time::interval(if interval.is_zero() {
        std::time::Duration::from_secs(600)
    } else {
        interval
    });
    ticker.tick().await;
    let store = server.kv().clone();
    let hub = store.watch_hub().clone();
    let wakes = wake::Wakes::new();
    let handle = hub.open_stream(wakes.waker(wake::MAILBOX).clone());
    METRICS.watch_streams.inc();
    let mut st = StreamState {
        server,
        store,
        hub,
        handle,
        auth_req,
        out,
        watchers: BTreeMap::new(),
        next_id: 0,
        sent_rev: 0,
    };
    // As etcd, a client that half-closes its side keeps its watches: events flow until the
    // client goes away (the JSON gateway's /v3/watch relies on this).
    let mut inbound_open = true;
    let mut turn: u32 = 0;
    loop {
        turn = turn.wrapping_add(1);
        // Events first: polling the client's side takes its connection's lock, and a busy
        // stream wakes once per revision. Every INBOUND_TURN-th turn the client's side goes
        // first, so a flood of events cannot hold back a cancel or a progress request.
        let inbound_first = turn.is_multiple_of(INBOUND_TURN);
        let wake = std::future::poll_fn(|cx| {
            wakes.wake_into(cx);
            let mut client = |open: bool| {
                if !open || !wakes.take(wake::INBOUND) {
                    return None;
                }
                let msg = Pin::new(&mut inbound).poll_next(&mut wakes.context(wake::INBOUND));
                match msg {
                    Poll::Ready(msg) => {
                        wakes.again(wake::INBOUND);
                        Some(Wake::Inbound(msg))
                    }
                    Poll::Pending => None,
                }
            };
            if inbound_first && let Some(w) = client(inbound_open) {
                return Poll::Ready(w);
            }
            if wakes.take(wake::MAILBOX) {
                return Poll::Ready(Wake::Mailbox);
            }
            if !inbound_first && let Some(w) = client(inbound_open) {
                return Poll::Ready(w);
            }
            if wakes.take(wake::TICK) && ticker.poll_tick(&mut wakes.context(wake::TICK)).is_ready()
            {
                wakes.again(wake::TICK);
                return Poll::Ready(Wake::Tick);
            }
            Poll::Pending
        })
        .await;
        match wake {
            Wake::Inbound(msg) => {
                let req = match msg {
                    Some(Ok(r)) => r,
                    None => {
                        inbound_open = false;
                        continue;
                    }
                    Some(Err(_)) => break,
                };
                let ok = match req.request_union {
                    Some(RequestUnion::CreateRequest(c)) => {
                        st.create(c).await && st.catch_up().await
                    }
                    Some(RequestUnion::CancelRequest(c)) => st.cancel(c.watch_id).await,
                    Some(RequestUnion::ProgressRequest(_)) => st.progress().await,
                    None => true,
                };
                if !ok {
                    break;
                }
            }
            Wake::Mailbox => {
                st.drain().await;
                if !st.catch_up().await {
                    break;
                }
            }
            Wake::Tick => {
                if !st.notify_progress().await {
                    break;
                }
            }
        }
    }
}

#[tonic::async_trait]
impl frame::WatchFrames for WatchService {
    async fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<frame::FrameStream>, Status> {
        self.server.guard(false)?;
        let (metadata, extensions, inbound) = request.into_parts();
        let auth_req = Request::from_parts(metadata, extensions, ());
        let queue: Out = Arc::default();
        let run = run_stream(self.server.clone(), auth_req, inbound, queue.clone());
        Ok(Response::new(Box::pin(AnswerStream {
            queue,
            run: Some(Box::pin(run)),
            maybe_queued: false,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(watch_id: i64, rev: i64) -> Delivery {
        Delivery {
            watch_id,
            rev,
            events: vec![Bytes::from(format!("{watch_id}@{rev}"))],
        }
    }

    fn shape(groups: &[(i64, Vec<Delivery>)]) -> Vec<(i64, Vec<i64>)> {
        groups
            .iter()
            .map(|(id, ds)| (*id, ds.iter().map(|d| d.rev).collect()))
            .collect()
    }

    #[test]
    fn deliveries_group_by_watcher_in_order_of_first_delivery() {
        assert!(by_watcher(Vec::new()).is_empty());
        let one = by_watcher(vec![d(7, 2), d(7, 3), d(7, 5)]);
        assert_eq!(shape(&one), vec![(7, vec![2, 3, 5])]);
        let mixed = by_watcher(vec![d(9, 2), d(4, 2), d(9, 3), d(1, 4), d(4, 5)]);
        assert_eq!(
            shape(&mixed),
            vec![(9, vec![2, 3]), (4, vec![2, 5]), (1, vec![4])]
        );
    }
}
