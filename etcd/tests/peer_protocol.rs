// Bad peers on our peer port: another cluster, an incompatible version, a removed member,
// garbage bodies and streams, oversized and truncated bodies; each refused as etcd refuses it.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_support::{Cluster, Node};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const FAST: &[&str] = &["--heartbeat-interval", "50", "--election-timeout", "500"];

/// (status, body) of a curl request to `url` with `headers`, sending `body_file` if given.
fn curl(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body_file: Option<&std::path::Path>,
) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "-X",
        method,
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
    ]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    if let Some(f) = body_file {
        cmd.args(["-H", "Content-Type: application/protobuf"]);
        cmd.arg("--data-binary").arg(format!("@{}", f.display()));
    }
    let out = cmd.arg(url).output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The member's cluster and member IDs in hex, from `endpoint status`.
fn ids(m: &Node) -> (String, String) {
    let out = m.etcdctl_ok(&["endpoint", "status", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("status JSON");
    let h = &v[0]["Status"]["header"];
    (
        format!("{:x}", h["cluster_id"].as_u64().unwrap_or(0)),
        format!("{:x}", h["member_id"].as_u64().unwrap_or(0)),
    )
}

/// No received db (`<index>.snap.db`, or a part of one) is left in the member's snap dir.
fn assert_no_snap_db(m: &Node) {
    let snap = m.data_dir.join("member").join("snap");
    let leftovers: Vec<_> = std::fs::read_dir(&snap)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        leftovers
            .iter()
            .all(|n| !n.to_string_lossy().contains(".snap.db")),
        "{leftovers:?}"
    );
}

fn log_count(m: &Node, needle: &str) -> usize {
    std::fs::read_to_string(m.log_path())
        .unwrap_or_default()
        .matches(needle)
        .count()
}

/// etcd 3.4 from Debian's etcd-server, with the logger whose lines the tests count.
const ETCD: &str = "etcd";

/// What a peer-port request was answered: status, the headers that matter and the body.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    cluster_id: Option<String>,
    allow: Option<String>,
    body: String,
}

/// One request through curl, its answer's headers read from `-D` (the last block: a 100
/// Continue comes first for large bodies).
fn ask(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&std::path::Path>,
) -> Answer {
    let head = tempfile::NamedTempFile::new().expect("temp file");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "-X", method, "-o", "-", "-D"])
        .arg(head.path());
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    if let Some(f) = body {
        cmd.arg("--data-binary").arg(format!("@{}", f.display()));
    }
    answer(cmd, url, &head)
}

/// As `ask`, with `body` itself as the request body (JSON, or empty).
fn ask_with(method: &str, url: &str, body: &str) -> Answer {
    let head = tempfile::NamedTempFile::new().expect("temp file");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "-X", method, "-o", "-", "-D"])
        .arg(head.path())
        .args(["--data-binary", body]);
    answer(cmd, url, &head)
}

/// Runs curl `cmd` on `url` and reads the answer's status and headers from `head` (-D).
fn answer(mut cmd: Command, url: &str, head: &tempfile::NamedTempFile) -> Answer {
    let out = cmd.arg(url).output().expect("run curl");
    let text = std::fs::read_to_string(head.path()).unwrap_or_default();
    let block = text
        .split("\r\n\r\n")
        .filter(|b| b.starts_with("HTTP/"))
        .last()
        .unwrap_or_default();
    let mut lines = block.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if status == 0 {
        // No answer: say why, so a failure shows curl's error rather than an empty answer.
        return Answer {
            status,
            content_type: None,
            cluster_id: None,
            allow: None,
            body: format!("no answer: {}", String::from_utf8_lossy(&out.stderr)),
        };
    }
    let mut a = Answer {
        status,
        content_type: None,
        cluster_id: None,
        allow: None,
        body: String::from_utf8_lossy(&out.stdout).into_owned(),
    };
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "content-type" => a.content_type = Some(v.trim().to_string()),
            "x-etcd-cluster-id" => a.cluster_id = Some(v.trim().to_string()),
            "allow" => a.allow = Some(v.trim().to_string()),
            _ => {}
        }
    }
    a
}

/// A request whose body never arrives whole: `Content-Length: 1000`, 10 bytes, then the
/// client half-closes. Returns the raw answer.
fn cut_short(peer_url: &str, method: &str, path: &str) -> String {
    let addr = peer_url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the peer port");
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1000\r\n\r\n")
            .as_bytes(),
    )
    .expect("send");
    s.write_all(&[0x08; 10]).expect("send");
    s.shutdown(std::net::Shutdown::Write).expect("half-close");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got).into_owned();
    // The status line and the body; the Date header differs.
    let status = text.lines().next().unwrap_or_default().to_string();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    format!("{status} | {body}")
}

/// A raft message (MsgHeartbeat, term 2) from `from` to `to`.
fn heartbeat(from: u64, to: u64) -> Vec<u8> {
    use prost::Message as _;
    proto::raftpb::Message {
        r#type: proto::raftpb::MessageType::MsgHeartbeat as i32,
        from,
        to,
        term: 2,
        ..Default::default()
    }
    .encode_to_vec()
}

/// A request of the bad-peer table: label, method, URL, headers, body file.
type Case<'a> = (
    &'a str,
    &'a str,
    String,
    &'a [(&'a str, &'a str)],
    Option<&'a std::path::Path>,
);

/// How many times each bad request is sent: a peer redials every 100 ms.
const REPEAT: usize = 20;

/// The bad requests, each sent REPEAT times to member `m` of binary `bin` (one member, with a
/// learner that never starts and a member added and removed): the answers (every repetition
/// answered alike) and the member's log.
fn refuse_bad_peers(bin: &str, dir: &std::path::Path) -> (Vec<(String, Answer)>, String) {
    let flags: Vec<&str> = FAST.iter().copied().chain(["--logger", "zap"]).collect();
    let c = Cluster::start(bin, dir, 1, false, &flags);
    let m = &c.nodes[0];
    let (cid, mid) = ids(m);
    // etcd allows one learner at a time.
    let removed = cluster_support::add_idle_learner(m, "gone");
    m.etcdctl_ok(&["member", "remove", &removed]);
    let learner = cluster_support::add_idle_learner(m, "idle");
    let peer = &m.listen_peer;
    let files = tempfile::tempdir().expect("temp dir");
    let file = |name: &str, bytes: &[u8]| {
        let p = files.path().join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    };
    let empty = file("empty", b"");
    let garbage = file("garbage", &[0xff; 300]);
    let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex ID");
    let from_removed = file("from-removed", &heartbeat(hex(&removed), hex(&mid)));
    let other = [
        ("X-Etcd-Cluster-ID", "deadbeef"),
        ("X-Server-Version", "3.4.23"),
    ];
    let old = [
        ("X-Etcd-Cluster-ID", cid.as_str()),
        ("X-Server-Version", "2.3.8"),
    ];
    let good = |from: &'static str| {
        [
            ("X-Etcd-Cluster-ID", cid.clone()),
            ("X-Server-Version", "3.4.23".to_string()),
            ("X-Server-From", from.to_string()),
            ("X-Raft-To", mid.clone()),
        ]
    };
    let g1 = good("1");
    let g1: Vec<(&str, &str)> = g1.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let to_other = [
        ("X-Etcd-Cluster-ID", cid.as_str()),
        ("X-Server-Version", "3.4.23"),
        ("X-Raft-To", "1234"),
    ];
    let stream = |id: &str| format!("{peer}/raft/stream/message/{id}");
    let cases: Vec<Case> = vec![
        (
            "pipeline from another cluster",
            "POST",
            format!("{peer}/raft"),
            &other,
            Some(&empty),
        ),
        (
            "stream from another cluster",
            "GET",
            stream("1"),
            &other,
            None,
        ),
        (
            "pipeline from etcd 2.3",
            "POST",
            format!("{peer}/raft"),
            &old,
            Some(&empty),
        ),
        (
            "garbage pipeline message",
            "POST",
            format!("{peer}/raft"),
            &g1,
            Some(&garbage),
        ),
        (
            "pipeline message from a removed member",
            "POST",
            format!("{peer}/raft"),
            &g1,
            Some(&from_removed),
        ),
        (
            "stream of a removed member",
            "GET",
            stream(&removed),
            &g1,
            None,
        ),
        (
            "stream from an ID that is not hex",
            "GET",
            stream("zz"),
            &g1,
            None,
        ),
        (
            "stream of a member the cluster never had",
            "GET",
            stream("1234"),
            &g1,
            None,
        ),
        (
            "stream addressed to another member",
            "GET",
            stream(&learner),
            &to_other,
            None,
        ),
    ];
    let mut answers = Vec::new();
    for (label, method, url, headers, body) in cases {
        let first = ask(method, &url, headers, body);
        for _ in 1..REPEAT {
            assert_eq!(ask(method, &url, headers, body), first, "{bin}: {label}");
        }
        answers.push((label.to_string(), first));
    }
    for path in ["/leases", "/leases/internal", "/members/hashkv"] {
        let method = if path.contains("hashkv") {
            "GET"
        } else {
            "POST"
        };
        let first = cut_short(peer, method, path);
        for _ in 1..REPEAT {
            assert_eq!(cut_short(peer, method, path), first, "{bin}: {path}");
        }
        answers.push((
            format!("{path} body cut short"),
            Answer {
                status: 0,
                content_type: None,
                cluster_id: None,
                allow: None,
                body: first,
            },
        ));
    }
    // The member serves on.
    m.etcdctl_ok(&["put", "still", "here"]);
    let log = std::fs::read_to_string(m.log_path()).unwrap_or_default();
    (answers, log)
}

/// Bad peers are refused with etcd 3.4's statuses and bodies (compared with a running etcd 3.4
/// for the same requests), and each (peer, reason) is logged once with etcd's message where
/// etcd 3.4 logs the same line for every request: 20 lines per bad peer, and with a dialer
/// retrying every 100 ms, 10 a second.
#[test]
fn bad_peers_are_refused_as_etcd_34_refuses_them_and_logged_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (etcd, etcd_log) = refuse_bad_peers(ETCD, &dir.path().join("etcd"));
    let (ours, our_log) = refuse_bad_peers(OURS, &dir.path().join("ours"));
    // Cluster IDs differ between the two clusters; whether one is sent does not.
    let shape = |v: &[(String, Answer)]| -> Vec<(String, Answer)> {
        v.iter()
            .map(|(l, a)| {
                let mut a = a.clone();
                a.cluster_id = a.cluster_id.map(|_| "present".into());
                (l.clone(), a)
            })
            .collect()
    };
    assert_eq!(shape(&ours), shape(&etcd));
    // What etcd 3.4 answered, written out so that a change on either side shows here.
    let statuses: Vec<(String, u16, String)> = ours
        .iter()
        .map(|(l, a)| (l.clone(), a.status, a.body.clone()))
        .collect();
    let expect = [
        (
            "pipeline from another cluster",
            412,
            "cluster ID mismatch\n",
        ),
        ("stream from another cluster", 412, "cluster ID mismatch\n"),
        ("pipeline from etcd 2.3", 412, "incompatible version\n"),
        (
            "garbage pipeline message",
            400,
            "error unmarshalling raft message\n",
        ),
        (
            "pipeline message from a removed member",
            500,
            "error processing raft message\n",
        ),
        ("stream of a removed member", 410, "removed member\n"),
        ("stream from an ID that is not hex", 404, "invalid from\n"),
        (
            "stream of a member the cluster never had",
            404,
            "error sender not found\n",
        ),
        (
            "stream addressed to another member",
            412,
            "to field mismatch\n",
        ),
        (
            "/leases body cut short",
            0,
            "HTTP/1.1 400 Bad Request | error reading body\n",
        ),
        (
            "/leases/internal body cut short",
            0,
            "HTTP/1.1 400 Bad Request | error reading body\n",
        ),
        (
            "/members/hashkv body cut short",
            0,
            "HTTP/1.1 400 Bad Request | error reading body\n",
        ),
    ];
    assert_eq!(
        statuses,
        expect
            .iter()
            .map(|(l, s, b)| (l.to_string(), *s, b.to_string()))
            .collect::<Vec<_>>()
    );

    // etcd's messages: every request logged by etcd 3.4, each (peer, reason) once by ours.
    let count = |log: &str, needle: &str| log.matches(needle).count();
    for (needle, etcd_lines) in [
        // Two requests of another cluster, from one peer: once for ours.
        ("\"request cluster ID mismatch\"", 2 * REPEAT),
        ("\"failed to check version compatibility\"", REPEAT),
        ("\"failed to unmarshal Raft message\"", REPEAT),
        ("\"rejected Raft message from removed member\"", REPEAT),
        ("\"failed to process Raft message\"", REPEAT),
        (
            "\"rejected stream from remote peer because it was removed\"",
            REPEAT,
        ),
        ("\"failed to parse path into ID\"", REPEAT),
        ("\"failed to find remote peer in cluster\"", REPEAT),
        ("\"ignored streaming request; ID mismatch\"", REPEAT),
    ] {
        assert_eq!(
            count(&etcd_log, needle),
            etcd_lines,
            "etcd 3.4 logged {needle}"
        );
        assert_eq!(count(&our_log, needle), 1, "ours logged {needle}");
    }
    // Unreadable lease and hash bodies: etcd logs nothing; ours once per path.
    assert_eq!(count(&our_log, "failed to read the request body"), 3);
}

#[test]
fn requests_from_another_cluster_a_bad_version_or_with_bad_bodies_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = Cluster::start(OURS, dir.path(), 1, false, FAST);
    let m = &c.nodes[0];
    let (cid, mid) = ids(m);
    let peer = &m.listen_peer;
    let good = [
        ("X-Etcd-Cluster-ID", cid.as_str()),
        ("X-Server-Version", "3.4.23"),
        ("X-Server-From", "1"),
        ("X-Raft-To", mid.as_str()),
    ];

    // Another cluster: 412, as etcd answers.
    let other = [
        ("X-Etcd-Cluster-ID", "deadbeef"),
        ("X-Server-Version", "3.4.23"),
    ];
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").expect("write");
    assert_eq!(
        curl("POST", &format!("{peer}/raft"), &other, Some(&empty)),
        (412, "cluster ID mismatch\n".to_string())
    );
    assert_eq!(
        curl(
            "GET",
            &format!("{peer}/raft/stream/message/1"),
            &other,
            None
        )
        .0,
        412
    );
    // A version etcd 3.x would not talk to.
    let old = [
        ("X-Etcd-Cluster-ID", cid.as_str()),
        ("X-Server-Version", "2.3.8"),
    ];
    assert_eq!(
        curl("POST", &format!("{peer}/raft"), &old, Some(&empty)),
        (412, "incompatible version\n".to_string())
    );
    // Garbage where a raft message should be.
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, [0xffu8; 300]).expect("write");
    assert_eq!(
        curl("POST", &format!("{peer}/raft"), &good, Some(&garbage)),
        (400, "error unmarshalling raft message\n".to_string())
    );
    // A snapshot whose message frame is garbage, and one cut short.
    let (code, _) = curl(
        "POST",
        &format!("{peer}/raft/snapshot"),
        &good,
        Some(&garbage),
    );
    assert_eq!(code / 100, 4, "garbage snapshot answered {code}");
    let short = dir.path().join("short");
    std::fs::write(&short, 1000u64.to_be_bytes()).expect("write");
    let (code, _) = curl(
        "POST",
        &format!("{peer}/raft/snapshot"),
        &good,
        Some(&short),
    );
    assert_eq!(code / 100, 4, "truncated snapshot answered {code}");
    // No half-received db is left behind.
    assert_no_snap_db(m);
    // An oversized lease renewal is refused once past the bound: the rest is drained, not kept.
    // etcd 3.4 has no bound (it read a 200 MiB body whole and answered "lease not found"); ours
    // answers as etcd answers a body it could not read, without the cluster ID, and says so once.
    let big = dir.path().join("big");
    std::fs::write(&big, vec![0u8; 8 << 20]).expect("write");
    for _ in 0..3 {
        let a = ask("POST", &format!("{peer}/leases"), &[], Some(&big));
        assert_eq!(
            (a.status, a.cluster_id, a.body.as_str()),
            (400, None, "error reading body\n")
        );
    }
    assert_eq!(log_count(m, "failed to read the request body"), 1);
    // A stream from a member this cluster does not have.
    assert_eq!(
        curl("GET", &format!("{peer}/raft/stream/msgapp/1"), &good, None),
        (404, "error sender not found\n".to_string())
    );

    // The member serves on, and said why it refused each.
    m.etcdctl_ok(&["put", "still", "here"]);
    assert_eq!(log_count(m, "request cluster ID mismatch"), 1);
    assert_eq!(log_count(m, "failed to check version compatibility"), 1);
}

/// A peer that answers every request with 200 and a body of garbage, forever.
fn garbage_peer() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let _ = s.read(&mut buf);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 64\r\n\r\n",
                );
                let _ = s.write_all(&[0xab; 64]);
                std::thread::sleep(Duration::from_millis(100));
            });
        }
    });
    (url, served)
}

#[test]
fn a_removed_member_and_a_peer_streaming_garbage_are_refused_and_logged_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = Cluster::start(OURS, dir.path(), 1, false, FAST);
    let m = &c.nodes[0];
    let (cid, mid) = ids(m);

    // A learner whose peer URL answers garbage: our member keeps dialing it and serves on.
    let (url, served) = garbage_peer();
    let added = m.etcdctl_ok(&[
        "member",
        "add",
        "junk",
        "--learner",
        &format!("--peer-urls={url}"),
    ]);
    let id = added
        .split_whitespace()
        .find(|w| w.len() >= 8 && w.chars().all(|c| c.is_ascii_hexdigit()))
        .expect("member id")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while served.load(std::sync::atomic::Ordering::SeqCst) < 20 {
        assert!(
            Instant::now() < deadline,
            "our member stopped dialing the peer"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    m.etcdctl_ok(&["put", "k", "v"]);
    let established = log_count(m, "established TCP streaming connection");
    assert!(established <= 2, "logged {established} times");

    // Removed: its streams are refused with 410 Gone, as etcd answers a removed member.
    m.etcdctl_ok(&["member", "remove", &id]);
    let h = [
        ("X-Etcd-Cluster-ID", cid.as_str()),
        ("X-Server-Version", "3.4.23"),
        ("X-Server-From", id.as_str()),
        ("X-Raft-To", mid.as_str()),
    ];
    let (code, body) = curl(
        "GET",
        &format!("{}/raft/stream/message/{id}", m.listen_peer),
        &h,
        None,
    );
    assert_eq!((code, body.as_str()), (410, "removed member\n"));
    m.etcdctl_ok(&["put", "k", "v2"]);
}

/// A snapshot sender that stops sending halfway: the member cuts it off after the 30 s chunk
/// timeout with a 400, logs it once, keeps serving meanwhile and keeps no part of the db.
#[test]
fn a_stalled_snapshot_sender_is_cut_off_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = Cluster::start(OURS, dir.path(), 1, false, FAST);
    let m = &c.nodes[0];
    let (cid, mid) = ids(m);
    let addr = m.listen_peer.trim_start_matches("http://").to_string();
    let mut s = std::net::TcpStream::connect(&addr).expect("connect to the peer port");
    let head = format!(
        "POST /raft/snapshot HTTP/1.1\r\nHost: {addr}\r\nX-Etcd-Cluster-ID: {cid}\r\n\
         X-Server-Version: 3.4.23\r\nX-Server-From: 1\r\nX-Raft-To: {mid}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("send headers");
    // A message frame's length and the start of it, then nothing more.
    s.write_all(&64u64.to_be_bytes()).expect("send");
    s.write_all(&[0x08; 10]).expect("send");
    s.flush().expect("flush");
    let started = Instant::now();
    // The member serves while the sender stalls.
    m.etcdctl_ok(&["put", "during-the-stall", "v"]);
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.windows(23).any(|w| w == b"snapshot sender stalled") {
            break;
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("snapshot sender stalled"),
        "after {:?}: {answer:?}",
        started.elapsed()
    );
    eprintln!("cut off after {:?}", started.elapsed());
    assert_no_snap_db(m);
    assert_eq!(log_count(m, "refused a snapshot"), 1);
    m.etcdctl_ok(&["put", "after-the-stall", "v"]);
}

/// Members of a cluster that a new member joins, faked: each answers `GET /members` with
/// all of them plus the joining member (not started, at `joining_peer_url`), and `GET
/// /version` with the cluster version in `answers` (None: it closes the connection without an
/// answer). Returns the `--initial-cluster` to join with and whether the joining member has
/// dialed a raft stream to one of them (it passed its checks and started).
fn fake_cluster(
    joining_peer_url: &str,
    answers: &[Option<&'static str>],
) -> (String, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listeners: Vec<TcpListener> = answers
        .iter()
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let urls: Vec<String> = listeners
        .iter()
        .map(|l| format!("http://{}", l.local_addr().expect("addr")))
        .collect();
    let mut members: Vec<String> = urls
        .iter()
        .enumerate()
        .map(|(i, u)| {
            format!(
                "{{\"id\":{},\"peerURLs\":[\"{u}\"],\"name\":\"m{}\",\"clientURLs\":[\"{u}\"]}}",
                4660 + i,
                i + 1
            )
        })
        .collect();
    members.push(format!(
        "{{\"id\":{},\"peerURLs\":[\"{joining_peer_url}\"]}}",
        4660 + answers.len()
    ));
    let list = std::sync::Arc::new(format!("[{}]\n", members.join(",")));
    let dialed = std::sync::Arc::new(AtomicBool::new(false));
    for (l, answer) in listeners.into_iter().zip(answers.iter().copied()) {
        let (list, dialed) = (list.clone(), dialed.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                let mut buf = [0u8; 4096];
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let n = s.read(&mut buf).unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                let (status, body) = if req.starts_with("GET /members ") {
                    ("200 OK", list.to_string())
                } else if req.starts_with("GET /version ") {
                    match answer {
                        Some(v) => (
                            "200 OK",
                            format!("{{\"etcdserver\":\"3.4.23\",\"etcdcluster\":\"{v}\"}}"),
                        ),
                        None => continue,
                    }
                } else {
                    if req.starts_with("GET /raft/stream/") {
                        dialed.store(true, Ordering::SeqCst);
                    }
                    ("404 Not Found", "404 page not found\n".to_string())
                };
                let _ = s.write_all(
                    format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nX-Etcd-Cluster-Id: abcd\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            }
        });
    }
    let ic = urls
        .iter()
        .enumerate()
        .map(|(i, u)| format!("m{}={u}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    (ic, dialed)
}

/// Whether a member of `bin` joining (`--initial-cluster-state existing`) fake members that
/// answer `/version` with `answers` starts (true: it dialed their streams) or refuses, as
/// etcd does, with "incompatible with current running cluster" (false). A refusing member of
/// ours writes no data dir.
fn joins(bin: &str, dir: &std::path::Path, answers: &[Option<&'static str>]) -> bool {
    std::fs::create_dir_all(dir).expect("create the member's dir");
    let mut m = Node::new_for_join(dir, "new");
    let (ic, dialed) = fake_cluster(&m.advertise_peer, answers);
    m.initial_cluster = format!("{ic},new={}", m.advertise_peer);
    m.state = "existing";
    m.extra = FAST
        .iter()
        .chain(&["--logger", "zap"])
        .map(|s| s.to_string())
        .collect();
    m.spawn(bin);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if dialed.load(std::sync::atomic::Ordering::SeqCst) {
            return true;
        }
        if let Some(status) = m.exited() {
            m.child = None;
            assert!(!status.success(), "{bin} {answers:?}: exited with {status}");
            assert!(
                log_count(&m, "incompatible with current running cluster") >= 1,
                "{bin} {answers:?}: log ends:\n{}",
                m.log_tail(10)
            );
            if bin == OURS {
                assert!(!m.data_dir.join("member").join("wal").exists());
            }
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "{bin} {answers:?}: neither started nor stopped; log ends:\n{}",
            m.log_tail(10)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A member joining a running cluster asks each member's `/version` first, and ours decides
/// as etcd 3.4.23 and 3.5.16 do (each case run against all three): a member that cannot be
/// asked or has not decided its version (`not_decided`) is skipped; a cluster version above
/// its own refuses the join (3.6 here: ours and etcd 3.5 are 3.5, etcd 3.4 is 3.4), as does
/// one below 3.0; and at least one member must answer a version it can run at.
#[test]
fn joining_checks_the_cluster_version_as_etcd_34_and_35_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let e35 = support::etcd35();
    let cases: [(&[Option<&'static str>], bool); 8] = [
        (&[Some("3.4.0")], true),
        (&[Some("not_decided")], false),
        (&[None], false),
        (&[Some("not_decided"), Some("3.4.0")], true),
        (&[None, Some("3.4.0")], true),
        (&[None, Some("not_decided")], false),
        (&[Some("3.4.0"), Some("3.6.0")], false),
        (&[Some("2.3.0")], false),
    ];
    let mut n = 0;
    for (answers, want) in cases {
        for bin in [ETCD, e35.as_str(), OURS] {
            n += 1;
            assert_eq!(
                joins(bin, &dir.path().join(n.to_string()), answers),
                want,
                "{bin} joining members whose /version answers {answers:?}"
            );
        }
    }
}

/// A JSON value's shape: its keys in order and the kinds of its values (ids, URLs, times and
/// hashes differ between two clusters; what is written, in what order, must not).
fn shape(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::Number(n) if n.as_i64().is_some_and(|n| n < 0) => Value::from(-1),
        Value::Number(_) => Value::from(0),
        Value::String(_) => Value::from("s"),
        other => other.clone(),
    }
}

/// What one member's peer port answered to the probes of `peer_endpoints_answer_as_etcd_34s`.
struct Endpoints {
    /// (label, answer with JSON bodies reduced to their shape and cluster IDs to "present").
    shapes: Vec<(String, Answer)>,
    /// HashKV of the same writes at the current revision, and after a compaction.
    hashes: (u64, u64),
}

/// Parses `a`'s JSON body (which must end as `newline` says) and reduces the answer to its shape.
fn json_shape(a: &Answer, newline: bool) -> (Answer, serde_json::Value) {
    assert_eq!(a.body.ends_with('\n'), newline, "{a:?}");
    let v: serde_json::Value =
        serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("not JSON ({e}): {a:?}"));
    let mut out = a.clone();
    out.body = shape(&v).to_string();
    (out, v)
}

/// The peer endpoints of a one-member cluster of `bin`: probing, members (with a learner that
/// never started, then with one that did and was promoted through the endpoint), version,
/// hashkv before and after a compaction, promote's refusals.
///
/// With etcd 3.4's default logger (capnslog) a hashkv of a compacted revision is answered by
/// closing the connection (curl: "Empty reply from server", nothing logged); with zap it is the
/// 400 below. Both kinds run with zap here.
fn probe_endpoints(bin: &str, dir: &std::path::Path) -> Endpoints {
    let flags: Vec<&str> = FAST.iter().copied().chain(["--logger", "zap"]).collect();
    let mut c = Cluster::start(bin, dir, 1, false, &flags);
    let (cid, mid) = ids(&c.nodes[0]);
    let peer = c.nodes[0].listen_peer.clone();
    let dec = |hex: &str| u64::from_str_radix(hex, 16).expect("hex ID").to_string();
    let present = |mut a: Answer| {
        if let Some(c) = &a.cluster_id {
            assert_eq!(*c, cid, "the cluster ID sent is the member's");
            a.cluster_id = Some("present".into());
        }
        a
    };
    let mut shapes: Vec<(String, Answer)> = Vec::new();
    let mut keep = |label: &str, a: Answer| shapes.push((label.to_string(), present(a)));

    for method in ["GET", "POST"] {
        let a = ask_with(method, &format!("{peer}/raft/probing"), "");
        let (s, v) = json_shape(&a, true);
        assert_eq!(v["OK"], true);
        // Go's RFC 3339 with nanoseconds, in UTC.
        let now = v["Now"].as_str().expect("Now");
        assert!(
            now.ends_with('Z') && now.len() >= 20 && now.as_bytes()[10] == b'T',
            "{now}"
        );
        keep(&format!("{method} /raft/probing"), s);
    }

    // A learner that never started: it has no name nor client URLs yet, and cannot be promoted.
    let idle = cluster_support::add_idle_learner(&c.nodes[0], "idle");
    let (s, v) = json_shape(&ask_with("GET", &format!("{peer}/members"), ""), true);
    let ids: Vec<u64> = v
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| m["id"].as_u64().expect("a decimal id"))
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "not sorted by id: {ids:?}"
    );
    // The two members' order follows their IDs; the shapes are compared in a fixed order.
    let mut members: Vec<String> = v
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| shape(m).to_string())
        .collect();
    members.sort();
    keep(
        "GET /members, a learner never started",
        Answer {
            body: members.join(","),
            ..s
        },
    );
    keep(
        "POST /members",
        ask_with("POST", &format!("{peer}/members"), ""),
    );
    let promote = |id: &str| ask_with("POST", &format!("{peer}/members/promote/{id}"), "");
    keep("promote a learner not in sync", promote(&dec(&idle)));
    keep("promote a voter", promote(&dec(&mid)));
    keep("promote an unknown decimal ID", promote("123"));
    keep("promote a hex ID", promote("c1dda8f7168399ba"));
    keep("promote zz", promote("zz"));
    keep(
        "GET /members/promote",
        ask_with("GET", &format!("{peer}/members/promote/{}", dec(&idle)), ""),
    );
    c.nodes[0].etcdctl_ok(&["member", "remove", &idle]);

    let (s, v) = json_shape(&ask_with("GET", &format!("{peer}/version"), ""), false);
    assert!(
        v["etcdcluster"].as_str().is_some_and(|c| c.ends_with(".0")),
        "{v}"
    );
    keep("GET /version", s);
    keep(
        "POST /version",
        ask_with("POST", &format!("{peer}/version"), ""),
    );

    // The same three writes on both: the same hash.
    for (k, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
        c.nodes[0].etcdctl_ok(&["put", k, v]);
    }
    let hashkv = |body: &str| ask_with("GET", &format!("{peer}/members/hashkv"), body);
    let (s, v) = json_shape(&hashkv("{\"revision\":0}"), false);
    assert_eq!(
        (
            v["header"]["revision"].as_i64(),
            v["compact_revision"].as_i64()
        ),
        (Some(4), Some(-1))
    );
    let before = v["hash"].as_u64().expect("hash");
    keep("hashkv at revision 0", s);
    keep("hashkv with {}", json_shape(&hashkv("{}"), false).0);
    c.nodes[0].etcdctl_ok(&["compact", "3"]);
    keep("hashkv of a compacted revision", hashkv("{\"revision\":2}"));
    keep("hashkv of a future revision", hashkv("{\"revision\":99}"));
    keep("hashkv of garbage", hashkv("garbage"));
    keep("hashkv without a body", hashkv(""));
    keep(
        "POST /members/hashkv",
        ask_with("POST", &format!("{peer}/members/hashkv"), "{}"),
    );
    let (s, v) = json_shape(&hashkv("{\"revision\":4}"), false);
    assert_eq!(v["compact_revision"].as_i64(), Some(3), "{v}");
    let after = v["hash"].as_u64().expect("hash");
    keep("hashkv after a compaction", s);

    // A learner that runs and catches up, promoted through the endpoint: the member list.
    let (m2, out) = cluster_support::start_learner(&c.nodes[0], dir, "m2", bin, &flags);
    let added = cluster_support::parse_member_add(&out);
    let deadline = Instant::now() + Duration::from_secs(30);
    let promoted = loop {
        let a = promote(&dec(&added.id));
        if a.status == 200 || !a.body.contains("in sync") {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "{}: m2 never caught up: {a:?}",
            bin
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (s, v) = json_shape(&promoted, true);
    // Both voters now; m2 may not have published its name yet, so only the voters' fields.
    assert!(
        v.as_array()
            .expect("a list")
            .iter()
            .all(|m| m.get("isLearner").is_none()),
        "{v}"
    );
    keep(
        "promote a learner in sync",
        Answer {
            body: String::new(),
            ..s
        },
    );
    c.nodes.push(m2);
    Endpoints {
        shapes,
        hashes: (before, after),
    }
}

/// `/raft/probing`, `/members`, `/members/promote/<id>`, `/version` and `/members/hashkv` on our
/// peer port against etcd 3.4's for the same requests: statuses, content types, whether the
/// cluster ID is sent, error bodies, JSON key order and value kinds, trailing newlines, and the
/// hashes of the same writes.
#[test]
fn peer_endpoints_answer_as_etcd_34s() {
    let dir = tempfile::tempdir().expect("temp dir");
    let etcd = probe_endpoints(ETCD, &dir.path().join("etcd"));
    let ours = probe_endpoints(OURS, &dir.path().join("ours"));
    assert_eq!(ours.shapes.len(), etcd.shapes.len());
    for ((label, o), (_, e)) in ours.shapes.iter().zip(&etcd.shapes) {
        assert_eq!(o, e, "{label}: ours, then etcd 3.4's");
    }
    assert_eq!(ours.hashes, etcd.hashes, "HashKV of the same writes");
    // A few answers written out, so that a change on both sides still shows.
    let by = |l: &str| &ours.shapes.iter().find(|(x, _)| x == l).expect(l).1;
    assert_eq!(
        (
            by("promote a learner not in sync").status,
            by("promote a learner not in sync").body.as_str()
        ),
        (
            412,
            "etcdserver: can only promote a learner member which is in sync with leader\n"
        )
    );
    assert_eq!(by("hashkv of garbage").cluster_id, None);
    assert_eq!(by("GET /members/promote").allow.as_deref(), Some("POST"));
    assert_eq!(
        by("hashkv at revision 0").body,
        r#"{"header":{"revision":0},"hash":0,"compact_revision":-1}"#
    );
}

/// One request as a listener saw it: the request line, the headers in order as written on
/// the wire (case kept) and the body.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A listener standing in for a member's peer URL: records every request and answers each
/// with a 404 on a closed connection (so a member redials and resends).
fn recording_peer() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Seen>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let seen: std::sync::Arc<std::sync::Mutex<Vec<Seen>>> = Default::default();
    let keep = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let keep = keep.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break Some(i);
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break None,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let Some(end) = end else { return };
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                let mut lines = head.split("\r\n");
                let line = lines.next().unwrap_or_default().to_string();
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(": "))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = buf[end + 4..].to_vec();
                while body.len() < len {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => body.extend_from_slice(&chunk[..n]),
                    }
                }
                keep.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
                    line,
                    headers,
                    body,
                });
                let _ = s.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    (url, seen)
}

/// The kinds of request a leader sends a new learner, keyed by method and path (IDs out).
const SENT_KINDS: [&str; 6] = [
    "GET /raft/stream/message/{FROM}",
    "GET /raft/stream/msgapp/{FROM}",
    "POST /raft",
    "GET /raft/probing",
    "GET /version",
    "GET /members/hashkv",
];

/// A request as `headers_sent` reports it: line, headers and (for hashkv) body, with the
/// sender's IDs, URLs and version as placeholders.
type Sent = (String, Vec<(String, String)>, String);

/// The first request of each kind a one-member cluster of `bin` (leading, with a corruption
/// check every second) sends to a learner whose peer URL is a recording listener, with its
/// member's IDs, URLs and version written as placeholders.
fn headers_sent(bin: &str, dir: &std::path::Path) -> Vec<Sent> {
    let flags: Vec<&str> = FAST
        .iter()
        .copied()
        .chain(["--experimental-corrupt-check-time", "1s"])
        .collect();
    let c = Cluster::start(bin, dir, 1, false, &flags);
    let m = &c.nodes[0];
    let (cid, mid) = ids(m);
    let (url, seen) = recording_peer();
    let out = m.etcdctl_ok(&[
        "member",
        "add",
        "rec",
        "--learner",
        &format!("--peer-urls={url}"),
    ]);
    let to = cluster_support::parse_member_add(&out).id;
    let version = m.etcdctl_ok(&["endpoint", "status", "-w", "json"]);
    let version: serde_json::Value = serde_json::from_str(&version).expect("status JSON");
    let version = version[0]["Status"]["version"]
        .as_str()
        .expect("version")
        .to_string();
    let host = url.trim_start_matches("http://").to_string();
    let placeholders = |s: &str| {
        s.replace(&host, "{HOST}")
            .replace(&m.advertise_peer, "{PEER_URL}")
            .replace(&cid, "{CLUSTER}")
            .replace(&mid, "{FROM}")
            .replace(&to, "{TO}")
            .replace(&version, "{VERSION}")
    };
    // Probes go every 4 s; everything else within a second.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got: Vec<Seen> = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let first = |kind: &str| {
            got.iter()
                .find(|s| placeholders(&s.line) == format!("{kind} HTTP/1.1"))
                .cloned()
        };
        if SENT_KINDS.iter().all(|k| first(k).is_some()) {
            return SENT_KINDS
                .iter()
                .filter_map(|k| first(k))
                .map(|s| {
                    let len = s.body.len().to_string();
                    let headers = s
                        .headers
                        .iter()
                        .map(|(k, v)| {
                            let v = if k == "Content-Length" {
                                assert_eq!(*v, len, "{bin}: {}", s.line);
                                "{LEN}".to_string()
                            } else {
                                placeholders(v)
                            };
                            (k.clone(), v)
                        })
                        .collect();
                    let body = if s.line.contains("hashkv") {
                        String::from_utf8_lossy(&s.body).into_owned()
                    } else {
                        String::new()
                    };
                    (placeholders(&s.line), headers, body)
                })
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "{bin} sent {:?}",
            got.iter().map(|s| s.line.clone()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The headers our member sends a peer, against those an etcd 3.4 member sends: a learner
/// whose peer URL is a recording listener gets the leader's stream dials, pipeline messages,
/// probes, version polls and hashkv requests; every header name, in the order etcd writes
/// them (Go's canonical case), with the sender's values. etcd's client also sends
/// `Accept-Encoding: gzip` (Go adds it and would unzip an answer); ours does not, since it
/// would not unzip one (docs/RAFTHTTP.md §2.2).
#[test]
fn our_member_sends_the_headers_an_etcd_34_member_sends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let etcd = headers_sent(ETCD, &dir.path().join("etcd"));
    let ours = headers_sent(OURS, &dir.path().join("ours"));
    let gzip = ("Accept-Encoding".to_string(), "gzip".to_string());
    for ((line, e, e_body), (_, o, o_body)) in etcd.iter().zip(&ours) {
        assert_eq!(e.last(), Some(&gzip), "etcd 3.4's {line}");
        assert!(!o.contains(&gzip), "ours: {line}");
        assert_eq!(*o, e[..e.len() - 1], "{line}: ours, then etcd 3.4's");
        // The corruption check asks for one revision, as etcd's JSON.
        if line.contains("hashkv") {
            let shape = |b: &str| {
                b.chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect::<String>()
            };
            assert_eq!(shape(o_body), shape(e_body), "{o_body} vs {e_body}");
            assert_eq!(shape(o_body), "{\"revision\":}");
        }
    }
    // etcd's names and values, written out: the stream dial carries every raft header.
    let dial = &ours[0].1;
    let expect = [
        ("Host", "{HOST}"),
        ("User-Agent", "Go-http-client/1.1"),
        ("X-Etcd-Cluster-Id", "{CLUSTER}"),
        ("X-Min-Cluster-Version", "3.0.0"),
        ("X-Peerurls", "{PEER_URL}"),
        ("X-Raft-To", "{TO}"),
        ("X-Server-From", "{FROM}"),
        ("X-Server-Version", "{VERSION}"),
    ];
    assert_eq!(
        *dial,
        expect
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    );
}
