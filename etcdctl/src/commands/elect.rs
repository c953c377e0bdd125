//! `etcdctl elect`: campaigns for leadership of a named election with a proposal value and
//! holds it until interrupted, or (`-l`) observes and prints each new leader.

use clap::Args;
use proto::etcdserverpb::{RangeRequest, RangeResponse};
use proto::v3electionpb::{CampaignRequest, LeaderRequest, ResignRequest};
use std::os::unix::ffi::OsStrExt;
use tokio_stream::StreamExt;

use super::Ctx;
use super::session::{Session, interrupted};
use crate::error::{CtlError, Result, status_message};
use crate::global::go_bool;

/// The campaign's session TTL in seconds: etcd's elect has no flag for it and uses its
/// client's default session.
const SESSION_TTL: i64 = 60;

/// Observes and participates in leader election
#[derive(Args, Debug)]
pub struct ElectArgs {
    /// observation mode
    #[arg(short = 'l', long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub listen: bool,
    /// <election-name> [proposal]
    #[arg(value_parser = clap::value_parser!(std::ffi::OsString))]
    pub args: Vec<std::ffi::OsString>,
}

pub async fn run(ctx: &Ctx, a: &ElectArgs) -> Result<()> {
    if a.args.is_empty() || a.args.len() > 2 {
        return Err(CtlError::bad_args(
            "elect takes one election name argument and an optional proposal argument",
        ));
    }
    let name = a.args[0].as_bytes().to_vec();
    match (a.listen, a.args.get(1)) {
        (false, None) => Err(CtlError::bad_args("no proposal argument but -l not set")),
        (true, Some(_)) => Err(CtlError::bad_args("proposal given but -l is set")),
        (true, None) => observe(ctx, name).await,
        (false, Some(value)) => campaign(ctx, name, value.as_bytes().to_vec(), SESSION_TTL).await,
    }
}

async fn observe(ctx: &Ctx, name: Vec<u8>) -> Result<()> {
    let c = ctx.client().await?;
    let mut stream = c
        .election()
        .observe(LeaderRequest { name })
        .await
        .map_err(|s| CtlError::other(status_message(&s)))?
        .into_inner();
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else {
                    return Err(CtlError::other("observe stream closed"));
                };
                let resp = msg.map_err(|s| CtlError::other(status_message(&s)))?;
                let r = RangeResponse { header: resp.header, kvs: resp.kv.into_iter().collect(), ..Default::default() };
                ctx.print(|p, w| p.get(w, &r, &Default::default()))?;
            }
            _ = interrupted() => return Ok(()),
        }
    }
}

async fn campaign(ctx: &Ctx, name: Vec<u8>, value: Vec<u8>, ttl: i64) -> Result<()> {
    let c = ctx.client().await?;
    let session = Session::start(&c, &ctx.g, ttl).await?;
    let req = CampaignRequest {
        name,
        lease: session.lease,
        value,
    };
    let mut election = c.election();
    let won = tokio::select! {
        r = election.campaign(req) => r,
        _ = interrupted() => {
            session.close(&c).await;
            return Ok(());
        }
    };
    let leader = match won {
        Ok(r) => r.into_inner().leader,
        Err(s) => {
            session.close(&c).await;
            return Err(s.into());
        }
    };
    let result = match &leader {
        Some(l) => {
            let got = c
                .unary(c.kv().range(RangeRequest {
                    key: l.key.clone(),
                    ..Default::default()
                }))
                .await;
            match got {
                Ok(resp) => ctx.print(|p, w| p.get(w, &resp, &Default::default())),
                Err(e) => Err(e),
            }
        }
        None => Err(CtlError::other("campaign returned no leader key")),
    };
    if result.is_ok() {
        interrupted().await;
    }
    let _ = c.unary(c.election().resign(ResignRequest { leader })).await;
    session.close(&c).await;
    result
}
