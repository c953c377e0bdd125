//! `etcdctl auth`: turns authentication on or off for the whole cluster.
//! Enabling gives a root user without the root role that role first, as etcd's etcdctl does.

use clap::Subcommand;
use proto::etcdserverpb::{
    AuthDisableRequest, AuthEnableRequest, AuthRoleAddRequest, AuthUserGrantRoleRequest,
};

use super::Ctx;
use crate::error::{CtlError, Result};

/// Enable or disable authentication
#[derive(Subcommand, Debug)]
pub enum AuthCmd {
    /// Enables authentication
    Enable,
    /// Disables authentication
    Disable,
}

pub async fn run(ctx: &Ctx, cmd: &AuthCmd) -> Result<()> {
    let c = ctx.client().await?;
    // etcd prints these lines whatever the output format.
    match cmd {
        AuthCmd::Enable => {
            loop {
                match c.unary(c.auth().auth_enable(AuthEnableRequest {})).await {
                    Ok(_) => break,
                    // As etcd's etcdctl: a root user without the root role gets it, then retry.
                    Err(CtlError::Other(m))
                        if m == "etcdserver: root user does not have root role" =>
                    {
                        let added = c
                            .unary(c.auth().role_add(AuthRoleAddRequest {
                                name: "root".into(),
                            }))
                            .await;
                        match added {
                            Ok(_) => {}
                            Err(CtlError::Other(m))
                                if m == "etcdserver: role name already exists" => {}
                            Err(e) => return Err(e),
                        }
                        c.unary(c.auth().user_grant_role(AuthUserGrantRoleRequest {
                            user: "root".into(),
                            role: "root".into(),
                        }))
                        .await?;
                    }
                    Err(e) => return Err(e),
                }
            }
            println!("Authentication Enabled");
        }
        AuthCmd::Disable => {
            c.unary(c.auth().auth_disable(AuthDisableRequest {}))
                .await?;
            println!("Authentication Disabled");
        }
    }
    Ok(())
}
