// Our etcdctl against a server listening on a unix socket (etcd's unix://localhost:PORT, a
// socket file in the working directory): the real etcd 3.4, or TWIN_SERVER_BIN when set.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const OURS: &str = env!("CARGO_BIN_EXE_etcdctl");

#[test]
fn put_get_and_status_over_a_unix_socket() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = std::env::var("TWIN_SERVER_BIN").unwrap_or_else(|_| "etcd".into());
    // A name unique to this run; the socket lives in the temp dir.
    let port = 20000 + std::process::id() % 10000;
    let client = format!("unix://localhost:{port}");
    let peer = format!("unix://localhost:{}", port + 1);
    let mut child = Command::new(&server)
        .current_dir(dir.path())
        .args(["--name", "u", "--data-dir", "d"])
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("u={peer}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let ctl = |args: &[&str]| {
        Command::new(OURS)
            .current_dir(dir.path())
            .args(["--endpoints", &client])
            .args(args)
            .output()
            .expect("run etcdctl")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ctl(&["endpoint", "health"]).status.success() {
        assert!(Instant::now() < deadline, "the server never became healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ctl(&["put", "k", "v"]).status.success());
    let got = ctl(&["get", "k", "--print-value-only"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "v");
    let st = ctl(&["endpoint", "status"]);
    assert!(
        String::from_utf8_lossy(&st.stdout).starts_with(&format!("{client}, ")),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    let old = ctl(&["get", "k", "--rev", "2", "--print-value-only"]);
    assert_eq!(String::from_utf8_lossy(&old.stdout).trim(), "v");
    let _ = child.kill();
    let _ = child.wait();
}
