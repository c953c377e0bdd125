//! `etcdctl make-mirror`: copies the keys under a prefix to another cluster, then keeps the
//! copy current by replaying the watch stream; prints the number of keys mirrored every 30s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Args;
use proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, WatchCreateRequest, WatchRequest, watch_request,
};
use tokio_stream::StreamExt;

use super::Ctx;
use super::session::interrupted;
use crate::client::Client;
use crate::error::{CtlError, Result, status_message};
use crate::global::go_bool;
use crate::util::prefix_end;

/// Makes a mirror at the destination etcd cluster
#[derive(Args, Debug)]
pub struct MakeMirrorArgs {
    /// Verify certificates of TLS enabled secure servers using this CA bundle
    #[arg(long = "dest-cacert")]
    pub dest_cacert: Option<String>,
    /// Identify secure client using this TLS certificate file for the destination cluster
    #[arg(long = "dest-cert")]
    pub dest_cert: Option<String>,
    /// Identify secure client using this TLS key file
    #[arg(long = "dest-key")]
    pub dest_key: Option<String>,
    /// Disable transport security for client connections
    #[arg(long = "dest-insecure-transport", default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub dest_insecure_transport: bool,
    /// Key-value prefix to mirror
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// destination prefix to mirror a prefix to a different prefix in the destination cluster
    #[arg(long = "dest-prefix", default_value = "")]
    pub dest_prefix: String,
    /// mirror key-values to the root of the destination cluster
    #[arg(long = "no-dest-prefix", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub no_dest_prefix: bool,
    /// <destination>
    pub args: Vec<String>,
}

/// Where a source key lands in the destination cluster.
pub fn dest_key(a: &MakeMirrorArgs, key: &[u8]) -> Vec<u8> {
    let rest = key.strip_prefix(a.prefix.as_bytes()).unwrap_or(key);
    if a.no_dest_prefix {
        rest.to_vec()
    } else if !a.dest_prefix.is_empty() {
        [a.dest_prefix.as_bytes(), rest].concat()
    } else {
        key.to_vec()
    }
}

pub async fn run(ctx: &Ctx, a: &MakeMirrorArgs) -> Result<()> {
    if a.args.len() != 1 {
        return Err(CtlError::bad_args(
            "make-mirror takes one destination argument",
        ));
    }
    let src = ctx.client().await?;
    // The destination has its own TLS settings; everything else is shared.
    let mut dg = ctx.g.clone();
    dg.cacert = a.dest_cacert.clone();
    dg.cert = a.dest_cert.clone();
    dg.key = a.dest_key.clone();
    dg.insecure_skip_tls_verify = false;
    let dest = Client::connect_one(&dg, &a.args[0]).await?;
    let total = Arc::new(AtomicU64::new(0));
    let t = total.clone();
    let reporter = tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            println!("{}", t.load(Ordering::Relaxed));
        }
    });
    let result = tokio::select! {
        r = mirror(a, &src, &dest, &total) => r,
        _ = interrupted() => Ok(()),
    };
    reporter.abort();
    result
}

async fn mirror(a: &MakeMirrorArgs, src: &Client, dest: &Client, total: &AtomicU64) -> Result<()> {
    let (key, end) = if a.prefix.is_empty() {
        (vec![0], vec![0])
    } else {
        (
            a.prefix.as_bytes().to_vec(),
            prefix_end(a.prefix.as_bytes()),
        )
    };
    // Copy what exists at one revision, in pages, then follow the changes after it.
    let mut rev = 0;
    let mut from = key.clone();
    loop {
        let page = src
            .unary(src.kv().range(RangeRequest {
                key: from.clone(),
                range_end: end.clone(),
                limit: 1000,
                revision: rev,
                ..Default::default()
            }))
            .await?;
        if rev == 0 {
            rev = page.header.map(|h| h.revision).unwrap_or_default();
        }
        for kv in &page.kvs {
            dest.unary(dest.kv().put(PutRequest {
                key: dest_key(a, &kv.key),
                value: kv.value.clone(),
                ..Default::default()
            }))
            .await?;
            total.fetch_add(1, Ordering::Relaxed);
        }
        match (page.more, page.kvs.last()) {
            (true, Some(last)) => {
                from = last.key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(
            WatchCreateRequest {
                key,
                range_end: end,
                start_revision: rev + 1,
                ..Default::default()
            },
        )),
    })
    .await
    .map_err(|_| CtlError::other("watch stream closed"))?;
    let mut stream = src
        .watch()
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| CtlError::other(status_message(&s)))?
        .into_inner();
    while let Some(msg) = stream.next().await {
        let resp = msg.map_err(|s| CtlError::other(status_message(&s)))?;
        // Go's make-mirror answers a compacted watch with the client library's ErrCompacted.
        if resp.compact_revision > 0 {
            return Err(CtlError::other(
                "etcdserver: mvcc: required revision has been compacted",
            ));
        }
        if resp.canceled {
            return Err(CtlError::other(format!(
                "watch is canceled by the server ({})",
                resp.cancel_reason
            )));
        }
        for ev in &resp.events {
            let Some(kv) = &ev.kv else { continue };
            let k = dest_key(a, &kv.key);
            if ev.r#type == 1 {
                dest.unary(dest.kv().delete_range(DeleteRangeRequest {
                    key: k,
                    ..Default::default()
                }))
                .await?;
            } else {
                dest.unary(dest.kv().put(PutRequest {
                    key: k,
                    value: kv.value.clone(),
                    ..Default::default()
                }))
                .await?;
            }
            total.fetch_add(1, Ordering::Relaxed);
        }
    }
    drop(tx);
    Err(CtlError::other("watch stream closed by the server"))
}
