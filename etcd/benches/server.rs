// Server benchmark, one member: ours next to the real etcd 3.4 in the same run on the same disk,
// both started with the same flags on free loopback ports and kept up for the whole run.
//
// The workloads are issue 15's table (load/mod.rs describes each exactly): put with 1 and 64
// clients, txn with one put, 1000 watchers on 100 keys under 8k unthrottled puts (events/s and
// delivery p50/p99), range linearizable/serializable, range prefix of 10k keys with limit 100,
// db size and peak RSS after 100k keys (and per revision at the end of the run), server CPU
// per op of every workload, and the compaction of BENCH_COMPACT_REVS revisions with the write
// p99 of 64 writers during it vs without it. Prints etcd, ours, ours/etcd and the target.
//
// Run: scripts/bench.sh server   (needs Debian's etcd-server: scripts/deps.sh)
// Sizes (defaults): BENCH_SECS=5 per timed load, BENCH_KEYS=100000, BENCH_PREFIX_KEYS=10000,
// BENCH_WATCHERS=1000, BENCH_WATCH_KEYS=100, BENCH_WATCH_PUTS=8000, BENCH_WATCHERS_PER_STREAM=1,
// BENCH_COMPACT_REVS=100000 (1000000 for the million). BENCH_ONLY=etcd|ours runs one
// server; BENCH_WORKLOADS=keys,put1,put64,txn,range,prefix,listall,watch,progress,db,compact picks workloads.
// BENCH_ROUNDS=n runs each repeatable workload n times and prints medians (the issue's: 4).
// BENCH_FLAGS="--unsafe-no-fsync ..." adds flags to both servers' command lines.
// Quick mode: BENCH_SECS=2 BENCH_KEYS=20000 BENCH_COMPACT_REVS=20000 scripts/bench.sh server

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "load/mod.rs"]
mod load;

/// The load generator shares the machine with the servers it measures: its own CPU per request
/// (glibc malloc was a tenth of it) takes cores from both, so it uses the allocator ours does.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cfg = load::Config::from_env();
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    // BENCH_FLAGS: extra flags for both servers (e.g. "--unsafe-no-fsync" to see what a put
    // costs besides the disk).
    let flags = std::env::var("BENCH_FLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    // The test support starts a server on free ports and waits until it is healthy.
    let servers = load::SERVERS.map(|(name, bin)| {
        cfg.runs(name)
            .then(|| support::RealEtcd::start_bin(bin, &tmp.path().join(name), "bench", &flags))
    });
    let targets = std::array::from_fn(|i| {
        let s = servers[i].as_ref()?;
        Some(load::Target {
            name: load::SERVERS[i].0,
            urls: vec![s.client_url.clone()],
            members: vec![s.client_url.clone()],
            pids: s.child.iter().map(|c| c.id()).collect(),
            data_dirs: vec![s.data_dir.clone()],
        })
    });
    let table = load::run_suite(&rt, &cfg, &targets, false);
    table.print(&format!(
        "server benchmark, one member: {}s per timed load, 256-byte values, same machine and disk",
        cfg.secs
    ));
}
