//! `etcdctl watch`: streams the events on a key, a range or a prefix, optionally from a past
//! revision; can run a command per event (`watch key -- cmd args`) or read watch requests
//! interactively (`-i`).

use std::io::BufRead;
use std::os::unix::ffi::OsStrExt;

use clap::{Args, Parser};
use proto::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse, watch_request};
use tokio_stream::StreamExt;

use super::{Ctx, key_range};
use crate::client::Client;
use crate::error::{CtlError, Result, status_message};
use crate::global::go_bool;
use crate::util::go_quote;

/// Watches events stream on keys or prefixes
#[derive(Args, Debug, Clone)]
pub struct WatchArgs {
    /// Interactive mode
    #[arg(short = 'i', long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub interactive: bool,
    /// Watch on a prefix if prefix is set
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub prefix: bool,
    /// Revision to start watching
    #[arg(long, default_value = "0", value_parser = super::go_i64)]
    pub rev: i64,
    /// get the previous key-value pair before the event happens
    #[arg(long = "prev-kv", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub prev_kv: bool,
    /// get periodic watch progress notification from server
    #[arg(long = "progress-notify", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub progress_notify: bool,
    /// [key or prefix] [range_end]
    #[arg(value_parser = clap::value_parser!(std::ffi::OsString))]
    pub args: Vec<std::ffi::OsString>,
    /// [exec-command arg1 arg2 ...] after `--`
    #[arg(last = true)]
    pub exec: Vec<String>,
}

/// One line typed in interactive mode: `watch [options] <key> [range_end]`.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
enum InteractiveLine {
    Watch(WatchArgs),
}

fn create_request(a: &WatchArgs) -> Result<WatchRequest> {
    if a.args.is_empty() || a.args.len() > 2 {
        return Err(CtlError::bad_args("bad number of arguments"));
    }
    if a.prefix && a.args.len() > 1 {
        return Err(CtlError::bad_args(
            "`range_end` and `--prefix` are mutually exclusive",
        ));
    }
    let end = a.args.get(1).map(|s| s.as_bytes());
    let (key, range_end) = key_range(a.args[0].as_bytes(), end, a.prefix, false);
    Ok(WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(
            WatchCreateRequest {
                key,
                range_end,
                start_revision: a.rev,
                progress_notify: a.progress_notify,
                prev_kv: a.prev_kv,
                ..Default::default()
            },
        )),
    })
}

/// Runs the exec command once per event, with the event in ETCD_WATCH_* variables.
fn run_exec(exec: &[String], resp: &WatchResponse) {
    let Some((prog, args)) = exec.split_first() else {
        return;
    };
    let rev = resp.header.map(|h| h.revision).unwrap_or_default();
    for ev in &resp.events {
        let kv = ev.kv.clone().unwrap_or_default();
        let typ = if ev.r#type == 1 { "DELETE" } else { "PUT" };
        let status = std::process::Command::new(prog)
            .args(args)
            .env("ETCD_WATCH_REVISION", rev.to_string())
            .env("ETCD_WATCH_KEY", go_quote(&kv.key))
            .env("ETCD_WATCH_EVENT_TYPE", go_quote(typ.as_bytes()))
            .env("ETCD_WATCH_VALUE", go_quote(&kv.value))
            .status();
        if let Err(e) = status {
            eprintln!("command {prog:?} failed ({e})");
        }
    }
}

/// Opens a watch stream with one create request; the sender keeps the stream open.
async fn open(
    c: &Client,
    req: WatchRequest,
) -> Result<(
    tokio::sync::mpsc::Sender<WatchRequest>,
    tonic::Streaming<WatchResponse>,
)> {
    let (tx, rx) = tokio::sync::mpsc::channel::<WatchRequest>(1);
    tx.send(req)
        .await
        .map_err(|_| CtlError::other("watch stream closed"))?;
    let outbound = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut client = c.watch();
    let resp = tokio::time::timeout(c.command_timeout, client.watch(outbound))
        .await
        .map_err(|_| CtlError::other("context deadline exceeded"))?
        .map_err(|s| CtlError::other(status_message(&s)))?;
    Ok((tx, resp.into_inner()))
}

/// The same watch starting at `rev` (0: from now).
fn from_revision(req: &WatchRequest, rev: i64) -> WatchRequest {
    let mut req = req.clone();
    if let Some(watch_request::RequestUnion::CreateRequest(cr)) = &mut req.request_union {
        cr.start_revision = rev;
    }
    req
}

/// Streams one watch until the server cancels it. When the connection is lost the watch is
/// resumed, on whichever endpoint answers, from the revision after the last one delivered (as
/// etcd's client does), so no event is missed or shown twice.
async fn stream_watch(ctx: &Ctx, c: &Client, req: WatchRequest, exec: &[String]) -> Result<()> {
    let mut next = match &req.request_union {
        Some(watch_request::RequestUnion::CreateRequest(cr)) => cr.start_revision,
        _ => 0,
    };
    let (mut tx, mut stream) = open(c, req.clone()).await?;
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        while let Some(Ok(resp)) = stream.next().await {
            backoff = std::time::Duration::from_millis(100);
            if resp.canceled {
                let reason = if !resp.cancel_reason.is_empty() {
                    resp.cancel_reason.clone()
                } else if resp.compact_revision > 0 {
                    "etcdserver: mvcc: required revision has been compacted".to_string()
                } else {
                    "canceled".to_string()
                };
                eprintln!("watch was canceled ({reason})");
                return Err(CtlError::Interrupted(
                    "watch is canceled by the server".into(),
                ));
            }
            let header_rev = resp.header.as_ref().map(|h| h.revision).unwrap_or(0);
            if let Some(last) = resp.events.last().and_then(|e| e.kv.as_ref()) {
                next = last.mod_revision + 1;
            } else if !resp.created || next == 0 {
                // Created from now, or a progress notification: all up to here is delivered.
                next = next.max(header_rev + 1);
            }
            // The creation acknowledgement is not an event; etcd's client never shows it.
            if resp.created && resp.events.is_empty() {
                continue;
            }
            ctx.print(|p, w| p.watch(w, &resp))?;
            run_exec(exec, &resp);
        }
        drop(tx);
        // The stream broke (or the member went away): reconnect and resume.
        loop {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
            let Ok(c) = Client::connect(&ctx.g).await else {
                continue;
            };
            if let Ok(opened) = open(&c, from_revision(&req, next)).await {
                (tx, stream) = opened;
                break;
            }
        }
    }
}

pub async fn run(ctx: &Ctx, a: &WatchArgs) -> Result<()> {
    if a.interactive {
        return interactive(ctx).await;
    }
    let req = create_request(a)?;
    let c = ctx.client().await?;
    stream_watch(ctx, &c, req, &a.exec).await
}

/// Reads `watch ...` lines from stdin, starting a watch for each; ends at end of input.
async fn interactive(ctx: &Ctx) -> Result<()> {
    let c = ctx.client().await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(8);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    let mut tasks = tokio::task::JoinSet::new();
    let ctx_printer = std::sync::Arc::new(Ctx::new(ctx.g.clone())?);
    loop {
        tokio::select! {
            line = rx.recv() => {
                let line = match line {
                    Some(Ok(l)) => l,
                    Some(Err(e)) => return Err(CtlError::InvalidInput(format!("Error reading watch request line: {e}"))),
                    None => return Err(CtlError::InvalidInput("Error reading watch request line: EOF".into())),
                };
                let words = super::txn::argify(&line)?;
                if words.first().and_then(|w| w.to_str()) != Some("watch") {
                    eprintln!("Invalid command {line} (only support watch)");
                    continue;
                }
                if words.len() < 2 {
                    eprintln!("Invalid command {line} (command type or key is not provided)");
                    continue;
                }
                let wa = match InteractiveLine::try_parse_from(&words) {
                    Ok(InteractiveLine::Watch(wa)) => wa,
                    Err(e) => {
                        eprintln!("Invalid command {line} ({})", e.kind());
                        continue;
                    }
                };
                let req = match create_request(&wa) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("Invalid command {line} ({e})");
                        continue;
                    }
                };
                let (cc, pc) = (c.clone(), ctx_printer.clone());
                tasks.spawn(async move { stream_watch(&pc, &cc, req, &wa.exec).await });
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Ok(Err(e)) = done {
                    return Err(e);
                }
            }
        }
    }
}
