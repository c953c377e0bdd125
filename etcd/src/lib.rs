// The etcd server as a library: raft consensus, the MVCC store and the v3 API, used by the
// `etcd` binary and by etcdutl for offline work over a data dir.

pub mod api;
pub mod apply;
pub mod auth;
pub mod config;
pub mod error;
pub mod http;
pub mod lease;
pub mod listener;
pub mod logging;
pub mod membership;
pub mod metrics;
pub mod mvcc;
pub mod raft;
pub mod server;
pub mod tls;
pub mod transport;
pub mod version;
