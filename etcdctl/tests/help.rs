// Help, usage and command-line error output compared byte for byte with the Go etcdctl 3.4:
// every command's --help page, and the pages and messages printed for bad command lines.

use std::collections::BTreeSet;
use std::process::Command;

const OURS: &str = env!("CARGO_BIN_EXE_etcdctl");

/// Flags ours has that 3.4 lacks (they come from etcd 3.5, which the issue asks for).
const OUR_EXTRA_FLAGS: &[&str] = &[
    "--count-only[",
    "--max-create-rev=",
    "--max-mod-rev=",
    "--min-create-rev=",
    "--min-mod-rev=",
    "--progress-notify[",
];
/// Commands 3.4 has that ours does not: `migrate` converts a v2 store, which we never had.
const GO_ONLY_COMMANDS: &[&str] = &["migrate"];
/// Commands ours has that 3.4 lacks: `downgrade` is etcd 3.6's etcdctl's, for 3.5's API.
const OUR_EXTRA_COMMANDS: &[&str] = &["downgrade"];

struct Seen {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(bin: &str, args: &[&str]) -> Seen {
    let out = Command::new(bin)
        .env("ETCDCTL_API", "3")
        // Nothing listens here: no case below may reach a server.
        .env("ETCDCTL_ENDPOINTS", "127.0.0.1:1")
        .args(args)
        .output()
        .expect("run etcdctl");
    Seen {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Go's page without the lines of commands we do not have; ours without our extra flags.
fn comparable(go: &str, ours: &str) -> (String, String) {
    let go: Vec<&str> = go
        .lines()
        .filter(|l| {
            !GO_ONLY_COMMANDS
                .iter()
                .any(|c| l.starts_with(&format!("\t{c}\t")))
        })
        .collect();
    let ours: Vec<&str> = ours
        .lines()
        .filter(|l| {
            !OUR_EXTRA_FLAGS
                .iter()
                .any(|f| l.trim_start().starts_with(f))
                && !OUR_EXTRA_COMMANDS
                    .iter()
                    .any(|c| l.starts_with(&format!("\t{c} ")))
        })
        .collect();
    (go.join("\n"), ours.join("\n"))
}

/// Every command path in Go's root page, and the groups above them.
fn go_command_paths() -> BTreeSet<String> {
    let root = run("etcdctl", &["--help"]).stdout;
    let mut paths = BTreeSet::new();
    let mut in_commands = false;
    for line in root.lines() {
        if line == "COMMANDS:" {
            in_commands = true;
            continue;
        }
        if in_commands && line.is_empty() {
            break;
        }
        if in_commands {
            let path = line
                .trim_start_matches('\t')
                .split('\t')
                .next()
                .unwrap_or("");
            if GO_ONLY_COMMANDS.contains(&path) {
                continue;
            }
            if let Some((group, _)) = path.split_once(' ') {
                paths.insert(group.to_string());
            }
            paths.insert(path.to_string());
        }
    }
    paths.insert(String::new());
    paths
}

#[test]
fn every_help_page_matches_etcdctl() {
    let paths = go_command_paths();
    assert!(paths.len() > 50, "{paths:?}");
    let mut differ = Vec::new();
    for path in &paths {
        let mut args: Vec<&str> = path.split(' ').filter(|w| !w.is_empty()).collect();
        args.push("--help");
        let go = run("etcdctl", &args);
        let ours = run(OURS, &args);
        assert_eq!(go.code, Some(0), "{args:?}");
        assert_eq!(ours.code, Some(0), "{args:?}: {}", ours.stderr);
        let (g, o) = comparable(&go.stdout, &ours.stdout);
        if g != o {
            differ.push(format!("{args:?}\n--- go\n{g}\n--- ours\n{o}"));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n\n"));
}

#[test]
fn bad_command_lines_print_what_etcdctl_prints() {
    let cases: &[&[&str]] = &[
        &["get", "--bogus"],
        &["get", "-x"],
        &["get", "--limit=abc", "a"],
        &["lease", "grant", "--ttl", "5"],
        &["bogus"],
        &["gett"],
        &["a"],
        &["--bogus", "get", "a"],
        &["help", "bogus"],
        &["help", "lease", "grant"],
        &["help", "help"],
        &["lease", "bogus"],
        &["lease"],
        &["member"],
        &["check"],
        &[],
        &["-h"],
        &["get", "k", "--help"],
        &["--endpoints", "127.0.0.1:1", "put", "--help"],
        &["lease", "grant", "--help=false"],
        &["get"],
        &["put"],
        &["txn", "extra"],
        &["version", "--help"],
    ];
    for args in cases {
        let go = run("etcdctl", args);
        let ours = run(OURS, args);
        assert_eq!(ours.code, go.code, "{args:?}: {}", ours.stderr);
        assert_eq!(ours.stderr, go.stderr, "{args:?}");
        let (g, o) = comparable(&go.stdout, &ours.stdout);
        assert_eq!(o, g, "{args:?}");
    }
}

#[test]
fn completion_scripts_cover_the_commands() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let out = run(OURS, &["completion", shell]);
        assert_eq!(out.code, Some(0), "{shell}: {}", out.stderr);
        for word in ["member", "snapshot", "write-out", "endpoints"] {
            assert!(out.stdout.contains(word), "{shell} lacks {word}");
        }
    }
    let with = run(OURS, &["completion", "fish"]).stdout;
    let without = run(OURS, &["completion", "fish", "--no-descriptions"]).stdout;
    assert!(with.contains("Gets the key or a range of keys"));
    assert!(!without.contains("Gets the key or a range of keys"));
    // bash loads it without a syntax error.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("etcdctl.bash");
    std::fs::write(&file, run(OURS, &["completion", "bash"]).stdout).expect("write script");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .expect("run bash");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn debug_prints_the_flags_as_etcdctl() {
    let args = ["--debug", "--dial-timeout=300ms", "--user=u:p", "get", "a"];
    let go = run("etcdctl", &args);
    let ours = run(OURS, &args);
    let flags = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("ETCDCTL_"))
            .map(str::to_string)
            .collect()
    };
    let (g, o) = (flags(&go.stderr), flags(&ours.stderr));
    assert_eq!(g.len(), 18, "{}", go.stderr);
    assert_eq!(o, g);
    // Then what happened when dialing, and the same failure as Go's.
    assert!(
        ours.stderr.contains("DEBUG: cannot connect to 127.0.0.1:1"),
        "{}",
        ours.stderr
    );
    assert_eq!(ours.code, go.code);
    assert_eq!(
        ours.stderr.lines().last(),
        Some("Error: context deadline exceeded")
    );
}
