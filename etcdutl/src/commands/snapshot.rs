// `etcdutl snapshot status|restore`: the library's status and restore behind etcd's flags.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use etcdutl::output::Format;
use etcdutl::snapshot::{self, RestoreConfig};
use etcdutl::{Error, Result};

#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Gets backend snapshot status of a given file
    Status(StatusArgs),
    /// Restores an etcd member snapshot to an etcd directory
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
    #[arg(long = "skip-hash-check")]
    pub skip_hash_check: bool,
}

impl RestoreArgs {
    /// The library's restore configuration from these flags.
    pub fn config(&self) -> Result<RestoreConfig> {
        if self.args.len() != 1 {
            return Err(Error::bad_args(
                "snapshot restore requires exactly one argument",
            ));
        }
        let opt = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        Ok(RestoreConfig {
            snapshot: PathBuf::from(&self.args[0]),
            name: self.name.clone(),
            data_dir: opt(&self.data_dir),
            wal_dir: opt(&self.wal_dir),
            initial_cluster: self.initial_cluster.clone(),
            initial_cluster_token: self.initial_cluster_token.clone(),
            initial_advertise_peer_urls: self.initial_advertise_peer_urls.clone(),
            skip_hash_check: self.skip_hash_check,
        })
    }
}

pub fn run(cmd: &SnapshotCmd, write_out: &str) -> Result<()> {
    match cmd {
        SnapshotCmd::Status(a) => {
            if a.args.len() != 1 {
                return Err(Error::bad_args(
                    "snapshot status requires exactly one argument",
                ));
            }
            let fmt = Format::parse(write_out)?;
            let st = snapshot::status(std::path::Path::new(&a.args[0]))?;
            print!("{}", snapshot::format_status(&st, fmt));
            Ok(())
        }
        SnapshotCmd::Restore(a) => {
            snapshot::restore(&a.config()?)?;
            Ok(())
        }
    }
}
