//! `etcdctl lease`: grant, revoke, timetolive, list and keep-alive, with etcd's hex lease IDs.
//! Keep-alive renews at a third of the TTL until the lease is gone.

use clap::{Args, Subcommand};
use proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseLeasesRequest, LeaseRevokeRequest,
    LeaseTimeToLiveRequest,
};
use tokio_stream::StreamExt;

use super::{Ctx, parse_lease_id};
use crate::client::Client;
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::printer::LeaseTtl;
use crate::util::parse_go_i64;

/// Lease related commands
#[derive(Subcommand, Debug)]
pub enum LeaseCmd {
    /// Creates leases
    #[command(override_usage = "<ttl>")]
    Grant(ArgsOnly),
    /// Revokes leases
    #[command(override_usage = "<leaseID>")]
    Revoke(ArgsOnly),
    /// Get lease information
    #[command(override_usage = "<leaseID> [options]")]
    Timetolive(TtlArgs),
    /// List all active leases
    List,
    /// Keeps leases alive (renew)
    #[command(override_usage = "[options] <leaseID>")]
    #[command(name = "keep-alive")]
    KeepAlive(KeepAliveArgs),
}

#[derive(Args, Debug)]
pub struct ArgsOnly {
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct TtlArgs {
    /// Get keys attached to this lease
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub keys: bool,
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct KeepAliveArgs {
    /// Resets the keep-alive time to its original value and exits immediately
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub once: bool,
    pub args: Vec<String>,
}

pub async fn run(ctx: &Ctx, cmd: &LeaseCmd) -> Result<()> {
    match cmd {
        LeaseCmd::Grant(a) => grant(ctx, a).await,
        LeaseCmd::Revoke(a) => revoke(ctx, a).await,
        LeaseCmd::Timetolive(a) => timetolive(ctx, a).await,
        LeaseCmd::List => list(ctx).await,
        LeaseCmd::KeepAlive(a) => keep_alive(ctx, a).await,
    }
}

async fn grant(ctx: &Ctx, a: &ArgsOnly) -> Result<()> {
    let Some(ttl) = a.args.first() else {
        return Err(CtlError::bad_args("lease grant command needs TTL argument"));
    };
    let ttl = parse_go_i64(ttl, 10).map_err(|e| CtlError::bad_args(format!("bad TTL ({e})")))?;
    let c = ctx.client().await?;
    let resp = c
        .unary(c.lease().lease_grant(LeaseGrantRequest { ttl, id: 0 }))
        .await
        .map_err(|e| CtlError::other(format!("failed to grant lease ({e})")))?;
    ctx.print(|p, w| p.lease_grant(w, &resp))
}

async fn revoke(ctx: &Ctx, a: &ArgsOnly) -> Result<()> {
    let Some(id) = a.args.first() else {
        return Err(CtlError::bad_args("lease revoke command needs 1 argument"));
    };
    let id = parse_lease_id(id, "bad lease ID arg")?;
    let c = ctx.client().await?;
    let resp = c
        .unary(c.lease().lease_revoke(LeaseRevokeRequest { id }))
        .await
        .map_err(|e| CtlError::other(format!("failed to revoke lease ({e})")))?;
    ctx.print(|p, w| p.lease_revoke(w, id, &resp))
}

async fn timetolive(ctx: &Ctx, a: &TtlArgs) -> Result<()> {
    let Some(id) = a.args.first() else {
        return Err(CtlError::bad_args(
            "lease timetolive command needs lease ID as argument",
        ));
    };
    let id = parse_lease_id(id, "bad lease ID arg")?;
    let c = ctx.client().await?;
    let resp = c
        .unary(
            c.lease()
                .lease_time_to_live(LeaseTimeToLiveRequest { id, keys: a.keys }),
        )
        .await?;
    let t = LeaseTtl {
        resp: &resp,
        keys_requested: a.keys,
    };
    ctx.print(|p, w| p.lease_ttl(w, &t))
}

async fn list(ctx: &Ctx) -> Result<()> {
    let c = ctx.client().await?;
    let resp = c
        .unary(c.lease().lease_leases(LeaseLeasesRequest {}))
        .await?;
    ctx.print(|p, w| p.lease_list(w, &resp))
}

/// Opens a keep-alive stream with the first renewal already queued: etcd answers a stream's
/// headers with its first message, so opening before sending would wait forever.
pub(super) async fn open_keep_alive(
    c: &Client,
    id: i64,
) -> Result<(
    tokio::sync::mpsc::Sender<LeaseKeepAliveRequest>,
    tonic::Streaming<proto::etcdserverpb::LeaseKeepAliveResponse>,
)> {
    let (tx, rx) = tokio::sync::mpsc::channel::<LeaseKeepAliveRequest>(4);
    let outbound = tokio_stream::wrappers::ReceiverStream::new(rx);
    tx.send(LeaseKeepAliveRequest { id })
        .await
        .map_err(|_| CtlError::other("keep-alive stream closed"))?;
    let mut lease = c.lease();
    let stream = tokio::time::timeout(c.command_timeout, lease.lease_keep_alive(outbound))
        .await
        .map_err(|_| CtlError::BadConnection("context deadline exceeded".into()))?
        .map_err(|s| CtlError::BadConnection(crate::error::status_message(&s)))?;
    Ok((tx, stream.into_inner()))
}

/// Renews a lease until it expires; a lost connection is re-made on whichever endpoint
/// answers (as etcd's client does), and a lease that expired meanwhile ends the command.
async fn keep_alive(ctx: &Ctx, a: &KeepAliveArgs) -> Result<()> {
    let Some(id) = a.args.first() else {
        return Err(CtlError::bad_args(
            "lease keep-alive command needs lease ID as argument",
        ));
    };
    let id = parse_lease_id(id, "bad lease ID arg")?;
    let c = ctx.client().await?;
    let (mut tx, mut stream) = open_keep_alive(&c, id).await?;
    let mut command_timeout = c.command_timeout;
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        let next = tokio::time::timeout(command_timeout, stream.next()).await;
        let resp = match next {
            Ok(Some(Ok(r))) => r,
            lost if a.once => {
                return Err(CtlError::BadConnection(match lost {
                    Ok(Some(Err(s))) => crate::error::status_message(&s),
                    Ok(None) => "keep-alive stream closed".into(),
                    _ => "context deadline exceeded".into(),
                }));
            }
            _ => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
                if let Ok(c) = Client::connect(&ctx.g).await
                    && let Ok(opened) = open_keep_alive(&c, id).await
                {
                    (tx, stream) = opened;
                    command_timeout = c.command_timeout;
                }
                continue;
            }
        };
        backoff = std::time::Duration::from_millis(100);
        if resp.ttl <= 0 {
            if a.once {
                return Err(CtlError::BadConnection(
                    "etcdserver: requested lease not found".into(),
                ));
            }
            println!("lease {id:016x} expired or revoked.");
            return Ok(());
        }
        ctx.print(|p, w| p.lease_keepalive(w, &resp))?;
        if a.once {
            return Ok(());
        }
        // Renew at a third of the TTL, as etcd's client does.
        let wait = std::time::Duration::from_millis((resp.ttl.max(1) as u64) * 1000 / 3);
        tokio::time::sleep(wait).await;
        // A send that fails means the stream is gone; the next read notices and reconnects.
        let _ = tx.send(LeaseKeepAliveRequest { id }).await;
    }
}
