// Cluster members as etcd records them: their IDs, their JSON (the members bucket, conf-change
// contexts) and the v2 store image in a snapshot's data; written by the server and etcdutl.

pub mod member;
pub mod v2store;

pub use member::{Member, cluster_id, id_hex, member_id, member_key};
