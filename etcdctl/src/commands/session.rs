//! A session for lock and elect: a lease with --ttl kept alive in the background, revoked at
//! the end, so that what the command holds vanishes if the process dies.

use std::time::Duration;

use proto::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest};
use tokio_stream::StreamExt;

use crate::client::Client;
use crate::error::Result;
use crate::global::GlobalArgs;

pub struct Session {
    pub lease: i64,
    keepalive: tokio::task::JoinHandle<()>,
}

impl Session {
    /// Grants the lease and keeps it alive; a lost connection is re-made on whichever of the
    /// endpoints answers, as etcd's client does, so a brief outage does not drop the lock.
    pub async fn start(c: &Client, g: &GlobalArgs, ttl: i64) -> Result<Session> {
        let resp = c
            .unary(c.lease().lease_grant(LeaseGrantRequest { ttl, id: 0 }))
            .await?;
        let id = resp.id;
        let period = Duration::from_millis((resp.ttl.max(1) as u64) * 1000 / 3);
        let (first, g) = (c.clone(), g.clone());
        let keepalive = tokio::spawn(async move {
            let mut conn = Some(first);
            let mut backoff = Duration::from_millis(100);
            loop {
                let c = match conn.take() {
                    Some(c) => c,
                    None => match Client::connect(&g).await {
                        Ok(c) => c,
                        Err(_) => {
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(1));
                            continue;
                        }
                    },
                };
                let Ok((tx, mut stream)) = super::lease::open_keep_alive(&c, id).await else {
                    tokio::time::sleep(backoff).await;
                    continue;
                };
                loop {
                    match stream.next().await {
                        // Expired or revoked: nothing left to keep.
                        Some(Ok(r)) if r.ttl <= 0 => return,
                        Some(Ok(_)) => backoff = Duration::from_millis(100),
                        _ => break,
                    }
                    tokio::time::sleep(period).await;
                    if tx.send(LeaseKeepAliveRequest { id }).await.is_err() {
                        break;
                    }
                }
                tokio::time::sleep(backoff).await;
            }
        });
        Ok(Session {
            lease: id,
            keepalive,
        })
    }

    /// Stops the keep-alives and revokes the lease (best effort: it expires anyway).
    pub async fn close(self, c: &Client) {
        self.keepalive.abort();
        let _ = c
            .unary(
                c.lease()
                    .lease_revoke(LeaseRevokeRequest { id: self.lease }),
            )
            .await;
    }
}

/// Waits for SIGINT or SIGTERM.
pub async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let term_fut = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term_fut => {}
    }
}

/// Runs a command to completion; a failure is reported as Go's exec errors read.
pub fn run_command(argv: &[String], env: &[(&str, String)]) -> Result<()> {
    let Some((prog, args)) = argv.split_first() else {
        return Ok(());
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd.status().map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::NotFound {
            "no such file or directory".to_string()
        } else {
            e.to_string()
        };
        crate::error::CtlError::other(format!("fork/exec {prog}: {why}"))
    })?;
    if !status.success() {
        let msg = match status.code() {
            Some(code) => format!("exit status {code}"),
            None => "signal: killed".to_string(),
        };
        return Err(crate::error::CtlError::other(msg));
    }
    Ok(())
}
