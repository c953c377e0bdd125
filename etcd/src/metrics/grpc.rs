// Counts gRPC calls as go-grpc-prometheus does for etcd: grpc_server_started_total when a call
// arrives, grpc_server_handled_total with its status code when it ends (trailers seen), and
// each message either way with its bytes (etcd_network_client_grpc_{received,sent}_bytes_total).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use tonic::codegen::{Service, StdError};

use super::METRICS;
use crate::api::descriptors;

/// gRPC status codes by number, as the grpc_code label spells them.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

pub fn code_name(code: i32) -> &'static str {
    usize::try_from(code)
        .ok()
        .and_then(|i| CODES.get(i))
        .copied()
        .unwrap_or("Unknown")
}

/// Creates every (method, code) series of `service` at zero, as etcd does for its
/// etcdserverpb services when the server starts.
pub fn init_service(service: &str) {
    let Ok(pool) = descriptors::pool() else {
        return;
    };
    let Some(s) = pool.get_service_by_name(service) else {
        return;
    };
    for m in s.methods() {
        let t = descriptors::grpc_type(&m);
        METRICS.grpc_started.add(&[m.name(), service, t], 0);
        METRICS.grpc_msg_received.add(&[m.name(), service, t], 0);
        METRICS.grpc_msg_sent.add(&[m.name(), service, t], 0);
        for c in CODES {
            METRICS.grpc_handled.add(&[c, m.name(), service, t], 0);
        }
    }
}

/// The series of one method: (method, service, type) and its counters, looked up once per
/// process, since every call counts into the same ones and the registry's lookups (label
/// strings under one lock) cost more than the counting.
struct Series {
    method: String,
    service: String,
    typ: &'static str,
    started: Arc<AtomicU64>,
    msg_received: Arc<AtomicU64>,
    msg_sent: Arc<AtomicU64>,
    /// grpc_server_handled_total by code (CODES' order), made when a call first ends so.
    handled: [OnceLock<Arc<AtomicU64>>; CODES.len()],
}

/// Series by request path; only paths that name a known method get one.
static SERIES: LazyLock<RwLock<HashMap<String, Arc<Series>>>> = LazyLock::new(Default::default);

/// The series one call counts into.
#[derive(Clone)]
struct Call(Arc<Series>);

impl Call {
    fn from_path(path: &str) -> Option<Call> {
        if let Some(s) = SERIES.read().unwrap_or_else(|e| e.into_inner()).get(path) {
            return Some(Call(s.clone()));
        }
        let (service, method) = path.trim_start_matches('/').split_once('/')?;
        let m = descriptors::method(service, method)?;
        let typ = descriptors::grpc_type(&m);
        let labels = [method, service, typ];
        let series = Arc::new(Series {
            method: method.to_string(),
            service: service.to_string(),
            typ,
            started: METRICS.grpc_started.handle(&labels),
            msg_received: METRICS.grpc_msg_received.handle(&labels),
            msg_sent: METRICS.grpc_msg_sent.handle(&labels),
            handled: Default::default(),
        });
        let mut all = SERIES.write().unwrap_or_else(|e| e.into_inner());
        Some(Call(all.entry(path.to_string()).or_insert(series).clone()))
    }

    fn started(&self) {
        self.0.started.fetch_add(1, Ordering::Relaxed);
    }

    fn handled(&self, code: &str) {
        let s = &self.0;
        let i = CODES.iter().position(|c| *c == code).unwrap_or(2); // "Unknown"
        s.handled[i]
            .get_or_init(|| {
                METRICS
                    .grpc_handled
                    .handle(&[CODES[i], &s.method, &s.service, s.typ])
            })
            .fetch_add(1, Ordering::Relaxed);
    }

    /// One message of `len` protobuf bytes received (or sent).
    fn message(&self, sent: bool, len: u64) {
        if sent {
            self.0.msg_sent.fetch_add(1, Ordering::Relaxed);
            METRICS.grpc_sent_bytes.add(len);
        } else {
            self.0.msg_received.fetch_add(1, Ordering::Relaxed);
            METRICS.grpc_received_bytes.add(len);
        }
    }
}

/// Finds the messages in a gRPC body: each is a 5-byte prefix (compressed flag, length as
/// u32 big-endian) and that many bytes, and may straddle data frames.
#[derive(Default)]
struct Framing {
    prefix: [u8; 5],
    have: usize,
    /// Bytes of the current message still to pass.
    left: u64,
}

impl Framing {
    /// Passes `data`, calling `on_message` with each message's length as its prefix ends.
    fn feed(&mut self, mut data: &[u8], mut on_message: impl FnMut(u64)) {
        while !data.is_empty() {
            if self.left > 0 {
                let n = (self.left as usize).min(data.len());
                self.left -= n as u64;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.have).min(data.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == 5 {
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as u64;
                on_message(len);
                self.left = len;
                self.have = 0;
            }
        }
    }
}

/// A request body that counts the messages the client sends.
struct Received<B> {
    inner: B,
    call: Call,
    framing: Framing,
}

impl<B> Body for Received<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r
            && let Some(d) = f.data_ref()
        {
            let this = &mut *self;
            let call = &this.call;
            this.framing.feed(d, |len| call.message(false, len));
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

fn status_of(h: &http::HeaderMap) -> Option<&'static str> {
    let v = h.get("grpc-status")?.to_str().ok()?.parse::<i32>().ok()?;
    Some(code_name(v))
}

/// Wraps the gRPC routes of the client port.
#[derive(Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S> GrpcMetrics<S> {
    pub fn new(inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner }
    }
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B> Service<http::Request<B>> for GrpcMetrics<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<StdError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let call = Call::from_path(req.uri().path());
        let req = match &call {
            Some(c) => {
                c.started();
                req.map(|inner| {
                    tonic::body::Body::new(Received {
                        inner: http_body_util::BodyExt::map_err(inner, |e| {
                            tonic::Status::from_error(e.into())
                        }),
                        call: c.clone(),
                        framing: Framing::default(),
                    })
                })
            }
            None => req.map(|inner| {
                tonic::body::Body::new(http_body_util::BodyExt::map_err(inner, |e| {
                    tonic::Status::from_error(e.into())
                }))
            }),
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            let Some(call) = call else {
                return Ok(resp);
            };
            // A trailers-only answer (most errors) carries the status in the headers.
            if let Some(code) = status_of(resp.headers()) {
                call.handled(code);
                return Ok(resp);
            }
            Ok(resp.map(|body| {
                tonic::body::Body::new(Observed {
                    inner: body,
                    call,
                    framing: Framing::default(),
                    reported: false,
                })
            }))
        })
    }
}

/// A response body that counts the messages sent and reports the call's status once, when
/// its trailers pass (or Canceled when the client goes away first).
struct Observed {
    inner: tonic::body::Body,
    call: Call,
    framing: Framing,
    reported: bool,
}

impl Observed {
    fn report(&mut self, code: &str) {
        if !self.reported {
            self.reported = true;
            self.call.handled(code);
        }
    }
}

impl Body for Observed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    let this = &mut *self;
                    let call = &this.call;
                    this.framing.feed(d, |len| call.message(true, len));
                }
                if let Some(t) = f.trailers_ref() {
                    self.report(status_of(t).unwrap_or("Unknown"));
                }
            }
            Poll::Ready(Some(Err(_))) => self.report("Unknown"),
            Poll::Ready(None) => self.report("OK"),
            Poll::Pending => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        self.report("Canceled");
    }
}
