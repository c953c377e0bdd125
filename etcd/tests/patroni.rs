//! A real program on our server: Patroni (Debian's, with PostgreSQL 15) keeps a two-node
//! PostgreSQL HA pair in our etcd through its etcd3 backend (the JSON gateway: leases, keep-alives,
//! transactions, watches). The pair bootstraps, elects a primary, and fails over when the
//! primary's Patroni is killed. scripts/deps.sh installs patroni and postgresql-15.

mod http_client;
#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{RealEtcd, free_port};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// PostgreSQL refuses to run as root: Patroni and its postgres run as the `postgres` user the
/// Debian package creates.
fn as_postgres(prog: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        prog,
    ]);
    c
}

/// One Patroni node: its process, REST port and data dir.
struct Node {
    name: String,
    child: Option<Child>,
    rest: u16,
    data: PathBuf,
    log: PathBuf,
}

impl Node {
    fn start(dir: &Path, scope: &str, name: &str, etcd: &str) -> Node {
        let rest = free_port();
        let pg = free_port();
        let data = dir.join(format!("{name}-data"));
        let config = format!(
            "scope: {scope}
name: {name}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: {etcd}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    postgresql:
      use_pg_rewind: false
  initdb:
    - encoding: UTF8
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {PG_BIN}
  pgpass: {pgpass}
  authentication:
    replication: {{username: replicator, password: rep}}
    superuser: {{username: postgres, password: pg}}
  parameters:
    unix_socket_directories: {sockets}
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication replicator 127.0.0.1/32 trust
",
            data = data.display(),
            pgpass = dir.join(format!("{name}.pgpass")).display(),
            sockets = dir.display(),
        );
        let file = dir.join(format!("{name}.yml"));
        std::fs::write(&file, config).expect("write the Patroni config");
        chown_postgres(dir);
        let log = dir.join(format!("{name}.log"));
        let child = as_postgres("patroni")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("patroni log"))
            .spawn()
            .expect("start patroni");
        Node {
            name: name.to_string(),
            child: Some(child),
            rest,
            data,
            log,
        }
    }

    /// Patroni's own view (GET /patroni), when its REST API answers.
    fn status(&self) -> Option<Value> {
        let host = format!("http://127.0.0.1:{}", self.rest);
        if std::net::TcpStream::connect(host.trim_start_matches("http://")).is_err() {
            return None;
        }
        let r = http_client::request(&host, "GET", "/patroni", "", Duration::from_secs(3));
        serde_json::from_str(&r.body).ok()
    }

    fn is(&self, role: &str) -> bool {
        self.status()
            .is_some_and(|s| s["role"] == role && s["state"] == "running")
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        // Patroni's postgres outlives a killed Patroni: stop it too.
        let _ = as_postgres(&format!("{PG_BIN}/pg_ctl"))
            .args(["stop", "-m", "immediate", "-D"])
            .arg(&self.data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn chown_postgres(dir: &Path) {
    let ok = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chown {} to postgres", dir.display());
}

/// Waits for `cond`, failing with `what` and the nodes' logs after `within`.
fn wait_until(within: Duration, what: &str, nodes: &[&Node], cond: impl Fn() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        if Instant::now() > end {
            let logs: Vec<String> = nodes
                .iter()
                .map(|n| format!("--- {} ---\n{}", n.name, n.log_tail()))
                .collect();
            panic!("{what} within {within:?}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn patroni_pair_bootstraps_and_fails_over_on_our_server() {
    for (bin, pkg) in [("/usr/bin/patroni", "patroni"), (PG_BIN, "postgresql-15")] {
        assert!(
            Path::new(bin).exists(),
            "{bin} is missing: scripts/deps.sh installs Debian's {pkg}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // The postgres user must reach its files below the (root-owned, 0700) temp dir.
    let mut perms = std::fs::metadata(dir.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o711);
    std::fs::set_permissions(dir.path(), perms).unwrap();
    let etcd = RealEtcd::start_bin(OURS, &dir.path().join("etcd"), "etcd", &[]);
    let etcd_host = etcd.client_url.trim_start_matches("http://").to_string();
    let pat = dir.path().join("patroni");
    std::fs::create_dir(&pat).unwrap();
    let scope = format!("etcd-rs-{}", std::process::id());
    let n1 = Node::start(&pat, &scope, "node1", &etcd_host);
    let n2 = Node::start(&pat, &scope, "node2", &etcd_host);

    // Bootstrap: one primary, one streaming replica, the leader key in our etcd.
    let nodes = [&n1, &n2];
    wait_until(
        Duration::from_secs(90),
        "a primary and a running replica",
        &nodes,
        || (n1.is("master") && n2.is("replica")) || (n2.is("master") && n1.is("replica")),
    );
    let leader_key = format!("/service/{scope}/leader");
    let leader_of = || {
        String::from_utf8_lossy(
            &etcd
                .etcdctl(&["get", "--print-value-only", &leader_key])
                .stdout,
        )
        .trim()
        .to_string()
    };
    let (mut primary, replica) = if n1.is("master") { (n1, n2) } else { (n2, n1) };
    assert_eq!(leader_of(), primary.name);
    let members = etcd.etcdctl_ok(&[
        "get",
        "--prefix",
        "--keys-only",
        &format!("/service/{scope}/members/"),
    ]);
    assert_eq!(
        members.lines().filter(|l| !l.is_empty()).count(),
        2,
        "{members}"
    );

    // Failover: the primary's Patroni dies; its leader lease runs out and the replica takes
    // over (promoted, a new timeline), recorded in our etcd.
    primary.kill9();
    let nodes = [&primary, &replica];
    wait_until(
        Duration::from_secs(60),
        "the replica promoted after the primary's Patroni died",
        &nodes,
        || replica.is("master"),
    );
    assert_eq!(leader_of(), replica.name);
    let st = replica.status().expect("status");
    assert!(st["timeline"].as_u64().unwrap_or(0) >= 2, "{st}");
}
