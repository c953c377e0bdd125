//! The caller's handle on a raft node: feed it ticks, messages and proposals, take `Ready`
//! batches of work (persist, send, apply), and call `advance` once each batch is done.

use prost::Message as _;
use proto::raftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState, Message, MessageType,
    Snapshot,
};

use super::config::{Config, NONE};
use super::errors::{Error, Result};
use super::raft::{Raft, SoftState, StateRole};
use super::read_only::ReadState;
use super::status::Status;
use super::storage::{Storage, snapshot_index_term};

/// Whether a snapshot sent to a follower was applied (see [`RawNode::report_snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotStatus {
    Finish,
    Failure,
}

/// A member to write into a new cluster's log by [`RawNode::bootstrap`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    /// Opaque data stored in the conf change (etcd puts the member's JSON here).
    pub context: Option<Vec<u8>>,
}

/// What `advance` needs to know about a Ready, kept apart from the public fields so the
/// caller may move those out freely.
#[derive(Debug, Clone, Default)]
struct ReadyRecord {
    soft_state: Option<SoftState>,
    hard_state: Option<HardState>,
    last_entry: Option<(u64, u64)>,
    snapshot_index: Option<u64>,
    last_committed: Option<u64>,
}

/// One batch of work for the caller. Handle it in this order, then call
/// [`RawNode::advance`] with it:
///
/// 1. If `snapshot` is set, persist it and install it in the storage
///    (`MemStorage::apply_snapshot`), and restore the state machine from it.
/// 2. Persist `entries` and `hard_state` (when set) — with an fsync if `must_sync` — and
///    append `entries` to the storage (`MemStorage::append`, `set_hard_state`). Entries may
///    replace a suffix already stored; the append truncates it.
/// 3. Send `messages`. Acknowledgements and votes (`MsgAppResp`, `MsgVoteResp`,
///    `MsgPreVoteResp`) promise what is on disk: send them only after step 2. When the Ready
///    changes neither term nor vote, the others may go in parallel with step 2: a leader's
///    appends (thesis §10.2.1: it only counts its own log toward a commit in a later Ready,
///    which it takes after calling `advance`), a follower's forwarded proposals and reads. When the transport has sent (or
///    failed to send) a `MsgSnap`, call [`RawNode::report_snapshot`]; when a peer cannot be
///    reached, [`RawNode::report_unreachable`]. A server sending `MsgSnap` should build the
///    snapshot as of its current applied index and membership (as etcd's merged snapshot
///    message does): a follower refuses a snapshot whose membership does not include it,
///    which an older stored snapshot may not for a newly added member.
/// 4. Apply `committed_entries` in order. Those before this Ready's `entries` are durable
///    already and may be applied in parallel with step 2; the others (entries of step 2)
///    only once step 2 is done. For `EntryConfChange` entries call [`RawNode::apply_conf_change`].
/// 5. Serve `read_states`: a read with `index` may be answered once the applied index
///    reaches it.
/// 6. Call `advance(ready)`.
///
/// Take the next Ready only after `advance`: until then raft keeps handing out the same
/// unstable entries and committed entries.
#[derive(Debug, Default)]
pub struct Ready {
    /// Known leader and role, when they changed since the last Ready.
    pub soft_state: Option<SoftState>,
    /// Term, vote and commit to persist, when they changed since the last Ready.
    pub hard_state: Option<HardState>,
    /// Reads confirmed by the leader (see step 5).
    pub read_states: Vec<ReadState>,
    /// Entries to persist, in index order.
    pub entries: Vec<Entry>,
    /// A snapshot from the leader to install.
    pub snapshot: Option<Snapshot>,
    /// Committed entries to apply, in index order.
    pub committed_entries: Vec<Entry>,
    /// Messages to send to peers (`to` names the peer).
    pub messages: Vec<Message>,
    /// Whether `entries`/`hard_state` must reach disk (fsync) before messages are sent.
    pub must_sync: bool,
    record: ReadyRecord,
}

impl Ready {
    /// Takes out the messages that may leave before this Ready is persisted (step 3): all
    /// but acknowledgements and votes, and none when the Ready changes term or vote against
    /// `persisted` (the hard state on disk), or when a leader alone among voters commits
    /// this Ready's own entries (its appends would announce a commit a crash could take
    /// back).
    pub fn take_messages_before_persist(&mut self, persisted: &HardState) -> Vec<Message> {
        let keeps_term_and_vote = self
            .hard_state
            .is_none_or(|hs| hs.term == persisted.term && hs.vote == persisted.vote);
        let first_new = self.entries.first().map_or(u64::MAX, |e| e.index);
        let commits_unwritten = self.hard_state.is_some_and(|hs| hs.commit >= first_new);
        if !keeps_term_and_vote || commits_unwritten {
            return Vec::new();
        }
        let (later, now) = std::mem::take(&mut self.messages)
            .into_iter()
            .partition(promises_disk_state);
        self.messages = later;
        now
    }

    /// Takes out the committed entries that are on disk already (step 4): those before this
    /// Ready's `entries`, every earlier Ready having been persisted. None while a snapshot
    /// is to be installed first.
    pub fn take_committed_on_disk(&mut self) -> Vec<Entry> {
        if self.snapshot.is_some() {
            return Vec::new();
        }
        let first_new = self.entries.first().map_or(u64::MAX, |e| e.index);
        let on_disk = self
            .committed_entries
            .iter()
            .position(|e| e.index >= first_new)
            .unwrap_or(self.committed_entries.len());
        self.committed_entries.drain(..on_disk).collect()
    }
}

/// Whether a message vouches for the sender's log or vote, and so may only leave once what
/// it vouches for is on disk (etcd's raft holds back the same three).
fn promises_disk_state(m: &Message) -> bool {
    matches!(
        MessageType::try_from(m.r#type),
        Ok(MessageType::MsgAppResp | MessageType::MsgVoteResp | MessageType::MsgPreVoteResp)
    )
}

/// A raft node driven by its caller (see the module documentation of `etcd::raft`).
pub struct RawNode<S: Storage> {
    pub(crate) raft: Raft<S>,
    prev_ss: SoftState,
    prev_hs: HardState,
}

fn is_local_msg(ty: MessageType) -> bool {
    matches!(
        ty,
        MessageType::MsgHup
            | MessageType::MsgBeat
            | MessageType::MsgUnreachable
            | MessageType::MsgSnapStatus
            | MessageType::MsgCheckQuorum
    )
}

/// Terms and indexes never come near this in a real cluster (2^62 entries); a message that
/// carries a larger one is corrupt or hostile, and refusing it keeps every `+ 1` in raft safe.
const MAX_PLAUSIBLE: u64 = 1 << 62;

fn implausible(m: &Message) -> bool {
    let snap = m
        .snapshot
        .as_ref()
        .map_or((0, 0), super::storage::snapshot_index_term);
    [
        m.term,
        m.log_term,
        m.index,
        m.commit,
        m.reject_hint,
        snap.0,
        snap.1,
    ]
    .into_iter()
    .chain(m.entries.iter().flat_map(|e| [e.index, e.term]))
    .any(|v| v >= MAX_PLAUSIBLE)
}

fn is_response_msg(ty: MessageType) -> bool {
    matches!(
        ty,
        MessageType::MsgAppResp
            | MessageType::MsgVoteResp
            | MessageType::MsgHeartbeatResp
            | MessageType::MsgPreVoteResp
    )
}

impl<S: Storage> RawNode<S> {
    /// A node over `storage`: new if the storage is empty, restarting from its hard state,
    /// entries and snapshot otherwise. `config.applied` skips entries already applied.
    pub fn new(config: &Config, storage: S) -> Result<Self> {
        let raft = Raft::new(config, storage)?;
        let prev_ss = raft.soft_state();
        let prev_hs = raft.hard_state();
        Ok(RawNode {
            raft,
            prev_ss,
            prev_hs,
        })
    }

    /// Starts a new cluster's log, as etcd does: one `ConfChangeAddNode` entry per member at
    /// term 1, all committed. The first Ready carries them for persisting and applying
    /// (applying them again is harmless). The storage must be empty.
    pub fn bootstrap(&mut self, peers: &[Peer]) -> Result<()> {
        if peers.is_empty() {
            return Err(Error::ConfigInvalid(
                "must provide at least one peer".into(),
            ));
        }
        if self.raft.raft_log.last_index() != 0 {
            return Err(Error::ConfigInvalid(
                "can't bootstrap a nonempty Storage".into(),
            ));
        }
        self.raft.become_follower(1, NONE);
        let ents: Vec<Entry> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let cc = ConfChange {
                    id: 0,
                    r#type: ConfChangeType::ConfChangeAddNode as i32,
                    node_id: p.id,
                    context: p.context.clone(),
                };
                Entry {
                    term: 1,
                    index: i as u64 + 1,
                    r#type: EntryType::EntryConfChange as i32,
                    data: Some(cc.encode_to_vec()),
                }
            })
            .collect();
        let n = ents.len() as u64;
        self.raft.raft_log.append(ents);
        self.raft.raft_log.committed = n;
        for p in peers {
            self.raft.apply_conf_change(&ConfChange {
                r#type: ConfChangeType::ConfChangeAddNode as i32,
                node_id: p.id,
                ..ConfChange::default()
            });
        }
        Ok(())
    }

    /// One unit of logical time; heartbeats and election timeouts are counted in ticks.
    pub fn tick(&mut self) {
        self.raft.tick();
    }

    /// Starts an election now (pre-vote first when configured).
    pub fn campaign(&mut self) -> Result<()> {
        self.raft.step(Message {
            r#type: MessageType::MsgHup as i32,
            ..Message::default()
        })
    }

    /// Proposes data to append to the log. `Err(ProposalDropped)` if there is no leader to
    /// take it (or see [`Error::ProposalDropped`]). `Ok` does not mean it will commit: a
    /// caller waits to see it applied.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<()> {
        self.propose_batch(vec![data])
    }

    /// Proposes several entries in one step, in order: a leader appends them together and
    /// sends each follower one append for all of them, a follower forwards them to the leader
    /// in one message (one proposal per step would cost one append and one answer per entry
    /// and peer). All of them are taken or, with the same error as `propose`, none.
    pub fn propose_batch(&mut self, data: Vec<Vec<u8>>) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let id = self.raft.id;
        self.raft.step(Message {
            r#type: MessageType::MsgProp as i32,
            from: id,
            entries: data
                .into_iter()
                .map(|d| Entry {
                    data: Some(d),
                    ..Entry::default()
                })
                .collect(),
            ..Message::default()
        })
    }

    /// Proposes a membership change. Apply it with [`apply_conf_change`](Self::apply_conf_change)
    /// when it comes out committed. While another change is pending, the leader replaces it
    /// with an empty entry (it never takes effect).
    pub fn propose_conf_change(&mut self, cc: &ConfChange) -> Result<()> {
        let id = self.raft.id;
        self.raft.step(Message {
            r#type: MessageType::MsgProp as i32,
            from: id,
            entries: vec![Entry {
                r#type: EntryType::EntryConfChange as i32,
                data: Some(cc.encode_to_vec()),
                ..Entry::default()
            }],
            ..Message::default()
        })
    }

    /// Feeds a message received from a peer. Local-only message types and responses from
    /// unknown peers are refused; malformed messages are refused or dropped, never a panic.
    pub fn step(&mut self, m: Message) -> Result<()> {
        let Ok(ty) = MessageType::try_from(m.r#type) else {
            return Err(Error::MalformedMessage(format!(
                "unknown message type {}",
                m.r#type
            )));
        };
        if is_local_msg(ty) {
            return Err(Error::StepLocalMsg);
        }
        if implausible(&m) {
            return Err(Error::MalformedMessage(format!(
                "{ty:?} from {} with an implausible term or index",
                m.from
            )));
        }
        // Every peer message names a sender other than us; one that does not would, for
        // instance, make us follow ourselves and forward proposals in a circle.
        if m.from == NONE || m.from == self.raft.id {
            return Err(Error::MalformedMessage(format!(
                "{ty:?} from {} to {}",
                m.from, self.raft.id
            )));
        }
        if matches!(
            ty,
            MessageType::MsgProp | MessageType::MsgReadIndex | MessageType::MsgTransferLeader
        ) && self.raft.state != StateRole::Leader
        {
            // A peer forwarded this because it thinks we lead. Forwarding it again could
            // send it around in a circle; the proposer retries instead.
            return Err(Error::ProposalDropped);
        }
        if is_response_msg(ty) && !self.raft.prs.progress.contains_key(&m.from) {
            return Err(Error::StepPeerNotFound);
        }
        self.raft.step(m)
    }

    /// Asks for a linearizable read. When confirmed, a [`ReadState`] with the same `ctx`
    /// comes out in a Ready; the read may be served once the applied index reaches its
    /// index. `ctx` must be unique among pending reads.
    pub fn read_index(&mut self, ctx: Vec<u8>) -> Result<()> {
        self.raft.step(Message {
            r#type: MessageType::MsgReadIndex as i32,
            entries: vec![Entry {
                data: Some(ctx),
                ..Entry::default()
            }],
            ..Message::default()
        })
    }

    /// Asks the leader to hand leadership to `transferee` (forwarded if we are a follower).
    pub fn transfer_leader(&mut self, transferee: u64) {
        let _ = self.raft.step(Message {
            r#type: MessageType::MsgTransferLeader as i32,
            from: transferee,
            ..Message::default()
        });
    }

    /// Applies a committed conf change entry's change and returns the new membership, which
    /// the caller stores for its next snapshot.
    pub fn apply_conf_change(&mut self, cc: &ConfChange) -> ConfState {
        self.raft.apply_conf_change(cc)
    }

    /// The transport could not reach `id`; the leader stops streaming to it optimistically.
    pub fn report_unreachable(&mut self, id: u64) {
        let _ = self.raft.step(Message {
            r#type: MessageType::MsgUnreachable as i32,
            from: id,
            ..Message::default()
        });
    }

    /// The outcome of sending a snapshot to `id`, so the leader resumes replicating to it.
    pub fn report_snapshot(&mut self, id: u64, status: SnapshotStatus) {
        let _ = self.raft.step(Message {
            r#type: MessageType::MsgSnapStatus as i32,
            from: id,
            reject: status == SnapshotStatus::Failure,
            ..Message::default()
        });
    }

    /// Whether `ready` would return any work.
    pub fn has_ready(&self) -> bool {
        let r = &self.raft;
        if r.soft_state() != self.prev_ss {
            return true;
        }
        let hs = r.hard_state();
        if hs != HardState::default() && hs != self.prev_hs {
            return true;
        }
        r.raft_log.unstable.snapshot.is_some()
            || !r.msgs.is_empty()
            || !r.raft_log.unstable_entries().is_empty()
            || r.raft_log.has_next_committed_entries()
            || !r.read_states.is_empty()
    }

    /// Takes the pending work (see [`Ready`] for what to do with it).
    pub fn ready(&mut self) -> Ready {
        let r = &mut self.raft;
        let mut rd = Ready {
            entries: r.raft_log.unstable_entries().to_vec(),
            committed_entries: r
                .raft_log
                .next_committed_entries(r.max_committed_size_per_ready),
            messages: std::mem::take(&mut r.msgs),
            read_states: std::mem::take(&mut r.read_states),
            snapshot: r.raft_log.unstable.snapshot.clone(),
            ..Ready::default()
        };
        let ss = r.soft_state();
        if ss != self.prev_ss {
            rd.soft_state = Some(ss);
        }
        let hs = r.hard_state();
        if hs != self.prev_hs {
            rd.must_sync = hs.term != self.prev_hs.term || hs.vote != self.prev_hs.vote;
            rd.hard_state = Some(hs);
        }
        rd.must_sync |= !rd.entries.is_empty();
        rd.record = ReadyRecord {
            soft_state: rd.soft_state,
            hard_state: rd.hard_state,
            last_entry: rd.entries.last().map(|e| (e.index, e.term)),
            snapshot_index: rd.snapshot.as_ref().map(|s| snapshot_index_term(s).0),
            last_committed: rd.committed_entries.last().map(|e| e.index),
        };
        rd
    }

    /// Tells raft that the Ready was handled as its documentation says: everything in it is
    /// persisted, sent and applied.
    pub fn advance(&mut self, rd: Ready) {
        let rec = rd.record;
        if let Some(ss) = rec.soft_state {
            self.prev_ss = ss;
        }
        if let Some(hs) = rec.hard_state {
            self.prev_hs = hs;
        }
        let log = &mut self.raft.raft_log;
        if let Some((index, term)) = rec.last_entry {
            log.stable_to(index, term);
        }
        if let Some(index) = rec.snapshot_index {
            log.stable_snap_to(index);
            log.applied_to(index);
        }
        if let Some(index) = rec.last_committed {
            log.applied_to(index);
        }
    }

    /// Where this node stands (see [`Status`]).
    pub fn status(&self) -> Status {
        Status::new(&self.raft)
    }

    /// The index of the last committed entry handed out in a `Ready` (raft's applied index).
    pub fn applied(&self) -> u64 {
        self.raft.raft_log.applied
    }

    /// On a leader, the lowest index any other member (voter or learner) is known to hold;
    /// `None` when this node does not lead or leads alone.
    pub fn lowest_peer_match(&self) -> Option<u64> {
        if self.raft.state != StateRole::Leader {
            return None;
        }
        let me = self.raft.id;
        self.raft
            .prs
            .progress
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(_, p)| p.matched)
            .min()
    }

    /// This node's role.
    pub fn role(&self) -> StateRole {
        self.raft.state
    }

    /// The leader this node knows of, or `NONE` (0).
    pub fn leader_id(&self) -> u64 {
        self.raft.leader_id
    }

    /// The storage, for reading.
    pub fn storage(&self) -> &S {
        &self.raft.raft_log.storage
    }

    /// The storage, for the caller's writes (append, hard state, snapshots, compaction).
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.raft.raft_log.storage
    }

    /// Gives the storage back, dropping all volatile state (what a crash keeps).
    pub fn into_storage(self) -> S {
        self.raft.raft_log.storage
    }
}
