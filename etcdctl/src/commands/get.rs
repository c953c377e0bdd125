//! `etcdctl get`: reads a key or a range of keys, with etcd's sorting, limits, revisions and
//! key-only/count-only views.

use clap::Args;
use proto::etcdserverpb::{RangeRequest, range_request::SortOrder, range_request::SortTarget};
use std::os::unix::ffi::OsStrExt;

use super::{Ctx, check_key_args, key_range};
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::printer::GetOpts;

/// Gets the key or a range of keys
#[derive(Args, Debug)]
pub struct GetArgs {
    /// Linearizable(l) or Serializable(s)
    #[arg(long, default_value = "l")]
    pub consistency: String,
    /// Order of results; ASCEND or DESCEND (ASCEND by default)
    #[arg(long, default_value = "")]
    pub order: String,
    /// Sort target; CREATE, KEY, MODIFY, VALUE, or VERSION
    #[arg(long = "sort-by", default_value = "")]
    pub sort_by: String,
    /// Maximum number of results
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = super::go_i64)]
    pub limit: i64,
    /// Get keys with matching prefix
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub prefix: bool,
    /// Get keys that are greater than or equal to the given key using byte compare
    #[arg(long = "from-key", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub from_key: bool,
    /// Specify the kv revision
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = super::go_i64)]
    pub rev: i64,
    /// Get only the keys
    #[arg(long = "keys-only", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub keys_only: bool,
    /// Get only the count
    #[arg(long = "count-only", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub count_only: bool,
    /// Only write values when using the "simple" output format
    #[arg(long = "print-value-only", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub print_value_only: bool,
    /// Restrict results to kvs with modified revision greater or equal than the supplied revision
    #[arg(long = "min-mod-rev", default_value = "0", allow_hyphen_values = true, value_parser = super::go_i64)]
    pub min_mod_rev: i64,
    /// Restrict results to kvs with modified revision less than or equal to the supplied revision
    #[arg(long = "max-mod-rev", default_value = "0", allow_hyphen_values = true, value_parser = super::go_i64)]
    pub max_mod_rev: i64,
    /// Restrict results to kvs with create revision greater or equal than the supplied revision
    #[arg(long = "min-create-rev", default_value = "0", allow_hyphen_values = true, value_parser = super::go_i64)]
    pub min_create_rev: i64,
    /// Restrict results to kvs with create revision less than or equal to the supplied revision
    #[arg(long = "max-create-rev", default_value = "0", allow_hyphen_values = true, value_parser = super::go_i64)]
    pub max_create_rev: i64,
    /// <key> [range_end]
    #[arg(value_parser = clap::value_parser!(std::ffi::OsString))]
    pub args: Vec<std::ffi::OsString>,
}

/// Builds the range request from the flags, with etcd's argument checks and messages.
pub fn build_request(a: &GetArgs, write_out: &str) -> Result<RangeRequest> {
    check_key_args("get", &a.args, a.prefix, a.from_key)?;
    if a.print_value_only && write_out != "simple" {
        return Err(CtlError::bad_args(
            "print-value-only is only for `--write-out=simple`",
        ));
    }
    if a.keys_only && a.count_only {
        return Err(CtlError::bad_args(
            "`--keys-only` and `--count-only` cannot be set at the same time, choose one",
        ));
    }
    if a.count_only && write_out != "fields" {
        return Err(CtlError::bad_args(
            "`--count-only` is only compatible with `--write-out=fields`",
        ));
    }
    let serializable = match a.consistency.as_str() {
        "l" => false,
        "s" => true,
        c => {
            return Err(CtlError::BadFeature(format!(
                "unknown consistency flag {c:?}"
            )));
        }
    };
    let mut order = match a.order.to_uppercase().as_str() {
        "ASCEND" => SortOrder::Ascend,
        "DESCEND" => SortOrder::Descend,
        "" => SortOrder::None,
        _ => return Err(CtlError::BadFeature(format!("bad sort order {}", a.order))),
    };
    let target = match a.sort_by.to_uppercase().as_str() {
        "CREATE" => SortTarget::Create,
        "KEY" | "" => SortTarget::Key,
        "MODIFY" => SortTarget::Mod,
        "VALUE" => SortTarget::Value,
        "VERSION" => SortTarget::Version,
        _ => {
            return Err(CtlError::BadFeature(format!(
                "bad sort target {}",
                a.sort_by
            )));
        }
    };
    // Keys come back in key order anyway; asking for it is the same as asking for nothing.
    if target == SortTarget::Key && order == SortOrder::Ascend {
        order = SortOrder::None;
    }
    let end = a.args.get(1).map(|s| s.as_bytes());
    let (key, range_end) = key_range(a.args[0].as_bytes(), end, a.prefix, a.from_key);
    Ok(RangeRequest {
        key,
        range_end,
        limit: a.limit,
        revision: a.rev,
        sort_order: order as i32,
        sort_target: target as i32,
        serializable,
        keys_only: a.keys_only,
        count_only: a.count_only,
        min_mod_revision: a.min_mod_rev,
        max_mod_revision: a.max_mod_rev,
        min_create_revision: a.min_create_rev,
        max_create_revision: a.max_create_rev,
    })
}

pub async fn run(ctx: &Ctx, a: &GetArgs) -> Result<()> {
    let req = build_request(a, &ctx.g.write_out)?;
    let c = ctx.client().await?;
    let resp = c.unary(c.kv().range(req)).await?;
    let opts = GetOpts {
        print_value_only: a.print_value_only,
    };
    ctx.print(|p, w| p.get(w, &resp, &opts))
}
