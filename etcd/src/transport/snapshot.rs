// Snapshots between members, as etcd sends them (docs/RAFTHTTP.md §7): one `POST
// /raft/snapshot` whose body is the MsgSnap as a length-prefixed frame, then the whole db.
//
// The receiver saves the db as <snap>/<index>.snap.db (fsynced) before raft sees the message,
// and bounds what it waits for: a frame size, and a pause between chunks.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody};
use prost::Message as _;
use proto::raftpb::{Message, MessageType};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::Report;
use super::client::{self, Body};
use super::peer::PeerCtx;
use super::wire;
use crate::membership::id_hex;

/// Bytes per body chunk of the db image.
const CHUNK: usize = 32 << 10;
/// A sender that pauses longer than this between chunks is given up on.
pub const CHUNK_TIMEOUT: Duration = Duration::from_secs(30);

type FrameTx = mpsc::Sender<Result<http_body::Frame<Bytes>, std::io::Error>>;

/// A `Write` that hands the image to the request body in chunks.
struct ChunkWriter {
    tx: FrameTx,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn flush_chunk(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(http_body::Frame::data(data)))
            .map_err(|_| std::io::Error::other("the peer closed the snapshot request"))
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

fn snapshot_index(m: &Message) -> u64 {
    m.snapshot
        .as_ref()
        .and_then(|s| s.metadata.as_ref())
        .map(|md| md.index)
        .unwrap_or(0)
}

/// Sends MsgSnap `m` with the image `tx` reads of `db` to the member at `urls`, and reports
/// the outcome to raft.
pub async fn send(
    m: Message,
    db: common::backend::Db,
    tx: common::backend::ReadTx,
    urls: Vec<String>,
    ctx: PeerCtx,
) {
    let to = m.to;
    let index = snapshot_index(&m);
    tracing::info!(remote_peer_id = %id_hex(to), snapshot_index = index, "sending a database snapshot");
    let started = std::time::Instant::now();
    let result: Result<u64, String> = async {
        let mut last = String::from("no peer URLs");
        let mut conn = None;
        for u in &urls {
            match ctx.http.connect(u).await {
                Ok(c) => {
                    conn = Some((u.clone(), c));
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        let (url, mut send) = conn.ok_or(last)?;
        let (btx, brx) = mpsc::channel(4);
        btx.send(Ok(http_body::Frame::data(wire::frame_bytes(&m))))
            .await
            .map_err(|_| "the snapshot request closed".to_string())?;
        let writer = tokio::task::spawn_blocking(move || {
            let mut w = ChunkWriter {
                tx: btx,
                buf: Vec::with_capacity(CHUNK),
            };
            let n = db
                .snapshot_of(&tx, &mut w, false)
                .map_err(|e| format!("reading the db image failed: {e}"))?;
            std::io::Write::flush(&mut w).map_err(|e| e.to_string())?;
            Ok::<u64, String>(n)
        });
        let body: Body = BodyExt::boxed(StreamBody::new(
            tokio_stream::wrappers::ReceiverStream::new(brx),
        ));
        let mut req = client::raft_request(
            &ctx.me,
            http::Method::POST,
            "/raft/snapshot",
            None,
            Some("application/octet-stream"),
            body,
        );
        client::set_host(&mut req, &url);
        let (sent, answer) = tokio::join!(writer, send.send_request(req));
        let resp = answer.map_err(|e| format!("the snapshot request failed: {e}"))?;
        let status = resp.status();
        let (_, _, text) = client::read_body(resp, 4096).await.unwrap_or_default();
        if status != http::StatusCode::NO_CONTENT {
            return Err(format!(
                "the peer refused the snapshot: {status} {}",
                String::from_utf8_lossy(&text).trim()
            ));
        }
        sent.map_err(|e| e.to_string())?
    }
    .await;
    match result {
        Ok(bytes) => {
            tracing::info!(remote_peer_id = %id_hex(to), snapshot_index = index, bytes, took = ?started.elapsed(), "sent a database snapshot");
            (ctx.report)(Report::Snapshot { to, ok: true });
        }
        Err(e) => {
            tracing::warn!(remote_peer_id = %id_hex(to), snapshot_index = index, error = %e, "failed to send a database snapshot");
            (ctx.report)(Report::Snapshot { to, ok: false });
        }
    }
}

/// Why a received snapshot was refused: the status and etcd's text.
pub struct Refusal(pub http::StatusCode, pub String);

/// The next chunk of a request body, waiting at most CHUNK_TIMEOUT.
async fn next_chunk(body: &mut hyper::body::Incoming) -> Result<Option<Bytes>, Refusal> {
    loop {
        match tokio::time::timeout(CHUNK_TIMEOUT, body.frame()).await {
            Err(_) => {
                return Err(Refusal(
                    http::StatusCode::BAD_REQUEST,
                    "snapshot sender stalled".into(),
                ));
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => {
                return Err(Refusal(
                    http::StatusCode::BAD_REQUEST,
                    format!("error reading snapshot: {e}"),
                ));
            }
            Ok(Some(Ok(f))) => {
                if let Ok(d) = f.into_data() {
                    return Ok(Some(d));
                }
            }
        }
    }
}

/// Receives a snapshot body from member `from`: the MsgSnap, then the db saved where the
/// install will look for it. Returns the message for raft.
pub async fn receive(
    mut body: hyper::body::Incoming,
    from: u64,
    db_path: impl Fn(u64) -> std::path::PathBuf,
) -> Result<Message, Refusal> {
    let bad = |s: &str| Refusal(http::StatusCode::BAD_REQUEST, s.to_string());
    let mut head = BytesMut::new();
    // The frame: 8-byte length, then the message.
    let m = loop {
        if head.len() >= 8 {
            let len = u64::from_be_bytes(head[..8].try_into().unwrap_or([0; 8]));
            if len > wire::MAX_FRAME {
                return Err(bad("failed to decode raft message (frame too large)"));
            }
            if head.len() as u64 >= 8 + len {
                let msg = Message::decode(&head[8..8 + len as usize])
                    .map_err(|e| bad(&format!("failed to decode raft message ({e})")))?;
                let _ = head.split_to(8 + len as usize);
                break msg;
            }
        }
        match next_chunk(&mut body).await? {
            Some(d) => head.extend_from_slice(&d),
            None => return Err(bad("failed to decode raft message (unexpected EOF)")),
        }
    };
    if m.r#type != MessageType::MsgSnap as i32 {
        return Err(bad("wrong raft message type"));
    }
    let index = snapshot_index(&m);
    let dest = db_path(index);
    let part = dest.with_extension("db.part");
    tracing::info!(remote_peer_id = %id_hex(from), snapshot_index = index, "receiving a database snapshot");
    let started = std::time::Instant::now();
    let internal = |e: std::io::Error, what: &str| {
        Refusal(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("error saving snapshot: {what}: {e}"),
        )
    };
    let mut f = tokio::fs::File::create(&part)
        .await
        .map_err(|e| internal(e, &part.display().to_string()))?;
    let mut bytes = head.len() as u64;
    f.write_all(&head)
        .await
        .map_err(|e| internal(e, &part.display().to_string()))?;
    while let Some(d) = next_chunk(&mut body).await? {
        bytes += d.len() as u64;
        f.write_all(&d)
            .await
            .map_err(|e| internal(e, &part.display().to_string()))?;
    }
    f.sync_all()
        .await
        .map_err(|e| internal(e, &part.display().to_string()))?;
    drop(f);
    tokio::fs::rename(&part, &dest)
        .await
        .map_err(|e| internal(e, &dest.display().to_string()))?;
    if let Some(dir) = dest.parent() {
        let dir = dir.to_path_buf();
        let synced = tokio::task::spawn_blocking(move || common::fileutil::fsync_dir(&dir)).await;
        if !matches!(synced, Ok(Ok(()))) {
            return Err(Refusal(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "error saving snapshot: fsync of the snap dir failed".into(),
            ));
        }
    }
    tracing::info!(remote_peer_id = %id_hex(from), snapshot_index = index, bytes, took = ?started.elapsed(), "received a database snapshot");
    Ok(m)
}
