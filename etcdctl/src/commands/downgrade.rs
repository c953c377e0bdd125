//! `etcdctl downgrade validate|enable <TARGET_VERSION>` and `downgrade cancel`: etcd 3.6's
//! etcdctl commands for etcd 3.5's Maintenance.Downgrade (a cluster-wide job through raft).

use clap::{Args, Subcommand};
use proto::etcdserverpb::{DowngradeRequest, downgrade_request::DowngradeAction};

use super::Ctx;
use crate::error::{CtlError, Result};

/// Downgrade related commands. Use `etcdctl downgrade --help` to see subcommands
#[derive(Subcommand, Debug)]
pub enum DowngradeCmd {
    /// Validate downgrade capability before starting downgrade
    #[command(override_usage = "<TARGET_VERSION>")]
    Validate(VersionArgs),
    /// Start a downgrade action to cluster
    #[command(override_usage = "<TARGET_VERSION>")]
    Enable(VersionArgs),
    /// Cancel the ongoing downgrade action to cluster
    Cancel(VersionArgs),
}

#[derive(Args, Debug)]
pub struct VersionArgs {
    pub args: Vec<String>,
}

/// The one TARGET_VERSION argument, with etcdctl's messages for a wrong count or an empty one.
fn target(a: &VersionArgs) -> Result<&str> {
    match a.args.as_slice() {
        [] => Err(CtlError::bad_args("TARGET_VERSION not provided")),
        [v] if v.is_empty() => Err(CtlError::bad_args("target version not provided")),
        [v] => Ok(v),
        _ => Err(CtlError::bad_args("too many arguments")),
    }
}

pub async fn run(ctx: &Ctx, cmd: &DowngradeCmd) -> Result<()> {
    // As etcdctl: the arguments are checked before any connection is made; cancel takes none
    // and ignores what it is given.
    let (action, version) = match cmd {
        DowngradeCmd::Validate(a) => (DowngradeAction::Validate, target(a)?),
        DowngradeCmd::Enable(a) => (DowngradeAction::Enable, target(a)?),
        DowngradeCmd::Cancel(_) => (DowngradeAction::Cancel, ""),
    };
    let c = ctx.client().await?;
    let resp = c
        .unary(c.maintenance().downgrade(DowngradeRequest {
            action: action as i32,
            version: version.to_string(),
        }))
        .await?;
    let verb = match action {
        DowngradeAction::Validate => "validate",
        DowngradeAction::Enable => "enable",
        DowngradeAction::Cancel => "cancel",
    };
    ctx.print(|p, w| p.downgrade(w, verb, &resp))
}
