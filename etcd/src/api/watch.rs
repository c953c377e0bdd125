// The Watch service: one task per client stream holds its watchers and pulls their events from
// the store's history whenever the revision moves, so the apply loop never waits on a client
// and a slow client only slows its own stream (its channel is bounded).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use proto::etcdserverpb::{
    WatchCreateRequest, WatchRequest, WatchResponse, watch_create_request::FilterType,
    watch_request::RequestUnion, watch_server::Watch,
};
use proto::mvccpb::{Event, event::EventType};
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming};

use super::errors;
use crate::mvcc::{KeyRange, MvccError};
use crate::server::EtcdServer;

/// Events read from the history per round, so one busy watcher cannot build a huge message.
const EVENTS_PER_ROUND: usize = 1000;
/// Bytes of events read per round (whole revisions; a single larger revision goes whole).
const ROUND_BYTES: usize = 1 << 20;

/// Cuts `events` (read through revision `through`) at the first revision boundary past
/// ROUND_BYTES; returns what is left and the last revision it covers.
fn trim_round(mut events: Vec<Event>, through: i64) -> (Vec<Event>, i64) {
    use prost::Message;
    let rev_of = |e: &Event| e.kv.as_ref().map(|k| k.mod_revision).unwrap_or(0);
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

/// Responses buffered per stream before the stream task waits for the client: with rounds
/// of about ROUND_BYTES, this bounds what a client that stops reading makes us hold.
const STREAM_BUFFER: usize = 4;

/// etcd's fragment option: a response over `limit` bytes goes out as several, each with as
/// many events as fit (at least one), all but the last marked `fragment`.
fn fragments(resp: WatchResponse, fragment: bool, limit: usize) -> Vec<WatchResponse> {
    use prost::Message;
    if !fragment || resp.encoded_len() <= limit {
        return vec![resp];
    }
    let mut out = Vec::new();
    let mut cur = WatchResponse {
        events: Vec::new(),
        ..resp.clone()
    };
    let base = cur.encoded_len();
    let mut size = base;
    for e in resp.events {
        let n = e.encoded_len() + 8;
        if !cur.events.is_empty() && size + n > limit {
            let next = WatchResponse {
                events: Vec::new(),
                ..cur.clone()
            };
            cur.fragment = true;
            out.push(std::mem::replace(&mut cur, next));
            size = base;
        }
        size += n;
        cur.events.push(e);
    }
    out.push(cur);
    out
}

pub struct WatchService {
    pub server: Arc<EtcdServer>,
}

struct Watcher {
    key: Vec<u8>,
    range_end: Vec<u8>,
    /// The next revision to send events from.
    next_rev: i64,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    progress_notify: bool,
    /// Split responses larger than --max-request-bytes (etcd's fragment option).
    fragment: bool,
}

impl Watcher {
    fn wants(&self, e: &Event) -> bool {
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

type Out = mpsc::Sender<Result<WatchResponse, Status>>;

struct StreamState {
    server: Arc<EtcdServer>,
    /// The stream's metadata (its token), checked again at each watch creation, as etcd does.
    auth_req: Request<()>,
    out: Out,
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
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

    async fn send(&self, r: WatchResponse) -> bool {
        self.out.send(Ok(r)).await.is_ok()
    }

    async fn create(&mut self, c: WatchCreateRequest) -> bool {
        let store = self.server.kv();
        let current = store.current_rev();
        let id = if c.watch_id != 0 {
            if self.watchers.contains_key(&c.watch_id) {
                // etcd refuses a duplicate id with a canceled creation.
                return self
                    .send(WatchResponse {
                        header: self.header(current),
                        watch_id: c.watch_id,
                        created: true,
                        canceled: true,
                        cancel_reason: "etcdserver: duplicate watch ID".into(),
                        ..Default::default()
                    })
                    .await;
            }
            c.watch_id
        } else {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id
        };
        if !self.watch_permitted(&c) {
            return self
                .send(WatchResponse {
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
                })
                .await;
        }
        let start = if c.start_revision <= 0 {
            current + 1
        } else {
            c.start_revision
        };
        let w = Watcher {
            key: c.key,
            range_end: c.range_end,
            next_rev: start,
            no_put: c.filters.contains(&(FilterType::Noput as i32)),
            no_delete: c.filters.contains(&(FilterType::Nodelete as i32)),
            prev_kv: c.prev_kv,
            progress_notify: c.progress_notify,
            fragment: c.fragment,
        };
        self.watchers.insert(id, w);
        self.send(WatchResponse {
            header: self.header(current),
            watch_id: id,
            created: true,
            ..Default::default()
        })
        .await
    }

    async fn cancel(&mut self, id: i64) -> bool {
        if self.watchers.remove(&id).is_none() {
            return true;
        }
        self.send(WatchResponse {
            header: self.header(self.server.kv().current_rev()),
            watch_id: id,
            canceled: true,
            ..Default::default()
        })
        .await
    }

    /// Sends every watcher its events up to the current revision.
    async fn catch_up(&mut self) -> bool {
        let store = self.server.kv().clone();
        let ids: Vec<i64> = self.watchers.keys().copied().collect();
        for id in ids {
            loop {
                let current = store.current_rev();
                let Some(w) = self.watchers.get(&id) else {
                    break;
                };
                if w.next_rev > current {
                    break;
                }
                let from = w.next_rev;
                // Recent revisions come from memory, with their prev_kv; older ones from the
                // backend.
                let cached = store.events_cached(from, current, EVENTS_PER_ROUND);
                let from_memory = cached.is_some();
                let read = match cached {
                    Some(ev) => Ok(Ok(ev)),
                    None => {
                        let store = store.clone();
                        tokio::task::spawn_blocking(move || {
                            store.events(from, current, EVENTS_PER_ROUND)
                        })
                        .await
                    }
                };
                let events = match read {
                    Ok(Ok(ev)) => ev,
                    Ok(Err(MvccError::Compacted)) => {
                        self.watchers.remove(&id);
                        let resp = WatchResponse {
                            header: self.header(0),
                            watch_id: id,
                            canceled: true,
                            compact_revision: store.compact_rev(),
                            cancel_reason: errors::COMPACTED.message.to_string(),
                            ..Default::default()
                        };
                        if !self.send(resp).await {
                            return false;
                        }
                        break;
                    }
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "watch cannot read the history");
                        return false;
                    }
                    Err(_) => return false,
                };
                // A full round may end inside a revision: resume from the last complete one;
                // when the round holds one revision only, read all of it (a txn's events
                // travel together, however many).
                let (events, through) = if from_memory {
                    // Memory holds whole revisions: the round ends where the events do.
                    let last = events
                        .last()
                        .and_then(|e| e.kv.as_ref())
                        .map(|kv| kv.mod_revision);
                    match last {
                        Some(last) if events.len() >= EVENTS_PER_ROUND => (events, last),
                        _ => (events, current),
                    }
                } else if events.len() >= EVENTS_PER_ROUND {
                    let last = events
                        .last()
                        .and_then(|e| e.kv.as_ref())
                        .map(|kv| kv.mod_revision)
                        .unwrap_or(current);
                    if last > from {
                        (events, last - 1)
                    } else {
                        let store = store.clone();
                        match tokio::task::spawn_blocking(move || store.events(from, from, 0)).await
                        {
                            Ok(Ok(all)) => (all, from),
                            _ => return false,
                        }
                    }
                } else {
                    (events, current)
                };
                // Keep a round near ROUND_BYTES (whole revisions, at least one), so what a
                // stream buffers for a client that stops reading stays small.
                let (events, through) = trim_round(events, through);
                let Some(w) = self.watchers.get_mut(&id) else {
                    break;
                };
                let mut mine: Vec<Event> = events
                    .into_iter()
                    .filter(|e| e.kv.as_ref().is_some_and(|kv| kv.mod_revision <= through))
                    .filter(|e| w.wants(e))
                    .collect();
                w.next_rev = through + 1;
                let prev = w.prev_kv;
                let fragment = w.fragment;
                if mine.is_empty() {
                    continue;
                }
                if !prev {
                    for e in &mut mine {
                        e.prev_kv = None;
                    }
                } else if !from_memory {
                    for e in &mut mine {
                        let Some(kv) = e.kv.as_ref() else { continue };
                        let key = kv.key.clone();
                        let before = kv.mod_revision - 1;
                        let store = store.clone();
                        let prev_kv = tokio::task::spawn_blocking(move || {
                            store
                                .range(KeyRange::new(&key, b""), before, 1)
                                .ok()
                                .and_then(|r| r.kvs.into_iter().next())
                        })
                        .await
                        .ok()
                        .flatten();
                        e.prev_kv = prev_kv;
                    }
                }
                let resp = WatchResponse {
                    header: self.header(current),
                    watch_id: id,
                    events: mine,
                    ..Default::default()
                };
                // etcd's limit: the request limit plus its allowance for gRPC overhead.
                let limit = self.server.cfg().max_request_bytes + super::serve::GRPC_OVERHEAD_BYTES;
                for part in fragments(resp, fragment, limit) {
                    if !self.send(part).await {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Answers a progress request: the current revision, once every watcher is caught up.
    async fn progress(&mut self) -> bool {
        let rev = self.server.kv().current_rev();
        self.send(WatchResponse {
            header: self.header(rev),
            watch_id: -1,
            ..Default::default()
        })
        .await
    }

    async fn notify_progress(&mut self) -> bool {
        let rev = self.server.kv().current_rev();
        let ids: Vec<i64> = self
            .watchers
            .iter()
            .filter(|(_, w)| w.progress_notify && w.next_rev > rev)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if !self
                .send(WatchResponse {
                    header: self.header(rev),
                    watch_id: id,
                    ..Default::default()
                })
                .await
            {
                return false;
            }
        }
        true
    }
}

async fn run_stream(
    server: Arc<EtcdServer>,
    auth_req: Request<()>,
    mut inbound: Streaming<WatchRequest>,
    out: Out,
) {
    let mut rev_rx = server.kv().subscribe_rev();
    let interval = server.cfg().experimental_watch_progress_notify_interval;
    let mut ticker = tokio::time::interval(if interval.is_zero() {
        std::time::Duration::from_secs(600)
    } else {
        interval
    });
    ticker.tick().await;
    let mut st = StreamState {
        server,
        auth_req,
        out,
        watchers: BTreeMap::new(),
        next_id: 0,
    };
    // As etcd, a client that half-closes its side keeps its watches: events flow until the
    // client goes away (the JSON gateway's /v3/watch relies on this).
    let mut inbound_open = true;
    let watch_out = st.out.clone();
    loop {
        tokio::select! {
            msg = inbound.next(), if inbound_open => {
                let req = match msg {
                    Some(Ok(r)) => r,
                    None => {
                        inbound_open = false;
                        continue;
                    }
                    Some(Err(_)) => return,
                };
                let ok = match req.request_union {
                    Some(RequestUnion::CreateRequest(c)) => st.create(c).await && st.catch_up().await,
                    Some(RequestUnion::CancelRequest(c)) => st.cancel(c.watch_id).await,
                    Some(RequestUnion::ProgressRequest(_)) => st.catch_up().await && st.progress().await,
                    None => true,
                };
                if !ok {
                    return;
                }
            }
            changed = rev_rx.changed() => {
                if changed.is_err() || !st.catch_up().await {
                    return;
                }
            }
            // The client went away (its answer stream was dropped): stop, even if it
            // never closed its own side.
            _ = watch_out.closed() => return,
            _ = ticker.tick() => {
                if !st.notify_progress().await {
                    return;
                }
            }
        }
    }
}

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.server.guard(false)?;
        let (metadata, extensions, inbound) = request.into_parts();
        let auth_req = Request::from_parts(metadata, extensions, ());
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        tokio::spawn(run_stream(self.server.clone(), auth_req, inbound, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
