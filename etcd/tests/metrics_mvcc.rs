// /metrics against etcd 3.4's: the same etcdctl commands on a member of each give the same mvcc
// operation counters, key, watch, lease and maintenance series; gRPC byte counts are messages' sizes.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "http_client/mod.rs"]
mod http_client;

use cluster_support::{Cluster, Node};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const ETCD: &str = "etcd";
const COUNTERS: &[&str] = &[
    "etcd_mvcc_range_total",
    "etcd_mvcc_put_total",
    "etcd_mvcc_delete_total",
    "etcd_mvcc_txn_total",
    "etcd_debugging_mvcc_range_total",
    "etcd_debugging_mvcc_put_total",
    "etcd_debugging_mvcc_delete_total",
    "etcd_debugging_mvcc_txn_total",
    "etcd_debugging_mvcc_total_put_size_in_bytes",
];

fn txn(m: &Node, input: &str) {
    // A blank line ends each of the three parts, as etcdctl reads them.
    let out = m.etcdctl_with_input(&["txn"], format!("{input}\n").as_bytes());
    assert!(out.status.success(), "txn {input:?}");
}

fn counters(m: &Node) -> Vec<(String, String)> {
    let body = http_client::get(&m.client_url, "/metrics").body;
    COUNTERS
        .iter()
        .map(|name| {
            let v = body
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing from /metrics"));
            (name.to_string(), v.to_string())
        })
        .collect()
}

fn workload(m: &Node) {
    m.etcdctl_ok(&["put", "a", "1"]);
    txn(m, "\nput b 2\n\n");
    m.etcdctl_ok(&["get", "a"]);
    m.etcdctl_ok(&["del", "a"]);
    txn(m, "\nput x 1\nput y 2\n\n");
    txn(m, "\nget x\nput z 3\n\n");
    m.etcdctl_ok(&["del", "missing"]);
    m.etcdctl_ok(&["get", "", "--prefix"]);
    // A read-only txn whose compare fails: the compare and the failure branch's get.
    txn(m, "value(\"x\") = \"2\"\n\nget y\n\n");
    txn(m, "value(\"x\") = \"1\"\n\nget y\nget z\n\n");
    m.etcdctl_ok(&["put", "x", "1"]);
    m.etcdctl_ok(&["get", "y", "--consistency=s"]);
}

#[test]
fn operation_counters_match_etcd() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut theirs = Cluster::start(ETCD, &dir.path().join("etcd"), 1, false, &[]);
    let mut ours = Cluster::start(OURS, &dir.path().join("ours"), 1, false, &[]);
    workload(&theirs.nodes[0]);
    workload(&ours.nodes[0]);
    let (want, got) = (counters(&theirs.nodes[0]), counters(&ours.nodes[0]));
    assert_eq!(got, want, "ours (left) vs etcd 3.4 (right)");
    assert!(
        want.iter().any(|(_, v)| v != "0"),
        "the workload counted nothing"
    );
    ours.nodes[0].stop();
    theirs.nodes[0].stop();
}

/// Every sample of a member's /metrics, by name with labels.
fn scrape(m: &Node) -> std::collections::BTreeMap<String, String> {
    http_client::get(&m.client_url, "/metrics")
        .body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sample(m: &Node, name: &str) -> String {
    scrape(m)
        .remove(name)
        .unwrap_or_else(|| panic!("{name} missing from the /metrics of {}", m.name))
}

/// Waits until `name` reads `want` (the series that follow a background watcher).
fn wait_sample(m: &Node, name: &str, want: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let got = sample(m, name);
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} on {} stays {got}, want {want}",
            m.name
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Keys, a watch with two events, a lease granted, renewed and revoked, one that expires, a
/// HashKV, a defrag and a snapshot; the series read while the watch is open.
fn second_workload(m: &Node, dir: &std::path::Path) -> Vec<(String, String)> {
    for args in [
        &["put", "a", "1"][..],
        &["put", "b", "2"],
        &["put", "a", "3"],
        &["del", "b"],
        &["put", "c", "4"],
    ] {
        m.etcdctl_ok(args);
    }
    let mut watch = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &m.client_url, "watch", "w", "--prefix"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run etcdctl watch");
    wait_sample(m, "etcd_debugging_mvcc_watcher_total", "1");
    m.etcdctl_ok(&["put", "w1", "x"]);
    m.etcdctl_ok(&["put", "w2", "y"]);
    wait_sample(m, "etcd_debugging_mvcc_events_total", "2");
    let lease = m.etcdctl_ok(&["lease", "grant", "100"]);
    let id = lease
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    m.etcdctl_ok(&["lease", "keep-alive", "--once", &id]);
    m.etcdctl_ok(&["lease", "revoke", &id]);
    let short = m.etcdctl_ok(&["lease", "grant", "1"]);
    let short = short
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    m.etcdctl_ok(&["put", "--lease", &short, "leased", "v"]);
    m.etcdctl_ok(&["endpoint", "hashkv"]);
    m.etcdctl_ok(&["defrag"]);
    let snap = dir.join(format!("{}.db", m.name));
    m.etcdctl_ok(&["snapshot", "save", &snap.display().to_string()]);
    // The short lease expires (its TTL is raised to the minimum, 2 s on both) and takes
    // "leased" with it.
    wait_sample(m, "etcd_debugging_server_lease_expired_total", "1");
    let mut out: Vec<(String, String)> = [
        "etcd_debugging_mvcc_keys_total",
        "etcd_debugging_mvcc_watch_stream_total",
        "etcd_debugging_mvcc_watcher_total",
        "etcd_debugging_mvcc_slow_watcher_total",
        "etcd_debugging_mvcc_events_total",
        "etcd_debugging_mvcc_pending_events_total",
        "etcd_debugging_lease_granted_total",
        "etcd_debugging_lease_renewed_total",
        "etcd_debugging_lease_revoked_total",
        "etcd_debugging_server_lease_expired_total",
        "etcd_debugging_lease_ttl_total_count",
        "etcd_debugging_lease_ttl_total_sum",
        "etcd_debugging_lease_ttl_total_bucket{le=\"2\"}",
        "etcd_debugging_lease_ttl_total_bucket{le=\"128\"}",
        "etcd_mvcc_hash_rev_duration_seconds_count",
        "etcd_disk_backend_defrag_duration_seconds_count",
        "etcd_disk_backend_snapshot_duration_seconds_count",
        "etcd_disk_defrag_inflight",
        "grpc_server_msg_received_total{grpc_method=\"Put\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"}",
        "grpc_server_msg_sent_total{grpc_method=\"Put\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"}",
        "grpc_server_msg_received_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"}",
        "grpc_server_msg_sent_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"}",
        "grpc_server_msg_received_total{grpc_method=\"Snapshot\",grpc_service=\"etcdserverpb.Maintenance\",grpc_type=\"server_stream\"}",
    ]
    .iter()
    .map(|n| (n.to_string(), sample(m, n)))
    .collect();
    let _ = watch.kill();
    let _ = watch.wait();
    wait_sample(m, "etcd_debugging_mvcc_watch_stream_total", "0");
    out.push((
        "watchers after the watch ended".into(),
        sample(m, "etcd_debugging_mvcc_watcher_total"),
    ));
    out
}

#[test]
fn key_watch_lease_and_maintenance_series_match_etcd() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut theirs = Cluster::start(ETCD, &dir.path().join("etcd"), 1, false, &[]);
    let mut ours = Cluster::start(OURS, &dir.path().join("ours"), 1, false, &[]);
    let want = second_workload(&theirs.nodes[0], dir.path());
    let got = second_workload(&ours.nodes[0], dir.path());
    assert_eq!(got, want, "ours (left) vs etcd 3.4 (right)");
    ours.nodes[0].stop();
    theirs.nodes[0].stop();
}

/// etcd counts each gRPC message's protobuf size, not the framing: a Put adds its request's
/// size to the received bytes and its response's to the sent bytes; a watch stream adds each
/// of its messages. Checked on etcd 3.4 and on ours alike.
#[test]
fn grpc_byte_counters_are_the_messages_sizes() {
    use prost::Message;
    use proto::etcdserverpb::{
        PutRequest, WatchCreateRequest, WatchRequest, kv_client::KvClient,
        watch_client::WatchClient, watch_request::RequestUnion,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for (bin, name) in [(ETCD, "etcd"), (OURS, "ours")] {
        let mut c = Cluster::start(bin, &dir.path().join(name), 1, false, &[]);
        let m = &c.nodes[0];
        let bytes = |m: &Node| -> (u64, u64) {
            let s = scrape(m);
            let get = |n: &str| {
                s.get(n)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or_else(|| panic!("{n} missing on {name}")) as u64
            };
            (
                get("etcd_network_client_grpc_received_bytes_total"),
                get("etcd_network_client_grpc_sent_bytes_total"),
            )
        };
        let url = m.client_url.clone();
        let (mut kv, mut wc) = rt.block_on(async {
            (
                KvClient::connect(url.clone()).await.expect("connect"),
                WatchClient::connect(url.clone()).await.expect("connect"),
            )
        });
        let before = bytes(m);
        let req = PutRequest {
            key: b"sized".to_vec(),
            value: vec![b'v'; 300],
            ..Default::default()
        };
        let resp = rt.block_on(kv.put(req.clone())).expect("put").into_inner();
        let after = bytes(m);
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (req.encoded_len() as u64, resp.encoded_len() as u64),
            "{name}: (received, sent) bytes of one put"
        );
        // A watch: the create request, then its created answer and one event.
        let before = after;
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: b"sized".to_vec(),
                ..Default::default()
            })),
        };
        let sent = rt.block_on(async {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tx.send(create.clone()).await.expect("queue the create");
            let mut stream = wc
                .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .expect("watch")
                .into_inner();
            let created = stream.message().await.expect("created").expect("created");
            kv.put(PutRequest {
                key: b"sized".to_vec(),
                value: b"again".to_vec(),
                ..Default::default()
            })
            .await
            .expect("put");
            let event = stream.message().await.expect("event").expect("event");
            drop(tx);
            (created.encoded_len() + event.encoded_len()) as u64
        });
        let after = bytes(m);
        let put_again = PutRequest {
            key: b"sized".to_vec(),
            value: b"again".to_vec(),
            ..Default::default()
        };
        let put_resp_len = resp.encoded_len() as u64;
        assert_eq!(
            after.0 - before.0,
            (create.encoded_len() + put_again.encoded_len()) as u64,
            "{name}: received bytes of a watch create and a put"
        );
        // The second put's answer has the same shape (and size) as the first's.
        assert_eq!(
            after.1 - before.1,
            sent + put_resp_len,
            "{name}: sent bytes of a watch's two answers and a put's"
        );
        c.nodes[0].stop();
    }
}
