// Memory benchmark by etcd's own tool: the Go `etcdctl check datascale` (1 KiB key-values from
// many clients; it reports the server's resident-memory growth) run against etcd 3.4 and ours,
// side by side, then each server's resident memory once the keys are deleted, compacted and
// defragmented and the servers have been idle for a while.
//
// Run: scripts/bench.sh datascale   (BENCH_LOADS=s,m by default; l and xl take long)

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::time::Duration;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
/// How long both servers idle before their resident memory is read.
const IDLE: Duration = Duration::from_secs(12);

/// The MB figure of "PASS: Approximate system memory used : 46.41 MB."
fn memory_used(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("PASS: Approximate system memory used : "))
        .and_then(|l| l.strip_suffix(" MB."))
        .and_then(|v| v.trim().parse().ok())
}

/// process_resident_memory_bytes from the server's /metrics, in MiB.
fn resident_mib(url: &str) -> f64 {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let mut body = String::new();
    let got = std::net::TcpStream::connect(host).and_then(|mut s| {
        s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())?;
        s.read_to_string(&mut body)
    });
    if got.is_err() {
        return 0.0;
    }
    body.lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|b| b / (1024.0 * 1024.0))
        .unwrap_or(0.0)
}

fn main() {
    let loads = std::env::var("BENCH_LOADS").unwrap_or_else(|_| "s,m".into());
    let tmp = tempfile::tempdir().expect("temp dir");
    let real = support::RealEtcd::start(&tmp.path().join("etcd"), "bench");
    let ours = support::RealEtcd::start_bin(OURS, &tmp.path().join("ours"), "bench", &[]);
    let servers = [("etcd 3.4", &real), ("etcd-rs", &ours)];
    println!(
        "check datascale (Go etcdctl 3.4, --auto-compact --auto-defrag), same machine and disk"
    );
    println!(
        "{:<44} {:>10} {:>10} {:>10}",
        "", "etcd 3.4", "etcd-rs", "ours/etcd"
    );
    let row = |name: &str, a: f64, b: f64| {
        let ratio = if a > 0.0 { b / a } else { 0.0 };
        println!("{name:<44} {a:>10.2} {b:>10.2} {ratio:>10.2}");
    };
    row(
        "resident MiB at start",
        resident_mib(&real.client_url),
        resident_mib(&ours.client_url),
    );
    for load in loads.split(',').filter(|l| !l.is_empty()) {
        let mut used = Vec::new();
        for (name, s) in servers {
            let out = s.etcdctl(&[
                "check",
                "datascale",
                "--load",
                load,
                "--auto-compact",
                "--auto-defrag",
            ]);
            let text = String::from_utf8_lossy(&out.stdout);
            let mb = memory_used(&text).unwrap_or_else(|| {
                panic!(
                    "{name}: check datascale --load {load} failed: {}{}",
                    text.lines().last().unwrap_or(""),
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            used.push(mb);
        }
        row(
            &format!("load {load}: \"memory used\" MB"),
            used[0],
            used[1],
        );
        std::thread::sleep(IDLE);
        row(
            &format!("load {load}: resident MiB {}s after", IDLE.as_secs()),
            resident_mib(&real.client_url),
            resident_mib(&ours.client_url),
        );
    }
}
