// Test support shared by the integration tests: free ports, and a real etcd 3.4 (Debian's
// etcd-server, installed by scripts/deps.sh) started in a temp dir as the compatibility oracle.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// etcd 3.5's server binary (Debian trixie's etcd-server, which scripts/deps.sh unpacks into
/// /opt/etcd-3.5; ETCD35_DIR moves it): the oracle for what 3.5 added over 3.4.
pub fn etcd35() -> String {
    let dir = std::env::var("ETCD35_DIR").unwrap_or_else(|_| "/opt/etcd-3.5".to_string());
    let bin = format!("{dir}/etcd");
    assert!(
        Path::new(&bin).exists(),
        "{bin} (etcd 3.5) is missing: run scripts/deps.sh"
    );
    bin
}

/// A port that was free a moment ago on 127.0.0.1. It is taken below Linux's ephemeral range
/// (32768..61000): a port the OS hands out for port 0 can meanwhile become the local port of one
/// of the many client connections the tests open, and the server meant for it then fails to
/// bind. Each call in a process gets another port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        // Start somewhere else in each process, so that test binaries do not all begin alike.
        let seed = std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
        let _ = NEXT.compare_exchange(u32::MAX, seed % SPAN, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// A real etcd server process on free loopback ports; killed when dropped.
pub struct RealEtcd {
    pub child: Option<Child>,
    pub data_dir: PathBuf,
    pub client_url: String,
    pub peer_url: String,
    pub name: String,
}

fn require(bin: &str) {
    let probe = if bin == "etcdctl" {
        "version"
    } else {
        "--version"
    };
    let ok = Command::new(bin)
        .arg(probe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{bin}` (the real etcd 3.4) is missing: run scripts/deps.sh, which installs Debian's etcd-server and etcd-client"
    );
}

impl RealEtcd {
    /// Starts `etcd` with a single member named `name` over `data_dir`, and waits until it serves.
    pub fn start(data_dir: &Path, name: &str) -> RealEtcd {
        Self::start_with(data_dir, name, &[])
    }

    pub fn start_with(data_dir: &Path, name: &str, extra: &[&str]) -> RealEtcd {
        require("etcd");
        Self::start_bin("etcd", data_dir, name, extra)
    }

    /// Starts another etcd-compatible server binary (ours) with the same flags.
    pub fn start_bin(bin: &str, data_dir: &Path, name: &str, extra: &[&str]) -> RealEtcd {
        let mut e = RealEtcd {
            child: None,
            data_dir: data_dir.to_path_buf(),
            client_url: format!("http://127.0.0.1:{}", free_port()),
            peer_url: format!("http://127.0.0.1:{}", free_port()),
            name: name.to_string(),
        };
        e.child = Some(e.spawn(bin, extra));
        e.wait_ready();
        e
    }

    fn spawn(&self, bin: &str, extra: &[&str]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.with_extension("log"))
            .expect("open etcd log file");
        Command::new(bin)
            .arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen-client-urls")
            .arg(&self.client_url)
            .arg("--advertise-client-urls")
            .arg(&self.client_url)
            .arg("--listen-peer-urls")
            .arg(&self.peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&self.peer_url)
            .arg("--initial-cluster")
            .arg(format!("{}={}", self.name, self.peer_url))
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd")
    }

    /// Starts `bin` again on the same data dir and URLs (after a stop or a kill).
    pub fn restart(&mut self, bin: &str, extra: &[&str]) {
        self.restart_within(bin, extra, Duration::from_secs(30));
    }

    /// `restart`, waiting up to `limit` for the server to serve (a large db takes etcd 3.4
    /// half a minute to reopen on a busy machine).
    pub fn restart_within(&mut self, bin: &str, extra: &[&str], limit: Duration) {
        self.kill9();
        self.child = Some(self.spawn(bin, extra));
        self.wait_ready_within(limit);
    }

    fn wait_ready(&mut self) {
        self.wait_ready_within(Duration::from_secs(30));
    }

    fn wait_ready_within(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let out = self.etcdctl(&["endpoint", "health"]);
            // With auth on, an anonymous health check is refused, but the server answered.
            if out.status.success()
                || String::from_utf8_lossy(&out.stderr).contains("user name is empty")
            {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "real etcd exited early ({status}); log: {}",
                    self.data_dir.with_extension("log").display()
                );
            }
            assert!(
                Instant::now() < deadline,
                "real etcd did not become healthy in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs the real Go etcdctl (API v3) against this server.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        require("etcdctl");
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(&self.client_url)
            .args(args)
            .output()
            .expect("run etcdctl")
    }

    /// Runs etcdctl with `input` on its standard input (txn reads its ops from there).
    pub fn etcdctl_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        require("etcdctl");
        let mut c = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(&self.client_url)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run etcdctl");
        if let Some(mut stdin) = c.stdin.take() {
            stdin
                .write_all(input.as_bytes())
                .expect("write etcdctl stdin");
        }
        c.wait_with_output().expect("wait for etcdctl")
    }

    /// Runs etcdctl and returns stdout, failing the test with stderr when it fails.
    pub fn etcdctl_ok(&self, args: &[&str]) -> String {
        let out = self.etcdctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops the server cleanly (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Safety: signalling our own child process by its pid.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let _ = child.wait();
        }
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A single member of `bin` whose client URL is https (its peer URL plain http), started with
/// `extra` flags (certificate files or --auto-tls); killed when dropped. Callers wait for it.
pub struct HttpsMember {
    pub child: std::process::Child,
    pub url: String,
}

impl HttpsMember {
    pub fn spawn(bin: &str, data_dir: &Path, stderr: Stdio, extra: &[&str]) -> HttpsMember {
        let url = format!("https://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let child = Command::new(bin)
            .args(["--name", "tls", "--data-dir"])
            .arg(data_dir)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .arg(format!("--initial-cluster=tls={peer}"))
            .args(extra)
            // No ETCD_* variables from the test's environment.
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        HttpsMember { child, url }
    }
}

impl Drop for HttpsMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A field of /proc/<pid>/status given in kB (`field` with its colon: "VmHWM:", "RssAnon:"),
/// or None when the process or the field is not there.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A process's anonymous resident memory (its heap, not the db file's mapped pages), in bytes.
/// Panics when /proc cannot tell: a memory bound checked against 0 would pass for nothing.
pub fn rss_anon_bytes(pid: u32) -> u64 {
    let kib = proc_status_kib(pid, "RssAnon:")
        .unwrap_or_else(|| panic!("no RssAnon in /proc/{pid}/status (has the process exited?)"));
    kib * 1024
}
