// Requests one member makes of another over the peer port, as etcd 3.4 makes them: a
// follower's lease renewals and TTL queries to the leader (which owns expiry), learner
// promotion (only the leader knows a learner's progress), HashKV for the corruption checks,
// and the member list and version a joining member asks for (docs/RAFTHTTP.md §9–§11).

use http::{Method, StatusCode};
use prost::Message as _;
use proto::etcdserverpb::{
    HashKvResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseTimeToLiveRequest,
    LeaseTimeToLiveResponse, ResponseHeader,
};

use super::client::{self, PeerHttp};
use crate::error::{self, Error};
use crate::membership::Member;

/// Answers read from peers stay below this.
const MAX_ANSWER: usize = 16 << 20;

async fn ask(
    http: &PeerHttp,
    urls: &[String],
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<(StatusCode, http::HeaderMap, bytes::Bytes), String> {
    let resp = http
        .request_any(urls, || {
            client::plain_request(
                method.clone(),
                path,
                content_type,
                client::full(body.clone()),
            )
        })
        .await
        .map_err(|e| e.to_string())?;
    client::read_body(resp, MAX_ANSWER).await
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_string()
}

/// Renews lease `id` on the leader at `urls`.
pub async fn lease_renew(
    http: &PeerHttp,
    urls: &[String],
    id: i64,
) -> Result<LeaseKeepAliveResponse, Error> {
    let (status, _, body) = ask(
        http,
        urls,
        Method::POST,
        "/leases",
        Some("application/protobuf"),
        LeaseKeepAliveRequest { id }.encode_to_vec(),
    )
    .await
    .map_err(|_| error::TIMEOUT_DUE_TO_CONNECTION_LOST)?;
    match status {
        StatusCode::OK => {
            LeaseKeepAliveResponse::decode(body).map_err(|_| error::TIMEOUT_DUE_TO_CONNECTION_LOST)
        }
        StatusCode::NOT_FOUND => Err(error::LEASE_NOT_FOUND),
        // "not a primary lessor": the leader moved; the client retries.
        _ => Err(error::LEADER_CHANGED),
    }
}

/// A lease's remaining TTL as the leader at `urls` knows it (TTL -1: no such lease).
pub async fn lease_time_to_live(
    http: &PeerHttp,
    urls: &[String],
    req: LeaseTimeToLiveRequest,
) -> Result<LeaseTimeToLiveResponse, Error> {
    let id = req.id;
    let (status, _, body) = ask(
        http,
        urls,
        Method::POST,
        "/leases/internal",
        Some("application/protobuf"),
        proto::leasepb::LeaseInternalRequest {
            lease_time_to_live_request: Some(req),
        }
        .encode_to_vec(),
    )
    .await
    .map_err(|_| error::TIMEOUT_DUE_TO_CONNECTION_LOST)?;
    match status {
        StatusCode::OK => proto::leasepb::LeaseInternalResponse::decode(body)
            .ok()
            .and_then(|r| r.lease_time_to_live_response)
            .ok_or(error::TIMEOUT_DUE_TO_CONNECTION_LOST),
        StatusCode::NOT_FOUND => Ok(LeaseTimeToLiveResponse {
            header: None,
            id,
            ttl: -1,
            granted_ttl: 0,
            keys: Vec::new(),
        }),
        _ => Err(error::LEADER_CHANGED),
    }
}

/// Asks the leader at `urls` to promote learner `id`; returns the members after it.
pub async fn promote(http: &PeerHttp, urls: &[String], id: u64) -> Result<Vec<Member>, Error> {
    let (status, _, body) = ask(
        http,
        urls,
        Method::POST,
        &format!("/members/promote/{id}"),
        None,
        Vec::new(),
    )
    .await
    .map_err(|_| error::TIMEOUT_DUE_TO_CONNECTION_LOST)?;
    if status == StatusCode::OK {
        return serde_json::from_slice(&body).map_err(|_| error::TIMEOUT_DUE_TO_CONNECTION_LOST);
    }
    let msg = text(&body);
    Err(match msg.as_str() {
        "membership: can only promote a learner member" => error::MEMBER_NOT_LEARNER,
        "membership: ID not found" => error::MEMBER_NOT_FOUND,
        m => error::by_message(m).unwrap_or(error::TIMEOUT_DUE_TO_CONNECTION_LOST),
    })
}

/// A peer's HashKV at `rev` (0 = its current revision).
pub async fn hash_kv(http: &PeerHttp, urls: &[String], rev: i64) -> Result<HashKvResponse, String> {
    let (status, _, body) = ask(
        http,
        urls,
        Method::GET,
        "/members/hashkv",
        Some("application/json"),
        format!("{{\"revision\":{rev}}}").into_bytes(),
    )
    .await?;
    if status != StatusCode::OK {
        return Err(text(&body));
    }
    #[derive(serde::Deserialize)]
    struct Header {
        #[serde(default)]
        revision: i64,
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(default)]
        header: Option<Header>,
        #[serde(default)]
        hash: u32,
        #[serde(default)]
        compact_revision: i64,
    }
    let a: Answer = serde_json::from_slice(&body).map_err(|e| format!("bad hashkv answer: {e}"))?;
    let rev = a.header.map(|h| h.revision).unwrap_or(0);
    Ok(HashKvResponse {
        header: Some(ResponseHeader {
            revision: rev,
            ..Default::default()
        }),
        hash: a.hash,
        compact_revision: a.compact_revision,
        hash_revision: rev,
    })
}

/// A peer's member list and the cluster ID its answer carries (`GET /members`).
pub async fn members(http: &PeerHttp, url: &str) -> Result<(u64, Vec<Member>), String> {
    let (status, headers, body) = ask(
        http,
        &[url.to_string()],
        Method::GET,
        "/members",
        None,
        Vec::new(),
    )
    .await?;
    if status != StatusCode::OK {
        return Err(format!("{status}: {}", text(&body)));
    }
    let cid = headers
        .get(super::wire::H_CLUSTER_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or("the answer carries no cluster ID")?;
    let ms: Vec<Member> =
        serde_json::from_slice(&body).map_err(|e| format!("bad member list: {e}"))?;
    Ok((cid, ms))
}

/// A peer's server and cluster versions (`GET /version`; the cluster's may be "not_decided").
pub async fn version(http: &PeerHttp, urls: &[String]) -> Result<(String, String), String> {
    let (status, _, body) = ask(http, urls, Method::GET, "/version", None, Vec::new()).await?;
    if status != StatusCode::OK {
        return Err(format!("{status}: {}", text(&body)));
    }
    #[derive(serde::Deserialize)]
    struct Versions {
        etcdserver: String,
        etcdcluster: String,
    }
    let v: Versions = serde_json::from_slice(&body).map_err(|e| format!("bad version: {e}"))?;
    Ok((v.etcdserver, v.etcdcluster))
}
