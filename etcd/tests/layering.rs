// The server's layering rules, checked on the source: the modules below the API (server,
// apply, mvcc, lease, auth, membership) never use the API layer or gRPC's types, the peer
// transport never uses the server, and the client tools never depend on the server crate.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read source dir") {
        let p = entry.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn modules_below_the_api_use_neither_the_api_nor_tonic() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Membership lives in common (etcdutl writes members too); the server uses it from there.
    let common = Path::new(env!("CARGO_MANIFEST_DIR")).join("../common/src");
    let mut offences = Vec::new();
    let dirs = ["server", "apply", "mvcc", "lease", "auth"]
        .map(|m| src.join(m))
        .into_iter()
        .chain([common.join("membership")]);
    for dir in dirs {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        assert!(!files.is_empty(), "no sources under {}", dir.display());
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read source");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains("tonic::")
                    || code.contains("crate::api")
                    || code.contains("super::api")
                {
                    offences.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "layering broken:\n{}",
        offences.join("\n")
    );
}

/// The peer transport sits below the server: it reaches the member through the PeerHost
/// trait the server implements, never through the server's own types.
#[test]
fn the_transport_does_not_use_the_server() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/transport");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    let mut offences = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("crate::server")
                || code.contains("EtcdServer")
                || code.contains("crate::api")
            {
                offences.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "layering broken:\n{}",
        offences.join("\n")
    );
}

/// etcdctl and etcdutl build without the server: what they share with it is in common, so a
/// change to the server does not rebuild them and their binaries carry none of it.
#[test]
fn client_tools_do_not_depend_on_the_server_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut offences = Vec::new();
    for tool in ["etcdctl", "etcdutl"] {
        let manifest = root.join(tool).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).expect("read manifest");
        for (n, line) in text.lines().enumerate() {
            // A dependency line is `etcd = ...` or `etcd.workspace = true`.
            let key = line.split(['=', '.']).next().unwrap_or("").trim();
            if key == "etcd" {
                offences.push(format!("{}:{}: {}", manifest.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "the client tools depend on the server crate:\n{}",
        offences.join("\n")
    );
}
