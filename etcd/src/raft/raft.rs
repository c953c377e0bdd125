//! The raft algorithm itself: terms, roles and one step function per role. It only queues
//! outgoing messages and mutates the log; `RawNode` turns that into `Ready` batches.

use proto::raftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState, Message, MessageType,
    Snapshot,
};
use tracing::{debug, info, warn};

use super::config::{Config, NONE, SplitMix64};
use super::errors::{Error, Result, StorageError};
use super::log::RaftLog;
use super::quorum::VoteResult;
use super::read_only::{ReadOnly, ReadState};
use super::storage::{Storage, snapshot_index_term};
use super::tracker::{Progress, ProgressState, ProgressTracker};

/// Context of the vote requests of a leadership transfer: voters grant them even while they
/// believe a leader is alive, because that leader asked for the election.
pub const CAMPAIGN_TRANSFER: &[u8] = b"CampaignTransfer";

/// The role a node plays in its current term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateRole {
    #[default]
    Follower,
    /// Asking whether it could win before raising its term (pre-vote).
    PreCandidate,
    Candidate,
    Leader,
}

/// Volatile state that the caller may want to observe (it need not be persisted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SoftState {
    /// The leader this node knows of, or `NONE`.
    pub leader_id: u64,
    pub raft_state: StateRole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CampaignKind {
    PreElection,
    Election,
    Transfer,
}

/// One raft node's state machine.
pub struct Raft<S: Storage> {
    pub id: u64,
    pub term: u64,
    pub vote: u64,
    pub raft_log: RaftLog<S>,
    pub prs: ProgressTracker,
    pub state: StateRole,
    /// Whether this node is a learner in its own view of the membership.
    pub is_learner: bool,
    /// Messages to send, drained into each Ready.
    pub msgs: Vec<Message>,
    pub leader_id: u64,
    /// The node leadership is being handed to, if a transfer is in progress.
    pub lead_transferee: Option<u64>,
    /// Index of the latest conf change appended by this leader; another one is refused until
    /// it is applied, so at most one membership change is in flight.
    pub pending_conf_index: u64,
    pub read_only: ReadOnly,
    /// Confirmed reads, drained into each Ready.
    pub read_states: Vec<ReadState>,
    /// Reads that arrived before this leader committed an entry of its term: its commit index
    /// may still be behind the previous leader's, so they wait.
    pending_read_index_messages: Vec<Message>,
    election_elapsed: usize,
    heartbeat_elapsed: usize,
    pub check_quorum: bool,
    pub pre_vote: bool,
    heartbeat_timeout: usize,
    election_timeout: usize,
    randomized_election_timeout: usize,
    max_msg_size: u64,
    pub(crate) max_committed_size_per_ready: u64,
    disable_proposal_forwarding: bool,
    rng: SplitMix64,
}

fn msg(ty: MessageType, to: u64) -> Message {
    Message {
        r#type: ty as i32,
        to,
        ..Message::default()
    }
}

fn is_conf_change(e: &Entry) -> bool {
    e.r#type == EntryType::EntryConfChange as i32 || e.r#type == EntryType::EntryConfChangeV2 as i32
}

fn vote_resp_type(ty: MessageType) -> MessageType {
    if ty == MessageType::MsgPreVote {
        MessageType::MsgPreVoteResp
    } else {
        MessageType::MsgVoteResp
    }
}

impl<S: Storage> Raft<S> {
    /// A node restarting from whatever `storage` holds (an empty storage is a new node).
    pub fn new(config: &Config, storage: S) -> Result<Self> {
        config.validate()?;
        let rs = storage.initial_state()?;
        let raft_log = RaftLog::new(storage)?;
        let mut prs = ProgressTracker::new(config.max_inflight_msgs);
        prs.reset_to(&rs.conf_state, raft_log.last_index() + 1);
        let mut r = Raft {
            id: config.id,
            term: 0,
            vote: NONE,
            raft_log,
            prs,
            state: StateRole::Follower,
            is_learner: false,
            msgs: Vec::new(),
            leader_id: NONE,
            lead_transferee: None,
            pending_conf_index: 0,
            read_only: ReadOnly::default(),
            read_states: Vec::new(),
            pending_read_index_messages: Vec::new(),
            election_elapsed: 0,
            heartbeat_elapsed: 0,
            check_quorum: config.check_quorum,
            pre_vote: config.pre_vote,
            heartbeat_timeout: config.heartbeat_tick,
            election_timeout: config.election_tick,
            randomized_election_timeout: config.election_tick,
            max_msg_size: config.max_size_per_msg,
            max_committed_size_per_ready: config.max_committed_size_per_ready,
            disable_proposal_forwarding: config.disable_proposal_forwarding,
            rng: SplitMix64::new(config.seed ^ config.id.rotate_left(32)),
        };
        r.is_learner = r.prs.learners.contains(&r.id);
        let hs = rs.hard_state;
        if hs != HardState::default() {
            if hs.commit < r.raft_log.committed || hs.commit > r.raft_log.last_index() {
                return Err(Error::CorruptState(format!(
                    "commit index {} is out of range [{}, {}]",
                    hs.commit,
                    r.raft_log.committed,
                    r.raft_log.last_index()
                )));
            }
            r.raft_log.committed = hs.commit;
            r.term = hs.term;
            r.vote = hs.vote;
        }
        if config.applied > 0 {
            if config.applied > r.raft_log.committed {
                return Err(Error::CorruptState(format!(
                    "applied index {} is past the commit index {}",
                    config.applied, r.raft_log.committed
                )));
            }
            r.raft_log.applied_to(config.applied);
        }
        r.become_follower(r.term, NONE);
        info!(
            id = r.id,
            term = r.term,
            commit = r.raft_log.committed,
            applied = r.raft_log.applied,
            last_index = r.raft_log.last_index(),
            "raft: newRaft"
        );
        Ok(r)
    }

    pub fn soft_state(&self) -> SoftState {
        SoftState {
            leader_id: self.leader_id,
            raft_state: self.state,
        }
    }

    pub fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.raft_log.committed,
        }
    }

    /// Queues a message, stamping sender and term. Vote traffic carries its term explicitly
    /// (a pre-vote asks about the next term); proposals and reads forwarded to the leader
    /// carry none, so they are never rejected as stale.
    fn send(&mut self, mut m: Message) {
        m.from = self.id;
        match m.r#type() {
            MessageType::MsgVote
            | MessageType::MsgPreVote
            | MessageType::MsgVoteResp
            | MessageType::MsgPreVoteResp => {
                debug_assert!(m.term != 0, "vote messages must carry a term");
            }
            MessageType::MsgProp | MessageType::MsgReadIndex => m.term = 0,
            _ => m.term = self.term,
        }
        self.msgs.push(m);
    }

    // ---- timers -------------------------------------------------------------------------

    /// Advances the logical clock by one tick.
    pub fn tick(&mut self) {
        if self.state == StateRole::Leader {
            self.tick_heartbeat();
        } else {
            self.tick_election();
        }
    }

    fn tick_election(&mut self) {
        self.election_elapsed += 1;
        if self.promotable() && self.election_elapsed >= self.randomized_election_timeout {
            self.election_elapsed = 0;
            let _ = self.step(msg(MessageType::MsgHup, NONE));
        }
    }

    fn tick_heartbeat(&mut self) {
        self.heartbeat_elapsed += 1;
        self.election_elapsed += 1;
        if self.election_elapsed >= self.election_timeout {
            self.election_elapsed = 0;
            if self.check_quorum {
                let _ = self.step(msg(MessageType::MsgCheckQuorum, NONE));
            }
            // A transfer that did not finish within an election timeout has failed; accept
            // proposals again.
            if self.state == StateRole::Leader && self.lead_transferee.is_some() {
                self.abort_leader_transfer();
            }
        }
        if self.state != StateRole::Leader {
            return;
        }
        if self.heartbeat_elapsed >= self.heartbeat_timeout {
            self.heartbeat_elapsed = 0;
            let _ = self.step(msg(MessageType::MsgBeat, NONE));
        }
    }

    fn reset_randomized_election_timeout(&mut self) {
        self.randomized_election_timeout =
            self.election_timeout + self.rng.below(self.election_timeout as u64) as usize;
    }

    /// The election timeout drawn for the current term, in [election, 2 × election).
    pub fn randomized_election_timeout(&self) -> usize {
        self.randomized_election_timeout
    }

    /// Sets the drawn election timeout, so tests can force an order of events.
    pub fn set_randomized_election_timeout(&mut self, t: usize) {
        self.randomized_election_timeout = t;
    }

    /// Whether this node may become leader: it is a voter in its own view and is not waiting
    /// to install a snapshot (which may change the membership).
    pub fn promotable(&self) -> bool {
        self.prs.is_voter(self.id) && self.raft_log.unstable.snapshot.is_none()
    }

    // ---- role changes --------------------------------------------------------------------

    fn reset(&mut self, term: u64) {
        if self.term != term {
            self.term = term;
            self.vote = NONE;
        }
        self.leader_id = NONE;
        self.election_elapsed = 0;
        self.heartbeat_elapsed = 0;
        self.reset_randomized_election_timeout();
        self.abort_leader_transfer();
        self.prs.reset_votes();
        let last = self.raft_log.last_index();
        let max_inflight = self.prs.max_inflight;
        for (&id, pr) in self.prs.progress.iter_mut() {
            let is_learner = pr.is_learner;
            *pr = Progress::new(last + 1, max_inflight);
            pr.is_learner = is_learner;
            if id == self.id {
                pr.matched = last;
            }
        }
        self.pending_conf_index = 0;
        self.read_only = ReadOnly::default();
        self.pending_read_index_messages.clear();
    }

    pub fn become_follower(&mut self, term: u64, leader_id: u64) {
        self.reset(term);
        self.leader_id = leader_id;
        self.state = StateRole::Follower;
        // etcd's wording: log watchers wait for these lines.
        info!("{:x} became follower at term {}", self.id, term);
    }

    /// Pre-candidates keep their term and vote: only a won pre-vote may change them.
    pub fn become_pre_candidate(&mut self) {
        assert!(
            self.state != StateRole::Leader,
            "raft: invalid transition [leader -> pre-candidate]"
        );
        self.prs.reset_votes();
        self.leader_id = NONE;
        self.state = StateRole::PreCandidate;
        info!("{:x} became pre-candidate at term {}", self.id, self.term);
    }

    pub fn become_candidate(&mut self) {
        assert!(
            self.state != StateRole::Leader,
            "raft: invalid transition [leader -> candidate]"
        );
        self.reset(self.term + 1);
        self.vote = self.id;
        self.state = StateRole::Candidate;
        info!("{:x} became candidate at term {}", self.id, self.term);
    }

    pub fn become_leader(&mut self) {
        assert!(
            self.state != StateRole::Follower,
            "raft: invalid transition [follower -> leader]"
        );
        self.reset(self.term);
        self.leader_id = self.id;
        self.state = StateRole::Leader;
        let id = self.id;
        if let Some(pr) = self.prs.progress.get_mut(&id) {
            pr.become_replicate();
            pr.recent_active = true;
        }
        // Any conf change in the log may still be unapplied; refuse new ones until everything
        // up to here is.
        self.pending_conf_index = self.raft_log.last_index();
        // An empty entry of the new term lets earlier entries commit (§5.4.2) and makes
        // ReadIndex safe once it commits (§6.4).
        self.append_entry(vec![Entry::default()]);
        info!("{:x} became leader at term {}", self.id, self.term);
    }

    // ---- elections -----------------------------------------------------------------------

    fn has_unapplied_conf_changes(&self) -> bool {
        let log = &self.raft_log;
        let lo = (log.applied + 1).max(log.first_index());
        if lo > log.committed {
            return false;
        }
        match log.slice(lo, log.committed + 1, u64::MAX) {
            Ok(ents) => ents.iter().any(is_conf_change),
            Err(_) => true,
        }
    }

    fn hup(&mut self, kind: CampaignKind) {
        if self.state == StateRole::Leader {
            return;
        }
        if !self.promotable() {
            warn!(id = self.id, "raft: is unpromotable and can not campaign");
            return;
        }
        if self.term == u64::MAX {
            // Only a corrupt or hostile peer can have pushed the term this far; there is no
            // next term to campaign in.
            tracing::error!(id = self.id, "raft: term exhausted, cannot campaign");
            return;
        }
        // A committed but unapplied conf change may remove this node or change the quorum:
        // campaigning on the old membership could elect a leader a new quorum never chose.
        if self.has_unapplied_conf_changes() {
            warn!(
                id = self.id,
                "raft: cannot campaign: pending configuration changes to apply"
            );
            return;
        }
        info!(
            "{:x} is starting a new election at term {}",
            self.id, self.term
        );
        self.campaign(kind);
    }

    fn campaign(&mut self, kind: CampaignKind) {
        let (vote_msg, term) = if kind == CampaignKind::PreElection {
            self.become_pre_candidate();
            (MessageType::MsgPreVote, self.term + 1)
        } else {
            self.become_candidate();
            (MessageType::MsgVote, self.term)
        };
        if self.poll(self.id, true) == VoteResult::Won {
            // A single-voter cluster wins on its own vote.
            if kind == CampaignKind::PreElection {
                self.campaign(CampaignKind::Election);
            } else {
                self.become_leader();
            }
            return;
        }
        let voters: Vec<u64> = self.prs.voters.voters.iter().copied().collect();
        let (last_index, last_term) = (self.raft_log.last_index(), self.raft_log.last_term());
        let me = self.id;
        for id in voters.into_iter().filter(|&id| id != me) {
            let mut m = msg(vote_msg, id);
            m.term = term;
            m.index = last_index;
            m.log_term = last_term;
            if kind == CampaignKind::Transfer {
                m.context = Some(CAMPAIGN_TRANSFER.to_vec());
            }
            self.send(m);
        }
    }

    fn poll(&mut self, id: u64, granted: bool) -> VoteResult {
        self.prs.record_vote(id, granted);
        let (yes, no, result) = self.prs.tally_votes();
        debug!(
            id = self.id,
            from = id,
            granted,
            yes,
            no,
            "raft: vote tallied"
        );
        result
    }

    // ---- step -----------------------------------------------------------------------------

    /// Feeds one message (from a peer, or generated locally) into the state machine.
    pub fn step(&mut self, m: Message) -> Result<()> {
        let Ok(ty) = MessageType::try_from(m.r#type) else {
            return Err(Error::MalformedMessage(format!(
                "unknown message type {}",
                m.r#type
            )));
        };
        if m.term == 0 && Self::needs_term(ty) {
            return Err(Error::MalformedMessage(format!("{ty:?} without a term")));
        }
        if m.term > self.term {
            if matches!(ty, MessageType::MsgVote | MessageType::MsgPreVote) {
                let force = m.context.as_deref() == Some(CAMPAIGN_TRANSFER);
                let in_lease = self.check_quorum
                    && self.leader_id != NONE
                    && self.election_elapsed < self.election_timeout;
                if !force && in_lease {
                    // We heard from a leader within the minimum election timeout: this
                    // candidate is disconnected or too eager, so it must not depose it (§4.2.3).
                    debug!(
                        id = self.id,
                        from = m.from,
                        "raft: ignored vote request in lease"
                    );
                    return Ok(());
                }
            }
            match ty {
                // A pre-vote is about a term nobody has entered yet.
                MessageType::MsgPreVote => {}
                // Granted pre-votes carry the future term; ours changes only if we win.
                MessageType::MsgPreVoteResp if !m.reject => {}
                MessageType::MsgApp | MessageType::MsgHeartbeat | MessageType::MsgSnap => {
                    self.become_follower(m.term, m.from);
                }
                _ => self.become_follower(m.term, NONE),
            }
        } else if m.term != 0 && m.term < self.term {
            if (self.check_quorum || self.pre_vote)
                && matches!(ty, MessageType::MsgHeartbeat | MessageType::MsgApp)
            {
                // A stale leader would otherwise never learn of the new term: with check-quorum
                // or pre-vote, nodes do not raise their terms on its behalf. Tell it.
                self.send(msg(MessageType::MsgAppResp, m.from));
            } else if ty == MessageType::MsgPreVote {
                // Reject explicitly so the pre-candidate learns the term and stops waiting.
                let mut resp = msg(MessageType::MsgPreVoteResp, m.from);
                resp.term = self.term;
                resp.reject = true;
                self.send(resp);
            }
            return Ok(());
        }

        match ty {
            MessageType::MsgHup => {
                let kind = if self.pre_vote {
                    CampaignKind::PreElection
                } else {
                    CampaignKind::Election
                };
                self.hup(kind);
                Ok(())
            }
            MessageType::MsgVote | MessageType::MsgPreVote => {
                self.handle_vote_request(m, ty);
                Ok(())
            }
            _ => match self.state {
                StateRole::Follower => self.step_follower(m, ty),
                StateRole::PreCandidate | StateRole::Candidate => self.step_candidate(m, ty),
                StateRole::Leader => self.step_leader(m, ty),
            },
        }
    }

    /// Peer-to-peer messages always carry the sender's term; only local messages and
    /// forwarded proposals and reads may lack one.
    fn needs_term(ty: MessageType) -> bool {
        matches!(
            ty,
            MessageType::MsgApp
                | MessageType::MsgAppResp
                | MessageType::MsgVote
                | MessageType::MsgVoteResp
                | MessageType::MsgPreVote
                | MessageType::MsgPreVoteResp
                | MessageType::MsgSnap
                | MessageType::MsgHeartbeat
                | MessageType::MsgHeartbeatResp
                | MessageType::MsgTimeoutNow
                | MessageType::MsgReadIndexResp
        )
    }

    /// Grants a vote at most once per term, to a candidate whose log is at least as
    /// up-to-date (§5.2, §5.4.1). A pre-vote is granted on the log alone when the candidate's
    /// term is ahead, since no one has voted in that term yet.
    ///
    /// A node that believes it is a learner answers too, as etcd's does: the candidate may
    /// already have applied its promotion, and the new quorum may need its vote. A learner's
    /// vote never counts for a candidate that sees it as a learner (the tally only counts
    /// voters), and a learner never campaigns.
    fn handle_vote_request(&mut self, m: Message, ty: MessageType) {
        let can_vote = self.vote == m.from
            || (self.vote == NONE && self.leader_id == NONE)
            || (ty == MessageType::MsgPreVote && m.term > self.term);
        let mut resp = msg(vote_resp_type(ty), m.from);
        if can_vote && self.raft_log.is_up_to_date(m.index, m.log_term) {
            // Answer with the candidate's term: a granted pre-vote is about that term.
            resp.term = m.term;
            if ty == MessageType::MsgVote {
                self.election_elapsed = 0;
                self.vote = m.from;
            }
        } else {
            resp.term = self.term;
            resp.reject = true;
        }
        debug!(
            id = self.id,
            to = m.from,
            reject = resp.reject,
            ?ty,
            "raft: vote answered"
        );
        self.send(resp);
    }

    fn step_follower(&mut self, mut m: Message, ty: MessageType) -> Result<()> {
        match ty {
            MessageType::MsgProp => {
                if self.leader_id == NONE || self.disable_proposal_forwarding {
                    return Err(Error::ProposalDropped);
                }
                m.to = self.leader_id;
                self.send(m);
            }
            MessageType::MsgApp => {
                self.election_elapsed = 0;
                self.leader_id = m.from;
                self.handle_append_entries(m);
            }
            MessageType::MsgHeartbeat => {
                self.election_elapsed = 0;
                self.leader_id = m.from;
                self.handle_heartbeat(m);
            }
            MessageType::MsgSnap => {
                self.election_elapsed = 0;
                self.leader_id = m.from;
                self.handle_snapshot(m);
            }
            MessageType::MsgReadIndex => {
                if self.leader_id == NONE {
                    return Err(Error::ProposalDropped);
                }
                m.to = self.leader_id;
                self.send(m);
            }
            MessageType::MsgTransferLeader => {
                if self.leader_id == NONE {
                    return Err(Error::ProposalDropped);
                }
                // `from` names the transferee, so it must survive the forwarding.
                m.to = self.leader_id;
                m.term = self.term;
                self.msgs.push(m);
            }
            MessageType::MsgTimeoutNow => {
                if m.from != self.leader_id {
                    warn!(
                        id = self.id,
                        from = m.from,
                        "raft: ignored MsgTimeoutNow not from our leader"
                    );
                    return Ok(());
                }
                info!(
                    "{:x} [term {}] received MsgTimeoutNow from {:x} and starts an election to get leadership.",
                    self.id, self.term, m.from
                );
                // The leader asked us to take over: no pre-vote, we know it is not a partition.
                self.hup(CampaignKind::Transfer);
            }
            MessageType::MsgReadIndexResp => {
                if m.entries.len() != 1 {
                    return Err(Error::MalformedMessage(format!(
                        "MsgReadIndexResp with {} entries",
                        m.entries.len()
                    )));
                }
                let ctx = m.entries.swap_remove(0).data.unwrap_or_default();
                self.read_states.push(ReadState {
                    index: m.index,
                    request_ctx: ctx,
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn step_candidate(&mut self, m: Message, ty: MessageType) -> Result<()> {
        let my_vote_resp = if self.state == StateRole::PreCandidate {
            MessageType::MsgPreVoteResp
        } else {
            MessageType::MsgVoteResp
        };
        match ty {
            MessageType::MsgProp => return Err(Error::ProposalDropped),
            // Someone won this term (or a later one): follow it.
            MessageType::MsgApp => {
                self.become_follower(m.term, m.from);
                self.handle_append_entries(m);
            }
            MessageType::MsgHeartbeat => {
                self.become_follower(m.term, m.from);
                self.handle_heartbeat(m);
            }
            MessageType::MsgSnap => {
                self.become_follower(m.term, m.from);
                self.handle_snapshot(m);
            }
            t if t == my_vote_resp => match self.poll(m.from, !m.reject) {
                VoteResult::Won => {
                    if self.state == StateRole::PreCandidate {
                        self.campaign(CampaignKind::Election);
                    } else {
                        self.become_leader();
                        self.bcast_append();
                    }
                }
                VoteResult::Lost => {
                    // A pre-vote loss leaves the term alone; an election loss keeps it.
                    self.become_follower(self.term, NONE);
                }
                VoteResult::Pending => {}
            },
            _ => {}
        }
        Ok(())
    }

    fn step_leader(&mut self, mut m: Message, ty: MessageType) -> Result<()> {
        match ty {
            MessageType::MsgBeat => {
                self.bcast_heartbeat();
                return Ok(());
            }
            MessageType::MsgCheckQuorum => {
                if !self.prs.quorum_active() {
                    warn!(
                        id = self.id,
                        term = self.term,
                        "raft: stepped down to follower since quorum is not active"
                    );
                    self.become_follower(self.term, NONE);
                }
                let id = self.id;
                for (&pid, pr) in self.prs.progress.iter_mut() {
                    pr.recent_active = pid == id;
                }
                return Ok(());
            }
            MessageType::MsgProp => {
                if m.entries.is_empty() {
                    return Err(Error::MalformedMessage("MsgProp without entries".into()));
                }
                if !self.prs.progress.contains_key(&self.id) {
                    // Removed from the membership: it must not lead writes any more.
                    return Err(Error::ProposalDropped);
                }
                if self.lead_transferee.is_some() {
                    debug!(
                        id = self.id,
                        "raft: proposal dropped during leader transfer"
                    );
                    return Err(Error::ProposalDropped);
                }
                let last = self.raft_log.last_index();
                for (i, e) in m.entries.iter_mut().enumerate() {
                    if is_conf_change(e) {
                        if self.pending_conf_index > self.raft_log.applied {
                            // One membership change at a time: an empty entry keeps the
                            // proposal's place in the log without changing anything.
                            info!(
                                id = self.id,
                                pending = self.pending_conf_index,
                                applied = self.raft_log.applied,
                                "raft: ignoring conf change while one is pending"
                            );
                            *e = Entry::default();
                        } else {
                            self.pending_conf_index = last + i as u64 + 1;
                        }
                    }
                }
                self.append_entry(m.entries);
                self.bcast_append();
                return Ok(());
            }
            MessageType::MsgReadIndex => {
                if m.entries.len() != 1 {
                    return Err(Error::MalformedMessage(format!(
                        "MsgReadIndex with {} entries",
                        m.entries.len()
                    )));
                }
                if self.prs.voters.voters.len() == 1 && self.prs.is_voter(self.id) {
                    // Nobody else can be leader: the commit index is current.
                    let committed = self.raft_log.committed;
                    self.respond_to_read_index(m, committed);
                } else if !self.committed_entry_in_current_term() {
                    self.pending_read_index_messages.push(m);
                } else {
                    self.send_read_index(m);
                }
                return Ok(());
            }
            _ => {}
        }

        if !self.prs.progress.contains_key(&m.from) {
            debug!(
                id = self.id,
                from = m.from,
                "raft: no progress available for peer"
            );
            return Ok(());
        }
        match ty {
            MessageType::MsgAppResp => self.handle_append_response(&m),
            MessageType::MsgHeartbeatResp => self.handle_heartbeat_response(&m),
            MessageType::MsgSnapStatus => {
                let pr = self.prs.progress.get_mut(&m.from).expect("checked above");
                if pr.state == ProgressState::Snapshot {
                    if m.reject {
                        pr.pending_snapshot = 0;
                    }
                    pr.become_probe();
                    // Wait for the follower's answer (a heartbeat response) before probing, so
                    // the next append does not race the snapshot's application.
                    pr.probe_sent = true;
                }
            }
            MessageType::MsgUnreachable => {
                let pr = self.prs.progress.get_mut(&m.from).expect("checked above");
                // Appends optimistically sent were probably lost: find out where it is.
                if pr.state == ProgressState::Replicate {
                    pr.become_probe();
                }
            }
            MessageType::MsgTransferLeader => self.handle_transfer_leader(m.from),
            _ => {}
        }
        Ok(())
    }

    // ---- follower handlers ------------------------------------------------------------------

    fn handle_append_entries(&mut self, m: Message) {
        if m.index < self.raft_log.committed {
            let mut resp = msg(MessageType::MsgAppResp, m.from);
            resp.index = self.raft_log.committed;
            self.send(resp);
            return;
        }
        let contiguous =
            m.entries.iter().enumerate().all(|(i, e)| {
                Some(e.index) == m.index.checked_add(i as u64 + 1) && e.term <= m.term
            });
        if !contiguous {
            warn!(
                id = self.id,
                from = m.from,
                "raft: dropped malformed MsgApp"
            );
            return;
        }
        match self
            .raft_log
            .maybe_append(m.index, m.log_term, m.commit, m.entries)
        {
            Ok(Some(last_new)) => {
                let mut resp = msg(MessageType::MsgAppResp, m.from);
                resp.index = last_new;
                self.send(resp);
            }
            Ok(None) => {
                // Tell the leader where our log could match: the last index at or below its
                // probe whose term is not newer than its probe's term.
                let hint = m.index.min(self.raft_log.last_index());
                let (hint_index, hint_term) = self.raft_log.find_conflict_by_term(hint, m.log_term);
                let mut resp = msg(MessageType::MsgAppResp, m.from);
                resp.index = m.index;
                resp.reject = true;
                resp.reject_hint = hint_index;
                resp.log_term = hint_term;
                self.send(resp);
            }
            Err(c) => {
                tracing::error!(
                    id = self.id,
                    from = m.from,
                    index = c.index,
                    committed = c.committed,
                    "raft: dropped MsgApp that conflicts with committed entries"
                );
            }
        }
    }

    fn handle_heartbeat(&mut self, m: Message) {
        // The leader sends at most what it knows we match; never trust it past our log.
        let commit = m.commit.min(self.raft_log.last_index());
        self.raft_log.commit_to(commit);
        let mut resp = msg(MessageType::MsgHeartbeatResp, m.from);
        resp.context = m.context;
        self.send(resp);
    }

    fn handle_snapshot(&mut self, m: Message) {
        let Some(snap) = m.snapshot else {
            warn!(
                id = self.id,
                from = m.from,
                "raft: dropped MsgSnap without a snapshot"
            );
            return;
        };
        let mut resp = msg(MessageType::MsgAppResp, m.from);
        if self.restore(snap) {
            resp.index = self.raft_log.last_index();
        } else {
            resp.index = self.raft_log.committed;
        }
        self.send(resp);
    }

    /// Installs a snapshot from the leader if it is news; returns whether it was installed.
    pub fn restore(&mut self, snap: Snapshot) -> bool {
        let (index, term) = snapshot_index_term(&snap);
        if index <= self.raft_log.committed {
            return false;
        }
        if self.state != StateRole::Follower {
            // Only a leader of our term sends snapshots, and it makes us its follower first.
            warn!(
                id = self.id,
                "raft: non-follower attempted to restore snapshot"
            );
            self.become_follower(self.term.saturating_add(1), NONE);
            return false;
        }
        let cs = snap
            .metadata
            .as_ref()
            .and_then(|m| m.conf_state.clone())
            .unwrap_or_default();
        if !cs.voters.contains(&self.id) && !cs.learners.contains(&self.id) {
            warn!(
                id = self.id,
                index, "raft: ignoring snapshot that does not include us"
            );
            return false;
        }
        if self.raft_log.match_term(index, term) {
            // We already have the log up to the snapshot: just catch up the commit index.
            self.raft_log.commit_to(index);
            return false;
        }
        info!(id = self.id, index, term, "raft: restoring snapshot");
        self.raft_log.restore(snap);
        let next = self.raft_log.last_index() + 1;
        self.prs.reset_to(&cs, next);
        let id = self.id;
        if let Some(pr) = self.prs.progress.get_mut(&id) {
            pr.matched = next - 1;
        }
        self.is_learner = self.prs.learners.contains(&id);
        true
    }

    // ---- leader handlers --------------------------------------------------------------------

    fn handle_append_response(&mut self, m: &Message) {
        let last_index = self.raft_log.last_index();
        if !m.reject && m.index > last_index {
            warn!(
                id = self.id,
                from = m.from,
                index = m.index,
                "raft: dropped MsgAppResp past our log"
            );
            return;
        }
        let first_index = self.raft_log.first_index();
        let next_probe = if m.reject && m.log_term > 0 {
            self.raft_log
                .find_conflict_by_term(m.reject_hint, m.log_term)
                .0
        } else {
            m.reject_hint
        };
        let pr = self
            .prs
            .progress
            .get_mut(&m.from)
            .expect("checked by caller");
        pr.recent_active = true;
        if m.reject {
            if pr.maybe_decr_to(m.index, next_probe) {
                if pr.state == ProgressState::Replicate {
                    pr.become_probe();
                }
                self.send_append(m.from);
            }
            return;
        }
        let old_paused = pr.is_paused();
        if !pr.maybe_update(m.index) {
            return;
        }
        match pr.state {
            ProgressState::Probe => pr.become_replicate(),
            ProgressState::Snapshot if pr.matched + 1 >= first_index => {
                // The follower caught up past the compaction point: the log can serve it.
                pr.become_probe();
                pr.become_replicate();
            }
            ProgressState::Replicate => pr.ins.free_le(m.index),
            ProgressState::Snapshot => {}
        }
        if self.maybe_commit() {
            self.release_pending_read_index_messages();
            self.bcast_append();
        } else if old_paused {
            self.send_append(m.from);
        }
        // Fill the window while there is something to send.
        while self.maybe_send_append(m.from, false) {}
        let matched = self.prs.progress.get(&m.from).map_or(0, |p| p.matched);
        if self.lead_transferee == Some(m.from) && matched == self.raft_log.last_index() {
            info!(
                id = self.id,
                to = m.from,
                "raft: transferee caught up, sending MsgTimeoutNow"
            );
            self.send(msg(MessageType::MsgTimeoutNow, m.from));
        }
    }

    fn handle_heartbeat_response(&mut self, m: &Message) {
        let last_index = self.raft_log.last_index();
        let pr = self
            .prs
            .progress
            .get_mut(&m.from)
            .expect("checked by caller");
        pr.recent_active = true;
        pr.probe_sent = false;
        if pr.state == ProgressState::Replicate && pr.ins.full() {
            pr.ins.free_first_one();
        }
        if pr.matched < last_index {
            self.send_append(m.from);
        }
        let Some(ctx) = m.context.as_deref() else {
            return;
        };
        let Some(acks) = self.read_only.recv_ack(m.from, ctx) else {
            return;
        };
        let won = self.prs.voters.vote_result(|id| Some(acks.contains(&id))) == VoteResult::Won;
        if !won {
            return;
        }
        for rs in self.read_only.advance(ctx) {
            self.respond_to_read_index(rs.req, rs.index);
        }
    }

    fn handle_transfer_leader(&mut self, transferee: u64) {
        let Some(pr) = self.prs.progress.get(&transferee) else {
            return;
        };
        if pr.is_learner {
            debug!(
                id = self.id,
                transferee, "raft: ignored transfer to a learner"
            );
            return;
        }
        let matched = pr.matched;
        if let Some(current) = self.lead_transferee {
            if current == transferee {
                return;
            }
            self.abort_leader_transfer();
        }
        if transferee == self.id {
            return;
        }
        // The transfer must finish within one election timeout or it is abandoned.
        self.election_elapsed = 0;
        self.lead_transferee = Some(transferee);
        info!(
            id = self.id,
            term = self.term,
            transferee,
            "raft: starts to transfer leadership"
        );
        if matched == self.raft_log.last_index() {
            self.send(msg(MessageType::MsgTimeoutNow, transferee));
        } else {
            self.send_append(transferee);
        }
    }

    pub fn abort_leader_transfer(&mut self) {
        self.lead_transferee = None;
    }

    fn committed_entry_in_current_term(&self) -> bool {
        self.raft_log.term(self.raft_log.committed) == Ok(self.term)
    }

    fn release_pending_read_index_messages(&mut self) {
        if self.pending_read_index_messages.is_empty() || !self.committed_entry_in_current_term() {
            return;
        }
        for m in std::mem::take(&mut self.pending_read_index_messages) {
            self.send_read_index(m);
        }
    }

    fn send_read_index(&mut self, m: Message) {
        let ctx = m.entries[0].data().to_vec();
        self.read_only
            .add_request(self.raft_log.committed, ctx.clone(), m);
        let id = self.id;
        self.read_only.recv_ack(id, &ctx);
        self.bcast_heartbeat_with_ctx(Some(ctx));
    }

    /// A confirmed read goes to the local caller as a ReadState, or back to the follower
    /// that forwarded it.
    fn respond_to_read_index(&mut self, mut req: Message, index: u64) {
        if req.from == NONE || req.from == self.id {
            let ctx = req.entries.swap_remove(0).data.unwrap_or_default();
            self.read_states.push(ReadState {
                index,
                request_ctx: ctx,
            });
            return;
        }
        let mut resp = msg(MessageType::MsgReadIndexResp, req.from);
        resp.index = index;
        resp.entries = req.entries;
        self.send(resp);
    }

    fn maybe_commit(&mut self) -> bool {
        let mci = self.prs.committed();
        self.raft_log.maybe_commit(mci, self.term)
    }

    /// Appends entries of this term to the leader's own log.
    fn append_entry(&mut self, mut ents: Vec<Entry>) {
        let last = self.raft_log.last_index();
        for (i, e) in ents.iter_mut().enumerate() {
            e.term = self.term;
            e.index = last + 1 + i as u64;
        }
        let last = self.raft_log.append(ents);
        let id = self.id;
        if let Some(pr) = self.prs.progress.get_mut(&id) {
            pr.maybe_update(last);
        }
        if self.maybe_commit() {
            self.release_pending_read_index_messages();
        }
    }

    fn peers(&self) -> Vec<u64> {
        self.prs
            .progress
            .keys()
            .copied()
            .filter(|&id| id != self.id)
            .collect()
    }

    pub fn bcast_append(&mut self) {
        for id in self.peers() {
            self.send_append(id);
        }
    }

    fn send_append(&mut self, to: u64) {
        self.maybe_send_append(to, true);
    }

    /// Sends the entries `to` lacks (or a snapshot if they are compacted away), unless flow
    /// control pauses it; returns whether a message went out.
    fn maybe_send_append(&mut self, to: u64, send_if_empty: bool) -> bool {
        let Some(pr) = self.prs.progress.get(&to) else {
            return false;
        };
        if pr.is_paused() {
            return false;
        }
        let next = pr.next_idx;
        let term = self.raft_log.term(next - 1);
        let ents = self.raft_log.entries(next, self.max_msg_size);
        if let (Ok(log_term), Ok(ents)) = (term, ents) {
            if ents.is_empty() && !send_if_empty {
                return false;
            }
            let pr = self.prs.progress.get_mut(&to).expect("checked above");
            match pr.state {
                ProgressState::Replicate => {
                    if let Some(last) = ents.last().map(|e| e.index) {
                        pr.optimistic_update(last);
                        pr.ins.add(last);
                    }
                }
                ProgressState::Probe => pr.probe_sent = true,
                ProgressState::Snapshot => unreachable!("paused above"),
            }
            let mut m = msg(MessageType::MsgApp, to);
            m.index = next - 1;
            m.log_term = log_term;
            m.entries = ents;
            m.commit = self.raft_log.committed;
            self.send(m);
            return true;
        }
        // The entries are compacted: only a snapshot can bring this peer up to date.
        if !pr.recent_active {
            debug!(
                id = self.id,
                to, "raft: not sending snapshot to an inactive peer"
            );
            return false;
        }
        let snap = match self.raft_log.snapshot() {
            Ok(s) => s,
            Err(StorageError::SnapshotTemporarilyUnavailable) => {
                debug!(id = self.id, to, "raft: snapshot temporarily unavailable");
                return false;
            }
            Err(e) => {
                warn!(id = self.id, to, error = %e, "raft: failed to get snapshot");
                return false;
            }
        };
        let (index, _) = snapshot_index_term(&snap);
        if index == 0 {
            warn!(id = self.id, to, "raft: need a non-empty snapshot to send");
            return false;
        }
        self.prs
            .progress
            .get_mut(&to)
            .expect("checked above")
            .become_snapshot(index);
        let mut m = msg(MessageType::MsgSnap, to);
        m.snapshot = Some(snap);
        self.send(m);
        true
    }

    fn bcast_heartbeat(&mut self) {
        let ctx = self.read_only.last_pending_request_ctx();
        self.bcast_heartbeat_with_ctx(ctx);
    }

    fn bcast_heartbeat_with_ctx(&mut self, ctx: Option<Vec<u8>>) {
        for id in self.peers() {
            let matched = self.prs.progress.get(&id).map_or(0, |p| p.matched);
            let mut m = msg(MessageType::MsgHeartbeat, id);
            // Never tell a follower to commit past what it is known to hold.
            m.commit = matched.min(self.raft_log.committed);
            m.context = ctx.clone();
            self.send(m);
        }
    }

    // ---- membership -------------------------------------------------------------------------

    /// Applies a committed conf change to the membership and returns the new one.
    /// Changes that make no sense (demoting a voter, an unknown type) leave it unchanged.
    pub fn apply_conf_change(&mut self, cc: &ConfChange) -> ConfState {
        if cc.node_id == NONE {
            // etcd proposes empty conf changes to force a commit; nothing to do.
            return self.prs.conf_state();
        }
        match ConfChangeType::try_from(cc.r#type) {
            Ok(ConfChangeType::ConfChangeAddNode) => self.add_node(cc.node_id, false),
            Ok(ConfChangeType::ConfChangeAddLearnerNode) => self.add_node(cc.node_id, true),
            Ok(ConfChangeType::ConfChangeRemoveNode) => self.remove_node(cc.node_id),
            Ok(ConfChangeType::ConfChangeUpdateNode) => {}
            Err(_) => warn!(
                id = self.id,
                ty = cc.r#type,
                "raft: ignored unknown conf change type"
            ),
        }
        self.prs.conf_state()
    }

    fn add_node(&mut self, id: u64, learner: bool) {
        let max_inflight = self.prs.max_inflight;
        if let Some(pr) = self.prs.progress.get_mut(&id) {
            if learner && !pr.is_learner {
                warn!(
                    id = self.id,
                    node = id,
                    "raft: ignored demotion of a voter to learner"
                );
                return;
            }
            if learner == pr.is_learner {
                return;
            }
            pr.is_learner = false;
            self.prs.learners.remove(&id);
            self.prs.voters.voters.insert(id);
        } else {
            let mut pr = Progress::new(self.raft_log.last_index() + 1, max_inflight);
            pr.is_learner = learner;
            // A new peer gets the benefit of the doubt for one check-quorum round.
            pr.recent_active = true;
            self.prs.progress.insert(id, pr);
            if learner {
                self.prs.learners.insert(id);
            } else {
                self.prs.voters.voters.insert(id);
            }
        }
        if id == self.id {
            self.is_learner = learner;
        }
    }

    fn remove_node(&mut self, id: u64) {
        self.prs.voters.voters.remove(&id);
        self.prs.learners.remove(&id);
        self.prs.progress.remove(&id);
        if id == self.id {
            self.is_learner = false;
            if self.state == StateRole::Leader {
                info!(
                    id = self.id,
                    term = self.term,
                    "raft: removed leader steps down"
                );
                self.become_follower(self.term, NONE);
            }
            return;
        }
        if self.state != StateRole::Leader || self.prs.voters.voters.is_empty() {
            return;
        }
        if self.lead_transferee == Some(id) {
            self.abort_leader_transfer();
        }
        // A smaller quorum may commit what was waiting for the removed node.
        if self.maybe_commit() {
            self.release_pending_read_index_messages();
            self.bcast_append();
        }
    }
}
