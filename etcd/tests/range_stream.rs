// RangeStream (etcd 3.7, issue 17): for every kind of Range request, the chunks merged in order
// (as proto.Merge merges them) equal the unary Range's answer, laid out as etcd 3.7 lays them
// out; sorts and revision filters answer Unimplemented; one revision is read whatever is
// written meanwhile, and a compaction of it mid-stream is etcd's error.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use prost::Message;
use proto::etcdserverpb::{
    CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp,
    ResponseHeader, TxnRequest, kv_client::KvClient, range_request::SortOrder,
    range_request::SortTarget, request_op,
};
use support::RealEtcd;
use tonic::transport::Channel;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const KEYS: usize = 5000;
/// The server's default --max-request-bytes, which sizes a chunk.
const MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// proto.Merge of `b` into `a`: set scalars overwrite, repeated fields append, messages merge.
fn merge(a: &mut RangeResponse, b: RangeResponse) {
    if let Some(hb) = b.header {
        let ha = a.header.get_or_insert_with(ResponseHeader::default);
        if hb.cluster_id != 0 {
            ha.cluster_id = hb.cluster_id;
        }
        if hb.member_id != 0 {
            ha.member_id = hb.member_id;
        }
        if hb.revision != 0 {
            ha.revision = hb.revision;
        }
        if hb.raft_term != 0 {
            ha.raft_term = hb.raft_term;
        }
    }
    a.kvs.extend(b.kvs);
    if b.more {
        a.more = true;
    }
    if b.count != 0 {
        a.count = b.count;
    }
}

/// Asserts `a` == `b`, naming the first difference rather than printing megabytes of values.
fn same(a: &RangeResponse, b: &RangeResponse, name: &str) {
    assert_eq!(a.header, b.header, "{name}: header");
    assert_eq!(
        (a.count, a.more),
        (b.count, b.more),
        "{name}: (count, more)"
    );
    assert_eq!(a.kvs.len(), b.kvs.len(), "{name}: number of key-values");
    if let Some(i) = (0..a.kvs.len()).find(|&i| a.kvs[i] != b.kvs[i]) {
        panic!(
            "{name}: key-value {i} differs: key {:?} vs {:?}",
            String::from_utf8_lossy(&a.kvs[i].key),
            String::from_utf8_lossy(&b.kvs[i].key)
        );
    }
}

/// The stream's chunks merged: (answer, number of chunks). Checks etcd 3.7's layout on the
/// way (its rpc.proto, and etcd-client's tests against it): every chunk but the last carries
/// key-values only; the last carries the header, count and more, and key-values unless the
/// answer has none.
async fn streamed(
    c: &mut KvClient<Channel>,
    r: &RangeRequest,
) -> Result<(RangeResponse, usize), tonic::Status> {
    let mut s = c.range_stream(r.clone()).await?.into_inner();
    let mut chunks = Vec::new();
    while let Some(m) = s.message().await? {
        chunks.push(m.range_response.unwrap_or_default());
    }
    let n = chunks.len();
    let Some(last) = chunks.last() else {
        panic!("{r:?}: a stream without a chunk");
    };
    // More than one chunk means key-values, and the last holds some of them.
    assert!(
        n == 1 || !last.kvs.is_empty(),
        "the last of {n} chunks has no key-values"
    );
    let h = last.header.unwrap_or_default();
    assert!(
        h.cluster_id != 0 && h.member_id != 0 && h.raft_term != 0 && h.revision != 0,
        "the last chunk's header: {h:?}"
    );
    for (i, c) in chunks[..n - 1].iter().enumerate() {
        assert!(
            c.header.is_none() && c.count == 0 && !c.more && !c.kvs.is_empty(),
            "chunk {i} of {n} is not key-values only: header {:?}, count {}, more {}, {} kvs",
            c.header,
            c.count,
            c.more,
            c.kvs.len()
        );
    }
    let mut merged = RangeResponse::default();
    for c in chunks {
        merge(&mut merged, c);
    }
    Ok((merged, n))
}

fn put_op(key: String, value: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.into_bytes(),
            value,
            ..Default::default()
        })),
    }
}

/// Puts keys `key(i)` for i in `keys`, in txns of `per_txn`, key i holding `value_len` bytes
/// of one letter.
async fn fill(
    c: &mut KvClient<Channel>,
    keys: std::ops::Range<usize>,
    per_txn: usize,
    key: impl Fn(usize) -> String,
    value_len: usize,
) {
    for start in keys.clone().step_by(per_txn) {
        let ops = (start..(start + per_txn).min(keys.end))
            .map(|i| put_op(key(i), vec![b'a' + (i % 26) as u8; value_len]))
            .collect();
        c.txn(TxnRequest {
            success: ops,
            ..Default::default()
        })
        .await
        .expect("fill");
    }
}

fn req(key: &str, end: &str) -> RangeRequest {
    RangeRequest {
        key: key.as_bytes().to_vec(),
        range_end: end.as_bytes().to_vec(),
        ..Default::default()
    }
}

#[test]
fn merged_chunks_equal_the_unary_range() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let ours = RealEtcd::start_bin(OURS, &tmp.path().join("m"), "m", &[]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut c = KvClient::connect(ours.client_url.clone())
            .await
            .expect("connect")
            .max_decoding_message_size(64 << 20);
        // 5000 keys of 1000 bytes (about 5 MB: several chunks of --max-request-bytes), keys
        // around the prefix, then overwrites and deletes so revisions and versions differ.
        fill(&mut c, 0..KEYS, 100, |i| format!("r/{i:04}"), 1000).await;
        for k in ["q", "r", "r0", "s/1"] {
            c.put(PutRequest {
                key: k.into(),
                value: b"x".to_vec(),
                ..Default::default()
            })
            .await
            .expect("put");
        }
        let before_overwrites = c
            .range(req("r/0000", ""))
            .await
            .expect("range")
            .into_inner();
        let mid = before_overwrites.header.expect("header").revision;
        for i in (0..KEYS).step_by(7) {
            c.put(PutRequest {
                key: format!("r/{i:04}").into_bytes(),
                value: b"new".to_vec(),
                ..Default::default()
            })
            .await
            .expect("overwrite");
        }
        for i in (3..KEYS).step_by(11) {
            c.delete_range(DeleteRangeRequest {
                key: format!("r/{i:04}").into_bytes(),
                ..Default::default()
            })
            .await
            .expect("delete");
        }

        let mut cases: Vec<(&str, RangeRequest)> = vec![
            ("prefix", req("r/", "r0")),
            ("everything", req("\0", "\0")),
            ("from key", req("r/2500", "\0")),
            ("single key", req("r/0007", "")),
            ("missing key", req("r/0003", "")),
            ("empty range", req("r/9", "r/1")),
            ("nothing matches", req("t", "u")),
        ];
        for (name, limit) in [
            ("limit 10", 10),
            ("limit 1000", 1000),
            ("limit 2000", 2000),
            ("limit 4999", 4999),
        ] {
            cases.push((
                name,
                RangeRequest {
                    limit,
                    ..req("r/", "r0")
                },
            ));
        }
        cases.push((
            "keys only",
            RangeRequest {
                keys_only: true,
                ..req("r/", "r0")
            },
        ));
        cases.push((
            "count only, limit 5",
            RangeRequest {
                count_only: true,
                limit: 5,
                ..req("r/", "r0")
            },
        ));
        cases.push((
            "an older revision",
            RangeRequest {
                revision: mid,
                ..req("r/", "r0")
            },
        ));
        cases.push((
            "ascending by key",
            RangeRequest {
                sort_order: SortOrder::Ascend as i32,
                sort_target: SortTarget::Key as i32,
                limit: 50,
                ..req("r/", "r0")
            },
        ));
        cases.push((
            "serializable",
            RangeRequest {
                serializable: true,
                ..req("r/1", "r/2")
            },
        ));
        for (name, r) in &cases {
            let unary = c.range(r.clone()).await.expect("range").into_inner();
            let (merged, chunks) = streamed(&mut c, r).await.expect("range stream");
            same(&merged, &unary, name);
            let bytes = unary.encoded_len();
            if bytes > 2 * MAX_REQUEST_BYTES {
                assert!(
                    chunks > 2,
                    "{name}: {chunks} chunks of about 1.5 MiB for {bytes} bytes"
                );
            }
            if bytes < MAX_REQUEST_BYTES / 2 {
                assert_eq!(chunks, 1, "{name}: {bytes} bytes fit one chunk");
            }
        }

        // Sorting needs the whole result, and etcd 3.7 streams no revision filter: a client
        // learns it from Unimplemented and falls back to Range.
        let sorted = |order: SortOrder, target: SortTarget| RangeRequest {
            sort_order: order as i32,
            sort_target: target as i32,
            ..req("r/", "r0")
        };
        let refused = [
            (
                "descending by key",
                sorted(SortOrder::Descend, SortTarget::Key),
            ),
            (
                "ascending by mod",
                sorted(SortOrder::Ascend, SortTarget::Mod),
            ),
            (
                "by create, no order",
                sorted(SortOrder::None, SortTarget::Create),
            ),
            (
                "min mod revision",
                RangeRequest {
                    min_mod_revision: mid + 1,
                    ..req("r/", "r0")
                },
            ),
            (
                "max create revision",
                RangeRequest {
                    max_create_revision: mid,
                    ..req("r/", "r0")
                },
            ),
        ];
        for (name, r) in &refused {
            let e = streamed(&mut c, r).await.expect_err(name);
            assert_eq!(e.code(), tonic::Code::Unimplemented, "{name}: {e:?}");
        }

        // A revision compacted away: etcd's error.
        c.compact(CompactionRequest {
            revision: mid + 10,
            physical: true,
        })
        .await
        .expect("compact");
        let e = streamed(
            &mut c,
            &RangeRequest {
                revision: mid,
                ..req("r/", "r0")
            },
        )
        .await
        .expect_err("a compacted revision");
        assert_eq!(e.code(), tonic::Code::OutOfRange);
        assert_eq!(
            e.message(),
            "etcdserver: mvcc: required revision has been compacted"
        );
    });
}

/// Keys and value size of `one_revision_is_streamed...`: 8 MB in chunks of about 10 KiB, far
/// more than the client's flow-control window (2 MiB) and the server's buffers, so the
/// stream is still being read from the store when the test writes and compacts.
const PINNED_KEYS: usize = 8000;
const PINNED_VALUE: usize = 1000;

/// The next chunk of `s`, which must exist.
async fn next_chunk(
    s: &mut tonic::Streaming<proto::etcdserverpb::RangeStreamResponse>,
) -> Result<RangeResponse, tonic::Status> {
    Ok(s.message()
        .await?
        .and_then(|m| m.range_response)
        .expect("a chunk"))
}

#[test]
fn one_revision_is_streamed_while_writes_go_on_and_its_compaction_ends_the_stream() {
    let tmp = tempfile::tempdir().expect("temp dir");
    // etcd-client's chunking test runs etcd 3.7 with this: chunks of about 10 KiB.
    let ours = RealEtcd::start_bin(
        OURS,
        &tmp.path().join("m"),
        "m",
        &["--max-request-bytes", "10240"],
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut c = KvClient::connect(ours.client_url.clone())
            .await
            .expect("connect")
            .max_decoding_message_size(64 << 20);
        fill(
            &mut c,
            0..PINNED_KEYS,
            8,
            |i| format!("p/{i:05}"),
            PINNED_VALUE,
        )
        .await;
        let pinned = c
            .range(RangeRequest {
                count_only: true,
                ..req("p/", "p0")
            })
            .await
            .expect("range")
            .into_inner()
            .header
            .expect("header")
            .revision;

        // A stream is opened and its first chunk read; then keys it has not reached yet are
        // overwritten, deleted and added.
        let mut s = c
            .range_stream(req("p/", "p0"))
            .await
            .expect("range stream")
            .into_inner();
        let mut merged = next_chunk(&mut s).await.expect("the first chunk");
        assert!(merged.header.is_none() && !merged.kvs.is_empty());
        for i in (PINNED_KEYS / 2..PINNED_KEYS).step_by(3) {
            c.put(PutRequest {
                key: format!("p/{i:05}").into_bytes(),
                value: b"new".to_vec(),
                ..Default::default()
            })
            .await
            .expect("overwrite");
        }
        c.delete_range(DeleteRangeRequest {
            key: format!("p/{:05}", PINNED_KEYS - 500).into_bytes(),
            range_end: b"p0".to_vec(),
            ..Default::default()
        })
        .await
        .expect("delete");
        c.put(PutRequest {
            key: b"p/new".to_vec(),
            value: b"x".to_vec(),
            ..Default::default()
        })
        .await
        .expect("put");
        while let Some(m) = s.message().await.expect("a chunk") {
            merge(&mut merged, m.range_response.unwrap_or_default());
        }
        let then = c
            .range(RangeRequest {
                revision: pinned,
                ..req("p/", "p0")
            })
            .await
            .expect("range at the pinned revision")
            .into_inner();
        assert_eq!(merged.header.as_ref().map(|h| h.revision), Some(pinned));
        assert_eq!(merged.count, PINNED_KEYS as i64);
        let same_rev = RangeResponse {
            header: merged.header,
            ..then
        };
        same(
            &merged,
            &same_rev,
            "the stream against Range at its revision",
        );

        // Another stream; after its first chunk the store moves on and is compacted past the
        // stream's revision: the stream ends with etcd's error, not with a short answer.
        let mut s = c
            .range_stream(req("p/", "p0"))
            .await
            .expect("range stream")
            .into_inner();
        let first = next_chunk(&mut s).await.expect("the first chunk");
        assert!(first.header.is_none());
        let now = c
            .put(PutRequest {
                key: b"p/later".to_vec(),
                value: b"x".to_vec(),
                ..Default::default()
            })
            .await
            .expect("put")
            .into_inner()
            .header
            .expect("header")
            .revision;
        c.compact(CompactionRequest {
            revision: now,
            physical: true,
        })
        .await
        .expect("compact");
        let ended = loop {
            match s.message().await {
                Ok(Some(m)) => {
                    let r = m.range_response.unwrap_or_default();
                    assert!(
                        r.header.is_none(),
                        "the compacted stream finished: count {}",
                        r.count
                    );
                }
                Ok(None) => panic!("the compacted stream ended without an error"),
                Err(e) => break e,
            }
        };
        assert_eq!(ended.code(), tonic::Code::OutOfRange);
        assert_eq!(
            ended.message(),
            "etcdserver: mvcc: required revision has been compacted"
        );
    });
}

/// Keys of the huge range (ETCD_RS_STREAM_KEYS overrides, for a quick local run).
const HUGE_KEYS: usize = 1_000_000;
const HUGE_VALUE: usize = 200;
/// How much the server's heap may grow while it streams the huge range.
const HUGE_BOUND: u64 = 64 << 20;

#[test]
fn a_range_of_a_million_keys_streams_in_bounded_memory() {
    let keys = std::env::var("ETCD_RS_STREAM_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(HUGE_KEYS);
    let tmp = tempfile::tempdir().expect("temp dir");
    let ours = RealEtcd::start_bin(
        OURS,
        &tmp.path().join("m"),
        "m",
        &[
            "--max-txn-ops",
            "1000",
            "--quota-backend-bytes",
            "8589934592",
        ],
    );
    let pid = ours.child.as_ref().expect("running").id();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        // Four loaders, txns of 1000 puts.
        let mut loaders = Vec::new();
        for l in 0..4 {
            let url = ours.client_url.clone();
            loaders.push(tokio::spawn(async move {
                let mut c = KvClient::connect(url).await.expect("connect");
                for t in (l..keys.div_ceil(1000)).step_by(4) {
                    let txn = t * 1000..((t + 1) * 1000).min(keys);
                    fill(&mut c, txn, 1000, |i| format!("h/{i:07}"), HUGE_VALUE).await;
                }
            }));
        }
        for l in loaders {
            l.await.expect("loader");
        }
        let before = support::rss_anon_bytes(pid);
        // Sample the heap while the stream is read, a little slowly, as a client busy with
        // what it received would.
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut peak = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(support::rss_anon_bytes(pid));
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                peak
            })
        };
        let mut c = KvClient::connect(ours.client_url.clone())
            .await
            .expect("connect")
            .max_decoding_message_size(64 << 20);
        let mut s = c
            .range_stream(req("h/", "h0"))
            .await
            .expect("range stream")
            .into_inner();
        let (mut got, mut bytes, mut chunks, mut last) = (0usize, 0usize, 0usize, Vec::new());
        let mut tail = RangeResponse::default();
        while let Some(m) = s.message().await.expect("a chunk") {
            let r = m.range_response.unwrap_or_default();
            for kv in &r.kvs {
                assert!(kv.key > last, "keys out of order at {}", got);
                assert_eq!(kv.key, format!("h/{got:07}").into_bytes(), "key {got}");
                assert_eq!(kv.value.len(), HUGE_VALUE);
                bytes += kv.key.len() + kv.value.len();
                last.clone_from(&kv.key);
                got += 1;
            }
            chunks += 1;
            tail = RangeResponse {
                count: r.count,
                more: r.more,
                ..Default::default()
            };
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.join().expect("sampler");
        let grew = peak.saturating_sub(before);
        eprintln!(
            "{got} keys ({} MiB) in {chunks} chunks; server heap {} MiB before, peak {} MiB (+{} MiB)",
            bytes >> 20,
            before >> 20,
            peak >> 20,
            grew >> 20
        );
        assert_eq!(got, keys, "every key streamed");
        assert_eq!((tail.count, tail.more), (keys as i64, false), "the last chunk's count");
        if keys == HUGE_KEYS {
            // The bound means something only if the range is much bigger than it.
            assert!(bytes as u64 > 2 * HUGE_BOUND);
        }
        assert!(
            grew <= HUGE_BOUND,
            "the server's heap grew {} MiB while streaming {} MiB",
            grew >> 20,
            bytes >> 20
        );
    });
}
