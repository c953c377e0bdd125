// The sending side of the peer transport: one task per peer keeping a message stream open
// (reconnecting with backoff), and one task per snapshot streaming a db image in chunks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prost::Message as _;
use proto::peerpb::peer_client::PeerClient;
use proto::peerpb::{RaftBatch, SnapshotChunk};
use proto::raftpb::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use super::{CLUSTER_ID_HEADER, FROM_HEADER, Local, REMOVED_MESSAGE, Report, ReportFn};
use crate::membership::id_hex;

/// Messages sent in one frame at most.
const MAX_BATCH: usize = 512;
/// Bytes of db image per snapshot chunk.
const CHUNK: usize = 1 << 20;
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Opens a channel to the first of `urls` that answers (over TLS with `tls`).
pub async fn connect(
    urls: &[String],
    timeout: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Channel, String> {
    let mut last = String::from("no peer URLs");
    for u in urls {
        // With TLS the connector does the handshake; tonic must see a plain URL.
        let target = match (tls, u.strip_prefix("https://")) {
            (Some(_), Some(rest)) => format!("http://{rest}"),
            _ => u.clone(),
        };
        let ep = match Endpoint::from_shared(target) {
            Ok(ep) => ep,
            Err(e) => {
                last = format!("bad peer URL {u}: {e}");
                continue;
            }
        };
        let ep = ep
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(3))
            .keep_alive_while_idle(true);
        let r: Result<Channel, String> = match tls {
            Some(tls) => {
                let conn = crate::tls::Connector::new(tls.clone(), 2380);
                match tokio::time::timeout(timeout, ep.connect_with_connector(conn)).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err("timed out connecting".into()),
                }
            }
            None => ep.connect().await.map_err(|e| e.to_string()),
        };
        match r {
            Ok(ch) => return Ok(ch),
            Err(e) => last = format!("{u}: {e}"),
        }
    }
    Err(last)
}

/// Puts the sender's identity on a peer request.
pub fn request<T>(local: &Local, body: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(body);
    let md = req.metadata_mut();
    if let Ok(v) = id_hex(local.cluster_id).parse() {
        md.insert(CLUSTER_ID_HEADER, v);
    }
    if let Ok(v) = id_hex(local.member_id).parse() {
        md.insert(FROM_HEADER, v);
    }
    req
}

fn is_removed(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::PermissionDenied && s.message() == REMOVED_MESSAGE
}

/// Keeps a stream to peer `id` open and feeds it from `rx` until the peer is removed.
pub async fn run(
    id: u64,
    urls: Arc<RwLock<Vec<String>>>,
    mut rx: mpsc::Receiver<Vec<u8>>,
    local: Local,
    report: ReportFn,
    connected: Arc<AtomicBool>,
) {
    let mut backoff = MIN_BACKOFF;
    // Each kind of trouble is logged once until a stream works again.
    let mut logged_down = false;
    let mut logged_refusal = false;
    loop {
        let targets = urls.read().unwrap_or_else(|e| e.into_inner()).clone();
        let ch = match connect(&targets, local.dial_timeout, local.tls.as_ref()).await {
            Ok(ch) => ch,
            Err(e) => {
                if !logged_down {
                    tracing::warn!(remote_peer_id = %id_hex(id), error = %e, "peer became inactive (cannot connect)");
                    logged_down = true;
                }
                report(Report::Unreachable(id));
                // Messages queued meanwhile are stale: raft resends what matters.
                while rx.try_recv().is_ok() {}
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let (btx, brx) = mpsc::channel::<RaftBatch>(64);
        // etcd's peer round-trip probe, every 5s while the stream is up.
        let probe = tokio::spawn(probe_rtt(id, PeerClient::new(ch.clone()), local.clone()));
        let mut client = PeerClient::new(ch)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let call = tokio::spawn({
            let req = request(&local, ReceiverStream::new(brx));
            async move { client.stream(req).await }
        });
        connected.store(true, Ordering::Relaxed);
        let opened = std::time::Instant::now();
        // Forward until the call ends (the peer went away or refused us).
        loop {
            let Some(first) = rx.recv().await else {
                call.abort();
                probe.abort();
                return;
            };
            let mut messages = vec![first];
            while messages.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(m) => messages.push(m),
                    Err(_) => break,
                }
            }
            if btx.send(RaftBatch { messages }).await.is_err() {
                break;
            }
        }
        connected.store(false, Ordering::Relaxed);
        probe.abort();
        let lived = opened.elapsed() >= Duration::from_secs(1);
        if lived {
            // The stream worked for a while: the next trouble is news again.
            logged_down = false;
            logged_refusal = false;
        }
        match call.await {
            Ok(Err(s)) if is_removed(&s) => {
                tracing::error!(remote_peer_id = %id_hex(id), "{REMOVED_MESSAGE}");
                report(Report::Removed);
                return;
            }
            // Another cluster (a different --initial-cluster or token): said once.
            Ok(Err(s)) if s.code() == tonic::Code::FailedPrecondition && !logged_refusal => {
                logged_refusal = true;
                tracing::error!(remote_peer_id = %id_hex(id), error = %s.message(), "peer refused our messages; check --initial-cluster and --initial-cluster-token on both members");
            }
            Ok(Err(s)) if s.code() != tonic::Code::FailedPrecondition && !logged_down => {
                tracing::warn!(remote_peer_id = %id_hex(id), error = %s.message(), "lost the stream to a peer");
            }
            _ => {}
        }
        logged_down = true;
        report(Report::Unreachable(id));
        // A stream refused at once must not turn into a tight reconnect loop.
        backoff = if lived {
            MIN_BACKOFF
        } else {
            (backoff * 2).min(MAX_BACKOFF)
        };
        tokio::time::sleep(backoff).await;
    }
}

/// Measures the round trip of a small call to peer `id` every few seconds for the
/// etcd_network_peer_round_trip_time_seconds histogram.
async fn probe_rtt(id: u64, mut client: PeerClient<Channel>, local: Local) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let started = std::time::Instant::now();
        let req = request(&local, proto::peerpb::MembersRequest {});
        if client.members(req).await.is_ok() {
            crate::metrics::observe_peer_rtt(id, started.elapsed());
        }
    }
}

/// A `Write` that hands the image to the gRPC stream in chunks.
struct ChunkWriter {
    tx: mpsc::Sender<SnapshotChunk>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn flush_chunk(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(SnapshotChunk {
                message: Vec::new(),
                data,
            })
            .map_err(|_| std::io::Error::other("the peer closed the snapshot stream"))
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.flush_chunk()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_chunk()
    }
}

/// Streams snapshot message `m` and the image `tx` reads of `db` to the member at `urls`.
pub async fn send_snapshot(
    m: Message,
    db: common::backend::Db,
    tx: common::backend::ReadTx,
    urls: Vec<String>,
    local: Local,
    report: ReportFn,
) {
    let to = m.to;
    let index = m
        .snapshot
        .as_ref()
        .and_then(|s| s.metadata.as_ref())
        .map(|md| md.index)
        .unwrap_or(0);
    tracing::info!(remote_peer_id = %id_hex(to), snapshot_index = index, "sending a database snapshot");
    let started = std::time::Instant::now();
    let result: Result<u64, String> = async {
        let ch = connect(&urls, local.dial_timeout, local.tls.as_ref()).await?;
        let mut client = PeerClient::new(ch)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let (ctx, crx) = mpsc::channel::<SnapshotChunk>(4);
        ctx.send(SnapshotChunk {
            message: m.encode_to_vec(),
            data: Vec::new(),
        })
        .await
        .map_err(|_| "the snapshot stream closed".to_string())?;
        let writer = tokio::task::spawn_blocking(move || {
            let mut w = ChunkWriter {
                tx: ctx,
                buf: Vec::with_capacity(CHUNK),
            };
            let n = db
                .snapshot_of(&tx, &mut w, false)
                .map_err(|e| format!("reading the db image failed: {e}"))?;
            std::io::Write::flush(&mut w).map_err(|e| e.to_string())?;
            Ok::<u64, String>(n)
        });
        let call = client.snapshot(request(&local, ReceiverStream::new(crx)));
        let (sent, answer) = tokio::join!(writer, call);
        answer.map_err(|s| format!("the peer refused the snapshot: {}", s.message()))?;
        sent.map_err(|e| e.to_string())?
    }
    .await;
    match result {
        Ok(bytes) => {
            tracing::info!(remote_peer_id = %id_hex(to), snapshot_index = index, bytes, took = ?started.elapsed(), "sent a database snapshot");
            report(Report::Snapshot { to, ok: true });
        }
        Err(e) => {
            tracing::warn!(remote_peer_id = %id_hex(to), snapshot_index = index, error = %e, "failed to send a database snapshot");
            report(Report::Snapshot { to, ok: false });
        }
    }
}
