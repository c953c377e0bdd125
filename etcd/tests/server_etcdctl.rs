// Our server driven by the real Go etcdctl 3.4, side by side with the real etcd 3.4: the same
// commands on fresh servers must print the same thing (member and cluster IDs and URLs, which
// are derived from the free ports each server got, are normalised).

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};

use support::RealEtcd;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

/// Runs etcdctl with optional stdin; returns (exit code, stdout, first stderr line that is not
/// the Go client's retry log).
fn ctl(e: &RealEtcd, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let out = e.etcdctl_stdin(args, stdin.unwrap_or(""));
    let err = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("retry_interceptor"))
        .collect::<Vec<_>>()
        .join("\n");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

/// Grants, attaches, inspects, renews and revokes a lease; returns what etcdctl printed with
/// the lease id replaced.
fn lease_script(e: &RealEtcd) -> Vec<(i32, String, String)> {
    let (_, granted, _) = ctl(e, &["lease", "grant", "100"], None);
    let id = granted
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    let lease_flag = format!("--lease={id}");
    let steps: Vec<Vec<&str>> = vec![
        vec!["put", "lk", "v", &lease_flag],
        vec!["put", "lk2", "v", &lease_flag],
        vec!["lease", "timetolive", &id, "--keys"],
        vec!["lease", "list"],
        vec!["lease", "keep-alive", "--once", &id],
        vec!["get", "lk", "-w", "json"],
        vec!["lease", "revoke", &id],
        vec!["get", "lk", "--prefix"],
        vec!["lease", "timetolive", &id],
        vec!["lease", "revoke", &id],
        vec!["put", "x", "v", "--lease=1234"],
        vec!["lease", "grant", "9000000001"],
    ];
    let mut out = vec![(0, granted.replace(&id, "<LEASE>"), String::new())];
    let id_dec = i64::from_str_radix(&id, 16).unwrap_or(0).to_string();
    for args in steps {
        let (c, o, err) = ctl(e, &args, None);
        // A second may tick between grant and timetolive on either server.
        let o = o
            .replace(&id, "<LEASE>")
            .replace(&id_dec, "<LEASE>")
            .replace("remaining(99s)", "remaining(100s)");
        let o = sort_attached_keys(&o);
        out.push((c, o, err.replace(&id, "<LEASE>")));
    }
    out
}

/// etcd lists a lease's keys in Go map order (random); compare them as a set.
fn sort_attached_keys(s: &str) -> String {
    let Some(start) = s.find("attached keys([") else {
        return s.to_string();
    };
    let from = start + "attached keys([".len();
    let Some(len) = s[from..].find("])") else {
        return s.to_string();
    };
    let mut keys: Vec<&str> = s[from..from + len].split(' ').collect();
    keys.sort_unstable();
    format!("{}{}{}", &s[..from], keys.join(" "), &s[from + len..])
}

/// Runs a (never ending) etcdctl watch for a second and returns what it printed.
fn watch_for_a_second(e: &RealEtcd, args: &[&str]) -> String {
    let mut c = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(&e.client_url)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run etcdctl watch");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let _ = c.kill();
    let out = c.wait_with_output().expect("wait etcdctl watch");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Replaces what legitimately differs between two fresh servers.
fn normalise(s: &str, e: &RealEtcd, member_id: u64, cluster_id: u64) -> String {
    s.replace(&member_id.to_string(), "<MEMBER>")
        .replace(&format!("{member_id:x}"), "<MEMBER>")
        .replace(&cluster_id.to_string(), "<CLUSTER>")
        .replace(&format!("{cluster_id:x}"), "<CLUSTER>")
        .replace(&e.client_url, "<CLIENT-URL>")
        .replace(&e.peer_url, "<PEER-URL>")
}

fn ids(e: &RealEtcd) -> (u64, u64) {
    let (_, out, _) = ctl(e, &["get", "x", "-w", "json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json header");
    (
        v["header"]["member_id"].as_u64().expect("member id"),
        v["header"]["cluster_id"].as_u64().expect("cluster id"),
    )
}

/// (args, stdin) run in order on both servers.
fn script() -> Vec<(Vec<&'static str>, Option<&'static str>)> {
    let c = |a: &[&'static str]| (a.to_vec(), None);
    vec![
        c(&["put", "foo", "bar"]),
        c(&["put", "foo1", "bar1", "-w", "json"]),
        c(&["put", "foo2", "bar2", "--prev-kv"]),
        c(&["put", "foo2", "bar22", "--prev-kv", "-w", "json"]),
        c(&["put", "zoo", "z"]),
        c(&["get", "foo"]),
        c(&["get", "foo", "-w", "json"]),
        c(&["get", "foo", "-w", "fields"]),
        c(&["get", "foo", "--prefix"]),
        c(&["get", "foo", "--prefix", "--limit", "2", "-w", "json"]),
        c(&["get", "foo", "--from-key", "--keys-only"]),
        c(&["get", "foo", "--prefix", "--keys-only", "-w", "json"]),
        c(&["get", "foo", "--prefix", "--print-value-only"]),
        c(&[
            "get",
            "foo",
            "--prefix",
            "--sort-by",
            "VALUE",
            "--order",
            "DESCEND",
        ]),
        c(&[
            "get",
            "foo",
            "--prefix",
            "--sort-by",
            "MODIFY",
            "--order",
            "ASCEND",
            "-w",
            "json",
        ]),
        c(&["get", "foo2", "--rev", "4"]),
        c(&["get", "foo", "--prefix", "--consistency", "s"]),
        c(&[
            "get",
            "",
            "--from-key",
            "--min-mod-revision",
            "4",
            "--keys-only",
        ]),
        c(&["get", "nothing-here", "-w", "json"]),
        c(&["get", "foo", "--rev", "100"]),
        c(&["put", "", "v"]),
        (
            vec!["txn"],
            Some("value(\"foo\") = \"bar\"\n\nput t1 yes\nget foo\n\nput t1 no\n\n"),
        ),
        (
            vec!["txn", "-w", "json"],
            Some("mod(\"zoo\") > \"100\"\n\nput t2 yes\n\nput t2 no\ndel zoo\n\n"),
        ),
        (vec!["txn"], Some("\n\nput d 1\nput d 2\n\n\n")),
        c(&["del", "foo1"]),
        c(&["del", "foo", "--prefix", "--prev-kv"]),
        c(&["del", "nothing"]),
        c(&["del", "t", "--from-key", "-w", "json"]),
        c(&["compaction", "3"]),
        c(&["get", "foo", "--rev", "2"]),
        c(&["compaction", "2"]),
        c(&["member", "list"]),
        c(&["member", "list", "-w", "json"]),
        c(&["defrag"]),
        c(&["get", "zoo", "-w", "json"]),
        c(&["alarm", "list"]),
    ]
}

#[test]
fn real_etcdctl_sees_the_same_as_against_real_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let real = RealEtcd::start(&tmp.path().join("real"), "node");
    let ours = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "node", &[]);
    let (rm, rc) = ids(&real);
    let (om, oc) = ids(&ours);
    let mut succeeded = 0;
    for (args, stdin) in script() {
        let (rcode, rout, rerr) = ctl(&real, &args, stdin);
        if rcode == 0 && !rout.is_empty() {
            succeeded += 1;
        }
        let (ocode, oout, oerr) = ctl(&ours, &args, stdin);
        assert_eq!(
            ocode, rcode,
            "exit code of etcdctl {args:?}\nours: {oout}{oerr}\nreal: {rout}{rerr}"
        );
        assert_eq!(
            normalise(&oout, &ours, om, oc),
            normalise(&rout, &real, rm, rc),
            "stdout of etcdctl {args:?}"
        );
        assert_eq!(oerr, rerr, "stderr of etcdctl {args:?}");
    }
    // endpoint health prints a timing; compare its shape.
    // Watches replay history from a revision and keep running: compare what they printed in
    // their first second.
    for args in [
        vec!["watch", "foo", "--prefix", "--rev", "4"],
        vec![
            "watch",
            "foo",
            "--prefix",
            "--rev",
            "4",
            "--prev-kv",
            "-w",
            "json",
        ],
        vec!["watch", "", "--from-key", "--rev", "5"],
        vec!["watch", "foo", "--rev", "1", "-w", "json"],
    ] {
        let r = watch_for_a_second(&real, &args);
        let o = watch_for_a_second(&ours, &args);
        assert!(!r.is_empty(), "the real etcd printed nothing for {args:?}");
        assert_eq!(
            normalise(&o, &ours, om, oc),
            normalise(&r, &real, rm, rc),
            "etcdctl {args:?}"
        );
    }
    // The same history gives the same HashKV as etcd's.
    let hash = |e: &RealEtcd| -> serde_json::Value {
        let (code, out, err) = ctl(e, &["endpoint", "hashkv", "-w", "json"], None);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v[0]["HashKV"]["hash"].clone()
    };
    assert_eq!(hash(&ours), hash(&real), "endpoint hashkv");
    // Leases: the ids differ (random on both), the rest must not.
    let norm = |v: Vec<(i32, String, String)>, e: &RealEtcd, m, c| -> Vec<(i32, String, String)> {
        v.into_iter()
            .map(|(code, o, err)| (code, normalise(&o, e, m, c), err))
            .collect()
    };
    let rl = norm(lease_script(&real), &real, rm, rc);
    let ol = norm(lease_script(&ours), &ours, om, oc);
    assert_eq!(ol, rl, "lease commands");
    // The script is mostly commands that work and print something: a typo that fails on both
    // servers alike would otherwise compare nothing.
    assert!(
        succeeded >= 25,
        "only {succeeded} commands printed output on the real etcd"
    );
    // etcdctl 3.4 prints the health line on stderr.
    let (code, _, err) = ctl(&ours, &["endpoint", "health"], None);
    assert_eq!(code, 0);
    assert!(
        err.contains("is healthy: successfully committed proposal"),
        "{err}"
    );
}

#[test]
fn acknowledged_writes_survive_kill_9_and_revisions_continue() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ours = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "node", &[]);
    for i in 0..50 {
        let (code, _, err) = ctl(&ours, &["put", &format!("k{i:03}"), &format!("v{i}")], None);
        assert_eq!(code, 0, "{err}");
    }
    ours.restart(OURS, &[]);
    let (_, out, _) = ctl(
        &ours,
        &["get", "k", "--prefix", "--keys-only", "-w", "json"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["count"], 50);
    assert_eq!(v["header"]["revision"], 51);
    let (_, out, _) = ctl(&ours, &["put", "after", "restart", "-w", "json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["header"]["revision"], 52);
    let (_, out, _) = ctl(&ours, &["get", "k049", "--print-value-only"], None);
    assert_eq!(out.trim(), "v49");
}

#[test]
fn leases_survive_a_restart_and_then_expire_with_their_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ours = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "node", &[]);
    let (_, granted, _) = ctl(&ours, &["lease", "grant", "4"], None);
    let id = granted.split_whitespace().nth(1).unwrap().to_string();
    let (code, _, err) = ctl(&ours, &["put", "temp", "v", &format!("--lease={id}")], None);
    assert_eq!(code, 0, "{err}");
    // Keys that left the lease before the restart (overwritten without it, deleted) stay
    // detached after it: the key's last write decides.
    let lease = format!("--lease={id}");
    for args in [
        &["put", "moved", "v", lease.as_str()][..],
        &["put", "moved", "v2"],
        &["put", "gone", "v", lease.as_str()],
        &["del", "gone"],
    ] {
        let (code, _, err) = ctl(&ours, args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    ours.restart(OURS, &[]);
    let (_, ttl, _) = ctl(&ours, &["lease", "timetolive", &id, "--keys"], None);
    assert!(ttl.contains("attached keys([temp])"), "{ttl}");
    // TTL 4s plus the election timeout a restarted leader grants: gone within ~8s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let (_, out, _) = ctl(&ours, &["get", "temp", "--print-value-only"], None);
        if out.trim().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let (_, ttl, _) = ctl(&ours, &["lease", "timetolive", &id], None);
    assert!(ttl.contains("already expired"), "{ttl}");
}

/// etcdctl 3.4's per-endpoint calls (status, snapshot) send a `:authority` with a scheme; they
/// must work, and a snapshot of ours must restore into a real etcd that serves our data.
#[test]
fn endpoint_status_and_snapshot_save_restore_into_real_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "node", &[]);
    for i in 0..20 {
        ctl(
            &ours,
            &["put", &format!("snap-{i:02}"), &format!("v{i}")],
            None,
        );
    }
    let (code, out, err) = ctl(&ours, &["endpoint", "status", "-w", "json"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let st = &v[0]["Status"];
    assert_eq!(st["version"], etcd::version::ETCD_VERSION);
    assert_eq!(st["header"]["revision"], 21);
    assert_eq!(st["leader"], st["header"]["member_id"]);
    assert!(st["dbSize"].as_i64().unwrap() > 0);

    let file = tmp.path().join("ours.snapshot.db");
    let (code, _, err) = ctl(&ours, &["snapshot", "save", file.to_str().unwrap()], None);
    assert_eq!(code, 0, "{err}");
    // The real etcdctl checks the sha256 trailer while restoring.
    let restored = tmp.path().join("restored");
    let (code, _, err) = ctl(
        &ours,
        &[
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--data-dir",
            restored.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    // Serve the restored dir with the real etcd (default member name and peer URL, as restore
    // wrote them).
    let client = format!("http://127.0.0.1:{}", support::free_port());
    let mut real = std::process::Command::new("etcd")
        .args(["--data-dir", restored.to_str().unwrap()])
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{}", support::free_port()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start real etcd on the restored dir");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let out = loop {
        let o = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &client,
                "get",
                "snap-",
                "--prefix",
                "-w",
                "json",
            ])
            .output()
            .unwrap();
        if o.status.success() {
            break String::from_utf8_lossy(&o.stdout).into_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the real etcd did not serve the restored dir"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let _ = real.kill();
    let _ = real.wait();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["count"], 20);
    assert_eq!(v["header"]["revision"], 21);
    assert_eq!(v["kvs"][19]["mod_revision"], 21);
}

/// A first start that died after creating its WAL but before saving the bootstrap entries
/// leaves a WAL with metadata only; the next start must bootstrap again and serve.
#[test]
fn a_wal_without_entries_bootstraps_again() {
    use prost::Message;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ours");
    let mut ours = RealEtcd::start_bin(OURS, &dir, "node", &[]);
    ours.stop();
    let wal_dir = dir.join("member/wal");
    let meta = common::wal::Records::open(&wal_dir)
        .unwrap()
        .filter_map(|r| r.ok())
        .find(|r| r.record.r#type == common::wal::RecordType::Metadata as i64)
        .and_then(|r| r.record.data)
        .unwrap();
    assert!(proto::etcdserverpb::Metadata::decode(meta.as_slice()).is_ok());
    std::fs::remove_dir_all(dir.join("member")).unwrap();
    std::fs::create_dir_all(dir.join("member/snap")).unwrap();
    drop(common::wal::Wal::create(&wal_dir, &meta).unwrap());

    ours.restart(OURS, &[]);
    let (code, _, err) = ctl(&ours, &["put", "again", "yes"], None);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = ctl(&ours, &["member", "list"], None);
    assert_eq!(out.lines().count(), 1, "{out}");
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    assert!(log.contains("bootstrapping the member again"));
}

#[test]
fn periodic_auto_compaction_compacts_old_history() {
    let tmp = tempfile::tempdir().unwrap();
    let flags = [
        "--auto-compaction-mode",
        "periodic",
        "--auto-compaction-retention",
        "1s",
    ];
    let ours = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "node", &flags);
    for i in 0..5 {
        ctl(&ours, &["put", "k", &format!("v{i}")], None);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        // Keep writing so that there is something newer than the retention period.
        ctl(&ours, &["put", "tick", "x"], None);
        let (code, _, err) = ctl(&ours, &["get", "k", "--rev", "2"], None);
        if code != 0 {
            assert!(
                err.contains("required revision has been compacted"),
                "{err}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no auto-compaction happened"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let log = std::fs::read_to_string(tmp.path().join("ours").with_extension("log")).unwrap();
    assert!(log.contains("completed auto periodic compaction"));
}

/// --quota-backend-bytes: past it, NOSPACE is raised and writes are refused with etcd's error;
/// reads and deletes still work; after compaction, defrag and `alarm disarm`, writes work.
#[test]
fn quota_raises_nospace_until_disarmed() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(
        OURS,
        &tmp.path().join("ours"),
        "node",
        &["--quota-backend-bytes", "300000"],
    );
    let big = "x".repeat(60_000);
    let mut refused = None;
    for i in 0..60 {
        let (code, _, err) = ctl(&ours, &["put", &format!("big{i:02}"), &big], None);
        if code != 0 {
            refused = Some(err);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    let err = refused.expect("the quota never stopped a write");
    assert!(
        err.contains("etcdserver: mvcc: database space exceeded"),
        "{err}"
    );
    let (_, alarms, _) = ctl(&ours, &["alarm", "list"], None);
    assert!(alarms.contains("alarm:NOSPACE"), "{alarms}");
    let (code, _, err) = ctl(&ours, &["put", "small", "x"], None);
    assert_ne!(code, 0);
    assert!(err.contains("database space exceeded"), "{err}");
    let (code, _, _) = ctl(&ours, &["get", "big00", "--print-value-only"], None);
    assert_eq!(code, 0, "reads keep working");
    let (code, out, _) = ctl(&ours, &["del", "big", "--prefix", "-w", "json"], None);
    assert_eq!(code, 0, "deletes keep working");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rev = v["header"]["revision"].as_i64().unwrap().to_string();
    assert_eq!(ctl(&ours, &["compaction", &rev], None).0, 0);
    assert_eq!(ctl(&ours, &["defrag"], None).0, 0);
    let (code, out, _) = ctl(&ours, &["alarm", "disarm"], None);
    assert_eq!(code, 0);
    assert!(out.contains("alarm:NOSPACE"), "{out}");
    assert_eq!(ctl(&ours, &["alarm", "list"], None).1, "");
    let (code, _, err) = ctl(&ours, &["put", "small", "x"], None);
    assert_eq!(code, 0, "{err}");
}

/// The quota counts every op of a txn, nested txns' too (etcd's 2026 fix of costTxnReq, which
/// skipped them and let a nested put past the quota): a put bigger than the quota is refused
/// one and two txns deep, and raises NOSPACE (the flat put: quota_raises_nospace_until_disarmed).
#[test]
fn a_nested_txn_counts_against_the_quota() {
    use proto::etcdserverpb::{
        PutRequest, RequestOp, TxnRequest, kv_client::KvClient, request_op::Request,
    };
    let tmp = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(
        OURS,
        &tmp.path().join("ours"),
        "node",
        &["--quota-backend-bytes", "300000"],
    );
    let put = RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: b"big".to_vec(),
            value: vec![b'x'; 400_000],
            ..Default::default()
        })),
    };
    let txn = |op: RequestOp| TxnRequest {
        success: vec![op],
        ..Default::default()
    };
    let nested = RequestOp {
        request: Some(Request::RequestTxn(txn(put.clone()))),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let errors: Vec<String> = rt.block_on(async {
        let mut kv = KvClient::connect(ours.client_url.clone()).await.unwrap();
        let mut out = Vec::new();
        for t in [
            txn(nested.clone()),
            txn(RequestOp {
                request: Some(Request::RequestTxn(txn(nested))),
            }),
        ] {
            out.push(match kv.txn(t).await {
                Ok(_) => "accepted".to_string(),
                Err(st) => st.message().to_string(),
            });
        }
        out
    });
    for e in &errors {
        assert_eq!(e, "etcdserver: mvcc: database space exceeded", "{errors:?}");
    }
    let (_, alarms, _) = ctl(&ours, &["alarm", "list"], None);
    assert!(alarms.contains("alarm:NOSPACE"), "{alarms}");
    let (_, got, _) = ctl(&ours, &["get", "big", "--keys-only"], None);
    assert_eq!(got, "", "a refused put was written");
}

/// `etcdctl lock` over our Lock service: a second locker waits until the first releases.
#[test]
fn lock_serialises_two_holders() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "node", &[]);
    let log = tmp.path().join("order.txt");
    let log_s = log.display().to_string();
    let first = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            &ours.client_url,
            "lock",
            "the-lock",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!(
            "echo A-start >> {log_s}; sleep 1; echo A-end >> {log_s}"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let the first one take the lock.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("A-start")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first locker never got the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, _, err) = ctl(
        &ours,
        &[
            "lock",
            "the-lock",
            "--",
            "sh",
            "-c",
            &format!("echo B >> {log_s}"),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let mut first = first;
    assert!(first.wait().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "A-start\nA-end\nB\n"
    );
    // Both released: no lock key is left.
    let (_, out, _) = ctl(&ours, &["get", "the-lock", "--prefix", "--keys-only"], None);
    assert_eq!(out, "");
}
