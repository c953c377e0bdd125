//! `etcdctl user`: add, delete, get, list users, change passwords, grant and revoke roles.
//! Passwords come from the argument, --new-user-password, the terminal or a line of stdin.

use std::io::BufRead;

use clap::{Args, Subcommand};
use prost::Message;
use proto::etcdserverpb::{
    AuthRoleGetRequest, AuthUserAddRequest, AuthUserChangePasswordRequest, AuthUserDeleteRequest,
    AuthUserGetRequest, AuthUserGrantRoleRequest, AuthUserListRequest, AuthUserRevokeRoleRequest,
};

use super::Ctx;
use crate::client::read_password;
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::printer::{AuthAck, RoleGet};

/// User related commands
#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// Adds a new user
    #[command(override_usage = "<user name or user:password> [options]")]
    Add(AddArgs),
    /// Deletes a user
    #[command(override_usage = "<user name>")]
    Delete(Plain),
    /// Gets detailed information of a user
    #[command(override_usage = "<user name> [options]")]
    Get(GetArgs),
    /// Lists all users
    List,
    /// Changes password of user
    #[command(override_usage = "<user name> [options]")]
    Passwd(PasswdArgs),
    /// Grants a role to a user
    #[command(override_usage = "<user name> <role name>")]
    #[command(name = "grant-role")]
    GrantRole(Plain),
    /// Revokes a role from a user
    #[command(override_usage = "<user name> <role name>")]
    #[command(name = "revoke-role")]
    RevokeRole(Plain),
}

#[derive(Args, Debug)]
pub struct Plain {
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// Read password from stdin instead of interactive terminal
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub interactive: bool,
    /// Supply password from the command line flag
    #[arg(long = "new-user-password", default_value = "")]
    pub new_user_password: String,
    /// Create a user without password (CN based auth only)
    #[arg(long = "no-password", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub no_password: bool,
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// Show permissions of roles granted to the user
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub detail: bool,
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct PasswdArgs {
    /// If true, read password from stdin instead of interactive terminal
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub interactive: bool,
    pub args: Vec<String>,
}

/// A password typed twice at the terminal, or one line of stdin when not interactive.
fn new_password(name: &str, interactive: bool) -> Result<String> {
    if !interactive {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        return Ok(line.split_whitespace().next().unwrap_or("").to_string());
    }
    let first = read_password(&format!("Password of {name}: "))?;
    if first.is_empty() {
        return Err(CtlError::bad_args("empty password"));
    }
    let again = read_password(&format!("Type password of {name} again for confirmation: "))?;
    if first != again {
        return Err(CtlError::bad_args("given passwords are different"));
    }
    Ok(first)
}

fn need(args: &[String], n: usize, msg: &str) -> Result<()> {
    if args.len() < n {
        return Err(CtlError::bad_args(msg));
    }
    Ok(())
}

pub async fn run(ctx: &Ctx, cmd: &UserCmd) -> Result<()> {
    match cmd {
        UserCmd::Add(a) => {
            need(
                &a.args,
                1,
                "user add command requires user name as its argument",
            )?;
            let (name, password) = match a.args[0].split_once(':') {
                // Such a user logs in only by its client certificate's CN.
                _ if a.no_password => (a.args[0].clone(), String::new()),
                Some(("", _)) => {
                    return Err(CtlError::bad_args("empty user name is not allowed"));
                }
                Some((n, p)) => (n.to_string(), p.to_string()),
                None if !a.new_user_password.is_empty() => {
                    (a.args[0].clone(), a.new_user_password.clone())
                }
                None => (a.args[0].clone(), new_password(&a.args[0], a.interactive)?),
            };
            let c = ctx.client().await?;
            let resp = c
                .unary(c.auth().user_add(AuthUserAddRequest {
                    name: name.clone(),
                    password,
                    options: Some(proto::authpb::UserAddOptions {
                        no_password: a.no_password,
                    }),
                    ..Default::default()
                }))
                .await?;
            ack(
                ctx,
                format!("User {name} created"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
        UserCmd::Delete(a) => {
            need(
                &a.args,
                1,
                "user delete command requires user name as its argument",
            )?;
            let name = a.args[0].clone();
            let c = ctx.client().await?;
            let resp = c
                .unary(
                    c.auth()
                        .user_delete(AuthUserDeleteRequest { name: name.clone() }),
                )
                .await?;
            ack(
                ctx,
                format!("User {name} deleted"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
        UserCmd::Get(a) => {
            need(
                &a.args,
                1,
                "user get command requires user name as its argument",
            )?;
            let name = a.args[0].clone();
            let c = ctx.client().await?;
            let resp = c
                .unary(c.auth().user_get(AuthUserGetRequest { name: name.clone() }))
                .await?;
            if !a.detail {
                return ctx.print(|p, w| p.user_get(w, &name, &resp));
            }
            println!("User: {name}");
            for role in &resp.roles {
                let r = c
                    .unary(c.auth().role_get(AuthRoleGetRequest { role: role.clone() }))
                    .await?;
                println!();
                let rg = RoleGet {
                    name: role,
                    resp: &r,
                };
                ctx.print(|p, w| p.role_get(w, &rg))?;
            }
            Ok(())
        }
        UserCmd::List => {
            let c = ctx.client().await?;
            let resp = c.unary(c.auth().user_list(AuthUserListRequest {})).await?;
            ctx.print(|p, w| p.user_list(w, &resp))
        }
        UserCmd::Passwd(a) => {
            need(
                &a.args,
                1,
                "user passwd command requires user name as its argument",
            )?;
            let name = a.args[0].clone();
            let password = new_password(&name, a.interactive)?;
            let c = ctx.client().await?;
            let resp = c
                .unary(
                    c.auth()
                        .user_change_password(AuthUserChangePasswordRequest {
                            name,
                            password,
                            ..Default::default()
                        }),
                )
                .await?;
            ack(
                ctx,
                "Password updated".to_string(),
                resp.header,
                resp.encode_to_vec(),
            )
        }
        UserCmd::GrantRole(a) => {
            need(
                &a.args,
                2,
                "user grant command requires user name and role name as its argument",
            )?;
            let (user, role) = (a.args[0].clone(), a.args[1].clone());
            let c = ctx.client().await?;
            let resp = c
                .unary(c.auth().user_grant_role(AuthUserGrantRoleRequest {
                    user: user.clone(),
                    role: role.clone(),
                }))
                .await?;
            ack(
                ctx,
                format!("Role {role} is granted to user {user}"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
        UserCmd::RevokeRole(a) => {
            need(
                &a.args,
                2,
                "user revoke-role requires user name and role name as its argument",
            )?;
            let (name, role) = (a.args[0].clone(), a.args[1].clone());
            let c = ctx.client().await?;
            let resp = c
                .unary(c.auth().user_revoke_role(AuthUserRevokeRoleRequest {
                    name: name.clone(),
                    role: role.clone(),
                }))
                .await?;
            ack(
                ctx,
                format!("Role {role} is revoked from user {name}"),
                resp.header,
                resp.encode_to_vec(),
            )
        }
    }
}

/// Prints the answer to a write-only auth request.
pub fn ack(
    ctx: &Ctx,
    message: String,
    header: Option<proto::etcdserverpb::ResponseHeader>,
    encoded: Vec<u8>,
) -> Result<()> {
    let a = AuthAck {
        message,
        header: header.as_ref(),
        encoded,
    };
    ctx.print(|p, w| p.auth_ack(w, &a))
}
