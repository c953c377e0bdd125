// Test support for multi-member clusters: members of any etcd-compatible binary (ours or the
// real etcd 3.4) on free loopback ports, TCP proxies in front of peer ports that a test can
// cut to partition a member, and a writer that records every acknowledged write.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::support::free_port;

/// A loopback TCP proxy; `cut` drops every connection through it and refuses new ones;
/// `block_from` drops connections on which a given member sends (etcd's peer requests name
/// their sender in an `X-Server-From` header), so a member can be cut off in both directions.
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    /// Milliseconds every chunk waits before it is passed on (a slow link), both ways.
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Percent of chunks "lost" (see `set_loss`), both ways.
    loss_pct: Arc<std::sync::atomic::AtomicU64>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
    blocked: Arc<Mutex<Vec<String>>>,
}

/// Whether `data` names a blocked sender (header names are case-insensitive).
fn names_blocked(data: &[u8], blocked: &Mutex<Vec<String>>) -> bool {
    let blocked = blocked.lock().unwrap_or_else(|e| e.into_inner());
    if blocked.is_empty() {
        return false;
    }
    let text = String::from_utf8_lossy(data).to_ascii_lowercase();
    blocked
        .iter()
        .any(|id| text.contains(&format!("x-server-from: {id}\r\n")))
}

/// How a link slows what passes through it: a fixed delay, and a loss rate.
#[derive(Clone)]
struct Impair {
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
    loss_pct: Arc<std::sync::atomic::AtomicU64>,
}

/// Linux's minimum TCP retransmission timeout: a lost segment reaches the other end this much
/// later (doubling while retransmissions are lost too).
const RTO_MS: u64 = 200;

fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    blocked: Option<Arc<Mutex<Vec<String>>>>,
    imp: Impair,
) {
    let mut buf = [0u8; 16 * 1024];
    // Per direction, seeded from the socket's port so two pipes differ.
    let mut rng = from
        .peer_addr()
        .map(|a| a.port() as u64)
        .unwrap_or(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        | 1;
    let mut losses_in_a_row = 0u32;
    // The end of the previous read, so a header split between two reads is still seen.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(b) = &blocked {
                    tail.extend_from_slice(&buf[..n]);
                    if names_blocked(&tail, b) {
                        break;
                    }
                    let keep = tail.len().saturating_sub(64);
                    tail.drain(..keep);
                }
                let delay = imp.delay_ms.load(Ordering::SeqCst);
                if delay > 0 {
                    std::thread::sleep(Duration::from_millis(delay));
                }
                let loss = imp.loss_pct.load(Ordering::SeqCst);
                if loss > 0 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    if rng % 100 < loss {
                        // Lost: TCP resends it after the RTO, and nothing behind it passes
                        // meanwhile (in order, so head-of-line blocked).
                        std::thread::sleep(Duration::from_millis(RTO_MS << losses_in_a_row.min(3)));
                        losses_in_a_row += 1;
                    } else {
                        losses_in_a_row = 0;
                    }
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

impl Proxy {
    /// Forwards a free port to 127.0.0.1:`target`.
    pub fn start(target: u16) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = l.local_addr().expect("proxy addr").port();
        let cut = Arc::new(AtomicBool::new(false));
        let imp = Impair {
            delay_ms: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            loss_pct: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let blocked: Arc<Mutex<Vec<String>>> = Arc::default();
        let (c, s, cs, bl) = (cut.clone(), stop.clone(), conns.clone(), blocked.clone());
        let im = imp.clone();
        std::thread::spawn(move || {
            for inbound in l.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(inbound) = inbound else { continue };
                if c.load(Ordering::SeqCst) {
                    let _ = inbound.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                {
                    let mut g = cs.lock().unwrap_or_else(|e| e.into_inner());
                    g.extend(inbound.try_clone().ok());
                    g.extend(outbound.try_clone().ok());
                }
                let (i2, o2) = match (inbound.try_clone(), outbound.try_clone()) {
                    (Ok(i), Ok(o)) => (i, o),
                    _ => continue,
                };
                let (bl, d1, d2) = (bl.clone(), im.clone(), im.clone());
                std::thread::spawn(move || pipe(inbound, outbound, Some(bl), d1));
                std::thread::spawn(move || pipe(o2, i2, None, d2));
            }
        });
        Proxy {
            port,
            cut,
            delay_ms: imp.delay_ms,
            loss_pct: imp.loss_pct,
            conns,
            stop,
            blocked,
        }
    }

    /// Drops the connections on which member `id` (hex) sends, or lets them through again.
    pub fn block_from(&self, id_hex: &str, block: bool) {
        let id = id_hex.trim_start_matches('0').to_ascii_lowercase();
        let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        b.retain(|x| *x != id);
        if block {
            b.push(id);
            drop(b);
            // Connections already open from that member go too (they are re-dialed and
            // then refused by their first request).
            for c in self
                .conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
            {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }

    /// Delays everything through the proxy by `ms` (0: none), as a slow or congested link.
    pub fn set_delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Loses `percent` of what passes through (0: none), as TCP shows packet loss to the
    /// programs above it: a lost chunk arrives one retransmission timeout later (200 ms,
    /// doubling while losses follow each other), and nothing behind it passes meanwhile.
    /// This VM's kernel has no netem qdisc (`tc qdisc add ... netem` answers "Specified qdisc
    /// kind is unknown"), so loss is made here, above TCP, rather than below it.
    pub fn set_loss(&self, percent: u64) {
        self.loss_pct.store(percent.min(100), Ordering::SeqCst);
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
        if cut {
            for c in self
                .conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
            {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.set_cut(true);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One member: its process, URLs and data dir.
pub struct Node {
    pub name: String,
    pub client_url: String,
    /// The URL it listens on for peers.
    pub listen_peer: String,
    /// The URL the others reach it at (through its proxy when the cluster has proxies).
    pub advertise_peer: String,
    pub data_dir: PathBuf,
    /// Its stderr, beside the data dir unless a test moves it (off a disk that can lose
    /// power, say).
    pub log: PathBuf,
    pub child: Option<Child>,
    pub proxy: Option<Proxy>,
    pub extra: Vec<String>,
    pub initial_cluster: String,
    pub state: &'static str,
}

impl Node {
    /// A member to be added to a running cluster (its settings come from `member add`).
    pub fn new_for_join(dir: &Path, name: &str) -> Node {
        Node::new(dir, name, false)
    }

    fn new(dir: &Path, name: &str, proxied: bool) -> Node {
        let peer_port = free_port();
        let proxy = proxied.then(|| Proxy::start(peer_port));
        let advertise = match &proxy {
            Some(p) => format!("http://127.0.0.1:{}", p.port),
            None => format!("http://127.0.0.1:{peer_port}"),
        };
        Node {
            name: name.to_string(),
            client_url: format!("http://127.0.0.1:{}", free_port()),
            listen_peer: format!("http://127.0.0.1:{peer_port}"),
            advertise_peer: advertise,
            data_dir: dir.join(name),
            log: dir.join(name).with_extension("log"),
            child: None,
            proxy,
            extra: Vec::new(),
            initial_cluster: String::new(),
            state: "new",
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.log.clone()
    }

    pub fn spawn(&mut self, bin: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open member log");
        let child = Command::new(bin)
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &self.client_url])
            .args(["--advertise-client-urls", &self.client_url])
            .args(["--listen-peer-urls", &self.listen_peer])
            .args(["--initial-advertise-peer-urls", &self.advertise_peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", self.state])
            .args(["--initial-cluster-token", "test-cluster"])
            .args(&self.extra)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn member");
        self.child = Some(child);
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` to the member's process, if it runs.
    pub fn signal(&self, sig: i32) {
        if let Some(c) = self.child.as_ref() {
            // Safety: signalling our own child by its pid.
            unsafe {
                libc::kill(c.id() as i32, sig);
            }
        }
    }

    /// SIGTERM, and wait for the process to end; how it ended, if it ran.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.signal(libc::SIGTERM);
        self.child.take().and_then(|mut c| c.wait().ok())
    }

    /// Waits up to `within` for the process to end by itself; how it ended, or None if it
    /// still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(s) = self.exited() {
                self.child = None;
                return Some(s);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the process has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn etcdctl(&self, args: &[&str]) -> Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.client_url, "--command-timeout", "5s"])
            .args(args)
            .output()
            .expect("run etcdctl")
    }

    /// etcdctl with `input` on its stdin (a value too big for an argument, a txn's lines).
    pub fn etcdctl_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.client_url, "--command-timeout", "5s"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run etcdctl");
        if let Some(mut stdin) = child.stdin.take() {
            // etcdctl may exit before reading it all (a refused request): not this call's error.
            let _ = stdin.write_all(input);
        }
        child.wait_with_output().expect("wait for etcdctl")
    }

    pub fn etcdctl_ok(&self, args: &[&str]) -> String {
        let out = self.etcdctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} on {} failed: {}\nlog {} ends:\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr),
            self.log_path().display(),
            self.log_tail(40)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The member's own view of a key (serializable read: no leader needed).
    pub fn local_get(&self, key: &str) -> Option<String> {
        let out = self.etcdctl(&["get", key, "--consistency=s", "--print-value-only"]);
        if !out.status.success() {
            return None;
        }
        let s = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        (!s.is_empty()).then_some(s)
    }

    /// Waits until `endpoint health` passes (the member has a leader and serves).
    pub fn wait_healthy(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.etcdctl(&["endpoint", "health"]).status.success() {
                return;
            }
            if let Some(st) = self.exited() {
                // The temp dir goes with the test: show the log's end here.
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                panic!(
                    "member {} exited ({st}); log {} ends:\n{}",
                    self.name,
                    self.log_path().display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "member {} not healthy within {within:?}; log {} ends:\n{}",
                self.name,
                self.log_path().display(),
                self.log_tail(30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last `n` lines of the member's log above debug level (the temp dir goes with the
    /// test, so a failure shows them).
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains("\"debug\"")).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Waits until the member's local store has `key` = `value`.
    pub fn wait_local(&self, key: &str, value: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while self.local_get(key).as_deref() != Some(value) {
            assert!(
                Instant::now() < deadline,
                "member {} never saw {key}={value}; log {} ends:\n{}",
                self.name,
                self.log_path().display(),
                self.log_tail(30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub struct Cluster {
    pub bin: String,
    pub nodes: Vec<Node>,
}

/// `n` members m1..mN of a new cluster, not started: `adjust` may change each one (URLs,
/// flags) before their --initial-cluster is written from what they became.
pub fn members(
    dir: &Path,
    n: usize,
    proxied: bool,
    extra: &[&str],
    adjust: impl Fn(&mut Node),
) -> Vec<Node> {
    std::fs::create_dir_all(dir).expect("create the cluster's dir");
    let mut nodes: Vec<Node> = (1..=n)
        .map(|i| Node::new(dir, &format!("m{i}"), proxied))
        .collect();
    for m in &mut nodes {
        m.extra = extra.iter().map(|s| s.to_string()).collect();
        adjust(m);
    }
    let ic = nodes
        .iter()
        .map(|m| format!("{}={}", m.name, m.advertise_peer))
        .collect::<Vec<_>>()
        .join(",");
    for m in &mut nodes {
        m.initial_cluster = ic.clone();
    }
    nodes
}

impl Cluster {
    /// Starts `n` members of `bin` with `extra` flags and waits until all are healthy.
    pub fn start(bin: &str, dir: &Path, n: usize, proxied: bool, extra: &[&str]) -> Cluster {
        let mut nodes = members(dir, n, proxied, extra, |_| {});
        for m in &mut nodes {
            m.spawn(bin);
        }
        for m in &mut nodes {
            m.wait_healthy(Duration::from_secs(30));
        }
        Cluster {
            bin: bin.to_string(),
            nodes,
        }
    }

    /// Starts a cluster whose member i runs `bins[i]` (etcd 3.4 and ours mixed), with
    /// `extra` flags, and waits until all are healthy.
    pub fn start_bins(bins: &[&str], dir: &Path, extra: &[&str]) -> Cluster {
        let mut nodes = members(dir, bins.len(), false, extra, |_| {});
        for (m, bin) in nodes.iter_mut().zip(bins) {
            m.spawn(bin);
        }
        for m in &mut nodes {
            m.wait_healthy(Duration::from_secs(30));
        }
        Cluster {
            bin: bins.first().copied().unwrap_or_default().to_string(),
            nodes,
        }
    }

    /// Every client URL, comma separated (for etcdctl --endpoints).
    pub fn endpoints(&self) -> String {
        self.nodes
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| m.client_url.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the member that says it leads, waiting up to `within` for one.
    pub fn leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            for (i, m) in self.nodes.iter().enumerate() {
                if m.child.is_none() {
                    continue;
                }
                let out = m.etcdctl(&["endpoint", "status", "-w", "json"]);
                if !out.status.success() {
                    continue;
                }
                let v: serde_json::Value =
                    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
                let st = &v[0]["Status"];
                let me = st["header"]["member_id"].as_u64();
                if me.is_some() && st["leader"].as_u64() == me {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no leader within {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Cuts member `i` off from the others in both directions (its peer port refuses
    /// everything, and the others' ports refuse what it sends), or heals it.
    pub fn isolate(&self, i: usize, cut: bool) {
        let id = self.member_id_hex(&self.nodes[i].name);
        self.nodes[i].proxy.as_ref().expect("proxied").set_cut(cut);
        for (j, m) in self.nodes.iter().enumerate() {
            if j != i {
                m.proxy.as_ref().expect("proxied").block_from(&id, cut);
            }
        }
    }

    /// A member's ID as etcdctl prints it (hex), from `member list`.
    pub fn member_id_hex(&self, name: &str) -> String {
        self.member_ids_hex(&[name]).remove(0)
    }

    /// The IDs of the members named `names`, in that order, from one `member list`.
    pub fn member_ids_hex(&self, names: &[&str]) -> Vec<String> {
        let any = self
            .nodes
            .iter()
            .find(|m| m.child.is_some())
            .expect("a running member");
        let list = any.etcdctl_ok(&["member", "list"]);
        names
            .iter()
            .map(|name| {
                list.lines()
                    .find(|l| l.split(", ").nth(2) == Some(*name))
                    .and_then(|l| l.split(", ").next())
                    .unwrap_or_else(|| panic!("member {name} not in the member list"))
                    .to_string()
            })
            .collect()
    }
}

/// A tmpfs of our own (mounting one needs root), unmounted when dropped (lazily: a killed
/// member may still hold it): a disk that can fill up.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs with `opts` (`size=80m`) on `at`, which must exist.
    pub fn mount(at: &Path, opts: &str) -> Tmpfs {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(st.success(), "cannot mount a tmpfs on {}", at.display());
        Tmpfs(at.to_path_buf())
    }

    /// Whether this process may mount one.
    pub fn can_mount() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// Changes the size limit (`size=400m`).
    pub fn resize(&self, opts: &str) {
        assert!(
            self.try_resize(opts),
            "cannot resize the tmpfs on {}",
            self.0.display()
        );
    }

    /// As `resize`, false when the kernel refuses: a limit below what is in use.
    pub fn try_resize(&self, opts: &str) -> bool {
        Command::new("mount")
            .args(["-o", &format!("remount,{opts}")])
            .arg(&self.0)
            .stderr(Stdio::null())
            .status()
            .expect("run mount")
            .success()
    }

    /// Bytes in use on it.
    pub fn used(&self) -> u64 {
        let path = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes())
            .expect("a path without NUL");
        // SAFETY: statvfs only writes the struct it is given; the path is NUL-terminated.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
        assert_eq!(rc, 0, "statvfs {}", self.0.display());
        (st.f_blocks - st.f_bfree) * st.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes keys `prefix<n>` through a gRPC client, round robin over the endpoints it is given,
/// and records each write the server acknowledged.
pub struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    pub fn start(endpoints: Vec<String>, prefix: &str) -> Writer {
        Writer::start_many(endpoints, prefix, 1)
    }

    /// `clients` writers at once (client c writes `prefix<c>-<n>`), each starting at another
    /// endpoint.
    pub fn start_many(endpoints: Vec<String>, prefix: &str, clients: usize) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let (s, a, prefix) = (stop.clone(), acked.clone(), prefix.to_string());
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("writer runtime");
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for c in 0..clients {
                    let (s, a, endpoints) = (s.clone(), a.clone(), endpoints.clone());
                    let prefix = if clients == 1 {
                        prefix.clone()
                    } else {
                        format!("{prefix}{c:02}-")
                    };
                    tasks.push(tokio::spawn(write_loop(s, a, endpoints, prefix, c)));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        });
        Writer {
            stop,
            acked,
            handle: Some(handle),
        }
    }

    pub fn acked_count(&self) -> usize {
        self.acked.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The keys acknowledged so far (the writer goes on).
    pub fn acked_so_far(&self) -> Vec<String> {
        self.acked.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops writing; the keys whose writes were acknowledged.
    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        std::mem::take(&mut *self.acked.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// One writer: puts `prefix<n>` round robin over `endpoints` (from endpoint `first`) until
/// `stop`, recording each acknowledged key.
async fn write_loop(
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    endpoints: Vec<String>,
    prefix: String,
    first: usize,
) {
    use proto::etcdserverpb::{PutRequest, kv_client::KvClient};
    let mut n = 0u64;
    let mut clients: Vec<Option<KvClient<tonic::transport::Channel>>> = vec![None; endpoints.len()];
    while !stop.load(Ordering::SeqCst) {
        let i = (n as usize + first) % endpoints.len();
        n += 1;
        if clients[i].is_none() {
            let ep = tonic::transport::Endpoint::from_shared(endpoints[i].clone())
                .expect("endpoint")
                .connect_timeout(Duration::from_millis(500))
                .timeout(Duration::from_secs(3));
            clients[i] = ep.connect().await.ok().map(KvClient::new);
        }
        let Some(c) = clients[i].as_mut() else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let key = format!("{prefix}{n:08}");
        let req = PutRequest {
            key: key.clone().into_bytes(),
            value: b"v".to_vec(),
            ..Default::default()
        };
        match c.put(req).await {
            Ok(_) => acked.lock().unwrap_or_else(|e| e.into_inner()).push(key),
            Err(st)
                if st.code() == tonic::Code::Unavailable && st.message().contains("transport") =>
            {
                clients[i] = None
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Checks that every acknowledged key is in the cluster (one linearizable prefix read).
pub fn assert_all_present(node: &Node, prefix: &str, acked: &[String]) {
    let out = node.etcdctl_ok(&["get", prefix, "--prefix", "--keys-only"]);
    let present: std::collections::HashSet<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    let missing: Vec<&String> = acked
        .iter()
        .filter(|k| !present.contains(k.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes are missing, e.g. {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
    );
}

/// What `etcdctl member add` printed: the new member's ID (hex) and the --initial-cluster to
/// start it with.
pub struct Added {
    pub id: String,
    pub initial_cluster: String,
}

/// Parses `member add`'s output ("Member <id> added to cluster <cid>", then ETCD_* lines).
pub fn parse_member_add(out: &str) -> Added {
    let id = out
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no member ID in {out:?}"))
        .to_string();
    let initial_cluster = out
        .lines()
        .find_map(|l| l.strip_prefix("ETCD_INITIAL_CLUSTER=\""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no ETCD_INITIAL_CLUSTER line in {out:?}"))
        .to_string();
    Added {
        id,
        initial_cluster,
    }
}

/// Promotes learner `id` through `via` once it has caught up (until then etcd refuses: the
/// learner is not in sync with the leader); other errors are retried only when they contain
/// one of `also_retry`; panics after `within`.
pub fn promote_when_ready(via: &Node, id: &str, within: Duration, also_retry: &[&str]) {
    let deadline = Instant::now() + within;
    loop {
        let out = via.etcdctl(&["member", "promote", id]);
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("in sync with leader") || also_retry.iter().any(|e| err.contains(e)),
            "promote failed: {err}"
        );
        assert!(
            Instant::now() < deadline,
            "learner {id} never caught up within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One Maintenance.Downgrade call (`action`: 0 validate, 1 enable, 2 cancel) on a member's
/// client URL, from a runtime of its own.
pub fn downgrade(
    client_url: &str,
    action: i32,
    version: &str,
) -> Result<proto::etcdserverpb::DowngradeResponse, tonic::Status> {
    use proto::etcdserverpb::{DowngradeRequest, maintenance_client::MaintenanceClient};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("downgrade runtime");
    rt.block_on(async {
        let ep = tonic::transport::Endpoint::from_shared(client_url.to_string())
            .expect("endpoint")
            .timeout(Duration::from_secs(10));
        let mut c = MaintenanceClient::new(ep.connect().await.expect("connect"));
        c.downgrade(DowngradeRequest {
            action,
            version: version.to_string(),
        })
        .await
        .map(|r| r.into_inner())
    })
}

/// Connects to `addr`, sends `sent`, and reads until the server closes the connection: what
/// came back and how long the server kept it open; an error naming `sent` if it is still
/// open after `within` (a reset counts as a close).
pub fn until_closed(
    addr: &str,
    sent: &[u8],
    within: Duration,
) -> Result<(Vec<u8>, Duration), String> {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.write_all(sent).map_err(|e| format!("send: {e}"))?;
    s.set_read_timeout(Some(within))
        .map_err(|e| format!("read timeout: {e}"))?;
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Ok((got, started.elapsed())),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok((got, started.elapsed())),
        Err(e) => Err(format!(
            "{:?} still open after {within:?}: {e}",
            String::from_utf8_lossy(sent)
        )),
    }
}

/// Changes the value of the newest revision in stopped member `m`'s db, behind raft's back:
/// its HashKV then differs from its peers' at that revision and after.
pub fn corrupt_newest_value(m: &Node) {
    use common::backend::{Db, ReadTxn, buckets};
    use prost::Message;
    let db = Db::open(m.data_dir.join("member/snap/db")).expect("open the member's db");
    let (k, v) = {
        let tx = db.begin_read();
        let mut c = tx.cursor(buckets::KEY).expect("key bucket");
        let (k, v) = c.last().expect("read").expect("a revision");
        (k.to_vec(), v.to_vec())
    };
    let mut kv = proto::mvccpb::KeyValue::decode(v.as_slice()).expect("a key-value");
    kv.value = b"corrupted".to_vec();
    let mut tx = db.begin_write().expect("write tx");
    tx.put(buckets::KEY, &k, &kv.encode_to_vec()).expect("put");
    tx.commit().expect("commit");
}

/// A membership change (`member add`/`remove`/`promote`...) through etcdctl on `via`, retried
/// while etcd refuses it because a voter has not been connected for 5 s yet ("unhealthy
/// cluster", as after a start, a restart or a leader move); its output.
pub fn member_change(via: &Node, args: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = via.etcdctl(args);
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("unhealthy cluster") && Instant::now() < deadline,
            "{args:?} on {} failed: {err}",
            via.name
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Adds `name` as a learner through `via` with the real etcdctl and starts it with `bin` and
/// `extra` flags, as `member add` says (its initial cluster, state "existing"). Returns the
/// running member and what etcdctl printed.
pub fn start_learner(
    via: &Node,
    dir: &Path,
    name: &str,
    bin: &str,
    extra: &[&str],
) -> (Node, String) {
    let mut new = Node::new_for_join(dir, name);
    let out = via.etcdctl_ok(&[
        "member",
        "add",
        name,
        "--learner",
        &format!("--peer-urls={}", new.advertise_peer),
    ]);
    new.initial_cluster = parse_member_add(&out).initial_cluster;
    new.state = "existing";
    new.extra = extra.iter().map(|s| s.to_string()).collect();
    new.spawn(bin);
    (new, out)
}

/// Adds a learner that never starts (its peer URL has no listener) through `via`; its ID (hex).
/// It is not in sync with the leader, and it has neither a name nor client URLs.
pub fn add_idle_learner(via: &Node, name: &str) -> String {
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = member_change(
        via,
        &[
            "member",
            "add",
            name,
            "--learner",
            &format!("--peer-urls={url}"),
        ],
    );
    parse_member_add(&out).id
}
