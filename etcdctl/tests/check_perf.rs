// `etcdctl check perf` against a real etcd 3.4: the refusal of a used prefix as the Go
// etcdctl words it, and a full small-load run that passes and cleans up after itself.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::process::Command;

use support::RealEtcd;

const OURS: &str = env!("CARGO_BIN_EXE_etcdctl");

fn run(bin: &str, url: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin)
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", url])
        .args(args)
        .output()
        .expect("run etcdctl")
}

#[test]
fn check_perf_refuses_a_used_prefix_and_passes_a_small_load() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = RealEtcd::start(&tmp.path().join("real"), "perf");
    s.etcdctl_ok(&["put", "/used/k", "v"]);
    let go = run(
        "etcdctl",
        &s.client_url,
        &["check", "perf", "--prefix", "/used/"],
    );
    let ours = run(
        OURS,
        &s.client_url,
        &["check", "perf", "--prefix", "/used/"],
    );
    assert_eq!(ours.status.code(), go.status.code());
    assert_eq!(
        String::from_utf8_lossy(&ours.stderr),
        String::from_utf8_lossy(&go.stderr)
    );
    let bad = run(OURS, &s.client_url, &["check", "perf", "--load", "huge"]);
    assert!(!bad.status.success());

    // A minute of the small load (150 writes/s from 50 clients).
    let out = run(OURS, &s.client_url, &["check", "perf"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("PASS: Throughput is ") && l.ends_with(" writes/s")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("PASS: Slowest request took ")),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("PASS: Stddev is ")),
        "{text}"
    );
    assert_eq!(lines.last(), Some(&"PASS"));
    // Its keys are gone afterwards.
    let left = s.etcdctl_ok(&["get", "/etcdctl-check-perf/", "--prefix", "--keys-only"]);
    assert!(left.trim().is_empty(), "{left}");
}
