//! `etcdctl check perf`: etcd's performance check: a minute of rate-limited 1 KiB puts from many
//! clients, passing when the throughput, the slowest request and the spread are within etcd's
//! limits for the chosen load; the keys are deleted afterwards.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use proto::etcdserverpb::{
    CompactionRequest, DefragmentRequest, DeleteRangeRequest, PutRequest, RangeRequest,
};

use super::Ctx;
use crate::client::Client;
use crate::error::{CtlError, EXIT_ERROR, Result};
use crate::global::go_bool;
use crate::progress::Progress;

/// Check the etcd cluster
#[derive(Subcommand, Debug)]
pub enum CheckCmd {
    /// Check the performance of the etcd cluster
    #[command(override_usage = "[options]")]
    Perf(PerfArgs),
    /// Check the memory usage of holding data for different workloads on a given server endpoint.
    #[command(verbatim_doc_comment)]
    #[command(
        override_usage = "[options]",
        long_about = "If no endpoint is provided, localhost will be used. If multiple endpoints are provided, first endpoint will be used."
    )]
    Datascale(super::datascale::DatascaleArgs),
}

#[derive(Args, Debug)]
pub struct PerfArgs {
    /// The performance check's workload model. Accepted workloads: s(small), m(medium), l(large), xl(xLarge)
    #[arg(long, default_value = "s")]
    pub load: String,
    /// The prefix for writing the performance check's keys.
    #[arg(verbatim_doc_comment)]
    #[arg(long, default_value = "/etcdctl-check-perf/")]
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

/// etcd's workloads: writes per second, concurrent clients, seconds.
fn load(name: &str) -> Option<(u32, usize, u64)> {
    match name {
        "s" | "small" => Some((150, 50, 60)),
        "m" | "medium" => Some((1000, 200, 60)),
        "l" | "large" => Some((8000, 500, 60)),
        "xl" | "xLarge" => Some((15000, 1000, 60)),
        _ => None,
    }
}

pub async fn run(ctx: &Ctx, c: &CheckCmd) -> Result<()> {
    match c {
        CheckCmd::Perf(a) => perf(ctx, a).await,
        CheckCmd::Datascale(a) => super::datascale::run(ctx, a).await,
    }
}

/// Refuses a prefix that already holds keys, as etcd's checks do (they delete it afterwards).
pub(super) async fn ensure_prefix_unused(c: &Client, prefix: &str) -> Result<()> {
    let key = prefix.as_bytes().to_vec();
    let existing = c
        .unary(c.kv().range(RangeRequest {
            range_end: crate::util::prefix_end(&key),
            key,
            limit: 1,
            ..Default::default()
        }))
        .await?;
    if !existing.kvs.is_empty() {
        return Err(CtlError::InvalidInput(format!(
            "prefix {prefix:?} has keys. Delete with etcdctl del --prefix {prefix} first"
        )));
    }
    Ok(())
}

/// A small generator for the random key bytes (etcd writes a random varint into the key).
pub(super) fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Go's binary.PutVarint into the front of `buf`.
pub(super) fn put_varint(buf: &mut [u8], v: i64) {
    let mut ux = (v as u64) << 1;
    if v < 0 {
        ux = !ux;
    }
    let mut i = 0;
    while ux >= 0x80 && i < buf.len() {
        buf[i] = (ux as u8) | 0x80;
        ux >>= 7;
        i += 1;
    }
    if i < buf.len() {
        buf[i] = ux as u8;
    }
}

async fn perf(ctx: &Ctx, a: &PerfArgs) -> Result<()> {
    let Some((limit, clients, secs)) = load(&a.load) else {
        return Err(CtlError::BadFeature(format!(
            "unknown load option {}",
            a.load
        )));
    };
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(Client::connect(&ctx.g).await?);
    }
    let first = conns[0].clone();
    let prefix = a.prefix.as_bytes().to_vec();
    ensure_prefix_unused(&first, &a.prefix).await?;
    let bar = Progress::start(secs);
    let lat: Arc<Mutex<Vec<f64>>> = Arc::default();
    let errs: Arc<Mutex<std::collections::BTreeMap<String, u64>>> = Arc::default();
    let sem = Arc::new(tokio::sync::Semaphore::new(clients));
    let started = Instant::now();
    let end = started + Duration::from_secs(secs);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(limit)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rng = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let value = vec![0u8; 1024];
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0usize;
    while Instant::now() < end {
        tick.tick().await;
        bar.set(started.elapsed().as_secs().min(secs));
        let Ok(permit) = sem.clone().acquire_owned().await else {
            break;
        };
        let mut k = vec![0u8; 256];
        put_varint(&mut k, (next_random(&mut rng) >> 1) as i64);
        let mut key = prefix.clone();
        key.extend_from_slice(&k);
        let c = conns[n % clients].clone();
        n += 1;
        let (lat, errs, value) = (lat.clone(), errs.clone(), value.clone());
        tasks.spawn(async move {
            let st = Instant::now();
            let r = c
                .unary(c.kv().put(PutRequest {
                    key,
                    value,
                    ..Default::default()
                }))
                .await;
            let took = st.elapsed().as_secs_f64();
            match r {
                Ok(_) => lat.lock().unwrap_or_else(|e| e.into_inner()).push(took),
                Err(e) => {
                    *errs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(e.to_string())
                        .or_default() += 1
                }
            }
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let total = started.elapsed().as_secs_f64();
    bar.set(secs);
    bar.finish();
    // Clean up the keys (and compact and defragment when asked), as etcd does.
    let del = first
        .unary(first.kv().delete_range(DeleteRangeRequest {
            key: prefix.clone(),
            range_end: crate::util::prefix_end(&prefix),
            ..Default::default()
        }))
        .await;
    match del {
        Ok(r) if a.auto_compact => {
            let rev = r.header.map(|h| h.revision).unwrap_or(0);
            if let Err(e) = first
                .unary(first.kv().compact(CompactionRequest {
                    revision: rev,
                    physical: true,
                }))
                .await
            {
                eprintln!("Error: {e}");
            }
        }
        Ok(_) => {}
        Err(e) => eprintln!("Error: {e}"),
    }
    if a.auto_defrag {
        for ep in &ctx.g.endpoints {
            match Client::connect_one(&ctx.g, ep).await {
                Ok(c) => match c
                    .unary(c.maintenance().defragment(DefragmentRequest {}))
                    .await
                {
                    Ok(_) => println!("Finished defragmenting etcd member[{ep}]"),
                    Err(e) => eprintln!("Failed to defragment etcd member[{ep}] ({e})"),
                },
                Err(e) => eprintln!("Failed to defragment etcd member[{ep}] ({e})"),
            }
        }
    }
    let lat = lat.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let errs = errs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let rps = lat.len() as f64 / total;
    let slowest = lat.iter().copied().fold(0.0, f64::max);
    let mean = if lat.is_empty() {
        0.0
    } else {
        lat.iter().sum::<f64>() / lat.len() as f64
    };
    let stddev = if lat.is_empty() {
        0.0
    } else {
        (lat.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / lat.len() as f64).sqrt()
    };
    let mut ok = true;
    if !errs.is_empty() {
        println!("FAIL: too many errors");
        for (k, v) in &errs {
            println!("FAIL: ERROR({k}) -> {v}");
        }
        ok = false;
    }
    if rps / f64::from(limit) <= 0.9 {
        println!("FAIL: Throughput too low: {} writes/s", rps as i64 + 1);
        ok = false;
    } else {
        println!("PASS: Throughput is {} writes/s", rps as i64 + 1);
    }
    if slowest > 0.5 {
        println!("Slowest request took too long: {slowest:.6}s");
        ok = false;
    } else {
        println!("PASS: Slowest request took {slowest:.6}s");
    }
    if stddev > 0.1 {
        println!("Stddev too high: {stddev:.6}s");
        ok = false;
    } else {
        println!("PASS: Stddev is {stddev:.6}s");
    }
    if ok {
        println!("PASS");
        Ok(())
    } else {
        println!("FAIL");
        std::process::exit(EXIT_ERROR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_as_go_writes_it() {
        let mut b = [0u8; 4];
        put_varint(&mut b, 1);
        assert_eq!(b, [2, 0, 0, 0]);
        put_varint(&mut b, -1);
        assert_eq!(b[0], 1);
        put_varint(&mut b, 300);
        assert_eq!(&b[..2], &[0xd8, 0x04]);
    }

    #[test]
    fn etcds_loads() {
        assert_eq!(load("s"), Some((150, 50, 60)));
        assert_eq!(load("xLarge"), Some((15000, 1000, 60)));
        assert_eq!(load("huge"), None);
    }
}
