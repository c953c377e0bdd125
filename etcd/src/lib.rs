// The etcd server as a library: raft consensus, the MVCC store and the v3 API, used by the
// `etcd` binary, its tests and benches. etcdctl and etcdutl do not link it (see common).

pub mod api;
pub mod apply;
pub mod auth;
pub mod config;
pub mod error;
pub mod http;
pub mod lease;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod mvcc;
pub mod raft;
pub mod server;
pub mod tls;
pub mod transport;

// Members and versions are shared with etcdutl (restore writes members, `version` prints
// ours), so they live in common; the server keeps naming them by these paths.
pub use common::membership;
pub use common::version;
