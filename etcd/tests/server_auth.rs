// Auth end to end: the real Go etcdctl 3.4 drives users, roles, permissions (allowed and
// denied) on the real etcd 3.4 and on ours with the same script; tokens expire and go stale;
// auth state carries over from a real etcd's data dir and survives our restart.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

use proto::etcdserverpb::{
    AuthStatusRequest, AuthUserChangePasswordRequest, AuthenticateRequest, RangeRequest,
    auth_client::AuthClient, kv_client::KvClient,
};
use support::RealEtcd;
use tonic::{Code, Request};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

/// Runs the Go etcdctl; returns exit code, stdout and stderr without the client's retry log,
/// with the server's own addresses and IDs replaced so two servers compare.
fn ctl(e: &RealEtcd, args: &[&str], stdin: &str) -> String {
    let out = e.etcdctl_stdin(args, stdin);
    let err: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("retry_interceptor") && !l.contains("\"level\":\"info\""))
        .map(|l| match (l.find("\"ts\":"), l.find(",\"caller\"")) {
            // The Go client's log lines carry a timestamp.
            (Some(a), Some(b)) if a < b => format!("{}{}", &l[..a], &l[b + 1..]),
            _ => l.to_string(),
        })
        .collect();
    let text = format!(
        "$ etcdctl {}\nrc={}\n{}{}",
        args.join(" "),
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        err.join("\n")
    );
    let client = e.client_url.trim_start_matches("http://");
    let peer = e.peer_url.trim_start_matches("http://");
    let mut text = text.replace(client, "<CLIENT>").replace(peer, "<PEER>");
    // Cluster and member IDs depend on the ports: blank them in JSON and member lists.
    for key in ["\"cluster_id\":", "\"member_id\":"] {
        while let Some(at) = text.find(key) {
            let from = at + key.len();
            let len = text[from..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(0);
            text.replace_range(at..from + len, &key.replace(':', "=X"));
        }
    }
    if let Some(line) = text.lines().find(|l| l.ends_with("<CLIENT>, false")) {
        let id = line.split(',').next().unwrap_or("").to_string();
        if !id.is_empty() {
            text = text.replace(&id, "<ID>");
        }
    }
    text
}

const ROOT: &str = "--user=root:rootpw";
const ALICE: &str = "--user=alice:apw";

/// The script both servers run: (args, stdin).
fn script(dir: &Path) -> Vec<(Vec<String>, String)> {
    let snap = format!("{}/denied.db", dir.display());
    let snapshot_save = [ALICE, "snapshot", "save", snap.as_str()];
    let steps: Vec<(&[&str], &str)> = vec![
        // Enabling needs root with the root role (etcdctl adds the role itself).
        (&["auth", "enable"], ""),
        (&["user", "add", "root:rootpw"], ""),
        (&["auth", "enable"], ""),
        (&["role", "get", "root"], ""),
        (&[ROOT, "role", "get", "root"], ""),
        (&["put", "a", "1"], ""),
        (&[ROOT, "put", "a", "1"], ""),
        (&["--user=root:bad", "put", "a", "1"], ""),
        (&["--user=nobody:bad", "put", "a", "1"], ""),
        (&[ROOT, "user", "add", "nopw", "--no-password"], ""),
        (&["--user=nopw:x", "get", "a"], ""),
        (&[ROOT, "user", "add", "alice:apw"], ""),
        (&[ROOT, "user", "add", "alice:apw"], ""),
        (&[ROOT, "role", "add", "r1"], ""),
        (&[ROOT, "role", "add", "r1"], ""),
        (&[ROOT, "role", "grant-permission", "r1", "read", "k1"], ""),
        (
            &[ROOT, "role", "grant-permission", "r1", "write", "k2", "k5"],
            "",
        ),
        (
            &[
                ROOT,
                "role",
                "grant-permission",
                "r1",
                "readwrite",
                "--prefix",
                "p/",
            ],
            "",
        ),
        (
            &[
                ROOT,
                "role",
                "grant-permission",
                "r1",
                "read",
                "--from-key",
                "z",
            ],
            "",
        ),
        // The same key again replaces the permission's type.
        (&[ROOT, "role", "grant-permission", "r1", "write", "k1"], ""),
        (&[ROOT, "role", "get", "r1"], ""),
        (&[ROOT, "-w", "json", "role", "get", "r1"], ""),
        (&[ROOT, "user", "grant-role", "alice", "r1"], ""),
        (&[ROOT, "user", "grant-role", "alice", "r1"], ""),
        (&[ROOT, "user", "grant-role", "alice", "nope"], ""),
        (&[ROOT, "user", "grant-role", "bob", "r1"], ""),
        (&[ROOT, "user", "list"], ""),
        (&[ROOT, "role", "list"], ""),
        // Keys, ranges, prefixes and open ends, allowed and denied.
        (&[ALICE, "get", "k1"], ""),
        (&[ALICE, "put", "k1", "v"], ""),
        (&[ALICE, "put", "k2", "v"], ""),
        (&[ALICE, "get", "k2"], ""),
        (&[ALICE, "get", "k1", "k2"], ""),
        (&[ALICE, "put", "p/x", "v"], ""),
        (&[ALICE, "get", "--prefix", "p/"], ""),
        (&[ALICE, "get", "--prefix", "p"], ""),
        (&[ALICE, "get", "--from-key", "z"], ""),
        (&[ALICE, "get", "--from-key", "y"], ""),
        (&[ALICE, "get", "zz"], ""),
        (&[ALICE, "del", "k3"], ""),
        (&[ALICE, "del", "k2", "k5"], ""),
        (&[ALICE, "del", "k2", "k6"], ""),
        (&[ALICE, "del", "--prefix", "p/"], ""),
        (&[ALICE, "put", "p/x", "v2"], ""),
        (&[ALICE, "txn"], "\n\nput k1 x\n\n"),
        (&[ALICE, "txn"], "value(\"k1\") = \"1\"\n\nput k2 x\n\n"),
        (&[ALICE, "txn"], "value(\"p/x\") = \"v2\"\n\nget p/x\n\n"),
        (
            &[ALICE, "txn"],
            "value(\"p/x\") = \"v2\"\n\nput p/y 1\n\nget k1\n\n",
        ),
        (&[ALICE, "watch", "k1"], ""),
        (&[ALICE, "watch", "--prefix", "q"], ""),
        (&[ALICE, "lock", "mylock", "echo", "hi"], ""),
        (&[ALICE, "lock", "p/lock", "echo", "hi"], ""),
        // Users see themselves and their roles; the rest is root's.
        (&[ALICE, "user", "get", "alice"], ""),
        (&[ALICE, "user", "get", "root"], ""),
        (&[ALICE, "role", "get", "r1"], ""),
        (&[ALICE, "role", "get", "root"], ""),
        (&[ALICE, "user", "list"], ""),
        (&[ALICE, "role", "add", "r9"], ""),
        // Root-only maintenance and cluster calls; the open ones.
        (&[ALICE, "endpoint", "hashkv"], ""),
        (&["endpoint", "hashkv"], ""),
        (&[ALICE, "defrag"], ""),
        (&snapshot_save, ""),
        (&[ALICE, "member", "list"], ""),
        (
            &[
                ALICE,
                "member",
                "add",
                "x",
                "--peer-urls=http://127.0.0.1:1",
            ],
            "",
        ),
        (&[ALICE, "alarm", "list"], ""),
        (&[ALICE, "compaction", "1"], ""),
        (&[ROOT, "get", "--prefix", "p/"], ""),
        (&[ROOT, "defrag"], ""),
        // etcd's guards on root and its errors.
        (&[ROOT, "user", "delete", "root"], ""),
        (&[ROOT, "user", "revoke-role", "root", "root"], ""),
        (&[ROOT, "role", "delete", "root"], ""),
        (&[ROOT, "user", "revoke-role", "alice", "nope"], ""),
        (&[ROOT, "role", "revoke-permission", "r1", "nope"], ""),
        (&[ROOT, "role", "revoke-permission", "r1", "k1"], ""),
        (&[ROOT, "role", "revoke-permission", "r1", "k1"], ""),
        (&[ALICE, "put", "k1", "v"], ""),
        (&[ROOT, "role", "get", "nope"], ""),
        (&[ROOT, "user", "get", "nope"], ""),
        (&[ROOT, "user", "delete", "nope"], ""),
        (
            &[ROOT, "user", "passwd", "alice", "--interactive=false"],
            "apw2\n",
        ),
        (&[ALICE, "get", "p/x"], ""),
        (&["--user=alice:apw2", "get", "p/x"], ""),
        (&[ROOT, "role", "delete", "r1"], ""),
        (&[ROOT, "user", "get", "alice"], ""),
        (&["--user=alice:apw2", "get", "p/x"], ""),
        (&[ROOT, "user", "delete", "alice"], ""),
        (&["--user=alice:apw2", "get", "p/x"], ""),
        (&[ROOT, "user", "list"], ""),
        (&[ROOT, "auth", "disable"], ""),
        (&[ROOT, "auth", "disable"], ""),
        (&["auth", "disable"], ""),
        (&["get", "a"], ""),
        (&["user", "get", "root"], ""),
    ];
    steps
        .into_iter()
        .map(|(a, i)| (a.iter().map(|s| s.to_string()).collect(), i.to_string()))
        .collect()
}

fn run_script(e: &RealEtcd, dir: &Path) -> Vec<String> {
    script(dir)
        .iter()
        .map(|(args, input)| {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            ctl(e, &a, input)
        })
        .collect()
}

/// The same script on a fresh real etcd 3.4 and a fresh etcd-rs: every output and exit code
/// must be equal.
#[test]
fn go_etcdctl_auth_script_matches_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (real_dir, ours_dir) = (dir.path().join("real"), dir.path().join("ours"));
    let real_out = dir.path().join("real-out");
    let ours_out = dir.path().join("ours-out");
    std::fs::create_dir_all(&real_out).expect("mkdir");
    std::fs::create_dir_all(&ours_out).expect("mkdir");
    // Both servers at once: the script is long and each step waits on a server.
    let real = std::thread::spawn(move || {
        let e = RealEtcd::start(&real_dir, "default");
        run_script(&e, &real_out)
    });
    let ours_e = RealEtcd::start_bin(OURS, &ours_dir, "default", &[]);
    let ours = run_script(&ours_e, &ours_out);
    let real = real.join().expect("real etcd script");
    let mut diffs = Vec::new();
    for (r, o) in real.iter().zip(&ours) {
        let norm = |s: &str| s.replace("real-out", "OUT").replace("ours-out", "OUT");
        if norm(r) != norm(o) {
            diffs.push(format!("--- etcd 3.4:\n{r}\n--- etcd-rs:\n{o}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n\n")
    );
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn with_token<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("token", token.parse().expect("token as metadata"));
    r
}

async fn token(url: &str, name: &str, password: &str) -> String {
    let mut c = AuthClient::connect(url.to_string()).await.expect("connect");
    c.authenticate(AuthenticateRequest {
        name: name.into(),
        password: password.into(),
    })
    .await
    .expect("authenticate")
    .into_inner()
    .token
}

async fn range(url: &str, token: &str, key: &str) -> Result<(), tonic::Status> {
    let mut kv = KvClient::connect(url.to_string()).await.expect("connect");
    kv.range(with_token(
        RangeRequest {
            key: key.into(),
            ..Default::default()
        },
        token,
    ))
    .await
    .map(|_| ())
}

/// root with the root role, alice with read on `k`, auth on.
fn setup_users(e: &RealEtcd) {
    for args in [
        vec!["user", "add", "root:rootpw"],
        vec!["user", "grant-role", "root", "root"],
        vec!["user", "add", "alice:apw"],
        vec!["role", "add", "r1"],
        vec!["role", "grant-permission", "r1", "read", "k"],
        vec!["user", "grant-role", "alice", "r1"],
        vec!["auth", "enable"],
    ] {
        e.etcdctl_ok(&args);
    }
}

/// Simple tokens: etcd's shape, expiry after --auth-token-ttl without use, dropped when the
/// password changes and when auth is disabled. Run on the real etcd 3.4 too, as the oracle.
fn simple_token_lifecycle(bin: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = RealEtcd::start_bin(
        bin,
        &dir.path().join("d"),
        "default",
        &["--auth-token-ttl=2"],
    );
    setup_users(&e);
    let url = e.client_url.clone();
    rt().block_on(async {
        let t = token(&url, "alice", "apw").await;
        let (prefix, index) = t.split_once('.').expect("simple token has a dot");
        assert_eq!(prefix.len(), 16, "{bin}: token {t}");
        assert!(
            prefix.chars().all(|c| c.is_ascii_alphabetic()),
            "{bin}: {t}"
        );
        assert!(index.parse::<u64>().is_ok(), "{bin}: {t}");
        range(&url, &t, "k").await.expect("alice reads k");
        let denied = range(&url, &t, "other")
            .await
            .expect_err("alice may not read other");
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert_eq!(denied.message(), "etcdserver: permission denied");
        // A lease with a key on it expires with auth on: the server revokes it as root.
        let granted = e.etcdctl_ok(&["--user=root:rootpw", "lease", "grant", "2"]);
        let id = granted
            .split_whitespace()
            .nth(1)
            .expect("lease id")
            .to_string();
        e.etcdctl_ok(&[
            "--user=root:rootpw",
            "put",
            "lk",
            "v",
            &format!("--lease={id}"),
        ]);
        // Unused for longer than the TTL: gone.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let expired = range(&url, &t, "k").await.expect_err("expired token");
        assert_eq!(expired.code(), Code::Unauthenticated, "{bin}");
        assert_eq!(expired.message(), "etcdserver: invalid auth token");
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !e
            .etcdctl_ok(&["--user=root:rootpw", "get", "lk"])
            .is_empty()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{bin}: the expired lease's key is still there"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A password change drops the user's tokens.
        let t = token(&url, "alice", "apw").await;
        let root = token(&url, "root", "rootpw").await;
        AuthClient::connect(url.clone())
            .await
            .expect("connect")
            .user_change_password(with_token(
                AuthUserChangePasswordRequest {
                    name: "alice".into(),
                    password: "apw2".into(),
                    hashed_password: String::new(),
                },
                &root,
            ))
            .await
            .expect("change password");
        let err = range(&url, &t, "k")
            .await
            .expect_err("token of old password");
        assert_eq!(err.message(), "etcdserver: invalid auth token", "{bin}");
        let t = token(&url, "alice", "apw2").await;
        range(&url, &t, "k").await.expect("new password works");
        // No token at all with auth on.
        let mut kv = KvClient::connect(url.clone()).await.expect("connect");
        let anon = kv
            .range(RangeRequest {
                key: b"k".to_vec(),
                ..Default::default()
            })
            .await
            .expect_err("anonymous read");
        assert_eq!(anon.message(), "etcdserver: user name is empty", "{bin}");
        assert_eq!(anon.code(), Code::InvalidArgument);
    });
    e.etcdctl_ok(&["--user=root:rootpw", "auth", "disable"]);
    rt().block_on(async {
        let mut c = AuthClient::connect(url.clone()).await.expect("connect");
        let err = c
            .authenticate(AuthenticateRequest {
                name: "root".into(),
                password: "rootpw".into(),
            })
            .await
            .expect_err("auth is off");
        assert_eq!(err.message(), "etcdserver: authentication is not enabled");
        assert_eq!(err.code(), Code::FailedPrecondition);
    });
}

#[test]
fn simple_tokens_expire_and_die_with_password_changes() {
    let real = std::thread::spawn(|| simple_token_lifecycle("etcd"));
    simple_token_lifecycle(OURS);
    real.join().expect("the same on the real etcd 3.4");
}

/// What a long-lived client holding a simple token meets: its reads through `auth disable`,
/// `auth enable` and a restart of the server, each as "ok" or the error's code and message.
/// The first is the stale token's read while auth is off, which the real etcd 3.4 does not
/// answer the same way every time (invalid in most runs, ok in some); the rest it does.
fn simple_token_across_disable_and_restart(bin: &str) -> (String, Vec<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut e = RealEtcd::start_bin(bin, &dir.path().join("d"), "default", &[]);
    setup_users(&e);
    let url = e.client_url.clone();
    let read = |t: &str| {
        let (url, t) = (url.clone(), t.to_string());
        rt().block_on(async move {
            match range(&url, &t, "k").await {
                Ok(()) => "ok".to_string(),
                Err(s) => format!("{:?}: {}", s.code(), s.message()),
            }
        })
    };
    let mut seen = Vec::new();
    let before = rt().block_on(token(&url, "alice", "apw"));
    seen.push(read(&before));
    e.etcdctl_ok(&["--user=root:rootpw", "auth", "disable"]);
    let stale_while_off = read(&before);
    // A token never issued (its index is one the server has applied: etcd waits for a
    // token's index before it looks the token up).
    seen.push(read("forgedforgedforg.1"));
    e.etcdctl_ok(&["auth", "enable"]);
    seen.push(read(&before));
    seen.push(read(&rt().block_on(token(&url, "alice", "apw"))));
    // Whether a token issued just before a kill -9 works after it depends, on etcd as on
    // ours, on whether its Authenticate entry is replayed; a new one must work.
    e.restart(bin, &[]);
    seen.push(read(&rt().block_on(token(&url, "alice", "apw"))));
    (stale_while_off, seen)
}

/// A simple token is dropped when auth is disabled and enabling it again does not bring it
/// back; a token never issued is refused even with auth off; the client authenticates again
/// and goes on, before and after a restart. The same as on the real etcd 3.4.
#[test]
fn simple_tokens_die_with_auth_disable() {
    let real = std::thread::spawn(|| simple_token_across_disable_and_restart("etcd"));
    let (stale_while_off, ours) = simple_token_across_disable_and_restart(OURS);
    let (_, real) = real.join().expect("the real etcd 3.4's run");
    assert_eq!(ours, real, "ours, then the real etcd 3.4's");
    let invalid = "Unauthenticated: etcdserver: invalid auth token";
    assert_eq!(ours, ["ok", invalid, invalid, "ok", "ok"]);
    assert_eq!(
        stale_while_off, invalid,
        "a token kept through auth disable"
    );
}

/// JWT tokens carry the auth revision: any auth change makes older tokens "old" until the
/// client authenticates again; the Go etcdctl works against a JWT server.
fn jwt_lifecycle(bin: &str, dir: &Path, name: &str) {
    let (key, pub_key) = (dir.join("jwt.key"), dir.join("jwt.pub"));
    let spec = format!(
        "--auth-token=jwt,pub-key={},priv-key={},sign-method=RS256,ttl=10m",
        pub_key.display(),
        key.display()
    );
    let e = RealEtcd::start_bin(bin, &dir.join(name), "default", &[&spec]);
    setup_users(&e);
    let url = e.client_url.clone();
    rt().block_on(async {
        let t = token(&url, "alice", "apw").await;
        assert_eq!(t.split('.').count(), 3, "{bin}: a JWT has three parts: {t}");
        range(&url, &t, "k").await.expect("alice reads k");
        e.etcdctl_ok(&["--user=root:rootpw", "role", "add", "r2"]);
        let stale = range(&url, &t, "k")
            .await
            .expect_err("token of an older revision");
        assert_eq!(
            stale.message(),
            "etcdserver: revision of auth store is old",
            "{bin}"
        );
        assert_eq!(stale.code(), Code::InvalidArgument);
        let t = token(&url, "alice", "apw").await;
        range(&url, &t, "k").await.expect("a fresh token works");
        // Change a signature character well inside the last part: the final character of an
        // unpadded base64 signature also holds padding bits a decoder may ignore.
        let at = t.len() - 10;
        let swap = if &t[at..at + 1] == "A" { "B" } else { "A" };
        let forged = format!("{}{swap}{}", &t[..at], &t[at + 1..]);
        let bad = range(&url, &forged, "k").await.expect_err("forged");
        assert_eq!(bad.message(), "etcdserver: invalid auth token", "{bin}");
    });
    let out = e.etcdctl_ok(&["--user=alice:apw", "get", "k", "--print-value-only"]);
    assert_eq!(out, "", "{bin}");
}

#[test]
fn jwt_tokens_carry_the_auth_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("jwt.key");
    let ok = std::process::Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&key)
        .arg("2048")
        .output()
        .expect("run openssl")
        .status
        .success();
    assert!(ok, "openssl genrsa failed");
    let ok = std::process::Command::new("openssl")
        .args(["rsa", "-pubout", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(dir.path().join("jwt.pub"))
        .output()
        .expect("run openssl")
        .status
        .success();
    assert!(ok, "openssl rsa -pubout failed");
    let d = dir.path().to_path_buf();
    let real = std::thread::spawn(move || jwt_lifecycle("etcd", &d, "real"));
    jwt_lifecycle(OURS, dir.path(), "ours");
    real.join().expect("the same on the real etcd 3.4");
}

async fn auth_status(url: &str, root: &str) -> (bool, u64) {
    let mut c = AuthClient::connect(url.to_string()).await.expect("connect");
    let s = c
        .auth_status(with_token(AuthStatusRequest {}, root))
        .await
        .expect("auth status")
        .into_inner();
    (s.enabled, s.auth_revision)
}

/// Users, roles and the enabled flag written by a real etcd 3.4 are ours after taking over its
/// data dir (auth revision included), and stay after our own restart.
#[test]
fn auth_carries_over_from_etcd_and_survives_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("d");
    let mut e = RealEtcd::start(&data, "default");
    setup_users(&e);
    let role_before = e.etcdctl_ok(&["--user=root:rootpw", "role", "get", "r1"]);
    e.stop();
    e.restart(OURS, &[]);
    let check = |e: &RealEtcd| {
        assert_eq!(
            e.etcdctl_ok(&["--user=root:rootpw", "role", "get", "r1"]),
            role_before
        );
        assert_eq!(
            e.etcdctl_ok(&["--user=root:rootpw", "user", "get", "alice"]),
            "User: alice\nRoles: r1\n"
        );
        e.etcdctl_ok(&["--user=alice:apw", "get", "k"]);
        let denied = e.etcdctl(&["--user=alice:apw", "put", "k", "v"]);
        assert!(!denied.status.success());
        assert!(String::from_utf8_lossy(&denied.stderr).contains("etcdserver: permission denied"));
        let anon = e.etcdctl(&["get", "k"]);
        assert!(String::from_utf8_lossy(&anon.stderr).contains("etcdserver: user name is empty"));
    };
    check(&e);
    // etcd's revision after these 7 changes, read from its own db by us.
    let url = e.client_url.clone();
    let revision_from_etcd = rt().block_on(async {
        let root = token(&url, "root", "rootpw").await;
        auth_status(&url, &root).await
    });
    e.etcdctl_ok(&["--user=root:rootpw", "role", "add", "r2"]);
    e.stop();
    e.restart(OURS, &[]);
    check(&e);
    let after = rt().block_on(async {
        let root = token(&url, "root", "rootpw").await;
        auth_status(&url, &root).await
    });
    assert_eq!(after, (true, revision_from_etcd.1 + 1));
    // The same changes on a fresh etcd-rs reach the same revision as etcd's.
    let fresh = RealEtcd::start_bin(OURS, &dir.path().join("fresh"), "default", &[]);
    setup_users(&fresh);
    let url = fresh.client_url.clone();
    let ours = rt().block_on(async {
        let root = token(&url, "root", "rootpw").await;
        auth_status(&url, &root).await
    });
    assert_eq!(ours, revision_from_etcd);
}

/// The first `n` answers on a watch stream that alice (who may read only "k") opens with
/// `creates` (key, range_end) on a fresh member of `bin`.
fn alice_watch(
    bin: &str,
    creates: &[(&[u8], &[u8])],
    n: usize,
) -> Vec<proto::etcdserverpb::WatchResponse> {
    use proto::etcdserverpb::{
        WatchCreateRequest, WatchRequest, watch_client::WatchClient, watch_request::RequestUnion,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let e = RealEtcd::start_bin(bin, &dir.path().join("d"), "default", &[]);
    setup_users(&e);
    let url = e.client_url.clone();
    let reqs: Vec<WatchRequest> = creates
        .iter()
        .map(|(key, end)| WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: key.to_vec(),
                range_end: end.to_vec(),
                ..Default::default()
            })),
        })
        .collect();
    rt().block_on(async {
        let t = token(&url, "alice", "apw").await;
        let mut w = WatchClient::connect(url.clone()).await.expect("connect");
        let mut resp = w
            .watch(with_token(tokio_stream::iter(reqs), &t))
            .await
            .expect("watch stream")
            .into_inner();
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(resp.message().await.expect("answer").expect("an answer"));
        }
        out
    })
}

/// The answer to a watch on a key the user may not read, field by field.
fn denied_watch(bin: &str) -> (i64, bool, bool, String, i64) {
    let got = alice_watch(bin, &[(b"other", b""), (b"k", b"")], 2);
    let (denied, allowed) = (&got[0], &got[1]);
    assert!(allowed.created && !allowed.canceled, "{bin}: {allowed:?}");
    (
        denied.watch_id,
        denied.created,
        denied.canceled,
        denied.cancel_reason.clone(),
        allowed.watch_id,
    )
}

#[test]
fn a_denied_watch_is_answered_as_etcd_does() {
    let real = std::thread::spawn(|| denied_watch("etcd"));
    let ours = denied_watch(OURS);
    assert_eq!(ours, real.join().expect("real etcd"));
}

/// A bad --auth-token is refused before anything is written.
#[test]
fn bad_auth_token_flags_stop_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("d");
    for spec in [
        "bogus",
        "jwt,sign-method=RS256",
        "jwt,pub-key=/nonexistent,sign-method=RS256",
    ] {
        let out = std::process::Command::new(OURS)
            .arg("--data-dir")
            .arg(&data)
            .arg(format!("--auth-token={spec}"))
            .output()
            .expect("run etcd");
        assert_eq!(out.status.code(), Some(1), "{spec}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--auth-token"), "{spec}: {err}");
        assert!(!data.exists(), "{spec}: the data dir was created");
    }
}

/// Whether a user who may read only "k" gets a watch on ["k", end of keyspace) — range_end
/// "\x00", as clients send it for "every key from here on". The answer must be a denial:
/// the permission is checked on the range as received, which reaches past "k".
fn watch_to_the_end(bin: &str) -> (bool, bool, String) {
    let first = alice_watch(bin, &[(b"k", b"\0")], 1).remove(0);
    (first.created, first.canceled, first.cancel_reason)
}

#[test]
fn a_watch_to_the_end_of_the_keyspace_needs_read_on_all_of_it() {
    let ours = watch_to_the_end(OURS);
    assert!(
        ours.1 && ours.2.contains("permission denied"),
        "a user who may read only \"k\" watched [\"k\", \\x00): {ours:?}"
    );
    // etcd 3.4.23 predates the 2026 fix; its answer is printed for the record only.
    eprintln!("etcd 3.4: {:?}; ours: {ours:?}", watch_to_the_end("etcd"));
}

/// What a txn of one put answers for bob, who may write "w" but read nothing: with prev_kv
/// (which would show him the value he replaces), and under a lease that holds "secret" (which
/// he may not write). Both must be denied, as a put outside a txn is (etcd's 2026 fix, #21677:
/// 3.4.23 checked only the write permission of a txn's puts). Then a range, a put and a delete
/// of "secret" in a txn nested in a txn (CVE-2026-33343, fixed in 3.4.42).
fn txn_put_side_channels(bin: &str) -> Vec<Result<bool, String>> {
    use proto::etcdserverpb::{
        LeaseGrantRequest, PutRequest, RequestOp, TxnRequest, lease_client::LeaseClient, request_op,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let e = RealEtcd::start_bin(bin, &dir.path().join("d"), "default", &[]);
    let url = e.client_url.clone();
    rt().block_on(async {
        let mut lc = LeaseClient::connect(url.clone()).await.expect("connect");
        let lease = lc
            .lease_grant(LeaseGrantRequest { ttl: 600, id: 0 })
            .await
            .expect("grant")
            .into_inner()
            .id;
        let mut kv = KvClient::connect(url.clone()).await.expect("connect");
        for (k, l) in [("w", 0), ("secret", lease)] {
            kv.put(PutRequest {
                key: k.into(),
                value: b"hidden".to_vec(),
                lease: l,
                ..Default::default()
            })
            .await
            .expect("put");
        }
    });
    for args in [
        vec!["user", "add", "root:rootpw"],
        vec!["user", "grant-role", "root", "root"],
        vec!["user", "add", "bob:bpw"],
        vec!["role", "add", "writer"],
        vec!["role", "grant-permission", "writer", "write", "w"],
        vec!["user", "grant-role", "bob", "writer"],
        vec!["auth", "enable"],
    ] {
        e.etcdctl_ok(&args);
    }
    let lease = {
        let out = e.etcdctl_ok(&["--user=root:rootpw", "lease", "list"]);
        let hex = out
            .lines()
            .nth(1)
            .expect("one lease listed")
            .trim()
            .to_string();
        i64::from_str_radix(&hex, 16).expect("lease id")
    };
    rt().block_on(async {
        let t = token(&url, "bob", "bpw").await;
        let mut kv = KvClient::connect(url.clone()).await.expect("connect");
        // Each op alone in the success branch of a txn bob sends: did it succeed, or why not.
        let mut ops = Vec::new();
        for (prev_kv, lease) in [(false, 0), (true, 0), (false, lease)] {
            ops.push(request_op::Request::RequestPut(PutRequest {
                key: b"w".to_vec(),
                value: b"bob's".to_vec(),
                prev_kv,
                lease,
                ..Default::default()
            }));
        }
        // CVE-2026-33343: a txn nested in a txn must be checked as the outer one is: a read,
        // a write and a delete of "secret" inside an inner txn.
        let secret = b"secret".to_vec();
        for op in [
            request_op::Request::RequestRange(proto::etcdserverpb::RangeRequest {
                key: secret.clone(),
                ..Default::default()
            }),
            request_op::Request::RequestPut(PutRequest {
                key: secret.clone(),
                value: b"bob's".to_vec(),
                ..Default::default()
            }),
            request_op::Request::RequestDeleteRange(proto::etcdserverpb::DeleteRangeRequest {
                key: secret.clone(),
                ..Default::default()
            }),
        ] {
            ops.push(request_op::Request::RequestTxn(TxnRequest {
                success: vec![RequestOp { request: Some(op) }],
                ..Default::default()
            }));
        }
        let mut out = Vec::new();
        for op in ops {
            let r = kv
                .txn(with_token(
                    TxnRequest {
                        success: vec![RequestOp { request: Some(op) }],
                        ..Default::default()
                    },
                    &t,
                ))
                .await;
            out.push(
                r.map(|r| r.into_inner().succeeded)
                    .map_err(|s| s.message().to_string()),
            );
        }
        out
    })
}

#[test]
fn txn_ops_nested_or_with_prev_kv_or_a_lease_are_checked_as_plain_ones() {
    let ours = txn_put_side_channels(OURS);
    let denied = Err("etcdserver: permission denied".to_string());
    assert_eq!(
        ours,
        vec![
            Ok(true),
            denied.clone(),
            denied.clone(),
            denied.clone(),
            denied.clone(),
            denied
        ],
        "a plain put is allowed; with prev_kv or under the lease it is not, nor a read, write \
         or delete of a key bob may not touch inside a nested txn"
    );
    // etcd 3.4.23 predates the fix; its answers are printed for the record only.
    eprintln!(
        "etcd 3.4: {:?}; ours: {ours:?}",
        txn_put_side_channels("etcd")
    );
}
