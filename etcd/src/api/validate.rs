// The checks the API makes before a KV request is proposed or served (etcd's request
// validation): empty keys, sort options, ignore_value/ignore_lease, txn size and duplicate keys.

use proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
    range_request::{SortOrder, SortTarget},
    request_op::Request,
};

use crate::error::{self, Error};
use crate::mvcc::KeyRange;

/// Checks made by the API before a request is proposed (etcd's request validation).
pub fn check_range(r: &RangeRequest) -> Result<(), Error> {
    if r.key.is_empty() {
        return Err(error::EMPTY_KEY);
    }
    if SortOrder::try_from(r.sort_order).is_err() || SortTarget::try_from(r.sort_target).is_err() {
        return Err(error::INVALID_SORT_OPTION);
    }
    Ok(())
}

pub fn check_put(r: &PutRequest) -> Result<(), Error> {
    if r.key.is_empty() {
        return Err(error::EMPTY_KEY);
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(error::VALUE_PROVIDED);
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(error::LEASE_PROVIDED);
    }
    Ok(())
}

pub fn check_delete(r: &DeleteRangeRequest) -> Result<(), Error> {
    if r.key.is_empty() {
        return Err(error::EMPTY_KEY);
    }
    Ok(())
}

/// Validates a txn: op count, each op, and no key written twice in one branch (nested txns
/// included), as etcd requires.
pub fn check_txn(r: &TxnRequest, max_txn_ops: usize) -> Result<(), Error> {
    if r.compare.len() > max_txn_ops
        || r.success.len() > max_txn_ops
        || r.failure.len() > max_txn_ops
    {
        return Err(error::TOO_MANY_OPS);
    }
    for c in &r.compare {
        if c.key.is_empty() {
            return Err(error::EMPTY_KEY);
        }
    }
    for branch in [&r.success, &r.failure] {
        for op in branch.iter() {
            match &op.request {
                Some(Request::RequestRange(x)) => check_range(x)?,
                Some(Request::RequestPut(x)) => check_put(x)?,
                Some(Request::RequestDeleteRange(x)) => check_delete(x)?,
                Some(Request::RequestTxn(x)) => check_txn(x, max_txn_ops)?,
                None => {}
            }
        }
        let mut puts = Vec::new();
        let mut deletes = Vec::new();
        collect_writes(branch, &mut puts, &mut deletes);
        if has_overlap(&puts, &deletes) {
            return Err(error::DUPLICATE_KEY);
        }
    }
    Ok(())
}

/// Keys a branch puts and ranges it deletes, nested txns' branches included (either branch of
/// a nested txn may run, so both count).
fn collect_writes<'a>(
    ops: &'a [RequestOp],
    puts: &mut Vec<&'a [u8]>,
    deletes: &mut Vec<KeyRange<'a>>,
) {
    for op in ops {
        match &op.request {
            Some(Request::RequestPut(p)) => puts.push(&p.key),
            Some(Request::RequestDeleteRange(d)) => {
                deletes.push(KeyRange::new(&d.key, &d.range_end))
            }
            Some(Request::RequestTxn(t)) => {
                // Only one of its branches runs: a key put in both counts once. Each branch
                // is checked on its own when the nested txn itself is checked.
                let mut both = Vec::new();
                collect_writes(&t.success, &mut both, deletes);
                collect_writes(&t.failure, &mut both, deletes);
                both.sort_unstable();
                both.dedup();
                puts.extend(both);
            }
            _ => {}
        }
    }
}

/// etcd's rule: a key may be put once per branch, and not inside a range the branch deletes;
/// deletes may overlap each other.
fn has_overlap(puts: &[&[u8]], deletes: &[KeyRange<'_>]) -> bool {
    let mut sorted = puts.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return true;
    }
    deletes.iter().any(|d| puts.iter().any(|p| d.contains(p)))
}
