//! `etcdctl compaction`: discards the key-value history before a revision.
//! --physical waits until the old revisions are really removed from the backend.

use clap::Args;
use proto::etcdserverpb::CompactionRequest;

use super::Ctx;
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::util::parse_go_i64;

/// Compacts the event history in etcd
#[derive(Args, Debug)]
pub struct CompactionArgs {
    /// 'true' to wait for compaction to physically remove all old revisions
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub physical: bool,
    pub args: Vec<String>,
}

pub async fn run(ctx: &Ctx, a: &CompactionArgs) -> Result<()> {
    let Some(rev) = a.args.first() else {
        return Err(CtlError::bad_args("compaction command needs 1 argument"));
    };
    let revision = parse_go_i64(rev, 10).map_err(CtlError::Other)?;
    let c = ctx.client().await?;
    c.unary(c.kv().compact(CompactionRequest {
        revision,
        physical: a.physical,
    }))
    .await?;
    // etcd prints this line whatever the output format.
    println!("compacted revision {revision}");
    Ok(())
}
