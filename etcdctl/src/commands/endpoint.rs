//! `etcdctl endpoint`: health, status and hashkv of each endpoint (or, with --cluster, of every
//! member's client URLs), asked one endpoint at a time.

use std::time::Instant;

use clap::{Args, Subcommand};
use proto::etcdserverpb::{HashKvRequest, MemberListRequest, RangeRequest, StatusRequest};

use super::Ctx;
use crate::client::Client;
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::printer::{EpHashKv, EpHealth, EpStatus};

/// Endpoint related commands
#[derive(Subcommand, Debug)]
pub enum EndpointCmd {
    /// Checks the healthiness of endpoints specified in `--endpoints` flag
    Health,
    /// Prints out the status of endpoints specified in `--endpoints` flag
    #[command(
        long_about = "When --write-out is set to simple, this command prints out comma-separated status lists for each endpoint.\nThe items in the lists are endpoint, ID, version, db size, is leader, is learner, raft term, raft index, raft applied index, errors."
    )]
    Status,
    /// Prints the KV history hash for each endpoint in --endpoints
    Hashkv(HashArgs),
}

/// The group with its --cluster flag, which every endpoint command inherits (as in etcd).
#[derive(Args, Debug)]
pub struct EndpointGroup {
    /// use all endpoints from the cluster member list
    #[arg(long, global = true, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub cluster: bool,
    #[command(subcommand)]
    pub cmd: EndpointCmd,
}

#[derive(Args, Debug)]
pub struct HashArgs {
    /// maximum revision to hash (default: all revisions)
    #[arg(long, default_value = "0", value_parser = super::go_i64)]
    pub rev: i64,
}

/// The endpoints a per-endpoint command visits: the flag's, or every member's client URLs.
pub async fn endpoints(ctx: &Ctx, cluster: bool) -> Result<Vec<String>> {
    if !cluster {
        return Ok(ctx.g.endpoints.clone());
    }
    let c = ctx.client().await?;
    let resp = c
        .unary(c.cluster().member_list(MemberListRequest::default()))
        .await?;
    let mut eps: Vec<String> = Vec::new();
    for m in &resp.members {
        for u in &m.client_ur_ls {
            if !eps.contains(u) {
                eps.push(u.clone());
            }
        }
    }
    Ok(eps)
}

pub async fn run(ctx: &Ctx, g: &EndpointGroup) -> Result<()> {
    match &g.cmd {
        EndpointCmd::Health => health(ctx, g.cluster).await,
        EndpointCmd::Status => status(ctx, g.cluster).await,
        EndpointCmd::Hashkv(a) => hashkv(ctx, g.cluster, a).await,
    }
}

async fn check_one(g: crate::global::GlobalArgs, ep: String) -> EpHealth {
    let start = Instant::now();
    let mut h = EpHealth {
        endpoint: ep.clone(),
        health: false,
        took: std::time::Duration::ZERO,
        error: String::new(),
    };
    let result = async {
        let c = Client::connect_one(&g, &ep).await?;
        let got = c
            .unary(c.kv().range(RangeRequest {
                key: b"health".to_vec(),
                ..Default::default()
            }))
            .await;
        match got {
            // A cluster with auth refuses the read, which still proves it commits.
            Ok(_) => {}
            Err(CtlError::Other(m)) if m == "etcdserver: permission denied" => {}
            Err(e) => return Err(e),
        }
        // etcd 3.4 does not count raised alarms against health (3.5 does); we follow 3.4.
        Ok(())
    }
    .await;
    h.took = start.elapsed();
    match result {
        Ok(()) => h.health = true,
        Err(e) => h.error = e.to_string(),
    }
    h
}

async fn health(ctx: &Ctx, cluster: bool) -> Result<()> {
    let eps = endpoints(ctx, cluster).await?;
    let mut set = tokio::task::JoinSet::new();
    for ep in eps {
        set.spawn(check_one(ctx.g.clone(), ep));
    }
    // Results in the order the checks finish, as etcd reports them.
    let mut results = Vec::new();
    while let Some(r) = set.join_next().await {
        results.push(r.map_err(|e| CtlError::other(format!("health check task failed: {e}")))?);
    }
    let unhealthy = results.iter().any(|h| !h.health);
    ctx.print(|p, w| p.endpoint_health(w, &results))?;
    if unhealthy {
        return Err(CtlError::other("unhealthy cluster"));
    }
    Ok(())
}

async fn status(ctx: &Ctx, cluster: bool) -> Result<()> {
    let eps = endpoints(ctx, cluster).await?;
    let mut results = Vec::new();
    let mut failed = false;
    for ep in eps {
        let got = async {
            let c = Client::connect_one(&ctx.g, &ep).await?;
            c.unary(c.maintenance().status(StatusRequest {})).await
        }
        .await;
        match got {
            Ok(resp) => results.push(EpStatus { endpoint: ep, resp }),
            Err(e) => {
                eprintln!("Failed to get the status of endpoint {ep} ({e})");
                failed = true;
            }
        }
    }
    ctx.print(|p, w| p.endpoint_status(w, &results))?;
    if failed {
        // The failures were reported above; etcd exits with no further message.
        std::process::exit(crate::error::EXIT_ERROR);
    }
    Ok(())
}

async fn hashkv(ctx: &Ctx, cluster: bool, a: &HashArgs) -> Result<()> {
    let eps = endpoints(ctx, cluster).await?;
    let mut results = Vec::new();
    let mut last_err = None;
    for ep in eps {
        let got = async {
            let c = Client::connect_one(&ctx.g, &ep).await?;
            c.unary(c.maintenance().hash_kv(HashKvRequest { revision: a.rev }))
                .await
        }
        .await;
        match got {
            Ok(resp) => results.push(EpHashKv { endpoint: ep, resp }),
            Err(e) => {
                eprintln!("Failed to get the hash of endpoint {ep} ({e})");
                last_err = Some(e);
            }
        }
    }
    ctx.print(|p, w| p.endpoint_hashkv(w, &results))?;
    match last_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
