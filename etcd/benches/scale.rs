// Scale benchmark (issue 19): a million puts on random keys into one member of etcd 3.4 and of
// ours, side by side: load time, resident memory split into heap and db file pages, restart.
//
// The load: BENCH_SCALE_PUTS (1,000,000) puts of 256-byte values, each on a key drawn uniformly
// (with replacement) from BENCH_SCALE_KEYS (1,000,000) 8-byte keys, from 64 clients over 4
// connections, as etcd's `benchmark put --key-space-size` does (so about 63% of the key space is
// live at the end). Both servers run with --quota-backend-bytes 8589934592. Then, per server:
// RSS total/anon/file (/proc/<pid>/status), what of the db file is resident in the server's
// mapping (/proc/<pid>/smaps), the db file size; kill -9, restart (until `endpoint health`
// answers) and the same memory figures after the restart. Then every key read at once (issue
// 17), timed with the peak RSS (db file pages mapped by the read included): a RangeStream of the
// whole key space on ours (etcd 3.4 has none: Unimplemented, 0 in the table), then a unary
// Range of it on both. Then a compaction to the latest
// revision (physical: the answer waits for the deletes) and a defrag, each timed with the peak
// RSS while it ran (VmHWM after resetting it through /proc/<pid>/clear_refs), with one client
// putting in a loop meanwhile (how many puts it got answered, its longest wait), and the db
// file after the defrag.
//
// Run: scripts/bench.sh scale   (BENCH_ONLY=etcd|ours runs one server; BENCH_OURS_BIN=<path>
// measures another build of ours, e.g. an older one; BENCH_SCALE_SEQUENTIAL=1 puts key i % keys
// for the i-th put, so that as many puts as keys leave every key alive (issue 17's RangeStream of
// 1M keys); quick: BENCH_SCALE_PUTS=200000 BENCH_SCALE_KEYS=200000 scripts/bench.sh scale)

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "load/mod.rs"]
mod load;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proto::etcdserverpb::{
    CompactionRequest, DefragmentRequest, PutRequest, RangeRequest, kv_client::KvClient,
    maintenance_client::MaintenanceClient,
};

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const CLIENTS: usize = 64;
const CONNS: usize = 4;
const VALUE: usize = 256;
const QUOTA: &str = "8589934592";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Memory of one process, MiB.
#[derive(Default, Clone, Copy)]
struct Mem {
    total: f64,
    anon: f64,
    file: f64,
    /// Resident pages of the db file's mapping.
    db_mapped: f64,
}

fn status_kib(pid: u32, field: &str) -> f64 {
    support::proc_status_kib(pid, field).map_or(0.0, |kib| kib as f64)
}

/// Sum of `Rss:` over the mappings of files named member/snap/db, KiB.
fn db_mapped_kib(pid: u32) -> f64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut in_db = false;
    let mut kib = 0.0;
    for l in smaps.lines() {
        // A mapping's header starts with its address range; its fields are "Name: value".
        let first = l.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            in_db = l.trim_end().ends_with("/member/snap/db");
        } else if in_db && let Some(v) = l.strip_prefix("Rss:") {
            kib += v
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    kib
}

fn mem(pid: u32) -> Mem {
    Mem {
        total: status_kib(pid, "VmRSS:") / 1024.0,
        anon: status_kib(pid, "RssAnon:") / 1024.0,
        file: status_kib(pid, "RssFile:") / 1024.0,
        db_mapped: db_mapped_kib(pid) / 1024.0,
    }
}

/// Resets the process's peak RSS (VmHWM) so the next reading covers what follows.
fn reset_peak(pid: u32) {
    // "5" resets the peak resident set size (Linux ≥ 4.0); a failure leaves the peak since start.
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// Reads every key with one unary Range (`stream` false) or one RangeStream; (seconds, keys),
/// or None when the server has no such call.
async fn read_everything(url: &str, stream: bool) -> Option<(f64, u64)> {
    let mut kv = KvClient::new(long_channel(url).await).max_decoding_message_size(usize::MAX);
    let all = RangeRequest {
        key: vec![0],
        range_end: vec![0],
        ..Default::default()
    };
    let t = Instant::now();
    if !stream {
        let r = kv
            .range(all)
            .await
            .expect("range of every key")
            .into_inner();
        return Some((t.elapsed().as_secs_f64(), r.kvs.len() as u64));
    }
    let mut s = match kv.range_stream(all).await {
        Ok(s) => s.into_inner(),
        Err(e) if e.code() == tonic::Code::Unimplemented => return None,
        Err(e) => panic!("range stream: {e}"),
    };
    let mut keys = 0;
    while let Some(m) = s.message().await.expect("a range stream chunk") {
        keys += m.range_response.map_or(0, |r| r.kvs.len() as u64);
    }
    Some((t.elapsed().as_secs_f64(), keys))
}

/// A client for one long call (a compaction or defrag of millions of revisions).
async fn long_channel(url: &str) -> tonic::transport::Channel {
    let _ = load::connect(url).await;
    tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("client URL")
        .timeout(Duration::from_secs(3600))
        .connect()
        .await
        .expect("connect")
}

/// Compacts to the latest revision and waits for the deletes; seconds.
async fn compact_all(url: &str) -> f64 {
    let mut kv = KvClient::new(long_channel(url).await);
    let rev = kv
        .range(RangeRequest {
            key: b"x".to_vec(),
            serializable: true,
            ..Default::default()
        })
        .await
        .expect("range")
        .into_inner()
        .header
        .map(|h| h.revision)
        .unwrap_or(0);
    let t = Instant::now();
    kv.compact(CompactionRequest {
        revision: rev,
        physical: true,
    })
    .await
    .expect("compact");
    t.elapsed().as_secs_f64()
}

/// What one client writing in a loop saw while a long call ran: whether the member kept
/// serving writes (etcd's defrag holds them all; ours should not).
#[derive(Default, Clone, Copy)]
struct Probe {
    puts: u64,
    longest_ms: f64,
}

/// Runs `call` while one client puts a key in a loop; the call's result and what the client
/// saw (the put in flight when the call ends is waited for: a put held for the whole call
/// counts).
async fn probed<F: std::future::Future<Output = f64>>(url: &str, call: F) -> (f64, Probe) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut kv = KvClient::new(long_channel(url).await);
    let s = stop.clone();
    let probe = tokio::spawn(async move {
        let mut p = Probe::default();
        while !s.load(Ordering::Relaxed) {
            let t = Instant::now();
            let put = PutRequest {
                key: b"probe".to_vec(),
                value: vec![b'p'; VALUE],
                ..Default::default()
            };
            if kv.put(put).await.is_ok() {
                p.puts += 1;
            }
            p.longest_ms = p.longest_ms.max(t.elapsed().as_secs_f64() * 1e3);
        }
        p
    });
    let out = call.await;
    stop.store(true, Ordering::Relaxed);
    (out, probe.await.unwrap_or_default())
}

/// Defragments the member's db; seconds.
async fn defrag(url: &str) -> f64 {
    let mut m = MaintenanceClient::new(long_channel(url).await);
    let t = Instant::now();
    m.defragment(DefragmentRequest {})
        .await
        .expect("defragment");
    t.elapsed().as_secs_f64()
}

/// splitmix64: a fixed, dependency-free key sequence per client.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The put load, on random keys or (`sequential`) on key i % keys for the i-th put, so that
/// as many puts as keys leave every key alive once; (seconds, failed puts).
async fn load(url: &str, puts: u64, keys: u64, sequential: bool) -> (f64, u64) {
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        conns.push(load::connect(url).await);
    }
    let left = Arc::new(AtomicU64::new(puts));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let mut kv = KvClient::new(conns[c % CONNS].clone());
            let (left, failed) = (left.clone(), failed.clone());
            tokio::spawn(async move {
                let mut seed = c as u64 + 1;
                let value = vec![b'v'; VALUE];
                while let Ok(n) =
                    left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                {
                    let random = next(&mut seed);
                    let k = if sequential { puts - n } else { random } % keys;
                    let put = PutRequest {
                        key: format!("{k:08x}").into_bytes(),
                        value: value.clone(),
                        ..Default::default()
                    };
                    if kv.put(put).await.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client task");
    }
    (
        start.elapsed().as_secs_f64(),
        failed.load(Ordering::Relaxed),
    )
}

struct Measured {
    load_secs: f64,
    failed: u64,
    after_load: Mem,
    db_mib: f64,
    restart_secs: f64,
    after_restart: Mem,
    /// (seconds, peak RSS MiB, keys) of the unary Range and of the RangeStream of every key.
    reads: [(f64, f64, u64); 2],
    compact_secs: f64,
    compact_peak_mib: f64,
    compact_probe: Probe,
    defrag_secs: f64,
    defrag_peak_mib: f64,
    defrag_probe: Probe,
    db_after_defrag_mib: f64,
}

fn db_mib_of(s: &support::RealEtcd) -> f64 {
    std::fs::metadata(s.data_dir.join("member/snap/db"))
        .map(|m| m.len() as f64 / (1 << 20) as f64)
        .unwrap_or(0.0)
}

fn run(
    name: &str,
    bin: &str,
    dir: &std::path::Path,
    puts: u64,
    keys: u64,
    sequential: bool,
) -> Measured {
    let flags = ["--quota-backend-bytes", QUOTA];
    let mut s = support::RealEtcd::start_bin(bin, &dir.join(name), "scale", &flags);
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    eprintln!("scale: {puts} puts over {keys} keys on {name}");
    let (load_secs, failed) = rt.block_on(load(&s.client_url, puts, keys, sequential));
    // Both backends commit every 100 ms: let the last batch land.
    std::thread::sleep(Duration::from_secs(2));
    let pid = s.child.as_ref().map(|c| c.id()).unwrap_or(0);
    let after_load = mem(pid);
    let db_mib = db_mib_of(&s);
    let t = Instant::now();
    // etcd 3.4 needed 303 s to restart on 10M keys.
    s.restart_within(bin, &flags, Duration::from_secs(1200));
    let restart_secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let pid = s.child.as_ref().map(|c| c.id()).unwrap_or(0);
    let after_restart = mem(pid);
    let mut reads = [(0.0, 0.0, 0); 2];
    // The stream first: the unary Range's answer leaves the heap grown (the allocator keeps
    // freed pages a while), which would raise the stream's starting point.
    for (i, stream) in [(1, true), (0, false)] {
        reset_peak(pid);
        if let Some((secs, keys)) = rt.block_on(read_everything(&s.client_url, stream)) {
            reads[i] = (secs, status_kib(pid, "VmHWM:") / 1024.0, keys);
        }
    }
    reset_peak(pid);
    let (compact_secs, compact_probe) =
        rt.block_on(probed(&s.client_url, compact_all(&s.client_url)));
    let compact_peak_mib = status_kib(pid, "VmHWM:") / 1024.0;
    reset_peak(pid);
    let (defrag_secs, defrag_probe) = rt.block_on(probed(&s.client_url, defrag(&s.client_url)));
    let defrag_peak_mib = status_kib(pid, "VmHWM:") / 1024.0;
    let db_after_defrag_mib = db_mib_of(&s);
    Measured {
        load_secs,
        failed,
        after_load,
        db_mib,
        restart_secs,
        after_restart,
        reads,
        compact_secs,
        compact_peak_mib,
        compact_probe,
        defrag_secs,
        defrag_peak_mib,
        defrag_probe,
        db_after_defrag_mib,
    }
}

fn main() {
    let puts = env("BENCH_SCALE_PUTS", 1_000_000);
    let keys = env("BENCH_SCALE_KEYS", 1_000_000).max(1);
    let sequential = std::env::var("BENCH_SCALE_SEQUENTIAL").is_ok_and(|v| v == "1");
    let only = std::env::var("BENCH_ONLY").ok();
    let ours = std::env::var("BENCH_OURS_BIN").unwrap_or_else(|_| OURS.to_string());
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut out: [Option<Measured>; 2] = [None, None];
    for (i, (name, bin)) in [("etcd", "etcd"), ("ours", ours.as_str())]
        .iter()
        .enumerate()
    {
        if only.as_deref().is_none_or(|o| o == *name) {
            out[i] = Some(run(name, bin, tmp.path(), puts, keys, sequential));
        }
    }
    println!(
        "scale: {puts} puts of {VALUE}-byte values on {} keys of {keys}, {CLIENTS} clients, \
         one member, --quota-backend-bytes {QUOTA}; ours: {ours}",
        if sequential { "sequential" } else { "random" }
    );
    println!(
        "{:<40} {:>10} {:>10} {:>10}",
        "", "etcd 3.4", "etcd-rs", "ours/etcd"
    );
    let row = |label: &str, f: &dyn Fn(&Measured) -> f64| {
        let v = |i: usize| out[i].as_ref().map(f).unwrap_or(0.0);
        let (a, b) = (v(0), v(1));
        let ratio = if a > 0.0 { b / a } else { 0.0 };
        println!("{label:<40} {a:>10.2} {b:>10.2} {ratio:>10.2}");
    };
    row("load, s", &|m| m.load_secs);
    row("puts/s", &|m| puts as f64 / m.load_secs.max(1e-9));
    row("failed puts", &|m| m.failed as f64);
    row("RSS after load, MiB", &|m| m.after_load.total);
    row("  anon (heap), MiB", &|m| m.after_load.anon);
    row("  file-backed, MiB", &|m| m.after_load.file);
    row("  db mapping resident, MiB", &|m| m.after_load.db_mapped);
    row("db file, MiB", &|m| m.db_mib);
    row("restart after kill -9, s", &|m| m.restart_secs);
    row("RSS after restart, MiB", &|m| m.after_restart.total);
    row("  anon (heap), MiB", &|m| m.after_restart.anon);
    row("  file-backed, MiB", &|m| m.after_restart.file);
    row("  db mapping resident, MiB", &|m| m.after_restart.db_mapped);
    row("unary Range of every key, s", &|m| m.reads[0].0);
    row("  peak RSS meanwhile, MiB", &|m| m.reads[0].1);
    row("  keys", &|m| m.reads[0].2 as f64);
    row("RangeStream of every key, s", &|m| m.reads[1].0);
    row("  peak RSS meanwhile, MiB", &|m| m.reads[1].1);
    row("  keys", &|m| m.reads[1].2 as f64);
    row("compact to latest (physical), s", &|m| m.compact_secs);
    row("  peak RSS meanwhile, MiB", &|m| m.compact_peak_mib);
    row("  puts answered meanwhile (1 client)", &|m| {
        m.compact_probe.puts as f64
    });
    row("  longest put meanwhile, ms", &|m| {
        m.compact_probe.longest_ms
    });
    row("defrag, s", &|m| m.defrag_secs);
    row("  peak RSS meanwhile, MiB", &|m| m.defrag_peak_mib);
    row("  puts answered meanwhile (1 client)", &|m| {
        m.defrag_probe.puts as f64
    });
    row("  longest put meanwhile, ms", &|m| {
        m.defrag_probe.longest_ms
    });
    row("db file after defrag, MiB", &|m| m.db_after_defrag_mib);
}
