// The HTTP side of the client port against the real etcd 3.4: /health, /version, /metrics (the
// exposition format parsed, counters moving after requests), the metrics listener, and the
// grpc-gateway JSON API (put/range/txn/deleterange/compaction/lease/watch and its errors)
// answering the same calls with the same JSON, IDs aside.

mod http_client;
mod probes;
#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use http_client::{get, post, request};
use probes::{assert_probes_answer_as_etcd_3_5, assert_probes_match};
use serde_json::Value;
use support::{RealEtcd, free_port};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

/// One parsed sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses the Prometheus text format strictly: every line is a HELP/TYPE comment or a sample
/// of a family announced before it; returns the samples and each family's type.
fn parse_exposition(text: &str) -> (Vec<Sample>, BTreeMap<String, String>) {
    let mut types = BTreeMap::new();
    let mut helps = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has a name and text");
            assert!(!help.is_empty(), "empty HELP for {name}");
            helps.insert(name.to_string(), help.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, typ) = rest.split_once(' ').expect("TYPE has a name and type");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&typ),
                "bad TYPE {typ}"
            );
            assert!(helps.contains_key(name), "TYPE before HELP for {name}");
            types.insert(name.to_string(), typ.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line:?}");
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => {
                let l = l.strip_suffix('}').expect("labels end with }");
                let mut m = BTreeMap::new();
                for pair in l.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label is k=\"v\"");
                    m.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                (n.to_string(), m)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s).filter(|f| {
                    types
                        .get(*f)
                        .is_some_and(|t| t == "histogram" || t == "summary")
                })
            })
            .unwrap_or(&name)
            .to_string();
        assert!(
            types.contains_key(&family),
            "sample {name} without a TYPE line"
        );
        samples.push((name, labels, value));
    }
    (samples, types)
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels.len() == l.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
}

fn scrape(url: &str) -> (Vec<Sample>, BTreeMap<String, String>) {
    let r = get(url, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse_exposition(&r.body)
}

#[test]
fn health_version_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_url = format!("http://127.0.0.1:{}", free_port());
    let ours = RealEtcd::start_bin(
        OURS,
        &dir.path().join("ours"),
        "ours",
        &["--listen-metrics-urls", &metrics_url],
    );
    let real = RealEtcd::start(&dir.path().join("real"), "real");
    let url = &ours.client_url;

    // The line test-cluster tools wait for, once the client port serves (zap JSON, as etcd
    // 3.4 with --logger=zap prints it).
    let log = std::fs::read_to_string(dir.path().join("ours.log")).unwrap();
    let ready = log
        .lines()
        .find(|l| l.contains("ready to serve client requests"))
        .unwrap_or_else(|| panic!("no ready line in {log}"));
    let ready: Value = serde_json::from_str(ready).unwrap();
    assert_eq!(
        (&ready["level"], &ready["msg"]),
        (
            &Value::from("info"),
            &Value::from("ready to serve client requests")
        )
    );

    // /health: the same status, body and content type as etcd 3.4.
    for path in ["/health", "/health?serializable=true"] {
        let a = get(url, path);
        let b = get(&real.client_url, path);
        assert_eq!((a.status, &a.body), (b.status, &b.body), "{path}");
        assert_eq!(a.body, r#"{"health":"true"}"#);
        assert_eq!(a.header("content-type"), b.header("content-type"));
        assert_eq!(
            a.header("access-control-allow-origin"),
            b.header("access-control-allow-origin")
        );
    }
    // /version: etcd's two keys.
    let v: Value = serde_json::from_str(&get(url, "/version").body).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["etcdserver", "etcdcluster"]);
    assert_eq!(v["etcdcluster"], "3.5.0");
    // etcd 3.5's probes, on the client port (with its CORS headers) as on the metrics one.
    for base in [url.as_str(), metrics_url.as_str()] {
        assert_probes_answer_as_etcd_3_5(base);
    }
    assert_eq!(
        get(url, "/readyz").header("access-control-allow-origin"),
        Some("*")
    );
    assert_eq!(
        get(&metrics_url, "/readyz").header("access-control-allow-origin"),
        None
    );
    let nf = get(url, "/nope");
    let nf_real = get(&real.client_url, "/nope");
    assert_eq!((nf.status, &nf.body), (nf_real.status, &nf_real.body));

    // /metrics: the core series with etcd's types.
    let (before, types) = scrape(url);
    let (_, real_types) = scrape(&real.client_url);
    for name in [
        "etcd_server_has_leader",
        "etcd_server_is_leader",
        "etcd_server_leader_changes_seen_total",
        "etcd_server_proposals_committed_total",
        "etcd_server_proposals_applied_total",
        "etcd_server_proposals_pending",
        "etcd_server_proposals_failed_total",
        "etcd_mvcc_db_total_size_in_bytes",
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        "etcd_disk_wal_fsync_duration_seconds",
        "etcd_disk_backend_commit_duration_seconds",
        "grpc_server_handled_total",
        "grpc_server_started_total",
        "process_cpu_seconds_total",
        "process_max_fds",
        "process_open_fds",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_virtual_memory_bytes",
        "process_virtual_memory_max_bytes",
    ] {
        assert_eq!(types.get(name), real_types.get(name), "TYPE of {name}");
        assert!(types.contains_key(name), "{name} missing");
    }
    assert_eq!(value(&before, "etcd_server_has_leader", &[]), Some(1.0));
    assert_eq!(value(&before, "etcd_server_is_leader", &[]), Some(1.0));
    assert_eq!(
        value(&before, "etcd_server_leader_changes_seen_total", &[]),
        Some(1.0)
    );
    assert!(value(&before, "etcd_mvcc_db_total_size_in_bytes", &[]).unwrap() > 0.0);
    let rss = value(&before, "process_resident_memory_bytes", &[]).unwrap();
    assert!(rss > 1e6 && rss < 1e10, "{rss}");
    let started = value(&before, "process_start_time_seconds", &[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now + 1.0 && started > now - 600.0,
        "{started} vs {now}"
    );
    // etcd's buckets: 1ms doubling to 8.192s.
    let les: Vec<&str> = before
        .iter()
        .filter(|(n, _, _)| n == "etcd_disk_wal_fsync_duration_seconds_bucket")
        .map(|(_, l, _)| l["le"].as_str())
        .collect();
    assert_eq!(
        les,
        [
            "0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128", "0.256",
            "0.512", "1.024", "2.048", "4.096", "8.192", "+Inf"
        ]
    );
    // Zeroed series for every etcdserverpb method and code, as etcd starts with.
    let put_ok = [
        ("grpc_code", "OK"),
        ("grpc_method", "Put"),
        ("grpc_service", "etcdserverpb.KV"),
        ("grpc_type", "unary"),
    ];
    let put_started = &put_ok[1..];
    let handled0 = value(&before, "grpc_server_handled_total", &put_ok).expect("zeroed Put/OK");
    let started0 = value(&before, "grpc_server_started_total", put_started).unwrap();
    let committed0 = value(&before, "etcd_server_proposals_committed_total", &[]).unwrap();
    let fsyncs0 = value(&before, "etcd_disk_wal_fsync_duration_seconds_count", &[]).unwrap();

    ours.etcdctl_ok(&["put", "a", "1"]);
    let r = post(url, "/v3/kv/put", r#"{"key":"Yg==","value":"Mg=="}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let out = ours.etcdctl(&["compaction", "1000"]);
    assert!(!out.status.success());

    let (after, _) = scrape(url);
    // Two puts (gRPC and the gateway, which goes through the same gRPC handlers).
    assert_eq!(
        value(&after, "grpc_server_handled_total", &put_ok).unwrap(),
        handled0 + 2.0
    );
    assert_eq!(
        value(&after, "grpc_server_started_total", put_started).unwrap(),
        started0 + 2.0
    );
    let compact_oor = [
        ("grpc_code", "OutOfRange"),
        ("grpc_method", "Compact"),
        ("grpc_service", "etcdserverpb.KV"),
        ("grpc_type", "unary"),
    ];
    assert_eq!(
        value(&after, "grpc_server_handled_total", &compact_oor),
        Some(1.0)
    );
    assert!(
        value(&after, "etcd_server_proposals_committed_total", &[]).unwrap() >= committed0 + 2.0
    );
    assert!(
        value(&after, "etcd_disk_wal_fsync_duration_seconds_count", &[]).unwrap() >= fsyncs0 + 2.0
    );

    // The metrics listener: /metrics and /health only, no CORS headers.
    let (m, _) = scrape(&metrics_url);
    assert_eq!(value(&m, "etcd_server_has_leader", &[]), Some(1.0));
    let h = get(&metrics_url, "/health");
    assert_eq!((h.status, h.body.as_str()), (200, r#"{"health":"true"}"#));
    assert_eq!(h.header("access-control-allow-origin"), None);
    assert_eq!(get(&metrics_url, "/version").status, 404);
    // GET only, on both listeners, as etcd 3.4 answers for /health.
    let b = request(
        &real.client_url,
        "POST",
        "/health",
        "",
        Duration::from_secs(5),
    );
    for base in [url.as_str(), metrics_url.as_str()] {
        let a = request(base, "POST", "/health", "", Duration::from_secs(5));
        assert_eq!((a.status, &a.body), (b.status, &b.body), "{base}");
        assert_eq!(a.header("allow"), b.header("allow"));
    }
}

/// /livez and /readyz, on the client port and on --listen-metrics-urls, answer as a running
/// etcd 3.5.16 answers them (etcd 3.4 has neither).
#[test]
fn probes_answer_as_a_running_etcd_3_5() {
    let dir = tempfile::tempdir().unwrap();
    let start = |bin: &str, name: &str| {
        let metrics = format!("http://127.0.0.1:{}", free_port());
        let m = RealEtcd::start_bin(
            bin,
            &dir.path().join(name),
            name,
            &["--listen-metrics-urls", &metrics],
        );
        (m, metrics)
    };
    let (ours, ours_metrics) = start(OURS, "ours");
    let (etcd, etcd_metrics) = start(&support::etcd35(), "etcd35");
    assert_probes_match(&ours.client_url, &etcd.client_url);
    assert_probes_match(&ours_metrics, &etcd_metrics);
}

#[test]
fn health_is_false_with_an_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(OURS, &dir.path().join("ours"), "ours", &[]);
    let real = RealEtcd::start(&dir.path().join("real"), "real");
    for e in [&ours, &real] {
        // A NOSPACE alarm raised by hand (etcdctl has no command for it; the API does).
        let r = post(
            &e.client_url,
            "/v3/maintenance/alarm",
            r#"{"action":"ACTIVATE","memberID":"1","alarm":"NOSPACE"}"#,
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let a = get(&ours.client_url, "/health");
    let b = get(&real.client_url, "/health");
    assert_eq!((a.status, &a.body), (b.status, &b.body));
    assert_eq!(a.status, 503);
    assert_eq!(a.body, "{\"health\":\"false\"}\n");
    assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
    let (m, _) = scrape(&ours.client_url);
    assert_eq!(value(&m, "etcd_server_health_failures", &[]), Some(1.0));
    // ?exclude=<alarm> ignores that alarm only (kubeadm's liveness probe excludes NOSPACE so
    // that a full quota does not get the member restarted), as etcd 3.4.23 does.
    for (path, status) in [
        ("/health?exclude=NOSPACE", 200),
        ("/health?exclude=NOSPACE&serializable=true", 200),
        ("/health?exclude=CORRUPT", 503),
        ("/health?exclude=nospace", 503),
        ("/health?exclude=CORRUPT&exclude=NOSPACE", 200),
    ] {
        let a = get(&ours.client_url, path);
        let b = get(&real.client_url, path);
        assert_eq!((a.status, &a.body), (b.status, &b.body), "{path}");
        assert_eq!(a.status, status, "{path}");
    }
}

/// Replaces the member and cluster IDs (derived from ports) in a JSON answer.
fn normalise(body: &str, e: &RealEtcd) -> Value {
    let mut v: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => panic!("not JSON: {body:?}: {e}"),
    };
    let status: Value =
        serde_json::from_str(&post(&e.client_url, "/v3/maintenance/status", "{}").body).unwrap();
    let member = status["header"]["member_id"].as_str().unwrap().to_string();
    let cluster = status["header"]["cluster_id"].as_str().unwrap().to_string();
    fn walk(v: &mut Value, member: &str, cluster: &str) {
        match v {
            Value::String(s) if s == member => *s = "<member>".into(),
            Value::String(s) if s == cluster => *s = "<cluster>".into(),
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, member, cluster)),
            Value::Object(o) => o.values_mut().for_each(|x| walk(x, member, cluster)),
            _ => {}
        }
    }
    walk(&mut v, &member, &cluster);
    v
}

/// The gateway calls of the comparison: (path, body).
const CALLS: &[(&str, &str)] = &[
    ("/v3/kv/put", r#"{"key":"Zm9v","value":"YmFy"}"#),
    (
        "/v3/kv/put",
        r#"{"key":"Zm9v","value":"YmF6","prev_kv":true}"#,
    ),
    ("/v3/kv/range", r#"{"key":"Zm9v"}"#),
    ("/v3beta/kv/range", r#"{"key":"Zm9v","keys_only":true}"#),
    (
        "/v3/kv/range",
        r#"{"key":"AA==","range_end":"AA==","count_only":true}"#,
    ),
    ("/v3/kv/range", r#"{"key":"bm9uZQ=="}"#),
    (
        "/v3/kv/txn",
        r#"{"compare":[{"target":"VALUE","key":"Zm9v","value":"YmF6","result":"EQUAL"}],"success":[{"request_put":{"key":"Zm9v","value":"cXV4"}}],"failure":[{"request_range":{"key":"Zm9v"}}]}"#,
    ),
    (
        "/v3/kv/txn",
        r#"{"compare":[{"target":"VALUE","key":"Zm9v","value":"YmF6","result":"EQUAL"}],"success":[{"request_put":{"key":"Zm9v","value":"cXV4"}}],"failure":[{"request_range":{"key":"Zm9v"}}]}"#,
    ),
    ("/v3/kv/deleterange", r#"{"key":"Zm9v","prev_kv":true}"#),
    ("/v3/kv/range", r#"{"key":"Zm9v","revision":"2"}"#),
    ("/v3/kv/compaction", r#"{"revision":"3"}"#),
    ("/v3/kv/compaction", r#"{"revision":"3"}"#),
    ("/v3/kv/range", r#"{"key":"Zm9v","revision":2}"#),
    ("/v3/kv/compaction", r#"{"revision":"1000"}"#),
    ("/v3/lease/grant", r#"{"TTL":"60","ID":"4242"}"#),
    (
        "/v3/kv/put",
        r#"{"key":"bA==","value":"dg==","lease":"4242"}"#,
    ),
    ("/v3/lease/leases", "{}"),
    ("/v3/kv/lease/leases", ""),
    ("/v3/lease/revoke", r#"{"ID":"4242"}"#),
    ("/v3/kv/lease/revoke", r#"{"ID":"4242"}"#),
    ("/v3/lease/timetolive", r#"{"ID":"4242"}"#),
    ("/v3/kv/range", r#"{"key":"bA=="}"#),
    ("/v3/maintenance/alarm", "{}"),
    (
        "/v3/kv/put",
        r#"{"key":"Zm9v","value":"YmFy","lease":"99"}"#,
    ),
    ("/v3/kv/nope", "{}"),
    // A nested txn's compares are decided before its parent's puts run (etcd's txn path):
    // k is "0" for the inner compare although the outer branch just put "1".
    ("/v3/kv/put", r#"{"key":"aw==","value":"MA=="}"#),
    (
        "/v3/kv/txn",
        r#"{"success":[{"request_put":{"key":"aw==","value":"MQ=="}},{"request_txn":{"compare":[{"key":"aw==","target":"VALUE","result":"EQUAL","value":"MQ=="}],"success":[{"request_put":{"key":"cg==","value":"c2F3LW5ldw=="}}],"failure":[{"request_put":{"key":"cg==","value":"c2F3LW9sZA=="}}]}}]}"#,
    ),
    ("/v3/kv/range", r#"{"key":"cg=="}"#),
];

#[test]
fn gateway_answers_as_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(OURS, &dir.path().join("ours"), "ours", &[]);
    let real = RealEtcd::start(&dir.path().join("real"), "real");
    for (path, body) in CALLS {
        let a = post(&ours.client_url, path, body);
        let b = post(&real.client_url, path, body);
        assert_eq!(
            a.status, b.status,
            "{path} {body}: {} vs {}",
            a.body, b.body
        );
        assert_eq!(
            a.header("content-type"),
            b.header("content-type"),
            "{path} {body}"
        );
        if b.header("content-type") == Some("application/json") {
            assert_eq!(
                normalise(&a.body, &ours),
                normalise(&b.body, &real),
                "{path} {body}"
            );
            // Same bytes once the IDs are equal: field order and number formatting too.
            let ids = |s: &str, e: &RealEtcd| serde_json::to_string(&normalise(s, e)).unwrap();
            assert_eq!(ids(&a.body, &ours), ids(&b.body, &real));
        } else {
            assert_eq!(a.body, b.body, "{path} {body}");
        }
    }
    // Bad input: the same status and code (Go's JSON decoder words its message differently).
    for body in [r#"{"key":1}"#, "notjson", r#"{"key":"Zm9vx"}"#] {
        let a = post(&ours.client_url, "/v3/kv/range", body);
        let b = post(&real.client_url, "/v3/kv/range", body);
        assert_eq!(a.status, b.status, "{body}");
        let ja: Value = serde_json::from_str(&a.body).unwrap();
        let jb: Value = serde_json::from_str(&b.body).unwrap();
        assert_eq!(ja["code"], jb["code"], "{body}");
        assert_eq!(
            ja.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["error", "message", "code"]
        );
    }
    // Wrong method and unknown paths: Go's plain-text answers.
    for (m, p) in [
        ("GET", "/v3/kv/range"),
        ("PUT", "/v3/kv/put"),
        ("POST", "/v3alpha/kv/range"),
    ] {
        let a = request(&ours.client_url, m, p, "", Duration::from_secs(5));
        let b = request(&real.client_url, m, p, "", Duration::from_secs(5));
        assert_eq!((a.status, &a.body), (b.status, &b.body), "{m} {p}");
    }

    // Streams: a lease keep-alive answers once and ends; a watch sends its history and the
    // events that follow, one {"result":...} line each, and stays open.
    for e in [&ours, &real] {
        assert_eq!(
            post(
                &e.client_url,
                "/v3/lease/grant",
                r#"{"TTL":"60","ID":"77"}"#
            )
            .status,
            200
        );
    }
    let ka = |e: &RealEtcd| {
        let r = request(
            &e.client_url,
            "POST",
            "/v3/lease/keepalive",
            r#"{"ID":"77"}"#,
            Duration::from_secs(5),
        );
        assert_eq!(r.status, 200);
        r.body.lines().map(|l| normalise(l, e)).collect::<Vec<_>>()
    };
    assert_eq!(ka(&ours), ka(&real));
    let watch = |e: &RealEtcd| {
        let url = e.client_url.clone();
        let t = std::thread::spawn(move || {
            request(
                &url,
                "POST",
                "/v3/watch",
                r#"{"create_request":{"key":"dw==","range_end":"eA=="}}"#,
                Duration::from_secs(3),
            )
        });
        std::thread::sleep(Duration::from_millis(800));
        assert_eq!(
            post(
                &e.client_url,
                "/v3/kv/put",
                r#"{"key":"dzE=","value":"MQ=="}"#
            )
            .status,
            200
        );
        assert_eq!(
            post(&e.client_url, "/v3/kv/deleterange", r#"{"key":"dzE="}"#).status,
            200
        );
        let r = t.join().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/json"));
        r.body.lines().map(|l| normalise(l, e)).collect::<Vec<_>>()
    };
    let (wa, wb) = (watch(&ours), watch(&real));
    assert_eq!(wa.len(), 3, "{wa:?}");
    assert_eq!(wa, wb);
}

/// The Go etcdctl's `check datascale` reads process_resident_memory_bytes from /metrics; it
/// passes against our server and leaves no keys behind.
#[test]
fn go_etcdctl_check_datascale_passes() {
    let dir = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(OURS, &dir.path().join("ours"), "ours", &[]);
    let out = ours.etcdctl(&["check", "datascale"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("PASS: Approximate system memory used : ") && last.ends_with(" MB."),
        "{text}"
    );
    let left = ours.etcdctl_ok(&[
        "get",
        "/etcdctl-check-datascale/",
        "--prefix",
        "--keys-only",
    ]);
    assert!(left.trim().is_empty());
}

/// With the CORRUPT alarm raised (through the gateway, as any client may), etcd 3.4 refuses
/// KV and lease changes and still serves reads, renewals and health; ours answers each
/// Go etcdctl command with the same exit code and error.
#[test]
fn corrupt_alarm_refuses_what_etcd_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(OURS, &dir.path().join("ours"), "ours", &[]);
    let real = RealEtcd::start(&dir.path().join("real"), "real");
    let mut seen = Vec::new();
    for e in [&ours, &real] {
        e.etcdctl_ok(&["put", "a", "1"]);
        let granted = e.etcdctl_ok(&["lease", "grant", "100"]);
        let lease = granted.split_whitespace().nth(1).unwrap().to_string();
        let status: Value =
            serde_json::from_str(&post(&e.client_url, "/v3/maintenance/status", "{}").body)
                .unwrap();
        let member = status["header"]["member_id"].as_str().unwrap().to_string();
        let body = format!(r#"{{"action":"ACTIVATE","memberID":"{member}","alarm":"CORRUPT"}}"#);
        let r = post(&e.client_url, "/v3/maintenance/alarm", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let mut answers = Vec::new();
        let cases: Vec<Vec<&str>> = vec![
            vec!["get", "a"],
            vec!["get", "a", "--consistency=s"],
            vec!["put", "b", "2"],
            vec!["del", "a"],
            vec!["compaction", "1"],
            vec!["lease", "grant", "10"],
            vec!["lease", "revoke", &lease],
            vec!["lease", "timetolive", &lease],
            vec!["lease", "keep-alive", "--once", &lease],
            vec!["endpoint", "health"],
            vec!["alarm", "list"],
        ];
        for args in &cases {
            let out = e.etcdctl(args);
            let err = String::from_utf8_lossy(&out.stderr)
                .lines()
                .rfind(|l| !l.starts_with("{\"level\""))
                .unwrap_or("")
                .to_string();
            answers.push((args.join(" "), out.status.code(), err));
        }
        for (input, what) in [("\n\nget a\n", "read txn"), ("\n\nput c 3\n", "write txn")] {
            let out = e.etcdctl_stdin(&["txn"], input);
            let err = String::from_utf8_lossy(&out.stderr)
                .lines()
                .rfind(|l| !l.starts_with("{\"level\""))
                .unwrap_or("")
                .to_string();
            answers.push((what.to_string(), out.status.code(), err));
        }
        seen.push(answers);
    }
    // Health lines carry the URL and a time: compared by their verdict.
    let verdict = |s: &str| {
        if s.contains(" is healthy") {
            "healthy".to_string()
        } else if s.contains(" is unhealthy") {
            "unhealthy".to_string()
        } else {
            s.to_string()
        }
    };
    let (ours_seen, real_seen) = (&seen[0], &seen[1]);
    for (o, r) in ours_seen.iter().zip(real_seen) {
        assert_eq!(
            (o.1, verdict(&o.2)),
            (r.1, verdict(&r.2)),
            "{} (etcd: {})",
            o.0,
            r.0
        );
    }
    assert!(real_seen.iter().any(|a| a.2.contains("corrupt cluster")));
    assert!(real_seen.iter().any(|a| a.0 == "get a" && a.1 == Some(0)));

    // etcd 3.5's /readyz fails on the CORRUPT alarm, listing every check (etcd 3.4, the
    // oracle here, has no /readyz); /livez does not look at alarms.
    let url = &ours.client_url;
    let r = get(url, "/readyz");
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            503,
            "[-]data_corruption failed: alarm activated: CORRUPT\n[+]serializable_read ok\n[+]linearizable_read ok\n\n"
        )
    );
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let r = get(url, "/readyz/data_corruption");
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            503,
            "[-]data_corruption failed: alarm activated: CORRUPT\n\n"
        )
    );
    assert_eq!(get(url, "/readyz?exclude=data_corruption").body, "ok\n");
    assert_eq!(get(url, "/livez").body, "ok\n");
}

/// The shape of a JSON answer: every object's keys (recursively) and every error in full, with
/// values that differ by construction between two servers (IDs, keys holding lease IDs, blobs
/// of two different db files) left out.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(o) if o.contains_key("error") => v.clone(),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), shape(x)))
                .collect::<serde_json::Map<_, _>>(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        _ => Value::Null,
    }
}

/// One streamed answer: (status, its lines as JSON, whether the server ended it before `wait`).
fn stream(e: &RealEtcd, path: &str, body: &str, wait: Duration) -> (u16, Vec<Value>, bool) {
    let t = std::time::Instant::now();
    let r = request(&e.client_url, "POST", path, body, wait);
    let ended = t.elapsed() < wait;
    let lines = r
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|err| panic!("{l:?}: {err}")))
        .collect();
    (r.status, lines, ended)
}

/// The gateway's streaming routes and the election/lock/maintenance routes, on ours and on
/// etcd 3.4, compared message by message: a keep-alive answers each request object and ends
/// when the body does (curl's way: one POST with the objects, then wait for the answer); a
/// watch keeps streaming; the snapshot comes as the db in 32 KiB messages then its sha256;
/// Observe streams the leader; Lock without a lease opens a 60s session lease.
#[test]
fn gateway_streams_answer_as_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(OURS, &dir.path().join("ours"), "ours", &[]);
    let real = RealEtcd::start(&dir.path().join("real"), "real");
    let both = [&ours, &real];
    for e in both {
        let r = post(
            &e.client_url,
            "/v3/lease/grant",
            r#"{"TTL":"60","ID":"77"}"#,
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let wait = Duration::from_secs(4);
    // Keep-alives: two objects in one body; an unknown lease (TTL 0, no error); bad JSON
    // after a good object ends the request side there.
    for body in [
        r#"{"ID":"77"}{"ID":77}"#,
        r#"{"ID":"5"}"#,
        "{\"ID\":\"77\"}\n{\"ID\":",
        "",
    ] {
        let got: Vec<_> = both
            .iter()
            .map(|e| {
                let (status, lines, ended) = stream(e, "/v3/lease/keepalive", body, wait);
                let lines: Vec<Value> =
                    lines.iter().map(|l| normalise(&l.to_string(), e)).collect();
                (status, lines, ended)
            })
            .collect();
        assert_eq!(got[0], got[1], "keepalive {body:?}");
        assert!(got[1].2, "etcd ends a keep-alive with the body: {body:?}");
    }
    // A snapshot: same messages (shape), the last one the 32-byte sha256, each earlier one's
    // remaining_bytes what is left after it.
    let snaps: Vec<_> = both
        .iter()
        .map(|e| stream(e, "/v3/maintenance/snapshot", "{}", Duration::from_secs(10)))
        .collect();
    for (status, lines, ended) in &snaps {
        assert_eq!((*status, *ended), (200, true));
        let blobs: Vec<(usize, u64)> = lines
            .iter()
            .map(|l| {
                let r = &l["result"];
                let blob = base64_len(r["blob"].as_str().unwrap_or(""));
                let rem = r["remaining_bytes"]
                    .as_str()
                    .map_or(0, |s| s.parse().unwrap());
                (blob, rem)
            })
            .collect();
        let (sha, db) = blobs.split_last().expect("messages");
        assert_eq!(*sha, (32, 0));
        let total: usize = db.iter().map(|b| b.0).sum();
        let mut sent = 0;
        for (len, rem) in db {
            assert!(*len <= 32 * 1024);
            sent += len;
            assert_eq!(*rem as usize, total - sent);
        }
    }
    let shapes = |i: usize| -> Vec<Value> { snaps[i].1.iter().map(shape).collect() };
    assert_eq!(shapes(0).len(), snaps[0].1.len());
    assert_eq!(
        shapes(0).first(),
        shapes(1).first(),
        "first snapshot message"
    );
    assert_eq!(shapes(0).last(), shapes(1).last(), "sha256 message");

    // Election routes: campaign (no lease: a session is opened), leader, observe, proclaim and
    // resign with a stale or missing leader key, a name without a leader.
    let mut seen = Vec::new();
    for e in both {
        let c = post(
            &e.client_url,
            "/v3/election/campaign",
            r#"{"name":"ZWw=","value":"djE="}"#,
        );
        let leader: Value = serde_json::from_str(&c.body).unwrap();
        let leader = leader["leader"].clone();
        let (status, observed, ended) = stream(
            e,
            "/v3/election/observe",
            r#"{"name":"ZWw="}"#,
            Duration::from_secs(2),
        );
        let proclaim = format!(r#"{{"leader":{leader},"value":"djI="}}"#);
        let mut answers = vec![
            (c.status, shape(&serde_json::from_str(&c.body).unwrap())),
            (status, Value::Array(observed.iter().map(shape).collect())),
            (u16::from(ended), Value::Null),
        ];
        for (path, body) in [
            ("/v3/election/leader", r#"{"name":"ZWw="}"#.to_string()),
            ("/v3/election/proclaim", proclaim),
            (
                "/v3/election/proclaim",
                r#"{"leader":{"name":"ZWw=","key":"bm9wZQ==","rev":"99","lease":"5"},"value":"eA=="}"#
                    .to_string(),
            ),
            ("/v3/election/proclaim", r#"{"value":"eA=="}"#.to_string()),
            ("/v3/election/resign", "{}".to_string()),
            (
                "/v3/election/resign",
                r#"{"leader":{"name":"ZWw=","key":"bm9wZQ==","rev":"99","lease":"5"}}"#
                    .to_string(),
            ),
            ("/v3/election/resign", format!(r#"{{"leader":{leader}}}"#)),
            ("/v3/election/leader", r#"{"name":"ZWw="}"#.to_string()),
            ("/v3/election/leader", r#"{"name":"bm9uZQ=="}"#.to_string()),
        ] {
            let r = post(&e.client_url, path, &body);
            answers.push((r.status, shape(&serde_json::from_str(&r.body).unwrap())));
        }
        seen.push(answers);
    }
    assert_eq!(seen[0], seen[1], "election routes");

    // Lock without a lease, Defragment's empty answer, moving the leadership to the leader,
    // a body with text after its JSON object.
    for e in both {
        let r = post(&e.client_url, "/v3/lock/lock", r#"{"name":"bG9jaw=="}"#);
        assert_eq!(r.status, 200, "{}", r.body);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        let key = base64_decode(v["key"].as_str().unwrap());
        let lease_hex = String::from_utf8(key).unwrap();
        let lease_hex = lease_hex.strip_prefix("lock/").unwrap();
        let lease = i64::from_str_radix(lease_hex, 16).unwrap();
        let ttl = post(
            &e.client_url,
            "/v3/lease/timetolive",
            &format!(r#"{{"ID":"{lease}"}}"#),
        );
        let ttl: Value = serde_json::from_str(&ttl.body).unwrap();
        assert_eq!(ttl["grantedTTL"], "60", "{ttl}");
        let d = post(&e.client_url, "/v3/maintenance/defragment", "{}");
        assert_eq!((d.status, d.body.as_str()), (200, "{}"));
        let status: Value =
            serde_json::from_str(&post(&e.client_url, "/v3/maintenance/status", "{}").body)
                .unwrap();
        let me = status["header"]["member_id"].as_str().unwrap();
        let m = post(
            &e.client_url,
            "/v3/maintenance/transfer-leadership",
            &format!(r#"{{"targetID":"{me}"}}"#),
        );
        assert_eq!((m.status, m.body.as_str()), (200, "{}"));
        let t = post(&e.client_url, "/v3/kv/range", r#"{"key":"Zm9v"} and more"#);
        assert_eq!(t.status, 200, "{}", t.body);
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}

fn base64_len(s: &str) -> usize {
    base64_decode(s).len()
}
