// Entries, hard states and metadata the WAL tests write and expect back.
#![allow(dead_code)]

use prost::Message;
use proto::etcdserverpb::Metadata;
use proto::raftpb::{Entry, HardState};
use proto::walpb;

/// An entry whose data is derived from its index, `len` bytes long.
pub fn entry(index: u64, term: u64, len: usize) -> Entry {
    let mut data = format!("entry-{index}-").into_bytes();
    data.resize(len.max(data.len()), b'a' + (index % 26) as u8);
    Entry {
        term,
        index,
        r#type: 0,
        data: Some(data),
    }
}

pub fn hs(term: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote: 1,
        commit,
    }
}

pub fn metadata() -> Vec<u8> {
    Metadata {
        node_id: 0x8e9e05c52164694d,
        cluster_id: 0xcdf818194e3a8c32,
    }
    .encode_to_vec()
}

/// The marker of a WAL's start.
pub fn zero() -> walpb::Snapshot {
    walpb::Snapshot::default()
}
