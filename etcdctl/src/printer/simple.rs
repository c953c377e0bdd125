//! `-w simple`: the line-oriented format people read (and shell scripts parse), etcd's default.
//! Keys and values are printed raw, or as `\xNN` escapes with `--hex`.

use std::io::Write;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::response_op::Response;
use proto::mvccpb::KeyValue;

use super::{
    AuthAck, EpHashKv, EpHealth, EpStatus, GetOpts, LeaseTtl, Printer, RoleGet, alarm_name,
    endpoint_hashkv_rows, endpoint_status_rows, member_list_rows,
};
use crate::error::Result;
use crate::util::{format_go_duration, hex_escape, prefix_end};

pub struct SimplePrinter {
    pub hex: bool,
}

impl SimplePrinter {
    fn bytes(&self, w: &mut dyn Write, b: &[u8]) -> Result<()> {
        if self.hex {
            writeln!(w, "{}", hex_escape(b))?;
        } else {
            w.write_all(b)?;
            writeln!(w)?;
        }
        Ok(())
    }

    fn kv(&self, w: &mut dyn Write, kv: &KeyValue, opts: &GetOpts) -> Result<()> {
        if !opts.print_value_only {
            self.bytes(w, &kv.key)?;
        }
        self.bytes(w, &kv.value)
    }

    fn response_op(&self, w: &mut dyn Write, r: &Response) -> Result<()> {
        match r {
            Response::ResponseRange(r) => self.get(w, r, &GetOpts::default()),
            Response::ResponsePut(r) => self.put(w, r),
            Response::ResponseDeleteRange(r) => self.del(w, r),
            Response::ResponseTxn(r) => self.txn(w, r),
        }
    }
}

/// How `role get` shows one permission's range.
fn perm_range(key: &[u8], end: &[u8]) -> String {
    let k = String::from_utf8_lossy(key);
    if end.is_empty() {
        return k.to_string();
    }
    if end == [0] {
        return format!("[{k}, <open ended>");
    }
    let e = String::from_utf8_lossy(end);
    if prefix_end(key) == end {
        return format!("[{k}, {e}) (prefix {k})");
    }
    format!("[{k}, {e})")
}

fn write_role(w: &mut dyn Write, r: &RoleGet) -> Result<()> {
    writeln!(w, "Role {}", r.name)?;
    writeln!(w, "KV Read:")?;
    for p in &r.resp.perm {
        if p.perm_type == 0 || p.perm_type == 2 {
            writeln!(w, "\t{}", perm_range(&p.key, &p.range_end))?;
        }
    }
    writeln!(w, "KV Write:")?;
    for p in &r.resp.perm {
        if p.perm_type == 1 || p.perm_type == 2 {
            writeln!(w, "\t{}", perm_range(&p.key, &p.range_end))?;
        }
    }
    Ok(())
}

impl Printer for SimplePrinter {
    fn name(&self) -> &'static str {
        "simple"
    }

    fn get(&self, w: &mut dyn Write, r: &pb::RangeResponse, opts: &GetOpts) -> Result<()> {
        for kv in &r.kvs {
            self.kv(w, kv, opts)?;
        }
        Ok(())
    }

    fn put(&self, w: &mut dyn Write, r: &pb::PutResponse) -> Result<()> {
        writeln!(w, "OK")?;
        if let Some(kv) = &r.prev_kv {
            self.kv(w, kv, &GetOpts::default())?;
        }
        Ok(())
    }

    fn del(&self, w: &mut dyn Write, r: &pb::DeleteRangeResponse) -> Result<()> {
        writeln!(w, "{}", r.deleted)?;
        for kv in &r.prev_kvs {
            self.kv(w, kv, &GetOpts::default())?;
        }
        Ok(())
    }

    fn txn(&self, w: &mut dyn Write, r: &pb::TxnResponse) -> Result<()> {
        writeln!(w, "{}", if r.succeeded { "SUCCESS" } else { "FAILURE" })?;
        for op in &r.responses {
            writeln!(w)?;
            if let Some(resp) = &op.response {
                self.response_op(w, resp)?;
            }
        }
        Ok(())
    }

    fn watch(&self, w: &mut dyn Write, r: &pb::WatchResponse) -> Result<()> {
        for ev in &r.events {
            writeln!(w, "{}", if ev.r#type == 1 { "DELETE" } else { "PUT" })?;
            if let Some(prev) = &ev.prev_kv {
                self.kv(w, prev, &GetOpts::default())?;
            }
            if let Some(kv) = &ev.kv {
                self.kv(w, kv, &GetOpts::default())?;
            }
        }
        Ok(())
    }

    fn lease_grant(&self, w: &mut dyn Write, r: &pb::LeaseGrantResponse) -> Result<()> {
        writeln!(w, "lease {:016x} granted with TTL({}s)", r.id, r.ttl)?;
        Ok(())
    }

    fn lease_revoke(&self, w: &mut dyn Write, id: i64, _r: &pb::LeaseRevokeResponse) -> Result<()> {
        writeln!(w, "lease {id:016x} revoked")?;
        Ok(())
    }

    fn lease_ttl(&self, w: &mut dyn Write, t: &LeaseTtl) -> Result<()> {
        let r = t.resp;
        if r.ttl == -1 {
            writeln!(w, "lease {:016x} already expired", r.id)?;
            return Ok(());
        }
        write!(
            w,
            "lease {:016x} granted with TTL({}s), remaining({}s)",
            r.id, r.granted_ttl, r.ttl
        )?;
        if t.keys_requested {
            let keys: Vec<String> = r
                .keys
                .iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            write!(w, ", attached keys([{}])", keys.join(" "))?;
        }
        writeln!(w)?;
        Ok(())
    }

    fn lease_list(&self, w: &mut dyn Write, r: &pb::LeaseLeasesResponse) -> Result<()> {
        writeln!(w, "found {} leases", r.leases.len())?;
        for l in &r.leases {
            writeln!(w, "{:016x}", l.id)?;
        }
        Ok(())
    }

    fn lease_keepalive(&self, w: &mut dyn Write, r: &pb::LeaseKeepAliveResponse) -> Result<()> {
        writeln!(w, "lease {:016x} keepalived with TTL({})", r.id, r.ttl)?;
        Ok(())
    }

    fn member_add(&self, w: &mut dyn Write, r: &pb::MemberAddResponse) -> Result<()> {
        let id = r.member.as_ref().map(|m| m.id).unwrap_or_default();
        let cid = r.header.as_ref().map(|h| h.cluster_id).unwrap_or_default();
        writeln!(w, "Member {id:16x} added to cluster {cid:16x}")?;
        Ok(())
    }

    fn member_remove(
        &self,
        w: &mut dyn Write,
        id: u64,
        r: &pb::MemberRemoveResponse,
    ) -> Result<()> {
        let cid = r.header.as_ref().map(|h| h.cluster_id).unwrap_or_default();
        writeln!(w, "Member {id:16x} removed from cluster {cid:16x}")?;
        Ok(())
    }

    fn member_update(
        &self,
        w: &mut dyn Write,
        id: u64,
        r: &pb::MemberUpdateResponse,
    ) -> Result<()> {
        let cid = r.header.as_ref().map(|h| h.cluster_id).unwrap_or_default();
        writeln!(w, "Member {id:16x} updated in cluster {cid:16x}")?;
        Ok(())
    }

    fn member_promote(
        &self,
        w: &mut dyn Write,
        id: u64,
        r: &pb::MemberPromoteResponse,
    ) -> Result<()> {
        let cid = r.header.as_ref().map(|h| h.cluster_id).unwrap_or_default();
        writeln!(w, "Member {id:16x} promoted in cluster {cid:16x}")?;
        Ok(())
    }

    fn member_list(&self, w: &mut dyn Write, r: &pb::MemberListResponse) -> Result<()> {
        for row in member_list_rows(r).rows {
            writeln!(w, "{}", row.join(", "))?;
        }
        Ok(())
    }

    fn endpoint_health(&self, w: &mut dyn Write, r: &[EpHealth]) -> Result<()> {
        // etcd's simple format reports health on stderr, healthy or not.
        let _ = w;
        for h in r {
            if h.health {
                eprintln!(
                    "{} is healthy: successfully committed proposal: took = {}",
                    h.endpoint,
                    format_go_duration(h.took)
                );
            } else {
                eprintln!(
                    "{} is unhealthy: failed to commit proposal: {}",
                    h.endpoint, h.error
                );
            }
        }
        Ok(())
    }

    fn endpoint_status(&self, w: &mut dyn Write, r: &[EpStatus]) -> Result<()> {
        for row in endpoint_status_rows(r).rows {
            writeln!(w, "{}", row.join(", "))?;
        }
        Ok(())
    }

    fn endpoint_hashkv(&self, w: &mut dyn Write, r: &[EpHashKv]) -> Result<()> {
        for row in endpoint_hashkv_rows(r).rows {
            writeln!(w, "{}", row.join(", "))?;
        }
        Ok(())
    }

    fn alarm(&self, w: &mut dyn Write, r: &pb::AlarmResponse) -> Result<()> {
        for a in &r.alarms {
            writeln!(w, "memberID:{} alarm:{} ", a.member_id, alarm_name(a.alarm))?;
        }
        Ok(())
    }

    fn move_leader(
        &self,
        w: &mut dyn Write,
        leader: u64,
        target: u64,
        _r: &pb::MoveLeaderResponse,
    ) -> Result<()> {
        writeln!(w, "Leadership transferred from {leader:x} to {target:x}")?;
        Ok(())
    }

    fn downgrade(&self, w: &mut dyn Write, verb: &str, r: &pb::DowngradeResponse) -> Result<()> {
        writeln!(w, "Downgrade {verb} success, cluster version {}", r.version)?;
        Ok(())
    }

    fn auth_ack(&self, w: &mut dyn Write, r: &AuthAck) -> Result<()> {
        writeln!(w, "{}", r.message)?;
        Ok(())
    }

    fn role_get(&self, w: &mut dyn Write, r: &RoleGet) -> Result<()> {
        write_role(w, r)
    }

    fn role_list(&self, w: &mut dyn Write, r: &pb::AuthRoleListResponse) -> Result<()> {
        for role in &r.roles {
            writeln!(w, "{role}")?;
        }
        Ok(())
    }

    fn user_get(&self, w: &mut dyn Write, name: &str, r: &pb::AuthUserGetResponse) -> Result<()> {
        writeln!(w, "User: {name}")?;
        writeln!(w, "Roles: {}", r.roles.join(" "))?;
        Ok(())
    }

    fn user_list(&self, w: &mut dyn Write, r: &pb::AuthUserListResponse) -> Result<()> {
        for u in &r.users {
            writeln!(w, "{u}")?;
        }
        Ok(())
    }
}
