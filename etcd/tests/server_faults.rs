// Faults below the API that must stop a member rather than let it go on wrong: a committed
// entry that cannot be decoded (a corrupt log) stops it, naming the index, every time.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::Cluster;
use proto::raftpb::{Entry, HardState};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const FAST: &[&str] = &["--heartbeat-interval", "50", "--election-timeout", "500"];

#[test]
fn an_undecodable_committed_entry_stops_the_member_naming_its_index() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut c = Cluster::start(OURS, dir.path(), 1, false, FAST);
    c.nodes[0].etcdctl_ok(&["put", "before", "x"]);
    c.nodes[0].stop();

    // Append a committed entry of garbage to the member's WAL, as a corrupt log would hold.
    let wal_dir = c.nodes[0].data_dir.join("member").join("wal");
    let bad_index = {
        let mut wal = common::wal::Wal::open(&wal_dir, &Default::default()).expect("open WAL");
        let all = wal.read_all().expect("read WAL");
        let last = all.entries.last().expect("entries").clone();
        let bad = Entry {
            term: last.term,
            index: last.index + 1,
            data: Some(vec![0xff; 16]),
            ..Default::default()
        };
        let st = HardState {
            commit: bad.index,
            ..all.state
        };
        wal.save(&st, std::slice::from_ref(&bad)).expect("append");
        bad.index
    };

    for _ in 0..2 {
        c.nodes[0].spawn(OURS);
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = c.nodes[0].exited() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the member went on past a corrupt entry:\n{}",
                c.nodes[0].log_tail(20)
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        c.nodes[0].child = None;
        assert!(!status.success(), "exited {status}");
        let log = std::fs::read_to_string(c.nodes[0].log_path()).unwrap_or_default();
        assert!(
            log.contains(&format!(
                "committed entry {bad_index} is neither a v3 nor a v2 request"
            )),
            "{}",
            c.nodes[0].log_tail(20)
        );
    }
}
