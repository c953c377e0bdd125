//! `etcdctl snapshot save`: streams a consistent copy of one member's backend into a file,
//! checking the sha256 trailer etcd appends, with a progress bar on a terminal.
//! (`snapshot status` and `restore` come with etcdutl's code and are not offered yet.)

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use clap::{Args, Subcommand};
use proto::etcdserverpb::SnapshotRequest;
use sha2::{Digest, Sha256};
use tokio_stream::StreamExt;

use super::Ctx;
use crate::error::{CtlError, Result, status_message};

/// Manages etcd node snapshots
#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Stores an etcd node backend snapshot to a given file
    Save(SaveArgs),
}

#[derive(Args, Debug)]
pub struct SaveArgs {
    pub args: Vec<String>,
}

/// The size of etcd's sha256 trailer at the end of a snapshot stream.
const TRAILER: usize = 32;

pub async fn run(ctx: &Ctx, cmd: &SnapshotCmd) -> Result<()> {
    let SnapshotCmd::Save(a) = cmd;
    if a.args.len() != 1 {
        return Err(CtlError::bad_args("snapshot save expects one argument"));
    }
    if ctx.g.endpoints.len() != 1 {
        return Err(CtlError::Interrupted(format!(
            "snapshot must be requested to one selected node, not multiple {:?}",
            ctx.g.endpoints
        )));
    }
    let path = &a.args[0];
    let part = format!("{path}.part");
    // Owner-only, as etcd creates it: the snapshot holds every key and value.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&part)
        .map_err(|e| {
            CtlError::Interrupted(format!(
                "could not open {part} ({})",
                crate::util::go_io_error("open", &part, &e)
            ))
        })?;
    let result = save(ctx, &mut file).await;
    let result = result.and_then(|()| {
        file.sync_all()?;
        std::fs::rename(&part, path)?;
        Ok(())
    });
    if let Err(e) = result {
        let _ = std::fs::remove_file(&part);
        return Err(match e {
            CtlError::Interrupted(m) => CtlError::Interrupted(m),
            e => CtlError::Interrupted(e.to_string()),
        });
    }
    println!("Snapshot saved at {path}");
    Ok(())
}

/// Writes the whole stream (trailer included, as etcd keeps it) and checks the trailer.
async fn save(ctx: &Ctx, file: &mut std::fs::File) -> Result<()> {
    let c = ctx.client().await?;
    let mut m = c.maintenance();
    let resp = tokio::time::timeout(c.command_timeout, m.snapshot(SnapshotRequest {}))
        .await
        .map_err(|_| CtlError::other("context deadline exceeded"))?
        .map_err(|s| CtlError::other(status_message(&s)))?;
    let mut stream = resp.into_inner();
    // Safety: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    let bar = if tty {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bytes}/{total_bytes} {wide_bar} {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let mut hasher = Sha256::new();
    // The last TRAILER bytes seen so far are held back: they may be the trailer.
    let mut tail: Vec<u8> = Vec::new();
    let mut written = 0u64;
    while let Some(msg) = stream.next().await {
        let msg = msg.map_err(|s| CtlError::other(status_message(&s)))?;
        file.write_all(&msg.blob)?;
        written += msg.blob.len() as u64;
        tail.extend_from_slice(&msg.blob);
        if tail.len() > TRAILER {
            let n = tail.len() - TRAILER;
            hasher.update(&tail[..n]);
            tail.drain(..n);
        }
        if let Some(b) = &bar {
            b.set_length(written + msg.remaining_bytes);
            b.set_position(written);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if tail.len() != TRAILER || hasher.finalize().as_slice() != tail.as_slice() {
        return Err(CtlError::Interrupted(
            "snapshot stream ended with a bad sha256 trailer (incomplete or corrupt)".into(),
        ));
    }
    Ok(())
}
