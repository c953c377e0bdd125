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

/// What etcd 3.7 streams: the store's own key order and no revision filters; anything else
/// answers Unimplemented, so a client falls back to the unary Range.
pub fn check_streamable(r: &RangeRequest) -> Result<(), Error> {
    let order = SortOrder::try_from(r.sort_order).unwrap_or(SortOrder::None);
    let target = SortTarget::try_from(r.sort_target).unwrap_or(SortTarget::Key);
    // Unsorted, or sorted ascending by key: both are the store's key order.
    if target != SortTarget::Key || order == SortOrder::Descend {
        return Err(error::RANGE_STREAM_SORT);
    }
    let filtered = r.min_mod_revision != 0
        || r.max_mod_revision != 0
        || r.min_create_revision != 0
        || r.max_create_revision != 0;
    if filtered {
        return Err(error::RANGE_STREAM_FILTER);
    }
    Ok(())
}

fn chunk(resp: RangeResponse) -> Result<RangeStreamResponse, Status> {
    Ok(RangeStreamResponse {
        range_response: Some(resp),
    })
}

/// Streams `r`'s answer from `store` as etcd 3.7 does: chunks of about `budget` bytes that
/// carry only key-values, then a last chunk with the rest of them and `header` (its revision
/// set to the pinned one), the count and `more`. An error (the pinned revision compacted
/// meanwhile) ends the stream.
pub fn spawn(
    store: Arc<KvStore>,
    r: RangeRequest,
    header: ResponseHeader,
    budget: usize,
) -> Chunks {
    let (tx, rx) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = produce(&store, &r, header, budget.max(1), &tx) {
            let _ = tx.blocking_send(Err(mvcc_error(e).status()));
        }
    });
    rx
}

/// The chunk being filled. A full chunk is sent only when the next key-value arrives, so
/// the last chunk is never empty unless the whole answer is.
struct Out<'a> {
    tx: &'a mpsc::Sender<Result<RangeStreamResponse, Status>>,
    kvs: Vec<KeyValue>,
    bytes: usize,
    budget: usize,
}

impl Out<'_> {
    /// False when the client is gone.
    fn push(&mut self, kv: KeyValue) -> bool {
        if self.bytes >= self.budget {
            let resp = RangeResponse {
                kvs: std::mem::take(&mut self.kvs),
                ..Default::default()
            };
            self.bytes = 0;
            if self.tx.blocking_send(chunk(resp)).is_err() {
                return false;
            }
        }
        self.bytes += kv.encoded_len();
        self.kvs.push(kv);
        true
    }

    fn finish(self, header: ResponseHeader, count: i64, more: bool) {
        let resp = RangeResponse {
            header: Some(header),
            kvs: self.kvs,
            more,
            count,
        };
        let _ = self.tx.blocking_send(chunk(resp));
    }
}

fn produce(
    store: &KvStore,
    r: &RangeRequest,
    mut header: ResponseHeader,
    budget: usize,
    tx: &mpsc::Sender<Result<RangeStreamResponse, Status>>,
) -> Result<(), MvccError> {
    let view = store.read_view().counted_as_range();
    // Pinned: every page reads this revision, whatever is written meanwhile.
    let at = if r.revision > 0 {
        r.revision
    } else {
        view.rev()
    };
    header.revision = view.rev();
    let limit = usize::try_from(r.limit).unwrap_or(0);
    let single = r.range_end.is_empty();
    let mut out = Out {
        tx,
        kvs: Vec::new(),
        bytes: 0,
        budget,
    };
    let mut cursor = r.key.clone();
    let (mut count, mut delivered, mut more) = (0usize, 0usize, false);
    loop {
        // An empty range picks nothing, after the revision is checked as Range checks it.
        let mut picked = view.pick_page(KeyRange::new(&cursor, &r.range_end), at, PAGE_KEYS)?;
        let full = picked.len() == PAGE_KEYS;
        let next = picked.last().map(|(k, _)| {
            let mut k = k.clone();
            k.push(0);
            k
        });
        // Every key of the page counts, also those past the limit.
        count += picked.len();
        if limit > 0 && delivered + picked.len() > limit {
            picked.truncate(limit - delivered);
            more = true;
        }
        delivered += picked.len();
        if !r.count_only {
            for mut kv in view.values(picked, at)? {
                if r.keys_only {
                    kv.value.clear();
                }
                if !out.push(kv) {
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
            count += view.count(KeyRange::new(&cursor, &r.range_end), at)?;
            break;
        }
    }
    out.finish(header, count as i64, more);
    Ok(())
}
