// Watch progress requests under load: a progress response for revision R never overtakes an
// event at or below R (kine#731's failure), on one member, on a follower of a cluster, and with
// watchers catching up from history meanwhile; a request while a watcher still catches up is
// answered once it has, as etcd 3.5.16 answers.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "watch_support/mod.rs"]
mod watch_support;

use watch_support::{each_response_for, open_watch};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cluster_support::Cluster;
use proto::etcdserverpb::{
    PutRequest, RequestOp, TxnRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest,
    kv_client::KvClient, request_op, watch_client::WatchClient, watch_request,
};
use tokio_stream::StreamExt;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const FAST: &[&str] = &["--heartbeat-interval", "50", "--election-timeout", "500"];
const WRITERS: usize = 4;
const RUN: Duration = Duration::from_secs(4);

/// WRITERS clients putting `key(writer, n)` for n = 1, 2, ... until `stop`.
fn spawn_writers(
    url: &str,
    key: fn(usize, u64) -> String,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WRITERS)
        .map(|w| {
            let (url, stop) = (url.to_string(), stop.clone());
            tokio::spawn(async move {
                let mut kv = KvClient::connect(url).await.expect("connect writer");
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    kv.put(PutRequest {
                        key: key(w, n).into_bytes(),
                        value: b"v".to_vec(),
                        ..Default::default()
                    })
                    .await
                    .expect("put");
                }
            })
        })
        .collect()
}

/// Stops the writers (each finishes its put in flight) and the task asking for progress.
async fn stop_writers(
    stop: &AtomicBool,
    writers: Vec<tokio::task::JoinHandle<()>>,
    asker: tokio::task::JoinHandle<()>,
) {
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.expect("writer");
    }
    asker.abort();
}

/// Writes from 4 clients while a prefix watch asks for progress every 10 ms; returns
/// (events, progress responses) after checking every event comes after the progress
/// responses before it, and every event arrives in order, once.
async fn run(write_url: String, watch_url: String) -> (usize, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&write_url, |w, n| format!("p/{w}-{n}"), &stop);
    let create = WatchCreateRequest {
        key: b"p/".to_vec(),
        range_end: b"p0".to_vec(),
        ..Default::default()
    };
    let (mut stream, tx) = open_watch(&watch_url, vec![create]).await;
    let asker = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if tx.send(progress_request()).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let (mut events, mut progress) = (0usize, 0usize);
    let (mut last_progress, mut last_event) = (0i64, 0i64);
    let mut watch_id = None;
    each_response_for(&mut stream, RUN, |r| {
        if r.created {
            watch_id = Some(r.watch_id);
            return;
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
            return;
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
    })
    .await;
    stop_writers(&stop, writers, asker).await;
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

/// Watchers created one after another on one stream from a revision 200 back, each catching
/// up from history up to the store's revision (which the server's dispatcher may not have
/// reached yet), while 4 clients write and progress is asked every 10 ms. Returns (events,
/// progress responses) after checking that no progress response names less than an event
/// the stream delivered before it, and that each watcher's events come in order, once.
async fn run_catching_up(url: String) -> (usize, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&url, |w, n| format!("h/{w}-{}", n % 50), &stop);
    let (mut stream, tx) = open_watch(&url, Vec::new()).await;
    let asker = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut kv = KvClient::connect(url).await.expect("connect asker");
            let mut turn = 0u32;
            while !stop.load(Ordering::SeqCst) {
                if turn.is_multiple_of(10) {
                    let rev = kv
                        .range(proto::etcdserverpb::RangeRequest {
                            key: b"h/".to_vec(),
                            limit: 1,
                            ..Default::default()
                        })
                        .await
                        .expect("range")
                        .into_inner()
                        .header
                        .map_or(1, |h| h.revision);
                    let create = WatchRequest {
                        request_union: Some(watch_request::RequestUnion::CreateRequest(
                            WatchCreateRequest {
                                key: b"h/".to_vec(),
                                range_end: b"h0".to_vec(),
                                start_revision: (rev - 200).max(1),
                                ..Default::default()
                            },
                        )),
                    };
                    if tx.send(create).await.is_err() {
                        return;
                    }
                }
                if tx.send(progress_request()).await.is_err() {
                    return;
                }
                turn += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let (mut events, mut progress) = (0usize, 0usize);
    let mut highest_event = 0i64;
    let mut last_of: std::collections::HashMap<i64, i64> = Default::default();
    each_response_for(&mut stream, RUN, |r| {
        if r.created {
            last_of.insert(r.watch_id, 0);
            return;
        }
        let rev = r.header.as_ref().map_or(0, |h| h.revision);
        if r.events.is_empty() {
            // Everything at or below `rev` of every watcher on the stream has been delivered.
            assert!(
                rev >= highest_event,
                "progress at {rev} after an event at {highest_event}"
            );
            progress += 1;
            return;
        }
        let last = last_of
            .get_mut(&r.watch_id)
            .expect("events of a created watch");
        for e in &r.events {
            let mr = e.kv.as_ref().map_or(0, |k| k.mod_revision);
            assert!(
                mr > *last,
                "watch {}: event at {mr} after one at {last}",
                r.watch_id
            );
            *last = mr;
            highest_event = highest_event.max(mr);
            events += 1;
        }
    })
    .await;
    stop_writers(&stop, writers, asker).await;
    assert!(last_of.len() > 10, "only {} watches created", last_of.len());
    (events, progress)
}

#[test]
fn progress_never_overtakes_an_event_caught_up_from_history() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = Cluster::start(OURS, dir.path(), 1, false, &[]);
    let url = c.nodes[0].client_url.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (events, progress) = rt.block_on(run_catching_up(url));
    eprintln!("catching up: {events} events, {progress} progress responses, none out of order");
    assert!(events > 200, "only {events} events");
    assert!(progress > 20, "only {progress} progress responses");
}

/// Revisions of history (10 keys each) the watcher catches up on.
const HISTORY_REVS: usize = 300;

fn progress_request() -> WatchRequest {
    WatchRequest {
        request_union: Some(watch_request::RequestUnion::ProgressRequest(
            WatchProgressRequest {},
        )),
    }
}

/// A watch from revision 1 over the history, with two progress requests sent right behind
/// its create request (before it can have caught up); what the stream then delivers, in
/// order, as lines: runs of events as "events through R (n)", progress as "progress at R".
async fn progress_while_catching_up(url: String) -> Vec<String> {
    let mut kv = KvClient::connect(url.clone()).await.expect("connect");
    for r in 0..HISTORY_REVS {
        let ops = (0..10)
            .map(|k| RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: format!("c/{k}").into_bytes(),
                    value: format!("{r}").into_bytes(),
                    ..Default::default()
                })),
            })
            .collect();
        kv.txn(TxnRequest {
            success: ops,
            ..Default::default()
        })
        .await
        .expect("history");
    }
    let mut wc = WatchClient::connect(url).await.expect("connect watcher");
    let create = WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(
            WatchCreateRequest {
                key: b"c/".to_vec(),
                range_end: b"c0".to_vec(),
                start_revision: 1,
                ..Default::default()
            },
        )),
    };
    let requests = tokio_stream::iter([create, progress_request(), progress_request()]);
    let mut stream = wc
        .watch(requests.chain(tokio_stream::pending()))
        .await
        .expect("watch")
        .into_inner();
    let mut seen = Vec::new();
    record_until_quiet(&mut stream, &mut seen).await;
    // One more write: etcd 3.5 answers a progress request it deferred with the next events.
    kv.put(PutRequest {
        key: b"c/after".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    })
    .await
    .expect("put");
    seen.push("-- a put".to_string());
    record_until_quiet(&mut stream, &mut seen).await;
    seen
}

/// Appends what `stream` delivers to `seen` until nothing comes for a second: runs of events
/// as "events through R (n)", progress responses as "progress at R, watch id W".
async fn record_until_quiet(
    stream: &mut tonic::Streaming<proto::etcdserverpb::WatchResponse>,
    seen: &mut Vec<String>,
) {
    let (mut run, mut last) = (0usize, 0i64);
    while let Ok(r) = tokio::time::timeout(Duration::from_secs(1), stream.message()).await {
        let r = r.expect("watch stream").expect("a response");
        let rev = r.header.as_ref().map_or(0, |h| h.revision);
        if r.created {
            seen.push("created".to_string());
        } else if r.events.is_empty() {
            if run > 0 {
                seen.push(format!("events through {last} ({run})"));
                run = 0;
            }
            seen.push(format!("progress at {rev}, watch id {}", r.watch_id));
        } else {
            run += r.events.len();
            last = r
                .events
                .iter()
                .filter_map(|e| e.kv.as_ref())
                .map(|k| k.mod_revision)
                .max()
                .unwrap_or(last);
        }
    }
    if run > 0 {
        seen.push(format!("events through {last} ({run})"));
    }
}

/// Progress requests sent while a watcher catches up on 300 revisions of history: ours answers
/// each once the watcher has caught up, with the revision of the last event sent. etcd 3.5.16
/// defers them and then answers none, not even after the next event (the class of etcd#17507,
/// "no response until there is an event"): its deferral is what etcd means, so ours answers;
/// the events and their order must be etcd's, and no answer may come before them.
#[test]
fn a_progress_request_waits_for_a_watcher_that_catches_up() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut seen = Vec::new();
    for (name, bin) in [("etcd 3.5", support::etcd35()), ("ours", OURS.to_string())] {
        let m = support::RealEtcd::start_bin(&bin, &dir.path().join(name), "m", &[]);
        seen.push(rt.block_on(progress_while_catching_up(m.client_url.clone())));
    }
    let last = HISTORY_REVS + 1;
    let history = format!("events through {last} ({})", HISTORY_REVS * 10);
    for (name, s) in ["etcd 3.5.16", "ours"].iter().zip(&seen) {
        let events_at = s.iter().position(|l| *l == history);
        let first_progress = s.iter().position(|l| l.starts_with("progress"));
        assert!(
            events_at.is_some() && first_progress.is_none_or(|p| Some(p) > events_at),
            "{name}: a progress answer before the history's events: {s:?}"
        );
    }
    let events_only = |s: &[String]| -> Vec<String> {
        s.iter()
            .filter(|l| !l.starts_with("progress"))
            .cloned()
            .collect()
    };
    assert_eq!(
        events_only(&seen[1]),
        events_only(&seen[0]),
        "events: ours, then etcd 3.5.16"
    );
    assert_eq!(
        seen[1],
        [
            "created".to_string(),
            history.clone(),
            format!("progress at {last}, watch id -1"),
            format!("progress at {last}, watch id -1"),
            "-- a put".to_string(),
            format!("events through {} (1)", last + 1),
        ],
        "ours"
    );
}
