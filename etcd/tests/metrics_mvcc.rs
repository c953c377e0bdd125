// /metrics' mvcc operation counters against etcd 3.4's: the same etcdctl commands on a member
// of each, the same etcd_mvcc_{range,put,delete,txn}_total and put size afterwards.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "http_client/mod.rs"]
mod http_client;

use cluster_support::{Cluster, Node};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const ETCD: &str = "etcd";
const COUNTERS: &[&str] = &[
    "etcd_mvcc_range_total",
    "etcd_mvcc_put_total",
    "etcd_mvcc_delete_total",
    "etcd_mvcc_txn_total",
    "etcd_debugging_mvcc_range_total",
    "etcd_debugging_mvcc_put_total",
    "etcd_debugging_mvcc_delete_total",
    "etcd_debugging_mvcc_txn_total",
    "etcd_debugging_mvcc_total_put_size_in_bytes",
];

fn txn(m: &Node, input: &str) {
    // A blank line ends each of the three parts, as etcdctl reads them.
    let out = m.etcdctl_with_input(&["txn"], format!("{input}\n").as_bytes());
    assert!(out.status.success(), "txn {input:?}");
}

fn counters(m: &Node) -> Vec<(String, String)> {
    let body = http_client::get(&m.client_url, "/metrics").body;
    COUNTERS
        .iter()
        .map(|name| {
            let v = body
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing from /metrics"));
            (name.to_string(), v.to_string())
        })
        .collect()
}

fn workload(m: &Node) {
    m.etcdctl_ok(&["put", "a", "1"]);
    txn(m, "\nput b 2\n\n");
    m.etcdctl_ok(&["get", "a"]);
    m.etcdctl_ok(&["del", "a"]);
    txn(m, "\nput x 1\nput y 2\n\n");
    txn(m, "\nget x\nput z 3\n\n");
    m.etcdctl_ok(&["del", "missing"]);
    m.etcdctl_ok(&["get", "", "--prefix"]);
    // A read-only txn whose compare fails: the compare and the failure branch's get.
    txn(m, "value(\"x\") = \"2\"\n\nget y\n\n");
    txn(m, "value(\"x\") = \"1\"\n\nget y\nget z\n\n");
    m.etcdctl_ok(&["put", "x", "1"]);
    m.etcdctl_ok(&["get", "y", "--consistency=s"]);
}

#[test]
fn operation_counters_match_etcd() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut theirs = Cluster::start(ETCD, &dir.path().join("etcd"), 1, false, &[]);
    let mut ours = Cluster::start(OURS, &dir.path().join("ours"), 1, false, &[]);
    workload(&theirs.nodes[0]);
    workload(&ours.nodes[0]);
    let (want, got) = (counters(&theirs.nodes[0]), counters(&ours.nodes[0]));
    assert_eq!(got, want, "ours (left) vs etcd 3.4 (right)");
    assert!(
        want.iter().any(|(_, v)| v != "0"),
        "the workload counted nothing"
    );
    ours.nodes[0].stop();
    theirs.nodes[0].stop();
}
