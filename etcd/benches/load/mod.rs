// Load generators and measurements shared by the server and cluster benchmarks: issue 15's
// workloads, run against etcd 3.4 and etcd-rs side by side and printed as one table of ratios.
//
// Every workload runs on both servers before the next one starts (alternating which goes first),
// so that the two numbers of a row were taken minutes apart at most on a shared machine. The
// workloads, in the order they run (BENCH_WORKLOADS=keys,put1,... picks some; all by default):
//
// keys     BENCH_KEYS (100k) puts of distinct keys `load-NNNNNN`, 256-byte values, 32 clients;
//          then the db file size, the db pages in use (etcd_mvcc_db_total_size_in_use_in_bytes)
//          and the peak RSS (VmHWM), both servers holding exactly the same data.
// put1     put, 1 client, closed loop, BENCH_SECS (5) seconds; keys `bench-<client>-<n % 1000>`,
//          256-byte values.
// get1     serializable single-key Range of the loaded keys, 1 client: the request's round trip
//          without raft or the disk, to set beside put1.
// put64    the same as put1 with 64 clients.
// txn      64 clients, each request a Txn with one compare that always holds (mod_revision of
//          the key > -1) and one put in success (keys `txn-<client>-<n % 1000>`, 256 bytes).
// range    64 clients, single-key Range of the loaded keys, linearizable then serializable.
// prefix   BENCH_PREFIX_KEYS (10k) keys `pfx/NNNNN` are written first (untimed); then 64 clients
//          range the prefix `pfx/` with limit 100, linearizable (etcd 3.4 walks every key of
//          the range to count it; each answer must hold 100 keys). With BENCH_ROUNDS every
//          round writes them again: round 1 ranges over fresh keys, later rounds over keys
//          with history (etcd 3.4 ranged both alike here: 1007, 1045, 1091, 1013 per s).
// listall  64 clients put (as put64) for BENCH_SECS alone, then BENCH_SECS more while one more
//          client reads every key of the keys workload (`load-`, no limit, serializable) in a
//          loop, as an unpaginated Kubernetes LIST does: put p99 beside the lists / alone, and
//          the lists' mean time. Needs `keys` first (BENCH_WORKLOADS=keys,listall).
// watch    BENCH_WATCHERS (1000) watchers on BENCH_WATCH_KEYS (100) keys `fan/NNN`: watcher w
//          watches the single key w % 100 (so 10 watchers per key, no prefix watchers), each
//          on its own gRPC stream (BENCH_WATCHERS_PER_STREAM=m puts m watchers on one stream,
//          as clientv3 does for watches of one context), the streams over 8 connections. Once
//          every watch is created, 32 clients put BENCH_WATCH_PUTS (8000) values unthrottled
//          (put i: key i % 100, its value starts with i). Events/s = events received / (first
//          put sent → last event received); latency = put sent → event received, per event.
// progress the watch workload again with every stream also asking for progress
//          (WatchProgressRequest, as kube-apiserver does for consistent reads from its cache)
//          every 100 ms once its watches are created: events/s as above, and the progress
//          latency, from the oldest request not yet answered to the progress answer (one answer
//          covers every request before it; etcd 3.4 drops a request that finds a watcher
//          unsynced, so requests answered is a row too). It stops BENCH_PROGRESS_SECS (60)
//          after its first put (etcd 3.4 once took > 12 minutes for a round) and counts what
//          was delivered by then; a row says how many streams the limit stopped.
// db       end of run: db file and pages in use per revision written (the faster server wrote
//          more revisions in the timed loads), and the peak RSS so far.
// compact  every key is deleted and the history so far compacted (untimed); BENCH_COMPACT_REVS
//          (100k; 1000000 for the million) puts over 1000 keys `cmp/NNN` from 64
//          clients make the history up to revision R. Then 64 clients put (as put64): BENCH_SECS
//          without compaction, then a Compact(R, physical=false) is timed (the call returning)
//          and followed at once by a Compact(R + 1, physical=true): both servers run compactions
//          in order and a physical one answers once its deletes are done, so its return marks
//          the end of the physical compaction of R (the second one adds one revision and walks
//          past the 1000 live keys). Write p99: the puts sent in the window without compaction
//          vs those sent between the first Compact and the return of the second. The raft term
//          before and after tells whether a leader election happened meanwhile. Then the same
//          puts again (untimed) and, with no load, one Compact(physical=true) of everything
//          since: its CPU per compacted revision ("compaction alone").
//
// BENCH_ROUNDS=n runs the repeatable workloads (not keys, db, compact) n times each, alternating
// which server goes first, and prints medians; the extra rounds write more before `db` and
// `compact`, so their end-of-run rows differ from a one-round run's.
//
// Server CPU per op: utime+stime of the server process(es) from /proc/<pid>/stat (summed over
// the members of a cluster), read before and after each workload, divided by its operations
// (puts, ranges, txns; for watch, events delivered; for compact, the CPU used while it ran
// beyond what the puts sent meanwhile cost at the load's CPU per put before it, per compacted
// revision; "compaction alone" is a second history of as many revisions compacted with no load,
// its CPU per compacted revision). The load generator runs on the same machine and shares the
// cores of the servers: its own CPU per op (this process's utime+stime) is printed too, for the
// throughput workloads and watch. Where both sides are CPU-bound a throughput ratio is bounded
// by (etcd's server CPU + load CPU) / (ours + load CPU) per op, however cheap ours gets.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest, kv_client::KvClient,
    request_op, watch_client::WatchClient, watch_request,
};
use tonic::transport::{Channel, Endpoint};

/// Value size of every put.
const VALUE: usize = 256;
/// Clients of the concurrent loads.
const CLIENTS: usize = 64;
/// Clients that load keys and make the watched puts.
const WRITERS: usize = 32;
/// Connections that carry the watch streams.
const WATCH_CONNS: usize = 8;
/// Clients sharing one connection, as clientv3 programs share one.
const PER_CONN: usize = 16;

fn env<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Sizes and durations, from the environment (see the top of this file).
pub struct Config {
    pub secs: f64,
    pub keys: usize,
    pub prefix_keys: usize,
    pub watchers: usize,
    pub watch_keys: usize,
    pub watch_puts: usize,
    pub watchers_per_stream: usize,
    /// The progress workload's time limit from its first put.
    pub progress_secs: f64,
    /// Rounds of each repeatable workload (BENCH_ROUNDS): the table shows medians.
    pub rounds: usize,
    pub compact_revs: usize,
    /// BENCH_ONLY=etcd|ours runs one server only.
    pub only: Option<String>,
    workloads: Option<Vec<String>>,
}

impl Config {
    pub fn from_env() -> Config {
        Config {
            secs: env("BENCH_SECS", 5.0),
            keys: env("BENCH_KEYS", 100_000),
            prefix_keys: env("BENCH_PREFIX_KEYS", 10_000),
            watchers: env("BENCH_WATCHERS", 1000),
            watch_keys: env::<usize>("BENCH_WATCH_KEYS", 100).max(1),
            watch_puts: env("BENCH_WATCH_PUTS", 8000),
            watchers_per_stream: env::<usize>("BENCH_WATCHERS_PER_STREAM", 1).max(1),
            progress_secs: env("BENCH_PROGRESS_SECS", 60.0),
            rounds: env::<usize>("BENCH_ROUNDS", 1).max(1),
            compact_revs: env("BENCH_COMPACT_REVS", 100_000),
            only: std::env::var("BENCH_ONLY").ok(),
            workloads: std::env::var("BENCH_WORKLOADS")
                .ok()
                .map(|s| s.split(',').map(|w| w.trim().to_string()).collect()),
        }
    }

    /// Picks `list` when BENCH_WORKLOADS did not pick any.
    pub fn default_workloads(&mut self, list: &[&str]) {
        if self.workloads.is_none() {
            self.workloads = Some(list.iter().map(|w| w.to_string()).collect());
        }
    }

    /// Whether the server named `name` ("etcd" or "ours") takes part.
    pub fn runs(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|o| o == name)
    }

    pub fn wants(&self, workload: &str) -> bool {
        self.workloads
            .as_ref()
            .is_none_or(|w| w.iter().any(|x| x == workload))
    }
}

/// The two servers compared, in table order.
pub const SERVERS: [(&str, &str); 2] = [("etcd", "etcd"), ("ours", env!("CARGO_BIN_EXE_etcd"))];

/// One server under test: a single member or every member of a cluster.
pub struct Target {
    pub name: &'static str,
    /// Where the clients send requests (every member, or only the leader).
    pub urls: Vec<String>,
    /// Every member's client URL, for /metrics.
    pub members: Vec<String>,
    pub pids: Vec<u32>,
    /// Every member's data dir.
    pub data_dirs: Vec<PathBuf>,
}

impl Target {
    /// CPU seconds (user + system) the server processes have used so far.
    fn cpu_secs(&self) -> f64 {
        self.pids
            .iter()
            .map(|pid| proc_cpu_secs(&pid.to_string()))
            .sum()
    }

    /// Sum over the members of their peak resident memory (VmHWM), KiB.
    fn peak_rss_kib(&self) -> f64 {
        self.pids
            .iter()
            .filter_map(|&pid| crate::support::proc_status_kib(pid, "VmHWM:"))
            .map(|kib| kib as f64)
            .sum()
    }

    /// The largest member's db file, bytes.
    fn db_bytes(&self) -> f64 {
        self.data_dirs
            .iter()
            .filter_map(|d| std::fs::metadata(d.join("member/snap/db")).ok())
            .map(|m| m.len() as f64)
            .fold(0.0, f64::max)
    }

    /// The largest value of a gauge over the members' /metrics.
    fn metric_max(&self, name: &str) -> f64 {
        self.members
            .iter()
            .map(|u| metric(u, name))
            .fold(0.0, f64::max)
    }
}

/// A gauge from a server's /metrics (both servers serve it on the client port); 0 if absent.
fn metric(url: &str, name: &str) -> f64 {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let Ok(mut s) = std::net::TcpStream::connect(host) else {
        return 0.0;
    };
    let req = format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n");
    let mut body = String::new();
    if s.write_all(req.as_bytes()).is_err() || s.read_to_string(&mut body).is_err() {
        return 0.0;
    }
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A connection to `url`, retried until the server answers a Range (up to 20 s).
pub async fn connect(url: &str) -> Channel {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ep = Endpoint::from_shared(url.to_string())
            .expect("client URL")
            .connect_timeout(Duration::from_secs(2))
            // Long enough that a put stuck behind a compaction reports its latency.
            .timeout(Duration::from_secs(120));
        if let Ok(ch) = ep.connect().await
            && KvClient::new(ch.clone())
                .range(RangeRequest {
                    key: b"x".to_vec(),
                    serializable: true,
                    ..Default::default()
                })
                .await
                .is_ok()
        {
            return ch;
        }
        assert!(Instant::now() < deadline, "server at {url} did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Connections to the target's URLs, at least `n`, a multiple of the number of URLs (so that
/// each member carries as many). Request `n` of client `c` goes to connection `(c + n) % len`:
/// round robin per request over the members, as clientv3 3.4's balancer does.
#[derive(Clone)]
struct Pool(Arc<Vec<Channel>>);

impl Pool {
    async fn open(urls: &[String], n: usize) -> Pool {
        let len = n.max(1).div_ceil(urls.len()) * urls.len();
        let mut v = Vec::with_capacity(len);
        for i in 0..len {
            v.push(connect(&urls[i % urls.len()]).await);
        }
        Pool(Arc::new(v))
    }

    async fn for_clients(urls: &[String], clients: usize) -> Pool {
        Pool::open(urls, clients.div_ceil(PER_CONN)).await
    }

    fn kv(&self, client: usize, n: u64) -> KvClient<Channel> {
        KvClient::new(self.0[(client + n as usize) % self.0.len()].clone())
    }

    fn chan(&self, i: usize) -> Channel {
        self.0[i % self.0.len()].clone()
    }

    /// The current revision and raft term (a linearizable Range).
    async fn header(&self) -> Result<(i64, u64), String> {
        let h = self
            .kv(0, 0)
            .range(RangeRequest {
                key: b"x".to_vec(),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?
            .into_inner()
            .header
            .ok_or("no header")?;
        Ok((h.revision, h.raft_term))
    }

    /// Deletes every key (one DeleteRange from "\0" to the end).
    async fn delete_all(&self) -> Result<(), String> {
        self.kv(0, 0)
            .delete_range(DeleteRangeRequest {
                key: vec![0],
                range_end: vec![0],
                ..Default::default()
            })
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn compact(&self, revision: i64, physical: bool) -> Result<(), String> {
        self.kv(0, 0)
            .compact(CompactionRequest { revision, physical })
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// What one workload measured on one server.
#[derive(Default)]
pub struct Measured {
    /// (label, value, target for ours/etcd).
    rows: Vec<(String, f64, &'static str)>,
    /// Server CPU µs per op: (label, value).
    cpu: Vec<(String, f64)>,
    /// The load generator's own CPU µs per op (it shares the cores with the server).
    load: Vec<(String, f64)>,
    errors: u64,
    first_error: Option<String>,
}

impl Measured {
    fn row(&mut self, label: impl Into<String>, value: f64, target: &'static str) {
        self.rows.push((label.into(), value, target));
    }

    fn cpu(&mut self, label: impl Into<String>, us_per_op: f64) {
        self.cpu.push((label.into(), us_per_op));
    }

    fn load(&mut self, label: impl Into<String>, us_per_op: f64) {
        self.load.push((label.into(), us_per_op));
    }

    fn error(&mut self, n: u64, first: Option<String>) {
        self.errors += n;
        if self.first_error.is_none() {
            self.first_error = first;
        }
    }

    fn absorb(&mut self, r: &LoopResult) {
        self.error(r.errors, r.first_error.clone());
    }
}

/// A column of the table: its heading, and the tag its ratio to the first column is shown
/// under (`<tag>/etcd`).
#[derive(Clone, Copy)]
pub struct Column {
    pub heading: &'static str,
    pub tag: &'static str,
}

/// The columns of the usual table: etcd 3.4, then ours.
pub const ETCD_AND_OURS: [Column; 2] = [
    Column {
        heading: "etcd 3.4",
        tag: "etcd",
    },
    Column {
        heading: "etcd-rs",
        tag: "ours",
    },
];

/// The table the benchmarks print: a value per column (etcd 3.4 first), each later column's
/// ratio to the first, and the target (for ours/etcd). A workload run for several
/// rounds shows each column's median, and the lowest and highest of its rounds' ratios.
pub struct Table {
    cluster: bool,
    columns: Vec<Column>,
    rows: Vec<Row>,
    cpu: Vec<Row>,
    load: Vec<Row>,
    errors: Vec<String>,
}

struct Row {
    label: String,
    values: Vec<f64>,
    target: &'static str,
    /// Per later column: (lowest, highest) of the rounds' ratios, when there was more than one.
    spread: Vec<Option<(f64, f64)>>,
}

/// The median of `v` (the mean of the middle two for an even count), 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Table {
    pub fn new(columns: impl IntoIterator<Item = Column>, cluster: bool) -> Table {
        Table {
            cluster,
            columns: columns.into_iter().collect(),
            rows: Vec::new(),
            cpu: Vec::new(),
            load: Vec::new(),
            errors: Vec::new(),
        }
    }

    pub fn row(&mut self, label: impl Into<String>, values: Vec<f64>, target: &'static str) {
        let spread = vec![None; values.len().saturating_sub(1)];
        self.rows.push(Row {
            label: label.into(),
            values,
            target,
            spread,
        });
    }

    /// One workload's measures: per column (in column order), one per round.
    pub fn add(&mut self, workload: &str, m: &[Vec<Measured>]) {
        let all = m.iter().flatten();
        let Some(labels) = all.clone().max_by_key(|x| x.rows.len()) else {
            return;
        };
        for (i, (label, _, target)) in labels.rows.iter().enumerate() {
            let per_round = |x: &Measured| x.rows.get(i).map(|r| r.1);
            self.rows.push(Row::of(label, target, m, per_round));
        }
        if let Some(labels) = all.clone().max_by_key(|x| x.cpu.len()) {
            for (i, (label, _)) in labels.cpu.iter().enumerate() {
                let per_round = |x: &Measured| x.cpu.get(i).map(|r| r.1);
                self.cpu.push(Row::of(label, "≤ 0.5", m, per_round));
            }
        }
        if let Some(labels) = all.clone().max_by_key(|x| x.load.len()) {
            for (i, (label, _)) in labels.load.iter().enumerate() {
                let per_round = |x: &Measured| x.load.get(i).map(|r| r.1);
                self.load.push(Row::of(label, "", m, per_round));
            }
        }
        for (k, col) in self.columns.iter().enumerate() {
            let Some(rounds) = m.get(k) else { continue };
            let errors: u64 = rounds.iter().map(|x| x.errors).sum();
            if errors > 0 {
                let first = rounds.iter().find_map(|x| x.first_error.as_deref());
                self.errors.push(format!(
                    "{workload} on {}: {errors} failed requests (all rounds), first: {}",
                    col.heading,
                    first.unwrap_or("?")
                ));
            }
        }
    }

    pub fn print(&self, title: &str) {
        println!("{title}");
        let rounds = self
            .rows
            .iter()
            .chain(&self.cpu)
            .any(|r| r.spread.iter().any(Option::is_some));
        let line = |r: &Row| {
            let mut out = format!("{:<54}", r.label);
            for x in &r.values {
                out.push_str(&format!(" {x:>14.2}"));
            }
            let base = r.values.first().copied().unwrap_or(0.0);
            for x in r.values.iter().skip(1) {
                let ratio = if base > 0.0 { x / base } else { 0.0 };
                out.push_str(&format!(" {ratio:>9.2}"));
            }
            out.push_str(&format!(" {:>8}", r.target));
            if rounds {
                for s in &r.spread {
                    let s = s.map_or("-".to_string(), |(lo, hi)| format!("{lo:.2}-{hi:.2}"));
                    out.push_str(&format!(" {s:>11}"));
                }
            }
            println!("{out}");
        };
        let mut head = format!("{:<54}", "");
        for c in &self.columns {
            head.push_str(&format!(" {:>14}", c.heading));
        }
        for c in self.columns.iter().skip(1) {
            head.push_str(&format!(" {:>9}", format!("{}/etcd", c.tag)));
        }
        head.push_str(&format!(" {:>8}", "target"));
        if rounds {
            for c in self.columns.iter().skip(1) {
                head.push_str(&format!(" {:>11}", format!("{} rounds", c.tag)));
            }
        }
        println!("{head}");
        for r in &self.rows {
            line(r);
        }
        let members = if self.cluster {
            ", summed over the members"
        } else {
            ""
        };
        println!("server CPU µs per op (utime+stime{members})");
        for r in &self.cpu {
            line(r);
        }
        if !self.load.is_empty() {
            // Its clients run on the same cores: where both sides are CPU-bound, a throughput
            // ratio cannot exceed (etcd's server + load CPU) / (ours + load CPU) per op.
            println!("load generator CPU µs per op (the bench process itself, same cores)");
            for r in &self.load {
                line(r);
            }
        }
        for e in &self.errors {
            println!("errors: {e}");
        }
    }
}

impl Row {
    /// A row of medians over the rounds of each column, and the spread of the rounds' ratios
    /// (round r of a column against round r of the first).
    fn of(
        label: &str,
        target: &'static str,
        m: &[Vec<Measured>],
        value: impl Fn(&Measured) -> Option<f64>,
    ) -> Row {
        // A round without the row (none today) is left out rather than counted as zero.
        let values = m
            .iter()
            .map(|rounds| median(rounds.iter().filter_map(&value).collect()))
            .collect();
        let base: Vec<Option<f64>> = m
            .first()
            .map(|r| r.iter().map(&value).collect())
            .unwrap_or_default();
        let spread = m
            .iter()
            .skip(1)
            .map(|rounds| {
                let ratios: Vec<f64> = rounds
                    .iter()
                    .zip(&base)
                    .filter_map(|(x, b)| Some(value(x)? / b.filter(|&b| b > 0.0)?))
                    .collect();
                let lo = ratios.iter().copied().reduce(f64::min)?;
                let hi = ratios.iter().copied().reduce(f64::max)?;
                (ratios.len() > 1).then_some((lo, hi))
            })
            .collect();
        Row {
            label: label.to_string(),
            values,
            target,
            spread,
        }
    }
}

/// Workloads that can run again on the same server and measure the same thing (BENCH_ROUNDS):
/// not the key load, the end-of-run sizes or the compaction, which change what they measure.
const REPEATABLE: [&str; 9] = [
    "put1", "get1", "put64", "txn", "range", "prefix", "listall", "watch", "progress",
];

/// Runs workload number `k` (`w`) for its rounds on `n` targets, alternating which goes first
/// from round to round; `run(i)` measures target `i` once (None: not running). Per target, one
/// measure per round.
pub fn rounds(
    cfg: &Config,
    k: usize,
    w: &str,
    n: usize,
    mut run: impl FnMut(usize) -> Option<Measured>,
) -> Vec<Vec<Measured>> {
    let rounds = if REPEATABLE.contains(&w) {
        cfg.rounds
    } else {
        1
    };
    let mut out: Vec<Vec<Measured>> = (0..n).map(|_| Vec::new()).collect();
    for r in 0..rounds {
        if rounds > 1 {
            eprintln!("bench: {w}, round {} of {rounds}", r + 1);
        }
        for i in run_order(k + r, n) {
            if let Some(m) = run(i) {
                out[i].push(m);
            }
        }
    }
    out
}

/// Every workload, in the order the suite runs them.
pub const WORKLOADS: [&str; 12] = [
    "keys", "put1", "get1", "put64", "txn", "range", "prefix", "listall", "watch", "progress",
    "db", "compact",
];

/// Runs every workload the config asks for on both targets (a missing target leaves zeros).
pub fn run_suite(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    targets: &[Option<Target>; 2],
    cluster: bool,
) -> Table {
    let mut table = Table::new(ETCD_AND_OURS, cluster);
    for (k, w) in WORKLOADS.iter().enumerate() {
        if !cfg.wants(w) {
            continue;
        }
        let out = rounds(cfg, k, w, targets.len(), |i| {
            let t = targets[i].as_ref()?;
            Some(measure(rt, w, t, cfg, cluster))
        });
        table.add(w, &out);
    }
    table
}

/// The order the `n` targets take workload number `k` in: alternating, so that no target
/// always goes first (or last) on a machine whose load drifts.
pub fn run_order(k: usize, n: usize) -> Vec<usize> {
    if k.is_multiple_of(2) {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// Runs workload `w` (one of WORKLOADS) on target `t`.
pub fn measure(
    rt: &tokio::runtime::Runtime,
    w: &str,
    t: &Target,
    cfg: &Config,
    cluster: bool,
) -> Measured {
    eprintln!("bench: {w} on {}", t.name);
    let m = rt.block_on(workload(w, t, cfg, cluster));
    if let Some((label, v, _)) = m.rows.first() {
        eprintln!("bench: {w} on {}: {label} {v:.2}", t.name);
    }
    m
}

async fn workload(w: &str, t: &Target, cfg: &Config, cluster: bool) -> Measured {
    let keys = cfg.keys.max(1);
    match w {
        "keys" => load_keys(t, cfg).await,
        "put1" => {
            let target = if cluster { "≥ 1.2" } else { "≥ 1.3" };
            throughput(t, cfg, 1, Op::Put, "put/s, 1 client", target).await
        }
        // The request round trip without raft or the disk: what put1 costs beyond its fsync.
        "get1" => {
            throughput(
                t,
                cfg,
                1,
                Op::Range(true, keys),
                "range/s serializable, 1 client",
                "",
            )
            .await
        }
        "put64" => throughput(t, cfg, CLIENTS, Op::Put, "put/s, 64 clients", "≥ 2.0").await,
        "txn" => {
            throughput(
                t,
                cfg,
                CLIENTS,
                Op::Txn,
                "txn/s (1 put), 64 clients",
                "≥ 3.0",
            )
            .await
        }
        "range" => {
            let mut m = throughput(
                t,
                cfg,
                CLIENTS,
                Op::Range(false, keys),
                "range/s linearizable, 64 clients",
                "",
            )
            .await;
            let s = throughput(
                t,
                cfg,
                CLIENTS,
                Op::Range(true, keys),
                "range/s serializable, 64 clients",
                "",
            )
            .await;
            m.rows.extend(s.rows);
            m.cpu.extend(s.cpu);
            m.load.extend(s.load);
            m.error(s.errors, s.first_error);
            m
        }
        "prefix" => {
            let pool = Pool::for_clients(&t.urls, WRITERS).await;
            let fill = fill(
                &pool,
                WRITERS,
                cfg.prefix_keys,
                |i| format!("pfx/{i:05}"),
                None,
            )
            .await;
            let mut m = throughput(
                t,
                cfg,
                CLIENTS,
                Op::Prefix(cfg.prefix_keys.min(100)),
                &format!("range/s prefix of {} keys, limit 100", cfg.prefix_keys),
                "≥ 4.0",
            )
            .await;
            m.absorb(&fill);
            m
        }
        "listall" => list_all(t, cfg).await,
        "watch" => watch_fanout(t, cfg, None).await,
        "progress" => watch_fanout(t, cfg, Some(Duration::from_millis(100))).await,
        "db" => end_of_run(t).await,
        "compact" => compaction(t, cfg).await,
        _ => Measured::default(),
    }
}

/// The requests of the closed loops.
#[derive(Clone, Copy)]
enum Op {
    Put,
    Txn,
    /// Single-key range over the loaded keys: (serializable, how many keys were loaded).
    Range(bool, usize),
    /// Range of the prefix `pfx/` with limit 100: how many keys each answer must hold.
    Prefix(usize),
}

fn value(head: &str) -> Vec<u8> {
    let mut v = head.as_bytes().to_vec();
    v.resize(VALUE, b'v');
    v
}

impl Op {
    async fn call(self, mut kv: KvClient<Channel>, client: usize, n: u64) -> Result<(), String> {
        let e = status;
        match self {
            Op::Put => kv
                .put(PutRequest {
                    key: format!("bench-{client}-{}", n % 1000).into_bytes(),
                    value: value(""),
                    ..Default::default()
                })
                .await
                .map(|_| ())
                .map_err(e),
            Op::Txn => {
                let key = format!("txn-{client}-{}", n % 1000).into_bytes();
                let r = kv
                    .txn(TxnRequest {
                        compare: vec![Compare {
                            key: key.clone(),
                            target: CompareTarget::Mod as i32,
                            result: CompareResult::Greater as i32,
                            target_union: Some(TargetUnion::ModRevision(-1)),
                            range_end: Vec::new(),
                        }],
                        success: vec![RequestOp {
                            request: Some(request_op::Request::RequestPut(PutRequest {
                                key,
                                value: value(""),
                                ..Default::default()
                            })),
                        }],
                        failure: Vec::new(),
                    })
                    .await
                    .map_err(e)?;
                if r.into_inner().succeeded {
                    Ok(())
                } else {
                    Err("txn compare failed".into())
                }
            }
            Op::Range(serializable, keys) => kv
                .range(RangeRequest {
                    key: format!("load-{:06}", (client as u64 * 7919 + n) % keys as u64)
                        .into_bytes(),
                    serializable,
                    ..Default::default()
                })
                .await
                .map(|_| ())
                .map_err(e),
            Op::Prefix(want) => {
                let r = kv
                    .range(RangeRequest {
                        key: b"pfx/".to_vec(),
                        range_end: b"pfx0".to_vec(),
                        limit: 100,
                        ..Default::default()
                    })
                    .await
                    .map_err(e)?
                    .into_inner();
                if r.kvs.len() == want {
                    Ok(())
                } else {
                    Err(format!(
                        "prefix range gave {} keys, not {want}",
                        r.kvs.len()
                    ))
                }
            }
        }
    }
}

/// The outcome of a set of client loops.
#[derive(Default)]
struct LoopResult {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    secs: f64,
    /// With `record`: (seconds from the start when the request was sent, latency ms).
    lat: Vec<(f64, f64)>,
}

impl LoopResult {
    fn merge(&mut self, o: LoopResult) {
        self.ops += o.ops;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.lat.extend(o.lat);
    }

    /// Counts a request's outcome; whether it succeeded.
    fn count<T>(&mut self, res: Result<T, String>) -> bool {
        match res {
            Ok(_) => {
                self.ops += 1;
                true
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
                false
            }
        }
    }

    fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// Runs `body(c)` for every client c on a task of its own; their merged results and the time
/// they took together.
async fn per_client<F, Fut>(clients: usize, body: F) -> LoopResult
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = LoopResult> + Send + 'static,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients).map(|c| tokio::spawn(body(c))).collect();
    let mut total = LoopResult::default();
    for t in tasks {
        total.merge(t.await.expect("client task panicked"));
    }
    total.secs = start.elapsed().as_secs_f64();
    total
}

/// `clients` closed loops of `op` until `stop` is set.
async fn closed_loop(
    pool: &Pool,
    clients: usize,
    op: Op,
    stop: Arc<AtomicBool>,
    record: bool,
) -> LoopResult {
    let start = Instant::now();
    per_client(clients, |client| {
        let (pool, stop) = (pool.clone(), stop.clone());
        async move {
            let mut r = LoopResult::default();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let res = op.call(pool.kv(client, n), client, n).await;
                if res.is_ok() && record {
                    let ms = sent.elapsed().as_secs_f64() * 1000.0;
                    r.lat.push(((sent - start).as_secs_f64(), ms));
                }
                if !r.count(res) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                n += 1;
            }
            r
        }
    })
    .await
}

/// `clients` closed loops of `op` for `secs` seconds.
async fn timed_loop(pool: &Pool, clients: usize, op: Op, secs: f64) -> LoopResult {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        s.store(true, Ordering::Relaxed);
    });
    closed_loop(pool, clients, op, stop, false).await
}

/// When each put was sent: nanoseconds since the instant, by the put's index.
type SentAt = (Instant, Arc<Vec<AtomicU64>>);

/// Puts keys `key(0..n)` (256-byte values, the value starting with the index) from `clients`
/// clients, client c writing c, c + clients, ... unthrottled; records when each was sent.
async fn fill(
    pool: &Pool,
    clients: usize,
    n: usize,
    key: impl Fn(usize) -> String + Copy + Send + 'static,
    sent: Option<SentAt>,
) -> LoopResult {
    per_client(clients, |c| {
        let (pool, sent) = (pool.clone(), sent.clone());
        async move {
            let mut r = LoopResult::default();
            for i in (c..n).step_by(clients) {
                if let Some((base, at)) = &sent {
                    let ns = (Instant::now() - *base).as_nanos() as u64;
                    at[i].store(ns, Ordering::Relaxed);
                }
                let put = PutRequest {
                    key: key(i).into_bytes(),
                    value: value(&format!("{i:08}")),
                    ..Default::default()
                };
                r.count(pool.kv(c, i as u64).put(put).await.map_err(status));
            }
            r
        }
    })
    .await
}

fn status(e: tonic::Status) -> String {
    format!("{}: {}", e.code(), e.message())
}

/// CPU seconds (user + system) process `pid` ("self" for this one) has used so far, from
/// /proc/<pid>/stat; 0 when it cannot be read.
fn proc_cpu_secs(pid: &str) -> f64 {
    // Safety: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which ends with the last ')': state is field 3, utime
    // 14 and stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    ticks as f64 / tck
}

/// CPU seconds the load generator (this process: its clients, not the servers) has used.
fn loadgen_cpu_secs() -> f64 {
    proc_cpu_secs("self")
}

fn cpu_us_per_op(cpu_secs: f64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        cpu_secs * 1e6 / ops as f64
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

async fn throughput(
    t: &Target,
    cfg: &Config,
    clients: usize,
    op: Op,
    label: &str,
    target: &'static str,
) -> Measured {
    let pool = Pool::for_clients(&t.urls, clients).await;
    let (cpu0, load0) = (t.cpu_secs(), loadgen_cpu_secs());
    let r = timed_loop(&pool, clients, op, cfg.secs).await;
    let cpu = t.cpu_secs() - cpu0;
    let load = loadgen_cpu_secs() - load0;
    let mut m = Measured::default();
    m.row(label, r.rate(), target);
    m.cpu(label, cpu_us_per_op(cpu, r.ops));
    m.load(label, cpu_us_per_op(load, r.ops));
    m.absorb(&r);
    m
}

/// The keys every read workload uses; db size and peak RSS holding exactly them.
async fn load_keys(t: &Target, cfg: &Config) -> Measured {
    let pool = Pool::for_clients(&t.urls, WRITERS).await;
    let cpu0 = t.cpu_secs();
    let r = fill(&pool, WRITERS, cfg.keys, |i| format!("load-{i:06}"), None).await;
    let cpu = t.cpu_secs() - cpu0;
    // Let the backend's periodic commit write the last batch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = cfg.keys;
    let mut m = Measured::default();
    m.row(format!("put/s loading {n} keys, 32 clients"), r.rate(), "");
    m.row(
        format!("db file bytes after {n} keys"),
        t.db_bytes(),
        "≤ 1.0",
    );
    m.row(
        format!("db bytes in use after {n} keys"),
        t.metric_max("etcd_mvcc_db_total_size_in_use_in_bytes"),
        "≤ 1.0",
    );
    m.row(
        format!("peak RSS KiB after {n} keys"),
        t.peak_rss_kib(),
        "≤ 0.5",
    );
    m.cpu(
        format!("put loading {n} keys, 32 clients"),
        cpu_us_per_op(cpu, r.ops),
    );
    m.absorb(&r);
    m
}

/// The existing end-of-run measures: db per revision written, peak RSS so far.
async fn end_of_run(t: &Target) -> Measured {
    let pool = Pool::open(&t.urls, 1).await;
    let mut m = Measured::default();
    let rev = match pool.header().await {
        Ok((rev, _)) => rev as f64,
        Err(e) => {
            m.error(1, Some(e));
            0.0
        }
    };
    let per_rev = |bytes: f64| if rev > 0.0 { bytes / rev } else { 0.0 };
    m.row("revisions written (end of run)", rev, "");
    m.row(
        "db file bytes per revision (end of run)",
        per_rev(t.db_bytes()),
        "",
    );
    // The file also holds free pages; the pages in use are what the data takes.
    let in_use = t.metric_max("etcd_mvcc_db_total_size_in_use_in_bytes");
    m.row(
        "db bytes in use per revision (end of run)",
        per_rev(in_use),
        "",
    );
    m.row("peak RSS KiB (end of run)", t.peak_rss_kib(), "");
    m
}

/// What one watch stream saw.
#[derive(Default)]
struct StreamResult {
    events: u64,
    /// Progress: requests sent, answers received, ms from the oldest unanswered request.
    progress_asked: u64,
    progress_answered: u64,
    progress_ms: Vec<f64>,
    lat_ms: Vec<f64>,
    last: Option<Instant>,
    out_of_order: u64,
    error: Option<String>,
    /// Stopped by the workload's time limit before it had every event.
    stopped: bool,
}

/// One watch stream carrying a watch on each of `keys`, until it has `expect` events (or has
/// been idle for 30 s). Sends one message on `ready` once every watch is created or it failed.
/// With `progress_every`, a progress request goes on the stream that often once every watch
/// is created. It stops early once `stop` turns true.
#[allow(clippy::too_many_arguments)]
async fn watch_stream(
    chan: Channel,
    keys: Vec<Vec<u8>>,
    expect: u64,
    base: Instant,
    sent: Arc<Vec<AtomicU64>>,
    ready: tokio::sync::mpsc::Sender<()>,
    progress_every: Option<Duration>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> StreamResult {
    let mut r = StreamResult::default();
    let (tx, rx) = tokio::sync::mpsc::channel(keys.len() + 1);
    for key in &keys {
        let _ = tx
            .send(WatchRequest {
                request_union: Some(watch_request::RequestUnion::CreateRequest(
                    WatchCreateRequest {
                        key: key.clone(),
                        ..Default::default()
                    },
                )),
            })
            .await;
    }
    let mut signalled = false;
    let resp = WatchClient::new(chan)
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await;
    let mut stream = match resp {
        Ok(s) => s.into_inner(),
        Err(e) => {
            r.error = Some(format!("watch: {}", status(e)));
            let _ = ready.send(()).await;
            return r;
        }
    };
    let mut created = 0;
    let mut last_rev: HashMap<i64, i64> = HashMap::new();
    // The oldest progress request not answered yet, and how many were sent.
    let pending: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let asked = Arc::new(AtomicU64::new(0));
    let mut asker: Option<tokio::task::JoinHandle<()>> = None;
    while r.events < expect {
        let next = tokio::select! {
            next = tokio::time::timeout(Duration::from_secs(30), stream.message()) => next,
            _ = stop.wait_for(|s| *s) => {
                r.stopped = true;
                break;
            }
        };
        let msg = match next {
            Err(_) => Err("no watch response for 30 s".to_string()),
            Ok(Err(e)) => Err(format!("watch: {}", status(e))),
            Ok(Ok(None)) => Err("watch stream ended".to_string()),
            Ok(Ok(Some(m))) => Ok(m),
        };
        let m = match msg {
            Ok(m) => m,
            Err(e) => {
                r.error = Some(e);
                break;
            }
        };
        if m.created {
            created += 1;
            if created == keys.len() {
                signalled = true;
                let _ = ready.send(()).await;
                if let Some(every) = progress_every {
                    let (tx, pending, asked) = (tx.clone(), pending.clone(), asked.clone());
                    asker = Some(tokio::spawn(async move {
                        let mut tick = tokio::time::interval(every);
                        loop {
                            tick.tick().await;
                            let req = WatchRequest {
                                request_union: Some(watch_request::RequestUnion::ProgressRequest(
                                    WatchProgressRequest {},
                                )),
                            };
                            pending
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert_with(Instant::now);
                            asked.fetch_add(1, Ordering::Relaxed);
                            if tx.send(req).await.is_err() {
                                return;
                            }
                        }
                    }));
                }
            }
            if !m.canceled {
                continue;
            }
        }
        if m.events.is_empty() && !m.canceled {
            // A progress answer: it answers every request sent before it.
            let oldest = pending.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(at) = oldest {
                r.progress_ms.push(at.elapsed().as_secs_f64() * 1e3);
            }
            r.progress_answered += 1;
            continue;
        }
        if m.canceled {
            r.error = Some(format!("watch canceled: {}", m.cancel_reason));
            break;
        }
        let now = Instant::now();
        for e in &m.events {
            let Some(kv) = &e.kv else { continue };
            r.events += 1;
            let last = last_rev.entry(m.watch_id).or_insert(0);
            if kv.mod_revision <= *last {
                r.out_of_order += 1;
            }
            *last = kv.mod_revision;
            let id: Option<usize> = std::str::from_utf8(&kv.value[..8.min(kv.value.len())])
                .ok()
                .and_then(|s| s.parse().ok());
            if let Some(at) = id.and_then(|i| sent.get(i)) {
                let sent_ns = at.load(Ordering::Relaxed);
                let now_ns = (now - base).as_nanos() as u64;
                r.lat_ms.push(now_ns.saturating_sub(sent_ns) as f64 / 1e6);
            }
        }
        if !m.events.is_empty() {
            r.last = Some(now);
        }
    }
    if !signalled {
        let _ = ready.send(()).await;
    }
    if let Some(a) = asker {
        a.abort();
    }
    r.progress_asked = asked.load(Ordering::Relaxed);
    drop(tx);
    r
}

/// The watch fan-out workload (see the top of this file), with progress requests every
/// `progress_every` on each stream for the progress workload.
async fn watch_fanout(t: &Target, cfg: &Config, progress_every: Option<Duration>) -> Measured {
    let (w, k, p) = (cfg.watchers, cfg.watch_keys, cfg.watch_puts);
    let key = move |i: usize| format!("fan/{:03}", i % k);
    // Events each watcher on key kk gets: the puts i < p with i % k == kk.
    let per_key = |kk: usize| (p / k + usize::from(kk < p % k)) as u64;
    let conns = Pool::open(&t.urls, WATCH_CONNS).await;
    let base = Instant::now();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..p).map(|_| AtomicU64::new(0)).collect());
    let streams = w.div_ceil(cfg.watchers_per_stream);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(streams.max(1));
    // With progress requests etcd 3.4 can take minutes for the puts and their events (a round
    // stalled > 12 minutes once): that workload stops at BENCH_PROGRESS_SECS after the first
    // put and counts what was delivered by then.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let limit = progress_every.map(|_| Duration::from_secs_f64(cfg.progress_secs));
    let mut tasks = Vec::new();
    let mut expected = 0;
    for s in 0..streams {
        let watchers = s * cfg.watchers_per_stream..(w.min((s + 1) * cfg.watchers_per_stream));
        let expect: u64 = watchers.clone().map(|x| per_key(x % k)).sum();
        expected += expect;
        let keys: Vec<Vec<u8>> = watchers.map(|x| key(x).into_bytes()).collect();
        tasks.push(tokio::spawn(watch_stream(
            conns.chan(s),
            keys,
            expect,
            base,
            sent.clone(),
            ready_tx.clone(),
            progress_every,
            stop_rx.clone(),
        )));
    }
    drop(ready_tx);
    for _ in 0..streams {
        let _ = ready_rx.recv().await;
    }
    let writers = Pool::for_clients(&t.urls, WRITERS).await;
    let (cpu0, load0) = (t.cpu_secs(), loadgen_cpu_secs());
    let first_put = Instant::now();
    let mut m = Measured::default();
    let puts = fill(&writers, WRITERS, p, key, Some((base, sent)));
    match limit {
        None => m.absorb(&puts.await),
        Some(limit) => {
            let deadline = (first_put + limit).into();
            tokio::spawn(async move {
                tokio::time::sleep_until(deadline).await;
                let _ = stop_tx.send(true);
            });
            match tokio::time::timeout_at(deadline, puts).await {
                Ok(puts) => m.absorb(&puts),
                Err(_) => m.error(1, Some(format!("puts not done in {} s", limit.as_secs()))),
            }
        }
    }
    let mut stopped = 0;
    let (mut events, mut lat, mut last, mut disorder) = (0, Vec::new(), first_put, 0);
    let (mut asked, mut answered, mut progress_ms) = (0, 0, Vec::new());
    for t in tasks {
        let r = t.await.expect("watch task panicked");
        events += r.events;
        asked += r.progress_asked;
        answered += r.progress_answered;
        progress_ms.extend(r.progress_ms);
        lat.extend(r.lat_ms);
        last = last.max(r.last.unwrap_or(first_put));
        disorder += r.out_of_order;
        stopped += u64::from(r.stopped);
        if let Some(e) = r.error {
            m.error(1, Some(e));
        }
    }
    let cpu = t.cpu_secs() - cpu0;
    let load = loadgen_cpu_secs() - load0;
    if disorder > 0 {
        m.error(disorder, Some(format!("{disorder} events out of order")));
    }
    let lat = sorted(lat);
    let secs = (last - first_put).as_secs_f64();
    let what = match progress_every {
        None => format!("{w} watchers, {k} keys, {p} puts"),
        Some(d) => format!("{w} watchers, progress every {} ms", d.as_millis()),
    };
    m.row(
        format!("watch events/s, {what}"),
        if secs > 0.0 {
            events as f64 / secs
        } else {
            0.0
        },
        "≥ 1.5",
    );
    m.row(
        format!("watch events delivered (of {expected})"),
        events as f64,
        "",
    );
    if progress_every.is_none() {
        m.row("watch delivery ms p50", percentile(&lat, 0.5), "");
        m.row("watch delivery ms p99", percentile(&lat, 0.99), "≤ 0.7");
        m.cpu("watch, per event delivered", cpu_us_per_op(cpu, events));
        m.load("watch, per event delivered", cpu_us_per_op(load, events));
        return m;
    }
    let progress_ms = sorted(progress_ms);
    m.row(
        "  delivery ms p99, with progress requests",
        percentile(&lat, 0.99),
        "",
    );
    m.row("  streams stopped at the time limit", stopped as f64, "");
    m.row("  progress requests sent", asked as f64, "");
    m.row("  progress answers received", answered as f64, "");
    m.row(
        "  progress latency ms p50",
        percentile(&progress_ms, 0.5),
        "",
    );
    m.row(
        "  progress latency ms p99",
        percentile(&progress_ms, 0.99),
        "",
    );
    m.cpu(
        "watch with progress requests, per event delivered",
        cpu_us_per_op(cpu, events),
    );
    m
}

/// The compaction workload (see the top of this file).
/// The `listall` workload (see the header).
async fn list_all(t: &Target, cfg: &Config) -> Measured {
    let mut m = Measured::default();
    let pool = Pool::for_clients(&t.urls, CLIENTS).await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move { closed_loop(&pool, CLIENTS, Op::Put, stop, true).await })
    };
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(cfg.secs)).await;
    let t0 = start.elapsed().as_secs_f64();
    let mut kv = KvClient::new(pool.chan(0)).max_decoding_message_size(usize::MAX);
    let (mut lists, mut list_ms, mut keys) = (0u64, 0.0, 0usize);
    let until = Instant::now() + Duration::from_secs_f64(cfg.secs);
    while Instant::now() < until {
        let sent = Instant::now();
        let req = RangeRequest {
            key: b"load-".to_vec(),
            range_end: b"load.".to_vec(),
            serializable: true,
            ..Default::default()
        };
        match kv.range(req).await {
            Ok(r) => {
                lists += 1;
                list_ms += sent.elapsed().as_secs_f64() * 1000.0;
                keys = r.into_inner().kvs.len();
            }
            Err(e) => {
                m.error(1, Some(format!("list: {e}")));
                break;
            }
        }
    }
    let t1 = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let r = load.await.expect("put load panicked");
    m.absorb(&r);
    let p99 = |from: f64, to: f64| {
        let v: Vec<f64> = r
            .lat
            .iter()
            .filter(|l| l.0 >= from && l.0 < to)
            .map(|l| l.1)
            .collect();
        percentile(&sorted(v), 0.99)
    };
    let (alone, beside) = (p99(0.0, t0), p99(t0, t1));
    m.row(
        format!("list of {keys} keys, mean ms"),
        list_ms / lists.max(1) as f64,
        "",
    );
    m.row("put p99 ms, 64 clients, alone", alone, "");
    m.row("put p99 ms, 64 clients, beside the lists", beside, "");
    m.row(
        "put p99 beside the lists / alone",
        if alone > 0.0 { beside / alone } else { 0.0 },
        "",
    );
    m
}

async fn compaction(t: &Target, cfg: &Config) -> Measured {
    let mut m = Measured::default();
    let pool = Pool::for_clients(&t.urls, CLIENTS).await;
    // Drop the keys and the history of the earlier workloads, so that both servers compact
    // the same history, and so that the second, one-revision compaction below has only the
    // 1000 live keys to walk past.
    if let Err(e) = pool.delete_all().await {
        m.error(1, Some(format!("delete of the earlier keys: {e}")));
    }
    let before = match pool.header().await {
        Ok((rev, _)) => rev,
        Err(e) => {
            m.error(1, Some(e));
            return m;
        }
    };
    if let Err(e) = pool.compact(before, true).await {
        m.error(1, Some(format!("compact of the earlier history: {e}")));
    }
    let history = |i| format!("cmp/{:03}", i % 1000);
    let filled = fill(&pool, CLIENTS, cfg.compact_revs, history, None).await;
    m.absorb(&filled);
    let (end, term0) = match pool.header().await {
        Ok(h) => h,
        Err(e) => {
            m.error(1, Some(e));
            return m;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move { closed_loop(&pool, CLIENTS, Op::Put, stop, true).await })
    };
    let start = Instant::now();
    let cpu_start = t.cpu_secs();
    tokio::time::sleep(Duration::from_secs_f64(cfg.secs)).await;
    let cpu0 = t.cpu_secs();
    let t0 = Instant::now();
    let logical = pool.compact(end, false).await;
    let t1 = Instant::now();
    let physical = pool.compact(end + 1, true).await;
    let t2 = Instant::now();
    let cpu = t.cpu_secs() - cpu0;
    stop.store(true, Ordering::Relaxed);
    let r = load.await.expect("put load panicked");
    m.absorb(&r);
    for e in [logical.err(), physical.err()].into_iter().flatten() {
        m.error(1, Some(format!("compact: {e}")));
    }
    let term1 = pool.header().await.map(|h| h.1).unwrap_or(term0);
    let (at0, at2) = ((t0 - start).as_secs_f64(), (t2 - start).as_secs_f64());
    let base: Vec<f64> = r.lat.iter().filter(|l| l.0 < at0).map(|l| l.1).collect();
    let during: Vec<f64> = r
        .lat
        .iter()
        .filter(|l| l.0 >= at0 && l.0 <= at2)
        .map(|l| l.1)
        .collect();
    let (nb, nd) = (base.len(), during.len());
    let (pb, pd) = (
        percentile(&sorted(base), 0.99),
        percentile(&sorted(during), 0.99),
    );
    let revs = end - before;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    m.row(
        format!("compact {revs} revisions: Compact returns, ms"),
        ms(t1 - t0),
        "",
    );
    m.row(
        format!("compact {revs} revisions: physically done, ms"),
        ms(t2 - t0),
        "",
    );
    m.row("puts sent without compaction", nb as f64, "");
    m.row("write p99 ms, 64 clients, no compaction", pb, "");
    m.row("puts sent during compaction", nd as f64, "");
    m.row("write p99 ms, 64 clients, during compaction", pd, "");
    m.row(
        "write p99 during / without compaction",
        if pb > 0.0 { pd / pb } else { 0.0 },
        "ours≤2",
    );
    m.row(
        "raft term changes during compaction",
        term1.saturating_sub(term0) as f64,
        "ours=0",
    );
    // CPU above what the puts sent meanwhile cost at the rate per put before the compaction.
    let per_put = (cpu0 - cpu_start) / nb.max(1) as f64;
    let extra = (cpu - per_put * nd as f64).max(0.0);
    let per_rev = cpu_us_per_op(extra, revs.max(0) as u64);
    m.cpu("compaction, extra per compacted revision", per_rev);
    // The same again without the put load, so the compaction's own CPU stands alone: beside
    // 64 writers, their CPU in the window moves more than a 100k-revision compaction costs.
    let refill = fill(&pool, CLIENTS, cfg.compact_revs, history, None).await;
    m.absorb(&refill);
    let end2 = match pool.header().await {
        Ok((rev, _)) => rev,
        Err(e) => {
            m.error(1, Some(e));
            return m;
        }
    };
    // The fill's last batch commits and applies settle first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu0 = t.cpu_secs();
    if let Err(e) = pool.compact(end2, true).await {
        m.error(1, Some(format!("compact without load: {e}")));
    }
    let alone = t.cpu_secs() - cpu0;
    m.cpu(
        "compaction alone (no load), per compacted revision",
        cpu_us_per_op(alone, (end2 - end - 1).max(0) as u64),
    );
    m
}
