//! `-w json`: Go's encoding/json of etcd's response structs, field for field, so that
//! programs parsing etcd's JSON parse ours (proto json names, zero values left out, base64 bytes).

use std::io::Write;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::response_op::Response;
use proto::mvccpb::{Event, KeyValue};

use super::{AuthAck, EpHashKv, EpHealth, EpStatus, GetOpts, LeaseTtl, Printer, RoleGet};
use crate::error::Result;
use crate::gojson::{Obj, array, bytes, string};
use crate::util::format_go_duration;

pub struct JsonPrinter;

/// `ResponseHeader`, every field `omitempty`.
pub fn header(h: &pb::ResponseHeader) -> String {
    Obj::new()
        .num_nz("cluster_id", h.cluster_id)
        .num_nz("member_id", h.member_id)
        .num_nz("revision", h.revision)
        .num_nz("raft_term", h.raft_term)
        .finish()
}

/// The header's fields flattened into `o`, as Go encodes an embedded `*ResponseHeader`.
fn flat_header(o: &mut Obj, h: Option<&pb::ResponseHeader>) {
    if let Some(h) = h {
        o.num_nz("cluster_id", h.cluster_id)
            .num_nz("member_id", h.member_id)
            .num_nz("revision", h.revision)
            .num_nz("raft_term", h.raft_term);
    }
}

fn opt_header(h: &Option<pb::ResponseHeader>) -> Option<String> {
    h.as_ref().map(header)
}

pub fn kv(k: &KeyValue) -> String {
    Obj::new()
        .bytes_nz("key", &k.key)
        .num_nz("create_revision", k.create_revision)
        .num_nz("mod_revision", k.mod_revision)
        .num_nz("version", k.version)
        .bytes_nz("value", &k.value)
        .num_nz("lease", k.lease)
        .finish()
}

fn kvs(list: &[KeyValue]) -> Vec<String> {
    list.iter().map(kv).collect()
}

fn range(r: &pb::RangeResponse) -> String {
    Obj::new()
        .opt("header", opt_header(&r.header))
        .arr_nz("kvs", kvs(&r.kvs))
        .bool_nz("more", r.more)
        .num_nz("count", r.count)
        .finish()
}

fn put(r: &pb::PutResponse) -> String {
    Obj::new()
        .opt("header", opt_header(&r.header))
        .opt("prev_kv", r.prev_kv.as_ref().map(kv))
        .finish()
}

fn del(r: &pb::DeleteRangeResponse) -> String {
    Obj::new()
        .opt("header", opt_header(&r.header))
        .num_nz("deleted", r.deleted)
        .arr_nz("prev_kvs", kvs(&r.prev_kvs))
        .finish()
}

fn txn(r: &pb::TxnResponse) -> String {
    let ops: Vec<String> = r
        .responses
        .iter()
        .map(|op| {
            // gogo's oneof wrappers have no json tags: Go names the fields after the types.
            let inner = match &op.response {
                Some(Response::ResponseRange(r)) => {
                    Some(Obj::new().raw("ResponseRange", &range(r)).finish())
                }
                Some(Response::ResponsePut(r)) => {
                    Some(Obj::new().raw("ResponsePut", &put(r)).finish())
                }
                Some(Response::ResponseDeleteRange(r)) => {
                    Some(Obj::new().raw("ResponseDeleteRange", &del(r)).finish())
                }
                Some(Response::ResponseTxn(r)) => {
                    Some(Obj::new().raw("ResponseTxn", &txn(r)).finish())
                }
                None => None,
            };
            Obj::new().opt("Response", inner).finish()
        })
        .collect();
    Obj::new()
        .opt("header", opt_header(&r.header))
        .bool_nz("succeeded", r.succeeded)
        .arr_nz("responses", ops)
        .finish()
}

fn event(e: &Event) -> String {
    Obj::new()
        .num_nz("type", e.r#type)
        .opt("kv", e.kv.as_ref().map(kv))
        .opt("prev_kv", e.prev_kv.as_ref().map(kv))
        .finish()
}

pub fn member(m: &pb::Member) -> String {
    let strs = |v: &[String]| v.iter().map(|s| string(s)).collect::<Vec<_>>();
    Obj::new()
        .num_nz("ID", m.id)
        .str_nz("name", &m.name)
        .arr_nz("peerURLs", strs(&m.peer_ur_ls))
        .arr_nz("clientURLs", strs(&m.client_ur_ls))
        .bool_nz("isLearner", m.is_learner)
        .finish()
}

fn members(list: &[pb::Member]) -> Vec<String> {
    list.iter().map(member).collect()
}

fn header_only(h: &Option<pb::ResponseHeader>) -> String {
    Obj::new().opt("header", opt_header(h)).finish()
}

fn line(w: &mut dyn Write, s: &str) -> Result<()> {
    writeln!(w, "{s}")?;
    Ok(())
}

/// The member-change responses: a header and the member list, nothing else.
fn header_and_members(
    w: &mut dyn Write,
    header: &Option<pb::ResponseHeader>,
    list: &[pb::Member],
) -> Result<()> {
    let s = Obj::new()
        .opt("header", opt_header(header))
        .arr_nz("members", members(list))
        .finish();
    line(w, &s)
}

pub fn role_get_json(r: &pb::AuthRoleGetResponse) -> String {
    let perms = r
        .perm
        .iter()
        .map(|p| {
            Obj::new()
                .num_nz("permType", p.perm_type)
                .bytes_nz("key", &p.key)
                .bytes_nz("range_end", &p.range_end)
                .finish()
        })
        .collect();
    Obj::new()
        .opt("header", opt_header(&r.header))
        .arr_nz("perm", perms)
        .finish()
}

impl Printer for JsonPrinter {
    fn name(&self) -> &'static str {
        "json"
    }

    fn get(&self, w: &mut dyn Write, r: &pb::RangeResponse, _o: &GetOpts) -> Result<()> {
        line(w, &range(r))
    }

    fn put(&self, w: &mut dyn Write, r: &pb::PutResponse) -> Result<()> {
        line(w, &put(r))
    }

    fn del(&self, w: &mut dyn Write, r: &pb::DeleteRangeResponse) -> Result<()> {
        line(w, &del(r))
    }

    fn txn(&self, w: &mut dyn Write, r: &pb::TxnResponse) -> Result<()> {
        line(w, &txn(r))
    }

    fn watch(&self, w: &mut dyn Write, r: &pb::WatchResponse) -> Result<()> {
        // clientv3.WatchResponse: exported Go fields without json tags.
        let events = if r.events.is_empty() {
            "null".to_string()
        } else {
            array(r.events.iter().map(event).collect())
        };
        let hdr = header(&r.header.unwrap_or_default());
        let s = Obj::new()
            .raw("Header", &hdr)
            .raw("Events", &events)
            .num("CompactRevision", r.compact_revision)
            .bool("Canceled", r.canceled)
            .bool("Created", r.created)
            .finish();
        line(w, &s)
    }

    fn lease_grant(&self, w: &mut dyn Write, r: &pb::LeaseGrantResponse) -> Result<()> {
        let mut o = Obj::new();
        flat_header(&mut o, r.header.as_ref());
        o.num("ID", r.id).num("TTL", r.ttl).str("Error", &r.error);
        line(w, &o.finish())
    }

    fn lease_revoke(&self, w: &mut dyn Write, _id: i64, r: &pb::LeaseRevokeResponse) -> Result<()> {
        line(w, &header_only(&r.header))
    }

    fn lease_ttl(&self, w: &mut dyn Write, t: &LeaseTtl) -> Result<()> {
        let r = t.resp;
        let mut o = Obj::new();
        flat_header(&mut o, r.header.as_ref());
        let keys = if r.keys.is_empty() {
            "null".to_string()
        } else {
            array(r.keys.iter().map(|k| bytes(k)).collect())
        };
        o.num("id", r.id)
            .num("ttl", r.ttl)
            .num("granted-ttl", r.granted_ttl)
            .raw("keys", &keys);
        line(w, &o.finish())
    }

    fn lease_list(&self, w: &mut dyn Write, r: &pb::LeaseLeasesResponse) -> Result<()> {
        let mut o = Obj::new();
        flat_header(&mut o, r.header.as_ref());
        let leases = r
            .leases
            .iter()
            .map(|l| Obj::new().num("id", l.id).finish())
            .collect();
        o.raw("leases", &array(leases));
        line(w, &o.finish())
    }

    fn lease_keepalive(&self, w: &mut dyn Write, r: &pb::LeaseKeepAliveResponse) -> Result<()> {
        let mut o = Obj::new();
        flat_header(&mut o, r.header.as_ref());
        o.num("ID", r.id).num("TTL", r.ttl);
        line(w, &o.finish())
    }

    fn member_add(&self, w: &mut dyn Write, r: &pb::MemberAddResponse) -> Result<()> {
        let s = Obj::new()
            .opt("header", opt_header(&r.header))
            .opt("member", r.member.as_ref().map(member))
            .arr_nz("members", members(&r.members))
            .finish();
        line(w, &s)
    }

    fn member_remove(
        &self,
        w: &mut dyn Write,
        _id: u64,
        r: &pb::MemberRemoveResponse,
    ) -> Result<()> {
        header_and_members(w, &r.header, &r.members)
    }

    fn member_update(
        &self,
        w: &mut dyn Write,
        _id: u64,
        r: &pb::MemberUpdateResponse,
    ) -> Result<()> {
        header_and_members(w, &r.header, &r.members)
    }

    fn member_promote(
        &self,
        w: &mut dyn Write,
        _id: u64,
        r: &pb::MemberPromoteResponse,
    ) -> Result<()> {
        header_and_members(w, &r.header, &r.members)
    }

    fn member_list(&self, w: &mut dyn Write, r: &pb::MemberListResponse) -> Result<()> {
        header_and_members(w, &r.header, &r.members)
    }

    fn endpoint_health(&self, w: &mut dyn Write, r: &[EpHealth]) -> Result<()> {
        let items = r
            .iter()
            .map(|h| {
                Obj::new()
                    .str("endpoint", &h.endpoint)
                    .bool("health", h.health)
                    .str("took", &format_go_duration(h.took))
                    .str_nz("error", &h.error)
                    .finish()
            })
            .collect();
        line(w, &array(items))
    }

    fn endpoint_status(&self, w: &mut dyn Write, r: &[EpStatus]) -> Result<()> {
        let items = r
            .iter()
            .map(|s| {
                let st = &s.resp;
                let errs = st.errors.iter().map(|e| string(e)).collect();
                let status = Obj::new()
                    .opt("header", opt_header(&st.header))
                    .str_nz("version", &st.version)
                    .num_nz("dbSize", st.db_size)
                    .num_nz("leader", st.leader)
                    .num_nz("raftIndex", st.raft_index)
                    .num_nz("raftTerm", st.raft_term)
                    .num_nz("raftAppliedIndex", st.raft_applied_index)
                    .arr_nz("errors", errs)
                    .num_nz("dbSizeInUse", st.db_size_in_use)
                    .bool_nz("isLearner", st.is_learner)
                    .finish();
                Obj::new()
                    .str("Endpoint", &s.endpoint)
                    .raw("Status", &status)
                    .finish()
            })
            .collect();
        line(w, &array(items))
    }

    fn endpoint_hashkv(&self, w: &mut dyn Write, r: &[EpHashKv]) -> Result<()> {
        let items = r
            .iter()
            .map(|h| {
                let hk = Obj::new()
                    .opt("header", opt_header(&h.resp.header))
                    .num_nz("hash", h.resp.hash)
                    .num_nz("compact_revision", h.resp.compact_revision)
                    // etcdctl 3.4 knows no hash_revision (a 3.5 field), so it never prints it.
                    .finish();
                Obj::new()
                    .str("Endpoint", &h.endpoint)
                    .raw("HashKV", &hk)
                    .finish()
            })
            .collect();
        line(w, &array(items))
    }

    fn alarm(&self, w: &mut dyn Write, r: &pb::AlarmResponse) -> Result<()> {
        let alarms = r
            .alarms
            .iter()
            .map(|a| {
                Obj::new()
                    .num_nz("memberID", a.member_id)
                    .num_nz("alarm", a.alarm)
                    .finish()
            })
            .collect();
        let s = Obj::new()
            .opt("header", opt_header(&r.header))
            .arr_nz("alarms", alarms)
            .finish();
        line(w, &s)
    }

    fn move_leader(
        &self,
        w: &mut dyn Write,
        _leader: u64,
        _target: u64,
        r: &pb::MoveLeaderResponse,
    ) -> Result<()> {
        line(w, &header_only(&r.header))
    }

    /// etcd 3.6's etcdctl prints the DowngradeResponse itself.
    fn downgrade(&self, w: &mut dyn Write, _verb: &str, r: &pb::DowngradeResponse) -> Result<()> {
        let s = Obj::new()
            .opt("header", opt_header(&r.header))
            .str_nz("version", &r.version)
            .finish();
        line(w, &s)
    }

    fn auth_ack(&self, w: &mut dyn Write, r: &AuthAck) -> Result<()> {
        line(w, &header_only(&r.header.cloned()))
    }

    fn role_get(&self, w: &mut dyn Write, r: &RoleGet) -> Result<()> {
        line(w, &role_get_json(r.resp))
    }

    fn role_list(&self, w: &mut dyn Write, r: &pb::AuthRoleListResponse) -> Result<()> {
        let roles = r.roles.iter().map(|s| string(s)).collect();
        let s = Obj::new()
            .opt("header", opt_header(&r.header))
            .arr_nz("roles", roles)
            .finish();
        line(w, &s)
    }

    fn user_get(&self, w: &mut dyn Write, _name: &str, r: &pb::AuthUserGetResponse) -> Result<()> {
        let roles = r.roles.iter().map(|s| string(s)).collect();
        let s = Obj::new()
            .opt("header", opt_header(&r.header))
            .arr_nz("roles", roles)
            .finish();
        line(w, &s)
    }

    fn user_list(&self, w: &mut dyn Write, r: &pb::AuthUserListResponse) -> Result<()> {
        let users = r.users.iter().map(|s| string(s)).collect();
        let s = Obj::new()
            .opt("header", opt_header(&r.header))
            .arr_nz("users", users)
            .finish();
        line(w, &s)
    }
}
