// etcd's wire types, generated from proto/ at build time: the v3 client API, and the raft, WAL,
// snap, lease and membership records whose bytes must match what etcd writes.
//
// Module names are etcd's proto package names so that generated cross-package paths resolve.

#![allow(clippy::all, clippy::pedantic)]
#![allow(missing_docs)]

pub mod mvccpb {
    include!(concat!(env!("OUT_DIR"), "/mvccpb.rs"));
}
pub mod authpb {
    include!(concat!(env!("OUT_DIR"), "/authpb.rs"));
}
pub mod etcdserverpb {
    include!(concat!(env!("OUT_DIR"), "/etcdserverpb.rs"));
}
pub mod membershippb {
    include!(concat!(env!("OUT_DIR"), "/membershippb.rs"));
}
pub mod leasepb {
    include!(concat!(env!("OUT_DIR"), "/leasepb.rs"));
}
pub mod raftpb {
    include!(concat!(env!("OUT_DIR"), "/raftpb.rs"));
}
pub mod walpb {
    include!(concat!(env!("OUT_DIR"), "/walpb.rs"));
}
pub mod snappb {
    include!(concat!(env!("OUT_DIR"), "/snappb.rs"));
}
pub mod v3lockpb {
    include!(concat!(env!("OUT_DIR"), "/v3lockpb.rs"));
}
pub mod v3electionpb {
    include!(concat!(env!("OUT_DIR"), "/v3electionpb.rs"));
}

pub use prost::Message;

/// Every message and service above as an encoded `google.protobuf.FileDescriptorSet` (what the
/// JSON gateway needs to map messages to proto3 JSON by field name).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));
