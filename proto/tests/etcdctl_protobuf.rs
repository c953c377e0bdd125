// Wire compatibility of our generated types against the real etcd 3.4: the Go etcdctl's
// `-w protobuf` prints the raw response messages, which must decode into our types with the
// right values and re-encode to the same bytes.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use prost::Message;
use proto::etcdserverpb::{
    DeleteRangeResponse, MemberListResponse, PutResponse, RangeResponse, TxnResponse,
    response_op::Response,
};
use support::RealEtcd;

fn pb(etcd: &RealEtcd, args: &[&str]) -> Vec<u8> {
    let mut all = args.to_vec();
    all.extend(["-w", "protobuf"]);
    let out = etcd.etcdctl(&all);
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn decode_same<M: Message + Default>(bytes: &[u8]) -> M {
    let m = M::decode(bytes).expect("decodes");
    assert_eq!(m.encode_to_vec(), bytes, "re-encodes byte for byte");
    m
}

#[test]
fn real_etcdctl_protobuf_output_decodes_into_our_types() {
    let tmp = tempfile::tempdir().unwrap();
    let etcd = RealEtcd::start(&tmp.path().join("d"), "pb");

    let put: PutResponse = decode_same(&pb(&etcd, &["put", "k", "v1"]));
    let h = put.header.expect("header");
    assert_ne!(h.cluster_id, 0);
    assert_ne!(h.member_id, 0);
    assert_eq!(h.revision, 2);
    assert!(h.raft_term >= 2);

    etcd.etcdctl_ok(&["put", "k", "v2"]);
    let get: RangeResponse = decode_same(&pb(&etcd, &["get", "k"]));
    assert_eq!(get.count, 1);
    let kv = &get.kvs[0];
    assert_eq!(
        (kv.key.as_slice(), kv.value.as_slice()),
        (&b"k"[..], &b"v2"[..])
    );
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (2, 3, 2));

    let del: DeleteRangeResponse = decode_same(&pb(&etcd, &["del", "k", "--prev-kv"]));
    assert_eq!(del.deleted, 1);
    assert_eq!(del.prev_kvs[0].value, b"v2");

    let members: MemberListResponse = decode_same(&pb(&etcd, &["member", "list"]));
    assert_eq!(members.members.len(), 1);
    let m = &members.members[0];
    assert_eq!(m.name, "pb");
    assert_eq!(m.peer_ur_ls, vec![etcd.peer_url.clone()]);
    assert_eq!(m.client_ur_ls, vec![etcd.client_url.clone()]);
    assert_eq!(m.id, h.member_id);

    // Nested results: a txn whose success branch reads.
    etcd.etcdctl_ok(&["put", "a", "1"]);
    let out = etcd.etcdctl_stdin(
        &["txn", "-w", "protobuf"],
        "value(\"a\") = \"1\"\n\nget a\nput b 2\n\n\n",
    );
    let txn: TxnResponse = decode_same(&out.stdout);
    assert!(txn.succeeded);
    match &txn.responses[0].response {
        Some(Response::ResponseRange(r)) => assert_eq!(r.kvs[0].value, b"1"),
        other => panic!("expected a range response, got {other:?}"),
    }
    assert!(matches!(
        txn.responses[1].response,
        Some(Response::ResponsePut(_))
    ));
}
