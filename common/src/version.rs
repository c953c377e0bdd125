// Versions: the etcd release whose API we implement (clients gate features on it, so it is
// what the server reports and etcdutl prints), the cluster version, and our own beside them.

/// The etcd version reported by Status, /version, `etcd --version` and `etcdutl version`.
pub const ETCD_VERSION: &str = "3.5.17";
/// The cluster version (major.minor) this member supports.
pub const CLUSTER_VERSION: &str = "3.5.0";
/// The storage version written into the backend.
pub const STORAGE_VERSION: &str = "3.5.0";
/// This implementation's own version (every crate takes the workspace's version, so this
/// crate's is the binaries').
pub const ETCD_RS_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What `etcd --version` prints: etcd's four lines (first line parsed by scripts), then ours.
pub fn version_text() -> String {
    format!(
        "etcd Version: {ETCD_VERSION}\nGit SHA: not applicable (etcd-rs)\nGo Version: not applicable (Rust)\nGo OS/Arch: {}/{}\netcd-rs Version: {ETCD_RS_VERSION}\n",
        std::env::consts::OS,
        match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }
    )
}
