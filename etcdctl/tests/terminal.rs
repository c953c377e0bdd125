//! Our etcdctl and the Go etcdctl 3.4 on a terminal: each session runs both on a pty with the
//! same command line and the same typed keys, each against its twin server, and the screens
//! (stdout and stderr as a person sees them, IDs, times and client UUIDs masked) must be equal.

#[path = "../../common/tests/support/mod.rs"]
mod support;

mod harness;
mod pty;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use harness::{Client, OURS, Server, Twin, mask_client_noise, normalise_durations};
use pty::{Term, screen};
use support::HttpsMember;

/// Go's etcdctl turns echo off by running `stty` after it prints a password prompt: keys
/// typed sooner would be echoed, so a person (and this test) waits a moment.
const ECHO_OFF_MS: u64 = 300;

/// One thing done during a session.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Wait (up to 10s) until the screen shows this text.
    Wait(&'static str),
    /// Type these keys.
    Type(&'static str),
    /// Let the program work for this many milliseconds.
    Sleep(u64),
    /// Another client puts key=value on the session's server.
    Put(&'static str, &'static str),
}

use Act::*;

/// A command line (`\xNN` in an argument is that byte) and what is done while it runs; a
/// program still running `end_ms` after the last act gets Ctrl-C.
struct Session {
    args: &'static [&'static str],
    acts: &'static [Act],
    end_ms: u64,
}

const fn run(args: &'static [&'static str]) -> Session {
    Session {
        args,
        acts: &[],
        end_ms: 15_000,
    }
}

const fn typed(args: &'static [&'static str], acts: &'static [Act]) -> Session {
    Session {
        args,
        acts,
        end_ms: 15_000,
    }
}

/// A session that never ends by itself (watch, elect): Ctrl-C after the acts and `ms`.
const fn until_ctrl_c(args: &'static [&'static str], acts: &'static [Act], ms: u64) -> Session {
    Session {
        args,
        acts,
        end_ms: ms,
    }
}

/// An argument with `\xNN` escapes turned into bytes (arguments are bytes, not UTF-8).
fn arg_bytes(a: &str) -> OsString {
    let mut out = Vec::new();
    let b = a.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let Some(v) = a
                .get(i + 2..i + 4)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    OsString::from_vec(out)
}

/// Runs one session with one client on its server; (exit code, normalised screen).
fn play(client: Client, server: &Server, s: &Session) -> (Option<i32>, String) {
    let put = |k: &str, v: &str| {
        let out = server.etcd.etcdctl(&["put", k, v]);
        assert!(out.status.success(), "put {k} on the side failed");
    };
    play_on(client, server.url(), s, &put, &|t| server.normalise(t))
}

/// Runs one session against `url`: `--endpoints=<url>` comes first unless the session names
/// its endpoints itself, writing `{ADDR}` for the server's host:port.
fn play_on(
    client: Client,
    url: &str,
    s: &Session,
    put: &dyn Fn(&str, &str),
    normalise: &dyn Fn(&str) -> String,
) -> (Option<i32>, String) {
    let bin = match client {
        Client::Go => "etcdctl",
        Client::Ours => OURS,
    };
    let addr = url.split_once("://").map_or(url, |(_, a)| a);
    let mut args = Vec::new();
    if !s.args.iter().any(|a| a.starts_with("--endpoints")) {
        args.push(OsString::from(format!("--endpoints={url}")));
    }
    args.extend(s.args.iter().map(|a| arg_bytes(&a.replace("{ADDR}", addr))));
    let mut t = Term::spawn(bin, &args, &[("ETCDCTL_API", "3")]);
    for act in s.acts {
        match *act {
            Wait(text) => {
                t.wait_for(text, Duration::from_secs(10));
            }
            Type(keys) => t.type_text(keys),
            Sleep(ms) => std::thread::sleep(Duration::from_millis(ms)),
            Put(k, v) => put(k, v),
        }
    }
    let (status, raw) = t.finish(Duration::from_millis(s.end_ms));
    let text = mask_client_noise(&screen(&raw));
    // clientv3 names its target host:port, without the scheme.
    let text = text.replace(addr, "<CLIENT_ADDR>");
    (status.code(), normalise(&text))
}

/// Plays every session with both clients and returns the differences.
fn compare(twin: &Twin, sessions: &[Session]) -> Vec<String> {
    let mut failures = Vec::new();
    for s in sessions {
        let go = play(Client::Go, &twin.go, s);
        let ours = play(Client::Ours, &twin.ours, s);
        if go != ours {
            failures.push(format!(
                "session {:?} {:?}:\n--- go (exit {:?}):\n{}\n--- ours (exit {:?}):\n{}",
                s.args, s.acts, go.0, go.1, ours.0, ours.1
            ));
        }
    }
    failures
}

/// Plays the sessions on a fresh pair of twin servers; every screen must match.
fn sessions_match(sessions: &[Session]) {
    let twin = Twin::start();
    assert_same(compare(&twin, sessions));
}

fn assert_same(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} sessions differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Password prompts of `user add` and `user passwd` on a terminal, and their errors.
#[test]
fn password_prompts_match() {
    sessions_match(&[
        typed(
            &["user", "add", "u1"],
            &[
                Wait("Password of u1: "),
                Sleep(ECHO_OFF_MS),
                Type("pw1\n"),
                Wait("confirmation: "),
                Sleep(ECHO_OFF_MS),
                Type("pw1\n"),
            ],
        ),
        typed(
            &["user", "add", "u2"],
            &[
                Wait("Password of u2: "),
                Sleep(ECHO_OFF_MS),
                Type("pw1\n"),
                Wait("confirmation: "),
                Sleep(ECHO_OFF_MS),
                Type("other\n"),
            ],
        ),
        typed(
            &["user", "add", "u3"],
            &[Wait("Password of u3: "), Sleep(ECHO_OFF_MS), Type("\n")],
        ),
        run(&["user", "add", ":pw"]),
        run(&["user", "add", "u4:pw4"]),
        typed(
            &["user", "passwd", "u1"],
            &[
                Wait("Password of u1: "),
                Sleep(ECHO_OFF_MS),
                Type("pw2\n"),
                Wait("confirmation: "),
                Sleep(ECHO_OFF_MS),
                Type("pw2\n"),
            ],
        ),
        typed(
            &["user", "passwd", "nobody"],
            &[
                Wait("Password of nobody: "),
                Sleep(ECHO_OFF_MS),
                Type("pw2\n"),
                Wait("confirmation: "),
                Sleep(ECHO_OFF_MS),
                Type("pw2\n"),
            ],
        ),
        run(&["user", "list"]),
    ]);
}

/// The login prompt of `--user` without a password once auth is on; a wrong password.
#[test]
fn login_prompt_matches() {
    sessions_match(&[
        run(&["user", "add", "root:rootpw"]),
        run(&["auth", "enable"]),
        typed(
            &["--user", "root", "put", "a", "1"],
            &[Wait("Password: "), Sleep(ECHO_OFF_MS), Type("rootpw\n")],
        ),
        typed(
            &["--user", "root", "get", "a"],
            &[Wait("Password: "), Sleep(ECHO_OFF_MS), Type("wrong\n")],
        ),
        run(&["get", "a"]),
        run(&["--user", "root:rootpw", "auth", "disable"]),
    ]);
}

/// `txn -i` and `watch -i`: their prompts, answers and the errors of bad lines.
#[test]
fn interactive_modes_match() {
    sessions_match(&[
        run(&["put", "a", "1"]),
        typed(
            &["txn", "-i"],
            &[
                Wait("compares:"),
                Type("value(\"a\") = \"1\"\n\n"),
                Wait("success requests"),
                Type("put a 2\nget a\n\n"),
                Wait("failure requests"),
                Type("get a\n\n"),
            ],
        ),
        typed(
            &["txn", "-i"],
            // One newline: the line fails as it is read, so a second one's echo would race the error.
            &[Wait("compares:"), Type("value(\"a\") = \n")],
        ),
        typed(
            &["txn", "-i"],
            &[
                Wait("compares:"),
                Type("\n"),
                Wait("success requests"),
                Type("bogus a\n"),
            ],
        ),
        until_ctrl_c(
            &["watch", "-i"],
            &[
                Type("watch w1\n"),
                Sleep(500),
                Put("w1", "v1"),
                Sleep(500),
                Type("bogus\n"),
                Sleep(300),
                Type("watch\n"),
                Sleep(300),
                Type("watch w2 --rev=1\n"),
                Sleep(500),
            ],
            500,
        ),
    ]);
}

/// Command names by unique prefix (cobra's prefix matching), ambiguous prefixes, help topics.
#[test]
fn command_prefixes_match() {
    sessions_match(&[
        run(&["mem", "li"]),
        run(&["role", "ad", "r1"]),
        run(&["ro", "gr", "r1", "read", "foo"]),
        run(&["role", "g", "r1"]),
        run(&["us", "li"]),
        run(&["pu", "k", "v"]),
        run(&["ge", "k"]),
        // Ambiguous: cobra finds no command and suggests (ours has no `migrate`).
        run(&["e"]),
        run(&["co", "5"]),
        run(&["help", "mem"]),
        run(&["end", "he", "-w", "json"]),
    ]);
}

/// Arguments are bytes; durations of 0; errors with clientv3's warning line before them.
#[test]
fn bytes_durations_and_errors_match() {
    sessions_match(&[
        run(&["put", "k\\xff", "v\\xfe"]),
        run(&["get", "k\\xff"]),
        run(&["get", "k\\xff", "--hex"]),
        run(&["get", "k\\xff", "-w", "json"]),
        run(&["del", "k\\xff"]),
        run(&["--dial-timeout=0", "put", "d", "0"]),
        run(&["--command-timeout=0", "get", "d"]),
        run(&["--keepalive-time=0", "get", "d"]),
        run(&["--keepalive-timeout=0", "get", "d"]),
        run(&["--keepalive-time=0", "--keepalive-timeout=0", "get", "d"]),
        run(&["get", "d", "--rev=100"]),
        run(&["lease", "revoke", "5"]),
        run(&["role", "get", "nope"]),
        run(&["move-leader", "5"]),
    ]);
}

/// `snapshot status` on a terminal, both CLIs on the same file (its hash is the file's): 3.4
/// prints no deprecation note and no progress bar, and the snapshot's own revision. One file
/// from each twin's server, so a snapshot of etcd 3.4 is read too.
#[test]
fn snapshot_status_on_a_terminal_matches() {
    let twin = Twin::start();
    let mut sessions = Vec::new();
    for (name, server) in [("go", &twin.go), ("ours", &twin.ours)] {
        for (k, v) in [("s1", "v1"), ("s2", "v2"), ("s1", "v3")] {
            server.etcd.etcdctl_ok(&["put", k, v]);
        }
        let path = twin.dir.path().join(format!("{name}.db"));
        let path: &'static str = String::leak(path.display().to_string());
        server.etcd.etcdctl_ok(&["snapshot", "save", path]);
        for w in ["simple", "table", "json"] {
            sessions.push(run(Vec::leak(vec!["snapshot", "status", path, "-w", w])));
        }
    }
    // Paths that are no snapshot: missing, a directory, a file of zeros.
    let zeros = twin.dir.path().join("zeros.db");
    std::fs::write(&zeros, vec![0u8; 65536]).expect("write a file of zeros");
    let zeros: &'static str = String::leak(zeros.display().to_string());
    let dir: &'static str = String::leak(twin.dir.path().display().to_string());
    for p in ["/nonexistent/snap.db", dir, zeros] {
        sessions.push(run(Vec::leak(vec!["snapshot", "status", p])));
    }
    assert_same(compare(&twin, &sessions));
}

/// watch, lock and elect with a command, and on a terminal until Ctrl-C.
#[test]
fn watch_lock_elect_on_a_terminal_match() {
    sessions_match(&[
        until_ctrl_c(
            &[
                "watch",
                "wk",
                "--",
                "sh",
                "-c",
                "echo got $ETCD_WATCH_EVENT_TYPE $ETCD_WATCH_KEY $ETCD_WATCH_VALUE",
            ],
            &[Sleep(700), Put("wk", "x1"), Wait("got"), Sleep(300)],
            300,
        ),
        until_ctrl_c(
            &["watch", "wk", "--prefix"],
            &[Sleep(700), Put("wk2", "x2"), Wait("x2"), Sleep(300)],
            300,
        ),
        run(&["lock", "l1", "echo", "locked"]),
        run(&["lock", "l1", "sh", "-c", "exit 3"]),
        until_ctrl_c(&["lock", "l2"], &[Wait("l2/"), Sleep(300)], 300),
        until_ctrl_c(&["elect", "e1", "p1"], &[Wait("e1/"), Sleep(300)], 300),
        run(&["get", "--prefix", "l"]),
        run(&["get", "--prefix", "e"]),
    ]);
}

/// A single member on an https client URL with --auto-tls (a self-signed P-521 certificate
/// from etcd 3.4, a P-256 one from ours), healthy once started.
struct AutoTls(HttpsMember);

/// The flags etcdctl 3.4 needs for TLS without a CA file.
const SKIP_VERIFY: [&str; 2] = ["--insecure-transport=false", "--insecure-skip-tls-verify"];

impl AutoTls {
    fn start(bin: &str, dir: &std::path::Path) -> AutoTls {
        let log = std::fs::File::create(dir.with_extension("log")).expect("log file");
        let s = AutoTls(HttpsMember::spawn(bin, dir, log.into(), &["--auto-tls"]));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !s.etcdctl(&["endpoint", "health"]).status.success() {
            assert!(
                std::time::Instant::now() < deadline,
                "{bin} not healthy over TLS in 30s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        s
    }

    fn url(&self) -> &str {
        &self.0.url
    }

    /// The Go etcdctl over TLS, skipping verification.
    fn etcdctl(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.url()))
            .args(SKIP_VERIFY)
            .args(args)
            .output()
            .expect("run etcdctl")
    }
}

/// TLS to a server started with --auto-tls: which flag combinations reach it, as etcdctl 3.4
/// decides (skipping verification needs --insecure-transport=false; an endpoint without a
/// scheme then uses TLS too).
#[test]
fn tls_to_an_auto_tls_server_matches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = AutoTls::start("etcd", &dir.path().join("go"));
    let ours_bin = std::env::var("TWIN_SERVER_BIN")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "etcd".to_string());
    let ours = AutoTls::start(&ours_bin, &dir.path().join("ours"));
    let sessions = [
        run(&[
            "--endpoints=https://{ADDR}",
            "--insecure-transport=false",
            "--insecure-skip-tls-verify",
            "put",
            "a",
            "1",
        ]),
        run(&[
            "--endpoints={ADDR}",
            "--insecure-transport=false",
            "--insecure-skip-tls-verify",
            "get",
            "a",
        ]),
        run(&[
            "--endpoints=https://{ADDR}",
            "--insecure-skip-tls-verify",
            "--command-timeout=2s",
            "get",
            "a",
        ]),
        run(&[
            "--endpoints=https://{ADDR}",
            "--insecure-transport=false",
            "--command-timeout=2s",
            "get",
            "a",
        ]),
        run(&[
            "--endpoints=https://{ADDR}",
            "--insecure-transport=false",
            "--insecure-skip-tls-verify",
            "endpoint",
            "health",
        ]),
    ];
    let mut failures = Vec::new();
    for s in &sessions {
        let on = |client, server: &AutoTls| {
            let put = |k: &str, v: &str| {
                assert!(server.etcdctl(&["put", k, v]).status.success());
            };
            let url = server.url().to_string();
            play_on(client, server.url(), s, &put, &move |t| {
                normalise_durations(&t.replace(&url, "<CLIENT_URL>"))
            })
        };
        let (a, b) = (on(Client::Go, &go), on(Client::Ours, &ours));
        if a != b {
            failures.push(format!(
                "session {:?}:\n--- go (exit {:?}):\n{}\n--- ours (exit {:?}):\n{}",
                s.args, a.0, a.1, b.0, b.1
            ));
        }
    }
    assert_same(failures);
}
