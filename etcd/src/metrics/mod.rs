// etcd's Prometheus series (names, HELP texts and buckets as etcd 3.4 prints them), fed by the
// raft loop, the proposal path, the disk observers and the gRPC layer, rendered for /metrics.

pub mod grpc;
mod process;
pub mod registry;

use std::sync::LazyLock;
use std::time::Duration;

use registry::{Counter, CounterVec, Exposition, Gauge, Histogram, HistogramVec};

use crate::server::EtcdServer;

/// The process-wide series (etcd's are process-wide too: one member per process).
pub struct Metrics {
    pub leader_changes: Counter,
    pub proposals_pending: Gauge,
    pub proposals_failed: Counter,
    pub wal_fsync: Histogram,
    pub backend_commit: Histogram,
    /// Peer round trips by remote member id (hex), for the peer transport to feed.
    pub peer_rtt: HistogramVec,
    pub health_success: Counter,
    pub health_failures: Counter,
    pub grpc_started: CounterVec,
    pub grpc_handled: CounterVec,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    leader_changes: Counter::default(),
    proposals_pending: Gauge::default(),
    proposals_failed: Counter::default(),
    // etcd: ExponentialBuckets(0.001, 2, 14) for both disk histograms (1ms .. 8.192s).
    wal_fsync: Histogram::new(registry::exponential_buckets(0.001, 2.0, 14)),
    backend_commit: Histogram::new(registry::exponential_buckets(0.001, 2.0, 14)),
    // etcd: ExponentialBuckets(0.0001, 2, 14) (0.1ms .. 0.8192s), label "To".
    peer_rtt: HistogramVec::new(&["To"], registry::exponential_buckets(0.0001, 2.0, 14)),
    health_success: Counter::default(),
    health_failures: Counter::default(),
    // Labels in name order, so series sort as Go's registry sorts them.
    grpc_started: CounterVec::new(&["grpc_method", "grpc_service", "grpc_type"]),
    grpc_handled: CounterVec::new(&["grpc_code", "grpc_method", "grpc_service", "grpc_type"]),
});

/// Hooks the disk observers up to the histograms; call once at start.
pub fn install() {
    common::observe::on_wal_fsync(|d| METRICS.wal_fsync.observe(d.as_secs_f64()));
    common::observe::on_backend_commit(|d| METRICS.backend_commit.observe(d.as_secs_f64()));
}

/// Records one round trip to peer `to` (a member id), as etcd's peer transport does.
pub fn observe_peer_rtt(to: u64, took: Duration) {
    METRICS
        .peer_rtt
        .observe(&[&format!("{to:x}")], took.as_secs_f64());
}

/// The whole /metrics page for `server`.
pub fn render(server: &EtcdServer) -> String {
    let m = &*METRICS;
    let mut e = Exposition::default();
    let b = |v: bool| if v { 1.0 } else { 0.0 };
    e.single(
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        "gauge",
        b(server.leader() != 0),
    );
    e.single(
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        "gauge",
        b(server.is_leader()),
    );
    e.single(
        "etcd_server_is_learner",
        "Whether or not this member is a learner. 1 if is, 0 otherwise.",
        "gauge",
        0.0,
    );
    e.single(
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
        "counter",
        m.leader_changes.get() as f64,
    );
    // etcd sets these two gauges from the raft commit and applied indexes.
    e.single(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        "gauge",
        server.commit_index() as f64,
    );
    e.single(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        "gauge",
        server.applied_index() as f64,
    );
    e.single(
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
        "gauge",
        m.proposals_pending.get() as f64,
    );
    e.single(
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
        "counter",
        m.proposals_failed.get() as f64,
    );
    e.single(
        "etcd_server_health_success",
        "The total number of successful health checks",
        "counter",
        m.health_success.get() as f64,
    );
    e.single(
        "etcd_server_health_failures",
        "The total number of failed health checks",
        "counter",
        m.health_failures.get() as f64,
    );
    e.single(
        "etcd_server_quota_backend_bytes",
        "Current backend storage quota size in bytes.",
        "gauge",
        server.cfg().quota_backend_bytes as f64,
    );
    labelled_one(
        &mut e,
        "etcd_server_version",
        "Which version is running. 1 for 'server_version' label with current version.",
        "server_version",
        crate::version::ETCD_VERSION,
    );
    {
        // etcd labels it with major.minor and has no sample until the version is decided.
        let name = "etcd_cluster_version";
        let mut f = e.family(
            name,
            "Which version is running. 1 for 'cluster_version' label with current cluster version",
            "gauge",
        );
        let cv = server.cluster_version();
        let mut parts = cv.split('.');
        if let (Some(major), Some(minor)) = (parts.next(), parts.next()) {
            f.sample(
                name,
                &[("cluster_version", &format!("{major}.{minor}"))],
                "1",
            );
        }
        f.finish();
    }
    labelled_one(
        &mut e,
        "etcd_server_id",
        "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
        "server_id",
        &format!("{:x}", server.member_id()),
    );
    let (size, in_use) = crate::api::maintenance::db_sizes(server);
    e.single(
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        "gauge",
        size as f64,
    );
    e.single(
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        "Total size of the underlying database logically in use in bytes.",
        "gauge",
        in_use as f64,
    );
    // etcd 3.4 exports the operation counters under both names.
    let counts = server.kv().op_counts();
    let load =
        |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed) as f64;
    for (name, help, c) in [
        (
            "range",
            "Total number of ranges seen by this member.",
            &counts.ranges,
        ),
        (
            "put",
            "Total number of puts seen by this member.",
            &counts.puts,
        ),
        (
            "delete",
            "Total number of deletes seen by this member.",
            &counts.deletes,
        ),
        (
            "txn",
            "Total number of txns seen by this member.",
            &counts.txns,
        ),
    ] {
        for prefix in ["etcd_mvcc", "etcd_debugging_mvcc"] {
            e.single(&format!("{prefix}_{name}_total"), help, "counter", load(c));
        }
    }
    e.single(
        "etcd_debugging_mvcc_total_put_size_in_bytes",
        "The total size of put kv pairs seen by this member.",
        "gauge",
        load(&counts.put_bytes),
    );
    e.single(
        "etcd_debugging_mvcc_current_revision",
        "The current revision of store.",
        "gauge",
        server.kv().current_rev() as f64,
    );
    e.single(
        "etcd_debugging_mvcc_compact_revision",
        "The revision of the last compaction in store.",
        "gauge",
        server.kv().compact_rev() as f64,
    );
    e.histogram(
        "etcd_disk_wal_fsync_duration_seconds",
        "The latency distributions of fsync called by WAL.",
        &m.wal_fsync,
    );
    e.histogram(
        "etcd_disk_backend_commit_duration_seconds",
        "The latency distributions of commit called by backend.",
        &m.backend_commit,
    );
    m.peer_rtt.write(
        &mut e,
        "etcd_network_peer_round_trip_time_seconds",
        "Round-Trip-Time histogram between peers.",
    );
    m.grpc_handled.write(
        &mut e,
        "grpc_server_handled_total",
        "Total number of RPCs completed on the server, regardless of success or failure.",
    );
    m.grpc_started.write(
        &mut e,
        "grpc_server_started_total",
        "Total number of RPCs started on the server.",
    );
    process::render(&mut e);
    e.render()
}

fn labelled_one(e: &mut Exposition, name: &str, help: &str, label: &str, value: &str) {
    let mut f = e.family(name, help, "gauge");
    f.sample(name, &[(label, value)], "1");
    f.finish();
}
