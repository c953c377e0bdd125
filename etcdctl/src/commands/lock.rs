//! `etcdctl lock`: acquires a named distributed lock (etcd's Lock service) and holds it until
//! interrupted, or while a given command runs.

use clap::Args;
use proto::etcdserverpb::RangeRequest;
use proto::v3lockpb::{LockRequest, UnlockRequest};

use super::Ctx;
use super::session::{Session, interrupted, run_command};
use crate::error::{CtlError, Result};

/// Acquires a named lock
#[derive(Args, Debug)]
pub struct LockArgs {
    /// timeout for session
    #[arg(long, default_value = "10", value_parser = super::go_i64)]
    pub ttl: i64,
    /// <lockname> [exec-command arg1 arg2 ...]
    pub args: Vec<String>,
    /// the command, after `--` when it has flags of its own
    #[arg(last = true)]
    pub exec: Vec<String>,
}

pub async fn run(ctx: &Ctx, a: &LockArgs) -> Result<()> {
    let Some((name, command)) = a.args.split_first() else {
        return Err(CtlError::bad_args(
            "lock takes a lock name argument and an optional command to execute",
        ));
    };
    // Flags anywhere belong to etcdctl; a command with flags of its own comes after `--`.
    let command: Vec<String> = command.iter().chain(&a.exec).cloned().collect();
    let c = ctx.client().await?;
    let session = Session::start(&c, &ctx.g, a.ttl).await?;
    // Waiting for the lock has no deadline: that is the point of the command.
    let mut lock = c.lock();
    let locked = tokio::select! {
        r = lock.lock(LockRequest { name: name.as_bytes().to_vec(), lease: session.lease }) => r,
        _ = interrupted() => {
            session.close(&c).await;
            return Ok(());
        }
    };
    let locked = match locked {
        Ok(r) => r.into_inner(),
        Err(s) => {
            session.close(&c).await;
            return Err(s.into());
        }
    };
    let result = if command.is_empty() {
        let kv = c
            .unary(c.kv().range(RangeRequest {
                key: locked.key.clone(),
                ..Default::default()
            }))
            .await;
        match kv {
            Ok(resp) => {
                let printed = ctx.print(|p, w| p.get(w, &resp, &Default::default()));
                if printed.is_ok() {
                    interrupted().await;
                }
                printed
            }
            Err(e) => Err(e),
        }
    } else {
        let rev = locked.header.map(|h| h.revision).unwrap_or_default();
        let env = [
            (
                "ETCD_LOCK_KEY",
                String::from_utf8_lossy(&locked.key).into_owned(),
            ),
            ("ETCD_LOCK_REV", rev.to_string()),
        ];
        let cmd = command;
        tokio::task::spawn_blocking(move || run_command(&cmd, &env))
            .await
            .map_err(|e| CtlError::other(format!("command task failed: {e}")))?
    };
    let _ = c
        .unary(c.lock().unlock(UnlockRequest { key: locked.key }))
        .await;
    session.close(&c).await;
    result
}
