// Watch progress requests under load: a progress response for revision R never overtakes an
// event at or below R (kine#731's failure), on one member and on a follower of a cluster.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::Cluster;
use proto::etcdserverpb::{
    PutRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest, kv_client::KvClient,
    watch_client::WatchClient, watch_request,
};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const FAST: &[&str] = &["--heartbeat-interval", "50", "--election-timeout", "500"];
const WRITERS: usize = 4;
const RUN: Duration = Duration::from_secs(4);

/// Writes from 4 clients while a prefix watch asks for progress every 10 ms; returns
/// (events, progress responses) after checking every event comes after the progress
/// responses before it, and every event arrives in order, once.
async fn run(write_url: String, watch_url: String) -> (usize, usize) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (url, stop) = (write_url.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut kv = KvClient::connect(url).await.expect("connect writer");
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                kv.put(PutRequest {
                    key: format!("p/{w}-{n}").into_bytes(),
                    value: b"v".to_vec(),
                    ..Default::default()
                })
                .await
                .expect("put");
            }
        }));
    }
    let mut wc = WatchClient::connect(watch_url)
        .await
        .expect("connect watcher");
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(
            WatchCreateRequest {
                key: b"p/".to_vec(),
                range_end: b"p0".to_vec(),
                ..Default::default()
            },
        )),
    })
    .await
    .expect("create");
    let mut stream = wc
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("watch")
        .into_inner();
    let asker = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let req = WatchRequest {
                    request_union: Some(watch_request::RequestUnion::ProgressRequest(
                        WatchProgressRequest {},
                    )),
                };
                if tx.send(req).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let (mut events, mut progress) = (0usize, 0usize);
    let (mut last_progress, mut last_event) = (0i64, 0i64);
    let mut watch_id = None;
    let end = Instant::now() + RUN;
    while Instant::now() < end {
        let r = tokio::time::timeout(Duration::from_secs(5), stream.message())
            .await
            .expect("a watch response in time")
            .expect("watch stream")
            .expect("a response");
        if r.created {
            watch_id = Some(r.watch_id);
            continue;
        }
        let rev = r.header.as_ref().map_or(0, |h| h.revision);
        if r.events.is_empty() {
            // A progress response: everything at or below `rev` has been delivered.
            assert!(
                rev >= last_progress,
                "progress went back from {last_progress} to {rev}"
            );
            assert!(
                rev >= last_event,
                "progress at {rev} after an event at {last_event}"
            );
            last_progress = rev;
            progress += 1;
            continue;
        }
        assert_eq!(Some(r.watch_id), watch_id, "events for another watch");
        for e in &r.events {
            let mr = e.kv.as_ref().map_or(0, |k| k.mod_revision);
            assert!(
                mr > last_progress,
                "event at revision {mr} arrived after a progress response for revision {last_progress}"
            );
            assert!(mr > last_event, "event at {mr} after one at {last_event}");
            last_event = mr;
            events += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in writers {
        w.await.expect("writer");
    }
    asker.abort();
    (events, progress)
}

fn check(write_url: &str, watch_url: &str, what: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (events, progress) = rt.block_on(run(write_url.to_string(), watch_url.to_string()));
    eprintln!("{what}: {events} events, {progress} progress responses, none out of order");
    assert!(events > 200, "{what}: only {events} events");
    assert!(progress > 20, "{what}: only {progress} progress responses");
}

#[test]
fn progress_never_overtakes_an_event_on_one_member() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = Cluster::start(OURS, dir.path(), 1, false, &[]);
    let url = c.nodes[0].client_url.clone();
    check(&url, &url, "one member");
}

#[test]
fn progress_never_overtakes_an_event_on_a_follower() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = Cluster::start(OURS, dir.path(), 3, false, FAST);
    let leader = c.leader(Duration::from_secs(10));
    let follower = (leader + 1) % 3;
    check(
        &c.nodes[leader].client_url,
        &c.nodes[follower].client_url,
        "follower",
    );
}
