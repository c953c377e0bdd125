// Multi-member clusters of our server, driven by the real Go etcdctl: bootstrap, leader
// failure, partitions, membership changes under load, snapshot catch-up and rolling restarts.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{Cluster, Node, Writer, assert_all_present};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

/// Short timeouts keep the tests quick; snapshots are frequent so catch-up is exercised.
const FAST: &[&str] = &["--heartbeat-interval", "50", "--election-timeout", "500"];

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn three_members_replicate_and_survive_a_leader_kill() {
    let dir = tmp();
    let mut c = Cluster::start(OURS, dir.path(), 3, false, FAST);
    // A write on any member is visible to a linearizable read on every member.
    for (i, m) in c.nodes.iter().enumerate() {
        m.etcdctl_ok(&["put", &format!("k{i}"), &format!("v{i}")]);
    }
    for m in &c.nodes {
        for i in 0..3 {
            assert_eq!(
                m.etcdctl_ok(&["get", &format!("k{i}"), "--print-value-only"])
                    .trim(),
                format!("v{i}")
            );
        }
    }
    let list = c.nodes[0].etcdctl_ok(&["member", "list"]);
    assert_eq!(list.lines().count(), 3, "{list}");
    for m in &c.nodes {
        assert!(
            list.contains(&format!("{}, {}, {}", "started", m.name, m.advertise_peer)),
            "{list}"
        );
        assert!(list.contains(&m.client_url), "{list}");
    }

    let writer = Writer::start(c.nodes.iter().map(|m| m.client_url.clone()).collect(), "w/");
    std::thread::sleep(Duration::from_millis(500));
    let old = c.leader(Duration::from_secs(5));
    c.nodes[old].kill9();
    // A new leader among the two left, and writes go on.
    let new = c.leader(Duration::from_secs(10));
    assert_ne!(new, old);
    let before = writer.acked_count();
    let deadline = Instant::now() + Duration::from_secs(10);
    while writer.acked_count() < before + 20 {
        assert!(
            Instant::now() < deadline,
            "writes stopped after the leader was killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let acked = writer.finish();
    assert_all_present(&c.nodes[new], "w/", &acked);

    // The old leader comes back and catches up.
    c.nodes[old].spawn(OURS);
    c.nodes[old].wait_healthy(Duration::from_secs(20));
    let last = acked.last().expect("some writes were acknowledged");
    c.nodes[old].wait_local(last, "v", Duration::from_secs(10));
    assert_all_present(&c.nodes[old], "w/", &acked);
}

#[test]
fn a_partitioned_member_refuses_then_converges() {
    let dir = tmp();
    let c = Cluster::start(OURS, dir.path(), 3, true, FAST);
    let leader = c.leader(Duration::from_secs(5));
    // Cut the leader off: nothing reaches its peer port any more.
    let cut = leader;
    c.nodes[cut].proxy.as_ref().expect("proxied").set_cut(true);
    let others: Vec<usize> = (0..3).filter(|i| *i != cut).collect();
    // The majority elects a new leader and serves.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if c.nodes[others[0]]
            .etcdctl(&["put", "during", "partition"])
            .status
            .success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the majority never served a write"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        c.nodes[others[1]]
            .etcdctl_ok(&["get", "during", "--print-value-only"])
            .trim(),
        "partition"
    );
    // The minority refuses linearizable reads and writes with etcd's errors (once it
    // notices it lost its quorum: check-quorum steps it down within an election timeout).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let w = c.nodes[cut].etcdctl(&["--command-timeout", "2s", "put", "minority", "x"]);
        let r = c.nodes[cut].etcdctl(&["--command-timeout", "2s", "get", "during"]);
        if !w.status.success() && !r.status.success() {
            for out in [&w, &r] {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    err.contains("etcdserver: no leader")
                        || err.contains("etcdserver: request timed out")
                        || err.contains("context deadline exceeded"),
                    "unexpected error from the minority: {err}"
                );
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cut-off member kept serving linearizable requests"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Serializable reads are still served locally, without the partition's writes.
    assert_eq!(c.nodes[cut].local_get("during"), None);
    // Heal: the member converges and the minority write never happened.
    c.nodes[cut].proxy.as_ref().expect("proxied").set_cut(false);
    c.nodes[cut].wait_local("during", "partition", Duration::from_secs(15));
    assert_eq!(
        c.nodes[cut]
            .etcdctl_ok(&["get", "during", "--print-value-only"])
            .trim(),
        "partition"
    );
}

#[test]
fn learner_added_promoted_and_old_member_removed_under_writes() {
    let dir = tmp();
    let mut c = Cluster::start(OURS, dir.path(), 3, false, FAST);
    let writer = Writer::start(c.nodes.iter().map(|m| m.client_url.clone()).collect(), "w/");
    std::thread::sleep(Duration::from_millis(300));

    // The real etcdctl adds a learner and prints the settings for starting it.
    let mut new = Node::new_for_join(dir.path(), "m4");
    let added = c.nodes[0].etcdctl_ok(&[
        "member",
        "add",
        "m4",
        "--learner",
        &format!("--peer-urls={}", new.advertise_peer),
    ]);
    assert!(
        added.contains("ETCD_INITIAL_CLUSTER_STATE=\"existing\""),
        "{added}"
    );
    let ic = added
        .lines()
        .find_map(|l| l.strip_prefix("ETCD_INITIAL_CLUSTER=\""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("ETCD_INITIAL_CLUSTER line")
        .to_string();
    new.initial_cluster = ic;
    new.state = "existing";
    new.extra = FAST.iter().map(|s| s.to_string()).collect();
    new.spawn(OURS);
    new.wait_healthy(Duration::from_secs(20));
    let id4 = c.member_id_hex("m4");
    let list = c.nodes[1].etcdctl_ok(&["member", "list"]);
    assert!(
        list.contains(&format!(
            "{id4}, started, m4, {}, {}, true",
            new.advertise_peer, new.client_url
        )),
        "{list}"
    );

    // Promote once it has caught up (etcd refuses before, with its error).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = c.nodes[1].etcdctl(&["member", "promote", &id4]);
        if out.status.success() {
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("in sync with leader"), "promote failed: {err}");
        assert!(Instant::now() < deadline, "the learner never caught up");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Remove the first member; it stops, and the cluster goes on with 3 voters.
    let id1 = c.member_id_hex("m1");
    c.nodes[2].etcdctl_ok(&["member", "remove", &id1]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.nodes[0].exited().is_none() {
        assert!(Instant::now() < deadline, "the removed member did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(c.nodes[0].log_path()).unwrap_or_default();
    assert!(log.contains("the member has been permanently removed from the cluster"));
    c.nodes[0].child = None;
    let list = c.nodes[1].etcdctl_ok(&["member", "list"]);
    assert_eq!(list.lines().count(), 3, "{list}");
    assert!(!list.contains(", m1, "), "{list}");
    assert!(
        list.contains(&format!("{id4}, started, m4")) && list.contains("false"),
        "{list}"
    );
    // Removing it again is etcd's error (after any leader change the removal caused: the
    // removed member may have led, and proposals wait for a new leader).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let again = c.nodes[1].etcdctl(&["member", "remove", &id1]);
        assert!(!again.status.success());
        let err = String::from_utf8_lossy(&again.stderr);
        if err.contains("etcdserver: member not found") {
            break;
        }
        assert!(
            err.contains("no leader")
                || err.contains("timed out")
                || err.contains("deadline exceeded"),
            "{err}"
        );
        assert!(
            Instant::now() < deadline,
            "no new leader after the removal: {err}"
        );
    }

    let before = writer.acked_count();
    let deadline = Instant::now() + Duration::from_secs(10);
    while writer.acked_count() < before + 20 {
        assert!(
            Instant::now() < deadline,
            "writes stopped after the membership changes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let acked = writer.finish();
    assert_all_present(&new, "w/", &acked);
    assert_all_present(&c.nodes[2], "w/", &acked);

    // The removed member refuses to come back into the cluster.
    c.nodes[0].spawn(OURS);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if c.nodes[0].exited().is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a removed member kept running after a restart"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.nodes.push(new);
}

#[test]
fn a_follower_far_behind_gets_the_leaders_snapshot() {
    let dir = tmp();
    let mut flags = FAST.to_vec();
    flags.extend([
        "--snapshot-count",
        "20",
        "--experimental-snapshot-catchup-entries",
        "5",
    ]);
    let mut c = Cluster::start(OURS, dir.path(), 3, false, &flags);
    let leader = c.leader(Duration::from_secs(5));
    let lagging = (leader + 1) % 3;
    c.nodes[lagging].stop();
    let up = (0..3).find(|i| *i != lagging).expect("a running member");
    for i in 0..60 {
        c.nodes[up].etcdctl_ok(&["put", &format!("s{i:03}"), &format!("{i}")]);
    }
    c.nodes[up].etcdctl_ok(&["del", "s000"]);
    c.nodes[lagging].spawn(OURS);
    c.nodes[lagging].wait_healthy(Duration::from_secs(20));
    c.nodes[lagging].wait_local("s059", "59", Duration::from_secs(15));
    let log = std::fs::read_to_string(c.nodes[lagging].log_path()).unwrap_or_default();
    assert!(
        log.contains("applied the leader's snapshot to the backend"),
        "the follower caught up without a snapshot; log: {}",
        c.nodes[lagging].log_path().display()
    );
    let keys =
        c.nodes[lagging].etcdctl_ok(&["get", "s", "--prefix", "--keys-only", "--consistency=s"]);
    assert_eq!(keys.lines().filter(|l| !l.is_empty()).count(), 59);
    assert_eq!(c.nodes[lagging].local_get("s000"), None);
    // It keeps following after the snapshot, and survives a restart on the received db.
    c.nodes[up].etcdctl_ok(&["put", "after", "snap"]);
    c.nodes[lagging].wait_local("after", "snap", Duration::from_secs(10));
    c.nodes[lagging].kill9();
    c.nodes[lagging].spawn(OURS);
    c.nodes[lagging].wait_healthy(Duration::from_secs(20));
    assert_eq!(c.nodes[lagging].local_get("s030").as_deref(), Some("30"));
    assert_eq!(c.nodes[lagging].local_get("after").as_deref(), Some("snap"));
}

#[test]
fn rolling_restart_under_writes_loses_nothing() {
    let dir = tmp();
    let mut c = Cluster::start(OURS, dir.path(), 3, false, FAST);
    let writer = Writer::start(c.nodes.iter().map(|m| m.client_url.clone()).collect(), "r/");
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(300));
        if i % 2 == 0 {
            c.nodes[i].stop();
        } else {
            c.nodes[i].kill9();
        }
        c.nodes[i].spawn(OURS);
        c.nodes[i].wait_healthy(Duration::from_secs(20));
    }
    let before = writer.acked_count();
    let deadline = Instant::now() + Duration::from_secs(10);
    while writer.acked_count() < before + 20 {
        assert!(
            Instant::now() < deadline,
            "writes stopped after the rolling restart"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let acked = writer.finish();
    assert!(
        acked.len() > 50,
        "too few writes to mean anything: {}",
        acked.len()
    );
    for m in &c.nodes {
        assert_all_present(m, "r/", &acked);
    }
}

#[test]
fn endpoint_status_and_health_across_the_cluster_and_move_leader() {
    let dir = tmp();
    let c = Cluster::start(OURS, dir.path(), 3, false, FAST);
    let out = c.nodes[0].etcdctl_ok(&["endpoint", "status", "--cluster", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("status json");
    let arr = v.as_array().expect("array");
    assert_eq!(arr.len(), 3, "{out}");
    let leaders: std::collections::HashSet<u64> = arr
        .iter()
        .map(|s| s["Status"]["leader"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(leaders.len(), 1, "members disagree on the leader: {out}");
    // etcdctl 3.4 prints health lines on stderr.
    let out = c.nodes[1].etcdctl(&["endpoint", "health", "--cluster"]);
    assert!(out.status.success());
    let health =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        health.lines().filter(|l| l.contains("is healthy")).count(),
        3,
        "{health}"
    );

    // move-leader to a follower, sent to the leader as etcdctl does.
    let leader = c.leader(Duration::from_secs(5));
    let target = (leader + 1) % 3;
    let tid = c.member_id_hex(&c.nodes[target].name);
    let out = c.nodes[leader].etcdctl_ok(&["move-leader", &tid]);
    assert!(out.contains("Leadership transferred"), "{out}");
    assert_eq!(c.leader(Duration::from_secs(5)), target);
    // Sent to a follower, it is etcd's error.
    let follower = (target + 1) % 3;
    let bad = c.nodes[follower].etcdctl(&["move-leader", &tid]);
    assert!(!bad.status.success());
}
