// `etcdctl downgrade validate|enable|cancel` end to end: ours against our server (etcd 3.5's
// Downgrade; the Go etcdctl 3.4 has no such command to compare with), every output format and
// argument error, and against the real etcd 3.4, which has no Downgrade.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use prost::Message;
use support::RealEtcd;

const OURS: &str = env!("CARGO_BIN_EXE_etcdctl");

/// Our server: TWIN_SERVER_BIN when set, else the etcd binary cargo built beside this etcdctl
/// (`cargo test --workspace` builds it).
fn our_server() -> String {
    if let Ok(b) = std::env::var("TWIN_SERVER_BIN")
        && !b.is_empty()
    {
        return b;
    }
    let p = std::path::Path::new(OURS).with_file_name("etcd");
    assert!(
        p.exists(),
        "our server {} is not built: run `cargo build -p etcd` first",
        p.display()
    );
    p.display().to_string()
}

struct Ran {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

impl Ran {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The last line on stderr (a failed call first prints clientv3's retry warning).
    fn error(&self) -> &str {
        self.stderr.lines().last().unwrap_or("")
    }
}

fn ctl(url: &str, args: &[&str]) -> Ran {
    let out = Command::new(OURS)
        .args(["--endpoints", url])
        .args(args)
        .output()
        .expect("run our etcdctl");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn fails(url: &str, args: &[&str], code: i32, error: &str) {
    let r = ctl(url, args);
    assert_eq!((r.code, r.error()), (code, error), "{args:?}: {}", r.stderr);
    assert!(r.stdout.is_empty(), "{args:?}: {}", r.out());
}

#[test]
fn downgrade_commands_against_our_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = our_server();
    let e = RealEtcd::start_bin(&server, &dir.path().join("m"), "m", &[]);
    let url = e.client_url.as_str();
    // The cluster version is decided a moment after the member serves.
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let r = ctl(url, &["downgrade", "validate", "3.4"]);
        if r.code == 0 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        (first.code, first.out()),
        (
            0,
            "Downgrade validate success, cluster version 3.5.0\n".to_string()
        ),
        "{}",
        first.stderr
    );

    // Arguments, checked before any connection (etcdctl's ExitBadArgs).
    fails(
        url,
        &["downgrade", "validate"],
        128,
        "Error: TARGET_VERSION not provided",
    );
    fails(
        url,
        &["downgrade", "enable"],
        128,
        "Error: TARGET_VERSION not provided",
    );
    fails(
        url,
        &["downgrade", "validate", "3.4", "3.3"],
        128,
        "Error: too many arguments",
    );
    fails(
        url,
        &["downgrade", "enable", ""],
        128,
        "Error: target version not provided",
    );
    // The server's errors, as etcd prints them.
    fails(
        url,
        &["downgrade", "validate", "3.3"],
        1,
        "Error: etcdserver: invalid downgrade target version",
    );
    fails(
        url,
        &["downgrade", "enable", "three"],
        1,
        "Error: etcdserver: wrong downgrade target version format",
    );
    fails(
        url,
        &["downgrade", "cancel"],
        1,
        "Error: etcdserver: no inflight downgrade job",
    );
    // Formats: the response as JSON or protobuf; no table or fields form (exit 4).
    fails(
        url,
        &["downgrade", "validate", "3.4", "-w", "table"],
        4,
        "Error: table not supported as output format",
    );
    fails(
        url,
        &["downgrade", "validate", "3.4", "-w", "fields"],
        4,
        "Error: fields not supported as output format",
    );
    let json = ctl(url, &["downgrade", "validate", "3.4.0", "-w", "json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(v["version"], "3.5.0", "{v}");
    assert!(
        v["header"]["cluster_id"].as_u64().is_some_and(|id| id != 0),
        "{v}"
    );
    assert!(
        v["header"]["raft_term"].as_u64().is_some_and(|t| t != 0),
        "{v}"
    );

    // Enable; the server lowers the version, after which 3.4 is no longer a valid target.
    let enable = ctl(url, &["downgrade", "enable", "3.4"]);
    assert_eq!(
        (enable.code, enable.out()),
        (
            0,
            "Downgrade enable success, cluster version 3.5.0\n".to_string()
        ),
        "{}",
        enable.stderr
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = ctl(url, &["downgrade", "validate", "3.4"]);
        if r.error() == "Error: etcdserver: invalid downgrade target version" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still valid: {} {}",
            r.out(),
            r.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let cancel = ctl(url, &["downgrade", "cancel", "-w", "protobuf"]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    let r = proto::etcdserverpb::DowngradeResponse::decode(cancel.stdout.as_slice())
        .expect("a DowngradeResponse");
    assert_eq!(r.version, "3.4.0");
    fails(
        url,
        &["downgrade", "cancel", "ignored"],
        1,
        "Error: etcdserver: no inflight downgrade job",
    );
}

#[test]
fn downgrade_against_etcd_34_is_unimplemented() {
    let dir = tempfile::tempdir().expect("temp dir");
    let e = RealEtcd::start(&dir.path().join("m"), "m");
    let r = ctl(&e.client_url, &["downgrade", "validate", "3.3"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.error()
            .starts_with("Error: rpc error: code = Unimplemented desc = "),
        "{}",
        r.stderr
    );
}
