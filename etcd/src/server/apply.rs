// Applies one committed raft entry to the state machine: client requests (InternalRaftRequest)
// to the KV store, membership records, and conf changes; returns what the waiting client gets.

use prost::Message;
use proto::etcdserverpb::{
    AlarmMember, AlarmResponse, AlarmType, CompactionResponse, DeleteRangeResponse,
    InternalRaftRequest, LeaseGrantResponse, LeaseRevokeResponse, PutResponse, RangeRequest,
    Request, RequestOp, TxnRequest, TxnResponse, alarm_request::AlarmAction, request_op,
};
use proto::leasepb;
use proto::mvccpb::{Event, event::EventType};
use proto::raftpb::Entry;

use super::alarms::Alarms;
use crate::apply::kv::{self, LeaseLookup};
use crate::auth::{self, AuthResponse, AuthStore};
use crate::error::{self, Error};
use crate::lease::{Lessor, MAX_LEASE_TTL};
use crate::membership::Member;
use crate::metrics::METRICS;
use crate::mvcc::{KeyRange, KvStore};
use common::backend::buckets;

/// The result handed to the client that proposed a request.
#[derive(Debug, Clone)]
pub enum Applied {
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    Compaction(CompactionResponse),
    LeaseGrant(LeaseGrantResponse),
    LeaseRevoke(LeaseRevokeResponse),
    Alarm(AlarmResponse),
    /// A conf change: the members after it.
    Members(Vec<Member>),
    Auth(AuthResponse),
    /// A request with nothing to return (membership attributes, cluster version).
    Done,
}

/// What an apply produced: the result (or etcd's error) and the store revision after it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub result: Result<Applied, Error>,
    pub revision: i64,
}

/// Member attributes and cluster version changes the server must learn about.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    MemberAttributes {
        id: u64,
        name: String,
        client_urls: Vec<String>,
    },
    ClusterVersion(String),
    /// A downgrade job enabled or cancelled (the record now in the db).
    Downgrade(super::downgrade::DowngradeInfo),
    /// A committed entry that is neither a v3 nor a v2 request (its index): the member stops.
    Undecodable(u64),
}

/// Checks, before anything is written, that every op of the branches `path` selects can be
/// applied: otherwise a failure half-way would leave part of the txn written.
fn precheck_txn(
    w: &mut crate::mvcc::WriteTxn<'_>,
    r: &TxnRequest,
    path: &kv::TxnPath,
    leases: &dyn LeaseLookup,
) -> Result<(), Error> {
    let ops: &[RequestOp] = if path.ok { &r.success } else { &r.failure };
    let mut nested = path.nested.iter();
    for op in ops {
        match &op.request {
            Some(request_op::Request::RequestPut(p)) => {
                let prev = if p.ignore_value || p.ignore_lease {
                    Some(
                        w.get(&p.key)
                            .map_err(kv::mvcc_error)?
                            .ok_or(error::KEY_NOT_FOUND)?,
                    )
                } else {
                    None
                };
                let lease = match (&prev, p.ignore_lease) {
                    (Some(prev), true) => prev.lease,
                    _ => p.lease,
                };
                if lease != 0 && !leases.lease_exists(lease) {
                    return Err(error::LEASE_NOT_FOUND);
                }
            }
            Some(request_op::Request::RequestRange(RangeRequest { revision, .. }))
                if *revision > 0 =>
            {
                let rev: i64 = *revision;
                w.range(KeyRange::new(b"\0", b""), rev, 1)
                    .map_err(kv::mvcc_error)?;
            }
            Some(request_op::Request::RequestTxn(t)) => {
                let p = nested.next().ok_or(error::NOT_CAPABLE)?;
                precheck_txn(w, t, p, leases)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Applies a normal entry. Entries at or below the store's consistent index were applied
/// before a restart and are skipped (`None`). Returns the proposer's id with the outcome.
pub fn apply_normal(
    store: &KvStore,
    e: &Entry,
    lessor: &Lessor,
    alarms: &Alarms,
    auth: &AuthStore,
    effects: &mut Vec<Effect>,
) -> Option<(u64, Outcome)> {
    let leases: &dyn LeaseLookup = lessor;
    if e.index <= store.consistent_index() {
        return None;
    }
    let data = e.data();
    // Decoded before anything is written: an entry that is neither stops the member (the log
    // is corrupt) without moving the consistent index past it.
    let req = if data.is_empty() {
        None
    } else if let Ok(r) = InternalRaftRequest::decode(data) {
        Some(Ok(r))
    } else if let Ok(v2) = Request::decode(data) {
        // etcd 3.4 proposes member attributes and the cluster version as v2 requests.
        Some(Err(v2))
    } else {
        effects.push(Effect::Undecodable(e.index));
        return None;
    };
    let mut w = store.write();
    let req = match req {
        None => {
            // A new leader's empty entry: only the consistent index moves.
            let rev = w.end(e.index, e.term).map(|r| r.1).unwrap_or(0);
            return Some((
                0,
                Outcome {
                    result: Ok(Applied::Done),
                    revision: rev,
                },
            ));
        }
        Some(Err(v2)) => {
            apply_v2(&mut w, &v2, effects);
            let rev = w.end(e.index, e.term).map(|r| r.1).unwrap_or(0);
            return Some((
                v2.id,
                Outcome {
                    result: Ok(Applied::Done),
                    revision: rev,
                },
            ));
        }
        Some(Ok(r)) => r,
    };
    let id = req
        .header
        .as_ref()
        .map(|h| h.id)
        .filter(|id| *id != 0)
        .unwrap_or(req.id);
    // Lease table changes, made once the write txn is in.
    let mut granted = None;
    let mut revoked = None;
    // With NOSPACE raised, nothing that grows the db is applied (reads, deletes, compaction
    // and defrag still are), on every member alike.
    let grows = req.put.is_some()
        || req.lease_grant.is_some()
        || req.txn.as_ref().is_some_and(|t| !kv::is_read_only_txn(t));
    // With CORRUPT raised, etcd applies no KV or lease change at all.
    let touches_store = req.put.is_some()
        || req.delete_range.is_some()
        || req.txn.is_some()
        || req.compaction.is_some()
        || req.lease_grant.is_some()
        || req.lease_revoke.is_some();
    let lease_keys = |id: i64| {
        lessor
            .time_to_live(id)
            .map(|(_, _, keys)| keys)
            .unwrap_or_default()
    };
    let result = if let Err(denied) = auth.check_apply(&req, &lease_keys) {
        Err(denied)
    } else if touches_store && alarms.has(AlarmType::Corrupt) {
        Err(error::CORRUPT)
    } else if grows && alarms.has(AlarmType::Nospace) {
        Err(error::NO_SPACE)
    } else if auth::is_auth_request(&req) {
        auth.apply(&mut w, &req, e.index).map(Applied::Auth)
    } else if let Some(a) = &req.alarm {
        let m = AlarmMember {
            member_id: a.member_id,
            alarm: a.alarm,
        };
        match AlarmAction::try_from(a.action) {
            Ok(AlarmAction::Get) => Ok(Applied::Alarm(AlarmResponse {
                header: None,
                alarms: alarms
                    .list()
                    .into_iter()
                    .filter(|x| a.alarm == AlarmType::None as i32 || x.alarm == a.alarm)
                    .collect(),
            })),
            Ok(AlarmAction::Activate) => {
                if a.alarm == AlarmType::None as i32 {
                    Err(error::NOT_CAPABLE)
                } else {
                    if alarms.activate(&mut w, m) {
                        tracing::warn!(alarm = alarm_name(a.alarm), from = %crate::transport::wire::id_path(a.member_id), "alarm raised");
                    }
                    Ok(Applied::Alarm(AlarmResponse {
                        header: None,
                        alarms: vec![m],
                    }))
                }
            }
            Ok(AlarmAction::Deactivate) => {
                let was = alarms.deactivate(&mut w, &m);
                if was {
                    tracing::info!(alarm = alarm_name(a.alarm), from = %crate::transport::wire::id_path(a.member_id), "alarm disarmed");
                }
                Ok(Applied::Alarm(AlarmResponse {
                    header: None,
                    alarms: if was { vec![m] } else { Vec::new() },
                }))
            }
            Err(_) => Err(error::NOT_CAPABLE),
        }
    } else if let Some(p) = &req.put {
        kv::put(&mut w, p, leases).map(Applied::Put)
    } else if let Some(d) = &req.delete_range {
        kv::delete_range(&mut w, d).map(Applied::DeleteRange)
    } else if let Some(t) = &req.txn {
        kv::txn_path(&mut w, t).and_then(|path| {
            precheck_txn(&mut w, t, &path, leases)?;
            kv::txn_branch(&mut w, t, &path, leases).map(Applied::Txn)
        })
    } else if let Some(c) = &req.compaction {
        // Only the compaction point is recorded here; the old revisions are deleted in the
        // background (mvcc::compaction).
        w.compact(c.revision)
            .map(|()| Applied::Compaction(CompactionResponse::default()))
            .map_err(kv::mvcc_error)
    } else if let Some(g) = &req.lease_grant {
        if lessor.lease_exists(g.id) {
            Err(error::LEASE_EXIST)
        } else if g.ttl > MAX_LEASE_TTL {
            Err(error::LEASE_TTL_TOO_LARGE)
        } else {
            let ttl = lessor.effective_ttl(g.ttl);
            let rec = leasepb::Lease {
                id: g.id,
                ttl,
                remaining_ttl: 0,
            };
            w.put_raw(buckets::LEASE, &g.id.to_be_bytes(), &rec.encode_to_vec());
            granted = Some((g.id, ttl));
            Ok(Applied::LeaseGrant(LeaseGrantResponse {
                header: None,
                id: g.id,
                ttl,
                error: String::new(),
            }))
        }
    } else if let Some(r) = &req.lease_revoke {
        match lessor.time_to_live(r.id) {
            None => Err(error::LEASE_NOT_FOUND),
            Some((_, _, keys)) => {
                // Every key of the lease goes in this one revision.
                let mut res = Ok(());
                for k in &keys {
                    if let Err(err) = w.delete_range_with(KeyRange::new(k, b""), false) {
                        res = Err(kv::mvcc_error(err));
                        break;
                    }
                }
                w.delete_raw(buckets::LEASE, &r.id.to_be_bytes());
                revoked = Some(r.id);
                res.map(|()| Applied::LeaseRevoke(LeaseRevokeResponse::default()))
            }
        }
    } else if let Some(a) = &req.cluster_member_attr_set {
        let attrs = a.member_attributes.clone().unwrap_or_default();
        if update_member(&mut w, a.member_id, &attrs.name, &attrs.client_urls) {
            effects.push(Effect::MemberAttributes {
                id: a.member_id,
                name: attrs.name,
                client_urls: attrs.client_urls,
            });
        }
        Ok(Applied::Done)
    } else if let Some(v) = &req.cluster_version_set {
        w.put_raw(buckets::CLUSTER, b"clusterVersion", v.ver.as_bytes());
        effects.push(Effect::ClusterVersion(v.ver.clone()));
        Ok(Applied::Done)
    } else if let Some(d) = &req.downgrade_info_set {
        let info = super::downgrade::DowngradeInfo::from_request(d);
        w.put_raw(
            buckets::CLUSTER,
            super::downgrade::DOWNGRADE_KEY,
            &info.to_json(),
        );
        effects.push(Effect::Downgrade(info));
        Ok(Applied::Done)
    } else {
        // The API refuses requests this server cannot apply, so only another member could
        // have proposed this; say so rather than guess.
        tracing::error!(
            index = e.index,
            "skipping a request this version cannot apply"
        );
        Err(error::NOT_CAPABLE)
    };
    let (rev, result) = match w.end(e.index, e.term) {
        Ok((events, rev)) => {
            track_lease_keys(lessor, &events);
            (rev, result)
        }
        Err(err) => (0, Err(kv::mvcc_error(err))),
    };
    // etcd counts leases at apply, on every member; the TTL observed is the one granted.
    if let Some((id, ttl)) = granted {
        lessor.grant(id, ttl);
        METRICS.lease_granted.inc();
        METRICS.lease_ttl.observe(ttl as f64);
    }
    if let Some(id) = revoked
        && lessor.revoke(id).is_some()
    {
        METRICS.lease_revoked.inc();
    }
    let mut result = result;
    if let Ok(Applied::Txn(t)) = &mut result {
        kv::stamp_txn_headers(t, rev);
    }
    Some((
        id,
        Outcome {
            result,
            revision: rev,
        },
    ))
}

/// Keeps the lessor's key sets in step with the writes: a put moves its key to its new lease,
/// a delete takes it off its lease. The key's current lease comes from the lessor, not from
/// the events' prev_kv, which a write fills only when someone wants it.
fn track_lease_keys(lessor: &Lessor, events: &[Event]) {
    for ev in events {
        let Some(kv) = ev.kv.as_ref() else { continue };
        let prev_lease = lessor.lease_of(&kv.key);
        if ev.r#type == EventType::Put as i32 {
            if prev_lease != 0 && prev_lease != kv.lease {
                lessor.detach(prev_lease, &kv.key);
            }
            if kv.lease != 0 {
                lessor.attach(kv.lease, &kv.key);
            }
        } else if prev_lease != 0 {
            lessor.detach(prev_lease, &kv.key);
        }
    }
}

/// A member's record, under etcd's key or the zero-padded one older etcd-rs versions wrote.
fn get_member(w: &mut crate::mvcc::WriteTxn<'_>, id: u64) -> Option<Member> {
    [
        crate::membership::member_key(id),
        crate::membership::id_hex(id),
    ]
    .iter()
    .find_map(|k| w.get_raw(buckets::MEMBERS, k.as_bytes()))
    .and_then(|v| Member::from_json(&v).ok())
}

/// Writes a member's record under etcd's key (dropping an old zero-padded one).
fn put_member(w: &mut crate::mvcc::WriteTxn<'_>, m: &Member) {
    let padded = crate::membership::id_hex(m.id);
    let key = crate::membership::member_key(m.id);
    if padded != key {
        w.delete_raw(buckets::MEMBERS, padded.as_bytes());
    }
    w.put_raw(buckets::MEMBERS, key.as_bytes(), m.to_json().as_bytes());
}

/// Sets a member's name and client URLs; false (and nothing written) for a member that is not
/// in the cluster: removed after it proposed them, or never added. etcd skips those too; a
/// record written for it would bring a member without peer URLs back into `member list`.
fn update_member(
    w: &mut crate::mvcc::WriteTxn<'_>,
    id: u64,
    name: &str,
    client_urls: &[String],
) -> bool {
    let Some(mut m) = get_member(w, id) else {
        tracing::warn!(
            member = %crate::membership::id_hex(id),
            "skipped updating the attributes of a member that is not in the cluster"
        );
        return false;
    };
    m.name = name.to_string();
    m.client_urls = client_urls.to_vec();
    put_member(w, &m);
    true
}

/// etcd 3.4's v2 requests: `PUT /0/members/<id>/attributes` and `PUT /0/version`.
fn apply_v2(w: &mut crate::mvcc::WriteTxn<'_>, r: &Request, effects: &mut Vec<Effect>) {
    if r.method != "PUT" {
        return;
    }
    if r.path == "/0/version" {
        w.put_raw(buckets::CLUSTER, b"clusterVersion", r.val.as_bytes());
        effects.push(Effect::ClusterVersion(r.val.clone()));
    } else if let Some(a) = v2_member_attributes(r)
        && update_member(w, a.id, &a.name, &a.client_urls)
    {
        effects.push(Effect::MemberAttributes {
            id: a.id,
            name: a.name,
            client_urls: a.client_urls,
        });
    }
}

/// A member's published name and client URLs.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberAttributes {
    pub id: u64,
    pub name: String,
    pub client_urls: Vec<String>,
}

/// The attributes a v2 `PUT /0/members/<id>/attributes` request publishes.
fn v2_member_attributes(r: &Request) -> Option<MemberAttributes> {
    #[derive(serde::Deserialize)]
    struct Attrs {
        #[serde(default)]
        name: String,
        #[serde(rename = "clientURLs", default)]
        client_urls: Vec<String>,
    }
    if r.method != "PUT" {
        return None;
    }
    let id_hex = r
        .path
        .strip_prefix("/0/members/")
        .and_then(|p| p.strip_suffix("/attributes"))?;
    let id = u64::from_str_radix(id_hex, 16).ok()?;
    let a = serde_json::from_str::<Attrs>(&r.val).ok()?;
    Some(MemberAttributes {
        id,
        name: a.name,
        client_urls: a.client_urls,
    })
}

/// The attributes a normal entry publishes, decoded as apply decodes it: 3.5's
/// ClusterMemberAttrSet or 3.4's v2 request.
pub fn member_attributes(data: &[u8]) -> Option<MemberAttributes> {
    if data.is_empty() {
        return None;
    }
    if let Ok(r) = InternalRaftRequest::decode(data) {
        let a = r.cluster_member_attr_set?;
        let attrs = a.member_attributes.unwrap_or_default();
        return Some(MemberAttributes {
            id: a.member_id,
            name: attrs.name,
            client_urls: attrs.client_urls,
        });
    }
    Request::decode(data)
        .ok()
        .as_ref()
        .and_then(v2_member_attributes)
}

/// What a valid conf change does to the member records.
#[derive(Debug, Clone)]
pub enum MemberChange {
    /// Added (or promoted, or given new peer URLs): the member's new record.
    Put(Member),
    Removed(u64),
    /// A refused change: only the consistent index moves.
    Nothing,
}

/// Persists a conf change's effect on the `members` and `members_removed` buckets in the same
/// write as the entry's consistent index (skipped when the db already has the entry).
pub fn apply_member_change(store: &KvStore, e: &Entry, change: &MemberChange) {
    if e.index <= store.consistent_index() {
        return;
    }
    let mut w = store.write();
    match change {
        MemberChange::Put(m) => put_member(&mut w, m),
        MemberChange::Removed(id) => {
            for k in [
                crate::membership::member_key(*id),
                crate::membership::id_hex(*id),
            ] {
                w.delete_raw(buckets::MEMBERS, k.as_bytes());
            }
            let key = crate::membership::member_key(*id);
            w.put_raw(buckets::MEMBERS_REMOVED, key.as_bytes(), b"removed");
        }
        MemberChange::Nothing => {}
    }
    if let Err(err) = w.end(e.index, e.term) {
        tracing::error!(error = %err, "failed to persist a membership change");
    }
}

/// An alarm's name as etcd logs it ("CORRUPT", "NOSPACE").
fn alarm_name(alarm: i32) -> &'static str {
    AlarmType::try_from(alarm).map_or("UNKNOWN", |a| a.as_str_name())
}
