//! `etcdctl check datascale`: etcd's memory check: the server's resident size (from its
//! /metrics) before and after a load of 1 KiB key-values, reported in MB; the keys are deleted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Args;
use proto::etcdserverpb::{CompactionRequest, DefragmentRequest, DeleteRangeRequest, PutRequest};

use super::Ctx;
use super::check::{next_random, put_varint};
use crate::client::Client;
use crate::error::{CtlError, EXIT_ERROR, Result};
use crate::global::go_bool;
use crate::progress::Progress;

/// The series whose growth is the answer.
const RSS_SERIES: &str = "process_resident_memory_bytes";

#[derive(Args, Debug)]
pub struct DatascaleArgs {
    /// The datascale check's workload model. Accepted workloads: s(small), m(medium), l(large), xl(xLarge)
    #[arg(long, default_value = "s")]
    pub load: String,
    /// The prefix for writing the datascale check's keys.
    #[arg(verbatim_doc_comment)]
    #[arg(long, default_value = "/etcdctl-check-datascale/")]
    pub prefix: String,
    /// Compact storage with last revision after test is finished.
    #[arg(verbatim_doc_comment)]
    #[arg(long = "auto-compact", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub auto_compact: bool,
    /// Defragment storage after test is finished.
    #[arg(verbatim_doc_comment)]
    #[arg(long = "auto-defrag", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub auto_defrag: bool,
}

/// etcd's workloads: key-values to write, bytes per key-value (half key, half value), clients.
fn load(name: &str) -> Option<(u64, usize, usize)> {
    match name {
        "s" | "small" => Some((10_000, 1024, 50)),
        "m" | "medium" => Some((100_000, 1024, 200)),
        "l" | "large" => Some((1_000_000, 1024, 500)),
        "xl" | "xLarge" => Some((3_000_000, 1024, 1000)),
        _ => None,
    }
}

/// The resident size the server reports, or the reason there is none (printed as etcd does).
async fn resident_bytes(ctx: &Ctx, ep: &str) -> std::result::Result<f64, String> {
    let text = crate::client::http_get(&ctx.g, ep, "/metrics")
        .await
        .map_err(|e| e.to_string())?;
    parse_series(&text, RSS_SERIES).ok_or_else(|| format!("could not find: {RSS_SERIES}"))
}

/// A usable reading, or etcd's FAIL lines (`when`: before or after the puts) and exit 1.
fn reading_or_fail(r: std::result::Result<f64, String>, when: &str) -> f64 {
    match r {
        Ok(v) if v > 0.0 => v,
        other => {
            if let Err(why) = other {
                println!("{why}");
            }
            println!("FAIL: Could not read {RSS_SERIES} {when} the put operations.");
            std::process::exit(EXIT_ERROR);
        }
    }
}

/// The value of an unlabelled series in Prometheus text.
fn parse_series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

pub async fn run(ctx: &Ctx, a: &DatascaleArgs) -> Result<()> {
    let Some((limit, kv_size, clients)) = load(&a.load) else {
        return Err(CtlError::BadFeature(format!(
            "unknown load option {}",
            a.load
        )));
    };
    // Only the first endpoint is measured, as etcd's check does.
    let Some(ep) = ctx.g.endpoints.first().cloned() else {
        return Err(CtlError::bad_args("no endpoints given"));
    };
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(Client::connect_one(&ctx.g, &ep).await?);
    }
    let first = conns[0].clone();
    let prefix = a.prefix.as_bytes().to_vec();
    super::check::ensure_prefix_unused(&first, &a.prefix).await?;
    let before = reading_or_fail(resident_bytes(ctx, &ep).await, "before");
    println!(
        "Start data scale check for work load [{limit} key-value pairs, {kv_size} bytes per key-value, {clients} concurrent clients]."
    );
    let bar = Progress::start(limit);
    let bar = Arc::new(bar);
    let next = Arc::new(AtomicU64::new(0));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, c) in conns.into_iter().enumerate() {
        let (bar, next, prefix) = (bar.clone(), next.clone(), prefix.clone());
        let mut rng = seed ^ (i as u64).wrapping_mul(0x9E37_79B9);
        tasks.spawn(async move {
            let value = vec![0u8; kv_size / 2];
            let mut errors: Vec<String> = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < limit {
                let mut k = vec![0u8; kv_size / 2];
                put_varint(&mut k, (next_random(&mut rng) >> 1) as i64);
                let mut key = prefix.clone();
                key.extend_from_slice(&k);
                let mut kv = c.kv();
                let put = kv.put(PutRequest {
                    key,
                    value: value.clone(),
                    ..Default::default()
                });
                if let Err(e) = c.unary(put).await {
                    errors.push(e.to_string());
                }
                bar.inc();
            }
            errors
        });
    }
    let mut errors = std::collections::BTreeMap::<String, u64>::new();
    while let Some(r) = tasks.join_next().await {
        for e in r.unwrap_or_default() {
            *errors.entry(e).or_default() += 1;
        }
    }
    if let Ok(bar) = Arc::try_unwrap(bar) {
        bar.finish();
    }
    let after = resident_bytes(ctx, &ep).await;

    // Clean up the keys (and compact and defragment when asked), as etcd does.
    let del = first
        .unary(first.kv().delete_range(DeleteRangeRequest {
            key: prefix.clone(),
            range_end: crate::util::prefix_end(&prefix),
            ..Default::default()
        }))
        .await?;
    if a.auto_compact {
        let rev = del.header.map(|h| h.revision).unwrap_or(0);
        println!("Compacting with revision {rev}");
        first
            .unary(first.kv().compact(CompactionRequest {
                revision: rev,
                physical: true,
            }))
            .await?;
        println!("Compacted with revision {rev}");
    }
    if a.auto_defrag {
        println!("Defragmenting {ep:?}");
        first
            .unary(first.maintenance().defragment(DefragmentRequest {}))
            .await?;
        println!("Defragmented {ep:?}");
    }
    if !errors.is_empty() {
        println!("FAIL: too many errors");
        for (k, v) in &errors {
            println!("FAIL: ERROR({k}) -> {v}");
        }
        std::process::exit(EXIT_ERROR);
    }
    let after = reading_or_fail(after, "after");
    let mb = (after - before) / (1024.0 * 1024.0);
    println!("PASS: Approximate system memory used : {mb:.2} MB.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcds_loads() {
        assert_eq!(load("s"), Some((10_000, 1024, 50)));
        assert_eq!(load("xl"), Some((3_000_000, 1024, 1000)));
        assert_eq!(load("huge"), None);
    }

    #[test]
    fn reads_the_resident_size_as_go_prints_it() {
        let text = "# HELP process_resident_memory_bytes Resident memory size in bytes.\n\
                    # TYPE process_resident_memory_bytes gauge\n\
                    process_resident_memory_bytes 9.1348992e+07\n\
                    process_resident_memory_bytes_other 1\n";
        assert_eq!(parse_series(text, RSS_SERIES), Some(91_348_992.0));
        assert_eq!(parse_series("x 1\n", RSS_SERIES), None);
    }
}
