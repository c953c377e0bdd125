//! `etcdctl snapshot save`: streams a consistent copy of one member's backend into a file,
//! checking the sha256 trailer etcd appends, logging its steps as etcdctl 3.4 does.
//! `snapshot status` and `restore` run etcdutl's library code, without its progress bars (3.4's
//! etcdctl shows none).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use clap::{Args, Subcommand};
use proto::etcdserverpb::SnapshotRequest;
use sha2::{Digest, Sha256};
use tokio_stream::StreamExt;

use super::Ctx;
use crate::error::{CtlError, Result, status_message};
use crate::global::go_bool;

/// Manages etcd node snapshots
#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Stores an etcd node backend snapshot to a given file
    #[command(override_usage = "<filename>")]
    Save(SaveArgs),
    /// Gets backend snapshot status of a given file
    #[command(
        override_usage = "<filename>",
        long_about = "When --write-out is set to simple, this command prints out comma-separated status lists for each endpoint.\nThe items in the lists are hash, revision, total keys, total size."
    )]
    Status(StatusArgs),
    /// Restores an etcd member snapshot to an etcd directory
    #[command(override_usage = "<filename> [options]")]
    Restore(RestoreArgs),
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    pub args: Vec<String>,
    /// Path to the data directory
    #[arg(long = "data-dir", default_value = "")]
    pub data_dir: String,
    /// Path to the WAL directory (use --data-dir if none given)
    #[arg(long = "wal-dir", default_value = "")]
    pub wal_dir: String,
    /// Initial cluster configuration for restore bootstrap
    #[arg(
        long = "initial-cluster",
        default_value = "default=http://localhost:2380"
    )]
    pub initial_cluster: String,
    /// Initial cluster token for the etcd cluster during restore bootstrap
    #[arg(long = "initial-cluster-token", default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    /// List of this member's peer URLs to advertise to the rest of the cluster
    #[arg(
        long = "initial-advertise-peer-urls",
        default_value = "http://localhost:2380"
    )]
    pub initial_advertise_peer_urls: String,
    /// Human-readable name for this member
    #[arg(long = "name", default_value = "default")]
    pub name: String,
    /// Ignore snapshot integrity hash value (required if copied from data directory)
    #[arg(long = "skip-hash-check", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub skip_hash_check: bool,
}

/// etcdutl's errors keep their exit codes (bad arguments 128, failures 1).
fn util_err(e: etcdutl::Error) -> CtlError {
    match e {
        etcdutl::Error::BadArgs(m) => CtlError::BadArgs(m),
        etcdutl::Error::Failed(m) => CtlError::Other(m),
    }
}

/// `snapshot status`: etcdutl's status in etcdctl's output format.
fn status(ctx: &Ctx, a: &StatusArgs) -> Result<()> {
    etcdutl::progress::set_enabled(false);
    if a.args.len() != 1 {
        return Err(CtlError::bad_args(
            "snapshot status requires exactly one argument",
        ));
    }
    let fmt = match ctx.g.write_out.as_str() {
        "protobuf" => {
            return Err(CtlError::BadFeature(
                "protobuf not supported as output format".into(),
            ));
        }
        f => etcdutl::output::Format::parse(f).map_err(|e| CtlError::BadFeature(e.to_string()))?,
    };
    let path = std::path::Path::new(&a.args[0]);
    let st = etcdutl::snapshot::status(path)
        .map_err(|e| in_etcdctl_34_words(path).unwrap_or_else(|| util_err(e)))?;
    print!("{}", etcdutl::snapshot::format_status(&st, fmt));
    Ok(())
}

/// etcdctl 3.4's own words, and exit status 1, for a path `snapshot status` could not read as
/// a db (etcdutl's messages say more, and a missing file is a bad argument there); None when
/// etcdutl's error stands.
fn in_etcdctl_34_words(path: &std::path::Path) -> Option<CtlError> {
    let shown = path.display().to_string();
    let words = match std::fs::metadata(path) {
        Err(e) => common::gofmt::go_io_error("stat", &shown, &e),
        Ok(m) if m.is_dir() => format!("open {shown}: is a directory"),
        // bbolt's name for a file whose meta pages are not a db's.
        Ok(m) if m.len() > 0 => match common::backend::Db::open_read_only(path) {
            Err(common::backend::Error::NotBbolt { .. }) => "invalid database".to_string(),
            _ => return None,
        },
        Ok(_) => return None,
    };
    Some(CtlError::Other(words))
}

/// `snapshot restore`: etcdutl's restore with etcd 3.4's flags.
fn restore(a: &RestoreArgs) -> Result<()> {
    etcdutl::progress::set_enabled(false);
    if a.args.len() != 1 {
        return Err(CtlError::bad_args(
            "snapshot restore requires exactly one argument",
        ));
    }
    let opt = |s: &str| (!s.is_empty()).then(|| std::path::PathBuf::from(s));
    let cfg = etcdutl::snapshot::RestoreConfig {
        snapshot: a.args[0].clone().into(),
        name: a.name.clone(),
        data_dir: opt(&a.data_dir),
        wal_dir: opt(&a.wal_dir),
        initial_cluster: a.initial_cluster.clone(),
        initial_cluster_token: a.initial_cluster_token.clone(),
        initial_advertise_peer_urls: a.initial_advertise_peer_urls.clone(),
        skip_hash_check: a.skip_hash_check,
    };
    etcdutl::snapshot::restore(&cfg).map_err(util_err)?;
    Ok(())
}

#[derive(Args, Debug)]
pub struct SaveArgs {
    pub args: Vec<String>,
}

/// The size of etcd's sha256 trailer at the end of a snapshot stream.
const TRAILER: usize = 32;

pub async fn run(ctx: &Ctx, cmd: &SnapshotCmd) -> Result<()> {
    let a = match cmd {
        SnapshotCmd::Save(a) => a,
        SnapshotCmd::Status(a) => return status(ctx, a),
        SnapshotCmd::Restore(a) => return restore(a),
    };
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
    let started = std::time::Instant::now();
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
    zap_info(
        epoch_ts(),
        "snapshot/v3_snapshot.go:119",
        "created temporary db file",
        serde_json::json!({ "path": part }),
    );
    let result = save(ctx, &mut file).await;
    let result = result.and_then(|size| {
        file.sync_all()?;
        std::fs::rename(&part, path)?;
        Ok(size)
    });
    let size = match result {
        Ok(size) => size,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            return Err(match e {
                CtlError::Interrupted(m) => CtlError::Interrupted(m),
                e => CtlError::Interrupted(e.to_string()),
            });
        }
    };
    zap_info(
        epoch_ts(),
        "snapshot/v3_snapshot.go:142",
        "fetched snapshot",
        serde_json::json!({
            "endpoint": ctx.g.endpoints[0],
            "size": common::gofmt::humanize_bytes(size),
            "took": started.elapsed().as_secs_f64(),
        }),
    );
    zap_info(
        epoch_ts(),
        "snapshot/v3_snapshot.go:152",
        "saved",
        serde_json::json!({ "path": path }),
    );
    println!("Snapshot saved at {path}");
    Ok(())
}

/// etcdctl 3.4's zap lines: the snapshot package logs times as epoch seconds, clientv3 as
/// ISO-8601 text.
fn epoch_ts() -> serde_json::Value {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    serde_json::json!(secs)
}

fn iso_ts() -> serde_json::Value {
    serde_json::json!(common::gofmt::format_ts(std::time::SystemTime::now()))
}

/// One info line on stderr with the fields after `msg`, in order.
fn zap_info(ts: serde_json::Value, caller: &str, msg: &str, fields: serde_json::Value) {
    let mut line = serde_json::json!({"level": "info", "ts": ts, "caller": caller, "msg": msg});
    if let (Some(l), Some(f)) = (line.as_object_mut(), fields.as_object()) {
        for (k, v) in f {
            l.insert(k.clone(), v.clone());
        }
    }
    eprintln!("{line}");
}

/// Writes the whole stream (trailer included, as etcd keeps it) and checks the trailer;
/// returns the bytes written.
async fn save(ctx: &Ctx, file: &mut std::fs::File) -> Result<u64> {
    let c = ctx.client().await?;
    let mut m = c.maintenance();
    let resp = tokio::time::timeout(c.command_timeout, m.snapshot(SnapshotRequest {}))
        .await
        .map_err(|_| CtlError::other("context deadline exceeded"))?
        .map_err(|s| CtlError::other(status_message(&s)))?;
    zap_info(
        iso_ts(),
        "clientv3/maintenance.go:200",
        "opened snapshot stream; downloading",
        serde_json::json!({}),
    );
    zap_info(
        epoch_ts(),
        "snapshot/v3_snapshot.go:127",
        "fetching snapshot",
        serde_json::json!({ "endpoint": ctx.g.endpoints[0] }),
    );
    let mut stream = resp.into_inner();
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
    }
    zap_info(
        iso_ts(),
        "clientv3/maintenance.go:208",
        "completed snapshot read; closing",
        serde_json::json!({}),
    );
    if tail.len() != TRAILER || hasher.finalize().as_slice() != tail.as_slice() {
        return Err(CtlError::Interrupted(
            "snapshot stream ended with a bad sha256 trailer (incomplete or corrupt)".into(),
        ));
    }
    Ok(written)
}
