// Compatibility proof against the real etcd 3.4: its db opens and reads in our backend, and a
// db we write passes `etcdctl snapshot status` / `snapshot restore` and is served by etcd.
// These tests fail (never skip) when etcd or etcdctl is missing: run scripts/deps.sh.

mod support;

use std::path::Path;
use std::process::Command;

use common::backend::{Db, ReadTxn, buckets};
use prost::Message;
use support::{RealEtcd, free_port};

fn etcdctl_offline(args: &[&str]) -> String {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("`etcdctl` (the real etcd 3.4 client) is missing: run scripts/deps.sh ({e})")
        });
    assert!(
        out.status.success(),
        "etcdctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `etcdctl snapshot status -w json` → (hash, revision, totalKey, totalSize).
fn snapshot_status(file: &Path) -> (u64, i64, u64, u64) {
    let s = etcdctl_offline(&["snapshot", "status", file.to_str().unwrap(), "-w", "json"]);
    let field = |name: &str| -> i64 {
        let at = s
            .find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("no {name} in {s}"));
        let rest = &s[at + name.len() + 3..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(rest.len());
        rest[..end].parse().unwrap()
    };
    (
        field("hash") as u64,
        field("revision"),
        field("totalKey") as u64,
        field("totalSize") as u64,
    )
}

fn rev_key(main: u64, sub: u64) -> Vec<u8> {
    let mut k = main.to_be_bytes().to_vec();
    k.push(b'_');
    k.extend_from_slice(&sub.to_be_bytes());
    k
}

#[test]
fn real_etcd_db_reads_in_every_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("etcd");
    let mut etcd = RealEtcd::start(&data, "n1");
    etcd.etcdctl_ok(&["put", "foo", "bar"]);
    etcd.etcdctl_ok(&["put", "foo", "baz"]);
    etcd.etcdctl_ok(&["put", "gone", "x"]);
    etcd.etcdctl_ok(&["del", "gone"]);
    let lease = etcd.etcdctl_ok(&["lease", "grant", "600"]);
    let lease_hex = lease.split_whitespace().nth(1).unwrap().to_string();
    let lease_id = i64::from_str_radix(&lease_hex, 16).unwrap();
    etcd.etcdctl_ok(&["put", "leased", "v", "--lease", &lease_hex]);
    etcd.etcdctl_ok(&["user", "add", "root:secret"]);
    etcd.etcdctl_ok(&["role", "add", "reader"]);
    let big = "x".repeat(100_000);
    etcd.etcdctl_ok(&["put", "big", &big]);
    for i in 0..300 {
        etcd.etcdctl_ok(&["put", &format!("many/{i:03}"), &format!("value-{i}")]);
    }
    let snap = dir.path().join("snap.db");
    etcd.etcdctl_ok(&["snapshot", "save", snap.to_str().unwrap()]);
    etcd.stop();

    let db = Db::open_read_only(data.join("member/snap/db")).unwrap();
    db.check().unwrap();
    let tx = db.begin_read();
    let names = tx.bucket_names().unwrap();
    for b in buckets::ALL {
        assert!(
            names.iter().any(|n| n == b),
            "bucket {:?} missing from {names:?}",
            String::from_utf8_lossy(b)
        );
    }
    // key: every entry is a revision key with a KeyValue; the history is all there.
    let mut latest = std::collections::BTreeMap::new();
    let mut tombstones = 0;
    tx.for_each(buckets::KEY, &mut |k, v| {
        assert!(
            k.len() == 17 || (k.len() == 18 && k[17] == b't'),
            "revision key {k:?}"
        );
        assert_eq!(k[8], b'_');
        let kv = proto::mvccpb::KeyValue::decode(v).unwrap();
        let main = u64::from_be_bytes(k[..8].try_into().unwrap());
        if k.len() == 18 {
            // A tombstone's value holds only the key.
            tombstones += 1;
            latest.remove(&kv.key);
        } else {
            assert_eq!(kv.mod_revision as u64, main);
            latest.insert(kv.key.clone(), kv);
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(tombstones, 1);
    assert_eq!(latest[&b"foo".to_vec()].value, b"baz");
    assert_eq!(latest[&b"foo".to_vec()].version, 2);
    assert_eq!(latest[&b"leased".to_vec()].lease, lease_id);
    assert_eq!(latest[&b"big".to_vec()].value.len(), 100_000);
    assert_eq!(
        latest.keys().filter(|k| k.starts_with(b"many/")).count(),
        300
    );
    assert!(!latest.contains_key(b"gone".as_slice()));
    // lease, auth, meta, members.
    let l = tx
        .get(buckets::LEASE, &(lease_id as u64).to_be_bytes())
        .unwrap()
        .unwrap();
    let l = proto::leasepb::Lease::decode(l).unwrap();
    assert_eq!((l.id, l.ttl), (lease_id, 600));
    let u = proto::authpb::User::decode(tx.get(buckets::AUTH_USERS, b"root").unwrap().unwrap())
        .unwrap();
    assert_eq!(u.name, b"root");
    assert!(tx.get(buckets::AUTH_ROLES, b"reader").unwrap().is_some());
    let ci = tx.get(buckets::META, b"consistent_index").unwrap().unwrap();
    assert!(u64::from_be_bytes(ci.try_into().unwrap()) > 300);
    let members = tx.range(buckets::MEMBERS, b"", Some(b"\xff"), 0).unwrap();
    assert_eq!(members.len(), 1);
    assert!(String::from_utf8_lossy(members[0].1).contains("peerURLs"));
    drop(tx);

    // The snapshot etcd streamed (with its sha256 trailer) opens too, and our hash is etcd's.
    let (hash, rev, total_keys, _) = snapshot_status(&snap);
    let sdb = Db::open_read_only(&snap).unwrap();
    sdb.check().unwrap();
    assert_eq!(
        sdb.hash(&[]).unwrap() as u64,
        hash,
        "hash of etcd's snapshot differs from etcd's"
    );
    let st = sdb.stats().unwrap();
    assert_eq!(st.buckets.iter().map(|b| b.keys).sum::<u64>(), total_keys);
    let last_rev = sdb
        .begin_read()
        .cursor(buckets::KEY)
        .unwrap()
        .last()
        .unwrap()
        .unwrap()
        .0[..8]
        .to_vec();
    assert_eq!(u64::from_be_bytes(last_rev.try_into().unwrap()) as i64, rev);

    // Writing into etcd's file (read-write open rebuilds its unsynced freelist) keeps it valid,
    // and etcd still starts on it and serves its keys.
    drop(db);
    let db = Db::open(data.join("member/snap/db")).unwrap();
    let mut w = db.begin_write().unwrap();
    w.put(b"alarm", b"scratch", b"1").unwrap();
    w.delete(b"alarm", b"scratch").unwrap();
    w.commit().unwrap();
    db.check().unwrap();
    drop(db);
    let etcd = RealEtcd::start(&data, "n1");
    assert!(
        etcd.etcdctl_ok(&["get", "foo", "--print-value-only"])
            .contains("baz")
    );
    assert_eq!(
        etcd.etcdctl_ok(&["get", "many/", "--prefix", "--keys-only"])
            .split_whitespace()
            .count(),
        300
    );
}

#[test]
fn our_db_restores_and_serves_in_real_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ours.db");
    let db = Db::open(&path).unwrap();
    let mut tx = db.begin_write().unwrap();
    for b in buckets::ALL {
        tx.create_bucket(b).unwrap();
    }
    let n = 2000u64;
    for i in 1..=n {
        let rev = i + 1;
        let kv = proto::mvccpb::KeyValue {
            key: format!("k{i:05}").into_bytes(),
            create_revision: rev as i64,
            mod_revision: rev as i64,
            version: 1,
            value: format!("value-{i}-{}", "v".repeat((i % 300) as usize)).into_bytes(),
            lease: 0,
        };
        // As the server writes revisions: into full pages (put_seq), which etcd must read.
        tx.put_seq(buckets::KEY, &rev_key(rev, 0), &kv.encode_to_vec())
            .unwrap();
    }
    tx.put(buckets::META, b"consistent_index", &0u64.to_be_bytes())
        .unwrap();
    tx.commit().unwrap();
    // Delete a slice and commit again so the file has freed pages, like a live db.
    let mut tx = db.begin_write().unwrap();
    for rev in 500..700u64 {
        tx.delete(buckets::KEY, &rev_key(rev, 0)).unwrap();
    }
    tx.commit().unwrap();
    let kept = n - 200;
    db.check().unwrap();
    let snap = dir.path().join("snap.db");
    db.snapshot_to_file(&snap, true).unwrap();

    let (hash, rev, total_keys, total_size) = snapshot_status(&snap);
    assert_eq!(
        hash,
        db.hash(&[]).unwrap() as u64,
        "etcd computes a different hash of our db"
    );
    assert_eq!(rev, n as i64 + 1);
    assert_eq!(total_keys, kept + 1);
    assert_eq!(total_size, std::fs::metadata(&snap).unwrap().len() - 32);

    let restored = dir.path().join("restored");
    let peer = format!("http://127.0.0.1:{}", free_port());
    etcdctl_offline(&[
        "snapshot",
        "restore",
        snap.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
        "--name",
        "n1",
        "--initial-cluster",
        &format!("n1={peer}"),
        "--initial-advertise-peer-urls",
        &peer,
    ]);
    let mut etcd = RealEtcd::start(&restored, "n1");
    assert_eq!(
        etcd.etcdctl_ok(&["get", "k00001", "--print-value-only"])
            .trim(),
        "value-1-v"
    );
    let keys = etcd.etcdctl_ok(&["get", "k", "--prefix", "--keys-only"]);
    assert_eq!(keys.split_whitespace().count() as u64, kept);
    assert!(etcd.etcdctl_ok(&["get", "k00600"]).trim().is_empty());
    etcd.etcdctl_ok(&["put", "after", "restore"]);
    let out = etcd.etcdctl_ok(&["get", "after", "-w", "json"]);
    assert!(
        out.contains(&format!("\"mod_revision\":{}", n + 2)),
        "{out}"
    );
    etcd.stop();
    // And etcd's rewritten db reads back in ours.
    let back = Db::open_read_only(restored.join("member/snap/db")).unwrap();
    back.check().unwrap();
    assert_eq!(
        back.stats()
            .unwrap()
            .buckets
            .iter()
            .find(|b| b.name == buckets::KEY)
            .unwrap()
            .keys,
        kept + 1
    );
}
