//! A deterministic cluster simulator: a seeded network that drops, delays, duplicates and
//! reorders, partitions, crashes and restarts, membership changes — with safety checks.
//!
//! Every run is a pure function of its seed. After every step it checks: at most one leader
//! per term; a committed entry never changes; every node applies the same sequence (each is a
//! prefix of the longest); a proposal acknowledged to its client (applied on the node that
//! took it) stays in that sequence; a confirmed ReadIndex is at least the commit index when
//! the read was issued. At the end it heals everything and checks liveness: a leader is
//! elected and a new proposal reaches every member within a bounded number of ticks.
//!
//! A failure prints its seed; replay it with `SIM_SEED=<seed> cargo test -p etcd simulator`.
//! `SIM_SEEDS=<n>` changes how many seeds the default tests run.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message as _;
use proto::raftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, Message, MessageType,
};

use crate::raft::config::SplitMix64;
use crate::raft::storage::snapshot_index_term;
use crate::raft::{Config, MemStorage, Peer, RawNode, SnapshotStatus, StateRole, Storage};

/// How hostile the world is.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// Per mille of messages lost in transit.
    pub drop: u64,
    /// Per mille of messages delivered twice.
    pub duplicate: u64,
    /// Largest delay of a message, in steps.
    pub max_delay: u64,
    /// Per mille of steps that crash a node.
    pub crash: u64,
    /// Per mille of steps that split the cluster in two.
    pub partition: u64,
    /// Per mille of steps that propose a membership change.
    pub conf_change: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            drop: 50,
            duplicate: 20,
            max_delay: 8,
            crash: 4,
            partition: 4,
            conf_change: 8,
        }
    }
}

impl Faults {
    /// A world drawn from the seed: from calm to very hostile, so the seeds cover both
    /// long stable leaderships and constant churn.
    pub fn random(seed: u64) -> Self {
        let mut r = SplitMix64::new(mix(seed, 0xFA01));
        Faults {
            drop: r.below(300),
            duplicate: r.below(100),
            max_delay: r.below(20),
            crash: r.below(25),
            partition: r.below(15),
            conf_change: r.below(20),
        }
    }
}

fn trace() -> bool {
    std::env::var("SIM_TRACE").is_ok()
}

fn mix(a: u64, b: u64) -> u64 {
    let mut r = SplitMix64::new(a ^ b.rotate_left(17));
    r.next_u64()
}

fn digest(e: &Entry) -> u64 {
    let mut h = mix(e.term, e.r#type as u64);
    for chunk in e.data().chunks(8) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        h = mix(h, u64::from_le_bytes(b));
    }
    mix(h, e.data().len() as u64)
}

/// A proposal's payload: a unique id and the node that took it.
fn proposal(id: u64, node: u64) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    v.extend_from_slice(&node.to_le_bytes());
    v
}

fn parse_proposal(data: &[u8]) -> Option<(u64, u64)> {
    if data.len() != 16 {
        return None;
    }
    Some((
        u64::from_le_bytes(data[..8].try_into().ok()?),
        u64::from_le_bytes(data[8..].try_into().ok()?),
    ))
}

/// One simulated server: raft plus a toy state machine (a hash chain over applied entries).
struct SimNode {
    /// `None` while crashed (or after being removed).
    raft: Option<RawNode<MemStorage>>,
    /// What survives a crash: the storage the node persisted into.
    disk: Option<MemStorage>,
    applied: u64,
    sm_hash: u64,
    conf_state: ConfState,
    /// Highest committed index already compared with the global record.
    checked_commit: u64,
    removed: bool,
}

struct InFlight {
    at: u64,
    msg: Message,
}

pub struct Sim {
    seed: u64,
    rng: SplitMix64,
    faults: Faults,
    nodes: BTreeMap<u64, SimNode>,
    net: Vec<InFlight>,
    /// Partition group of each node; messages between groups are lost.
    group: BTreeMap<u64, u8>,
    now: u64,
    next_id: u64,
    max_node_id: u64,
    /// The members the cluster was bootstrapped with.
    initial: u64,
    removed_ids: BTreeSet<u64>,
    /// The leader of each term ever observed.
    leaders: BTreeMap<u64, u64>,
    /// Every committed entry ever observed, by index: (term, digest).
    committed: BTreeMap<u64, (u64, u64)>,
    /// The state machine hash after applying each index, as first observed.
    applied_hash: BTreeMap<u64, u64>,
    /// Proposals applied on the node that took them (acknowledged to a client): id -> index.
    acked: BTreeMap<u64, u64>,
    /// Pending reads: context -> highest commit index observed when the read was issued.
    reads: BTreeMap<u64, u64>,
    pub stats: Stats,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub steps: u64,
    pub elections: u64,
    pub acked: u64,
    pub crashes: u64,
    pub snapshots_sent: u64,
    /// Conf change entries applied, summed over nodes (bootstrap entries and replays after
    /// restarts included).
    pub conf_changes: u64,
    pub reads_confirmed: u64,
    /// Servers started to join (their AddLearner proposed; not every one commits) and
    /// members whose removal was applied.
    pub nodes_added: u64,
    pub nodes_removed: u64,
    /// Ticks the calm phase needed until every member applied the marker (max over seeds).
    pub liveness_ticks: u64,
}

fn fail(seed: u64, what: String) -> ! {
    panic!("simulator seed {seed}: {what} (replay with SIM_SEED={seed})");
}

impl Sim {
    pub fn new(seed: u64, n: u64, faults: Faults) -> Self {
        let mut sim = Sim {
            seed,
            rng: SplitMix64::new(seed),
            faults,
            nodes: BTreeMap::new(),
            net: Vec::new(),
            group: BTreeMap::new(),
            now: 0,
            next_id: 1,
            max_node_id: n + 3,
            initial: n,
            removed_ids: BTreeSet::new(),
            leaders: BTreeMap::new(),
            committed: BTreeMap::new(),
            applied_hash: BTreeMap::new(),
            acked: BTreeMap::new(),
            reads: BTreeMap::new(),
            stats: Stats::default(),
        };
        let peers: Vec<Peer> = (1..=n).map(|id| Peer { id, context: None }).collect();
        for id in 1..=n {
            let mut raft = RawNode::new(&sim.config(id, 0), MemStorage::new()).unwrap();
            raft.bootstrap(&peers).unwrap();
            sim.nodes.insert(id, SimNode::fresh(raft));
        }
        sim
    }

    fn config(&self, id: u64, applied: u64) -> Config {
        Config {
            applied,
            seed: mix(self.seed, id),
            max_inflight_msgs: 1 + (self.seed % 4) as usize,
            // Odd seeds send one entry per append, which separates a new leader's empty
            // entry from the older entries before it (the Figure 8 situation).
            max_size_per_msg: if self.seed % 2 == 1 { 1 } else { 512 },
            // Some seeds apply one committed entry per Ready, some run without the thesis
            // extensions (etcd lets operators turn them off).
            max_committed_size_per_ready: if self.seed.is_multiple_of(3) {
                1
            } else {
                u64::MAX
            },
            pre_vote: !self.seed.is_multiple_of(5),
            check_quorum: !self.seed.is_multiple_of(7),
            ..Config::new(id)
        }
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.rng.below(1000) < per_mille
    }

    fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        if v.is_empty() {
            None
        } else {
            Some(v[self.rng.below(v.len() as u64) as usize])
        }
    }

    fn live(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.raft.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    fn leader(&self) -> Option<u64> {
        // The most recent term's leader among live nodes.
        self.nodes
            .iter()
            .filter_map(|(&id, n)| n.raft.as_ref().map(|r| (id, r)))
            .filter(|(_, r)| r.role() == StateRole::Leader)
            .max_by_key(|(_, r)| r.raft.term)
            .map(|(id, _)| id)
    }

    /// One step of chaos, then the safety checks.
    pub fn step(&mut self) {
        self.now += 1;
        self.stats.steps += 1;
        let live = self.live();
        let f = self.faults;
        if self.chance(f.crash) && live.len() > 1 {
            let id = self.pick(&live).unwrap();
            self.crash(id);
        }
        let crashed: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.raft.is_none() && !n.removed)
            .map(|(&id, _)| id)
            .collect();
        if !crashed.is_empty() && self.chance(20) {
            let id = self.pick(&crashed).unwrap();
            self.restart(id);
        }
        if self.chance(f.partition) {
            self.partition();
        }
        if self.chance(10) {
            self.group.clear();
        }
        if self.chance(f.conf_change) {
            self.propose_conf_change();
        }
        if self.chance(3) {
            let live = self.live();
            if let (Some(l), Some(to)) = (self.leader(), self.pick(&live)) {
                self.raft(l).transfer_leader(to);
            }
        }
        if self.chance(15) {
            let live = self.live();
            if let Some(id) = self.pick(&live) {
                self.compact(id);
            }
        }
        if self.chance(20) {
            let live = self.live();
            if let Some(id) = self.pick(&live) {
                self.read(id);
            }
        }
        if self.chance(250) {
            let target = if self.chance(700) {
                self.leader()
            } else {
                None
            };
            let live = self.live();
            if let Some(id) = target.or_else(|| self.pick(&live)) {
                self.propose(id);
            }
        }
        for id in self.live() {
            if self.chance(350) {
                self.raft(id).tick();
            }
        }
        for id in self.live() {
            if self.chance(600) {
                self.handle_ready(id);
            }
        }
        self.deliver(600);
        self.check();
    }

    fn raft(&mut self, id: u64) -> &mut RawNode<MemStorage> {
        self.nodes
            .get_mut(&id)
            .and_then(|n| n.raft.as_mut())
            .expect("live node")
    }

    /// One proposal, or now and then a batch of two to four in one step (as the server's
    /// raft loop proposes what it took in one turn).
    fn propose(&mut self, id: u64) {
        let n = if self.chance(300) {
            2 + self.rng.below(3)
        } else {
            1
        };
        let batch: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let pid = self.next_id;
                self.next_id += 1;
                proposal(pid, id)
            })
            .collect();
        let _ = self.raft(id).propose_batch(batch);
    }

    fn read(&mut self, id: u64) {
        let ctx = self.next_id;
        self.next_id += 1;
        let required = self.committed.keys().next_back().copied().unwrap_or(0);
        self.reads.insert(ctx, required);
        let _ = self.raft(id).read_index(ctx.to_le_bytes().to_vec());
    }

    fn propose_conf_change(&mut self) {
        let Some(l) = self.leader() else {
            return;
        };
        let cs = self.raft(l).raft.prs.conf_state();
        let fresh: Vec<u64> = (1..=self.max_node_id)
            .filter(|id| !self.nodes.contains_key(id) && !self.removed_ids.contains(id))
            .collect();
        let cc = if !cs.learners.is_empty() && self.chance(600) {
            let id = self.pick(&cs.learners).unwrap();
            (ConfChangeType::ConfChangeAddNode, id)
        } else if !fresh.is_empty() && cs.voters.len() + cs.learners.len() < 6 && self.chance(500) {
            let id = fresh[0];
            // The new server starts empty and learns everything from the leader.
            let raft = RawNode::new(&self.config(id, 0), MemStorage::new()).unwrap();
            self.nodes.insert(id, SimNode::fresh(raft));
            (ConfChangeType::ConfChangeAddLearnerNode, id)
        } else if cs.voters.len() > 3 {
            let id = self.pick(&cs.voters).unwrap();
            (ConfChangeType::ConfChangeRemoveNode, id)
        } else {
            return;
        };
        let cc = ConfChange {
            r#type: cc.0 as i32,
            node_id: cc.1,
            ..ConfChange::default()
        };
        let _ = self.raft(l).propose_conf_change(&cc);
    }

    fn partition(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        self.group.clear();
        for id in ids {
            let g = self.rng.below(2) as u8;
            self.group.insert(id, g);
        }
    }

    fn connected(&self, a: u64, b: u64) -> bool {
        self.group.get(&a).copied().unwrap_or(0) == self.group.get(&b).copied().unwrap_or(0)
    }

    fn crash(&mut self, id: u64) {
        if trace() {
            eprintln!("step {}: crash {id}", self.now);
        }
        let n = self.nodes.get_mut(&id).unwrap();
        if let Some(raft) = n.raft.take() {
            n.disk = Some(raft.into_storage());
            self.stats.crashes += 1;
        }
    }

    /// Restarts from what was persisted: the storage's hard state, entries and snapshot. The
    /// state machine is rebuilt from the snapshot, and raft re-delivers the entries after it.
    fn restart(&mut self, id: u64) {
        if trace() {
            eprintln!("step {}: restart {id}", self.now);
        }
        let n = self.nodes.get_mut(&id).unwrap();
        let Some(disk) = n.disk.take() else {
            return;
        };
        let snap = disk.snapshot().unwrap();
        let (index, _) = snapshot_index_term(&snap);
        let (applied, hash) = decode_sm(snap.data());
        assert_eq!(applied, index);
        n.applied = applied;
        n.sm_hash = hash;
        n.conf_state = snap.metadata.and_then(|m| m.conf_state).unwrap_or_default();
        n.checked_commit = index;
        let cfg = self.config(id, index);
        let nothing_persisted = disk.last_index().unwrap() == 0
            && *disk.hard_state() == proto::raftpb::HardState::default();
        let mut raft = match RawNode::new(&cfg, disk) {
            Ok(r) => r,
            Err(e) => fail(self.seed, format!("node {id} cannot restart: {e}")),
        };
        if nothing_persisted && id <= self.initial {
            // The bootstrap never reached disk, so the node promised nothing to anyone: it
            // bootstraps again, as a server finding no WAL entries must. Replaying the
            // cluster's log from scratch instead would pass through a membership of just
            // {1} after the first entry, in which node 1 could elect itself.
            let peers: Vec<Peer> = (1..=self.initial)
                .map(|id| Peer { id, context: None })
                .collect();
            raft.bootstrap(&peers).unwrap();
        }
        self.nodes.get_mut(&id).unwrap().raft = Some(raft);
    }

    fn compact(&mut self, id: u64) {
        let keep = self.rng.below(4);
        let n = self.nodes.get_mut(&id).unwrap();
        let (applied, hash, cs) = (n.applied, n.sm_hash, n.conf_state.clone());
        let raft = n.raft.as_mut().unwrap();
        let s = raft.storage_mut();
        let (snap_index, _) = snapshot_index_term(&s.snapshot().unwrap());
        if applied <= snap_index + keep || applied > s.last_index().unwrap() {
            return;
        }
        s.create_snapshot(applied, Some(cs), encode_sm(applied, hash))
            .unwrap();
        s.compact(applied - keep).unwrap();
    }

    /// As etcd's server does, a snapshot goes out as of the sender's applied state (with its
    /// current membership), not as the possibly older one raft found in storage: a member
    /// added after that snapshot would otherwise refuse it for not including itself.
    fn merge_snapshot(&self, m: &mut Message) {
        let Some(n) = self.nodes.get(&m.from) else {
            return;
        };
        let Some(raft) = n.raft.as_ref() else {
            return;
        };
        let Ok(term) = raft.raft.raft_log.term(n.applied) else {
            return;
        };
        if let Some(meta) = m.snapshot.as_mut().and_then(|s| s.metadata.as_mut()) {
            if n.applied < meta.index {
                return;
            }
            meta.index = n.applied;
            meta.term = term;
            meta.conf_state = Some(n.conf_state.clone());
        }
        if let Some(snap) = m.snapshot.as_mut() {
            snap.data = Some(encode_sm(n.applied, n.sm_hash));
        }
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for mut m in msgs {
            if m.r#type() == MessageType::MsgSnap {
                self.merge_snapshot(&mut m);
                if std::env::var("SIM_TRACE").is_ok() {
                    eprintln!(
                        "step {}: send MsgSnap {}->{} term {}",
                        self.now, m.from, m.to, m.term
                    );
                }
            }
            if self.chance(self.faults.drop) {
                self.report_lost(&m);
                continue;
            }
            let copies = if self.chance(self.faults.duplicate) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let at = self.now + self.rng.below(self.faults.max_delay + 1);
                self.net.push(InFlight { at, msg: m.clone() });
            }
        }
    }

    /// What a transport tells raft when it could not deliver.
    fn report_lost(&mut self, m: &Message) {
        let (from, to) = (m.from, m.to);
        let is_snap = m.r#type() == MessageType::MsgSnap;
        if is_snap && std::env::var("SIM_TRACE").is_ok() {
            eprintln!("step {}: lost MsgSnap {from}->{to}", self.now);
        }
        if let Some(r) = self.nodes.get_mut(&from).and_then(|n| n.raft.as_mut()) {
            if is_snap {
                r.report_snapshot(to, SnapshotStatus::Failure);
            } else {
                r.report_unreachable(to);
            }
        }
    }

    fn deliver(&mut self, per_mille: u64) {
        let mut due = Vec::new();
        let mut later = Vec::new();
        for f in std::mem::take(&mut self.net) {
            if f.at <= self.now && self.chance(per_mille) {
                due.push(f.msg);
            } else {
                later.push(f);
            }
        }
        self.net = later;
        // Reorder what arrives in this step.
        for i in (1..due.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            due.swap(i, j);
        }
        for m in due {
            let (from, to) = (m.from, m.to);
            let alive = self.nodes.get(&to).is_some_and(|n| n.raft.is_some());
            if !alive || !self.connected(from, to) {
                self.report_lost(&m);
                continue;
            }
            let is_snap = m.r#type() == MessageType::MsgSnap;
            if is_snap && std::env::var("SIM_TRACE").is_ok() {
                eprintln!(
                    "step {}: deliver MsgSnap {from}->{to} term {} {:?}",
                    self.now,
                    m.term,
                    m.snapshot
                        .as_ref()
                        .and_then(|s| s.metadata.as_ref())
                        .map(|m| (m.index, m.term))
                );
            }
            let _ = self.raft(to).step(m);
            if is_snap {
                self.stats.snapshots_sent += 1;
                if let Some(r) = self.nodes.get_mut(&from).and_then(|n| n.raft.as_mut()) {
                    r.report_snapshot(to, SnapshotStatus::Finish);
                }
            }
        }
    }

    /// Handles one Ready the way the server's raft loop does: what promises nothing about the
    /// disk is sent and the committed entries already on disk are applied before the write;
    /// then persist, send the acknowledgements and votes, apply the rest, advance. A crash
    /// may strike during the write, after the early sends and applies.
    fn handle_ready(&mut self, id: u64) {
        let crash_while_persisting = self.faults.crash > 0 && self.chance(5);
        let n = self.nodes.get_mut(&id).unwrap();
        let raft = n.raft.as_mut().unwrap();
        if !raft.has_ready() {
            return;
        }
        let mut rd = raft.ready();
        let persisted = raft.storage().hard_state();
        let early_msgs = rd.take_messages_before_persist(persisted);
        let early_entries = rd.take_committed_on_disk();
        self.send(early_msgs);
        let mut removed_self = self.apply_committed(id, &early_entries);
        if crash_while_persisting && !removed_self {
            // The write of this Ready never lands.
            self.crash(id);
            return;
        }
        let seed = self.seed;
        let n = self.nodes.get_mut(&id).unwrap();
        let Some(raft) = n.raft.as_mut() else {
            return;
        };
        if let Some(snap) = rd.snapshot.clone() {
            raft.storage_mut().apply_snapshot(snap.clone()).unwrap();
            let (index, _) = snapshot_index_term(&snap);
            let (applied, hash) = decode_sm(snap.data());
            if applied != index {
                fail(
                    seed,
                    format!("node {id}: snapshot data for {applied} at index {index}"),
                );
            }
            n.applied = applied;
            n.sm_hash = hash;
            n.conf_state = snap.metadata.and_then(|m| m.conf_state).unwrap_or_default();
            match self.applied_hash.get(&index) {
                Some(&h) if h != hash => fail(
                    seed,
                    format!("node {id}: snapshot at {index} has another state than was applied"),
                ),
                _ => {}
            }
        }
        if let Some(hs) = rd.hard_state {
            raft.storage_mut().set_hard_state(hs);
        }
        raft.storage_mut().append(&rd.entries);
        let msgs = std::mem::take(&mut rd.messages);
        let committed = std::mem::take(&mut rd.committed_entries);
        removed_self |= self.apply_committed(id, &committed);
        for rs in &rd.read_states {
            let ctx = u64::from_le_bytes(rs.request_ctx.clone().try_into().unwrap_or([0; 8]));
            if let Some(required) = self.reads.remove(&ctx) {
                if rs.index < required {
                    fail(
                        seed,
                        format!(
                            "node {id}: read {ctx} confirmed at {} but {required} was committed before it was issued",
                            rs.index
                        ),
                    );
                }
                self.stats.reads_confirmed += 1;
            }
        }
        self.raft(id).advance(rd);
        self.send(msgs);
        if removed_self {
            // A removed member shuts down, as etcd does.
            let n = self.nodes.get_mut(&id).unwrap();
            n.raft = None;
            n.disk = None;
            n.removed = true;
        }
    }

    /// Applies committed entries on node `id`, checking they follow what it applied and what
    /// every other node applied at the same index; whether they removed the node.
    fn apply_committed(&mut self, id: u64, entries: &[Entry]) -> bool {
        let seed = self.seed;
        let now = self.now;
        let n = self.nodes.get_mut(&id).unwrap();
        let Some(raft) = n.raft.as_mut() else {
            return false;
        };
        let mut removed_self = false;
        for e in entries {
            if e.index != n.applied + 1 {
                fail(
                    seed,
                    format!("node {id}: applying {} after {}", e.index, n.applied),
                );
            }
            n.applied = e.index;
            n.sm_hash = mix(n.sm_hash, digest(e));
            if trace() && e.index < 8 {
                eprintln!(
                    "step {now}: node {id} applies {} term {} type {} data {:?} -> {:x}",
                    e.index,
                    e.term,
                    e.r#type,
                    e.data(),
                    n.sm_hash
                );
            }
            match self.applied_hash.get(&e.index) {
                Some(&h) if h != n.sm_hash => fail(
                    seed,
                    format!("node {id}: applied sequence diverges at index {}", e.index),
                ),
                Some(_) => {}
                None => {
                    self.applied_hash.insert(e.index, n.sm_hash);
                }
            }
            if e.r#type == EntryType::EntryConfChange as i32 {
                let cc = ConfChange::decode(e.data()).unwrap();
                n.conf_state = raft.apply_conf_change(&cc);
                if cc.r#type == ConfChangeType::ConfChangeRemoveNode as i32 {
                    self.removed_ids.insert(cc.node_id);
                    removed_self |= cc.node_id == id;
                }
                self.stats.conf_changes += 1;
            } else if let Some((pid, node)) = parse_proposal(e.data())
                && node == id
                && self.acked.insert(pid, e.index).is_none()
            {
                self.stats.acked += 1;
            }
        }
        removed_self
    }

    fn check(&mut self) {
        let seed = self.seed;
        for (&id, n) in self.nodes.iter_mut() {
            let Some(raft) = n.raft.as_ref() else {
                continue;
            };
            let r = &raft.raft;
            if r.state == StateRole::Leader {
                let prev = *self.leaders.entry(r.term).or_insert(id);
                if prev != id {
                    fail(
                        seed,
                        format!("term {} has two leaders: {prev} and {id}", r.term),
                    );
                }
            }
            let log = &r.raft_log;
            // What is committed and on this node's disk: a member alone commits an entry as
            // it appends it, before the write lands, and a crash may still take that back
            // (nothing may act on it until then). With peers, a committed entry is on a
            // quorum's disks already; it is checked here once it is on this one's too.
            let committed = log.committed.min(raft.storage().last_index().unwrap_or(0));
            let lo = (n.checked_commit + 1).max(log.first_index());
            if lo <= committed {
                let ents = log.slice(lo, committed + 1, u64::MAX).unwrap_or_else(|e| {
                    fail(
                        seed,
                        format!("node {id}: committed entries unreadable: {e}"),
                    )
                });
                for e in ents {
                    let seen = (e.term, digest(&e));
                    match self.committed.get(&e.index) {
                        Some(&c) if c != seen => fail(
                            seed,
                            format!("node {id}: committed entry {} changed", e.index),
                        ),
                        Some(_) => {}
                        None => {
                            self.committed.insert(e.index, seen);
                        }
                    }
                }
            }
            n.checked_commit = n.checked_commit.max(committed);
        }
        self.stats.elections = self.leaders.len() as u64;
    }

    /// Heals everything and runs a calm cluster: a leader must emerge and a new proposal
    /// must reach every member within `max_ticks` ticks.
    pub fn check_liveness(&mut self, max_ticks: u64) {
        self.group.clear();
        let crashed: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.raft.is_none() && !n.removed)
            .map(|(&id, _)| id)
            .collect();
        for id in crashed {
            self.restart(id);
        }
        self.faults = Faults {
            drop: 0,
            duplicate: 0,
            max_delay: 0,
            crash: 0,
            partition: 0,
            conf_change: 0,
        };
        let marker = self.next_id;
        self.next_id += 1;
        let mut proposed_at = None;
        for tick in 0..max_ticks {
            self.now += 1;
            for id in self.live() {
                self.raft(id).tick();
            }
            // Let the cluster settle between ticks, as a real one does between timer firings
            // (a tick is 100ms in etcd: plenty for many round trips on a healthy network).
            for _ in 0..10_000 {
                for id in self.live() {
                    self.handle_ready(id);
                }
                self.deliver(1000);
                let busy = self
                    .nodes
                    .values()
                    .any(|n| n.raft.as_ref().is_some_and(|r| r.has_ready()));
                if self.net.is_empty() && !busy {
                    break;
                }
            }
            self.check();
            let Some(l) = self.leader() else {
                continue;
            };
            if proposed_at.is_none_or(|t| tick > t + 20) {
                let _ = self.raft(l).propose(proposal(marker, l));
                proposed_at = Some(tick);
            }
            let Some(&marker_index) = self.acked.get(&marker) else {
                continue;
            };
            // Every member has applied the marker and every acknowledged proposal before it.
            let must_apply = marker_index.max(self.acked.values().copied().max().unwrap_or(0));
            let members = self.raft(l).raft.prs.conf_state();
            let done = members
                .voters
                .iter()
                .chain(&members.learners)
                .all(|id| self.nodes.get(id).is_some_and(|n| n.applied >= must_apply));
            if done {
                self.stats.liveness_ticks = tick + 1;
                self.stats.nodes_added = self.nodes.len() as u64 - self.initial;
                self.stats.nodes_removed = self.removed_ids.len() as u64;
                return;
            }
        }
        let states: Vec<String> = self
            .nodes
            .iter()
            .map(|(id, n)| match &n.raft {
                Some(r) => format!(
                    "{id}: {:?} term {} applied {} commit {} last {} progress {:?}",
                    r.role(),
                    r.raft.term,
                    n.applied,
                    r.raft.raft_log.committed,
                    r.raft.raft_log.last_index(),
                    r.status().progress
                ),
                None => format!("{id}: down (removed {})", n.removed),
            })
            .collect();
        fail(
            self.seed,
            format!("no progress within {max_ticks} ticks after healing: {states:?}"),
        );
    }
}

fn encode_sm(applied: u64, hash: u64) -> Vec<u8> {
    let mut v = applied.to_le_bytes().to_vec();
    v.extend_from_slice(&hash.to_le_bytes());
    v
}

fn decode_sm(data: &[u8]) -> (u64, u64) {
    if data.len() != 16 {
        return (0, 0);
    }
    (
        u64::from_le_bytes(data[..8].try_into().unwrap()),
        u64::from_le_bytes(data[8..].try_into().unwrap()),
    )
}

impl SimNode {
    fn fresh(raft: RawNode<MemStorage>) -> Self {
        SimNode {
            raft: Some(raft),
            disk: None,
            applied: 0,
            sm_hash: 0,
            conf_state: ConfState::default(),
            checked_commit: 0,
            removed: false,
        }
    }
}

/// Runs one seed to the end, turning any panic into one that names the seed.
pub fn run_seed(seed: u64, nodes: u64, steps: u64) -> Stats {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sim = Sim::new(seed, nodes, Faults::random(seed));
        for _ in 0..steps {
            sim.step();
        }
        // Generous: ~50 election timeouts; a healthy cluster needs a handful.
        sim.check_liveness(500);
        sim.stats
    }));
    match result {
        Ok(stats) => stats,
        Err(e) => {
            eprintln!(
                "simulator: seed {seed} ({nodes} nodes, {steps} steps) failed; replay with SIM_SEED={seed}"
            );
            std::panic::resume_unwind(e)
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `count` seeds from `first` (or only `SIM_SEED`), printing totals.
fn run_many(first: u64, count: u64, nodes: u64, steps: u64) {
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(s) => vec![s],
        None => (first..first + env_u64("SIM_SEEDS").unwrap_or(count)).collect(),
    };
    let mut total = Stats::default();
    for &seed in &seeds {
        let s = run_seed(seed, nodes, steps);
        if std::env::var("SIM_TRACE").is_ok() && s.liveness_ticks > 60 {
            eprintln!(
                "simulator: seed {seed} needed {} ticks to recover",
                s.liveness_ticks
            );
        }
        total.steps += s.steps;
        total.elections += s.elections;
        total.acked += s.acked;
        total.crashes += s.crashes;
        total.snapshots_sent += s.snapshots_sent;
        total.conf_changes += s.conf_changes;
        total.reads_confirmed += s.reads_confirmed;
        total.liveness_ticks = total.liveness_ticks.max(s.liveness_ticks);
        total.nodes_added += s.nodes_added;
        total.nodes_removed += s.nodes_removed;
    }
    eprintln!(
        "simulator: {} seeds x {steps} steps, {nodes} nodes: {total:?}",
        seeds.len()
    );
    assert!(
        total.acked > 0 && total.elections > 0,
        "the simulation did nothing: {total:?}"
    );
}

// 2,000 seeds by default (1,000 of 3 nodes, 1,000 of 5), in four tests so they spread over
// the machine's cores.
/// A member alone commits an entry the moment it appends it, in the same Ready that carries
/// the entry to disk: applying it (and answering its client) before that write lands would
/// lose an acknowledged write to a crash. 200 seeds by default.
#[test]
fn simulator_1_node() {
    run_many(3000, 200, 1, 2000);
}

#[test]
fn simulator_3_nodes_a() {
    run_many(0, 500, 3, 2000);
}

#[test]
fn simulator_3_nodes_b() {
    run_many(500, 500, 3, 2000);
}

#[test]
fn simulator_5_nodes_a() {
    run_many(10_000, 500, 5, 2000);
}

#[test]
fn simulator_5_nodes_b() {
    run_many(10_500, 500, 5, 2000);
}

/// A longer run for hunting rare interleavings, not part of the default suite:
/// `SIM_FIRST=100000 SIM_SEEDS=5000 SIM_STEPS=5000 cargo test -p etcd --lib simulator_soak -- --ignored --nocapture`.
#[test]
#[ignore]
fn simulator_soak() {
    let first = env_u64("SIM_FIRST").unwrap_or(1_000_000);
    let steps = env_u64("SIM_STEPS").unwrap_or(5000);
    run_many(first, 1000, 3, steps);
    run_many(first + 500_000, 1000, 5, steps);
}

/// Seed 700017 (found by the soak): node 1 crashed before its bootstrap Ready reached disk,
/// restarted with an empty log, received the cluster's entries one per message, applied
/// `AddNode(1)` and, being the only voter of that one-entry membership, elected itself and
/// overwrote committed entry 2. Nothing was wrong in raft: a server whose bootstrap never
/// persisted must bootstrap again, which the simulator now does (see `Sim::restart`).
#[test]
fn regression_lost_bootstrap_is_redone() {
    run_seed(700_017, 5, 2000);
}
