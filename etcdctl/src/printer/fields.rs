//! `-w fields`: one `"Name" : value` line per field, for grep and awk; strings and bytes are
//! Go-quoted (%q), numbers and booleans bare.

use std::io::Write;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::response_op::Response;
use proto::mvccpb::KeyValue;

use super::{
    AuthAck, EpHashKv, EpHealth, EpStatus, GetOpts, LeaseTtl, Printer, RoleGet, alarm_name,
    perm_name,
};
use crate::error::Result;
use crate::util::{format_go_duration, go_quote};

pub struct FieldsPrinter;

fn hdr(w: &mut dyn Write, h: &Option<pb::ResponseHeader>) -> Result<()> {
    let h = (*h).unwrap_or_default();
    writeln!(w, "\"ClusterID\" : {}", h.cluster_id)?;
    writeln!(w, "\"MemberID\" : {}", h.member_id)?;
    writeln!(w, "\"Revision\" : {}", h.revision)?;
    writeln!(w, "\"RaftTerm\" : {}", h.raft_term)?;
    Ok(())
}

fn kv(w: &mut dyn Write, prefix: &str, k: &KeyValue) -> Result<()> {
    writeln!(w, "\"{prefix}Key\" : {}", go_quote(&k.key))?;
    writeln!(w, "\"{prefix}CreateRevision\" : {}", k.create_revision)?;
    writeln!(w, "\"{prefix}ModRevision\" : {}", k.mod_revision)?;
    writeln!(w, "\"{prefix}Version\" : {}", k.version)?;
    writeln!(w, "\"{prefix}Value\" : {}", go_quote(&k.value))?;
    writeln!(w, "\"{prefix}Lease\" : {}", k.lease)?;
    Ok(())
}

fn members(w: &mut dyn Write, list: &[pb::Member]) -> Result<()> {
    for m in list {
        writeln!(w, "\"ID\" : {}", m.id)?;
        writeln!(w, "\"Name\" : {}", go_quote(m.name.as_bytes()))?;
        for u in &m.peer_ur_ls {
            writeln!(w, "\"PeerURL\" : {}", go_quote(u.as_bytes()))?;
        }
        for u in &m.client_ur_ls {
            writeln!(w, "\"ClientURL\" : {}", go_quote(u.as_bytes()))?;
        }
        writeln!(w, "\"IsLearner\" : {}", m.is_learner)?;
        writeln!(w)?;
    }
    Ok(())
}

/// Go's `%v` of a string slice: `[a b]`.
fn go_slice(v: &[String]) -> String {
    format!("[{}]", v.join(" "))
}

fn role_perms(w: &mut dyn Write, r: &pb::AuthRoleGetResponse) -> Result<()> {
    hdr(w, &r.header)?;
    for p in &r.perm {
        writeln!(w, "\"PermType\" :  {}", perm_name(p.perm_type))?;
        writeln!(w, "\"Key\" : {}", go_quote(&p.key))?;
        writeln!(w, "\"RangeEnd\" : {}", go_quote(&p.range_end))?;
    }
    Ok(())
}

impl Printer for FieldsPrinter {
    fn name(&self) -> &'static str {
        "fields"
    }

    fn get(&self, w: &mut dyn Write, r: &pb::RangeResponse, _o: &GetOpts) -> Result<()> {
        hdr(w, &r.header)?;
        for k in &r.kvs {
            kv(w, "", k)?;
        }
        writeln!(w, "\"More\" : {}", r.more)?;
        writeln!(w, "\"Count\" : {}", r.count)?;
        Ok(())
    }

    fn put(&self, w: &mut dyn Write, r: &pb::PutResponse) -> Result<()> {
        hdr(w, &r.header)?;
        if let Some(p) = &r.prev_kv {
            kv(w, "Prev", p)?;
        }
        Ok(())
    }

    fn del(&self, w: &mut dyn Write, r: &pb::DeleteRangeResponse) -> Result<()> {
        hdr(w, &r.header)?;
        writeln!(w, "\"Deleted\" : {}", r.deleted)?;
        for p in &r.prev_kvs {
            kv(w, "Prev", p)?;
        }
        Ok(())
    }

    fn txn(&self, w: &mut dyn Write, r: &pb::TxnResponse) -> Result<()> {
        hdr(w, &r.header)?;
        writeln!(w, "\"Succeeded\" : {}", r.succeeded)?;
        for op in &r.responses {
            match &op.response {
                Some(Response::ResponseRange(r)) => self.get(w, r, &GetOpts::default())?,
                Some(Response::ResponsePut(r)) => self.put(w, r)?,
                Some(Response::ResponseDeleteRange(r)) => self.del(w, r)?,
                Some(Response::ResponseTxn(r)) => self.txn(w, r)?,
                None => {}
            }
        }
        Ok(())
    }

    fn watch(&self, w: &mut dyn Write, r: &pb::WatchResponse) -> Result<()> {
        hdr(w, &r.header)?;
        for e in &r.events {
            writeln!(
                w,
                "\"Type\" : {}",
                if e.r#type == 1 { "DELETE" } else { "PUT" }
            )?;
            if let Some(p) = &e.prev_kv {
                kv(w, "Prev", p)?;
            }
            if let Some(k) = &e.kv {
                kv(w, "", k)?;
            }
        }
        Ok(())
    }

    fn lease_grant(&self, w: &mut dyn Write, r: &pb::LeaseGrantResponse) -> Result<()> {
        hdr(w, &r.header)?;
        writeln!(w, "\"ID\" : {}", r.id)?;
        writeln!(w, "\"TTL\" : {}", r.ttl)?;
        Ok(())
    }

    fn lease_revoke(&self, w: &mut dyn Write, _id: i64, r: &pb::LeaseRevokeResponse) -> Result<()> {
        hdr(w, &r.header)
    }

    fn lease_ttl(&self, w: &mut dyn Write, t: &LeaseTtl) -> Result<()> {
        let r = t.resp;
        hdr(w, &r.header)?;
        writeln!(w, "\"ID\" : {}", r.id)?;
        writeln!(w, "\"TTL\" : {}", r.ttl)?;
        writeln!(w, "\"GrantedTTL\" : {}", r.granted_ttl)?;
        for k in &r.keys {
            writeln!(w, "\"Key\" : {}", go_quote(k))?;
        }
        Ok(())
    }

    fn lease_list(&self, w: &mut dyn Write, r: &pb::LeaseLeasesResponse) -> Result<()> {
        hdr(w, &r.header)?;
        for l in &r.leases {
            writeln!(w, "\"ID\" : {}", l.id)?;
        }
        Ok(())
    }

    fn lease_keepalive(&self, w: &mut dyn Write, r: &pb::LeaseKeepAliveResponse) -> Result<()> {
        hdr(w, &r.header)?;
        writeln!(w, "\"ID\" : {}", r.id)?;
        writeln!(w, "\"TTL\" : {}", r.ttl)?;
        Ok(())
    }

    fn member_list(&self, w: &mut dyn Write, r: &pb::MemberListResponse) -> Result<()> {
        hdr(w, &r.header)?;
        members(w, &r.members)
    }

    fn endpoint_health(&self, w: &mut dyn Write, r: &[EpHealth]) -> Result<()> {
        for h in r {
            writeln!(w, "\"Endpoint\" : {}", go_quote(h.endpoint.as_bytes()))?;
            writeln!(w, "\"Health\" : {}", h.health)?;
            writeln!(w, "\"Took\" : {}", format_go_duration(h.took))?;
            writeln!(w, "\"Error\" : {}", h.error)?;
            writeln!(w)?;
        }
        Ok(())
    }

    fn endpoint_status(&self, w: &mut dyn Write, r: &[EpStatus]) -> Result<()> {
        for s in r {
            let st = &s.resp;
            hdr(w, &st.header)?;
            writeln!(w, "\"Version\" : {}", go_quote(st.version.as_bytes()))?;
            writeln!(w, "\"DBSize\" : {}", st.db_size)?;
            writeln!(w, "\"Leader\" : {}", st.leader)?;
            writeln!(w, "\"IsLearner\" : {}", st.is_learner)?;
            writeln!(w, "\"RaftIndex\" : {}", st.raft_index)?;
            writeln!(w, "\"RaftTerm\" : {}", st.raft_term)?;
            writeln!(w, "\"RaftAppliedIndex\" : {}", st.raft_applied_index)?;
            writeln!(w, "\"Errors\" : {}", go_slice(&st.errors))?;
            writeln!(w, "\"Endpoint\" : {}", go_quote(s.endpoint.as_bytes()))?;
            writeln!(w)?;
        }
        Ok(())
    }

    fn endpoint_hashkv(&self, w: &mut dyn Write, r: &[EpHashKv]) -> Result<()> {
        for h in r {
            hdr(w, &h.resp.header)?;
            writeln!(w, "\"Endpoint\" : {}", go_quote(h.endpoint.as_bytes()))?;
            writeln!(w, "\"Hash\" : {}", h.resp.hash)?;
            writeln!(w)?;
        }
        Ok(())
    }

    fn alarm(&self, w: &mut dyn Write, r: &pb::AlarmResponse) -> Result<()> {
        hdr(w, &r.header)?;
        for a in &r.alarms {
            writeln!(w, "\"MemberID\" : {}", a.member_id)?;
            writeln!(w, "\"AlarmType\" : {}", alarm_name(a.alarm))?;
        }
        Ok(())
    }

    fn auth_ack(&self, w: &mut dyn Write, r: &AuthAck) -> Result<()> {
        hdr(w, &r.header.cloned())
    }

    fn role_get(&self, w: &mut dyn Write, r: &RoleGet) -> Result<()> {
        role_perms(w, r.resp)
    }

    fn role_list(&self, w: &mut dyn Write, r: &pb::AuthRoleListResponse) -> Result<()> {
        hdr(w, &r.header)?;
        let roles: Vec<String> = r.roles.iter().map(|x| go_quote(x.as_bytes())).collect();
        writeln!(w, "\"Roles\" : {}", roles.join(" "))?;
        Ok(())
    }
}
