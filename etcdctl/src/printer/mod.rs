//! The output side of every command: one `Printer` trait with a method per response kind and
//! one implementation per `--write-out` format; commands never format output themselves.

mod fields;
mod json;
mod protobuf;
mod simple;
mod table;

use std::io::Write;
use std::time::Duration;

use proto::etcdserverpb as pb;

use crate::error::{CtlError, Result};
use crate::util::{format_go_duration, humanize_bytes};

/// The result of one endpoint's health check.
pub struct EpHealth {
    pub endpoint: String,
    pub health: bool,
    pub took: Duration,
    pub error: String,
}

/// One endpoint's status.
pub struct EpStatus {
    pub endpoint: String,
    pub resp: pb::StatusResponse,
}

/// One endpoint's KV hash.
pub struct EpHashKv {
    pub endpoint: String,
    pub resp: pb::HashKvResponse,
}

/// Which lease time-to-live details were asked for.
pub struct LeaseTtl<'a> {
    pub resp: &'a pb::LeaseTimeToLiveResponse,
    pub keys_requested: bool,
}

/// A role's permissions, printed by `role get` and `user get --detail`.
pub struct RoleGet<'a> {
    pub name: &'a str,
    pub resp: &'a pb::AuthRoleGetResponse,
}

/// What a write-only auth request returns: a message for people, a header for programs.
pub struct AuthAck<'a> {
    pub message: String,
    pub header: Option<&'a pb::ResponseHeader>,
    /// The response, protobuf-encoded, for `-w protobuf`.
    pub encoded: Vec<u8>,
}

/// One method per response kind. A format that cannot show a response keeps the default,
/// which fails as etcd's does: "<format> not supported as output format".
#[allow(unused_variables)]
pub trait Printer: Send + Sync {
    /// The format's name, for the unsupported-format error.
    fn name(&self) -> &'static str;

    fn unsupported(&self) -> CtlError {
        CtlError::BadFeature(format!("{} not supported as output format", self.name()))
    }

    fn get(&self, w: &mut dyn Write, r: &pb::RangeResponse, opts: &GetOpts) -> Result<()> {
        Err(self.unsupported())
    }
    fn put(&self, w: &mut dyn Write, r: &pb::PutResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn del(&self, w: &mut dyn Write, r: &pb::DeleteRangeResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn txn(&self, w: &mut dyn Write, r: &pb::TxnResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn watch(&self, w: &mut dyn Write, r: &pb::WatchResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn lease_grant(&self, w: &mut dyn Write, r: &pb::LeaseGrantResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn lease_revoke(&self, w: &mut dyn Write, id: i64, r: &pb::LeaseRevokeResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn lease_ttl(&self, w: &mut dyn Write, r: &LeaseTtl) -> Result<()> {
        Err(self.unsupported())
    }
    fn lease_list(&self, w: &mut dyn Write, r: &pb::LeaseLeasesResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn lease_keepalive(&self, w: &mut dyn Write, r: &pb::LeaseKeepAliveResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn member_add(&self, w: &mut dyn Write, r: &pb::MemberAddResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn member_remove(
        &self,
        w: &mut dyn Write,
        id: u64,
        r: &pb::MemberRemoveResponse,
    ) -> Result<()> {
        Err(self.unsupported())
    }
    fn member_update(
        &self,
        w: &mut dyn Write,
        id: u64,
        r: &pb::MemberUpdateResponse,
    ) -> Result<()> {
        Err(self.unsupported())
    }
    fn member_promote(
        &self,
        w: &mut dyn Write,
        id: u64,
        r: &pb::MemberPromoteResponse,
    ) -> Result<()> {
        Err(self.unsupported())
    }
    fn member_list(&self, w: &mut dyn Write, r: &pb::MemberListResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn endpoint_health(&self, w: &mut dyn Write, r: &[EpHealth]) -> Result<()> {
        Err(self.unsupported())
    }
    fn endpoint_status(&self, w: &mut dyn Write, r: &[EpStatus]) -> Result<()> {
        Err(self.unsupported())
    }
    fn endpoint_hashkv(&self, w: &mut dyn Write, r: &[EpHashKv]) -> Result<()> {
        Err(self.unsupported())
    }
    fn alarm(&self, w: &mut dyn Write, r: &pb::AlarmResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn move_leader(
        &self,
        w: &mut dyn Write,
        leader: u64,
        target: u64,
        r: &pb::MoveLeaderResponse,
    ) -> Result<()> {
        Err(self.unsupported())
    }
    /// `downgrade validate|enable|cancel` (`verb`).
    fn downgrade(&self, w: &mut dyn Write, verb: &str, r: &pb::DowngradeResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn auth_ack(&self, w: &mut dyn Write, r: &AuthAck) -> Result<()> {
        Err(self.unsupported())
    }
    fn role_get(&self, w: &mut dyn Write, r: &RoleGet) -> Result<()> {
        Err(self.unsupported())
    }
    fn role_list(&self, w: &mut dyn Write, r: &pb::AuthRoleListResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn user_get(&self, w: &mut dyn Write, name: &str, r: &pb::AuthUserGetResponse) -> Result<()> {
        Err(self.unsupported())
    }
    fn user_list(&self, w: &mut dyn Write, r: &pb::AuthUserListResponse) -> Result<()> {
        Err(self.unsupported())
    }
}

/// The parts of `get`'s flags that change how its result is shown.
#[derive(Default, Clone, Copy)]
pub struct GetOpts {
    pub print_value_only: bool,
}

/// Picks the printer for `--write-out`; `hex` applies to the simple format only, as etcd's.
pub fn new_printer(format: &str, hex: bool) -> Result<Box<dyn Printer>> {
    match format {
        "simple" => Ok(Box::new(simple::SimplePrinter { hex })),
        "json" => Ok(Box::new(json::JsonPrinter)),
        "fields" => Ok(Box::new(fields::FieldsPrinter)),
        "protobuf" => Ok(Box::new(protobuf::ProtobufPrinter)),
        "table" => Ok(Box::new(table::TablePrinter)),
        _ => Err(CtlError::BadFeature(
            "unsupported output format".to_string(),
        )),
    }
}

/// A table as a header and rows of cells, shared by the simple and table printers.
pub struct Rows {
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

pub fn member_list_rows(r: &pb::MemberListResponse) -> Rows {
    let rows = r
        .members
        .iter()
        .map(|m| {
            let status = if m.name.is_empty() {
                "unstarted"
            } else {
                "started"
            };
            vec![
                format!("{:x}", m.id),
                status.to_string(),
                m.name.clone(),
                m.peer_ur_ls.join(","),
                m.client_ur_ls.join(","),
                m.is_learner.to_string(),
            ]
        })
        .collect();
    Rows {
        header: vec![
            "ID",
            "STATUS",
            "NAME",
            "PEER ADDRS",
            "CLIENT ADDRS",
            "IS LEARNER",
        ],
        rows,
    }
}

pub fn endpoint_status_rows(r: &[EpStatus]) -> Rows {
    let rows = r
        .iter()
        .map(|s| {
            let hdr = s.resp.header.unwrap_or_default();
            vec![
                s.endpoint.clone(),
                format!("{:x}", hdr.member_id),
                s.resp.version.clone(),
                humanize_bytes(s.resp.db_size.max(0) as u64),
                (s.resp.leader == hdr.member_id).to_string(),
                s.resp.is_learner.to_string(),
                s.resp.raft_term.to_string(),
                s.resp.raft_index.to_string(),
                s.resp.raft_applied_index.to_string(),
                s.resp.errors.join(", "),
            ]
        })
        .collect();
    Rows {
        header: vec![
            "ENDPOINT",
            "ID",
            "VERSION",
            "DB SIZE",
            "IS LEADER",
            "IS LEARNER",
            "RAFT TERM",
            "RAFT INDEX",
            "RAFT APPLIED INDEX",
            "ERRORS",
        ],
        rows,
    }
}

pub fn endpoint_health_rows(r: &[EpHealth]) -> Rows {
    let rows = r
        .iter()
        .map(|h| {
            vec![
                h.endpoint.clone(),
                h.health.to_string(),
                format_go_duration(h.took),
                h.error.clone(),
            ]
        })
        .collect();
    Rows {
        header: vec!["ENDPOINT", "HEALTH", "TOOK", "ERROR"],
        rows,
    }
}

pub fn endpoint_hashkv_rows(r: &[EpHashKv]) -> Rows {
    let rows = r
        .iter()
        .map(|h| vec![h.endpoint.clone(), h.resp.hash.to_string()])
        .collect();
    Rows {
        header: vec!["ENDPOINT", "HASH"],
        rows,
    }
}

/// etcd's names for alarm types, as Go prints the enum.
pub fn alarm_name(a: i32) -> &'static str {
    match a {
        0 => "NONE",
        1 => "NOSPACE",
        2 => "CORRUPT",
        _ => "UNKNOWN",
    }
}

/// etcd's names for permission types.
pub fn perm_name(p: i32) -> &'static str {
    match p {
        0 => "READ",
        1 => "WRITE",
        2 => "READWRITE",
        _ => "UNKNOWN",
    }
}
