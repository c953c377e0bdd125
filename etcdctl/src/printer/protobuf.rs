//! `-w protobuf`: the response message's protobuf encoding written raw to stdout, for programs
//! that decode etcd's messages themselves.

use std::io::Write;

use prost::Message;
use proto::etcdserverpb as pb;

use super::{AuthAck, GetOpts, LeaseTtl, Printer, RoleGet};
use crate::error::Result;

pub struct ProtobufPrinter;

fn raw(w: &mut dyn Write, m: &impl Message) -> Result<()> {
    w.write_all(&m.encode_to_vec())?;
    Ok(())
}

/// etcd's Go client wraps lease responses in structs that embed the header; their protobuf
/// encoding is the header's alone.
fn header(w: &mut dyn Write, h: &Option<pb::ResponseHeader>) -> Result<()> {
    raw(w, &(*h).unwrap_or_default())
}

impl Printer for ProtobufPrinter {
    fn name(&self) -> &'static str {
        "protobuf"
    }

    fn get(&self, w: &mut dyn Write, r: &pb::RangeResponse, _o: &GetOpts) -> Result<()> {
        raw(w, r)
    }
    fn put(&self, w: &mut dyn Write, r: &pb::PutResponse) -> Result<()> {
        raw(w, r)
    }
    fn del(&self, w: &mut dyn Write, r: &pb::DeleteRangeResponse) -> Result<()> {
        raw(w, r)
    }
    fn txn(&self, w: &mut dyn Write, r: &pb::TxnResponse) -> Result<()> {
        raw(w, r)
    }
    fn watch(&self, w: &mut dyn Write, r: &pb::WatchResponse) -> Result<()> {
        // The Go client rebuilds the message from its own struct, which has no watch id.
        let m = pb::WatchResponse {
            header: r.header,
            events: r.events.clone(),
            compact_revision: r.compact_revision,
            canceled: r.canceled,
            created: r.created,
            ..Default::default()
        };
        raw(w, &m)
    }
    fn lease_grant(&self, w: &mut dyn Write, r: &pb::LeaseGrantResponse) -> Result<()> {
        header(w, &r.header)
    }
    fn lease_revoke(&self, w: &mut dyn Write, _id: i64, r: &pb::LeaseRevokeResponse) -> Result<()> {
        raw(w, r)
    }
    fn lease_ttl(&self, w: &mut dyn Write, t: &LeaseTtl) -> Result<()> {
        header(w, &t.resp.header)
    }
    fn lease_list(&self, w: &mut dyn Write, r: &pb::LeaseLeasesResponse) -> Result<()> {
        header(w, &r.header)
    }
    fn lease_keepalive(&self, w: &mut dyn Write, r: &pb::LeaseKeepAliveResponse) -> Result<()> {
        header(w, &r.header)
    }
    fn member_add(&self, w: &mut dyn Write, r: &pb::MemberAddResponse) -> Result<()> {
        raw(w, r)
    }
    fn member_remove(
        &self,
        w: &mut dyn Write,
        _id: u64,
        r: &pb::MemberRemoveResponse,
    ) -> Result<()> {
        raw(w, r)
    }
    fn member_update(
        &self,
        w: &mut dyn Write,
        _id: u64,
        r: &pb::MemberUpdateResponse,
    ) -> Result<()> {
        raw(w, r)
    }
    fn member_promote(
        &self,
        w: &mut dyn Write,
        _id: u64,
        r: &pb::MemberPromoteResponse,
    ) -> Result<()> {
        raw(w, r)
    }
    fn member_list(&self, w: &mut dyn Write, r: &pb::MemberListResponse) -> Result<()> {
        raw(w, r)
    }
    fn alarm(&self, w: &mut dyn Write, r: &pb::AlarmResponse) -> Result<()> {
        raw(w, r)
    }
    fn move_leader(
        &self,
        w: &mut dyn Write,
        _leader: u64,
        _target: u64,
        r: &pb::MoveLeaderResponse,
    ) -> Result<()> {
        raw(w, r)
    }
    fn downgrade(&self, w: &mut dyn Write, _verb: &str, r: &pb::DowngradeResponse) -> Result<()> {
        raw(w, r)
    }
    fn auth_ack(&self, w: &mut dyn Write, r: &AuthAck) -> Result<()> {
        w.write_all(&r.encoded)?;
        Ok(())
    }
    fn role_get(&self, w: &mut dyn Write, r: &RoleGet) -> Result<()> {
        raw(w, r.resp)
    }
    fn role_list(&self, w: &mut dyn Write, r: &pb::AuthRoleListResponse) -> Result<()> {
        raw(w, r)
    }
    fn user_get(&self, w: &mut dyn Write, _name: &str, r: &pb::AuthUserGetResponse) -> Result<()> {
        raw(w, r)
    }
    fn user_list(&self, w: &mut dyn Write, r: &pb::AuthUserListResponse) -> Result<()> {
        raw(w, r)
    }
}
