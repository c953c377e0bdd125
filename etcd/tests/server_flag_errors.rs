// etcd 3.6's start-time flag rules, run through the real binary: one setting given under both
// its 3.5 and its 3.6 spelling, and an unknown or unsupported feature gate, stop the server
// with etcd's message and exit code before it touches the data dir.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::free_port;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");

/// A start's command-line flags and environment variables.
type Start<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>);

/// What one refused start printed and returned.
struct Refusal {
    code: Option<i32>,
    stderr: String,
}

/// Runs the server with `args` and `env` on free ports in `data`, expecting it to exit by
/// itself (it is killed after 20 s if it started instead, and the test fails).
fn refused(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Refusal {
    let (client, peer) = (free_port(), free_port());
    let mut child = Command::new(OURS)
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
        .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
        ))
        .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}"))
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn etcd");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait for etcd").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} {env:?}: the server started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("etcd output");
    Refusal {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn both_spellings_of_one_setting_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let both = |old: &str, new: &str| {
        format!(
            "etcd: error verifying flags, cannot set --{old} and --{new} at the same time, please use --{new} only. See 'etcd --help'.\n"
        )
    };
    let gate_and_flag = "etcd: error verifying flags, cannot specify both flags: --experimental-initial-corrupt-check=true and --feature-gates=InitialCorruptCheck=true at the same time, please just use --feature-gates=InitialCorruptCheck=true. See 'etcd --help'.\n".to_string();
    let cases: Vec<(Start, String)> = vec![
        // kubeadm's two settings, each given both ways on the command line.
        (
            (
                vec![
                    "--experimental-watch-progress-notify-interval=5s",
                    "--watch-progress-notify-interval=5s",
                ],
                vec![],
            ),
            both(
                "experimental-watch-progress-notify-interval",
                "watch-progress-notify-interval",
            ),
        ),
        (
            (
                vec![
                    "--experimental-initial-corrupt-check=true",
                    "--feature-gates=InitialCorruptCheck=true",
                ],
                vec![],
            ),
            gate_and_flag.clone(),
        ),
        // One spelling from the environment and the other on the command line count as both
        // (an old manifest's ETCD_* variable next to a new flag).
        (
            (
                vec!["--compaction-batch-limit=100"],
                vec![("ETCD_EXPERIMENTAL_COMPACTION_BATCH_LIMIT", "100")],
            ),
            both(
                "experimental-compaction-batch-limit",
                "compaction-batch-limit",
            ),
        ),
        (
            (
                vec![],
                vec![
                    ("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true"),
                    ("ETCD_FEATURE_GATES", "InitialCorruptCheck=true"),
                ],
            ),
            gate_and_flag,
        ),
    ];
    for ((args, env), message) in cases {
        let r = refused(&data, &args, &env);
        assert_eq!(
            (r.code, r.stderr.as_str()),
            (Some(1), message.as_str()),
            "{args:?} {env:?}"
        );
        assert!(!data.exists(), "{args:?} {env:?} created the data dir");
    }
}

#[test]
fn an_unknown_or_unsupported_feature_gate_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A name etcd does not know, or a value that is not a boolean: Go's flag package's error
    // and exit code 2, whether the gates come from the command line or the environment.
    let usage = "Usage: etcd [flags] (see 'etcd --help')\n";
    for (args, env, first) in [
        (
            vec!["--feature-gates=InitialCorruptCheck=true,NoSuchGate=true"],
            vec![],
            "invalid value \"InitialCorruptCheck=true,NoSuchGate=true\" for flag -feature-gates: unrecognized feature gate: NoSuchGate",
        ),
        (
            vec![],
            vec![("ETCD_FEATURE_GATES", "NoSuchGate=true")],
            "invalid value \"NoSuchGate=true\" for ETCD_FEATURE_GATES: unrecognized feature gate: NoSuchGate",
        ),
        (
            vec!["--feature-gates=InitialCorruptCheck=yes-please"],
            vec![],
            "invalid value \"InitialCorruptCheck=yes-please\" for flag -feature-gates: invalid value of InitialCorruptCheck=yes-please, err: strconv.ParseBool: parsing \"yes-please\": invalid syntax",
        ),
    ] {
        let r = refused(&data, &args, &env);
        assert_eq!(
            (r.code, r.stderr),
            (Some(2), format!("{first}\n{usage}")),
            "{args:?} {env:?}"
        );
        assert!(!data.exists(), "{args:?} {env:?} created the data dir");
    }
    // A gate etcd knows for a feature this server lacks: refused when turned on, rather than
    // accepted and silently ignored.
    let r = refused(&data, &["--feature-gates=CompactHashCheck=true"], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.starts_with(
            "etcd: --feature-gates turns on feature gate CompactHashCheck, which etcd-rs does not support"
        ),
        "{}",
        r.stderr
    );
    assert!(!data.exists());
}
