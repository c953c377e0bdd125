// The data-dir commands on real data dirs: check finds each injected fault (a flipped byte in
// the WAL's middle, in a db page, a truncated db, a missing snapshot, a torn WAL tail), repair
// fixes the torn tail only; hashkv equals the running server's HashKV (ours and etcd 3.4's);
// defrag, backup and inspect on a stopped member; every writer refuses a running one.

#[path = "../../common/tests/support/mod.rs"]
mod support;
mod util;

use std::path::{Path, PathBuf};

use support::RealEtcd;
use util::*;

fn copy_dir(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = etcdutl(args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn check(dir: &Path) -> (i32, String, String) {
    run(&["check", "--data-dir", dir.to_str().unwrap()])
}

fn repair(dir: &Path) -> (i32, String, String) {
    run(&["repair", "--data-dir", dir.to_str().unwrap()])
}

fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).unwrap();
}

/// Record offsets of the WAL in `dir` (file, offset), in order.
fn records(dir: &Path) -> Vec<(PathBuf, u64)> {
    common::wal::Records::open(&dir.join("member/wal"))
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.file, r.offset)
        })
        .collect()
}

/// A stopped member of ours with a .snap and a history, shared by the fault cases.
fn stopped_member(root: &Path) -> (PathBuf, (i64, serde_json::Value)) {
    let dir = root.join("clean");
    let mut e = RealEtcd::start_bin(&bin("etcd"), &dir, "n1", &["--snapshot-count", "20"]);
    write_history(&e);
    let keys = all_keys(&e);
    // A running member's data dir is refused by every command that would write to it, and by
    // the readers that need a consistent view.
    for args in [
        vec!["repair", "--data-dir"],
        vec!["defrag", "--data-dir"],
        vec!["check", "--data-dir"],
        vec!["hashkv", "--data-dir"],
    ] {
        let mut a = args.clone();
        a.push(dir.to_str().unwrap());
        let (code, _, err) = run(&a);
        assert_ne!(code, 0, "{a:?}");
        assert!(err.contains("is in use by a running etcd"), "{a:?}: {err}");
    }
    e.stop();
    (dir, keys)
}

#[test]
fn check_finds_each_fault_and_repair_fixes_only_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let (clean, keys) = stopped_member(tmp.path());
    let (code, out, err) = check(&clean);
    assert_eq!(code, 0, "{out}{err}");
    for part in [
        "wal: ok",
        "snap: ok: 1 .snap files",
        "db: ok",
        "consistent-index: ok",
    ] {
        assert!(out.contains(part), "{part}: {out}");
    }
    let (code, out, _) = repair(&clean);
    assert_eq!((code, out.trim()), (0, "nothing to repair"));

    // A flipped byte in the middle of the WAL: a CRC fault, and repair refuses it.
    let d = tmp.path().join("wal-middle");
    copy_dir(&clean, &d);
    let recs = records(&d);
    let (file, off) = recs[recs.len() / 2].clone();
    let file = d.join("member/wal").join(file.file_name().unwrap());
    flip(&file, off + 12);
    let before = std::fs::read(&file).unwrap();
    let (code, out, err) = check(&d);
    assert_ne!(code, 0);
    assert!(
        out.contains("wal: FAULT") && out.contains("not repairable"),
        "{out}"
    );
    assert!(err.contains("check found 1 fault(s)"), "{err}");
    let (code, _, err) = repair(&d);
    assert_ne!(code, 0);
    assert!(err.contains("repair fixes only a torn WAL tail"), "{err}");
    assert!(
        std::fs::read(&file).unwrap() == before,
        "repair changed a WAL it refused"
    );

    // A flipped byte in a db page: the page-type flags of the root page the newest meta
    // points at (a page every read goes through; a flip in a free page would change nothing).
    let d = tmp.path().join("db-page");
    copy_dir(&clean, &d);
    let db = d.join("member/snap/db");
    let bytes = std::fs::read(&db).unwrap();
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    // Meta after the 16-byte page header: magic, version, page size, flags (4 bytes each),
    // root pgid, sequence, freelist, high-water pgid, txid (8 bytes each).
    let meta = if u64_at(4096 + 64) > u64_at(64) {
        4096
    } else {
        0
    };
    let root = u64_at(meta + 32) as usize;
    assert!(root >= 2, "root page {root}");
    flip(&db, (root * 4096 + 8) as u64);
    let (code, out, _) = check(&d);
    assert_ne!(code, 0);
    assert!(out.contains("db: FAULT"), "{out}");
    assert_ne!(repair(&d).0, 0);

    // A truncated db.
    let d = tmp.path().join("db-truncated");
    copy_dir(&clean, &d);
    let db = d.join("member/snap/db");
    let len = std::fs::metadata(&db).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (code, out, _) = check(&d);
    assert_ne!(code, 0);
    assert!(out.contains("db: FAULT"), "{out}");
    assert_ne!(repair(&d).0, 0);

    // A missing snapshot the WAL records.
    let d = tmp.path().join("snap-missing");
    copy_dir(&clean, &d);
    for e in std::fs::read_dir(d.join("member/snap")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "snap") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let (code, out, _) = check(&d);
    assert_ne!(code, 0);
    assert!(
        out.contains("snap: FAULT") && out.contains("is missing"),
        "{out}"
    );
    assert_ne!(repair(&d).0, 0);

    // A torn tail: an entry that was being written when the machine died, cut in half. Repair
    // truncates it; check then passes and the member serves every acknowledged key.
    let d = tmp.path().join("torn");
    copy_dir(&clean, &d);
    {
        let wal_dir = d.join("member/wal");
        let markers = common::wal::valid_snapshot_entries(&wal_dir).unwrap();
        let mut w = common::wal::Wal::open(&wal_dir, markers.last().unwrap()).unwrap();
        let all = w.read_all().unwrap();
        let last = all.entries.last().unwrap();
        let e = proto::raftpb::Entry {
            term: last.term,
            index: last.index + 1,
            r#type: 0,
            data: Some(vec![b'x'; 300]),
        };
        w.save(&all.state, &[e]).unwrap();
    }
    // The save wrote the entry and then a hard state record: cut inside the entry (the
    // state after it is lost with it, as in a crash mid-write).
    let recs = records(&d);
    let (file, off) = recs[recs.len() - 2].clone();
    let file = d.join("member/wal").join(file.file_name().unwrap());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(off + 150)
        .unwrap();
    let (code, out, _) = check(&d);
    assert_ne!(code, 0);
    assert!(out.contains("wal: FAULT: wal: torn write"), "{out}");
    let (code, out, err) = repair(&d);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("truncated the torn tail"), "{out}");
    let (code, out, _) = check(&d);
    assert_eq!(code, 0, "{out}");
    let e = serve(&bin("etcd"), &d, "n1", &peer_url());
    assert_eq!(all_keys(&e), keys);
}

/// etcdutl hashkv of a stopped member equals what the member's HashKV reported while running,
/// for our server and for the real etcd 3.4, at the newest revision and at an older one.
#[test]
fn hashkv_equals_the_running_servers_hashkv() {
    let tmp = tempfile::tempdir().unwrap();
    for (tag, server) in [("ours", bin("etcd")), ("real", "etcd".to_string())] {
        let dir = tmp.path().join(tag);
        let mut e = RealEtcd::start_bin(&server, &dir, "n1", &[]);
        write_history(&e);
        e.etcdctl_ok(&["compaction", "10"]);
        e.etcdctl_ok(&["put", "after-compaction", "1"]);
        let online = |rev: &str| {
            let out = e.etcdctl_ok(&["endpoint", "hashkv", "--rev", rev, "-w", "json"]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            (
                v[0]["HashKV"]["hash"].as_u64().unwrap(),
                v[0]["HashKV"]["compact_revision"].as_i64().unwrap(),
            )
        };
        let now = online("0");
        let old = online("20");
        e.stop();
        let offline = |rev: &str| {
            let out = etcdutl_ok(&[
                "hashkv",
                "--data-dir",
                dir.to_str().unwrap(),
                "--rev",
                rev,
                "-w",
                "json",
            ]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            (
                v["hash"].as_u64().unwrap(),
                v["compactRevision"].as_i64().unwrap(),
            )
        };
        // etcd 3.4 hashes, below the compaction, only the revisions still current at the
        // hashed revision (Keep(rev)); 3.5 (and we) hash what the compaction kept
        // (Keep(compactRev)). The two agree at revision 20 (no key of revision ≤ 10 was
        // overwritten by then) and differ at the newest (k01 was overwritten at 32).
        if tag == "ours" {
            assert_eq!(offline("0"), now, "{tag}");
        }
        assert_eq!(offline("20"), old, "{tag}");
        let (code, _, err) = run(&["hashkv", "--data-dir", dir.to_str().unwrap(), "--rev", "5"]);
        assert_ne!(code, 0);
        assert!(
            err.contains("required revision has been compacted"),
            "{err}"
        );
    }
}

/// defrag, backup and inspect on a stopped member of ours; the results serve every key.
#[test]
fn defrag_backup_and_inspect_a_stopped_member() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let mut e = RealEtcd::start_bin(&bin("etcd"), &dir, "n1", &[]);
    write_history(&e);
    e.etcdctl_ok(&["del", "k", "--prefix"]);
    let keys = all_keys(&e);
    e.stop();
    let d = dir.to_str().unwrap();

    // inspect wal: the bootstrap conf change, the puts by key, the lease grant; filters work.
    let v: serde_json::Value = serde_json::from_str(&etcdutl_ok(&[
        "inspect",
        "wal",
        "--data-dir",
        d,
        "-w",
        "json",
    ]))
    .unwrap();
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries[0]["type"], "ConfigChange");
    assert_eq!(entries[0]["data"]["method"], "ConfChangeAddNode");
    assert!(
        entries
            .iter()
            .any(|x| x["type"] == "IRRPut" && x["data"]["put"]["key"] == "k07")
    );
    assert!(
        entries
            .iter()
            .any(|x| x["type"] == "IRRLeaseGrant" && x["data"]["lease_grant"]["TTL"] == 3600)
    );
    let puts: serde_json::Value = serde_json::from_str(&etcdutl_ok(&[
        "inspect",
        "wal",
        "--data-dir",
        d,
        "--entry-type",
        "IRRPut",
        "--start-index",
        "10",
        "-w",
        "json",
    ]))
    .unwrap();
    let puts = puts["entries"].as_array().unwrap();
    assert!(!puts.is_empty());
    assert!(
        puts.iter()
            .all(|x| x["type"] == "IRRPut" && x["index"].as_u64().unwrap() >= 10)
    );
    let bad = etcdutl(&["inspect", "wal", "--data-dir", d, "--entry-type", "Bogus"]);
    assert!(!bad.status.success());

    // inspect db: one key-bucket entry per revision (puts, deletes and tombstones).
    let v: serde_json::Value = serde_json::from_str(&etcdutl_ok(&[
        "inspect",
        "db",
        "--data-dir",
        d,
        "-w",
        "json",
    ]))
    .unwrap();
    let key = v["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "key")
        .unwrap();
    assert!(key["keys"].as_u64().unwrap() >= keys.0 as u64 - 1, "{key}");

    // backup --with-v3: a copy that starts and serves everything.
    let bk = tmp.path().join("backup");
    etcdutl_ok(&[
        "backup",
        "--data-dir",
        d,
        "--backup-dir",
        bk.to_str().unwrap(),
        "--with-v3",
    ]);
    {
        let b = serve(&bin("etcd"), &bk, "n1", &peer_url());
        assert_eq!(all_keys(&b), keys);
    }
    let again = etcdutl(&[
        "backup",
        "--data-dir",
        d,
        "--backup-dir",
        bk.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));

    // defrag: sizes reported, the member serves the same afterwards.
    let out = etcdutl_ok(&["defrag", "--data-dir", d]);
    assert!(
        out.starts_with(&format!("Finished defragmenting etcd data[{d}]")),
        "{out}"
    );
    assert!(out.contains("before") && out.contains("after"), "{out}");
    let (code, _, _) = check(&dir);
    assert_eq!(code, 0);
    e.restart(&bin("etcd"), &[]);
    assert_eq!(all_keys(&e), keys);

    // Not a data dir.
    let (code, _, err) = run(&["check", "--data-dir", tmp.path().to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("is not an etcd data dir"), "{err}");
}
