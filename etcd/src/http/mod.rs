// The HTTP/1.1 side of the client port (and of --listen-metrics-urls): /health, /readyz,
// /livez, /version, /metrics and the grpc-gateway JSON API under /v3/, with etcd's headers.
// The metrics listener serves /metrics and the health endpoints only.

pub mod gateway;
pub mod health;
pub mod json;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;

use crate::server::EtcdServer;

pub type Body = tonic::body::Body;

/// The client port's gRPC routes (wrapped by the metrics layer), which the gateway calls
/// in-process: one code path for gRPC and JSON clients.
pub type GrpcRoutes = crate::metrics::grpc::GrpcMetrics<tonic::service::Routes>;

/// What a request on one listener can reach.
#[derive(Clone)]
pub struct Ctx {
    pub server: Arc<EtcdServer>,
    /// None on a --listen-metrics-urls listener (only /metrics and the health endpoints).
    pub grpc: Option<GrpcRoutes>,
}

/// Answers one HTTP request that is not gRPC.
pub async fn handle(ctx: Ctx, req: Request<Body>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let Some(grpc) = ctx.grpc.clone() else {
        // The metrics listener: etcd 3.5 serves /metrics and the health endpoints there
        // (kubeadm probes /livez and /readyz on it), without CORS headers.
        if path == "/metrics" {
            return Ok(metrics(&ctx.server));
        }
        let health = health::route(&ctx.server, req.method(), &path, req.uri().query()).await;
        return Ok(health.unwrap_or_else(not_found));
    };
    let mut resp = if req.method() == Method::OPTIONS {
        // CORS preflight: etcd answers 200 with the allow headers and no body.
        text(StatusCode::OK, "", None)
    } else {
        match path.as_str() {
            "/metrics" => metrics(&ctx.server),
            "/version" => health::version(&ctx.server),
            p if p.starts_with("/v3/") || p.starts_with("/v3beta/") => {
                gateway::handle(&ctx.server, grpc, req).await
            }
            p => health::route(&ctx.server, req.method(), p, req.uri().query())
                .await
                .unwrap_or_else(not_found),
        }
    };
    let h = resp.headers_mut();
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("accept, content-type, authorization"),
    );
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
    );
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    Ok(resp)
}

fn metrics(server: &EtcdServer) -> Response<Body> {
    text(
        StatusCode::OK,
        &crate::metrics::render(server),
        Some("text/plain; version=0.0.4; charset=utf-8"),
    )
}

/// Go's http.NotFound.
pub fn not_found() -> Response<Body> {
    go_error(StatusCode::NOT_FOUND, "404 page not found")
}

/// Go's http.Error: the text plus a newline, text/plain, nosniff.
pub fn go_error(status: StatusCode, msg: &str) -> Response<Body> {
    let mut r = text(
        status,
        &format!("{msg}\n"),
        Some("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// A complete response; `content_type` None leaves it unset (Go sniffs text/plain for text).
pub fn text(status: StatusCode, body: &str, content_type: Option<&'static str>) -> Response<Body> {
    let mut r = Response::new(full(body.as_bytes().to_vec()));
    *r.status_mut() = status;
    let ct = content_type.unwrap_or(if body.is_empty() {
        ""
    } else {
        "text/plain; charset=utf-8"
    });
    if !ct.is_empty() {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    r
}

pub fn full(b: Vec<u8>) -> Body {
    Body::new(Full::new(Bytes::from(b)))
}
