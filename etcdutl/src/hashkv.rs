// `etcdutl hashkv`: etcd's HashKV of a stopped member's db — the value the running member's
// HashKV RPC reports (etcd::mvcc::KvStore::hash_kv): CRC-32C over the `key` bucket's name and
// every revision key and value up to the revision.

use std::path::Path;

use common::backend::{Db, ReadTxn, buckets};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HashKv {
    pub hash: u32,
    #[serde(rename = "hashRevision")]
    pub hash_revision: i64,
    /// -1 before any compaction, as etcd reports it.
    #[serde(rename = "compactRevision")]
    pub compact_revision: i64,
}

fn rev_main(v: Option<&[u8]>) -> Option<i64> {
    v.filter(|b| b.len() >= 8)
        .map(|b| i64::from_be_bytes(b[..8].try_into().unwrap_or([0; 8])))
}

/// The hash of the db at `path` at revision `rev` (0 = the newest).
pub fn hash_kv(path: &Path, rev: i64) -> Result<HashKv> {
    let db = Db::open_read_only(path)
        .map_err(|e| Error::failed(format!("cannot open the db {}: {e}", path.display())))?;
    let tx = db.begin_read();
    let finished = rev_main(tx.get(buckets::META, b"finishedCompactRev")?).unwrap_or(0);
    let scheduled = rev_main(tx.get(buckets::META, b"scheduledCompactRev")?).unwrap_or(0);
    let mut current = 1i64;
    if let Some((k, _)) = tx.cursor(buckets::KEY)?.last()? {
        current = rev_main(Some(k)).unwrap_or(1);
    }
    let current = current.max(finished).max(scheduled);
    let rev = if rev <= 0 { current } else { rev };
    if rev > current {
        return Err(Error::failed(
            "mvcc: required revision is a future revision",
        ));
    }
    if rev < finished {
        return Err(Error::failed("mvcc: required revision has been compacted"));
    }
    let mut h = crc32c::crc32c(buckets::KEY);
    tx.for_each(buckets::KEY, &mut |k, v| {
        if rev_main(Some(k)).is_some_and(|m| m <= rev) {
            h = crc32c::crc32c_append(h, k);
            h = crc32c::crc32c_append(h, v);
        }
        Ok(())
    })?;
    Ok(HashKv {
        hash: h,
        hash_revision: rev,
        compact_revision: if finished == 0 { -1 } else { finished },
    })
}
