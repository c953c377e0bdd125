//! An in-memory cluster for behaviour tests: every node is a `RawNode` whose Readies are
//! handled as the server will (persist, send, apply, advance); links can be cut and restored.

use std::collections::{BTreeMap, HashSet};

use prost::Message as _;
use proto::raftpb::{ConfChange, ConfState, Entry, EntryType, Message, MessageType};

use crate::raft::{Config, MemStorage, RawNode, ReadState, StateRole};

/// A cluster whose messages are delivered synchronously, in order, until it is quiet.
pub struct Network {
    pub nodes: BTreeMap<u64, RawNode<MemStorage>>,
    /// Directed links that lose every message.
    cut: HashSet<(u64, u64)>,
    /// Message types lost everywhere.
    ignored: HashSet<i32>,
    /// Normal entries with data that each node applied, in order.
    pub applied: BTreeMap<u64, Vec<Entry>>,
    /// Conf state after each node's last applied conf change.
    pub conf_states: BTreeMap<u64, ConfState>,
    /// Read states each node received.
    pub read_states: BTreeMap<u64, Vec<ReadState>>,
}

impl Network {
    /// Voters `ids`, with etcd's defaults (pre-vote and check-quorum on).
    pub fn new(ids: &[u64]) -> Self {
        Self::with_config(ids, |_| {})
    }

    /// Voters `ids`, each node's config adjusted by `f`; election timeouts are seeded by id.
    pub fn with_config(ids: &[u64], f: impl Fn(&mut Config)) -> Self {
        let mut net = Network {
            nodes: BTreeMap::new(),
            cut: HashSet::new(),
            ignored: HashSet::new(),
            applied: BTreeMap::new(),
            conf_states: BTreeMap::new(),
            read_states: BTreeMap::new(),
        };
        for &id in ids {
            let mut cfg = Config::new(id);
            f(&mut cfg);
            let node = RawNode::new(&cfg, MemStorage::new_with_conf_state(ids, &[])).unwrap();
            net.nodes.insert(id, node);
        }
        net
    }

    /// Adds a node with an empty log that knows the initial `voters` (which `with_config`
    /// keeps outside the log) but is not a member itself until a conf change says so.
    pub fn add_empty_node(&mut self, id: u64, voters: &[u64]) {
        let cfg = Config::new(id);
        let storage = MemStorage::new_with_conf_state(voters, &[]);
        self.nodes.insert(id, RawNode::new(&cfg, storage).unwrap());
    }

    pub fn node(&mut self, id: u64) -> &mut RawNode<MemStorage> {
        self.nodes.get_mut(&id).expect("no such node")
    }

    pub fn role(&self, id: u64) -> StateRole {
        self.nodes[&id].role()
    }

    pub fn term(&self, id: u64) -> u64 {
        self.nodes[&id].raft.term
    }

    pub fn cut(&mut self, a: u64, b: u64) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    pub fn isolate(&mut self, id: u64) {
        let others: Vec<u64> = self.nodes.keys().copied().filter(|&o| o != id).collect();
        for o in others {
            self.cut(id, o);
        }
    }

    pub fn ignore(&mut self, ty: MessageType) {
        self.ignored.insert(ty as i32);
    }

    pub fn recover(&mut self) {
        self.cut.clear();
        self.ignored.clear();
    }

    /// Handles every node's Ready once, returning the messages they send.
    pub fn process_readies(&mut self) -> Vec<Message> {
        let mut out = Vec::new();
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            out.extend(self.process_ready(id));
        }
        out
    }

    /// Handles one node's Ready in the documented order.
    pub fn process_ready(&mut self, id: u64) -> Vec<Message> {
        let node = self.nodes.get_mut(&id).unwrap();
        if !node.has_ready() {
            return Vec::new();
        }
        let mut rd = node.ready();
        if let Some(snap) = rd.snapshot.clone() {
            node.storage_mut().apply_snapshot(snap.clone()).unwrap();
            if let Some(cs) = snap.metadata.and_then(|m| m.conf_state) {
                self.conf_states.insert(id, cs);
            }
        }
        if let Some(hs) = rd.hard_state {
            node.storage_mut().set_hard_state(hs);
        }
        node.storage_mut().append(&rd.entries);
        let msgs = std::mem::take(&mut rd.messages);
        for e in &rd.committed_entries {
            if e.r#type == EntryType::EntryConfChange as i32 {
                let cc = ConfChange::decode(e.data()).unwrap();
                let cs = node.apply_conf_change(&cc);
                self.conf_states.insert(id, cs);
            } else if !e.data().is_empty() {
                self.applied.entry(id).or_default().push(e.clone());
            }
        }
        self.read_states
            .entry(id)
            .or_default()
            .extend(std::mem::take(&mut rd.read_states));
        node.advance(rd);
        msgs
    }

    /// Delivers messages (and everything they cause) until the cluster is quiet.
    pub fn send(&mut self, msgs: Vec<Message>) {
        let mut queue = msgs;
        for round in 0.. {
            assert!(round < 10_000, "the cluster never went quiet: {queue:?}");
            for m in std::mem::take(&mut queue) {
                if self.cut.contains(&(m.from, m.to)) || self.ignored.contains(&m.r#type) {
                    continue;
                }
                if let Some(n) = self.nodes.get_mut(&m.to) {
                    let _ = n.step(m);
                }
            }
            queue = self.process_readies();
            if queue.is_empty() {
                return;
            }
        }
    }

    /// Processes pending Readies and delivers until quiet.
    pub fn stabilize(&mut self) {
        let msgs = self.process_readies();
        self.send(msgs);
    }

    /// Node `id` campaigns, and the cluster settles.
    pub fn campaign(&mut self, id: u64) {
        let _ = self.node(id).campaign();
        self.stabilize();
    }

    /// Proposes through node `id` and settles.
    pub fn propose(&mut self, id: u64, data: &[u8]) -> crate::raft::Result<()> {
        let r = self.node(id).propose(data.to_vec());
        self.stabilize();
        r
    }

    /// Ticks node `id` `n` times, settling after each tick.
    pub fn tick(&mut self, id: u64, n: usize) {
        for _ in 0..n {
            self.node(id).tick();
            self.stabilize();
        }
    }

    /// Ticks every node `n` times, settling after each round.
    pub fn tick_all(&mut self, n: usize) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for _ in 0..n {
            for &id in &ids {
                self.node(id).tick();
            }
            self.stabilize();
        }
    }

    /// The data of what node `id` applied.
    pub fn applied_data(&self, id: u64) -> Vec<Vec<u8>> {
        self.applied
            .get(&id)
            .map(|v| v.iter().map(|e| e.data().to_vec()).collect())
            .unwrap_or_default()
    }
}
