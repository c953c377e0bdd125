// The KV applier's etcd semantics on a real store: range options, put options, txn compares
// and branches, and the duplicate-key rules checked before proposing.

use std::sync::Arc;

use common::backend::{Batch, BatchConfig, Db};
use etcd::api::errors;
use etcd::apply::kv::{self, LeaseLookup, NoLeases};
use etcd::mvcc::KvStore;
use proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
    compare::{CompareResult, CompareTarget, TargetUnion},
    range_request::{SortOrder, SortTarget},
    request_op::Request,
    response_op::Response,
};

struct Leases(Vec<i64>);
impl LeaseLookup for Leases {
    fn lease_exists(&self, id: i64) -> bool {
        self.0.contains(&id)
    }
}

fn store(dir: &std::path::Path) -> Arc<KvStore> {
    let db = Db::open(dir.join("db")).unwrap();
    KvStore::open(Arc::new(Batch::new(db, BatchConfig::default()))).unwrap()
}

fn put(s: &KvStore, k: &str, v: &str) {
    let mut w = s.write();
    kv::put(
        &mut w,
        &PutRequest {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        },
        &NoLeases,
    )
    .unwrap();
    w.end(0, 0).unwrap();
}

fn keys(r: &proto::etcdserverpb::RangeResponse) -> Vec<String> {
    r.kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

fn put_op(k: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: k.into(),
            value: b"v".to_vec(),
            ..Default::default()
        })),
    }
}

fn del_op(k: &str, end: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
            key: k.into(),
            range_end: end.into(),
            ..Default::default()
        })),
    }
}

#[test]
fn range_options() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    put(&s, "a", "3"); // rev 2
    put(&s, "b", "1"); // rev 3
    put(&s, "c", "2"); // rev 4
    put(&s, "a", "4"); // rev 5

    let all = RangeRequest {
        key: b"\0".to_vec(),
        range_end: b"\0".to_vec(),
        ..Default::default()
    };
    let r = kv::range(
        &s,
        &RangeRequest {
            limit: 2,
            ..all.clone()
        },
    )
    .unwrap();
    assert_eq!(
        (keys(&r), r.more, r.count),
        (vec!["a".into(), "b".into()], true, 3)
    );
    let r = kv::range(
        &s,
        &RangeRequest {
            limit: 3,
            ..all.clone()
        },
    )
    .unwrap();
    assert!(!r.more);

    let by_value = kv::range(
        &s,
        &RangeRequest {
            sort_target: SortTarget::Value as i32,
            ..all.clone()
        },
    )
    .unwrap();
    assert_eq!(keys(&by_value), vec!["b", "c", "a"]);
    let by_mod_desc = kv::range(
        &s,
        &RangeRequest {
            sort_target: SortTarget::Mod as i32,
            sort_order: SortOrder::Descend as i32,
            limit: 2,
            ..all.clone()
        },
    )
    .unwrap();
    assert_eq!(
        (keys(&by_mod_desc), by_mod_desc.more),
        (vec!["a".into(), "c".into()], true)
    );

    let filtered = kv::range(
        &s,
        &RangeRequest {
            min_mod_revision: 4,
            ..all.clone()
        },
    )
    .unwrap();
    assert_eq!(keys(&filtered), vec!["a", "c"]);
    let created = kv::range(
        &s,
        &RangeRequest {
            max_create_revision: 3,
            ..all.clone()
        },
    )
    .unwrap();
    assert_eq!(keys(&created), vec!["a", "b"]);

    let ko = kv::range(
        &s,
        &RangeRequest {
            keys_only: true,
            ..all.clone()
        },
    )
    .unwrap();
    assert!(ko.kvs.iter().all(|kv| kv.value.is_empty()));
    let co = kv::range(
        &s,
        &RangeRequest {
            count_only: true,
            ..all.clone()
        },
    )
    .unwrap();
    assert_eq!((co.kvs.len(), co.count), (0, 3));

    let old = kv::range(
        &s,
        &RangeRequest {
            revision: 2,
            ..all.clone()
        },
    )
    .unwrap();
    // A read of the past reports the current revision in its header, as etcd does.
    assert_eq!(
        (keys(&old), old.header.unwrap().revision),
        (vec!["a".into()], 5)
    );
    assert_eq!(
        kv::range(
            &s,
            &RangeRequest {
                revision: 99,
                ..all
            }
        )
        .unwrap_err(),
        errors::FUTURE_REV
    );
    assert_eq!(
        kv::check_range(&RangeRequest::default()).unwrap_err(),
        errors::EMPTY_KEY
    );
}

#[test]
fn put_options_and_leases() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let leases = Leases(vec![7]);
    let mut w = s.write();
    let e = kv::put(
        &mut w,
        &PutRequest {
            key: b"k".to_vec(),
            ignore_value: true,
            ..Default::default()
        },
        &leases,
    );
    assert_eq!(e.unwrap_err(), errors::KEY_NOT_FOUND);
    let e = kv::put(
        &mut w,
        &PutRequest {
            key: b"k".to_vec(),
            lease: 8,
            ..Default::default()
        },
        &leases,
    );
    assert_eq!(e.unwrap_err(), errors::LEASE_NOT_FOUND);
    kv::put(
        &mut w,
        &PutRequest {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            lease: 7,
            ..Default::default()
        },
        &leases,
    )
    .unwrap();
    w.end(0, 0).unwrap();

    let mut w = s.write();
    let r = kv::put(
        &mut w,
        &PutRequest {
            key: b"k".to_vec(),
            ignore_value: true,
            prev_kv: true,
            ..Default::default()
        },
        &leases,
    )
    .unwrap();
    assert_eq!(r.prev_kv.unwrap().value, b"v");
    w.end(0, 0).unwrap();
    let now = kv::range(
        &s,
        &RangeRequest {
            key: b"k".to_vec(),
            ..Default::default()
        },
    )
    .unwrap();
    // ignore_value keeps the value; without ignore_lease the lease becomes the request's (none).
    assert_eq!(
        (
            now.kvs[0].value.as_slice(),
            now.kvs[0].lease,
            now.kvs[0].version
        ),
        (&b"v"[..], 0, 2)
    );

    assert_eq!(
        kv::check_put(&PutRequest {
            key: b"k".to_vec(),
            value: b"x".to_vec(),
            ignore_value: true,
            ..Default::default()
        })
        .unwrap_err(),
        errors::VALUE_PROVIDED
    );
    assert_eq!(
        kv::check_put(&PutRequest {
            key: b"k".to_vec(),
            lease: 1,
            ignore_lease: true,
            ..Default::default()
        })
        .unwrap_err(),
        errors::LEASE_PROVIDED
    );
}

fn cmp(key: &str, target: CompareTarget, result: CompareResult, v: TargetUnion) -> Compare {
    Compare {
        key: key.into(),
        target: target as i32,
        result: result as i32,
        target_union: Some(v),
        range_end: Vec::new(),
    }
}

#[test]
fn txn_compares_and_branches() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    put(&s, "a", "1");

    let t = TxnRequest {
        compare: vec![
            cmp(
                "a",
                CompareTarget::Value,
                CompareResult::Equal,
                TargetUnion::Value(b"1".to_vec()),
            ),
            cmp(
                "missing",
                CompareTarget::Version,
                CompareResult::Equal,
                TargetUnion::Version(0),
            ),
        ],
        success: vec![
            put_op("b"),
            RequestOp {
                request: Some(Request::RequestRange(RangeRequest {
                    key: b"b".to_vec(),
                    ..Default::default()
                })),
            },
        ],
        failure: vec![put_op("c")],
    };
    kv::check_txn(&t, 128).unwrap();
    let mut w = s.write();
    let mut resp = kv::txn(&mut w, &t, &NoLeases).unwrap();
    let (_, rev) = w.end(0, 0).unwrap();
    kv::stamp_txn_headers(&mut resp, rev);
    assert!(resp.succeeded);
    match &resp.responses[1].response {
        // The range sees the put made earlier in the same txn.
        Some(Response::ResponseRange(r)) => {
            assert_eq!(r.kvs.len(), 1);
            assert_eq!(r.header.as_ref().unwrap().revision, 3);
        }
        other => panic!("{other:?}"),
    }

    // A value compare on a missing key fails.
    let t = TxnRequest {
        compare: vec![cmp(
            "zz",
            CompareTarget::Value,
            CompareResult::NotEqual,
            TargetUnion::Value(b"x".to_vec()),
        )],
        success: vec![put_op("s")],
        failure: vec![put_op("f")],
    };
    let mut w = s.write();
    assert!(!kv::txn(&mut w, &t, &NoLeases).unwrap().succeeded);
    w.end(0, 0).unwrap();
    assert_eq!(
        kv::range(
            &s,
            &RangeRequest {
                key: b"f".to_vec(),
                ..Default::default()
            }
        )
        .unwrap()
        .count,
        1
    );
}

#[test]
fn duplicate_key_rules() {
    let txn = |success: Vec<RequestOp>| TxnRequest {
        compare: vec![],
        success,
        failure: vec![],
    };
    assert_eq!(
        kv::check_txn(&txn(vec![put_op("a"), put_op("a")]), 128).unwrap_err(),
        errors::DUPLICATE_KEY
    );
    assert_eq!(
        kv::check_txn(&txn(vec![put_op("a"), del_op("a", "")]), 128).unwrap_err(),
        errors::DUPLICATE_KEY
    );
    assert_eq!(
        kv::check_txn(&txn(vec![del_op("a", "c"), put_op("b")]), 128).unwrap_err(),
        errors::DUPLICATE_KEY
    );
    // Overlapping deletes are fine, and so is a put outside every deleted range.
    kv::check_txn(
        &txn(vec![del_op("a", "c"), del_op("b", "d"), put_op("d")]),
        128,
    )
    .unwrap();
    // Only one branch of a nested txn runs: the same key in both is fine...
    let nested = RequestOp {
        request: Some(Request::RequestTxn(TxnRequest {
            compare: vec![],
            success: vec![put_op("n")],
            failure: vec![put_op("n")],
        })),
    };
    kv::check_txn(&txn(vec![nested.clone()]), 128).unwrap();
    // ...but not next to an outer put of it.
    assert_eq!(
        kv::check_txn(&txn(vec![nested, put_op("n")]), 128).unwrap_err(),
        errors::DUPLICATE_KEY
    );
    let many: Vec<RequestOp> = (0..3).map(|i| put_op(&format!("k{i}"))).collect();
    assert_eq!(
        kv::check_txn(&txn(many), 2).unwrap_err(),
        errors::TOO_MANY_OPS
    );
}
