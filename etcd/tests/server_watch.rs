// Watch edge cases against our server and the real etcd 3.4 alike: one revision with more
// events than a read round holds, and the fragment option splitting large responses.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "watch_support/mod.rs"]
mod watch_support;

use proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RequestOp, TxnRequest, WatchCreateRequest, WatchRequest,
    kv_client::KvClient, request_op,
};
use support::RealEtcd;
use watch_support::{next_response, open_watch, open_watch_on};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

/// The fan-out test compares delivery latency between two runs, so it runs with none of this
/// file's other tests beside it (they share the machine; they may run together).
static ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    ALONE.read().unwrap_or_else(|e| e.into_inner())
}

/// The next response on `stream` that carries events (skipping creations and progress),
/// within 10 s.
async fn next_with_events(
    stream: &mut tonic::Streaming<proto::etcdserverpb::WatchResponse>,
) -> proto::etcdserverpb::WatchResponse {
    loop {
        let r = next_response(stream, std::time::Duration::from_secs(10)).await;
        if !r.events.is_empty() {
            return r;
        }
    }
}

/// Puts `n` keys `<prefix><i>` with `value_len`-byte values, 100 per txn.
async fn fill(url: &str, prefix: &str, n: usize, value_len: usize) {
    let mut kv = KvClient::connect(url.to_string()).await.expect("connect");
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops = chunk
            .iter()
            .map(|i| RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: format!("{prefix}{i:05}").into_bytes(),
                    value: vec![b'v'; value_len],
                    ..Default::default()
                })),
            })
            .collect();
        kv.txn(TxnRequest {
            success: ops,
            ..Default::default()
        })
        .await
        .expect("txn");
    }
}

/// Deletes everything under `prefix` in one revision; returns it.
async fn delete_all(url: &str, prefix: &str) -> i64 {
    let mut kv = KvClient::connect(url.to_string()).await.expect("connect");
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let r = kv
        .delete_range(DeleteRangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: end,
            ..Default::default()
        })
        .await
        .expect("delete")
        .into_inner();
    r.header.expect("header").revision
}

/// Watches `prefix` from `rev` until `want` events arrived: (events per response, fragment
/// flags, revisions seen).
async fn watch_from(
    url: &str,
    prefix: &str,
    rev: i64,
    fragment: bool,
    want: usize,
) -> (Vec<usize>, Vec<bool>, Vec<i64>) {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let (mut stream, tx) = open_watch(
        url,
        vec![WatchCreateRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: end,
            start_revision: rev,
            fragment,
            ..Default::default()
        }],
    )
    .await;
    let (mut sizes, mut flags, mut revs) = (Vec::new(), Vec::new(), Vec::new());
    let mut got = 0;
    while got < want {
        let r = next_with_events(&mut stream).await;
        got += r.events.len();
        sizes.push(r.events.len());
        flags.push(r.fragment);
        revs.extend(
            r.events
                .iter()
                .filter_map(|e| e.kv.as_ref().map(|k| k.mod_revision)),
        );
    }
    drop(tx);
    (sizes, flags, revs)
}

fn both(
    extra: &[&str],
    f: impl Fn(&str) -> (Vec<usize>, Vec<bool>, Vec<i64>),
) -> Vec<(Vec<usize>, Vec<bool>, Vec<i64>)> {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut out = Vec::new();
    for (name, bin) in [("real", "etcd"), ("ours", OURS)] {
        let s = RealEtcd::start_bin(bin, &tmp.path().join(name), "w", extra);
        out.push(f(&s.client_url));
    }
    out
}

/// (type, key, value, prev value) of each event a watch on `key` with prev_kv gets: first
/// from `start` (history), then `live_puts` more values put after it caught up.
async fn prev_kv_events(
    url: &str,
    key: &[u8],
    start: i64,
    want: usize,
    live_puts: &[&[u8]],
) -> Vec<(i32, Vec<u8>, Option<Vec<u8>>)> {
    let mut kv = KvClient::connect(url.to_string()).await.expect("connect");
    let (mut stream, tx) = open_watch(
        url,
        vec![WatchCreateRequest {
            key: key.to_vec(),
            start_revision: start,
            prev_kv: true,
            ..Default::default()
        }],
    )
    .await;
    let mut out = Vec::new();
    let mut live_sent = false;
    while out.len() < want + live_puts.len() {
        if out.len() == want && !live_sent {
            for v in live_puts {
                kv.put(PutRequest {
                    key: key.to_vec(),
                    value: v.to_vec(),
                    ..Default::default()
                })
                .await
                .expect("put");
            }
            live_sent = true;
        }
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
            .await
            .expect("watch response in time")
            .expect("watch stream")
            .expect("a response");
        for e in r.events {
            let kv = e.kv.unwrap_or_default();
            out.push((e.r#type, kv.value, e.prev_kv.map(|p| p.value)));
        }
    }
    drop(tx);
    out
}

/// Our writes read the value they replace only when someone needs it (issue 19), so the
/// prev_kv of writes made before a watcher existed comes from the history; it must be what
/// etcd sends.
#[test]
fn prev_kv_of_writes_made_before_the_watcher_is_etcds() {
    let _shared = beside_others();
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut out = Vec::new();
    for (name, bin) in [("real", "etcd"), ("ours", OURS)] {
        let s = RealEtcd::start_bin(bin, &tmp.path().join(name), "w", &[]);
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        out.push(rt.block_on(async {
            let url = s.client_url.as_str();
            let mut kv = KvClient::connect(url.to_string()).await.expect("connect");
            let put = |v: &str| PutRequest {
                key: b"pk".to_vec(),
                value: v.as_bytes().to_vec(),
                ..Default::default()
            };
            let first = kv.put(put("v1")).await.expect("put").into_inner();
            let start = first.header.expect("header").revision;
            kv.put(put("v2")).await.expect("put");
            kv.delete_range(DeleteRangeRequest {
                key: b"pk".to_vec(),
                ..Default::default()
            })
            .await
            .expect("delete");
            kv.put(put("v3")).await.expect("put");
            kv.put(put("v4")).await.expect("put");
            prev_kv_events(url, b"pk", start, 5, &[b"v5", b"v6"]).await
        }));
    }
    let v = |s: &str| s.as_bytes().to_vec();
    let (put, del) = (0, 1);
    let want = vec![
        (put, v("v1"), None),
        (put, v("v2"), Some(v("v1"))),
        (del, Vec::new(), Some(v("v2"))),
        (put, v("v3"), None),
        (put, v("v4"), Some(v("v3"))),
        (put, v("v5"), Some(v("v4"))),
        (put, v("v6"), Some(v("v5"))),
    ];
    assert_eq!(out[0], want, "etcd 3.4");
    assert_eq!(out[1], want, "ours");
}

#[test]
fn a_revision_with_thousands_of_events_arrives_whole() {
    let _shared = beside_others();
    let results = both(&[], |url| {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            fill(url, "big/", 2500, 10).await;
            let rev = delete_all(url, "big/").await;
            watch_from(url, "big/", rev, false, 2500).await
        })
    });
    for (sizes, flags, revs) in &results {
        assert_eq!(revs.len(), 2500);
        assert!(
            revs.iter().all(|r| *r == revs[0]),
            "events of one revision split across revisions"
        );
        assert_eq!(sizes, &vec![2500], "one response for one revision");
        assert!(flags.iter().all(|f| !f));
    }
}

#[test]
fn fragment_splits_large_responses_like_etcd() {
    let _shared = beside_others();
    // 2000 puts of 800-byte values in 20 txns: a ~1.7 MiB catch-up, over etcd's fragment
    // limit of --max-request-bytes (100000 here) plus 512 KiB of gRPC overhead.
    let results = both(&["--max-request-bytes", "100000"], |url| {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            fill(url, "frag/", 2000, 800).await;
            let whole = watch_from(url, "frag/", 2, false, 2000).await;
            assert!(whole.1.iter().all(|f| !f), "fragments without the option");
            watch_from(url, "frag/", 2, true, 2000).await
        })
    });
    for (i, (sizes, flags, _)) in results.iter().enumerate() {
        assert!(sizes.len() > 1, "server {i}: not fragmented: {sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 2000);
        assert!(flags.iter().any(|f| *f), "server {i}: {flags:?}");
        assert!(
            !flags[flags.len() - 1],
            "server {i}: the last fragment is marked"
        );
    }
}

/// Opens a watch on `s/` whose responses nobody reads (yet); returns its stream, the
/// request sender keeping it open, and the first revision it will report.
async fn idle_watch(
    url: &str,
) -> (
    tonic::Streaming<proto::etcdserverpb::WatchResponse>,
    tokio::sync::mpsc::Sender<WatchRequest>,
    i64,
) {
    let (mut stream, tx) = open_watch(
        url,
        vec![WatchCreateRequest {
            key: b"s/".to_vec(),
            range_end: b"s0".to_vec(),
            ..Default::default()
        }],
    )
    .await;
    let created = stream.message().await.expect("stream").expect("created");
    assert!(created.created);
    let start = created.header.expect("header").revision + 1;
    (stream, tx, start)
}

/// A synced watcher whose client reads late still gets one response per revision, each
/// with that revision in its header, as etcd sends them (a gateway client prints each
/// response as a line, so merging two revisions was visible there).
#[test]
fn a_synced_watcher_gets_one_response_per_revision() {
    let _shared = beside_others();
    let results = both(&[], |url| {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let (mut stream, tx, start) = idle_watch(url).await;
            let mut kv = KvClient::connect(url.to_string()).await.expect("connect");
            // 12 revisions of 600 KB: more than the stream buffers before it waits for the
            // client, less than a watcher may hold before etcd or we treat it as behind.
            for _ in 0..12 {
                kv.put(PutRequest {
                    key: b"s/k".to_vec(),
                    value: vec![b'v'; 600_000],
                    ..Default::default()
                })
                .await
                .expect("put");
            }
            let (mut sizes, mut revs) = (Vec::new(), Vec::new());
            while revs.len() < 12 {
                let r = next_with_events(&mut stream).await;
                let header_rev = r.header.expect("header").revision;
                for e in &r.events {
                    let rev = e.kv.as_ref().expect("kv").mod_revision;
                    assert_eq!(
                        rev, header_rev,
                        "an event of another revision than the header's"
                    );
                    revs.push(rev);
                }
                sizes.push(r.events.len());
            }
            drop(tx);
            assert_eq!(revs, (start..start + 12).collect::<Vec<_>>());
            (sizes, Vec::new(), revs)
        })
    });
    for (sizes, _, _) in &results {
        assert_eq!(sizes, &vec![1; 12], "one response per revision");
    }
}

#[test]
fn a_watcher_that_stops_reading_blocks_no_one_and_catches_up_later() {
    let _shared = beside_others();
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // What 40 MiB of writes cost the server by themselves (raft log, buffers, allocator).
    let baseline = {
        let s = RealEtcd::start_bin(OURS, &tmp.path().join("baseline"), "w", &[]);
        let pid = s.child.as_ref().expect("child").id();
        let before = support::rss_anon_bytes(pid);
        rt.block_on(fill(&s.client_url, "s/", 5000, 8192));
        support::rss_anon_bytes(pid).saturating_sub(before) >> 20
    };
    let s = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "w", &[]);
    let url = s.client_url.clone();
    let pid = s.child.as_ref().expect("child").id();
    rt.block_on(async {
        // Ten streams that stop reading while the same 40 MiB of events go by: kept whole,
        // they would hold 400 MiB.
        let mut idle = Vec::new();
        for _ in 0..10 {
            idle.push(idle_watch(&url).await);
        }
        let start_rev = idle[0].2;
        let before = support::rss_anon_bytes(pid);
        // A reader that keeps up gets everything meanwhile.
        let fast = tokio::spawn({
            let url = url.clone();
            async move { watch_from(&url, "s/", start_rev, false, 5000).await }
        });
        fill(&url, "s/", 5000, 8192).await;
        let (_, _, revs) = tokio::time::timeout(std::time::Duration::from_secs(30), fast)
            .await
            .expect("the fast watcher was held up")
            .expect("fast watcher");
        assert_eq!(revs.len(), 5000);
        let grown = support::rss_anon_bytes(pid).saturating_sub(before) >> 20;
        assert!(
            grown < baseline + 250,
            "memory grew by {grown} MiB with idle watchers, {baseline} MiB without"
        );
        // Once it reads again, an idle watcher gets every event in order, from history.
        let (mut slow, _tx, _) = idle.remove(0);
        let mut got = Vec::new();
        while got.len() < 5000 {
            let r = tokio::time::timeout(std::time::Duration::from_secs(10), slow.message())
                .await
                .expect("slow watcher resumes")
                .expect("stream")
                .expect("response");
            got.extend(
                r.events
                    .iter()
                    .filter_map(|e| e.kv.as_ref().map(|k| k.key.clone())),
            );
        }
        let want: Vec<Vec<u8>> = (0..5000)
            .map(|i| format!("s/{i:05}").into_bytes())
            .collect();
        assert_eq!(got, want);
    });
}

/// One run of the fan-out workload: `streams` streams of 10 watchers each, watcher j of
/// stream s on key `f/<(s*10+j) % 100>`; 8000 puts (80 per key) from 32 clients without
/// pauses. With `stalled`, one more stream watches every key and never reads. Checks that
/// every watcher gets exactly its key's 80 events, in revision order, and returns the p99 of
/// put-to-event delivery in milliseconds.
async fn fan_out_run(url: &str, streams: usize, stalled: bool) -> f64 {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    const KEYS: usize = 100;
    const PUTS: usize = 8000;
    let key = |k: usize| format!("f/{k:03}").into_bytes();
    // When each put was sent, by its value (unique per put).
    let sent: Arc<Mutex<HashMap<Vec<u8>, Instant>>> = Arc::default();
    let mut chans = Vec::new();
    for _ in 0..4 {
        chans.push(
            tonic::transport::Endpoint::from_shared(url.to_string())
                .expect("url")
                .connect()
                .await
                .expect("connect"),
        );
    }
    let mut _stalled_stream = None;
    if stalled {
        let creates = (0..KEYS)
            .map(|k| WatchCreateRequest {
                key: key(k),
                prev_kv: true,
                ..Default::default()
            })
            .collect();
        let (mut stream, tx) = open_watch_on(chans[0].clone(), creates).await;
        for _ in 0..KEYS {
            assert!(
                stream
                    .message()
                    .await
                    .expect("stream")
                    .expect("created")
                    .created
            );
        }
        // Kept open, never read again.
        _stalled_stream = Some((stream, tx));
    }
    let mut readers = Vec::new();
    for s in 0..streams {
        let my_keys: Vec<Vec<u8>> = (0..10).map(|j| key((s * 10 + j) % KEYS)).collect();
        let creates = my_keys
            .iter()
            .map(|k| WatchCreateRequest {
                key: k.clone(),
                ..Default::default()
            })
            .collect();
        let (mut stream, tx) = open_watch_on(chans[s % 4].clone(), creates).await;
        let mut ids = HashMap::new();
        for k in &my_keys {
            let r = stream.message().await.expect("stream").expect("created");
            assert!(r.created);
            ids.insert(r.watch_id, k.clone());
        }
        let sent = sent.clone();
        readers.push(tokio::spawn(async move {
            let _tx = tx;
            let want = 10 * PUTS / KEYS;
            let mut got: HashMap<i64, Vec<i64>> = HashMap::new();
            let mut lat = Vec::new();
            let mut n = 0;
            while n < want {
                let r = tokio::time::timeout(Duration::from_secs(60), stream.message())
                    .await
                    .expect("events in time")
                    .expect("stream")
                    .expect("response");
                let now = Instant::now();
                for e in &r.events {
                    let kv = e.kv.as_ref().expect("kv");
                    assert_eq!(&kv.key, &ids[&r.watch_id], "an event of another key");
                    got.entry(r.watch_id).or_default().push(kv.mod_revision);
                    if let Some(t) = sent.lock().unwrap().get(&kv.value) {
                        lat.push((now - *t).as_secs_f64() * 1000.0);
                    }
                    n += 1;
                }
            }
            for (id, revs) in &got {
                assert_eq!(
                    revs.len(),
                    PUTS / KEYS,
                    "watcher {id}: events lost or repeated"
                );
                assert!(
                    revs.windows(2).all(|w| w[0] < w[1]),
                    "watcher {id}: events out of order"
                );
            }
            lat
        }));
    }
    // 32 writers, 250 puts each, no pauses.
    let mut writers = Vec::new();
    for w in 0..32 {
        let mut kv = KvClient::new(chans[w % 4].clone());
        let sent = sent.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..PUTS / 32 {
                let mut value = format!("{w}-{i}-").into_bytes();
                value.resize(256, b'v');
                sent.lock().unwrap().insert(value.clone(), Instant::now());
                kv.put(PutRequest {
                    key: key((w * (PUTS / 32) + i) % KEYS),
                    value,
                    ..Default::default()
                })
                .await
                .expect("put");
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    let mut lat = Vec::new();
    for r in readers {
        lat.extend(r.await.expect("every watcher got its events"));
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    lat[(lat.len() - 1) * 99 / 100]
}

#[test]
fn a_thousand_watchers_get_every_event_and_a_stalled_one_delays_no_one() {
    let _alone = ALONE.write().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let s = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "w", &[]);
    let url = s.client_url.clone();
    rt.block_on(async {
        let calm = fan_out_run(&url, 100, false).await;
        let with_stalled = fan_out_run(&url, 100, true).await;
        eprintln!("delivery p99: {calm:.1} ms, {with_stalled:.1} ms with a stalled watcher");
        // A stalled stream must cost the others nothing: within 2× of the run without it
        // (a floor of 50 ms keeps scheduler noise on tiny latencies from deciding).
        assert!(
            with_stalled <= (2.0 * calm).max(50.0),
            "delivery p99 {with_stalled:.1} ms with a stalled watcher, {calm:.1} ms without"
        );
    });
}
