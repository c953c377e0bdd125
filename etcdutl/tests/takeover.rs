// Take-over both ways: our server started on a data dir a real etcd 3.4 wrote (stopped
// cleanly, or killed -9) serves every key, revision, lease and member and keeps serving; and
// a real etcd 3.4 takes over a data dir our server wrote (its .snap files carry the v2 store
// membership etcd 3.4 reads at boot).

#[path = "../../common/tests/support/mod.rs"]
mod support;
mod util;

use support::RealEtcd;
use util::*;

fn members(e: &RealEtcd) -> Vec<(String, String, String)> {
    let out = e.etcdctl_ok(&["member", "list", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["ID"].to_string(),
                m["name"].as_str().unwrap_or("").to_string(),
                m["peerURLs"][0].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn take_over_real_etcd_dir(kill: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let mut real = RealEtcd::start(&tmp.path().join("d"), "n1");
    let lease = write_history(&real);
    let before = all_keys(&real);
    let members_before = members(&real);
    if kill {
        real.kill9();
    } else {
        real.stop();
    }
    real.restart(&bin("etcd"), &[]);
    assert_eq!(all_keys(&real), before);
    assert_eq!(leases(&real), vec![lease.clone()]);
    let ttl = real.etcdctl_ok(&["lease", "timetolive", &lease, "--keys"]);
    assert!(
        ttl.contains("leased-a") && ttl.contains("leased-b"),
        "{ttl}"
    );
    assert_eq!(members(&real), members_before);
    real.etcdctl_ok(&["put", "ours", "now"]);
    real.etcdctl_ok(&["lease", "revoke", &lease]);
    let (rev, kvs) = all_keys(&real);
    assert_eq!(rev, before.0 + 2);
    assert!(!kvs.to_string().contains("leased-a"));
    // Restarting ours again (its own WAL entries on top of etcd's) keeps it all.
    real.restart(&bin("etcd"), &[]);
    assert_eq!(all_keys(&real), (rev, kvs));
}

#[test]
fn ours_takes_over_a_cleanly_stopped_real_etcd_dir() {
    take_over_real_etcd_dir(false);
}

#[test]
fn ours_takes_over_a_killed_real_etcd_dir() {
    take_over_real_etcd_dir(true);
}

/// Our server takes snapshots (--snapshot-count) and is stopped; the real etcd 3.4 then starts
/// on the same data dir and serves every key, revision, lease and the member.
#[test]
fn real_etcd_takes_over_our_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let mut ours = RealEtcd::start_bin(&bin("etcd"), &dir, "n1", &["--snapshot-count", "10"]);
    let lease = write_history(&ours);
    let before = all_keys(&ours);
    let members_before = members(&ours);
    ours.stop();
    let snaps = std::fs::read_dir(dir.join("member/snap"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".snap")
        })
        .count();
    assert!(snaps > 0, "our server wrote no .snap file");
    ours.restart("etcd", &[]);
    assert_eq!(all_keys(&ours), before);
    assert_eq!(leases(&ours), vec![lease]);
    assert_eq!(members(&ours), members_before);
    ours.etcdctl_ok(&["put", "real", "now"]);
    assert_eq!(all_keys(&ours).0, before.0 + 1);
}
