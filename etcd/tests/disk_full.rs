// A member whose disk fills up: it stops acknowledging writes, and once the disk has room again
// and the member restarts, every write it acknowledged is there (issue 18).

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

use std::time::Duration;

use cluster_support::{Cluster, Node, Tmpfs};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
/// Room for the first WAL segment (64 MiB, preallocated) and a little more: the disk fills
/// while the second segment or the db grows.
const DISK: &str = "size=80m";
const VALUE_BYTES: usize = 100 * 1024;

fn value_for(i: usize) -> Vec<u8> {
    format!("{i:08}").into_bytes().repeat(VALUE_BYTES / 8)
}

/// `etcdctl put` with the value on stdin (too big for an argument).
fn put(m: &Node, key: &str, value: &[u8]) -> bool {
    m.etcdctl_with_input(&["put", key], value).status.success()
}

#[test]
fn a_full_disk_loses_no_acknowledged_write() {
    if !Tmpfs::can_mount() {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let disk = Tmpfs::mount(dir.path(), DISK);
    let mut c = Cluster::start(OURS, dir.path(), 1, false, &[]);

    let mut acked = Vec::new();
    let mut failures = 0;
    let mut i = 0;
    // Write until the disk refuses, then a few more: none of those may be acknowledged
    // without being kept.
    while failures < 5 {
        assert!(
            i < 2000,
            "80 MiB took 200 MiB of writes: is the data dir on the tmpfs?"
        );
        if put(&c.nodes[0], &format!("k{i:05}"), &value_for(i)) {
            acked.push(i);
        } else {
            failures += 1;
        }
        i += 1;
    }
    assert!(
        acked.len() > 100,
        "only {} writes before the disk filled",
        acked.len()
    );
    eprintln!(
        "{} writes acknowledged, {failures} refused, of {i}",
        acked.len()
    );
    // A write the disk refused stops the member (as etcd panics), saying why.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = c.nodes[0].exited() {
            break st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the member goes on with a full disk:\n{}",
            c.nodes[0].log_tail(10)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = c.nodes[0].log_tail(10);
    assert!(!status.success(), "exited {status} on a full disk");
    assert!(log.contains("No space left on device"), "{log}");

    // Room again: the member restarts (it may have stopped by itself) and has every write.
    c.nodes[0].kill9();
    disk.resize("size=400m");
    c.nodes[0].spawn(OURS);
    c.nodes[0].wait_healthy(Duration::from_secs(30));
    for &k in &acked {
        let out = c.nodes[0].etcdctl(&["get", &format!("k{k:05}"), "--print-value-only"]);
        let got = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
        assert!(
            got == value_for(k).as_slice(),
            "acknowledged k{k:05} lost or wrong ({} bytes) after the disk filled; log before the restart:\n{log}",
            got.len()
        );
    }
    // And it takes writes again.
    assert!(put(&c.nodes[0], "after", b"room"));
    drop(c);
}
