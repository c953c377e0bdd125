// The grpc-gateway JSON API of etcd 3.4 (/v3/... and /v3beta/...): each POST is turned into the
// gRPC call it names and sent to the client port's own gRPC routes in-process (no socket, the
// same handlers, interceptors and metrics as gRPC clients); answers come back as JSON, streams
// as one {"result":...} object per line.

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use prost_reflect::{MessageDescriptor, MethodDescriptor};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::Service;

use super::json;
use super::{Body, GrpcRoutes, full, go_error};
use crate::api::descriptors;
use crate::server::EtcdServer;

/// (path under /v3/, service, method), as etcd 3.4's gateway registers them (and 3.5's
/// Downgrade).
const ROUTES: &[(&str, &str, &str)] = &[
    ("kv/range", "etcdserverpb.KV", "Range"),
    ("kv/put", "etcdserverpb.KV", "Put"),
    ("kv/deleterange", "etcdserverpb.KV", "DeleteRange"),
    ("kv/txn", "etcdserverpb.KV", "Txn"),
    ("kv/compaction", "etcdserverpb.KV", "Compact"),
    ("watch", "etcdserverpb.Watch", "Watch"),
    ("lease/grant", "etcdserverpb.Lease", "LeaseGrant"),
    ("lease/revoke", "etcdserverpb.Lease", "LeaseRevoke"),
    ("kv/lease/revoke", "etcdserverpb.Lease", "LeaseRevoke"),
    ("lease/keepalive", "etcdserverpb.Lease", "LeaseKeepAlive"),
    ("lease/timetolive", "etcdserverpb.Lease", "LeaseTimeToLive"),
    (
        "kv/lease/timetolive",
        "etcdserverpb.Lease",
        "LeaseTimeToLive",
    ),
    ("lease/leases", "etcdserverpb.Lease", "LeaseLeases"),
    ("kv/lease/leases", "etcdserverpb.Lease", "LeaseLeases"),
    ("cluster/member/add", "etcdserverpb.Cluster", "MemberAdd"),
    (
        "cluster/member/remove",
        "etcdserverpb.Cluster",
        "MemberRemove",
    ),
    (
        "cluster/member/update",
        "etcdserverpb.Cluster",
        "MemberUpdate",
    ),
    ("cluster/member/list", "etcdserverpb.Cluster", "MemberList"),
    (
        "cluster/member/promote",
        "etcdserverpb.Cluster",
        "MemberPromote",
    ),
    ("maintenance/alarm", "etcdserverpb.Maintenance", "Alarm"),
    ("maintenance/status", "etcdserverpb.Maintenance", "Status"),
    (
        "maintenance/defragment",
        "etcdserverpb.Maintenance",
        "Defragment",
    ),
    ("maintenance/hash", "etcdserverpb.Maintenance", "Hash"),
    (
        "maintenance/snapshot",
        "etcdserverpb.Maintenance",
        "Snapshot",
    ),
    (
        "maintenance/transfer-leadership",
        "etcdserverpb.Maintenance",
        "MoveLeader",
    ),
    // etcd 3.5's.
    (
        "maintenance/downgrade",
        "etcdserverpb.Maintenance",
        "Downgrade",
    ),
    ("auth/enable", "etcdserverpb.Auth", "AuthEnable"),
    ("auth/disable", "etcdserverpb.Auth", "AuthDisable"),
    ("auth/authenticate", "etcdserverpb.Auth", "Authenticate"),
    ("auth/user/add", "etcdserverpb.Auth", "UserAdd"),
    ("auth/user/get", "etcdserverpb.Auth", "UserGet"),
    ("auth/user/list", "etcdserverpb.Auth", "UserList"),
    ("auth/user/delete", "etcdserverpb.Auth", "UserDelete"),
    (
        "auth/user/changepw",
        "etcdserverpb.Auth",
        "UserChangePassword",
    ),
    ("auth/user/grant", "etcdserverpb.Auth", "UserGrantRole"),
    ("auth/user/revoke", "etcdserverpb.Auth", "UserRevokeRole"),
    ("auth/role/add", "etcdserverpb.Auth", "RoleAdd"),
    ("auth/role/get", "etcdserverpb.Auth", "RoleGet"),
    ("auth/role/list", "etcdserverpb.Auth", "RoleList"),
    ("auth/role/delete", "etcdserverpb.Auth", "RoleDelete"),
    (
        "auth/role/grant",
        "etcdserverpb.Auth",
        "RoleGrantPermission",
    ),
    (
        "auth/role/revoke",
        "etcdserverpb.Auth",
        "RoleRevokePermission",
    ),
    ("lock/lock", "v3lockpb.Lock", "Lock"),
    ("lock/unlock", "v3lockpb.Lock", "Unlock"),
    ("election/campaign", "v3electionpb.Election", "Campaign"),
    ("election/proclaim", "v3electionpb.Election", "Proclaim"),
    ("election/leader", "v3electionpb.Election", "Leader"),
    ("election/observe", "v3electionpb.Election", "Observe"),
    ("election/resign", "v3electionpb.Election", "Resign"),
];

/// grpc-gateway's HTTPStatusFromCode.
fn http_status(code: i32) -> StatusCode {
    match code {
        0 => StatusCode::OK,
        1 => StatusCode::REQUEST_TIMEOUT,
        3 | 9 | 11 => StatusCode::BAD_REQUEST,
        4 => StatusCode::GATEWAY_TIMEOUT,
        5 => StatusCode::NOT_FOUND,
        6 | 10 => StatusCode::CONFLICT,
        7 => StatusCode::FORBIDDEN,
        8 => StatusCode::TOO_MANY_REQUESTS,
        12 => StatusCode::NOT_IMPLEMENTED,
        14 => StatusCode::SERVICE_UNAVAILABLE,
        16 => StatusCode::UNAUTHORIZED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The unary error body: {"error":msg,"message":msg,"code":N}.
fn error_response(code: i32, msg: &str) -> Response<Body> {
    let body = serde_json::json!({"error": msg, "message": msg, "code": code});
    let mut r = Response::new(full(json::go_escape(&body.to_string()).into_bytes()));
    *r.status_mut() = http_status(code);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A streamed error line: {"error":{"grpc_code":..,"http_code":..,"message":..,"http_status":..}}.
fn stream_error_line(code: i32, msg: &str) -> String {
    let st = http_status(code);
    let mut e = serde_json::Map::new();
    if code != 0 {
        e.insert("grpc_code".into(), code.into());
    }
    e.insert("http_code".into(), st.as_u16().into());
    if !msg.is_empty() {
        e.insert("message".into(), msg.into());
    }
    e.insert(
        "http_status".into(),
        st.canonical_reason().unwrap_or("").into(),
    );
    let line = serde_json::json!({ "error": e });
    json::go_escape(&line.to_string())
}

fn frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + msg.len());
    b.extend_from_slice(&[0]);
    b.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    b.extend_from_slice(msg);
    b.freeze()
}

/// Pulls the complete gRPC messages out of `buf`.
fn take_messages(buf: &mut BytesMut) -> Result<Vec<Bytes>, String> {
    let mut out = Vec::new();
    while buf.len() >= 5 {
        if buf[0] != 0 {
            return Err("compressed gRPC messages are not expected from our own server".into());
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if buf.len() < 5 + len {
            break;
        }
        buf.advance(5);
        out.push(buf.split_to(len).freeze());
    }
    Ok(out)
}

pub async fn handle(server: &EtcdServer, grpc: GrpcRoutes, req: Request<Body>) -> Response<Body> {
    let path = req.uri().path();
    let rest = path
        .strip_prefix("/v3/")
        .or_else(|| path.strip_prefix("/v3beta/"))
        .unwrap_or("");
    let Some(&(_, service, method)) = ROUTES.iter().find(|r| r.0 == rest) else {
        return go_error(StatusCode::NOT_FOUND, "Not Found");
    };
    if req.method() != Method::POST {
        return go_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    }
    let Some(md) = descriptors::method(service, method) else {
        return error_response(12, &format!("unknown method {service}/{method}"));
    };
    let (parts, body) = req.into_parts();
    let grpc_body = if md.is_client_streaming() {
        stream_requests(md.input(), body)
    } else {
        // JSON carries bytes as base64 (4/3) plus names: allow twice the gRPC limit.
        let limit = 2 * server.cfg().max_request_bytes + 512 * 1024;
        let bytes = match http_body_util::Limited::new(body, limit).collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) => return error_response(3, &e.to_string()),
        };
        match json::request_from_json(&md.input(), &bytes) {
            Ok(msg) => Body::new(http_body_util::Full::new(frame(&msg))),
            Err(e) => return error_response(3, &e),
        }
    };
    let mut greq = Request::new(grpc_body);
    *greq.method_mut() = Method::POST;
    *greq.uri_mut() = match format!("/{service}/{method}").parse() {
        Ok(u) => u,
        Err(e) => return error_response(13, &format!("bad gRPC path: {e}")),
    };
    *greq.extensions_mut() = parts.extensions;
    let h = greq.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(header::TE, HeaderValue::from_static("trailers"));
    // As grpc-gateway: Authorization becomes the "authorization" metadata (etcd reads the
    // auth token from it), and Grpc-Metadata-<name> headers become <name>.
    for (name, value) in parts.headers.iter() {
        if name == header::AUTHORIZATION {
            h.insert("authorization", value.clone());
        } else if let Some(md_name) = name.as_str().strip_prefix("grpc-metadata-")
            && let Ok(n) = http::HeaderName::from_bytes(md_name.as_bytes())
        {
            h.append(n, value.clone());
        }
    }
    let mut grpc = grpc;
    let resp = match grpc.call(greq).await {
        Ok(r) => r,
        Err(e) => match e {},
    };
    if let Some(st) = tonic::Status::from_header_map(resp.headers()) {
        if st.code() == tonic::Code::Unimplemented && st.message().is_empty() {
            // A service this server does not register: grpc-go's wording.
            return error_response(12, &format!("unknown service {service}"));
        }
        if st.code() != tonic::Code::Ok {
            return error_response(st.code() as i32, st.message());
        }
    }
    if md.is_server_streaming() {
        stream_responses(md, resp.into_body())
    } else {
        unary_response(&md.output(), resp.into_body()).await
    }
}

/// Reads the request body as a sequence of JSON objects and feeds them to the call as gRPC
/// messages; a bad object ends the request side there, as in grpc-gateway.
fn stream_requests(desc: MessageDescriptor, mut body: Body) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(16);
    tokio::spawn(async move {
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let chunk = match body.frame().await {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
                _ => break,
            };
            buf.extend_from_slice(&chunk);
            let mut used = 0;
            loop {
                let rest = &buf[used..];
                if rest.iter().all(u8::is_ascii_whitespace) {
                    used = buf.len();
                    break;
                }
                let mut values =
                    serde_json::Deserializer::from_slice(rest).into_iter::<serde_json::Value>();
                match values.next() {
                    Some(Ok(v)) => {
                        used += values.byte_offset();
                        match json::from_json_value(&desc, v) {
                            Ok(msg) => {
                                if tx.send(Ok(Frame::data(frame(&msg)))).await.is_err() {
                                    return;
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "gateway: bad request in a stream");
                                return;
                            }
                        }
                    }
                    // An object cut by the chunk boundary: wait for more.
                    Some(Err(e)) if e.is_eof() => break,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "gateway: bad JSON in a request stream");
                        return;
                    }
                    None => break,
                }
            }
            buf.drain(..used);
        }
        // The body is over: dropping the sender half-closes the call, as grpc-gateway's
        // CloseSend does. A keep-alive then answers what it got and ends; a watch goes on
        // sending events until the HTTP client goes away.
    });
    Body::new(StreamBody::new(ReceiverStream::new(rx)))
}

async fn unary_response(desc: &MessageDescriptor, body: Body) -> Response<Body> {
    let collected = match body.collect().await {
        Ok(c) => c,
        Err(st) => return error_response(st.code() as i32, st.message()),
    };
    let trailers = collected.trailers().cloned();
    let mut buf = BytesMut::from(collected.to_bytes().as_ref());
    if let Some(t) = &trailers
        && let Some(st) = tonic::Status::from_header_map(t)
        && st.code() != tonic::Code::Ok
    {
        return error_response(st.code() as i32, st.message());
    }
    let msgs = match take_messages(&mut buf) {
        Ok(m) => m,
        Err(e) => return error_response(13, &e),
    };
    let Some(msg) = msgs.first() else {
        return error_response(13, "the call ended without an answer");
    };
    match json::response_to_json(desc, msg) {
        Ok(j) => json_ok(full(j.into_bytes())),
        Err(e) => error_response(13, &e),
    }
}

fn json_ok(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // grpc-gateway forwards the call's response metadata as Grpc-Metadata-*.
    h.insert(
        "grpc-metadata-content-type",
        HeaderValue::from_static("application/grpc"),
    );
    r
}

/// Streams each answer as a {"result":...} line, and an error line if the call fails.
fn stream_responses(md: MethodDescriptor, mut body: Body) -> Response<Body> {
    let desc = md.output();
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(16);
    tokio::spawn(async move {
        let mut buf = BytesMut::new();
        let send = |line: String| {
            let tx = tx.clone();
            async move {
                tx.send(Ok(Frame::data(Bytes::from(line + "\n"))))
                    .await
                    .is_ok()
            }
        };
        loop {
            tokio::select! {
                f = body.frame() => {
                    let f = match f {
                        Some(Ok(f)) => f,
                        Some(Err(st)) => {
                            let _ = send(stream_error_line(st.code() as i32, st.message())).await;
                            return;
                        }
                        None => return,
                    };
                    if let Some(t) = f.trailers_ref() {
                        if let Some(st) = tonic::Status::from_header_map(t)
                            && st.code() != tonic::Code::Ok
                        {
                            let _ = send(stream_error_line(st.code() as i32, st.message())).await;
                        }
                        return;
                    }
                    if let Ok(d) = f.into_data() {
                        buf.extend_from_slice(&d);
                        let msgs = match take_messages(&mut buf) {
                            Ok(m) => m,
                            Err(e) => {
                                let _ = send(stream_error_line(13, &e)).await;
                                return;
                            }
                        };
                        for m in msgs {
                            let line = match json::response_to_json(&desc, &m) {
                                Ok(j) => format!("{{\"result\":{j}}}"),
                                Err(e) => stream_error_line(13, &e),
                            };
                            if !send(line).await {
                                return;
                            }
                        }
                    }
                }
                // The HTTP client went away: dropping the body ends the call.
                _ = tx.closed() => return,
            }
        }
    });
    json_ok(Body::new(StreamBody::new(ReceiverStream::new(rx))))
}
