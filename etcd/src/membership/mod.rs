// Cluster membership: members, their IDs, and (with the cluster issue) the member set kept in
// the backend and changed through raft.

pub mod member;
pub mod v2store;

pub use member::{Member, cluster_id, id_hex, member_id, member_key};
