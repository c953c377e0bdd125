// The v3 client API served over gRPC (KV, Watch, Lease, Cluster, Maintenance, Auth) and its
// error vocabulary. The services are built by the server issue on top of the store and raft.

pub mod auth;
pub mod authority;
pub mod cluster;
mod coalesce;
pub mod descriptors;
pub mod election;
pub mod errors;
mod first_bytes;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod range_stream;
pub mod serve;
pub mod validate;
pub mod watch;
