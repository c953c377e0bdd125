//! `etcdctl member`: add (printing the ETCD_* settings for the new member), remove, update,
//! list and promote cluster members; member IDs are hex on the command line.

use clap::{Args, Subcommand};
use proto::etcdserverpb::{
    MemberAddRequest, MemberListRequest, MemberPromoteRequest, MemberRemoveRequest,
    MemberUpdateRequest,
};

use super::Ctx;
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::util::parse_go_u64;

/// Membership related commands
#[derive(Subcommand, Debug)]
pub enum MemberCmd {
    /// Adds a member into the cluster
    #[command(override_usage = "<memberName> [options]")]
    Add(AddArgs),
    /// Removes a member from the cluster
    #[command(override_usage = "<memberID>")]
    Remove(IdArgs),
    /// Updates a member in the cluster
    #[command(override_usage = "<memberID> [options]")]
    Update(UpdateArgs),
    /// Lists all members in the cluster
    #[command(
        long_about = "When --write-out is set to simple, this command prints out comma-separated member lists for each endpoint.\nThe items in the lists are ID, Status, Name, Peer Addrs, Client Addrs, Is Learner."
    )]
    List,
    /// Promotes a non-voting member in the cluster
    #[command(
        override_usage = "<memberID>",
        long_about = "Promotes a non-voting learner member to a voting one in the cluster."
    )]
    Promote(IdArgs),
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// comma separated peer URLs for the new member.
    #[arg(verbatim_doc_comment)]
    #[arg(long = "peer-urls", default_value = "")]
    pub peer_urls: String,
    /// indicates if the new member is raft learner
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub learner: bool,
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// comma separated peer URLs for the updated member.
    #[arg(verbatim_doc_comment)]
    #[arg(long = "peer-urls", default_value = "")]
    pub peer_urls: String,
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct IdArgs {
    pub args: Vec<String>,
}

fn member_id(args: &[String]) -> Result<u64> {
    let Some(id) = args.first() else {
        return Err(CtlError::bad_args("member ID is not provided"));
    };
    parse_go_u64(id, 16)
        .map_err(|e| CtlError::bad_args(format!("bad member ID arg ({e}), expecting ID in Hex")))
}

pub async fn run(ctx: &Ctx, cmd: &MemberCmd) -> Result<()> {
    match cmd {
        MemberCmd::Add(a) => add(ctx, a).await,
        MemberCmd::Remove(a) => {
            let id = member_id(&a.args)?;
            let c = ctx.client().await?;
            let resp = c
                .unary(c.cluster().member_remove(MemberRemoveRequest { id }))
                .await?;
            ctx.print(|p, w| p.member_remove(w, id, &resp))
        }
        MemberCmd::Update(a) => {
            let id = member_id(&a.args)?;
            if a.peer_urls.is_empty() {
                return Err(CtlError::bad_args("member peer urls not provided"));
            }
            let urls = a.peer_urls.split(',').map(str::to_string).collect();
            let c = ctx.client().await?;
            let resp = c
                .unary(c.cluster().member_update(MemberUpdateRequest {
                    id,
                    peer_ur_ls: urls,
                }))
                .await?;
            ctx.print(|p, w| p.member_update(w, id, &resp))
        }
        MemberCmd::List => {
            let c = ctx.client().await?;
            let resp = c
                .unary(c.cluster().member_list(MemberListRequest::default()))
                .await?;
            ctx.print(|p, w| p.member_list(w, &resp))
        }
        MemberCmd::Promote(a) => {
            let id = member_id(&a.args)?;
            let c = ctx.client().await?;
            let resp = c
                .unary(c.cluster().member_promote(MemberPromoteRequest { id }))
                .await?;
            ctx.print(|p, w| p.member_promote(w, id, &resp))
        }
    }
}

async fn add(ctx: &Ctx, a: &AddArgs) -> Result<()> {
    let Some(name) = a.args.first() else {
        return Err(CtlError::bad_args("member name not provided"));
    };
    if a.peer_urls.is_empty() {
        return Err(CtlError::bad_args("member peer urls not provided"));
    }
    let urls: Vec<String> = a.peer_urls.split(',').map(str::to_string).collect();
    let c = ctx.client().await?;
    let resp = c
        .unary(c.cluster().member_add(MemberAddRequest {
            peer_ur_ls: urls.clone(),
            is_learner: a.learner,
        }))
        .await?;
    ctx.print(|p, w| p.member_add(w, &resp))?;
    if ctx.g.write_out == "simple" {
        // The settings the new member must start with, as etcd prints them.
        let new_id = resp.member.as_ref().map(|m| m.id).unwrap_or_default();
        let mut conf = Vec::new();
        for m in &resp.members {
            for u in &m.peer_ur_ls {
                let n = if m.id == new_id {
                    name.as_str()
                } else {
                    m.name.as_str()
                };
                conf.push(format!("{n}={u}"));
            }
        }
        println!();
        println!("ETCD_NAME={:?}", name);
        println!("ETCD_INITIAL_CLUSTER={:?}", conf.join(","));
        println!("ETCD_INITIAL_ADVERTISE_PEER_URLS={:?}", urls.join(","));
        println!("ETCD_INITIAL_CLUSTER_STATE=\"existing\"");
    }
    Ok(())
}
