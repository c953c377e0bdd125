// Long-running commands survive a lost endpoint as etcd's client makes them: `watch` resumes
// on the next endpoint (or the same one back) from the revision after the last it printed, and
// `lease keep-alive` keeps renewing; tested through TCP proxies that are cut in front of etcd.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::RealEtcd;

const OURS: &str = env!("CARGO_BIN_EXE_etcdctl");

/// A TCP proxy to `target`; `cut` closes its listener and every connection through it.
struct Proxy {
    addr: String,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (s, c, target) = (stop.clone(), conns.clone(), target.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut all = c.lock().unwrap();
                all.push(client.try_clone().unwrap());
                all.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr, stop, conns }
    }

    fn cut(&self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag and drops the listener.
        let _ = TcpStream::connect(&self.addr);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// Our etcdctl running in the background, its stdout lines collected.
struct Running {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn start(endpoints: &str, args: &[&str]) -> Running {
        let mut child = Command::new(OURS)
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints, "--dial-timeout=1s"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run etcdctl");
        let out = child.stdout.take().expect("stdout");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                l.lock().unwrap().push(line);
            }
        });
        Running { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for the lines so far.
    fn wait_for(&self, what: &str, pred: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !pred(&self.lines()) {
            assert!(Instant::now() < deadline, "{what}: {:?}", self.lines());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn host(url: &str) -> &str {
    url.trim_start_matches("http://")
}

#[test]
fn watch_resumes_on_another_endpoint_and_after_a_restart() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut etcd = RealEtcd::start(&tmp.path().join("real"), "watch");
    let (p1, p2) = (
        Proxy::start(host(&etcd.client_url)),
        Proxy::start(host(&etcd.client_url)),
    );
    let w = Running::start(
        &format!("{},{}", p1.addr, p2.addr),
        &["watch", "--prefix", "k"],
    );
    // The watch is up once a put shows.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    while w.lines().is_empty() {
        assert!(Instant::now() < deadline, "the watch never started");
        etcd.etcdctl_ok(&["put", &format!("k0-{n}"), "v"]);
        n += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    etcd.etcdctl_ok(&["put", "k1", "v1"]);
    w.wait_for("k1", |l| l.iter().any(|x| x == "k1"));

    // The endpoint in use goes away; writes go on meanwhile.
    p1.cut();
    etcd.etcdctl_ok(&["put", "k2", "v2"]);
    etcd.etcdctl_ok(&["put", "k3", "v3"]);
    w.wait_for("k3", |l| l.iter().any(|x| x == "k3"));

    // The server itself restarts (kill -9); the watch comes back through the other endpoint.
    etcd.restart("etcd", &[]);
    etcd.etcdctl_ok(&["put", "k4", "v4"]);
    w.wait_for("k4", |l| l.iter().any(|x| x == "k4"));

    let lines = w.lines();
    let after: Vec<&str> = lines
        .windows(2)
        .filter(|x| x[0] == "PUT" && x[1].starts_with('k') && !x[1].starts_with("k0-"))
        .map(|x| x[1].as_str())
        .collect();
    // Every event once, in order.
    assert_eq!(after, ["k1", "k2", "k3", "k4"], "{lines:?}");
}

#[test]
fn lease_keep_alive_survives_a_lost_endpoint() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let etcd = RealEtcd::start(&tmp.path().join("real"), "lease");
    let granted = etcd.etcdctl_ok(&["lease", "grant", "4"]);
    let id = granted
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    let (p1, p2) = (
        Proxy::start(host(&etcd.client_url)),
        Proxy::start(host(&etcd.client_url)),
    );
    let mut k = Running::start(
        &format!("{},{}", p1.addr, p2.addr),
        &["lease", "keep-alive", &id],
    );
    k.wait_for("first renewal", |l| !l.is_empty());
    p1.cut();
    // Longer than the TTL: only renewals through the other endpoint keep it.
    std::thread::sleep(Duration::from_secs(6));
    let ttl = etcd.etcdctl_ok(&["lease", "timetolive", &id]);
    assert!(
        ttl.contains("remaining(") && !ttl.contains("already expired"),
        "{ttl}"
    );
    let before = k.lines().len();
    k.wait_for("renewals after the cut", |l| l.len() > before);
    // Revoked: the command says so and ends well.
    etcd.etcdctl_ok(&["lease", "revoke", &id]);
    k.wait_for("expiry notice", |l| {
        l.last()
            .is_some_and(|x| x == &format!("lease {id} expired or revoked."))
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = k.child.try_wait().expect("wait") {
            assert!(status.success());
            break;
        }
        assert!(Instant::now() < deadline, "keep-alive did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_held_lock_outlives_a_lost_endpoint() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let etcd = RealEtcd::start(&tmp.path().join("real"), "lock");
    let (p1, p2) = (
        Proxy::start(host(&etcd.client_url)),
        Proxy::start(host(&etcd.client_url)),
    );
    let l = Running::start(
        &format!("{},{}", p1.addr, p2.addr),
        &["lock", "--ttl", "3", "mylock"],
    );
    l.wait_for("lock held", |x| x.iter().any(|k| k.starts_with("mylock/")));
    p1.cut();
    // Twice the TTL: the lock's key stays only if its session lease was renewed meanwhile.
    std::thread::sleep(Duration::from_secs(6));
    let keys = etcd.etcdctl_ok(&["get", "--prefix", "mylock/", "--keys-only"]);
    assert_eq!(keys.lines().filter(|k| !k.is_empty()).count(), 1, "{keys}");
}
