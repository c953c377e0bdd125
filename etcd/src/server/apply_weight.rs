// Which committed entries the apply task may apply on a client worker and which must run
// where blocking is allowed (tokio's block_in_place), read from their encoding without decoding.
//
// A put, a lease grant or checkpoint, or a txn whose operations are all puts (and whose
// compares name single keys) costs microseconds; a delete range, a range, a compare over a
// range, a lease revoke, a compaction or an auth change (bcrypt) may cost seconds and must not
// hold a client worker (reads would wait behind it).

use prost::encoding::{WireType, decode_key, decode_varint};
use proto::raftpb::Entry;

/// A batch bigger than this goes to block_in_place whatever it holds.
const LIGHT_BATCH_ENTRIES: usize = 256;
/// An entry bigger than this is not light, whatever it is.
const LIGHT_ENTRY_BYTES: usize = 64 * 1024;

// InternalRaftRequest fields (raft_internal.proto).
const REQ_ID: u32 = 1;
const REQ_PUT: u32 = 4;
const REQ_TXN: u32 = 6;
const REQ_LEASE_GRANT: u32 = 8;
const REQ_LEASE_CHECKPOINT: u32 = 11;
const REQ_HEADER: u32 = 100;
// TxnRequest and RequestOp fields (rpc.proto).
const TXN_COMPARE: u32 = 1;
const TXN_SUCCESS: u32 = 2;
const TXN_FAILURE: u32 = 3;
const OP_PUT: u32 = 2;
// Compare.range_end (rpc.proto).
const CMP_RANGE_END: u32 = 64;

/// The backend writes a batch of cheap entries makes at most (to tell whether it reaches the
/// batch limit, where the writer commits at once), or None when an entry may take long.
pub fn light_ops(entries: &[Entry]) -> Option<usize> {
    if entries.len() > LIGHT_BATCH_ENTRIES {
        return None;
    }
    entries
        .iter()
        .try_fold(0, |sum, e| Some(sum + light_entry_ops(e.data())?))
}

fn light_entry_ops(data: &[u8]) -> Option<usize> {
    if data.len() > LIGHT_ENTRY_BYTES {
        return None;
    }
    // Each applied entry also writes the consistent index and term.
    let mut ops = 2;
    let light = each_field(data, |field, body| match field {
        REQ_ID | REQ_HEADER => true,
        REQ_PUT | REQ_LEASE_GRANT | REQ_LEASE_CHECKPOINT => {
            ops += 1;
            true
        }
        REQ_TXN => each_field(body, |f, part| match f {
            // A compare over a range reads the whole range.
            TXN_COMPARE => each_field(part, |c, _| c != CMP_RANGE_END),
            TXN_SUCCESS | TXN_FAILURE => {
                ops += 1;
                each_field(part, |o, _| o == OP_PUT)
            }
            _ => false,
        }),
        _ => false,
    });
    light.then_some(ops)
}

/// Calls `f` with each top-level field's number and, for a length-delimited one, its bytes
/// (empty otherwise); true when `f` said true for all and the encoding was well formed.
fn each_field(mut b: &[u8], mut f: impl FnMut(u32, &[u8]) -> bool) -> bool {
    while !b.is_empty() {
        let Ok((field, wire)) = decode_key(&mut b) else {
            return false;
        };
        let body: &[u8] = match wire {
            WireType::Varint => {
                if decode_varint(&mut b).is_err() {
                    return false;
                }
                &[]
            }
            WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                let n = if wire == WireType::SixtyFourBit { 8 } else { 4 };
                if b.len() < n {
                    return false;
                }
                b = &b[n..];
                &[]
            }
            WireType::LengthDelimited => {
                let Ok(len) = decode_varint(&mut b) else {
                    return false;
                };
                let Ok(len) = usize::try_from(len) else {
                    return false;
                };
                if b.len() < len {
                    return false;
                }
                let (body, rest) = b.split_at(len);
                b = rest;
                body
            }
            WireType::StartGroup | WireType::EndGroup => return false,
        };
        if !f(field, body) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use proto::etcdserverpb::{
        Compare, DeleteRangeRequest, InternalRaftRequest, LeaseGrantRequest, LeaseRevokeRequest,
        PutRequest, RangeRequest, RequestHeader, RequestOp, TxnRequest, request_op,
    };

    fn entry(r: InternalRaftRequest) -> Entry {
        Entry {
            data: Some(r.encode_to_vec()),
            ..Entry::default()
        }
    }

    fn put(key: &[u8]) -> PutRequest {
        PutRequest {
            key: key.to_vec(),
            value: vec![b'v'; 256],
            ..PutRequest::default()
        }
    }

    fn op(r: request_op::Request) -> RequestOp {
        RequestOp { request: Some(r) }
    }

    #[test]
    fn puts_lease_grants_and_all_put_txns_are_light() {
        let header = Some(RequestHeader {
            id: 7,
            ..RequestHeader::default()
        });
        let batch = [
            entry(InternalRaftRequest {
                header: header.clone(),
                id: 7,
                put: Some(put(b"k")),
                ..InternalRaftRequest::default()
            }),
            entry(InternalRaftRequest {
                lease_grant: Some(LeaseGrantRequest { ttl: 5, id: 1 }),
                ..InternalRaftRequest::default()
            }),
            entry(InternalRaftRequest {
                header,
                txn: Some(TxnRequest {
                    compare: vec![Compare::default()],
                    success: vec![op(request_op::Request::RequestPut(put(b"a")))],
                    failure: vec![op(request_op::Request::RequestPut(put(b"b")))],
                }),
                ..InternalRaftRequest::default()
            }),
            // The leader's empty entry of a new term.
            Entry::default(),
        ];
        assert_eq!(light_ops(&batch), Some(2 + 1 + 2 + 1 + 2 + 2 + 2));
    }

    #[test]
    fn deletes_ranges_revokes_and_big_batches_are_not() {
        let heavy = [
            InternalRaftRequest {
                delete_range: Some(DeleteRangeRequest::default()),
                ..InternalRaftRequest::default()
            },
            InternalRaftRequest {
                lease_revoke: Some(LeaseRevokeRequest { id: 1 }),
                ..InternalRaftRequest::default()
            },
            InternalRaftRequest {
                txn: Some(TxnRequest {
                    success: vec![
                        op(request_op::Request::RequestPut(put(b"a"))),
                        op(request_op::Request::RequestDeleteRange(
                            DeleteRangeRequest::default(),
                        )),
                    ],
                    ..TxnRequest::default()
                }),
                ..InternalRaftRequest::default()
            },
            InternalRaftRequest {
                txn: Some(TxnRequest {
                    compare: vec![Compare {
                        key: b"a".to_vec(),
                        range_end: b"z".to_vec(),
                        ..Compare::default()
                    }],
                    success: vec![op(request_op::Request::RequestPut(put(b"a")))],
                    ..TxnRequest::default()
                }),
                ..InternalRaftRequest::default()
            },
            InternalRaftRequest {
                txn: Some(TxnRequest {
                    failure: vec![op(request_op::Request::RequestRange(
                        RangeRequest::default(),
                    ))],
                    ..TxnRequest::default()
                }),
                ..InternalRaftRequest::default()
            },
        ];
        for r in heavy {
            assert_eq!(
                light_ops(&[entry(r.clone())]),
                None,
                "{r:?} was taken as light"
            );
        }
        let p = entry(InternalRaftRequest {
            put: Some(put(b"k")),
            ..InternalRaftRequest::default()
        });
        assert_eq!(light_ops(&vec![p; LIGHT_BATCH_ENTRIES + 1]), None);
        let big = entry(InternalRaftRequest {
            put: Some(PutRequest {
                key: b"k".to_vec(),
                value: vec![0; LIGHT_ENTRY_BYTES],
                ..PutRequest::default()
            }),
            ..InternalRaftRequest::default()
        });
        assert_eq!(light_ops(&[big]), None);
        // Bytes that are no protobuf at all go where blocking is allowed too.
        let junk = Entry {
            data: Some(vec![0xff; 12]),
            ..Entry::default()
        };
        assert_eq!(light_ops(&[junk]), None);
    }
}
