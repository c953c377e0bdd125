// Differential fuzzing of the KV applier: random sequences of Put, DeleteRange, Range and Txn
// requests (compares on every target, branches mixing writes and reads) are validated as the
// API validates them and applied to a real store, and every answer and the whole keyspace
// after each request are checked against a small model of etcd's semantics.
//
// PROPTEST_CASES raises the case count for a long run; a failure is shrunk and its seed kept in
// etcd/tests/fuzz_apply.proptest-regressions (commit it: those cases run first every time).

#[path = "../../common/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::backend::{Batch, BatchConfig, Db};
use etcd::api::validate;
use etcd::apply::kv::{self, NoLeases};
use etcd::mvcc::KvStore;
use proptest::prelude::*;
use proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
    compare::{CompareResult, CompareTarget, TargetUnion},
    request_op::Request,
    response_op::Response,
};

/// What the model keeps of a key: value, create, mod and version.
#[derive(Debug, Clone, PartialEq)]
struct Kv {
    value: Vec<u8>,
    create: i64,
    modr: i64,
    version: i64,
}

#[derive(Default)]
struct Model {
    keys: BTreeMap<Vec<u8>, Kv>,
    rev: i64,
}

/// The keys a (key, range_end) pair covers, as etcd reads it.
fn covers(key: &[u8], end: &[u8], k: &[u8]) -> bool {
    match end {
        [] => k == key,
        [0] => k >= key,
        _ => k >= key && k < end,
    }
}

impl Model {
    fn range(&self, key: &[u8], end: &[u8]) -> Vec<(Vec<u8>, Kv)> {
        self.keys
            .iter()
            .filter(|(k, _)| covers(key, end, k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn compare(&self, c: &Compare) -> bool {
        let kv = self.keys.get(&c.key);
        let ord = match c.target_union.as_ref() {
            Some(TargetUnion::Value(v)) => match kv {
                // A value compare on a missing key is false whatever the operator.
                None => return false,
                Some(kv) => kv.value.as_slice().cmp(v.as_slice()),
            },
            Some(TargetUnion::Version(v)) => kv.map_or(0, |k| k.version).cmp(v),
            Some(TargetUnion::CreateRevision(v)) => kv.map_or(0, |k| k.create).cmp(v),
            Some(TargetUnion::ModRevision(v)) => kv.map_or(0, |k| k.modr).cmp(v),
            _ => unreachable!("generated compares have a target"),
        };
        match CompareResult::try_from(c.result) {
            Ok(CompareResult::Equal) => ord.is_eq(),
            Ok(CompareResult::NotEqual) => ord.is_ne(),
            Ok(CompareResult::Greater) => ord.is_gt(),
            Ok(CompareResult::Less) => ord.is_lt(),
            Err(_) => unreachable!("generated results are valid"),
        }
    }

    /// Applies writes at revision `rev` (the request's one new revision); true if anything
    /// changed.
    fn write(&mut self, op: &Request, rev: i64) -> bool {
        match op {
            Request::RequestPut(p) => {
                let kv = self.keys.entry(p.key.clone()).or_insert(Kv {
                    value: Vec::new(),
                    create: rev,
                    modr: rev,
                    version: 0,
                });
                kv.value = p.value.clone();
                kv.modr = rev;
                kv.version += 1;
                true
            }
            Request::RequestDeleteRange(d) => {
                let before = self.keys.len();
                self.keys.retain(|k, _| !covers(&d.key, &d.range_end, k));
                before != self.keys.len()
            }
            _ => false,
        }
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![
        b"a".to_vec(),
        b"ab".to_vec(),
        b"b".to_vec(),
        b"c".to_vec(),
        b"\x00".to_vec(),
        b"\xff".to_vec(),
        b"".to_vec(),
    ])
}

fn range_end() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => Just(Vec::new()),
        1 => Just(b"\x00".to_vec()),
        2 => key(),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![
        b"".to_vec(),
        b"1".to_vec(),
        b"2".to_vec(),
        b"x\x00".to_vec(),
    ])
}

fn op() -> impl Strategy<Value = Request> {
    prop_oneof![
        (key(), value()).prop_map(|(key, value)| Request::RequestPut(PutRequest {
            key,
            value,
            ..Default::default()
        })),
        (key(), range_end()).prop_map(|(key, range_end)| {
            Request::RequestDeleteRange(DeleteRangeRequest {
                key,
                range_end,
                ..Default::default()
            })
        }),
        (key(), range_end()).prop_map(|(key, range_end)| Request::RequestRange(RangeRequest {
            key,
            range_end,
            ..Default::default()
        })),
    ]
}

fn compare() -> impl Strategy<Value = Compare> {
    let target = prop_oneof![
        value().prop_map(|v| (CompareTarget::Value, TargetUnion::Value(v))),
        (0i64..3).prop_map(|v| (CompareTarget::Version, TargetUnion::Version(v))),
        (0i64..6).prop_map(|v| (CompareTarget::Create, TargetUnion::CreateRevision(v))),
        (0i64..6).prop_map(|v| (CompareTarget::Mod, TargetUnion::ModRevision(v))),
    ];
    let result = prop::sample::select(vec![
        CompareResult::Equal,
        CompareResult::NotEqual,
        CompareResult::Greater,
        CompareResult::Less,
    ]);
    (key(), target, result).prop_map(|(key, (t, u), r)| Compare {
        result: r as i32,
        target: t as i32,
        key,
        range_end: Vec::new(),
        target_union: Some(u),
    })
}

fn request() -> impl Strategy<Value = Request> {
    let ops = || prop::collection::vec(op().prop_map(|r| RequestOp { request: Some(r) }), 0..4);
    prop_oneof![
        3 => op(),
        2 => (prop::collection::vec(compare(), 0..3), ops(), ops()).prop_map(|(compare, success, failure)| {
            Request::RequestTxn(TxnRequest { compare, success, failure })
        }),
    ]
}

fn valid(r: &Request) -> bool {
    match r {
        Request::RequestPut(p) => validate::check_put(p).is_ok(),
        Request::RequestDeleteRange(d) => validate::check_delete(d).is_ok(),
        Request::RequestRange(g) => validate::check_range(g).is_ok(),
        Request::RequestTxn(t) => validate::check_txn(t, 128).is_ok(),
    }
}

/// The store's answer to a range, as (key, kv) pairs in the model's terms.
fn seen(kvs: &[proto::mvccpb::KeyValue]) -> Vec<(Vec<u8>, Kv)> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                Kv {
                    value: kv.value.clone(),
                    create: kv.create_revision,
                    modr: kv.mod_revision,
                    version: kv.version,
                },
            )
        })
        .collect()
}

fn check(reqs: Vec<Request>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path().join("db")).expect("open db");
    let store = KvStore::open(Arc::new(Batch::new(db, BatchConfig::default()))).expect("store");
    let mut m = Model {
        rev: store.current_rev(),
        ..Default::default()
    };
    for r in reqs.iter().filter(|r| valid(r)) {
        let new_rev = m.rev + 1;
        let mut w = store.write();
        // Each branch op's expected answer is decided on the model as it stands at that op.
        let changed = match r {
            Request::RequestTxn(t) => {
                let ok = t.compare.iter().all(|c| m.compare(c));
                let resp = kv::txn(&mut w, t, &NoLeases)
                    .map_err(|e| TestCaseError::fail(format!("{r:?}: {e}")))?;
                prop_assert_eq!(resp.succeeded, ok, "{:?}", r);
                let branch = if ok { &t.success } else { &t.failure };
                let ops: Vec<Request> = branch.iter().filter_map(|o| o.request.clone()).collect();
                prop_assert_eq!(resp.responses.len(), ops.len());
                let mut changed = false;
                for (o, got) in ops.iter().zip(&resp.responses) {
                    match (o, &got.response) {
                        (Request::RequestRange(g), Some(Response::ResponseRange(rr))) => {
                            prop_assert_eq!(
                                seen(&rr.kvs),
                                m.range(&g.key, &g.range_end),
                                "{:?}",
                                r
                            );
                        }
                        (
                            Request::RequestDeleteRange(d),
                            Some(Response::ResponseDeleteRange(dr)),
                        ) => {
                            prop_assert_eq!(
                                dr.deleted as usize,
                                m.range(&d.key, &d.range_end).len()
                            );
                            changed |= m.write(o, new_rev);
                        }
                        (Request::RequestPut(_), Some(Response::ResponsePut(_))) => {
                            changed |= m.write(o, new_rev);
                        }
                        other => prop_assert!(false, "answer of another kind: {other:?}"),
                    }
                }
                changed
            }
            Request::RequestRange(g) => {
                let rr = kv::range(&store, g).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(seen(&rr.kvs), m.range(&g.key, &g.range_end));
                prop_assert_eq!(rr.count as usize, rr.kvs.len());
                false
            }
            Request::RequestDeleteRange(d) => {
                let dr =
                    kv::delete_range(&mut w, d).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(dr.deleted as usize, m.range(&d.key, &d.range_end).len());
                m.write(r, new_rev)
            }
            Request::RequestPut(p) => {
                kv::put(&mut w, p, &NoLeases).map_err(|e| TestCaseError::fail(e.to_string()))?;
                m.write(r, new_rev)
            }
        };
        let (_, rev) = w
            .end(0, 0)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        // One new revision for a request that changed anything, none otherwise.
        if changed {
            m.rev = new_rev;
        }
        prop_assert_eq!(rev, m.rev, "revision after {:?}", r);
        let all = kv::range(
            &store,
            &RangeRequest {
                key: b"\x00".to_vec(),
                range_end: b"\x00".to_vec(),
                ..Default::default()
            },
        )
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(
            seen(&all.kvs),
            m.range(b"\x00", b"\x00"),
            "keyspace after {:?}",
            r
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(fuzz_support::config(256, "tests/fuzz_apply.proptest-regressions"))]

    #[test]
    fn applied_requests_match_the_model(reqs in prop::collection::vec(request(), 1..24)) {
        check(reqs)?;
    }
}
