//! `etcdctl put`: writes a key, its value from the arguments or from stdin, optionally under
//! a lease or keeping the current value or lease.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;

use clap::Args;
use proto::etcdserverpb::PutRequest;

use super::{Ctx, parse_lease_id};
use crate::error::{CtlError, Result};
use crate::global::go_bool;

/// Puts the given key into the store
#[derive(Args, Debug)]
pub struct PutArgs {
    /// lease ID (in hexadecimal) to attach to the key
    #[arg(long, default_value = "0")]
    pub lease: String,
    /// return the previous key-value pair before modification
    #[arg(long = "prev-kv", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub prev_kv: bool,
    /// updates the key using its current value
    #[arg(long = "ignore-value", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub ignore_value: bool,
    /// updates the key using its current lease
    #[arg(long = "ignore-lease", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub ignore_lease: bool,
    /// <key> <value>
    #[arg(allow_hyphen_values = false, value_parser = clap::value_parser!(std::ffi::OsString))]
    pub args: Vec<std::ffi::OsString>,
}

const NEED_ARGS: &str = "put command needs 1 argument and input from stdin or 2 arguments";

pub fn build_request(a: &PutArgs, stdin: &mut dyn Read) -> Result<PutRequest> {
    let Some(key) = a.args.first() else {
        return Err(CtlError::bad_args(NEED_ARGS));
    };
    let value = if a.ignore_value {
        if a.args.len() > 1 {
            return Err(CtlError::bad_args(
                "put command needs only 1 argument when 'ignore-value' is set",
            ));
        }
        Vec::new()
    } else if let Some(v) = a.args.get(1) {
        v.as_bytes().to_vec()
    } else {
        let mut buf = Vec::new();
        stdin
            .read_to_end(&mut buf)
            .map_err(|_| CtlError::bad_args(NEED_ARGS))?;
        if buf.is_empty() {
            return Err(CtlError::bad_args(NEED_ARGS));
        }
        buf
    };
    let lease = parse_lease_id(&a.lease, "bad lease ID")?;
    Ok(PutRequest {
        key: key.as_bytes().to_vec(),
        value,
        lease,
        prev_kv: a.prev_kv,
        ignore_value: a.ignore_value,
        ignore_lease: a.ignore_lease,
    })
}

pub async fn run(ctx: &Ctx, a: &PutArgs) -> Result<()> {
    let req = build_request(a, &mut std::io::stdin())?;
    let c = ctx.client().await?;
    let resp = c.unary(c.kv().put(req)).await?;
    ctx.print(|p, w| p.put(w, &resp))
}
