//! `etcdctl alarm`: lists the cluster's alarms (NOSPACE, CORRUPT) and disarms them.
//! Disarming deactivates each raised alarm in turn and prints what was deactivated.

use clap::Subcommand;
use proto::etcdserverpb::{AlarmRequest, AlarmResponse, alarm_request::AlarmAction};

use super::Ctx;
use crate::error::Result;

/// Alarm related commands
#[derive(Subcommand, Debug)]
pub enum AlarmCmd {
    /// Disarms all alarms
    Disarm,
    /// Lists all alarms
    List,
}

pub async fn run(ctx: &Ctx, cmd: &AlarmCmd) -> Result<()> {
    let c = ctx.client().await?;
    let list = c
        .unary(c.maintenance().alarm(AlarmRequest {
            action: AlarmAction::Get as i32,
            member_id: 0,
            alarm: 0,
        }))
        .await?;
    let resp = match cmd {
        AlarmCmd::List => list,
        AlarmCmd::Disarm => {
            // Disarm each raised alarm; the answer gathers what each deactivation returned.
            let mut all = AlarmResponse::default();
            for a in &list.alarms {
                let r = c
                    .unary(c.maintenance().alarm(AlarmRequest {
                        action: AlarmAction::Deactivate as i32,
                        member_id: a.member_id,
                        alarm: a.alarm,
                    }))
                    .await?;
                all.alarms.extend(r.alarms);
            }
            all
        }
    };
    ctx.print(|p, w| p.alarm(w, &resp))
}
