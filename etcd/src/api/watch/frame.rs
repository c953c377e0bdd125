// The Watch service's wire side: responses whose events are already encoded (shared by every
// watcher that gets them), and the gRPC service that sends them as etcdserverpb.WatchResponse.
//
// Hand-written instead of generated only so the response type can carry pre-encoded events;
// on the wire it is exactly the generated service (same path, same message bytes).

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType, encode_key, encode_varint, encoded_len_varint};
use proto::etcdserverpb::{WatchRequest, WatchResponse};
use tonic::codegen::{BoxFuture, Service, StdError, http};

/// WatchResponse's `events` field.
const EVENTS_FIELD: u32 = 11;

/// A WatchResponse: every field but the events in `head`, the events as encoded
/// `mvccpb.Event` messages.
#[derive(Debug, Default, Clone)]
pub struct WatchFrame {
    pub head: WatchResponse,
    pub events: Vec<Bytes>,
}

impl From<WatchResponse> for WatchFrame {
    fn from(head: WatchResponse) -> WatchFrame {
        WatchFrame {
            head,
            events: Vec::new(),
        }
    }
}

fn event_len(e: &Bytes) -> usize {
    prost::encoding::key_len(EVENTS_FIELD) + encoded_len_varint(e.len() as u64) + e.len()
}

impl WatchFrame {
    /// etcd's fragment option: a response over `limit` bytes goes out as several, each with
    /// as many events as fit (at least one), all but the last marked `fragment`.
    pub fn fragments(self, limit: usize) -> Vec<WatchFrame> {
        use prost::Message;
        if self.encoded_len() <= limit {
            return vec![self];
        }
        let base = self.head.encoded_len();
        let mut out = Vec::new();
        let mut cur = WatchFrame {
            head: self.head.clone(),
            events: Vec::new(),
        };
        let mut size = base;
        for e in self.events {
            let n = event_len(&e);
            if !cur.events.is_empty() && size + n > limit {
                let next = WatchFrame {
                    head: cur.head.clone(),
                    events: Vec::new(),
                };
                cur.head.fragment = true;
                out.push(std::mem::replace(&mut cur, next));
                size = base;
            }
            size += n;
            cur.events.push(e);
        }
        out.push(cur);
        out
    }
}

impl prost::Message for WatchFrame {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.head.encode_raw(buf);
        for e in &self.events {
            encode_key(EVENTS_FIELD, WireType::LengthDelimited, buf);
            encode_varint(e.len() as u64, buf);
            buf.put_slice(e);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // Never decoded by the server; decoding puts everything, events too, in `head`.
        self.head.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.head.encoded_len() + self.events.iter().map(event_len).sum::<usize>()
    }

    fn clear(&mut self) {
        self.head.clear();
        self.events.clear();
    }
}

/// The stream of frames a Watch call answers with.
pub type FrameStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<WatchFrame, tonic::Status>> + Send>>;

/// What serves a Watch call.
#[tonic::async_trait]
pub trait WatchFrames: Send + Sync + 'static {
    async fn watch(
        &self,
        request: tonic::Request<tonic::Streaming<WatchRequest>>,
    ) -> Result<tonic::Response<FrameStream>, tonic::Status>;
}

/// `etcdserverpb.Watch` as a gRPC service over `T`.
pub struct WatchServer<T> {
    inner: Arc<T>,
    max_decoding_message_size: Option<usize>,
}

impl<T> WatchServer<T> {
    pub fn new(inner: T) -> Self {
        WatchServer {
            inner: Arc::new(inner),
            max_decoding_message_size: None,
        }
    }

    #[must_use]
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.max_decoding_message_size = Some(limit);
        self
    }
}

impl<T> Clone for WatchServer<T> {
    fn clone(&self) -> Self {
        WatchServer {
            inner: self.inner.clone(),
            max_decoding_message_size: self.max_decoding_message_size,
        }
    }
}

impl<T> tonic::server::NamedService for WatchServer<T> {
    const NAME: &'static str = "etcdserverpb.Watch";
}

struct WatchCall<T>(Arc<T>);

impl<T: WatchFrames> tonic::server::StreamingService<WatchRequest> for WatchCall<T> {
    type Response = WatchFrame;
    type ResponseStream = FrameStream;
    type Future = BoxFuture<tonic::Response<FrameStream>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<WatchRequest>>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { inner.watch(request).await })
    }
}

impl<T, B> Service<http::Request<B>> for WatchServer<T>
where
    T: WatchFrames,
    B: http_body::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != "/etcdserverpb.Watch/Watch" {
            return Box::pin(async {
                Ok(tonic::Status::unimplemented("").into_http::<tonic::body::Body>())
            });
        }
        let inner = self.inner.clone();
        let max = self.max_decoding_message_size;
        let mut codec = tonic_prost::ProstCodec::<WatchFrame, WatchRequest>::default();
        // A compressed request stream (no etcd client sends one) goes through tonic's own
        // handling, which refuses it as etcd does; everything else is answered by FrameBody.
        if req
            .headers()
            .get("grpc-encoding")
            .is_some_and(|v| v.as_bytes() != b"identity")
        {
            return Box::pin(async move {
                let mut grpc =
                    tonic::server::Grpc::new(codec).apply_max_message_size_config(max, None);
                Ok(grpc.streaming(WatchCall(inner), req).await)
            });
        }
        Box::pin(async move {
            let req = req.map(|body| {
                tonic::Streaming::new_request(
                    tonic::codec::Codec::decoder(&mut codec),
                    body,
                    None,
                    max,
                )
            });
            let resp = match inner.watch(tonic::Request::from_http(req)).await {
                Ok(r) => r,
                Err(status) => return Ok(status.into_http()),
            };
            let (metadata, frames, extensions) = resp.into_parts();
            let mut resp = http::Response::new(tonic::body::Body::new(FrameBody {
                frames,
                done: false,
            }));
            *resp.headers_mut() = metadata.into_headers();
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                tonic::metadata::GRPC_CONTENT_TYPE,
            );
            *resp.extensions_mut() = extensions;
            Ok(resp)
        })
    }
}

/// A Watch call's response body: each frame as one gRPC message (uncompressed) the moment
/// the stream yields it, then the call's status in the trailers. tonic's encoder would poll
/// the stream again after each message to gather more into one buffer; a watch stream
/// rarely has a second frame ready (one event per wake-up under fan-out), so that second
/// poll of the stream's loop was spent for nothing on nearly every event.
struct FrameBody {
    frames: FrameStream,
    done: bool,
}

/// `f` as a gRPC message: the uncompressed flag, its length, its bytes.
fn grpc_message(f: &WatchFrame) -> Result<Bytes, tonic::Status> {
    use prost::Message;
    let len = f.encoded_len();
    let Ok(len32) = u32::try_from(len) else {
        return Err(tonic::Status::resource_exhausted(format!(
            "Cannot return body with more than 4GB of data but got {len} bytes"
        )));
    };
    let mut buf = Vec::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(len32);
    f.encode_raw(&mut buf);
    Ok(Bytes::from(buf))
}

/// The trailers that end the call with `status`. `add_header` writes grpc-status before the
/// message and details, so a message that cannot be a header value still leaves the code.
fn status_trailers(status: &tonic::Status) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    let _ = status.add_header(&mut h);
    h
}

impl http_body::Body for FrameBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let end = match std::task::ready!(self.frames.as_mut().poll_next(cx)) {
            Some(Ok(f)) => match grpc_message(&f) {
                Ok(b) => return Poll::Ready(Some(Ok(http_body::Frame::data(b)))),
                Err(status) => status,
            },
            Some(Err(status)) => status,
            None => tonic::Status::ok(""),
        };
        self.done = true;
        Poll::Ready(Some(Ok(http_body::Frame::trailers(status_trailers(&end)))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use proto::etcdserverpb::ResponseHeader;
    use proto::mvccpb::{Event, KeyValue};

    #[test]
    fn a_frame_encodes_as_the_whole_watch_response() {
        let ev = |k: &str| Event {
            kv: Some(KeyValue {
                key: k.as_bytes().to_vec(),
                value: b"v".to_vec(),
                mod_revision: 7,
                ..Default::default()
            }),
            ..Default::default()
        };
        let head = WatchResponse {
            header: Some(ResponseHeader {
                cluster_id: 1,
                member_id: 2,
                revision: 7,
                raft_term: 3,
            }),
            watch_id: -1,
            ..Default::default()
        };
        let whole = WatchResponse {
            events: vec![ev("a"), ev("b")],
            ..head.clone()
        };
        let frame = WatchFrame {
            head,
            events: vec![
                Bytes::from(ev("a").encode_to_vec()),
                Bytes::from(ev("b").encode_to_vec()),
            ],
        };
        assert_eq!(frame.encode_to_vec(), whole.encode_to_vec());
        assert_eq!(frame.encoded_len(), whole.encoded_len());
        let parts = frame.fragments(whole.encoded_len() - 1);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].head.fragment && !parts[1].head.fragment);
    }
}
