//! `etcdctl role`: add, delete, get and list roles, and grant or revoke key-range permissions.
//! Ranges are given as key [end], or with --prefix/--from-key, as etcd takes them.

use clap::{Args, Subcommand};
use prost::Message;
use proto::authpb::Permission;
use proto::etcdserverpb::{
    AuthRoleAddRequest, AuthRoleDeleteRequest, AuthRoleGetRequest, AuthRoleGrantPermissionRequest,
    AuthRoleListRequest, AuthRoleRevokePermissionRequest,
};

use super::Ctx;
use super::user::ack;
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::printer::RoleGet;
use crate::util::prefix_end;

/// Role related commands
#[derive(Subcommand, Debug)]
pub enum RoleCmd {
    /// Adds a new role
    #[command(override_usage = "<role name>")]
    Add(Plain),
    /// Deletes a role
    #[command(override_usage = "<role name>")]
    Delete(Plain),
    /// Gets detailed information of a role
    #[command(override_usage = "<role name>")]
    Get(Plain),
    /// Lists all roles
    List,
    /// Grants a key to a role
    #[command(override_usage = "[options] <role name> <permission type> <key> [endkey]")]
    #[command(name = "grant-permission")]
    GrantPermission(RangeArgs),
    /// Revokes a key from a role
    #[command(override_usage = "<role name> <key> [endkey]")]
    #[command(name = "revoke-permission")]
    #[command(
        mut_arg("prefix", |a| a.help("revoke a prefix permission")),
        mut_arg("from_key", |a| a.help("revoke a permission of keys that are greater than or equal to the given key using byte compare"))
    )]
    RevokePermission(RangeArgs),
}

#[derive(Args, Debug)]
pub struct Plain {
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RangeArgs {
    /// grant a prefix permission
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub prefix: bool,
    /// grant a permission of keys that are greater than or equal to the given key using byte compare
    #[arg(long = "from-key", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub from_key: bool,
    pub args: Vec<String>,
}

/// The key range of a permission from its key, optional end key and the range flags.
fn perm_range(a: &RangeArgs, key: &str, end: Option<&String>) -> Result<(Vec<u8>, Vec<u8>)> {
    if a.prefix && a.from_key {
        return Err(CtlError::bad_args(
            "--from-key and --prefix flags are mutually exclusive",
        ));
    }
    if end.is_some() && a.prefix {
        return Err(CtlError::bad_args(
            "unexpected endkey argument with --prefix flag",
        ));
    }
    if end.is_some() && a.from_key {
        return Err(CtlError::bad_args(
            "unexpected endkey argument with --from-key flag",
        ));
    }
    let key = key.as_bytes().to_vec();
    if a.prefix || a.from_key {
        if key.is_empty() {
            return Ok((vec![0], vec![0]));
        }
        let end = if a.prefix { prefix_end(&key) } else { vec![0] };
        return Ok((key, end));
    }
    Ok((key, end.map(|e| e.as_bytes().to_vec()).unwrap_or_default()))
}

fn role_arg<'a>(args: &'a [String], msg: &str) -> Result<&'a String> {
    args.first().ok_or_else(|| CtlError::bad_args(msg))
}

pub async fn run(ctx: &Ctx, cmd: &RoleCmd) -> Result<()> {
    match cmd {
        RoleCmd::Add(a) => {
            let name = role_arg(
                &a.args,
                "role add command requires role name as its argument",
            )?;
            let c = ctx.client().await?;
            let resp = c
                .unary(c.auth().role_add(AuthRoleAddRequest { name: name.clone() }))
                .await?;
            ack(
                ctx,
                format!("Role {name} created"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
        RoleCmd::Delete(a) => {
            let name = role_arg(
                &a.args,
                "role delete command requires role name as its argument",
            )?;
            let c = ctx.client().await?;
            let resp = c
                .unary(
                    c.auth()
                        .role_delete(AuthRoleDeleteRequest { role: name.clone() }),
                )
                .await?;
            ack(
                ctx,
                format!("Role {name} deleted"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
        RoleCmd::Get(a) => {
            let name = role_arg(
                &a.args,
                "role get command requires role name as its argument",
            )?;
            let c = ctx.client().await?;
            let resp = c
                .unary(c.auth().role_get(AuthRoleGetRequest { role: name.clone() }))
                .await?;
            let rg = RoleGet { name, resp: &resp };
            ctx.print(|p, w| p.role_get(w, &rg))
        }
        RoleCmd::List => {
            let c = ctx.client().await?;
            let resp = c.unary(c.auth().role_list(AuthRoleListRequest {})).await?;
            ctx.print(|p, w| p.role_list(w, &resp))
        }
        RoleCmd::GrantPermission(a) => {
            if a.args.len() < 3 {
                return Err(CtlError::bad_args(
                    "role grant command requires role name, permission type, and key [endkey] as its argument",
                ));
            }
            let perm_type = match a.args[1].to_uppercase().as_str() {
                "READ" => 0,
                "WRITE" => 1,
                "READWRITE" => 2,
                _ => {
                    return Err(CtlError::bad_args(format!(
                        "invalid permission type: {}",
                        a.args[1]
                    )));
                }
            };
            let (key, range_end) = perm_range(a, &a.args[2], a.args.get(3))?;
            let name = a.args[0].clone();
            let c = ctx.client().await?;
            let resp = c
                .unary(
                    c.auth()
                        .role_grant_permission(AuthRoleGrantPermissionRequest {
                            name: name.clone(),
                            perm: Some(Permission {
                                perm_type,
                                key,
                                range_end,
                            }),
                        }),
                )
                .await?;
            ack(
                ctx,
                format!("Role {name} updated"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
        RoleCmd::RevokePermission(a) => {
            if a.args.len() < 2 {
                return Err(CtlError::bad_args(
                    "role revoke-permission command requires role name and key [endkey] as its argument",
                ));
            }
            let (key, range_end) = perm_range(a, &a.args[1], a.args.get(2))?;
            let role = a.args[0].clone();
            let c = ctx.client().await?;
            let resp = c
                .unary(
                    c.auth()
                        .role_revoke_permission(AuthRoleRevokePermissionRequest {
                            role: role.clone(),
                            key: key.clone(),
                            range_end: range_end.clone(),
                        }),
                )
                .await?;
            let k = String::from_utf8_lossy(&key);
            let what = if range_end.is_empty() {
                format!("key {k}")
            } else if range_end == [0] {
                format!("range [{k}, <open ended>")
            } else {
                format!("range [{k}, {})", String::from_utf8_lossy(&range_end))
            };
            ack(
                ctx,
                format!("Permission of {what} is revoked from role {role}"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
    }
}
