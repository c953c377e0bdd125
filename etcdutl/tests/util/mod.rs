// Shared by etcdutl's integration tests: paths of our three binaries (built on demand, so a
// narrow `cargo test -p etcdutl` also has a current `etcd` and `etcdctl`), running etcdutl,
// starting a server on a data dir with chosen URLs, and reading every key with the real etcdctl.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

use crate::support::{RealEtcd, free_port};

static BUILD: Once = Once::new();

/// Our binary `name` (etcd, etcdctl, etcdutl) from this workspace's target dir.
pub fn bin(name: &str) -> String {
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        // The variables cargo sets for a test process: build scripts (ring's) watch some of
        // them, so inherited they would make the nested cargo rebuild, and the outer one again.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if [
                "CARGO_PKG_",
                "CARGO_BIN_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_PRIMARY_",
            ]
            .iter()
            .any(|p| k.starts_with(p))
                || k == "CARGO_TARGET_TMPDIR"
                || k == "OUT_DIR"
            {
                build.env_remove(k.as_ref());
            }
        }
        let st = build
            // What `cargo test --workspace` builds, with its profile and features: nothing to
            // do under it (a `cargo build -p ...` rebuilt every dependency with other features
            // and profile, 110 s of CI, and left a slower server binary for later tests).
            .args(["test", "-q", "--workspace", "--no-run"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .status()
            .expect("run cargo test --no-run for etcd and etcdctl");
        assert!(st.success(), "building etcd and etcdctl failed");
    });
    let utl = PathBuf::from(env!("CARGO_BIN_EXE_etcdutl"));
    utl.with_file_name(name).display().to_string()
}

/// Runs our etcdutl.
pub fn etcdutl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_etcdutl"))
        .args(args)
        .output()
        .expect("run etcdutl")
}

/// Runs our etcdutl and returns stdout, failing the test with stderr when it fails.
pub fn etcdutl_ok(args: &[&str]) -> String {
    let out = etcdutl(args);
    assert!(
        out.status.success(),
        "etcdutl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A peer URL on a free port (for restore flags and the server that later uses them).
pub fn peer_url() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// Starts `bin` on an existing data dir with the given member name and peer URL.
pub fn serve(bin: &str, data_dir: &Path, name: &str, peer_url: &str) -> RealEtcd {
    let mut e = RealEtcd {
        child: None,
        data_dir: data_dir.to_path_buf(),
        client_url: format!("http://127.0.0.1:{}", free_port()),
        peer_url: peer_url.to_string(),
        name: name.to_string(),
    };
    e.restart(bin, &[]);
    e
}

/// Every key with its revisions and lease, and the store revision, as the real etcdctl reads
/// them (`get "" --from-key -w json`), header ids left out.
pub fn all_keys(e: &RealEtcd) -> (i64, serde_json::Value) {
    let out = e.etcdctl_ok(&["get", "", "--from-key", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl json");
    let rev = v["header"]["revision"].as_i64().expect("revision");
    (rev, v["kvs"].clone())
}

/// The leases the server has (hex ids, sorted).
pub fn leases(e: &RealEtcd) -> Vec<String> {
    let out = e.etcdctl_ok(&["lease", "list"]);
    let mut ids: Vec<String> = out.lines().skip(1).map(|l| l.trim().to_string()).collect();
    ids.sort();
    ids
}

/// Writes a small history: puts, overwrites, a delete, a lease with two keys on it.
/// Returns the lease id (hex).
pub fn write_history(e: &RealEtcd) -> String {
    for i in 0..30 {
        e.etcdctl_ok(&["put", &format!("k{i:02}"), &format!("v{i}")]);
    }
    e.etcdctl_ok(&["put", "k01", "again"]);
    e.etcdctl_ok(&["del", "k02"]);
    let out = e.etcdctl_ok(&["lease", "grant", "3600"]);
    let id = out.split_whitespace().nth(1).expect("lease id").to_string();
    e.etcdctl_ok(&["put", "leased-a", "x", "--lease", &id]);
    e.etcdctl_ok(&["put", "leased-b", "y", "--lease", &id]);
    id
}
