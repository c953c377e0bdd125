// Compatibility proof of the WAL against the real etcd 3.4 (Debian etcd-server): we decode
// every record of a WAL etcd wrote, re-encode each to the same bytes, and etcd itself replays
// an entry that our writer appended to its WAL.

mod support;

use std::path::Path;

use common::wal::{self, RecordType, Records, Wal};
use prost::Message;
use proto::etcdserverpb::{InternalRaftRequest, Metadata, PutRequest, Request, RequestHeader};
use proto::raftpb::{ConfChange, ConfChangeType, Entry, EntryType, HardState};
use proto::walpb;
use support::RealEtcd;

/// Decodes an entry's data the way etcd does: an InternalRaftRequest, or (etcd 3.4's publish
/// and cluster-version requests) a bare v2 Request.
enum Decoded {
    Internal(Box<InternalRaftRequest>),
    V2(Request),
    Conf(ConfChange),
    Empty,
}

fn decode_entry(e: &Entry) -> Decoded {
    let data = e.data();
    if e.r#type == EntryType::EntryConfChange as i32 {
        let cc = ConfChange::decode(data).expect("conf change decodes");
        assert_eq!(
            cc.encode_to_vec(),
            data,
            "conf change re-encodes byte for byte"
        );
        return Decoded::Conf(cc);
    }
    if data.is_empty() {
        return Decoded::Empty;
    }
    if let Ok(r) = InternalRaftRequest::decode(data) {
        assert_eq!(
            r.encode_to_vec(),
            data,
            "internal request re-encodes byte for byte: {r:?}"
        );
        return Decoded::Internal(Box::new(r));
    }
    let r = Request::decode(data).expect("entry data is an InternalRaftRequest or a v2 Request");
    assert_eq!(
        r.encode_to_vec(),
        data,
        "v2 request re-encodes byte for byte"
    );
    Decoded::V2(r)
}

fn write_real_etcd_wal(root: &Path) -> (RealEtcd, u64) {
    let mut etcd = RealEtcd::start(&root.join("etcd.data"), "compat");
    etcd.etcdctl_ok(&["put", "foo", "bar"]);
    let granted = etcd.etcdctl_ok(&["lease", "grant", "300"]);
    // "lease 694d7a8e3f1c2a0b granted with TTL(300s)"
    let lease_hex = granted
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    let lease = u64::from_str_radix(&lease_hex, 16).expect("hex lease id");
    etcd.etcdctl_ok(&["put", "k1", "v1", &format!("--lease={lease_hex}")]);
    etcd.etcdctl_ok(&["del", "foo"]);
    let txn = etcd.etcdctl_stdin(
        &["txn"],
        "mod(\"k1\") > \"0\"\n\nput k2 v2\nput k3 v3\n\n\n",
    );
    assert!(txn.status.success(), "etcdctl txn failed");
    etcd.etcdctl_ok(&["compaction", "2"]);
    etcd.stop();
    (etcd, lease)
}

#[test]
fn real_etcd_wal_decodes_and_reencodes_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let (etcd, lease) = write_real_etcd_wal(tmp.path());
    let wal_dir = etcd.data_dir.join("member/wal");

    let mut counts = [0usize; 6];
    let mut requests = Vec::new();
    let mut conf_changes = Vec::new();
    let mut v2 = Vec::new();
    let mut node_id = 0;
    for r in Records::open(&wal_dir).unwrap() {
        let r = r.unwrap();
        let data = r.record.data.as_deref().unwrap_or(&[]);
        counts[r.record.r#type as usize] += 1;
        match r.record.r#type {
            t if t == RecordType::Metadata as i64 => {
                let m = Metadata::decode(data).unwrap();
                assert_eq!(m.encode_to_vec(), data);
                node_id = m.node_id;
                assert_ne!(m.cluster_id, 0);
            }
            t if t == RecordType::Entry as i64 => {
                let e = Entry::decode(data).unwrap();
                assert_eq!(e.encode_to_vec(), data, "entry re-encodes byte for byte");
                match decode_entry(&e) {
                    Decoded::Internal(r) => requests.push(*r),
                    Decoded::V2(r) => v2.push(r),
                    Decoded::Conf(c) => conf_changes.push(c),
                    Decoded::Empty => {}
                }
            }
            t if t == RecordType::State as i64 => {
                let s = HardState::decode(data).unwrap();
                assert_eq!(s.encode_to_vec(), data);
            }
            t if t == RecordType::Snapshot as i64 => {
                let s = walpb::Snapshot::decode(data).unwrap();
                assert_eq!(s.encode_to_vec(), data);
            }
            t if t == RecordType::Crc as i64 => assert!(data.is_empty()),
            t => panic!("unexpected record type {t}"),
        }
    }
    assert_eq!(counts[RecordType::Crc as usize], 1);
    assert_eq!(counts[RecordType::Metadata as usize], 1);
    assert!(counts[RecordType::Entry as usize] >= 8);

    // The bootstrap conf change adds this member, with the member as JSON in its context.
    assert_eq!(conf_changes.len(), 1);
    assert_eq!(
        conf_changes[0].r#type,
        ConfChangeType::ConfChangeAddNode as i32
    );
    assert_eq!(conf_changes[0].node_id, node_id);
    let ctx = String::from_utf8(conf_changes[0].context().to_vec()).unwrap();
    assert!(
        ctx.contains(&etcd.peer_url) && ctx.contains("\"name\":\"compat\""),
        "{ctx}"
    );
    // etcd 3.4 publishes its attributes and the cluster version as v2 requests.
    assert!(
        v2.iter()
            .any(|r| r.method == "PUT" && r.path.ends_with("/attributes"))
    );
    assert!(v2.iter().any(|r| r.path == "/0/version"));

    let puts: Vec<&PutRequest> = requests.iter().filter_map(|r| r.put.as_ref()).collect();
    assert!(puts.iter().any(|p| p.key == b"foo" && p.value == b"bar"));
    assert!(
        puts.iter()
            .any(|p| p.key == b"k1" && p.lease == lease as i64)
    );
    assert!(requests.iter().any(|r| {
        r.lease_grant
            .as_ref()
            .is_some_and(|g| g.ttl == 300 && g.id == lease as i64)
    }));
    assert!(
        requests
            .iter()
            .any(|r| r.delete_range.as_ref().is_some_and(|d| d.key == b"foo"))
    );
    let txn = requests
        .iter()
        .find_map(|r| r.txn.as_ref())
        .expect("a txn request");
    assert_eq!(txn.compare.len(), 1);
    assert_eq!(txn.success.len(), 2);
    assert!(
        requests
            .iter()
            .any(|r| r.compaction.as_ref().is_some_and(|c| c.revision == 2))
    );
    assert!(
        requests
            .iter()
            .all(|r| r.header.as_ref().is_some_and(|h| h.id != 0))
    );

    // Our reader sees the same log.
    let mut w = Wal::open_for_read(&wal_dir, &walpb::Snapshot::default()).unwrap();
    let all = w.read_all().unwrap();
    assert_eq!(all.entries.len(), counts[RecordType::Entry as usize]);
    assert_eq!(
        Metadata::decode(&all.metadata[..]).unwrap().node_id,
        node_id
    );
}

#[test]
fn real_etcd_replays_an_entry_our_writer_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut etcd, _) = write_real_etcd_wal(tmp.path());
    let wal_dir = etcd.data_dir.join("member/wal");

    let mut w = Wal::open(&wal_dir, &walpb::Snapshot::default()).unwrap();
    let read = w.read_all().unwrap();
    let last = read.entries.last().unwrap().clone();
    let req = InternalRaftRequest {
        header: Some(RequestHeader {
            id: 0x1234_5678,
            ..Default::default()
        }),
        put: Some(PutRequest {
            key: b"written-by".to_vec(),
            value: b"etcd-rs wal".to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let ours = Entry {
        term: read.state.term,
        index: last.index + 1,
        r#type: EntryType::EntryNormal as i32,
        data: Some(req.encode_to_vec()),
    };
    let st = HardState {
        commit: ours.index,
        ..read.state
    };
    w.save(&st, &[ours]).unwrap();
    drop(w);
    assert!(wal::Records::open(&wal_dir).unwrap().all(|r| r.is_ok()));

    let restarted = RealEtcd::start(&etcd.data_dir, "compat");
    etcd.child = None;
    let got = restarted.etcdctl_ok(&["get", "written-by", "--print-value-only"]);
    assert_eq!(got.trim(), "etcd-rs wal");
    let k3 = restarted.etcdctl_ok(&["get", "k3", "--print-value-only"]);
    assert_eq!(k3.trim(), "v3");
}
