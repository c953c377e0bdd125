// One peer as etcd's rafthttp sees it (docs/RAFTHTTP.md §4–§8): the messages we send it go on
// the two streams it dialed to us (msgapp, message) or, while those are down, one per
// `POST /raft`; the messages it sends us come on the two streams we dial to it.
//
// Each stream is redialled every 100 ms while down; a silent stream is dropped after 5 s; a
// peer that says we were removed (410) stops this member.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::BytesMut;
use http_body_util::BodyExt;
use prost::Message as _;
use proto::raftpb::{Message, MessageType};
use tokio::sync::mpsc;

use super::client::{self, Identity, PeerHttp};
use super::wire::{self, FrameDecoder, MsgAppDecoder, id_path};
use super::{DeliverFn, Report, ReportFn};
use crate::membership::id_hex;

/// Messages queued per stream writer and for the pipeline (etcd's streamBufSize).
pub const QUEUE: usize = 4096;
/// Pause between dials of a stream that is down (etcd redials every 100 ms).
const REDIAL: Duration = Duration::from_millis(100);
/// A stream silent this long is dead (etcd's reader gives up after 5 s).
pub const STREAM_IDLE: Duration = Duration::from_secs(5);
/// How often an idle stream writer sends its link heartbeat (a third of STREAM_IDLE).
pub const LINK_HEARTBEAT: Duration = Duration::from_millis(1667);
/// How often the round trip to a peer is probed.
const PROBE: Duration = Duration::from_secs(4);

/// The two streams a pair of members keeps in each direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Message,
    MsgApp,
}

impl StreamKind {
    pub fn path_part(self) -> &'static str {
        match self {
            StreamKind::Message => "message",
            StreamKind::MsgApp => "msgapp",
        }
    }

    pub fn parse(s: &str) -> Option<StreamKind> {
        match s {
            "message" => Some(StreamKind::Message),
            "msgapp" => Some(StreamKind::MsgApp),
            _ => None,
        }
    }
}

/// A stream the peer dialed to us: we write its messages into the answer's body.
struct Writer {
    generation: u64,
    tx: mpsc::Sender<Message>,
}

pub struct Peer {
    pub id: u64,
    pub urls: Arc<RwLock<Vec<String>>>,
    message_writer: Mutex<Option<Writer>>,
    msgapp_writer: Mutex<Option<Writer>>,
    pipeline: mpsc::Sender<Message>,
    /// Our readers of the peer's streams that are up now.
    reading: Arc<[AtomicBool; 2]>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    generation: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a peer's tasks need.
#[derive(Clone)]
pub struct PeerCtx {
    pub me: Identity,
    pub http: Arc<PeerHttp>,
    pub report: ReportFn,
    pub deliver: DeliverFn,
}

impl Peer {
    /// Starts talking to member `id`: its pipeline, the readers of its two streams and the
    /// round-trip prober.
    pub fn start(id: u64, urls: Vec<String>, ctx: &PeerCtx, rt: &tokio::runtime::Handle) -> Peer {
        let urls = Arc::new(RwLock::new(urls));
        let (ptx, prx) = mpsc::channel(QUEUE);
        let reading: Arc<[AtomicBool; 2]> =
            Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let tasks = vec![
            rt.spawn(pipeline(id, urls.clone(), prx, ctx.clone())),
            rt.spawn(read_stream(
                id,
                StreamKind::Message,
                urls.clone(),
                ctx.clone(),
                reading.clone(),
            )),
            rt.spawn(read_stream(
                id,
                StreamKind::MsgApp,
                urls.clone(),
                ctx.clone(),
                reading.clone(),
            )),
            rt.spawn(probe(id, urls.clone(), ctx.http.clone())),
        ];
        Peer {
            id,
            urls,
            message_writer: Mutex::new(None),
            msgapp_writer: Mutex::new(None),
            pipeline: ptx,
            reading,
            tasks: Mutex::new(tasks),
            generation: AtomicU64::new(0),
        }
    }

    pub fn stop(&self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        *lock(&self.message_writer) = None;
        *lock(&self.msgapp_writer) = None;
    }

    /// Whether any stream with the peer is up (etcd's "active" peer).
    pub fn is_active(&self) -> bool {
        self.reading.iter().any(|r| r.load(Ordering::Relaxed))
            || lock(&self.message_writer).is_some()
            || lock(&self.msgapp_writer).is_some()
    }

    fn slot(&self, kind: StreamKind) -> &Mutex<Option<Writer>> {
        match kind {
            StreamKind::Message => &self.message_writer,
            StreamKind::MsgApp => &self.msgapp_writer,
        }
    }

    /// The peer dialed its `kind` stream to us: messages for it go there from now on (a
    /// previous stream of the same kind is dropped). Returns the queue to write out and the
    /// generation to `detach` with.
    pub fn attach(&self, kind: StreamKind) -> (mpsc::Receiver<Message>, u64) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *lock(self.slot(kind)) = Some(Writer { generation, tx });
        (rx, generation)
    }

    /// The stream of that generation ended.
    pub fn detach(&self, kind: StreamKind, generation: u64) {
        let mut slot = lock(self.slot(kind));
        if slot.as_ref().is_some_and(|w| w.generation == generation) {
            *slot = None;
        }
    }

    /// Queues `m` on the best way to the peer: its msgapp stream for MsgApp, its message
    /// stream, or the pipeline. False when the way is full (the message is dropped).
    pub fn send(&self, m: Message) -> bool {
        let mut m = m;
        let kinds: &[StreamKind] = if m.r#type == MessageType::MsgApp as i32 {
            &[StreamKind::MsgApp, StreamKind::Message]
        } else {
            &[StreamKind::Message]
        };
        for kind in kinds {
            let mut slot = lock(self.slot(*kind));
            let Some(w) = slot.as_ref() else { continue };
            match w.tx.try_send(m) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Full(_)) => return false,
                Err(mpsc::error::TrySendError::Closed(back)) => {
                    *slot = None;
                    m = back;
                }
            }
        }
        self.pipeline.try_send(m).is_ok()
    }
}

/// Sends messages one per `POST /raft` while the peer's streams are down.
async fn pipeline(
    id: u64,
    urls: Arc<RwLock<Vec<String>>>,
    mut rx: mpsc::Receiver<Message>,
    ctx: PeerCtx,
) {
    while let Some(m) = rx.recv().await {
        let body = m.encode_to_vec();
        let urls = urls.read().unwrap_or_else(|e| e.into_inner()).clone();
        let sent = ctx
            .http
            .request_any(&urls, || {
                client::raft_request(
                    &ctx.me,
                    http::Method::POST,
                    "/raft",
                    None,
                    Some("application/protobuf"),
                    client::full(body.clone()),
                )
            })
            .await;
        match sent {
            Ok(resp) => {
                let status = resp.status();
                let _ = client::read_body(resp, 64 << 10).await;
                if status == http::StatusCode::GONE {
                    (ctx.report)(Report::Removed);
                } else if !status.is_success() {
                    tracing::debug!(remote_peer_id = %id_hex(id), %status, "peer refused a raft message");
                    (ctx.report)(Report::Unreachable(id));
                }
            }
            Err(e) => {
                tracing::debug!(remote_peer_id = %id_hex(id), error = %e, "failed to send a raft message");
                (ctx.report)(Report::Unreachable(id));
            }
        }
    }
}

/// Why a stream dial did not give a stream.
enum Refused {
    /// Retry later (peer down, not ready, refused for a reason that may pass).
    Retry(String),
    /// We were removed from the cluster.
    Removed,
}

/// Keeps our reader of the peer's `kind` stream connected: dials, reads frames, delivers
/// messages to raft, redials after any failure.
async fn read_stream(
    id: u64,
    kind: StreamKind,
    urls: Arc<RwLock<Vec<String>>>,
    ctx: PeerCtx,
    reading: Arc<[AtomicBool; 2]>,
) {
    let flag = &reading[kind as usize];
    let mut last_refusal = String::new();
    // Whether "established" was logged for a connection that keeps failing the same way
    // after it is made (a peer sending garbage): logged once, not every 100 ms.
    let mut announced = false;
    loop {
        let urls_now = urls.read().unwrap_or_else(|e| e.into_inner()).clone();
        for url in &urls_now {
            let result = read_once(id, kind, url, &ctx, flag, &mut announced).await;
            if !flag.load(Ordering::Relaxed) {
                announced = false;
            }
            match result {
                Ok(()) => last_refusal.clear(),
                Err(Refused::Removed) => {
                    tracing::warn!(remote_peer_id = %id_hex(id), "{}", super::REMOVED_MESSAGE);
                    (ctx.report)(Report::Removed);
                    return;
                }
                Err(Refused::Retry(why)) => {
                    // Logged once per kind of refusal, not every 100 ms.
                    if why != last_refusal {
                        if why.contains("cluster ID mismatch") {
                            tracing::error!(
                                local_member_id = %id_hex(ctx.me.member_id),
                                local_member_cluster_id = %id_hex(ctx.me.cluster_id),
                                remote_peer_id = %id_hex(id),
                                "request sent was ignored by remote peer due to cluster ID mismatch: check --initial-cluster and --initial-cluster-token"
                            );
                        } else {
                            tracing::warn!(remote_peer_id = %id_hex(id), stream_type = kind.path_part(), error = %why, "failed to dial the peer's stream");
                        }
                        last_refusal = why;
                    }
                }
            }
            flag.store(false, Ordering::Relaxed);
        }
        tokio::time::sleep(REDIAL).await;
    }
}

async fn read_once(
    id: u64,
    kind: StreamKind,
    url: &str,
    ctx: &PeerCtx,
    flag: &AtomicBool,
    announced: &mut bool,
) -> Result<(), Refused> {
    let mut send = ctx
        .http
        .connect(url)
        .await
        .map_err(|e| Refused::Retry(e.to_string()))?;
    let path = format!(
        "/raft/stream/{}/{}",
        kind.path_part(),
        id_path(ctx.me.member_id)
    );
    let mut req = client::raft_request(
        &ctx.me,
        http::Method::GET,
        &path,
        Some(id),
        None,
        client::empty(),
    );
    client::set_host(&mut req, url);
    let resp = tokio::time::timeout(STREAM_IDLE, send.send_request(req))
        .await
        .map_err(|_| Refused::Retry("timed out waiting for the stream's answer".into()))?
        .map_err(|e| Refused::Retry(e.to_string()))?;
    let status = resp.status();
    if status == http::StatusCode::GONE {
        return Err(Refused::Removed);
    }
    if status != http::StatusCode::OK {
        let (_, _, body) = client::read_body(resp, 4096).await.unwrap_or_default();
        let text = String::from_utf8_lossy(&body).trim().to_string();
        return Err(Refused::Retry(format!("{status}: {text}")));
    }
    flag.store(true, Ordering::Relaxed);
    if !*announced {
        tracing::info!(remote_peer_id = %id_hex(id), stream_type = kind.path_part(), "established TCP streaming connection with remote peer");
        *announced = true;
    }
    let mut body = resp.into_body();
    let mut frames = FrameDecoder::default();
    let mut apps = MsgAppDecoder::new(ctx.me.member_id, id);
    loop {
        let frame = match tokio::time::timeout(STREAM_IDLE, body.frame()).await {
            Err(_) => return Err(Refused::Retry("the stream was silent for 5s".into())),
            Ok(None) => return Err(Refused::Retry("the peer closed the stream".into())),
            Ok(Some(Err(e))) => return Err(Refused::Retry(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        match kind {
            StreamKind::Message => {
                frames.push(data);
                loop {
                    match frames.next_message() {
                        Ok(Some(m)) if wire::is_link_heartbeat(&m) => {}
                        Ok(Some(m)) => deliver(ctx, id, m),
                        Ok(None) => break,
                        Err(e) => return Err(Refused::Retry(e.to_string())),
                    }
                }
            }
            StreamKind::MsgApp => {
                apps.push(data);
                loop {
                    match apps.next_message() {
                        Ok(Some(m)) => deliver(ctx, id, m),
                        Ok(None) => break,
                        Err(e) => return Err(Refused::Retry(e.to_string())),
                    }
                }
            }
        }
    }
}

fn deliver(ctx: &PeerCtx, peer: u64, m: Message) {
    if m.from != peer {
        tracing::warn!(from = %id_hex(m.from), stream_of = %id_hex(peer), "dropping a raft message whose sender is not the stream's");
        return;
    }
    (ctx.deliver)(m);
}

/// Writes the messages queued for a peer into the stream it dialed, in the stream's
/// encoding, with a link heartbeat when nothing else goes by.
pub async fn write_stream(
    kind: StreamKind,
    mut rx: mpsc::Receiver<Message>,
    out: mpsc::Sender<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>,
) {
    let mut app = wire::MsgAppEncoder::default();
    let mut heartbeat = tokio::time::interval(LINK_HEARTBEAT);
    heartbeat.tick().await;
    loop {
        let mut buf = BytesMut::new();
        tokio::select! {
            m = rx.recv() => {
                let Some(m) = m else { return };
                let mut next = Some(m);
                // Everything queued now goes out in one write.
                while let Some(m) = next {
                    match kind {
                        StreamKind::Message => wire::encode_frame(&m, &mut buf),
                        StreamKind::MsgApp => app.encode(&m, &mut buf),
                    }
                    next = if buf.len() < 1 << 20 { rx.try_recv().ok() } else { None };
                }
            }
            _ = heartbeat.tick() => match kind {
                StreamKind::Message => wire::encode_frame(&wire::link_heartbeat(), &mut buf),
                StreamKind::MsgApp => wire::MsgAppEncoder::link_heartbeat(&mut buf),
            },
            _ = out.closed() => return,
        }
        if out
            .send(Ok(http_body::Frame::data(buf.freeze())))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// `GET /raft/probing` every few seconds, for etcd_network_peer_round_trip_time_seconds.
async fn probe(id: u64, urls: Arc<RwLock<Vec<String>>>, http: Arc<PeerHttp>) {
    loop {
        tokio::time::sleep(PROBE).await;
        let urls = urls.read().unwrap_or_else(|e| e.into_inner()).clone();
        let started = std::time::Instant::now();
        let r = http
            .request_any(&urls, || {
                client::plain_request(http::Method::GET, "/raft/probing", None, client::empty())
            })
            .await;
        if let Ok(resp) = r
            && resp.status().is_success()
            && client::read_body(resp, 4096).await.is_ok()
        {
            crate::metrics::observe_peer_rtt(id, started.elapsed());
        }
    }
}
