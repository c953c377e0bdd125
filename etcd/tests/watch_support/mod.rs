// Watch client helpers shared by the watch tests: a stream opened with its create requests,
// and its responses read one at a time or for a while, each within a bound.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use proto::etcdserverpb::{
    WatchCreateRequest, WatchRequest, WatchResponse, watch_client::WatchClient, watch_request,
};

pub type Responses = tonic::Streaming<WatchResponse>;
pub type Requests = tokio::sync::mpsc::Sender<WatchRequest>;

/// Opens a watch stream on `url` sending `creates` in order; the sender keeps it open.
pub async fn open_watch(url: &str, creates: Vec<WatchCreateRequest>) -> (Responses, Requests) {
    let ch = tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    open_watch_on(ch, creates).await
}

/// `open_watch` on an open connection (several streams share one).
pub async fn open_watch_on(
    ch: tonic::transport::Channel,
    creates: Vec<WatchCreateRequest>,
) -> (Responses, Requests) {
    let mut wc = WatchClient::new(ch).max_decoding_message_size(64 << 20);
    let (tx, rx) = tokio::sync::mpsc::channel(creates.len().max(16));
    for c in creates {
        tx.send(WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(c)),
        })
        .await
        .expect("send");
    }
    let stream = wc
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("watch")
        .into_inner();
    (stream, tx)
}

/// The next response on `stream`, within `within`.
pub async fn next_response(stream: &mut Responses, within: Duration) -> WatchResponse {
    tokio::time::timeout(within, stream.message())
        .await
        .expect("a watch response in time")
        .expect("watch stream")
        .expect("a response")
}

/// Hands each response on `stream` to `f` for `run`, each one within 5 s.
pub async fn each_response_for(
    stream: &mut Responses,
    run: Duration,
    mut f: impl FnMut(WatchResponse),
) {
    let end = Instant::now() + run;
    while Instant::now() < end {
        f(next_response(stream, Duration::from_secs(5)).await);
    }
}
