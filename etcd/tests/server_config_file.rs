// --config-file: the same YAML file starts the real etcd 3.4 and ours with the settings it
// holds, and command-line flags given next to it are ignored by both.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::free_port;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

fn etcdctl(url: &str, args: &[&str]) -> std::process::Output {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", url])
        .args(args)
        .output()
        .expect("run etcdctl")
}

/// Starts `bin` with only a config file (plus a flag it must ignore); returns what
/// `member list` says once it serves.
fn run_with_file(bin: &str, dir: &std::path::Path) -> String {
    let client = format!("http://127.0.0.1:{}", free_port());
    let peer = format!("http://127.0.0.1:{}", free_port());
    let data = dir.join("from-file.etcd");
    let yaml = format!(
        "# etcd configuration file\nname: 'from-file'\ndata-dir: {}\nlisten-client-urls: {client}\n\
         advertise-client-urls: {client}\nlisten-peer-urls: {peer}\ninitial-advertise-peer-urls: {peer}\n\
         initial-cluster: from-file={peer}\ninitial-cluster-token: 'file-token'\ninitial-cluster-state: 'new'\n\
         snapshot-count: 10000\nheartbeat-interval: 100\nelection-timeout: 1000\nlog-outputs: [stderr]\n\
         client-transport-security:\n  client-cert-auth: false\n",
        data.display()
    );
    let file = dir.join("etcd.conf.yml");
    std::fs::write(&file, yaml).expect("write config file");
    let log = std::fs::File::create(dir.join("server.log")).expect("log file");
    let mut child = Command::new(bin)
        .arg("--config-file")
        .arg(&file)
        .args(["--name", "from-flag"])
        .env("ETCD_NAME", "from-env")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = etcdctl(&client, &["member", "list"]);
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).into_owned();
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "{bin} exited ({st}); log in {}",
                dir.join("server.log").display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{bin} did not serve with its config file"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(etcdctl(&client, &["put", "k", "v"]).status.success());
    assert!(
        data.join("member/wal").is_dir(),
        "data dir from the file not used"
    );
    let _ = child.kill();
    let _ = child.wait();
    out
}

#[test]
fn a_config_file_sets_everything_like_etcds() {
    let tmp = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(tmp.path().join("real")).expect("dir");
    std::fs::create_dir_all(tmp.path().join("ours")).expect("dir");
    let real = run_with_file("etcd", &tmp.path().join("real"));
    let ours = run_with_file(OURS, &tmp.path().join("ours"));
    for out in [&real, &ours] {
        assert!(out.contains(", started, from-file, "), "{out}");
    }
    // Same file, same member ID (derived from the peer URL and token): compare the shape.
    let shape = |s: &str| s.split(", ").skip(1).take(2).collect::<Vec<_>>().join(", ");
    assert_eq!(shape(&real), shape(&ours));
}

#[test]
fn an_unreadable_or_malformed_config_file_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = Command::new(OURS)
        .args(["--config-file", "/nonexistent/etcd.yml"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/etcd.yml"), "{err}");
    let bad = tmp.path().join("bad.yml");
    std::fs::write(&bad, "name: [unclosed\n").expect("write");
    let out = Command::new(OURS)
        .arg("--config-file")
        .arg(&bad)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.yml"));
    assert!(!tmp.path().join("default.etcd").exists());
}
