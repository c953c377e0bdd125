//! `etcdctl del`: deletes a key or a range of keys, optionally returning what was deleted.
//! Ranges follow etcd's client: an end key, or --prefix, or --from-key.

use clap::Args;
use proto::etcdserverpb::DeleteRangeRequest;
use std::os::unix::ffi::OsStrExt;

use super::{Ctx, check_key_args, key_range};
use crate::error::Result;
use crate::global::go_bool;

/// Removes the specified key or range of keys [key, range_end)
#[derive(Args, Debug)]
pub struct DelArgs {
    /// delete keys with matching prefix
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub prefix: bool,
    /// return deleted key-value pairs
    #[arg(long = "prev-kv", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub prev_kv: bool,
    /// delete keys that are greater than or equal to the given key using byte compare
    #[arg(long = "from-key", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub from_key: bool,
    /// <key> [range_end]
    #[arg(value_parser = clap::value_parser!(std::ffi::OsString))]
    pub args: Vec<std::ffi::OsString>,
}

pub fn build_request(a: &DelArgs) -> Result<DeleteRangeRequest> {
    check_key_args("del", &a.args, a.prefix, a.from_key)?;
    let end = a.args.get(1).map(|s| s.as_bytes());
    let (key, range_end) = key_range(a.args[0].as_bytes(), end, a.prefix, a.from_key);
    Ok(DeleteRangeRequest {
        key,
        range_end,
        prev_kv: a.prev_kv,
    })
}

pub async fn run(ctx: &Ctx, a: &DelArgs) -> Result<()> {
    let req = build_request(a)?;
    let c = ctx.client().await?;
    let resp = c.unary(c.kv().delete_range(req)).await?;
    ctx.print(|p, w| p.del(w, &resp))
}
