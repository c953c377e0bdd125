//! `etcdctl defrag`: defragments the backend of each endpoint (or every member with --cluster).
//! Each failure is reported on stderr and the command then exits 1, as etcd's does.

use clap::Args;
use proto::etcdserverpb::DefragmentRequest;

use super::Ctx;
use super::endpoint::endpoints;
use crate::client::Client;
use crate::error::{CtlError, Result};
use crate::global::go_bool;

/// Defragments the storage of the etcd members with given endpoints
#[derive(Args, Debug)]
pub struct DefragArgs {
    /// use all endpoints from the cluster member list
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub cluster: bool,
    /// Optional. If present, defragments a data directory not in use by etcd.
    #[arg(verbatim_doc_comment)]
    #[arg(long = "data-dir", default_value = "")]
    pub data_dir: String,
}

pub async fn run(ctx: &Ctx, a: &DefragArgs) -> Result<()> {
    if !a.data_dir.is_empty() {
        // Offline, through etcdutl's code; etcd 3.4 prints nothing when it succeeds.
        let dir = etcdutl::datadir::DataDir::open(std::path::Path::new(&a.data_dir), None)
            .map_err(|e| CtlError::other(e.to_string()))?;
        etcdutl::defrag::defrag(&dir).map_err(|e| CtlError::other(e.to_string()))?;
        return Ok(());
    }
    let eps = endpoints(ctx, a.cluster).await?;
    let mut failed = false;
    for ep in eps {
        let got = async {
            let c = Client::connect_one(&ctx.g, &ep).await?;
            c.unary(c.maintenance().defragment(DefragmentRequest {}))
                .await
        }
        .await;
        match got {
            Ok(_) => println!("Finished defragmenting etcd member[{ep}]"),
            Err(e) => {
                eprintln!("Failed to defragment etcd member[{ep}] ({e})");
                failed = true;
            }
        }
    }
    if failed {
        // etcd exits 1 after reporting each failure, with no summary line.
        std::process::exit(crate::error::EXIT_ERROR);
    }
    Ok(())
}
