// kubeadm's etcd static pod command line starts etcd-rs: TLS on the client and peer ports with
// client certificates required (certificates made at test time), the metrics and health
// listener on plain http, `--feature-gates=InitialCorruptCheck=true
// --watch-progress-notify-interval=5s --snapshot-count=10000` (current kubeadm) or the 3.5-era
// `--experimental-*` spellings (older kubeadm), on the same data dir. The kubelet's probes
// (/livez, /readyz on the metrics port) answer as etcd 3.5's; kube-apiserver's client (the
// Go etcdctl with a client certificate) reads and writes.

mod http_client;
mod pki;
mod probes;
#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use http_client::{get, request_until};
use pki::{Pki, make_pki};
use probes::assert_probes_answer_as_etcd_3_5;
use serde_json::Value;
use support::{RealEtcd, free_port};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

/// The listeners of one kubeadm-style member. kubeadm listens for clients on 127.0.0.1 and on
/// the node's IP (127.0.0.2 stands for it here), advertises the node's IP, and serves metrics
/// and probes on plain http on 127.0.0.1.
struct Ports {
    /// https://127.0.0.1:port, the address kube-apiserver on the same node dials.
    local_client: String,
    /// https://127.0.0.2:port, the same port on the node's IP.
    client: String,
    peer: String,
    metrics: String,
}

impl Ports {
    fn new() -> Ports {
        let client = free_port();
        Ports {
            local_client: format!("https://127.0.0.1:{client}"),
            client: format!("https://127.0.0.2:{client}"),
            peer: format!("https://127.0.0.2:{}", free_port()),
            metrics: format!("http://127.0.0.1:{}", free_port()),
        }
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// kubeadm's flags (cmd/kubeadm/app/phases/etcd/local.go, getEtcdCommand), one member named
/// cp1, with `era`'s spelling of the corruption check and the progress interval.
fn kubeadm_args(data: &Path, pki: &Pki, p: &Ports, era: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        format!("--advertise-client-urls={}", p.client),
        format!("--cert-file={}", s(&pki.server_cert)),
        "--client-cert-auth=true".into(),
        format!("--data-dir={}", s(data)),
        format!("--initial-advertise-peer-urls={}", p.peer),
        format!("--initial-cluster=cp1={}", p.peer),
        format!("--key-file={}", s(&pki.server_key)),
        format!("--listen-client-urls={},{}", p.local_client, p.client),
        format!("--listen-metrics-urls={}", p.metrics),
        format!("--listen-peer-urls={}", p.peer),
        "--name=cp1".into(),
        format!("--peer-cert-file={}", s(&pki.peer_cert)),
        "--peer-client-cert-auth=true".into(),
        format!("--peer-key-file={}", s(&pki.peer_key)),
        format!("--peer-trusted-ca-file={}", s(&pki.ca)),
        "--snapshot-count=10000".into(),
        format!("--trusted-ca-file={}", s(&pki.ca)),
    ];
    a.extend(era.iter().map(|s| s.to_string()));
    a
}

/// Starts the member and waits as the kubelet's startup probe does: GET /readyz on the
/// metrics port until it answers 200.
fn start(args: &[String], log: &Path) -> Child {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    let mut child = Command::new(OURS)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .expect("spawn etcd");
    let metrics = args
        .iter()
        .find_map(|a| a.strip_prefix("--listen-metrics-urls="))
        .expect("metrics URL");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(metrics.trim_start_matches("http://")).is_ok()
            && get(metrics, "/readyz").status == 200
        {
            return child;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("etcd exited ({st}); log in {}", log.display());
        }
        assert!(Instant::now() < deadline, "/readyz not 200 within 30s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The Go etcdctl as kube-apiserver connects: the CA and a client certificate.
fn etcdctl(url: &str, pki: &Pki, args: &[&str]) -> Output {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", url, "--dial-timeout", "3s"])
        .args(["--cacert", s(&pki.ca)])
        .args(["--cert", s(&pki.client_cert), "--key", s(&pki.client_key)])
        .args(args)
        .output()
        .expect("run etcdctl")
}

#[test]
fn kubeadms_command_line_starts_a_member_whose_probes_answer_on_the_metrics_port() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let p = Ports::new();
    let data = dir.path().join("etcd");
    let log = dir.path().join("etcd.log");
    let eras: [&[&str]; 2] = [
        // kubeadm before etcd 3.6.
        &[
            "--experimental-initial-corrupt-check=true",
            "--experimental-watch-progress-notify-interval=5s",
        ],
        // kubeadm for etcd 3.6+: the same settings, 3.6's names, on the same data dir.
        &[
            "--feature-gates=InitialCorruptCheck=true",
            "--watch-progress-notify-interval=5s",
        ],
    ];
    for (i, era) in eras.iter().enumerate() {
        let child = start(&kubeadm_args(&data, &pki, &p, era), &log);
        assert_probes_answer_as_etcd_3_5(&p.metrics);
        // /health as etcd 3.4 answers it, and kubeadm 1.24-1.31's liveness probe URL.
        for path in ["/health", "/health?exclude=NOSPACE&serializable=true"] {
            let h = get(&p.metrics, path);
            assert_eq!(
                (h.status, h.body.as_str()),
                (200, r#"{"health":"true"}"#),
                "{path}"
            );
        }
        let m = get(&p.metrics, "/metrics");
        assert!(m.body.contains("etcd_server_has_leader 1"), "{}", m.body);

        // The client port serves kube-apiserver's kind of client, and only with a certificate.
        let key = format!("/registry/era{i}");
        let put = etcdctl(&p.client, &pki, &["put", &key, "v"]);
        assert!(
            put.status.success(),
            "{}",
            String::from_utf8_lossy(&put.stderr)
        );
        // Read back on the other client URL, as kube-apiserver on the node dials 127.0.0.1.
        let got = etcdctl(
            &p.local_client,
            &pki,
            &["get", "/registry", "--prefix", "--keys-only"],
        );
        let listed = String::from_utf8_lossy(&got.stdout);
        for k in 0..=i {
            assert!(listed.contains(&format!("/registry/era{k}")), "{listed}");
        }
        let members = etcdctl(&p.local_client, &pki, &["member", "list"]);
        let members = String::from_utf8_lossy(&members.stdout);
        assert!(
            members.contains(&format!("cp1, {}, {}", p.peer, p.client)),
            "{members}"
        );
        let anonymous = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &p.client, "--dial-timeout", "2s"])
            .args(["--cacert", s(&pki.ca), "get", "x"])
            .output()
            .expect("run etcdctl");
        assert!(
            !anonymous.status.success(),
            "a client without a certificate was served"
        );
        stop(child);

        // InitialCorruptCheck (either spelling) ran the start-up check, once per start.
        let text = std::fs::read_to_string(&log).unwrap();
        let checks = text
            .lines()
            .filter(|l| l.contains("initial corruption checking passed"))
            .count();
        assert_eq!(checks, i + 1, "{text}");
        if i == 0 {
            assert!(text.contains(
                "--experimental-watch-progress-notify-interval is deprecated in v3.6 and will be decommissioned in v3.7. Use '--watch-progress-notify-interval' instead."
            ));
        }
    }
}

/// A watch's progress notification in the gateway's JSON: a header and nothing else.
fn is_progress(line: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| {
        let res = &v["result"];
        res["header"].is_object() && res["created"].is_null() && res["events"].is_null()
    })
}

/// Opens a watch with progress_notify over the gateway on a store nobody writes to and reads
/// until two progress notifications arrived (or 30 s passed: far beyond a 1 s interval, far
/// short of the 10 min default an ignored flag would leave). Returns them.
fn two_progress_notifications(client_url: &str) -> Vec<Value> {
    let r = request_until(
        client_url,
        "POST",
        "/v3/watch",
        r#"{"create_request":{"key":"Zm9v","progress_notify":true}}"#,
        Duration::from_secs(30),
        |body| body.lines().filter(|l| is_progress(l)).count() >= 2,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .filter(|l| is_progress(l))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The keys of a progress notification and of its header, and the revision it reports.
fn progress_shape(v: &Value) -> (Vec<String>, Vec<String>, Value) {
    let keys = |o: &Value| -> Vec<String> {
        o.as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let res = &v["result"];
    (
        keys(res),
        keys(&res["header"]),
        res["header"]["revision"].clone(),
    )
}

/// Either spelling of the progress interval drives the server's progress notifications, shaped
/// as the real etcd 3.4's for its --experimental-watch-progress-notify-interval.
#[test]
fn either_spelling_of_the_progress_interval_drives_notifications() {
    let dir = tempfile::tempdir().unwrap();
    let real = RealEtcd::start_with(
        &dir.path().join("real"),
        "real",
        &["--experimental-watch-progress-notify-interval=1s"],
    );
    let expected = two_progress_notifications(&real.client_url);
    assert!(expected.len() >= 2, "etcd 3.4 sent {expected:?}");
    let expected = progress_shape(&expected[0]);
    for (i, flag) in [
        "--experimental-watch-progress-notify-interval=1s",
        "--watch-progress-notify-interval=1s",
    ]
    .iter()
    .enumerate()
    {
        let ours = RealEtcd::start_bin(OURS, &dir.path().join(format!("ours{i}")), "ours", &[flag]);
        let got = two_progress_notifications(&ours.client_url);
        assert!(got.len() >= 2, "{flag}: {got:?}");
        for n in &got {
            assert_eq!(progress_shape(n), expected, "{flag}: {n}");
        }
    }
}
