// The KV requests of the v3 API applied to the MVCC store with etcd's semantics: Range options
// (sort, limit + more, count, filters, keys/count only), Put (prev_kv, ignore_value/lease),
// DeleteRange, Txn (compares, branches, nested txns) and the checks made before proposing.

use std::cmp::Ordering;

use proto::etcdserverpb::{
    Compare, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest,
    RangeResponse, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
    compare::{CompareResult, CompareTarget, TargetUnion},
    range_request::{SortOrder, SortTarget},
    request_op::Request,
    response_op::Response,
};
use proto::mvccpb::KeyValue;

use crate::error::{self, Error};
use crate::mvcc::{KeyRange, KvStore, MvccError, RangeResult, ReadView, TxnRead, WriteTxn};

/// Tells the KV applier whether a lease exists (the lessor answers).
pub trait LeaseLookup {
    fn lease_exists(&self, id: i64) -> bool;
}

/// No leases at all (tests, and a store without a lessor).
pub struct NoLeases;

impl LeaseLookup for NoLeases {
    fn lease_exists(&self, _id: i64) -> bool {
        false
    }
}

pub fn mvcc_error(e: MvccError) -> Error {
    match e {
        MvccError::Compacted => error::COMPACTED,
        MvccError::FutureRev => error::FUTURE_REV,
        other => {
            tracing::error!(error = %other, "storage failure while applying a request");
            error::CORRUPT
        }
    }
}

fn rev_header(rev: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision: rev,
        ..Default::default()
    })
}

fn sort_and_filter(r: &RangeRequest, rr: RangeResult) -> RangeResponse {
    let mut kvs = rr.kvs;
    if r.max_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision <= r.max_mod_revision);
    }
    if r.min_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision >= r.min_mod_revision);
    }
    if r.max_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision <= r.max_create_revision);
    }
    if r.min_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision >= r.min_create_revision);
    }
    let target = SortTarget::try_from(r.sort_target).unwrap_or(SortTarget::Key);
    let mut order = SortOrder::try_from(r.sort_order).unwrap_or(SortOrder::None);
    // The store returns keys in ascending order; another target with no order means ascending.
    if target != SortTarget::Key && order == SortOrder::None {
        order = SortOrder::Ascend;
    }
    if order != SortOrder::None {
        let cmp = |a: &KeyValue, b: &KeyValue| -> Ordering {
            match target {
                SortTarget::Key => a.key.cmp(&b.key),
                SortTarget::Version => a.version.cmp(&b.version),
                SortTarget::Create => a.create_revision.cmp(&b.create_revision),
                SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
                SortTarget::Value => a.value.cmp(&b.value),
            }
        };
        // Stable in both directions: equal targets stay in key order, as etcd's small sorts do.
        if order == SortOrder::Descend {
            kvs.sort_by(|a, b| cmp(b, a));
        } else {
            kvs.sort_by(cmp);
        }
    }
    let mut more = false;
    if r.limit > 0 && kvs.len() > r.limit as usize {
        kvs.truncate(r.limit as usize);
        more = true;
    }
    if r.keys_only {
        for kv in &mut kvs {
            kv.value.clear();
        }
    }
    if r.count_only {
        kvs.clear();
    }
    RangeResponse {
        header: rev_header(rr.rev),
        kvs,
        more,
        count: rr.count as i64,
    }
}

/// How many keys the store must return for `r`: everything when results are sorted or
/// filtered afterwards, else one more than the limit to learn whether there are more.
fn store_limit(r: &RangeRequest) -> usize {
    let filtered = r.min_mod_revision != 0
        || r.max_mod_revision != 0
        || r.min_create_revision != 0
        || r.max_create_revision != 0;
    let sorted = r.sort_order != SortOrder::None as i32 || r.sort_target != SortTarget::Key as i32;
    if filtered || sorted || r.limit <= 0 {
        0
    } else {
        r.limit as usize + 1
    }
}

/// A Range served from the store (serializable, or after a ReadIndex round).
pub fn range(store: &KvStore, r: &RangeRequest) -> Result<RangeResponse, Error> {
    let rr = store
        .range(
            KeyRange::new(&r.key, &r.range_end),
            r.revision,
            store_limit(r),
        )
        .map_err(mvcc_error)?;
    Ok(sort_and_filter(r, rr))
}

fn range_in(w: &mut impl TxnRead, r: &RangeRequest) -> Result<RangeResponse, Error> {
    let rr = w
        .txn_range(
            KeyRange::new(&r.key, &r.range_end),
            r.revision,
            store_limit(r),
        )
        .map_err(mvcc_error)?;
    Ok(sort_and_filter(r, rr))
}

pub fn put(
    w: &mut WriteTxn<'_>,
    r: &PutRequest,
    leases: &dyn LeaseLookup,
) -> Result<PutResponse, Error> {
    let mut value = r.value.clone();
    let mut lease = r.lease;
    if r.ignore_value || r.ignore_lease {
        let prev = w
            .get(&r.key)
            .map_err(mvcc_error)?
            .ok_or(error::KEY_NOT_FOUND)?;
        if r.ignore_value {
            value = prev.value;
        }
        if r.ignore_lease {
            lease = prev.lease;
        }
    }
    if lease != 0 && !leases.lease_exists(lease) {
        return Err(error::LEASE_NOT_FOUND);
    }
    let prev = w
        .put_with(&r.key, &value, lease, r.prev_kv)
        .map_err(mvcc_error)?;
    Ok(PutResponse {
        header: rev_header(w.rev()),
        prev_kv: if r.prev_kv { prev } else { None },
    })
}

pub fn delete_range(
    w: &mut WriteTxn<'_>,
    r: &DeleteRangeRequest,
) -> Result<DeleteRangeResponse, Error> {
    let (deleted, prev_kvs) = w
        .delete_range_with(KeyRange::new(&r.key, &r.range_end), r.prev_kv)
        .map_err(mvcc_error)?;
    Ok(DeleteRangeResponse {
        header: None,
        deleted: deleted as i64,
        prev_kvs,
    })
}

fn compare_one(c: &Compare, kv: &KeyValue) -> bool {
    let target = CompareTarget::try_from(c.target).unwrap_or(CompareTarget::Version);
    let ord = match (target, &c.target_union) {
        (CompareTarget::Version, Some(TargetUnion::Version(v))) => kv.version.cmp(v),
        (CompareTarget::Create, Some(TargetUnion::CreateRevision(v))) => kv.create_revision.cmp(v),
        (CompareTarget::Mod, Some(TargetUnion::ModRevision(v))) => kv.mod_revision.cmp(v),
        (CompareTarget::Value, Some(TargetUnion::Value(v))) => {
            kv.value.as_slice().cmp(v.as_slice())
        }
        (CompareTarget::Lease, Some(TargetUnion::Lease(v))) => kv.lease.cmp(v),
        // A missing operand compares as its zero value.
        (CompareTarget::Version, None) => kv.version.cmp(&0),
        (CompareTarget::Create, None) => kv.create_revision.cmp(&0),
        (CompareTarget::Mod, None) => kv.mod_revision.cmp(&0),
        (CompareTarget::Value, None) => kv.value.as_slice().cmp(&[][..]),
        (CompareTarget::Lease, None) => kv.lease.cmp(&0),
        _ => return false,
    };
    match CompareResult::try_from(c.result).unwrap_or(CompareResult::Equal) {
        CompareResult::Equal => ord == Ordering::Equal,
        CompareResult::NotEqual => ord != Ordering::Equal,
        CompareResult::Greater => ord == Ordering::Greater,
        CompareResult::Less => ord == Ordering::Less,
    }
}

/// One compare over its key or range: every key must satisfy it; a value compare on missing
/// keys fails, other targets compare the zero key-value.
fn compare(w: &mut impl TxnRead, c: &Compare) -> Result<bool, Error> {
    let rr = w
        .txn_range(KeyRange::new(&c.key, &c.range_end), 0, 0)
        .map_err(mvcc_error)?;
    if rr.kvs.is_empty() {
        if c.target == CompareTarget::Value as i32 {
            return Ok(false);
        }
        return Ok(compare_one(c, &KeyValue::default()));
    }
    Ok(rr.kvs.iter().all(|kv| compare_one(c, kv)))
}

/// Whether all compares of `r` hold now (decides the branch).
pub fn txn_compares_hold(w: &mut impl TxnRead, r: &TxnRequest) -> Result<bool, Error> {
    for c in &r.compare {
        if !compare(w, c)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The branches a txn takes: whether its compares held, and the same for each nested txn
/// of that branch, in order. As etcd's txn path, it is decided on the store as it was before
/// any op of the txn ran, so a nested txn's compares never see its parent's writes, and each
/// compare is evaluated (and counted as a range) once.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnPath {
    pub ok: bool,
    pub nested: Vec<TxnPath>,
}

/// Decides `r`'s path (see `TxnPath`).
pub fn txn_path(w: &mut impl TxnRead, r: &TxnRequest) -> Result<TxnPath, Error> {
    let ok = txn_compares_hold(w, r)?;
    let ops = if ok { &r.success } else { &r.failure };
    let mut nested = Vec::new();
    for op in ops {
        if let Some(Request::RequestTxn(t)) = &op.request {
            nested.push(txn_path(w, t)?);
        }
    }
    Ok(TxnPath { ok, nested })
}

pub fn txn(
    w: &mut WriteTxn<'_>,
    r: &TxnRequest,
    leases: &dyn LeaseLookup,
) -> Result<TxnResponse, Error> {
    let path = txn_path(w, r)?;
    txn_branch(w, r, &path, leases)
}

/// Runs the branches of `r` that `path` (decided by `txn_path`) selects.
pub fn txn_branch(
    w: &mut WriteTxn<'_>,
    r: &TxnRequest,
    path: &TxnPath,
    leases: &dyn LeaseLookup,
) -> Result<TxnResponse, Error> {
    let ok = path.ok;
    let ops = if ok { &r.success } else { &r.failure };
    let mut nested = path.nested.iter();
    let mut responses = Vec::with_capacity(ops.len());
    for op in ops {
        let resp = match &op.request {
            Some(Request::RequestRange(x)) => Response::ResponseRange(range_in(w, x)?),
            Some(Request::RequestPut(x)) => Response::ResponsePut(put(w, x, leases)?),
            Some(Request::RequestDeleteRange(x)) => {
                Response::ResponseDeleteRange(delete_range(w, x)?)
            }
            Some(Request::RequestTxn(x)) => {
                let Some(p) = nested.next() else {
                    // txn_path walked the same branch: a nested txn without its path is a
                    // caller's bug, not the client's.
                    return Err(error::NOT_CAPABLE);
                };
                Response::ResponseTxn(txn_branch(w, x, p, leases)?)
            }
            None => continue,
        };
        responses.push(ResponseOp {
            response: Some(resp),
        });
    }
    Ok(TxnResponse {
        header: None,
        succeeded: ok,
        responses,
    })
}

/// A txn that only reads (`is_read_only_txn`), evaluated on one view of the store: its
/// compares and reads see one revision, and it takes no writer's lock.
pub fn read_only_txn(v: &mut ReadView<'_>, r: &TxnRequest) -> Result<TxnResponse, Error> {
    let ok = txn_compares_hold(v, r)?;
    let ops = if ok { &r.success } else { &r.failure };
    let mut responses = Vec::with_capacity(ops.len());
    for op in ops {
        let resp = match &op.request {
            Some(Request::RequestRange(x)) => Response::ResponseRange(range_in(v, x)?),
            Some(Request::RequestTxn(x)) => Response::ResponseTxn(read_only_txn(v, x)?),
            // The caller checked the txn only reads; a write here is a caller's bug.
            Some(Request::RequestPut(_)) | Some(Request::RequestDeleteRange(_)) => {
                return Err(error::NOT_CAPABLE);
            }
            None => continue,
        };
        responses.push(ResponseOp {
            response: Some(resp),
        });
    }
    Ok(TxnResponse {
        header: None,
        succeeded: ok,
        responses,
    })
}

/// Gives every response inside a txn etcd's inner header: the txn's final revision only
/// (a nested txn's own header stays empty, as etcd's).
pub fn stamp_txn_headers(t: &mut TxnResponse, rev: i64) {
    for op in &mut t.responses {
        match &mut op.response {
            Some(Response::ResponseRange(x)) => x.header = rev_header(rev),
            Some(Response::ResponsePut(x)) => x.header = rev_header(rev),
            Some(Response::ResponseDeleteRange(x)) => x.header = rev_header(rev),
            Some(Response::ResponseTxn(x)) => {
                // etcd 3.4 leaves a nested txn's own header empty (`"header":{}`); only the
                // ops inside it carry the revision.
                x.header = Some(ResponseHeader::default());
                stamp_txn_headers(x, rev);
            }
            None => {}
        }
    }
}

/// True when a txn only reads (it can then be served without raft, like a Range).
pub fn is_read_only_txn(r: &TxnRequest) -> bool {
    r.success
        .iter()
        .chain(&r.failure)
        .all(|op| match &op.request {
            Some(Request::RequestRange(_)) | None => true,
            Some(Request::RequestTxn(t)) => is_read_only_txn(t),
            _ => false,
        })
}
