//! `etcdctl move-leader`: transfers leadership to the member with the given hex ID, asking the
//! current leader (found among the endpoints) to step aside.

use clap::Args;
use proto::etcdserverpb::{MoveLeaderRequest, StatusRequest};

use super::Ctx;
use crate::client::Client;
use crate::error::{CtlError, Result};
use crate::util::parse_go_u64;

/// Transfers leadership to another etcd cluster member.
#[derive(Args, Debug)]
pub struct MoveLeaderArgs {
    pub args: Vec<String>,
}

pub async fn run(ctx: &Ctx, a: &MoveLeaderArgs) -> Result<()> {
    let Some(target) = a.args.first() else {
        return Err(CtlError::bad_args("move-leader command needs 1 argument"));
    };
    let target = parse_go_u64(target, 16).map_err(CtlError::bad_args)?;
    let mut leader: Option<(Client, u64)> = None;
    for ep in &ctx.g.endpoints {
        let Ok(c) = Client::connect_one(&ctx.g, ep).await else {
            continue;
        };
        let Ok(st) = c.unary(c.maintenance().status(StatusRequest {})).await else {
            continue;
        };
        let me = st.header.map(|h| h.member_id).unwrap_or_default();
        if st.leader == me {
            leader = Some((c, me));
            break;
        }
    }
    let Some((c, leader_id)) = leader else {
        return Err(CtlError::other(format!(
            "no leader endpoint given at {:?}",
            ctx.g.endpoints
        )));
    };
    let resp = c
        .unary(
            c.maintenance()
                .move_leader(MoveLeaderRequest { target_id: target }),
        )
        .await?;
    ctx.print(|p, w| p.move_leader(w, leader_id, target, &resp))
}
