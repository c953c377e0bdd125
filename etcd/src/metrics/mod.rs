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
    /// Messages of each call in each direction, and their protobuf bytes (etcd counts the
    /// messages' sizes, not the gRPC framing).
    pub grpc_msg_received: CounterVec,
    pub grpc_msg_sent: CounterVec,
    pub grpc_received_bytes: Counter,
    pub grpc_sent_bytes: Counter,
    pub watch_streams: Gauge,
    pub watchers: Gauge,
    /// Events sent to watchers.
    pub watch_events: Counter,
    pub lease_granted: Counter,
    pub lease_renewed: Counter,
    pub lease_revoked: Counter,
    pub lease_expired: Counter,
    pub lease_ttl: Histogram,
    pub hash: Histogram,
    pub hash_rev: Histogram,
    pub defrag: Histogram,
    pub defrag_inflight: Gauge,
    pub snapshot: Histogram,
    /// ReadIndex rounds that went unanswered past READ_INDEX_RETRY and were sent again.
    pub slow_read_indexes: Counter,
    /// ReadIndex rounds raft refused or that found no leader.
    pub read_indexes_failed: Counter,
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
    grpc_msg_received: CounterVec::new(&["grpc_method", "grpc_service", "grpc_type"]),
    grpc_msg_sent: CounterVec::new(&["grpc_method", "grpc_service", "grpc_type"]),
    grpc_received_bytes: Counter::default(),
    grpc_sent_bytes: Counter::default(),
    watch_streams: Gauge::default(),
    watchers: Gauge::default(),
    watch_events: Counter::default(),
    lease_granted: Counter::default(),
    lease_renewed: Counter::default(),
    lease_revoked: Counter::default(),
    lease_expired: Counter::default(),
    // etcd's buckets for each, as its /metrics prints them.
    lease_ttl: Histogram::new(registry::exponential_buckets(1.0, 2.0, 24)),
    hash: Histogram::new(registry::exponential_buckets(0.01, 2.0, 15)),
    hash_rev: Histogram::new(registry::exponential_buckets(0.01, 2.0, 15)),
    defrag: Histogram::new(registry::exponential_buckets(0.1, 2.0, 13)),
    defrag_inflight: Gauge::default(),
    snapshot: Histogram::new(registry::exponential_buckets(0.01, 2.0, 17)),
    slow_read_indexes: Counter::default(),
    read_indexes_failed: Counter::default(),
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
        b(server.is_learner()),
    );
    e.single(
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
        "counter",
        m.leader_changes.get() as f64,
    );
    e.single(
        "etcd_server_slow_read_indexes_total",
        "The total number of pending read indexes not in sync with leader's or timed out read index requests.",
        "counter",
        m.slow_read_indexes.get() as f64,
    );
    e.single(
        "etcd_server_read_indexes_failed_total",
        "The total number of failed read indexes seen.",
        "counter",
        m.read_indexes_failed.get() as f64,
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
        "etcd_debugging_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        "gauge",
        size as f64,
    );
    e.single(
        "etcd_mvcc_db_open_read_transactions",
        "The number of currently open read transactions",
        "gauge",
        server.kv().backend().db().open_readers() as f64,
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
    e.single(
        "etcd_debugging_mvcc_keys_total",
        "Total number of keys.",
        "gauge",
        server.kv().live_keys() as f64,
    );
    let (synced, pending) = server.kv().watch_hub().counts();
    let watchers = m.watchers.get().max(0);
    for (name, help, typ, v) in [
        (
            "etcd_debugging_mvcc_watch_stream_total",
            "Total number of watch streams.",
            "gauge",
            m.watch_streams.get().max(0) as f64,
        ),
        (
            "etcd_debugging_mvcc_watcher_total",
            "Total number of watchers.",
            "gauge",
            watchers as f64,
        ),
        (
            "etcd_debugging_mvcc_slow_watcher_total",
            "Total number of unsynced slow watchers.",
            "gauge",
            // Synced watchers wait in the hub; the others catch up from history.
            (watchers - synced as i64).max(0) as f64,
        ),
        (
            "etcd_debugging_mvcc_events_total",
            "Total number of events sent by this member.",
            "counter",
            m.watch_events.get() as f64,
        ),
        (
            "etcd_debugging_mvcc_pending_events_total",
            "Total number of pending events to be sent.",
            "gauge",
            pending as f64,
        ),
        (
            "etcd_debugging_lease_granted_total",
            "The total number of granted leases.",
            "counter",
            m.lease_granted.get() as f64,
        ),
        (
            "etcd_debugging_lease_renewed_total",
            "The number of renewed leases seen by the leader.",
            "counter",
            m.lease_renewed.get() as f64,
        ),
        (
            "etcd_debugging_lease_revoked_total",
            "The total number of revoked leases.",
            "counter",
            m.lease_revoked.get() as f64,
        ),
        (
            "etcd_debugging_server_lease_expired_total",
            "The total number of expired leases.",
            "counter",
            m.lease_expired.get() as f64,
        ),
        (
            "etcd_disk_defrag_inflight",
            "Whether or not defrag is active on the member. 1 means active, 0 means not.",
            "gauge",
            m.defrag_inflight.get().max(0) as f64,
        ),
        (
            "etcd_network_client_grpc_received_bytes_total",
            "The total number of bytes received from grpc clients.",
            "counter",
            m.grpc_received_bytes.get() as f64,
        ),
        (
            "etcd_network_client_grpc_sent_bytes_total",
            "The total number of bytes sent to grpc clients.",
            "counter",
            m.grpc_sent_bytes.get() as f64,
        ),
    ] {
        e.single(name, help, typ, v);
    }
    e.histogram(
        "etcd_debugging_lease_ttl_total",
        "Bucketed histogram of lease TTLs.",
        &m.lease_ttl,
    );
    e.histogram(
        "etcd_mvcc_hash_duration_seconds",
        "The latency distribution of storage hash operation.",
        &m.hash,
    );
    e.histogram(
        "etcd_mvcc_hash_rev_duration_seconds",
        "The latency distribution of storage hash by revision operation.",
        &m.hash_rev,
    );
    e.histogram(
        "etcd_disk_backend_defrag_duration_seconds",
        "The latency distribution of backend defragmentation.",
        &m.defrag,
    );
    e.histogram(
        "etcd_disk_backend_snapshot_duration_seconds",
        "The latency distribution of backend snapshots.",
        &m.snapshot,
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
    m.grpc_msg_received.write(
        &mut e,
        "grpc_server_msg_received_total",
        "Total number of RPC stream messages received on the server.",
    );
    m.grpc_msg_sent.write(
        &mut e,
        "grpc_server_msg_sent_total",
        "Total number of gRPC stream messages sent by the server.",
    );
    process::render(&mut e);
    e.render()
}

fn labelled_one(e: &mut Exposition, name: &str, help: &str, label: &str, value: &str) {
    let mut f = e.family(name, help, "gauge");
    f.sample(name, &[(label, value)], "1");
    f.finish();
}
