// snapshot save → restore → start, both ways between our tools and the real etcd 3.4: every
// key, revision, lease and member must be there after each trip; bad input must fail clearly
// and leave nothing behind.

#[path = "../../common/tests/support/mod.rs"]
mod support;
mod util;

use std::path::Path;

use common::backend::{Db, ReadTxn, buckets};
use prost::Message;
use support::RealEtcd;
use util::*;

fn restore_ours(snapshot: &Path, dir: &Path, name: &str, peer: &str) {
    etcdutl_ok(&[
        "snapshot",
        "restore",
        snapshot.to_str().unwrap(),
        "--data-dir",
        dir.to_str().unwrap(),
        "--name",
        name,
        "--initial-cluster",
        &format!("{name}={peer}"),
        "--initial-advertise-peer-urls",
        peer,
    ]);
}

fn member_list(e: &RealEtcd) -> serde_json::Value {
    let out = e.etcdctl_ok(&["member", "list", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["members"].clone()
}

/// A snapshot of our server restores with our etcdutl and serves every key, revision and
/// lease under our server and under the real etcd 3.4; with the real etcdctl's restore it
/// serves under the real etcd too. etcdctl's `snapshot status` agrees with etcdutl's.
#[test]
fn our_snapshot_restores_under_ours_and_under_real_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let mut src = RealEtcd::start_bin(&bin("etcd"), &tmp.path().join("src"), "src", &[]);
    let lease = write_history(&src);
    let (rev, kvs) = all_keys(&src);
    let file = tmp.path().join("ours.db");
    src.etcdctl_ok(&["snapshot", "save", file.to_str().unwrap()]);
    src.stop();

    let st: serde_json::Value = serde_json::from_str(&etcdutl_ok(&[
        "snapshot",
        "status",
        file.to_str().unwrap(),
        "-w",
        "json",
    ]))
    .unwrap();
    assert_eq!(st["revision"], rev);
    // etcdctl's status is the same code and output.
    let ctl = std::process::Command::new(bin("etcdctl"))
        .args(["snapshot", "status", file.to_str().unwrap(), "-w", "json"])
        .output()
        .unwrap();
    assert!(ctl.status.success());
    assert_eq!(String::from_utf8_lossy(&ctl.stdout).trim(), st.to_string());
    // The real etcdctl computes the same status, and as 3.4 ours prints nothing else.
    let real = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "status", file.to_str().unwrap(), "-w", "json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&real.stdout).trim(), st.to_string());
    assert_eq!(ctl.stderr, real.stderr);

    // Ours restores; our server and the real etcd both serve the restored dir.
    for server in [bin("etcd"), "etcd".to_string()] {
        let dir = tmp.path().join(format!("restored-{}", server.len()));
        let peer = peer_url();
        restore_ours(&file, &dir, "n1", &peer);
        let e = serve(&server, &dir, "n1", &peer);
        assert_eq!(all_keys(&e), (rev, kvs.clone()), "{server} on our restore");
        assert_eq!(leases(&e), vec![lease.clone()], "{server}");
        let ttl = e.etcdctl_ok(&["lease", "timetolive", &lease, "--keys"]);
        assert!(
            ttl.contains("leased-a") && ttl.contains("leased-b"),
            "{ttl}"
        );
        let members = member_list(&e);
        assert_eq!(members.as_array().unwrap().len(), 1, "{members}");
        assert_eq!(members[0]["peerURLs"][0], peer.as_str());
        assert_eq!(members[0]["name"], "n1");
        // It keeps serving writes on top of the restored history.
        e.etcdctl_ok(&["put", "after", "restore"]);
        assert_eq!(all_keys(&e).0, rev + 1);
    }

    // The real etcdctl restores our snapshot; the real etcd serves it.
    let dir = tmp.path().join("real-restored");
    let peer = peer_url();
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--data-dir",
            dir.to_str().unwrap(),
        ])
        .args([
            "--name",
            "r1",
            "--initial-cluster",
            &format!("r1={peer}"),
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copy = tmp.path().join("real-restored-copy");
    assert!(
        std::process::Command::new("cp")
            .arg("-a")
            .arg(&dir)
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    let e = serve("etcd", &dir, "r1", &peer);
    assert_eq!(all_keys(&e), (rev, kvs.clone()));
    assert_eq!(leases(&e), vec![lease.clone()]);
    drop(e);
    // Our server on the real etcdctl's restore: etcd 3.4's restore leaves the old cluster's
    // member in the db; the membership comes from the .snap's v2 store, as etcd reads it.
    let e = serve(&bin("etcd"), &copy, "r1", &peer);
    assert_eq!(all_keys(&e), (rev, kvs));
    assert_eq!(leases(&e), vec![lease]);
    let members = member_list(&e);
    assert_eq!(members.as_array().unwrap().len(), 1, "{members}");
    assert_eq!(members[0]["peerURLs"][0], peer.as_str());
}

/// A snapshot saved from a real etcd 3.4 restores with our etcdutl and serves every key,
/// revision, lease and the new member under our server.
#[test]
fn real_etcd_snapshot_restores_under_ours() {
    let tmp = tempfile::tempdir().unwrap();
    let mut src = RealEtcd::start(&tmp.path().join("src"), "src");
    let lease = write_history(&src);
    src.etcdctl_ok(&["compaction", "5"]);
    let (rev, kvs) = all_keys(&src);
    let file = tmp.path().join("real.db");
    src.etcdctl_ok(&["snapshot", "save", file.to_str().unwrap()]);
    src.stop();

    let dir = tmp.path().join("restored");
    let peer = peer_url();
    restore_ours(&file, &dir, "n1", &peer);
    let e = serve(&bin("etcd"), &dir, "n1", &peer);
    assert_eq!(all_keys(&e), (rev, kvs));
    assert_eq!(leases(&e), vec![lease]);
    let members = member_list(&e);
    assert_eq!(members.as_array().unwrap().len(), 1, "{members}");
    assert_eq!(members[0]["peerURLs"][0], peer.as_str());
    // The compaction travelled with the snapshot.
    let old = e.etcdctl(&["get", "k00", "--rev", "3"]);
    assert!(String::from_utf8_lossy(&old.stderr).contains("required revision has been compacted"));
}

/// What one data dir of a 3-member restore holds, read back with our libraries.
struct RestoredDir {
    node_id: u64,
    cluster_id: u64,
    conf_change_ids: Vec<u64>,
    snap_voters: Vec<u64>,
    snap_index: u64,
    backend_members: Vec<String>,
    consistent_index: u64,
}

fn read_restored(dir: &Path) -> RestoredDir {
    let wal_dir = dir.join("member/wal");
    let mut w = common::wal::Wal::open_for_read(&wal_dir, &Default::default()).unwrap();
    let all = w.read_all().unwrap();
    let meta = proto::etcdserverpb::Metadata::decode(all.metadata.as_slice()).unwrap();
    let mut conf_change_ids: Vec<u64> = all
        .entries
        .iter()
        .map(|e| {
            assert_eq!(e.r#type, proto::raftpb::EntryType::EntryConfChange as i32);
            proto::raftpb::ConfChange::decode(e.data()).unwrap().node_id
        })
        .collect();
    conf_change_ids.sort();
    assert_eq!(all.state.commit, 3);
    let snap = common::snap::Snapshotter::new(dir.join("member/snap"))
        .load()
        .unwrap();
    let md = snap.metadata.unwrap();
    let mut snap_voters = md.conf_state.unwrap().voters;
    snap_voters.sort();
    let db = Db::open_read_only(dir.join("member/snap/db")).unwrap();
    let tx = db.begin_read();
    let mut backend_members: Vec<String> = Vec::new();
    tx.for_each(buckets::MEMBERS, &mut |k, _| {
        backend_members.push(String::from_utf8(k.to_vec()).unwrap());
        Ok(())
    })
    .unwrap();
    backend_members.sort();
    let ci = tx.get(buckets::META, b"consistent_index").unwrap().unwrap();
    RestoredDir {
        node_id: meta.node_id,
        cluster_id: meta.cluster_id,
        conf_change_ids,
        snap_voters,
        snap_index: md.index,
        backend_members,
        consistent_index: u64::from_be_bytes(ci.try_into().unwrap()),
    }
}

/// Three data dirs restored from one snapshot with the same --initial-cluster describe the
/// same 3-member cluster (the IDs the real etcdctl's restore derives), each as its own member.
#[test]
fn three_member_restore_matches_the_real_etcdctl_and_starts_a_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let mut src = RealEtcd::start_bin(&bin("etcd"), &tmp.path().join("src"), "src", &[]);
    write_history(&src);
    let file = tmp.path().join("s.db");
    src.etcdctl_ok(&["snapshot", "save", file.to_str().unwrap()]);
    src.stop();
    let peers: Vec<String> = (0..3).map(|_| peer_url()).collect();
    let cluster = format!("m0={},m1={},m2={}", peers[0], peers[1], peers[2]);
    let mut ours = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let name = format!("m{i}");
        for (tool, tag) in [(env!("CARGO_BIN_EXE_etcdutl"), "ours"), ("etcdctl", "real")] {
            let dir = tmp.path().join(format!("{tag}-{name}"));
            let out = std::process::Command::new(tool)
                .env("ETCDCTL_API", "3")
                .args([
                    "snapshot",
                    "restore",
                    file.to_str().unwrap(),
                    "--data-dir",
                    dir.to_str().unwrap(),
                ])
                .args([
                    "--name",
                    &name,
                    "--initial-cluster",
                    &cluster,
                    "--initial-cluster-token",
                    "tok3",
                ])
                .args(["--initial-advertise-peer-urls", p])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{tag}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let o = read_restored(&tmp.path().join(format!("ours-{name}")));
        let r = read_restored(&tmp.path().join(format!("real-{name}")));
        assert_eq!(o.node_id, r.node_id, "member id of {name}");
        assert_eq!(o.cluster_id, r.cluster_id);
        assert_eq!(o.conf_change_ids, r.conf_change_ids);
        assert_eq!(o.snap_voters, r.snap_voters);
        assert_eq!((o.snap_index, o.consistent_index), (3, 3));
        assert_eq!(r.snap_index, 3);
        let want: Vec<String> = o
            .conf_change_ids
            .iter()
            .map(|id| format!("{id:x}"))
            .collect();
        let mut want = want;
        want.sort();
        assert_eq!(o.backend_members, want);
        ours.push(o);
    }
    let ids: Vec<u64> = ours.iter().map(|o| o.node_id).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    assert!(ours.iter().all(|o| o.cluster_id == ours[0].cluster_id));
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ours[0].conf_change_ids, sorted);

    // The three dirs our restore wrote start as a cluster of our servers (started together:
    // none is healthy before a quorum is up) serving the snapshot's keys on every member.
    let starting: Vec<_> = (0..3)
        .map(|i| {
            let dir = tmp.path().join(format!("ours-m{i}"));
            let peer = peers[i].clone();
            let etcd = bin("etcd");
            std::thread::spawn(move || serve(&etcd, &dir, &format!("m{i}"), &peer))
        })
        .collect();
    let members: Vec<RealEtcd> = starting
        .into_iter()
        .map(|h| h.join().expect("member started"))
        .collect();
    let (rev, keys) = all_keys(&members[0]);
    assert!(keys.as_array().is_some_and(|a| !a.is_empty()), "{keys}");
    for m in &members[1..] {
        assert_eq!(all_keys(m), (rev, keys.clone()));
    }
    assert_eq!(member_list(&members[2]).as_array().map(Vec::len), Some(3));
    members[1].etcdctl_ok(&["put", "after-restore", "x"]);
    assert_eq!(
        members[2]
            .etcdctl_ok(&["get", "after-restore", "--print-value-only"])
            .trim(),
        "x"
    );
}

/// Bad input: each a clear error with a non-zero exit, and nothing created or overwritten.
#[test]
fn restore_and_status_refuse_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let mut src = RealEtcd::start_bin(&bin("etcd"), &tmp.path().join("src"), "src", &[]);
    src.etcdctl_ok(&["put", "a", "1"]);
    let file = tmp.path().join("s.db");
    src.etcdctl_ok(&["snapshot", "save", file.to_str().unwrap()]);
    src.stop();
    let f = file.to_str().unwrap();
    let dir = tmp.path().join("d");
    let d = dir.to_str().unwrap();
    let err = |args: &[&str]| {
        let o = etcdutl(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_string()
    };

    // A target that exists is left alone.
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), "mine").unwrap();
    assert_eq!(
        err(&["snapshot", "restore", f, "--data-dir", d]),
        format!("Error: data-dir {d:?} exists")
    );
    assert_eq!(std::fs::read_to_string(dir.join("keep")).unwrap(), "mine");
    std::fs::remove_dir_all(&dir).unwrap();

    // A flipped byte: the sha256 trailer does not match; nothing is created.
    let bad = tmp.path().join("bad.db");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[5000] ^= 0xff;
    std::fs::write(&bad, &bytes).unwrap();
    let e = err(&[
        "snapshot",
        "restore",
        bad.to_str().unwrap(),
        "--data-dir",
        d,
    ]);
    assert!(e.starts_with("Error: expected sha256 ["), "{e}");
    let e = err(&["snapshot", "status", bad.to_str().unwrap()]);
    assert!(e.starts_with("Error: expected sha256 ["), "{e}");
    assert!(!dir.exists());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !leftovers
            .iter()
            .any(|n| n.to_string_lossy().contains("restoring")),
        "{leftovers:?}"
    );

    // A db copied out of a data dir has no trailer: refused unless --skip-hash-check.
    let plain = tmp.path().join("plain.db");
    std::fs::write(&plain, &std::fs::read(&file).unwrap()[..bytes.len() - 32]).unwrap();
    let p = plain.to_str().unwrap();
    assert_eq!(
        err(&["snapshot", "restore", p, "--data-dir", d]),
        "Error: snapshot missing hash but --skip-hash-check=false"
    );
    assert!(!dir.exists());
    etcdutl_ok(&[
        "snapshot",
        "restore",
        p,
        "--data-dir",
        d,
        "--skip-hash-check",
    ]);
    assert!(dir.join("member/snap/db").exists());

    // etcdctl's deprecated restore is the same code: the same files for the same flags.
    let via_ctl = tmp.path().join("via-etcdctl");
    let out = std::process::Command::new(bin("etcdctl"))
        .args([
            "snapshot",
            "restore",
            f,
            "--data-dir",
            via_ctl.to_str().unwrap(),
            "--name",
            "x",
        ])
        .args([
            "--initial-cluster",
            "x=http://127.0.0.1:1",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // etcdctl 3.4's log lines only, no deprecation note.
    let logged = String::from_utf8_lossy(&out.stderr);
    assert!(
        logged.lines().all(|l| l.starts_with("{\"level\":\"info\"")),
        "{logged}"
    );
    let via_utl = tmp.path().join("via-etcdutl");
    etcdutl_ok(&[
        "snapshot",
        "restore",
        f,
        "--data-dir",
        via_utl.to_str().unwrap(),
        "--name",
        "x",
        "--initial-cluster",
        "x=http://127.0.0.1:1",
        "--initial-advertise-peer-urls",
        "http://127.0.0.1:1",
    ]);
    for file in [
        "member/wal/0000000000000000-0000000000000000.wal",
        "member/snap/0000000000000001-0000000000000001.snap",
    ] {
        assert!(
            std::fs::read(via_ctl.join(file)).unwrap()
                == std::fs::read(via_utl.join(file)).unwrap(),
            "{file}"
        );
    }

    // Not a snapshot at all; a missing file; a name not in the cluster.
    let junk = tmp.path().join("junk.db");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    let e = err(&["snapshot", "status", junk.to_str().unwrap()]);
    assert!(e.contains("is not a valid snapshot"), "{e}");
    let e = err(&[
        "snapshot",
        "restore",
        junk.to_str().unwrap(),
        "--data-dir",
        &format!("{d}2"),
        "--skip-hash-check",
    ]);
    assert!(e.contains("not a valid bbolt file"), "{e}");
    assert!(!tmp.path().join("d2").exists());
    assert_eq!(
        err(&["snapshot", "status", "/nonexistent/x.db"]),
        "Error: stat /nonexistent/x.db: no such file or directory"
    );
    let e = err(&[
        "snapshot",
        "restore",
        f,
        "--data-dir",
        &format!("{d}3"),
        "--name",
        "nope",
    ]);
    assert_eq!(
        e,
        "Error: couldn't find local name \"nope\" in the initial cluster configuration"
    );
}
