// The peer port as etcd 3.4/3.5 members expect it (docs/RAFTHTTP.md): the raft endpoints
// (streams, `/raft`, `/raft/snapshot`), probing, membership, hashkv, lease forwarding and
// version, with etcd's checks (method, version, cluster ID, sender) and its error answers.
//
// HTTP/1.1 only, plain or TLS (--peer-* flags); every error is Go's plain-text error.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prost::Message as _;
use proto::etcdserverpb::{
    LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseTimeToLiveResponse, ResponseHeader,
};
use proto::raftpb::Message;
use tokio::sync::mpsc;

use super::client::{self, Body};
use super::peer::{self, StreamKind};
use super::wire::{
    H_CLUSTER_ID, H_MIN_CLUSTER_VERSION, H_RAFT_TO, H_SERVER_FROM, H_SERVER_VERSION, id_path,
};
use crate::error;
use crate::listener::Listener;
use crate::membership::Member;
use proto::etcdserverpb::HashKvResponse;

/// What the peer port needs of the member it serves. The server implements it; the transport
/// stays below the server (it never names the server's types), as etcd's rafthttp takes a
/// Raft interface.
pub trait PeerHost: Send + Sync + 'static {
    fn cluster_id(&self) -> u64;
    fn member_id(&self) -> u64;
    /// The decided cluster version ("" while undecided).
    fn cluster_version(&self) -> String;
    fn is_removed(&self, id: u64) -> bool;
    fn is_leader(&self) -> bool;
    fn members(&self) -> Vec<Member>;
    /// Hands a peer's raft message to raft (dropped when raft is overloaded: it resends).
    fn step(&self, m: Message);
    /// Where the db image of the leader's snapshot at `index` is received.
    fn snap_db_path(&self, index: u64) -> std::path::PathBuf;
    fn transport(&self) -> &super::Transport;
    /// Promotes a learner (a follower's /members/promote forwarded to the leader).
    fn promote_member(
        &self,
        id: u64,
    ) -> impl std::future::Future<Output = Result<(), error::Error>> + Send;
    /// A follower's forwarded keepalive: the lease's new TTL, or None when it is unknown.
    fn renew_lease(&self, id: i64) -> Option<i64>;
    /// (remaining TTL, granted TTL, keys) of a lease, or None when it is unknown.
    fn lease_time_to_live(&self, id: i64) -> Option<(i64, i64, Vec<Vec<u8>>)>;
    /// This member's HashKV at `revision` (0: the current one).
    fn hash_kv(
        &self,
        revision: i64,
    ) -> impl std::future::Future<Output = Result<HashKvResponse, error::Error>> + Send;
    /// Whether a downgrade job is enabled, after a linearizable read.
    fn downgrade_enabled(
        &self,
    ) -> impl std::future::Future<Output = Result<bool, error::Error>> + Send;
}

/// Request bodies read whole (raft messages, lease and hash requests) stop here.
/// How long a peer's TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_BODY: usize = 64 << 20;
/// Lease and hash requests are small.
const MAX_SMALL_BODY: usize = 64 << 10;

type Resp = http::Response<Body>;

fn response(status: StatusCode) -> http::response::Builder {
    http::Response::builder().status(status)
}

fn finish(b: http::response::Builder, body: Body) -> Resp {
    b.body(body)
        .unwrap_or_else(|_| http::Response::new(client::empty()))
}

/// Go's http.Error: a plain-text body ending in a newline.
fn text_error(status: StatusCode, msg: &str, cluster_id: Option<u64>) -> Resp {
    let mut b = response(status)
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff");
    if let Some(c) = cluster_id {
        b = b.header(H_CLUSTER_ID, id_path(c));
    }
    finish(b, client::full(format!("{msg}\n")))
}

fn method_not_allowed(allow: Option<&str>) -> Resp {
    let mut b = response(StatusCode::METHOD_NOT_ALLOWED)
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff");
    if let Some(a) = allow {
        b = b.header("allow", a);
    }
    finish(b, client::full("Method Not Allowed\n"))
}

fn not_found() -> Resp {
    text_error(StatusCode::NOT_FOUND, "404 page not found", None)
}

fn json(cluster_id: Option<u64>, body: String) -> Resp {
    let mut b = response(StatusCode::OK).header("content-type", "application/json");
    if let Some(c) = cluster_id {
        b = b.header(H_CLUSTER_ID, id_path(c));
    }
    finish(b, client::full(body))
}

fn protobuf(body: Vec<u8>) -> Resp {
    finish(
        response(StatusCode::OK).header("content-type", "application/protobuf"),
        client::full(body),
    )
}

fn header<'a>(req: &'a http::Request<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// (major, minor, patch) of a semantic version.
pub fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v.trim().split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let patch = it
        .next()?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((major, minor, patch))
}

/// etcd's version check on raft requests: the sender's version is at least our minimum
/// cluster version (3.0.0), and its minimum cluster version is not above our major.minor.
fn version_ok(req: &http::Request<Incoming>) -> bool {
    let Some(server) = header(req, H_SERVER_VERSION).and_then(parse_version) else {
        return false;
    };
    if server < (3, 0, 0) {
        return false;
    }
    match header(req, H_MIN_CLUSTER_VERSION) {
        None => true,
        Some(v) => match (
            parse_version(v),
            parse_version(crate::version::ETCD_VERSION),
        ) {
            (Some(min), Some(ours)) => (min.0, min.1) <= (ours.0, ours.1),
            _ => false,
        },
    }
}

/// Who sent `req`: its `X-Server-From`, else its address (refusals are logged once per
/// peer and reason).
fn peer_name(req: &http::Request<Incoming>, remote: &str) -> String {
    match header(req, H_SERVER_FROM) {
        Some(from) if !from.is_empty() => from.to_string(),
        _ => super::refusals::host_of(remote).to_string(),
    }
}

/// The checks every raft request passes (§2.4), after the method: version, then cluster ID.
/// Each refusal is logged with etcd's message, once per peer and reason.
fn check_raft<H: PeerHost>(
    server: &H,
    req: &http::Request<Incoming>,
    remote: &str,
) -> Result<(), Box<Resp>> {
    let cid = server.cluster_id();
    let once = |reason: &str| {
        server
            .transport()
            .refusals()
            .first(&peer_name(req, remote), reason)
    };
    if !version_ok(req) {
        let theirs = header(req, H_SERVER_VERSION).unwrap_or("");
        let min = header(req, H_MIN_CLUSTER_VERSION).unwrap_or("");
        if once(&format!("version {theirs} {min}")) {
            tracing::warn!(
                local_member_id = %id_path(server.member_id()),
                remote_peer_server_version = theirs,
                remote_peer_server_minimum_cluster_version = min,
                remote_peer_id = header(req, H_SERVER_FROM).unwrap_or(""),
                "failed to check version compatibility"
            );
        }
        return Err(Box::new(text_error(
            StatusCode::PRECONDITION_FAILED,
            "incompatible version",
            Some(cid),
        )));
    }
    let theirs = header(req, H_CLUSTER_ID).and_then(|s| u64::from_str_radix(s, 16).ok());
    if theirs != Some(cid) {
        let given = header(req, H_CLUSTER_ID).unwrap_or("");
        if once(&format!("cluster {given}")) {
            tracing::warn!(
                local_member_id = %id_path(server.member_id()),
                local_member_cluster_id = %id_path(cid),
                remote_peer_cluster_id = given,
                remote_peer_id = header(req, H_SERVER_FROM).unwrap_or(""),
                "request cluster ID mismatch"
            );
        }
        return Err(Box::new(text_error(
            StatusCode::PRECONDITION_FAILED,
            "cluster ID mismatch",
            Some(cid),
        )));
    }
    Ok(())
}

/// What of an oversized body is read and dropped after the refusal, and for how long.
const DRAIN_MAX: usize = 64 << 20;
const DRAIN_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads a whole request body, at most `max` bytes. A longer one is refused, and the rest of
/// it is read and dropped in the background (up to DRAIN_MAX, DRAIN_FOR): a connection closed
/// with unread bytes is reset, and the reset can destroy the refusal before the client reads
/// it (curl then sees only its "100 Continue"). Go's server lingers the same way.
async fn read_all(body: Incoming, max: usize) -> Result<Bytes, ()> {
    let mut body = body;
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| ())?;
        if let Some(d) = frame.data_ref() {
            if out.len() + d.len() > max {
                tokio::spawn(drain(body));
                return Err(());
            }
            out.extend_from_slice(d);
        }
    }
    Ok(out.freeze())
}

/// Reads a lease or hash request's body (a few bytes in etcd's requests). One that cannot be
/// read or is too large is answered as etcd answers an unreadable body, and logged once per
/// peer and path (etcd has no bound and logs nothing: it read a 200 MiB `/leases` body).
async fn read_small(
    body: Incoming,
    refusals: &super::refusals::Refusals,
    peer: &str,
    path: &str,
) -> Result<Bytes, ()> {
    let read = read_all(body, MAX_SMALL_BODY).await;
    if read.is_err() && refusals.first(peer, &format!("read body {path}")) {
        tracing::warn!(
            remote_peer = peer,
            path,
            max_bytes = MAX_SMALL_BODY,
            "failed to read the request body (unreadable, or larger than allowed)"
        );
    }
    read
}

/// Reads and drops what is left of a refused body, within bounds.
async fn drain(mut body: Incoming) {
    let mut left = DRAIN_MAX;
    let _ = tokio::time::timeout(DRAIN_FOR, async {
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, |d| d.len());
            if n >= left {
                return;
            }
            left -= n;
        }
    })
    .await;
}

/// The member list as `/members` answers it: sorted by ID, etcd's JSON, and a newline.
pub fn members_json(members: &[Member]) -> String {
    let mut ms = members.to_vec();
    ms.sort_by_key(|m| m.id);
    let parts: Vec<String> = ms.iter().map(Member::to_json).collect();
    format!("[{}]\n", parts.join(","))
}

/// Answers one request on the peer port.
/// `remote` is the connection's address, naming a peer that sends no `X-Server-From`.
pub async fn handle<H: PeerHost>(
    server: Arc<H>,
    req: http::Request<Incoming>,
    remote: &str,
) -> Resp {
    let path = req.uri().path().to_string();
    let cid = server.cluster_id();
    let me = server.member_id();
    let refusals = server.transport().refusals();
    let peer = peer_name(&req, remote);
    match path.as_str() {
        "/raft" => {
            if req.method() != Method::POST {
                return method_not_allowed(Some("POST"));
            }
            if let Err(r) = check_raft(&*server, &req, remote) {
                return *r;
            }
            let Ok(body) = read_all(req.into_body(), MAX_BODY).await else {
                if refusals.first(&peer, "read raft message") {
                    tracing::warn!(local_member_id = %id_path(me), remote_peer_id = %peer, max_bytes = MAX_BODY, "failed to read Raft message");
                }
                return text_error(
                    StatusCode::BAD_REQUEST,
                    "error reading raft message",
                    Some(cid),
                );
            };
            let m = match Message::decode(body) {
                Ok(m) => m,
                Err(e) => {
                    if refusals.first(&peer, "unmarshal raft message") {
                        tracing::warn!(local_member_id = %id_path(me), remote_peer_id = %peer, error = %e, "failed to unmarshal Raft message");
                    }
                    return text_error(
                        StatusCode::BAD_REQUEST,
                        "error unmarshalling raft message",
                        Some(cid),
                    );
                }
            };
            if server.is_removed(m.from) {
                // etcd logs these two lines for each message; we log them once per member.
                if refusals.first(&id_path(m.from), "raft message from removed member") {
                    tracing::warn!(local_member_id = %id_path(me), removed_member_id = %id_path(m.from), "rejected Raft message from removed member");
                    tracing::warn!(local_member_id = %id_path(me), error = "cannot process message from removed member", "failed to process Raft message");
                }
                return text_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "error processing raft message",
                    Some(cid),
                );
            }
            if m.r#type != 0 || m.to != 0 || m.from != 0 {
                server.step(m);
            }
            finish(
                response(StatusCode::NO_CONTENT).header(H_CLUSTER_ID, id_path(cid)),
                client::empty(),
            )
        }
        "/raft/snapshot" => {
            if req.method() != Method::POST {
                return method_not_allowed(Some("POST"));
            }
            if let Err(r) = check_raft(&*server, &req, remote) {
                return *r;
            }
            let from = header(&req, H_SERVER_FROM)
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .unwrap_or(0);
            if server.is_removed(from) {
                if refusals.first(&peer, "snapshot from removed member") {
                    tracing::warn!(remote_peer_id = %id_path(from), error = "removed member", "refused a snapshot");
                }
                return text_error(StatusCode::GONE, "removed member", Some(cid));
            }
            let s = server.clone();
            match super::snapshot::receive(req.into_body(), from, move |i| s.snap_db_path(i)).await
            {
                Ok(m) => {
                    server.step(m);
                    finish(
                        response(StatusCode::NO_CONTENT).header(H_CLUSTER_ID, id_path(cid)),
                        client::empty(),
                    )
                }
                Err(super::snapshot::Refusal(status, msg)) => {
                    if refusals.first(&peer, &format!("snapshot {msg}")) {
                        tracing::warn!(remote_peer_id = %id_path(from), error = %msg, "refused a snapshot");
                    }
                    text_error(status, &msg, Some(cid))
                }
            }
        }
        "/raft/probing" => {
            let now = chrono_like_now();
            finish(
                response(StatusCode::OK).header("content-type", "text/plain; charset=utf-8"),
                client::full(format!("{{\"OK\":true,\"Now\":\"{now}\"}}\n")),
            )
        }
        p if p.starts_with("/raft/stream/") => stream(server, req, remote).await,
        "/members" => {
            if req.method() != Method::GET {
                return method_not_allowed(Some("GET"));
            }
            json(Some(cid), members_json(&server.members()))
        }
        p if p.starts_with("/members/promote/") => {
            if req.method() != Method::POST {
                return method_not_allowed(Some("POST"));
            }
            let given = &p["/members/promote/".len()..];
            let Ok(id) = given.parse::<u64>() else {
                return text_error(
                    StatusCode::NOT_FOUND,
                    &format!("member {given} not found in cluster"),
                    Some(cid),
                );
            };
            match server.promote_member(id).await {
                Ok(()) => json(Some(cid), members_json(&server.members())),
                Err(e) => {
                    let (status, msg) = promote_error(e);
                    text_error(status, msg, Some(cid))
                }
            }
        }
        "/members/hashkv" => {
            if req.method() != Method::GET {
                return method_not_allowed(Some("GET"));
            }
            hashkv(server, req, &peer).await
        }
        "/leases" => {
            if req.method() != Method::POST {
                return method_not_allowed(None);
            }
            let Ok(body) = read_small(req.into_body(), refusals, &peer, &path).await else {
                return text_error(StatusCode::BAD_REQUEST, "error reading body", None);
            };
            let Ok(r) = LeaseKeepAliveRequest::decode(body) else {
                return text_error(StatusCode::BAD_REQUEST, "error unmarshalling request", None);
            };
            if !server.is_leader() {
                return text_error(StatusCode::BAD_REQUEST, "not a primary lessor", None);
            }
            match server.renew_lease(r.id) {
                Some(ttl) => protobuf(
                    LeaseKeepAliveResponse {
                        header: None,
                        id: r.id,
                        ttl,
                    }
                    .encode_to_vec(),
                ),
                None => text_error(StatusCode::NOT_FOUND, "lease not found", None),
            }
        }
        "/leases/internal" => {
            if req.method() != Method::POST {
                return method_not_allowed(None);
            }
            let Ok(body) = read_small(req.into_body(), refusals, &peer, &path).await else {
                return text_error(StatusCode::BAD_REQUEST, "error reading body", None);
            };
            let r = match proto::leasepb::LeaseInternalRequest::decode(body) {
                Ok(r) => r.lease_time_to_live_request.unwrap_or_default(),
                Err(_) => {
                    return text_error(
                        StatusCode::BAD_REQUEST,
                        "error unmarshalling request",
                        None,
                    );
                }
            };
            if !server.is_leader() {
                return text_error(StatusCode::BAD_REQUEST, "not a primary lessor", None);
            }
            match server.lease_time_to_live(r.id) {
                Some((left, granted, keys)) => protobuf(
                    proto::leasepb::LeaseInternalResponse {
                        lease_time_to_live_response: Some(LeaseTimeToLiveResponse {
                            header: Some(ResponseHeader::default()),
                            id: r.id,
                            ttl: left,
                            granted_ttl: granted,
                            keys: if r.keys { keys } else { Vec::new() },
                        }),
                    }
                    .encode_to_vec(),
                ),
                None => text_error(StatusCode::NOT_FOUND, "lease not found", None),
            }
        }
        "/version" => {
            if req.method() != Method::GET {
                return method_not_allowed(Some("GET"));
            }
            let cluster = server.cluster_version();
            let cluster = if cluster.is_empty() {
                "not_decided".to_string()
            } else {
                cluster
            };
            json(
                None,
                format!(
                    "{{\"etcdserver\":\"{}\",\"etcdcluster\":\"{cluster}\"}}",
                    crate::version::ETCD_VERSION
                ),
            )
        }
        "/downgrade/enabled" => {
            if req.method() != Method::GET {
                return method_not_allowed(Some("GET"));
            }
            // etcd's answer: Go's strconv.FormatBool as plain text, read linearizably so that
            // a joining member sees a job enabled a moment ago.
            let cid = server.cluster_id();
            match server.downgrade_enabled().await {
                Ok(enabled) => finish(
                    response(StatusCode::OK)
                        .header(H_CLUSTER_ID, id_path(cid))
                        .header("content-type", "text/plain"),
                    client::full(if enabled { "true" } else { "false" }),
                ),
                Err(e) => text_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("failed linearized read: {e}"),
                    Some(cid),
                ),
            }
        }
        _ => not_found(),
    }
}

/// The etcd error text and status `/members/promote` answers with.
fn promote_error(e: error::Error) -> (StatusCode, &'static str) {
    if e == error::MEMBER_NOT_LEARNER {
        (
            StatusCode::PRECONDITION_FAILED,
            "membership: can only promote a learner member",
        )
    } else if e == error::LEARNER_NOT_READY {
        (StatusCode::PRECONDITION_FAILED, e.message)
    } else if e == error::MEMBER_NOT_FOUND {
        (StatusCode::NOT_FOUND, "membership: ID not found")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, e.message)
    }
}

/// `GET /members/hashkv` with `{"revision":N}`: this member's HashKV as etcd's JSON.
/// Its errors carry no cluster ID, as etcd's (only a 200 does).
async fn hashkv<H: PeerHost>(server: Arc<H>, req: http::Request<Incoming>, peer: &str) -> Resp {
    let cid = server.cluster_id();
    let bad = |m: &str| text_error(StatusCode::BAD_REQUEST, m, None);
    let refusals = server.transport().refusals();
    let Ok(body) = read_small(req.into_body(), refusals, peer, "/members/hashkv").await else {
        return bad("error reading body");
    };
    #[derive(serde::Deserialize)]
    struct Ask {
        #[serde(default)]
        revision: i64,
    }
    let Ok(ask) = serde_json::from_slice::<Ask>(&body) else {
        return bad("error unmarshalling request");
    };
    match server.hash_kv(ask.revision).await {
        Ok(r) => {
            let rev = r.header.as_ref().map(|h| h.revision).unwrap_or(0);
            let mut out = format!("{{\"header\":{{\"revision\":{rev}}}");
            if r.hash != 0 {
                out.push_str(&format!(",\"hash\":{}", r.hash));
            }
            if r.compact_revision != 0 {
                out.push_str(&format!(",\"compact_revision\":{}", r.compact_revision));
            }
            out.push('}');
            json(Some(cid), out)
        }
        Err(e) => bad(e.message.trim_start_matches("etcdserver: ")),
    }
}

/// `GET /raft/stream/<type>/<from>`: after the checks, the peer gets a never-ending chunked
/// answer into which its messages are written.
async fn stream<H: PeerHost>(server: Arc<H>, req: http::Request<Incoming>, remote: &str) -> Resp {
    let cid = server.cluster_id();
    let me = id_path(server.member_id());
    if req.method() != Method::GET {
        return method_not_allowed(Some("GET"));
    }
    if let Err(r) = check_raft(&*server, &req, remote) {
        return *r;
    }
    let refusals = server.transport().refusals();
    let name = peer_name(&req, remote);
    let rest = &req.uri().path()["/raft/stream/".len()..];
    let Some((kind, from)) = rest
        .split_once('/')
        .and_then(|(k, f)| StreamKind::parse(k).map(|k| (k, f)))
    else {
        return text_error(StatusCode::NOT_FOUND, "invalid path", Some(cid));
    };
    let from = match u64::from_str_radix(from, 16) {
        Ok(id) => id,
        Err(e) => {
            if refusals.first(&name, &format!("stream path {from}")) {
                tracing::warn!(local_member_id = %me, path = from, error = %e, "failed to parse path into ID");
            }
            return text_error(StatusCode::NOT_FOUND, "invalid from", Some(cid));
        }
    };
    // Refusals below name the peer by the stream's sender.
    let from_hex = id_path(from);
    if server.is_removed(from) {
        if refusals.first(&from_hex, "stream from removed member") {
            tracing::warn!(local_member_id = %me, remote_peer_id_from = %from_hex, "rejected stream from remote peer because it was removed");
        }
        return text_error(StatusCode::GONE, "removed member", Some(cid));
    }
    let Some(peer) = server.transport().peer(from) else {
        if refusals.first(&from_hex, "stream sender not found") {
            tracing::warn!(local_member_id = %me, remote_peer_id_from = %from_hex, cluster_id = %id_path(cid), "failed to find remote peer in cluster");
        }
        return text_error(StatusCode::NOT_FOUND, "error sender not found", Some(cid));
    };
    let to_header = header(&req, H_RAFT_TO).unwrap_or("");
    if u64::from_str_radix(to_header, 16).ok() != Some(server.member_id()) {
        if refusals.first(&from_hex, &format!("stream to {to_header}")) {
            tracing::warn!(local_member_id = %me, remote_peer_id_header = to_header, remote_peer_id_from = %from_hex, cluster_id = %id_path(cid), "ignored streaming request; ID mismatch");
        }
        return text_error(
            StatusCode::PRECONDITION_FAILED,
            "to field mismatch",
            Some(cid),
        );
    }
    let (rx, generation) = peer.attach(kind);
    let (out_tx, out_rx) = mpsc::channel(8);
    tokio::spawn(async move {
        peer::write_stream(kind, rx, out_tx).await;
        peer.detach(kind, generation);
    });
    tracing::info!(remote_peer_id = %id_path(from), stream_type = kind.path_part(), "peer dialed its stream");
    let body: Body = BodyExt::boxed(StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(out_rx),
    ));
    finish(
        response(StatusCode::OK)
            .header(H_CLUSTER_ID, id_path(cid))
            .header(H_SERVER_VERSION, crate::version::ETCD_VERSION),
        body,
    )
}

/// The current UTC time as Go's encoding/json writes a time.Time (RFC 3339, nanoseconds).
fn chrono_like_now() -> String {
    common::gofmt::format_rfc3339_nano(std::time::SystemTime::now())
}

/// Binds every peer URL before anything is written (a port in use is an error at start).
pub async fn bind(urls: &[crate::config::Url]) -> Result<Vec<Listener>, String> {
    let mut out = Vec::new();
    for u in urls {
        let l = Listener::bind(u)
            .await
            .map_err(|e| format!("cannot listen on peer URL {u}: {e}"))?;
        out.push(l);
    }
    Ok(out)
}

async fn serve_conn<H: PeerHost, I>(server: Arc<H>, io: I, remote: String)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let remote: Arc<str> = remote.into();
    let svc = hyper::service::service_fn(move |req| {
        let (s, remote) = (server.clone(), remote.clone());
        async move { Ok::<_, std::convert::Infallible>(handle(s, req, &remote).await) }
    });
    // Header names in Go's case, as etcd's answers carry them.
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

/// Serves the peer port on `listener` (over TLS with `tls`) until `shutdown` resolves.
pub async fn serve<H: PeerHost>(
    server: Arc<H>,
    listener: Listener,
    tls: Option<crate::tls::TlsServer>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    tokio::pin!(shutdown);
    loop {
        let (conn, remote) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            c = listener.accept() => match c {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "peer listener accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let server = server.clone();
        let Some(tls) = tls.clone() else {
            tokio::spawn(serve_conn(server, conn, remote));
            continue;
        };
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(conn)).await {
                Ok(Ok((s, _))) => serve_conn(server, s, remote).await,
                Ok(Err(e)) => {
                    tracing::warn!(remote = %remote, error = %e, "rejected peer connection")
                }
                Err(_) => {
                    tracing::warn!(remote = %remote, "rejected peer connection: TLS handshake timed out")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_like_etcds_checks() {
        assert_eq!(parse_version("3.4.23"), Some((3, 4, 23)));
        assert_eq!(parse_version("3.5.0-alpha.0"), Some((3, 5, 0)));
        assert_eq!(parse_version("not_decided"), None);
        let now = chrono_like_now();
        assert!(now.ends_with('Z') && now.len() >= 20, "{now}");
    }
}
