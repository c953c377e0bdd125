// etcd 3.5's Maintenance.Downgrade on our server: validate, enable and cancel with etcd's errors
// and codes on one member (its record in the db, the peer endpoint, the gateway, auth), and on a
// 3-member cluster the job through raft: every member lowers its cluster version, the job
// survives restarts and a leader change, and cancel raises the version again.
// (The way back to a real etcd 3.4 is in mixed_cluster.rs.)

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use cluster_support::{Cluster, downgrade};
use support::RealEtcd;
use tonic::Code;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const FAST: &[&str] = &["--heartbeat-interval", "50", "--election-timeout", "500"];

const VALIDATE: i32 = 0;
const ENABLE: i32 = 1;
const CANCEL: i32 = 2;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// A successful call's cluster version, after checking it carries a header.
fn ok(url: &str, action: i32, version: &str) -> String {
    let r = downgrade(url, action, version)
        .unwrap_or_else(|e| panic!("downgrade {action} {version:?} on {url}: {e:?}"));
    let h = r.header.expect("a header");
    assert!(
        h.cluster_id != 0 && h.member_id != 0 && h.raft_term != 0,
        "{h:?}"
    );
    r.version
}

/// A refused call: etcd's code and message.
fn refused(url: &str, action: i32, version: &str, code: Code, message: &str) {
    match downgrade(url, action, version) {
        Ok(r) => panic!("downgrade {action} {version:?} answered {r:?}, not {message:?}"),
        Err(e) => assert_eq!(
            (e.code(), e.message()),
            (code, message),
            "downgrade {action} {version:?}"
        ),
    }
}

/// One HTTP/1.0 request: (status, header lines in lower case, body).
fn http(url: &str, method: &str, path: &str, body: &str) -> (u16, String, String) {
    let host = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("answer");
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// The cluster version a member reports on its client port's /version.
fn cluster_version(client_url: &str) -> String {
    let (_, _, body) = http(client_url, "GET", "/version", "");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["etcdcluster"].as_str().unwrap_or_default().to_string()
}

fn wait_cluster_version(client_url: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = cluster_version(client_url);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{client_url} reports cluster version {got:?}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The peer endpoint's answer: (status, headers, body).
fn downgrade_enabled(peer_url: &str) -> (u16, String, String) {
    http(peer_url, "GET", "/downgrade/enabled", "")
}

fn assert_enabled(peer_url: &str, want: bool) {
    let (status, head, body) = downgrade_enabled(peer_url);
    assert_eq!(
        (status, body.as_str()),
        (200, if want { "true" } else { "false" })
    );
    assert!(head.contains("\r\ncontent-type: text/plain\r"), "{head}");
    assert!(head.contains("\r\nx-etcd-cluster-id: "), "{head}");
}

/// The job's record in a stopped member's db (cluster bucket, key "downgrade").
fn db_record(data_dir: &std::path::Path) -> String {
    use common::backend::{Db, ReadTxn};
    let db = Db::open_read_only(data_dir.join("member/snap/db")).expect("open the member's db");
    let tx = db.begin_read();
    let rows = tx
        .range(b"cluster", b"downgrade", None, 0)
        .expect("the cluster bucket");
    rows.first()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default()
}

fn metrics(client_url: &str) -> String {
    http(client_url, "GET", "/metrics", "").2
}

#[test]
fn one_member_validates_enables_and_cancels_with_etcds_errors() {
    let dir = tmp();
    let data = dir.path().join("m1");
    let mut e = RealEtcd::start_bin(OURS, &data, "m1", &[]);
    let url = e.client_url.clone();
    wait_cluster_version(&url, "3.5.0");

    // VALIDATE: only one minor below the cluster version, as X.Y or X.Y.Z.
    assert_eq!(ok(&url, VALIDATE, "3.4"), "3.5.0");
    assert_eq!(ok(&url, VALIDATE, "3.4.23"), "3.5.0");
    for v in ["3.3", "3.5", "3.6", "2.4", "4.4", "3.3.0"] {
        refused(
            &url,
            VALIDATE,
            v,
            Code::InvalidArgument,
            "etcdserver: invalid downgrade target version",
        );
    }
    for v in ["", "3", "v3.4", "three.four", "3.4-rc.1", "3.4.0.0"] {
        refused(
            &url,
            VALIDATE,
            v,
            Code::InvalidArgument,
            "etcdserver: wrong downgrade target version format",
        );
    }
    refused(
        &url,
        ENABLE,
        "3.3",
        Code::InvalidArgument,
        "etcdserver: invalid downgrade target version",
    );
    refused(
        &url,
        CANCEL,
        "",
        Code::FailedPrecondition,
        "etcdserver: no inflight downgrade job",
    );
    refused(&url, 7, "3.4", Code::Unknown, "etcdserver: unknown method");
    // The gateway, as etcd's own e2e test calls it.
    let (status, _, body) = http(
        &url,
        "POST",
        "/v3/maintenance/downgrade",
        r#"{"action": 0, "version": "3.0"}"#,
    );
    assert!(
        status == 400
            && body.contains(r#""message":"etcdserver: invalid downgrade target version""#),
        "{status} {body}"
    );
    assert_enabled(&e.peer_url, false);
    assert_eq!(http(&e.peer_url, "POST", "/downgrade/enabled", "").0, 405);

    // ENABLE: the job is recorded and the cluster version becomes its target.
    assert_eq!(ok(&url, ENABLE, "3.4.23"), "3.5.0");
    assert_enabled(&e.peer_url, true);
    wait_cluster_version(&url, "3.4.0");
    assert!(
        metrics(&url).contains("etcd_cluster_version{cluster_version=\"3.4\"} 1"),
        "the metric follows the cluster version"
    );
    // Now at 3.4, the only target left would be 3.3 (etcd 3.6 answers the same).
    refused(
        &url,
        ENABLE,
        "3.4",
        Code::InvalidArgument,
        "etcdserver: invalid downgrade target version",
    );

    // The job is in the db as etcd writes it, and survives a clean stop and a kill -9.
    e.stop();
    assert_eq!(
        db_record(&data),
        r#"{"target-version":"3.4.0","enabled":true}"#
    );
    e.restart(OURS, &[]);
    e.restart(OURS, &[]);
    assert_enabled(&e.peer_url, true);
    // The restarted member leads again at once and decides the version: it stays lowered.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(cluster_version(&url), "3.4.0");

    // CANCEL answers the version at that moment; the version goes back up.
    assert_eq!(ok(&url, CANCEL, ""), "3.4.0");
    assert_enabled(&e.peer_url, false);
    wait_cluster_version(&url, "3.5.0");
    refused(
        &url,
        CANCEL,
        "",
        Code::FailedPrecondition,
        "etcdserver: no inflight downgrade job",
    );
    e.stop();
    assert_eq!(db_record(&data), r#"{"target-version":"","enabled":false}"#);

    // With auth on, only root may downgrade (etcd 3.6's check).
    e.restart(OURS, &[]);
    e.etcdctl_ok(&["user", "add", "root:root"]);
    e.etcdctl_ok(&["user", "add", "alice:alice"]);
    e.etcdctl_ok(&["auth", "enable"]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let call = |user: &str| {
        rt.block_on(async {
            use proto::etcdserverpb::{
                AuthenticateRequest, DowngradeRequest, auth_client::AuthClient,
                maintenance_client::MaintenanceClient,
            };
            let ch = tonic::transport::Endpoint::from_shared(url.clone())
                .expect("endpoint")
                .connect()
                .await
                .expect("connect");
            let token = AuthClient::new(ch.clone())
                .authenticate(AuthenticateRequest {
                    name: user.into(),
                    password: user.into(),
                })
                .await
                .expect("authenticate")
                .into_inner()
                .token;
            let mut req = tonic::Request::new(DowngradeRequest {
                action: VALIDATE,
                version: "3.4".into(),
            });
            req.metadata_mut()
                .insert("token", token.parse().expect("token metadata"));
            MaintenanceClient::new(ch).downgrade(req).await
        })
    };
    let denied = call("alice").expect_err("alice may not downgrade");
    assert_eq!(
        (denied.code(), denied.message()),
        (Code::PermissionDenied, "etcdserver: permission denied")
    );
    assert_eq!(
        call("root").expect("root validates").into_inner().version,
        "3.5.0"
    );
}

#[test]
fn three_members_lower_the_version_keep_the_job_across_restarts_and_cancel() {
    let dir = tmp();
    let mut c = Cluster::start(OURS, dir.path(), 3, false, FAST);
    for m in &c.nodes {
        wait_cluster_version(&m.client_url, "3.5.0");
    }
    // Any member serves it: a follower proposes the job and every member applies it.
    let leader = c.leader(Duration::from_secs(10));
    let follower = (leader + 1) % 3;
    assert_eq!(ok(&c.nodes[follower].client_url, ENABLE, "3.4"), "3.5.0");
    for m in &c.nodes {
        wait_cluster_version(&m.client_url, "3.4.0");
        assert_enabled(&m.advertise_peer, true);
    }
    c.nodes[leader].etcdctl_ok(&["put", "during", "downgrade"]);

    // A clean restart of a follower, then kill -9 of the leader: a new leader keeps the
    // version at the job's target.
    c.nodes[follower].stop();
    c.nodes[follower].spawn(OURS);
    c.nodes[follower].wait_healthy(Duration::from_secs(30));
    assert_enabled(&c.nodes[follower].advertise_peer, true);
    c.nodes[leader].kill9();
    let new_leader = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let l = c.leader(Duration::from_secs(20));
            if l != leader {
                break l;
            }
            assert!(Instant::now() < deadline, "no new leader");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    c.nodes[leader].spawn(OURS);
    c.nodes[leader].wait_healthy(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    for m in &c.nodes {
        assert_eq!(cluster_version(&m.client_url), "3.4.0", "{}", m.name);
        assert_enabled(&m.advertise_peer, true);
        m.wait_local("during", "downgrade", Duration::from_secs(10));
    }

    // The job's change is proposed only when every member says it can apply it.
    let down = (new_leader + 1) % 3;
    c.nodes[down].stop();
    refused(
        &c.nodes[new_leader].client_url,
        CANCEL,
        "",
        Code::FailedPrecondition,
        "downgrade: every member must answer and run etcd 3.5 or later to apply this change (etcd 3.4 cannot)",
    );
    c.nodes[down].spawn(OURS);
    c.nodes[down].wait_healthy(Duration::from_secs(30));

    assert_eq!(ok(&c.nodes[down].client_url, CANCEL, ""), "3.4.0");
    for m in &c.nodes {
        assert_enabled(&m.advertise_peer, false);
        wait_cluster_version(&m.client_url, "3.5.0");
    }
}
