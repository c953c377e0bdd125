// RangeStream (etcd 3.7): a Range answered in chunks whose merge, in order, is what the unary
// Range answers; read page by page at one pinned revision, so a large range is never in memory
// whole (the KEP's point: kube-apiserver lists through it).

use std::sync::Arc;

use prost::Message;
use proto::etcdserverpb::{
    RangeRequest, RangeResponse, RangeStreamResponse, ResponseHeader,
    range_request::{SortOrder, SortTarget},
};
use proto::mvccpb::KeyValue;
use tokio::sync::mpsc;
use tonic::Status;

use crate::api::errors::ToStatus;
use crate::apply::kv::mvcc_error;
use crate::error::{self, Error};
use crate::mvcc::{KeyRange, KvStore, MvccError};

/// Keys picked from the index per page.
const PAGE_KEYS: usize = 1000;

pub type Chunks = mpsc::Receiver<Result<RangeStreamResponse, Status>>;

/// Only the store's own order can stream: any other sort needs the whole result first.
pub fn check_order(r: &RangeRequest) -> Result<(), Error> {
    let order = SortOrder::try_from(r.sort_order).unwrap_or(SortOrder::None);
    let target = SortTarget::try_from(r.sort_target).unwrap_or(SortTarget::Key);
    // Unsorted, or sorted ascending by key: both are the store's key order.
    if target == SortTarget::Key && order != SortOrder::Descend {
        Ok(())
    } else {
        Err(error::RANGE_STREAM_SORT)
    }
}

fn chunk(resp: RangeResponse) -> Result<RangeStreamResponse, Status> {
    Ok(RangeStreamResponse {
        range_response: Some(resp),
    })
}

/// Streams `r`'s answer from `store`: first `header` (cluster, member and term, sent at once as
/// etcd does), then the key-values in chunks of about `budget` bytes; the first data chunk
/// carries the revision, the last the count and `more`. An error (the pinned revision
/// compacted meanwhile) ends the stream.
pub fn spawn(
    store: Arc<KvStore>,
    r: RangeRequest,
    header: ResponseHeader,
    budget: usize,
) -> Chunks {
    let (tx, rx) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let head = RangeResponse {
            header: Some(header),
            ..Default::default()
        };
        if tx.blocking_send(chunk(head)).is_err() {
            return;
        }
        if let Err(e) = produce(&store, &r, budget.max(1), &tx) {
            let _ = tx.blocking_send(Err(mvcc_error(e).status()));
        }
    });
    rx
}

/// The chunks being built and sent; false from `send` when the client is gone.
struct Out<'a> {
    tx: &'a mpsc::Sender<Result<RangeStreamResponse, Status>>,
    /// The view's revision, sent with the first data chunk.
    revision: Option<i64>,
    kvs: Vec<KeyValue>,
    bytes: usize,
}

impl Out<'_> {
    fn push(&mut self, kv: KeyValue, budget: usize) -> bool {
        self.bytes += kv.encoded_len();
        self.kvs.push(kv);
        if self.bytes >= budget {
            return self.flush(None);
        }
        true
    }

    /// Sends what is buffered; `last` = (count, more) makes it the final chunk.
    fn flush(&mut self, last: Option<(i64, bool)>) -> bool {
        let header = self.revision.take().map(|revision| ResponseHeader {
            revision,
            ..Default::default()
        });
        let (count, more) = last.unwrap_or_default();
        let resp = RangeResponse {
            header,
            kvs: std::mem::take(&mut self.kvs),
            more,
            count,
        };
        self.bytes = 0;
        self.tx.blocking_send(chunk(resp)).is_ok()
    }
}

fn produce(
    store: &KvStore,
    r: &RangeRequest,
    budget: usize,
    tx: &mpsc::Sender<Result<RangeStreamResponse, Status>>,
) -> Result<(), MvccError> {
    let view = store.read_view().counted_as_range();
    let at = if r.revision > 0 {
        r.revision
    } else {
        view.rev()
    };
    let keeps = |created: i64, modified: i64| {
        (r.max_mod_revision == 0 || modified <= r.max_mod_revision)
            && (r.min_mod_revision == 0 || modified >= r.min_mod_revision)
            && (r.max_create_revision == 0 || created <= r.max_create_revision)
            && (r.min_create_revision == 0 || created >= r.min_create_revision)
    };
    let limit = usize::try_from(r.limit).unwrap_or(0);
    let single = r.range_end.is_empty();
    let mut out = Out {
        tx,
        revision: Some(view.rev()),
        kvs: Vec::new(),
        bytes: 0,
    };
    let mut cursor = r.key.clone();
    let (mut count, mut delivered, mut more) = (0usize, 0usize, false);
    loop {
        // An empty range picks nothing, after the revision is checked as Range checks it.
        let picked = view.pick_page(KeyRange::new(&cursor, &r.range_end), at, PAGE_KEYS)?;
        let full = picked.len() == PAGE_KEYS;
        count += picked.len();
        let next = picked.last().map(|(k, _)| {
            let mut k = k.clone();
            k.push(0);
            k
        });
        let mut wanted = Vec::new();
        for p in picked {
            if !keeps(p.1.created.main, p.1.modified.main) {
                continue;
            }
            if limit > 0 && delivered == limit {
                more = true;
                break;
            }
            delivered += 1;
            wanted.push(p);
        }
        if !r.count_only {
            for mut kv in view.values(wanted, at)? {
                if r.keys_only {
                    kv.value.clear();
                }
                if !out.push(kv, budget) {
                    return Ok(());
                }
            }
        }
        let Some(next) = next.filter(|_| full && !single) else {
            break;
        };
        cursor = next;
        if more {
            // The answer is complete; only the count needs the rest of the range.
            count += view.count(KeyRange::new(&cursor, &r.range_end), at);
            break;
        }
    }
    out.flush(Some((count as i64, more)));
    Ok(())
}
