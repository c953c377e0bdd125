// `etcdctl check perf` against a real etcd 3.4: the refusal of a used prefix as the Go
// etcdctl words it, and a full small-load run whose report is etcd's and cleans up after itself.

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

    // A minute of the small load (150 writes/s from 50 clients). Whether the machine meets
    // etcd's bounds is a benchmark's question (a loaded CI machine once had a 0.68 s slowest
    // write against etcd's 0.5 s): this checks the report. Each of the three checks is a
    // PASS line or etcd's failure line, and the verdict and exit status follow from them.
    let out = run(OURS, &s.client_url, &["check", "perf"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let check = |pass: &str, fail: &str| -> bool {
        let passed = lines.iter().any(|l| l.starts_with(pass));
        let failed = lines.iter().any(|l| l.starts_with(fail));
        assert!(passed != failed, "one of {pass:?} / {fail:?} in:\n{text}");
        passed
    };
    let all = [
        check("PASS: Throughput is ", "FAIL: Throughput too low: "),
        check(
            "PASS: Slowest request took ",
            "Slowest request took too long: ",
        ),
        check("PASS: Stddev is ", "Stddev too high: "),
    ];
    let verdict = if all.iter().all(|p| *p) {
        "PASS"
    } else {
        "FAIL"
    };
    assert_eq!(lines.last(), Some(&verdict), "{text}");
    assert_eq!(
        out.status.success(),
        verdict == "PASS",
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("Throughput") && l.ends_with(" writes/s")),
        "{text}"
    );
    // Its keys are gone afterwards.
    let left = s.etcdctl_ok(&["get", "/etcdctl-check-perf/", "--prefix", "--keys-only"]);
    assert!(left.trim().is_empty(), "{left}");
}

/// `check datascale` against etcd 3.4: the same refusals as the Go etcdctl, and a small load
/// that reports the server's memory growth and deletes its keys.
#[test]
fn check_datascale_matches_etcdctl() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = RealEtcd::start(&tmp.path().join("real"), "datascale");
    s.etcdctl_ok(&["put", "/used/k", "v"]);
    for args in [
        &["check", "datascale", "--prefix", "/used/"][..],
        &["check", "datascale", "--load", "huge"][..],
    ] {
        let go = run("etcdctl", &s.client_url, args);
        let ours = run(OURS, &s.client_url, args);
        assert_eq!(ours.status.code(), go.status.code(), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&go.stderr),
            "{args:?}"
        );
    }
    let go = run("etcdctl", &s.client_url, &["check", "datascale"]);
    let ours = run(
        OURS,
        &s.client_url,
        &["check", "datascale", "--auto-compact", "--auto-defrag"],
    );
    let (go_text, text) = (
        String::from_utf8_lossy(&go.stdout),
        String::from_utf8_lossy(&ours.stdout),
    );
    assert!(go.status.success(), "{go_text}");
    assert!(
        ours.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    // The first line names the load; the progress line is redrawn with '\r'.
    assert_eq!(text.lines().next(), go_text.lines().next());
    assert!(text.contains("\r 10000 / 10000  100.00% "), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    assert!(n >= 6, "{text}");
    assert!(
        lines[n - 5].starts_with("Compacting with revision "),
        "{text}"
    );
    assert!(
        lines[n - 4].starts_with("Compacted with revision "),
        "{text}"
    );
    assert_eq!(lines[n - 3], format!("Defragmenting {:?}", s.client_url));
    assert_eq!(lines[n - 2], format!("Defragmented {:?}", s.client_url));
    let mb: f64 = lines[n - 1]
        .strip_prefix("PASS: Approximate system memory used : ")
        .and_then(|l| l.strip_suffix(" MB."))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(mb.abs() < 10_000.0, "{mb}");
    let left = s.etcdctl_ok(&[
        "get",
        "/etcdctl-check-datascale/",
        "--prefix",
        "--keys-only",
    ]);
    assert!(left.trim().is_empty(), "{left}");
}
