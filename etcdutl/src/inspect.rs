// `etcdutl inspect wal|db`: the WAL's records decoded like etcd-dump-logs (term, index, type,
// the request in words), and the db's buckets, key counts, sizes and page use.

use std::path::Path;

use common::backend::Db;
use common::wal::{RecordType, Records};
use prost::Message;
use proto::etcdserverpb::{InternalRaftRequest, Request as V2Request};
use proto::raftpb::{ConfChange, ConfChangeType, Entry, EntryType};
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// One decoded WAL entry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WalEntry {
    pub term: u64,
    pub index: u64,
    /// etcd-dump-logs' entry types: ConfigChange, Normal (empty), Request (v2),
    /// InternalRaftRequest with IRR<Op> naming the request.
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
}

/// The WAL's metadata, last hard state and entries (`start_index` on, of `types` when given).
#[derive(Debug, Clone, serde::Serialize)]
pub struct WalDump {
    pub node_id: String,
    pub cluster_id: String,
    pub term: u64,
    pub vote: String,
    pub commit: u64,
    pub snapshots: Vec<Value>,
    pub entries: Vec<WalEntry>,
    /// The fault that ended the read early, if any.
    pub error: Option<String>,
}

/// The entry types etcd-dump-logs accepts for --entry-type.
pub const ENTRY_TYPES: &[&str] = &[
    "ConfigChange",
    "Normal",
    "Request",
    "InternalRaftRequest",
    "IRRRange",
    "IRRPut",
    "IRRDeleteRange",
    "IRRTxn",
    "IRRCompaction",
    "IRRLeaseGrant",
    "IRRLeaseRevoke",
    "IRRLeaseCheckpoint",
    "IRRAlarm",
    "IRRAuth",
    "IRRMember",
    "IRRClusterVersion",
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The request an InternalRaftRequest carries: its IRR type and fields.
fn describe_irr(r: &InternalRaftRequest) -> (&'static str, Value) {
    let id = r.header.as_ref().map(|h| h.id).unwrap_or(r.id);
    let (kind, v) = if let Some(p) = &r.put {
        (
            "IRRPut",
            json!({"put": {"key": text(&p.key), "value": text(&p.value), "lease": p.lease, "prev_kv": p.prev_kv}}),
        )
    } else if let Some(d) = &r.delete_range {
        (
            "IRRDeleteRange",
            json!({"delete_range": {"key": text(&d.key), "range_end": text(&d.range_end), "prev_kv": d.prev_kv}}),
        )
    } else if let Some(t) = &r.txn {
        (
            "IRRTxn",
            json!({"txn": {"compare": t.compare.len(), "success": t.success.len(), "failure": t.failure.len()}}),
        )
    } else if let Some(q) = &r.range {
        (
            "IRRRange",
            json!({"range": {"key": text(&q.key), "range_end": text(&q.range_end), "revision": q.revision}}),
        )
    } else if let Some(c) = &r.compaction {
        (
            "IRRCompaction",
            json!({"compaction": {"revision": c.revision, "physical": c.physical}}),
        )
    } else if let Some(g) = &r.lease_grant {
        (
            "IRRLeaseGrant",
            json!({"lease_grant": {"ID": format!("{:x}", g.id), "TTL": g.ttl}}),
        )
    } else if let Some(l) = &r.lease_revoke {
        (
            "IRRLeaseRevoke",
            json!({"lease_revoke": {"ID": format!("{:x}", l.id)}}),
        )
    } else if let Some(c) = &r.lease_checkpoint {
        (
            "IRRLeaseCheckpoint",
            json!({"lease_checkpoint": {"checkpoints": c.checkpoints.len()}}),
        )
    } else if let Some(a) = &r.alarm {
        (
            "IRRAlarm",
            json!({"alarm": {"action": a.action, "member": format!("{:x}", a.member_id), "alarm": a.alarm}}),
        )
    } else if let Some(m) = &r.cluster_member_attr_set {
        let attrs = m.member_attributes.as_ref();
        (
            "IRRMember",
            json!({"cluster_member_attr_set": {"member": format!("{:x}", m.member_id), "name": attrs.map(|a| a.name.clone()), "client_urls": attrs.map(|a| a.client_urls.clone())}}),
        )
    } else if let Some(v) = &r.cluster_version_set {
        (
            "IRRClusterVersion",
            json!({"cluster_version_set": {"ver": v.ver}}),
        )
    } else if r.auth_enable.is_some()
        || r.auth_disable.is_some()
        || r.authenticate.is_some()
        || r.auth_user_add.is_some()
        || r.auth_user_delete.is_some()
        || r.auth_user_change_password.is_some()
        || r.auth_user_grant_role.is_some()
        || r.auth_user_revoke_role.is_some()
        || r.auth_role_add.is_some()
        || r.auth_role_delete.is_some()
        || r.auth_role_grant_permission.is_some()
        || r.auth_role_revoke_permission.is_some()
    {
        ("IRRAuth", json!({"auth": true}))
    } else {
        ("InternalRaftRequest", json!({}))
    };
    let mut v = v;
    if let Some(o) = v.as_object_mut() {
        o.insert("id".into(), json!(format!("{id:x}")));
    }
    (kind, v)
}

/// An entry in words.
pub fn describe_entry(e: &Entry) -> (String, Value) {
    let data = e.data();
    match EntryType::try_from(e.r#type) {
        Ok(EntryType::EntryConfChange) => match ConfChange::decode(data) {
            Ok(cc) => {
                let method = ConfChangeType::try_from(cc.r#type)
                    .map(|t| t.as_str_name().to_string())
                    .unwrap_or_else(|_| cc.r#type.to_string());
                (
                    "ConfigChange".into(),
                    json!({"method": method, "id": format!("{:x}", cc.node_id), "context": text(cc.context())}),
                )
            }
            Err(err) => ("ConfigChange".into(), json!({"error": err.to_string()})),
        },
        Ok(EntryType::EntryNormal) if data.is_empty() => ("Normal".into(), json!({})),
        Ok(EntryType::EntryNormal) => {
            if let Ok(r) = InternalRaftRequest::decode(data)
                && r != InternalRaftRequest::default()
            {
                let (k, v) = describe_irr(&r);
                return (k.into(), v);
            }
            match V2Request::decode(data) {
                Ok(r) => (
                    "Request".into(),
                    json!({"method": r.method, "path": r.path, "val": r.val}),
                ),
                Err(err) => ("Normal".into(), json!({"error": err.to_string()})),
            }
        }
        _ => (format!("type {}", e.r#type), json!({"bytes": data.len()})),
    }
}

/// Reads the whole WAL in `dir`, keeping entries from `start_index` whose type is in `types`
/// (all when empty). A fault stops the read and is reported with what was read before it.
pub fn dump_wal(dir: &Path, start_index: u64, types: &[String]) -> Result<WalDump> {
    for t in types {
        if !ENTRY_TYPES.contains(&t.as_str()) {
            return Err(Error::bad_args(format!(
                "unknown entry type {t:?} (known: {})",
                ENTRY_TYPES.join(", ")
            )));
        }
    }
    let mut d = WalDump {
        node_id: String::new(),
        cluster_id: String::new(),
        term: 0,
        vote: String::new(),
        commit: 0,
        snapshots: Vec::new(),
        entries: Vec::new(),
        error: None,
    };
    for r in Records::open(dir)? {
        let rec = match r {
            Ok(r) => r.record,
            Err(e) => {
                d.error = Some(e.to_string());
                break;
            }
        };
        let data = rec.data.as_deref().unwrap_or(&[]);
        match rec.r#type {
            t if t == RecordType::Metadata as i64 => {
                if let Ok(m) = proto::etcdserverpb::Metadata::decode(data) {
                    d.node_id = format!("{:x}", m.node_id);
                    d.cluster_id = format!("{:x}", m.cluster_id);
                }
            }
            t if t == RecordType::State as i64 => {
                if let Ok(h) = proto::raftpb::HardState::decode(data) {
                    d.term = h.term;
                    d.vote = format!("{:x}", h.vote);
                    d.commit = h.commit;
                }
            }
            t if t == RecordType::Snapshot as i64 => {
                if let Ok(s) = proto::walpb::Snapshot::decode(data) {
                    d.snapshots.push(json!({"index": s.index, "term": s.term}));
                }
            }
            t if t == RecordType::Entry as i64 => {
                let Ok(e) = Entry::decode(data) else { continue };
                if e.index < start_index {
                    continue;
                }
                // A rewritten index (a new leader's log) replaces the old entries.
                while d.entries.last().is_some_and(|l| l.index >= e.index) {
                    d.entries.pop();
                }
                let (kind, v) = describe_entry(&e);
                d.entries.push(WalEntry {
                    term: e.term,
                    index: e.index,
                    kind,
                    data: v,
                });
            }
            _ => {}
        }
    }
    if !types.is_empty() {
        d.entries.retain(|e| {
            types.iter().any(|t| {
                *t == e.kind
                    || (t == "InternalRaftRequest"
                        && (e.kind.starts_with("IRR") || e.kind == "InternalRaftRequest"))
            })
        });
    }
    Ok(d)
}

/// The dump as etcd-dump-logs prints it: a header, then `term index type data` lines.
pub fn format_wal_simple(d: &WalDump) -> String {
    let mut s = String::new();
    for snap in &d.snapshots {
        s.push_str(&format!(
            "Snapshot: term={} index={}\n",
            snap["term"], snap["index"]
        ));
    }
    s.push_str(&format!(
        "WAL metadata:\nnodeID={} clusterID={} term={} commitIndex={} vote={}\n",
        d.node_id, d.cluster_id, d.term, d.commit, d.vote
    ));
    s.push_str(&format!("WAL entries: {}\n", d.entries.len()));
    if let Some(l) = d.entries.last() {
        s.push_str(&format!("lastIndex={}\n", l.index));
    }
    s.push_str(&format!(
        "{:>4}\t{:>10}\t{}\t{}\n",
        "term", "index", "type", "data"
    ));
    for e in &d.entries {
        s.push_str(&format!(
            "{:>4}\t{:>10}\t{}\t{}\n",
            e.term, e.index, e.kind, e.data
        ));
    }
    if let Some(err) = &d.error {
        s.push_str(&format!("Error: {err}\n"));
    }
    s
}

/// The db's buckets and page use.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DbDump {
    pub path: String,
    pub file_size: u64,
    pub page_size: u32,
    pub page_count: u64,
    pub free_pages: u64,
    pub consistent_index: u64,
    pub buckets: Vec<BucketDump>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BucketDump {
    pub name: String,
    pub keys: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    pub depth: usize,
    pub branch_pages: u64,
    pub leaf_pages: u64,
    pub overflow_pages: u64,
    pub inline: bool,
}

pub fn dump_db(path: &Path) -> Result<DbDump> {
    let db = Db::open_read_only(path)
        .map_err(|e| Error::failed(format!("cannot open the db {}: {e}", path.display())))?;
    let st = db.stats()?;
    let tx = db.begin_read();
    Ok(DbDump {
        path: path.display().to_string(),
        file_size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        page_size: st.page_size,
        page_count: st.page_count,
        free_pages: st.free_pages,
        consistent_index: crate::check::consistent_index(&tx),
        buckets: st
            .buckets
            .iter()
            .map(|b| BucketDump {
                name: text(&b.name),
                keys: b.keys,
                key_bytes: b.key_bytes,
                value_bytes: b.value_bytes,
                depth: b.depth,
                branch_pages: b.branch_pages,
                leaf_pages: b.leaf_pages,
                overflow_pages: b.overflow_pages,
                inline: b.inline,
            })
            .collect(),
    })
}

/// The db dump as a table (or simple lines).
pub fn format_db(d: &DbDump, table: bool) -> String {
    let header = [
        "BUCKET",
        "KEYS",
        "KEY BYTES",
        "VALUE BYTES",
        "DEPTH",
        "BRANCH PAGES",
        "LEAF PAGES",
        "OVERFLOW PAGES",
        "INLINE",
    ];
    let rows: Vec<Vec<String>> = d
        .buckets
        .iter()
        .map(|b| {
            vec![
                b.name.clone(),
                b.keys.to_string(),
                b.key_bytes.to_string(),
                b.value_bytes.to_string(),
                b.depth.to_string(),
                b.branch_pages.to_string(),
                b.leaf_pages.to_string(),
                b.overflow_pages.to_string(),
                b.inline.to_string(),
            ]
        })
        .collect();
    let summary = format!(
        "db {}: {} bytes, page size {}, {} pages ({} free), consistent index {}\n",
        d.path, d.file_size, d.page_size, d.page_count, d.free_pages, d.consistent_index
    );
    if table {
        format!("{summary}{}", crate::output::table(&header, &rows))
    } else {
        let mut s = summary;
        for r in rows {
            s.push_str(&r.join(", "));
            s.push('\n');
        }
        s
    }
}
