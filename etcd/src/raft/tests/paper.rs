//! Each test checks a sentence or two of the Raft paper (§5, "In Search of an Understandable
//! Consensus Algorithm"), quoted above it, in three parts: set up, act, check. Pre-vote and
//! check-quorum are off here: they are thesis extensions, tested in `thesis.rs`.

use proto::raftpb::{Entry, HardState, Message, MessageType};

use crate::raft::config::{Config, NONE};
use crate::raft::raft::{Raft, StateRole};
use crate::raft::storage::MemStorage;

pub fn config(id: u64, election: usize, heartbeat: usize) -> Config {
    Config {
        election_tick: election,
        heartbeat_tick: heartbeat,
        pre_vote: false,
        check_quorum: false,
        ..Config::new(id)
    }
}

pub fn ent(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        ..Entry::default()
    }
}

/// A node of a cluster of `peers` whose durable log holds entries with `terms` (index 1..)
/// and whose persisted term is `term`.
pub fn raft_with_log(id: u64, peers: &[u64], terms: &[u64], term: u64) -> Raft<MemStorage> {
    let mut s = MemStorage::new_with_conf_state(peers, &[]);
    let ents: Vec<Entry> = terms
        .iter()
        .enumerate()
        .map(|(i, &t)| ent(i as u64 + 1, t))
        .collect();
    s.append(&ents);
    s.set_hard_state(HardState {
        term,
        vote: NONE,
        commit: 0,
    });
    Raft::new(&config(id, 10, 1), s).unwrap()
}

pub fn raft(id: u64, peers: &[u64]) -> Raft<MemStorage> {
    raft_with_log(id, peers, &[], 0)
}

pub fn take(r: &mut Raft<MemStorage>) -> Vec<Message> {
    let mut msgs = std::mem::take(&mut r.msgs);
    msgs.sort_by_key(|m| m.to);
    msgs
}

pub fn m(ty: MessageType, from: u64, to: u64, term: u64) -> Message {
    Message {
        r#type: ty as i32,
        from,
        to,
        term,
        ..Message::default()
    }
}

fn types(msgs: &[Message]) -> Vec<(MessageType, u64)> {
    msgs.iter().map(|m| (m.r#type(), m.to)).collect()
}

/// Makes `r` leader of term `r.term + 1` by an election it wins, leaving its queue empty.
pub fn elect(r: &mut Raft<MemStorage>) {
    r.become_candidate();
    r.become_leader();
    take(r);
}

// "Current terms are exchanged whenever servers communicate; if one server's current term is
// smaller than the other's, then it updates its current term to the larger value. If a
// candidate or leader discovers that its term is out of date, it immediately reverts to
// follower state." (§5.1)
#[test]
fn every_role_updates_term_from_a_newer_message() {
    for role in [StateRole::Follower, StateRole::Candidate, StateRole::Leader] {
        let mut r = raft(1, &[1, 2, 3]);
        match role {
            StateRole::Follower => r.become_follower(1, 2),
            StateRole::Candidate => r.become_candidate(),
            _ => {
                r.become_candidate();
                r.become_leader();
            }
        }
        r.step(m(MessageType::MsgApp, 2, 1, 2)).unwrap();
        assert_eq!(r.term, 2, "{role:?}");
        assert_eq!(r.state, StateRole::Follower, "{role:?}");
    }
}

// "If a server receives a request with a stale term number, it rejects the request." (§5.1)
#[test]
fn stale_term_messages_are_rejected() {
    let mut r = raft_with_log(1, &[1, 2, 3], &[1], 2);
    let mut app = m(MessageType::MsgApp, 2, 1, 1);
    app.index = 1;
    app.log_term = 1;
    app.entries = vec![ent(2, 1)];
    r.step(app).unwrap();
    assert_eq!(
        r.raft_log.last_index(),
        1,
        "the stale append must not be applied"
    );
    assert_eq!(r.term, 2);
    assert!(take(&mut r).is_empty());
}

// "When servers start up, they begin as followers." (§5.2)
#[test]
fn servers_start_as_followers() {
    let r = raft(1, &[1, 2, 3]);
    assert_eq!(r.state, StateRole::Follower);
}

// "Leaders send periodic heartbeats (AppendEntries RPCs that carry no log entries) to all
// followers in order to maintain their authority." (§5.2)
#[test]
fn leader_broadcasts_heartbeats() {
    let mut r = Raft::new(
        &config(1, 10, 1),
        MemStorage::new_with_conf_state(&[1, 2, 3], &[]),
    )
    .unwrap();
    elect(&mut r);
    r.tick();
    let msgs = take(&mut r);
    assert_eq!(
        types(&msgs),
        vec![
            (MessageType::MsgHeartbeat, 2),
            (MessageType::MsgHeartbeat, 3)
        ]
    );
    assert!(msgs.iter().all(|m| m.entries.is_empty() && m.term == 1));
}

// "If a follower receives no communication over a period of time called the election timeout,
// then it ... begins an election. To begin an election, a follower increments its current term
// and transitions to candidate state. It then votes for itself and issues RequestVote RPCs in
// parallel to each of the other servers." (§5.2) The same holds for a candidate whose
// election timed out.
#[test]
fn timeout_starts_an_election() {
    for start_as_candidate in [false, true] {
        let mut r = raft(1, &[1, 2, 3]);
        if start_as_candidate {
            r.become_candidate();
            take(&mut r);
        }
        let term0 = r.term;
        for _ in 0..2 * 10 {
            r.tick();
        }
        assert_eq!(r.state, StateRole::Candidate);
        assert_eq!(r.term, term0 + 1);
        assert_eq!(r.vote, 1);
        let msgs = take(&mut r);
        assert_eq!(
            types(&msgs),
            vec![(MessageType::MsgVote, 2), (MessageType::MsgVote, 3)]
        );
    }
}

// "A candidate wins an election if it receives votes from a majority of the servers in the
// full cluster for the same term." ... "if many followers become candidates at the same time,
// votes could be split so that no candidate obtains a majority." (§5.2)
#[test]
fn election_outcome_in_one_round() {
    // (cluster size, granting voters other than the candidate, rejecting voters, outcome)
    let cases = [
        (1, vec![], vec![], StateRole::Leader),
        (3, vec![2, 3], vec![], StateRole::Leader),
        (3, vec![2], vec![], StateRole::Leader),
        (5, vec![2, 3, 4, 5], vec![], StateRole::Leader),
        (5, vec![2, 3], vec![], StateRole::Leader),
        // not yet decided
        (3, vec![], vec![], StateRole::Candidate),
        (5, vec![2], vec![], StateRole::Candidate),
        (5, vec![2], vec![3], StateRole::Candidate),
        // lost
        (3, vec![], vec![2, 3], StateRole::Follower),
        (5, vec![2], vec![3, 4, 5], StateRole::Follower),
    ];
    for (size, yes, no, want) in cases {
        let peers: Vec<u64> = (1..=size).collect();
        let mut r = raft(1, &peers);
        r.step(m(MessageType::MsgHup, 1, 1, 0)).unwrap();
        for (id, reject) in yes
            .iter()
            .map(|&i| (i, false))
            .chain(no.iter().map(|&i| (i, true)))
        {
            let mut resp = m(MessageType::MsgVoteResp, id, 1, r.term);
            resp.reject = reject;
            r.step(resp).unwrap();
        }
        assert_eq!(r.state, want, "size {size} yes {yes:?} no {no:?}");
        assert_eq!(r.term, 1);
    }
}

// "Each server will vote for at most one candidate in a given term, on a first-come-first-
// served basis." (§5.2)
#[test]
fn follower_votes_once_per_term() {
    // (already voted for, candidate, rejected)
    let cases = [
        (NONE, 2, false),
        (NONE, 3, false),
        (2, 2, false),
        (3, 3, false),
        (2, 3, true),
        (3, 2, true),
    ];
    for (vote, cand, reject) in cases {
        let mut r = raft(1, &[1, 2, 3]);
        r.term = 1;
        r.vote = vote;
        r.step(m(MessageType::MsgVote, cand, 1, 1)).unwrap();
        let msgs = take(&mut r);
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].r#type(), MessageType::MsgVoteResp);
        assert_eq!(msgs[0].reject, reject, "vote {vote} candidate {cand}");
    }
}

// "While waiting for votes, a candidate may receive an AppendEntries RPC from another server
// claiming to be leader. If the leader's term ... is at least as large as the candidate's
// current term, then the candidate recognizes the leader as legitimate and returns to
// follower state." (§5.2)
#[test]
fn candidate_falls_back_to_a_legitimate_leader() {
    for term in [1, 2] {
        let mut r = raft(1, &[1, 2, 3]);
        r.step(m(MessageType::MsgHup, 1, 1, 0)).unwrap();
        assert_eq!(r.state, StateRole::Candidate);
        r.step(m(MessageType::MsgApp, 2, 1, term)).unwrap();
        assert_eq!(r.state, StateRole::Follower);
        assert_eq!((r.term, r.leader_id), (term, 2));
    }
}

// "Raft uses randomized election timeouts ... chosen randomly from a fixed interval."
// (§5.2) Ours is [election, 2 × election), redrawn on every term change.
#[test]
fn election_timeouts_are_randomized_within_bounds() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let mut r = Raft::new(
            &Config {
                seed,
                ..config(1, 10, 1)
            },
            MemStorage::new_with_conf_state(&[1, 2, 3], &[]),
        )
        .unwrap();
        for term in 1..5 {
            r.become_follower(term, NONE);
            let t = r.randomized_election_timeout();
            assert!((10..20).contains(&t), "timeout {t}");
            seen.insert(t);
        }
    }
    assert_eq!(
        seen.len(),
        10,
        "every value in the range is drawn: {seen:?}"
    );
}

// "Once a leader has been elected, it begins servicing client requests. ... The leader appends
// the command to its log as a new entry, then issues AppendEntries RPCs in parallel to each of
// the other servers to replicate the entry." (§5.3)
#[test]
fn leader_starts_replication() {
    let mut r = raft(1, &[1, 2, 3]);
    elect(&mut r);
    for p in [2, 3] {
        r.step(append_resp(p, 1, 1)).unwrap();
    }
    take(&mut r);
    let li = r.raft_log.last_index();
    let mut prop = m(MessageType::MsgProp, 1, 1, 0);
    prop.entries = vec![Entry {
        data: Some(b"some data".to_vec()),
        ..Entry::default()
    }];
    r.step(prop).unwrap();
    assert_eq!(r.raft_log.last_index(), li + 1);
    let msgs = take(&mut r);
    assert_eq!(
        types(&msgs),
        vec![(MessageType::MsgApp, 2), (MessageType::MsgApp, 3)]
    );
    for msg in &msgs {
        assert_eq!((msg.index, msg.log_term, msg.commit), (li, 1, li));
        assert_eq!(msg.entries.len(), 1);
        assert_eq!(msg.entries[0].data(), b"some data");
        assert_eq!((msg.entries[0].index, msg.entries[0].term), (li + 1, 1));
    }
}

fn append_resp(from: u64, term: u64, index: u64) -> Message {
    let mut resp = m(MessageType::MsgAppResp, from, 1, term);
    resp.index = index;
    resp
}

// "A log entry is committed once the leader that created the entry has replicated it on a
// majority of the servers ... The leader keeps track of the highest index it knows to be
// committed, and it includes that index in future AppendEntries RPCs." (§5.3)
#[test]
fn leader_commits_when_a_majority_has_the_entry() {
    // (cluster size, followers that acknowledge, committed?)
    let cases = [
        (1, vec![], true),
        (3, vec![], false),
        (3, vec![2], true),
        (3, vec![2, 3], true),
        (5, vec![2], false),
        (5, vec![2, 3], true),
        (5, vec![2, 3, 4, 5], true),
    ];
    for (size, acks, committed) in cases {
        let peers: Vec<u64> = (1..=size).collect();
        let mut r = raft(1, &peers);
        elect(&mut r);
        // Everyone has the leader's empty entry.
        for &p in peers.iter().skip(1) {
            r.step(append_resp(p, 1, 1)).unwrap();
        }
        take(&mut r);
        let mut prop = m(MessageType::MsgProp, 1, 1, 0);
        prop.entries = vec![Entry::default()];
        r.step(prop).unwrap();
        take(&mut r);
        for &a in &acks {
            r.step(append_resp(a, 1, 2)).unwrap();
        }
        assert_eq!(
            r.raft_log.committed == 2,
            committed,
            "size {size} acks {acks:?}"
        );
        if committed && size > 1 {
            // The new commit index goes out to followers.
            let msgs = take(&mut r);
            assert!(
                msgs.iter()
                    .any(|m| m.r#type() == MessageType::MsgApp && m.commit == 2)
            );
        }
    }
}

// "Raft never commits log entries from previous terms by counting replicas. Only log entries
// from the leader's current term are committed by counting replicas; once an entry from the
// current term has been committed, all prior entries are committed indirectly." (§5.4.2)
#[test]
fn leader_commits_old_terms_only_through_its_own_entry() {
    // The leader inherits entries 1..=2 of term 1 and is elected in term 3.
    let mut r = raft_with_log(1, &[1, 2, 3], &[1, 1], 2);
    elect(&mut r);
    assert_eq!(r.term, 3);
    // A majority has the old entries but not the new empty entry: nothing commits.
    r.step(append_resp(2, 3, 2)).unwrap();
    assert_eq!(r.raft_log.committed, 0);
    // Once the current-term entry is on a majority, everything before it commits too.
    r.step(append_resp(2, 3, 3)).unwrap();
    assert_eq!(r.raft_log.committed, 3);
}

// "Once a follower learns that a log entry is committed, it applies the entry to its local
// state machine (in log order)." (§5.3)
#[test]
fn follower_commits_what_the_leader_says_is_committed() {
    let mut r = raft(1, &[1, 2, 3]);
    r.become_follower(1, 2);
    let mut app = m(MessageType::MsgApp, 2, 1, 1);
    app.entries = vec![ent(1, 1), ent(2, 1)];
    app.commit = 1;
    r.step(app).unwrap();
    assert_eq!(r.raft_log.committed, 1);
    assert_eq!(r.raft_log.next_committed_entries(u64::MAX), vec![ent(1, 1)]);
}

// "When sending an AppendEntries RPC, the leader includes the index and term of the entry in
// its log that immediately precedes the new entries. If the follower does not find an entry in
// its log with the same index and term, then it refuses the new entries." (§5.3)
#[test]
fn follower_checks_the_preceding_entry() {
    // follower log: terms [1, 2] at indexes 1, 2
    // (prev term, prev index, rejected, reject hint, hint term)
    let cases = [
        (0, 0, false, 0, 0),
        (1, 1, false, 0, 0),
        (2, 2, false, 0, 0),
        // wrong term at an existing index
        (1, 2, true, 1, 1),
        // index past our log: the hint points at our last entry
        (3, 3, true, 2, 2),
    ];
    for (lt, idx, rejected, hint, hint_term) in cases {
        let mut r = raft_with_log(1, &[1, 2, 3], &[1, 2], 0);
        r.raft_log.commit_to(1);
        r.become_follower(2, 2);
        let mut app = m(MessageType::MsgApp, 2, 1, 2);
        app.log_term = lt;
        app.index = idx;
        r.step(app).unwrap();
        let msgs = take(&mut r);
        assert_eq!(msgs.len(), 1);
        let resp = &msgs[0];
        assert_eq!(resp.r#type(), MessageType::MsgAppResp);
        assert_eq!(resp.reject, rejected, "({lt},{idx})");
        if rejected {
            assert_eq!(
                (resp.index, resp.reject_hint, resp.log_term),
                (idx, hint, hint_term)
            );
        }
    }
}

// "If an existing entry conflicts with a new one (same index but different terms), delete the
// existing entry and all that follow it; append any new entries not already in the log."
// (§5.3)
#[test]
fn follower_replaces_conflicting_entries() {
    // follower log: terms [1, 2]; (prev index, prev term, new entries, resulting terms)
    let cases: Vec<(u64, u64, Vec<Entry>, Vec<u64>)> = vec![
        (2, 2, vec![ent(3, 3)], vec![1, 2, 3]),
        (1, 1, vec![ent(2, 3), ent(3, 4)], vec![1, 3, 4]),
        (0, 0, vec![ent(1, 1)], vec![1, 2]),
        (0, 0, vec![ent(1, 3)], vec![3]),
    ];
    for (idx, lt, ents, want) in cases {
        let mut r = raft_with_log(1, &[1, 2, 3], &[1, 2], 0);
        r.become_follower(2, 2);
        let mut app = m(MessageType::MsgApp, 2, 1, 4);
        app.index = idx;
        app.log_term = lt;
        app.entries = ents;
        r.step(app).unwrap();
        let got: Vec<u64> = r
            .raft_log
            .slice(1, r.raft_log.last_index() + 1, u64::MAX)
            .unwrap()
            .iter()
            .map(|e| e.term)
            .collect();
        assert_eq!(got, want, "prev ({idx},{lt})");
    }
}

/// Delivers messages between a set of in-memory rafts until none are left.
fn pump(nodes: &mut [Raft<MemStorage>]) {
    loop {
        let mut msgs = Vec::new();
        for n in nodes.iter_mut() {
            msgs.extend(take(n));
        }
        if msgs.is_empty() {
            return;
        }
        for msg in msgs {
            if let Some(n) = nodes.iter_mut().find(|n| n.id == msg.to) {
                n.step(msg).unwrap();
            }
        }
    }
}

fn log_terms(r: &Raft<MemStorage>) -> Vec<u64> {
    r.raft_log
        .slice(1, r.raft_log.last_index() + 1, u64::MAX)
        .unwrap()
        .iter()
        .map(|e| e.term)
        .collect()
}

// "The leader handles inconsistencies by forcing the followers' logs to duplicate its own."
// The follower logs of Figure 7 (a)–(f), each brought in line with the leader's. (§5.3)
#[test]
fn leader_forces_follower_logs_to_match_figure_7() {
    let leader_log = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6];
    let followers: [&[u64]; 6] = [
        &[1, 1, 1, 4, 4, 5, 5, 6, 6],
        &[1, 1, 1, 4],
        &[1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],
        &[1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],
        &[1, 1, 1, 4, 4, 4, 4],
        &[1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],
    ];
    for (i, f) in followers.iter().enumerate() {
        let mut lead = raft_with_log(1, &[1, 2, 3], &leader_log, 7);
        let mut fol = raft_with_log(2, &[1, 2, 3], f, 7);
        // Node 3 votes for the leader so it wins term 8.
        let voter = raft_with_log(3, &[1, 2, 3], &leader_log, 7);
        lead.become_candidate();
        lead.become_leader();
        lead.bcast_append();
        let mut nodes = [lead, fol, voter];
        pump(&mut nodes);
        [_, fol, _] = nodes;
        let mut want = leader_log.to_vec();
        want.push(8);
        assert_eq!(
            log_terms(&fol),
            want,
            "figure 7 ({})",
            (b'a' + i as u8) as char
        );
    }
}

// "The RequestVote RPC ... includes information about the candidate's log." (§5.4.1)
#[test]
fn vote_requests_carry_the_last_log_position() {
    let mut r = raft_with_log(1, &[1, 2, 3], &[1, 2], 2);
    r.step(m(MessageType::MsgHup, 1, 1, 0)).unwrap();
    for msg in take(&mut r) {
        assert_eq!(msg.r#type(), MessageType::MsgVote);
        assert_eq!((msg.index, msg.log_term, msg.term), (2, 2, 3));
    }
}

// "The voter denies its vote if its own log is more up-to-date than that of the candidate. If
// the logs have last entries with different terms, then the log with the later term is more
// up-to-date. If the logs end with the same term, then whichever log is longer is more
// up-to-date." (§5.4.1)
#[test]
fn voter_applies_the_election_restriction() {
    // voter log terms, candidate (last index, last term), rejected
    let cases: Vec<(Vec<u64>, u64, u64, bool)> = vec![
        // same last term
        (vec![1], 1, 1, false),
        (vec![1], 2, 1, false),
        (vec![1, 1], 1, 1, true),
        // candidate has a later last term
        (vec![1], 1, 2, false),
        (vec![1, 1], 1, 2, false),
        // voter has a later last term
        (vec![2], 1, 1, true),
        (vec![2], 2, 1, true),
        (vec![2, 1], 1, 1, true),
    ];
    for (log, idx, lt, reject) in cases {
        let mut r = raft_with_log(1, &[1, 2], &log, 2);
        let mut vote = m(MessageType::MsgVote, 2, 1, 3);
        vote.index = idx;
        vote.log_term = lt;
        r.step(vote).unwrap();
        let msgs = take(&mut r);
        assert_eq!(msgs.len(), 1);
        assert_eq!(
            msgs[0].reject, reject,
            "voter {log:?} candidate ({idx},{lt})"
        );
    }
}

// Election Safety (§5.2, Figure 3): "at most one leader can be elected in a given term."
// Two candidates of the same term split the three votes: each votes for itself, and the
// third voter grants only the first request it sees.
#[test]
fn two_candidates_cannot_both_win_a_term() {
    for first in [1u64, 2] {
        let mut nodes: Vec<Raft<MemStorage>> = (1..=3).map(|id| raft(id, &[1, 2, 3])).collect();
        for c in [0usize, 1] {
            let id = c as u64 + 1;
            nodes[c].step(m(MessageType::MsgHup, id, id, 0)).ok();
        }
        // Deliver the requests to node 3 in the chosen order, then all answers.
        let mut requests: Vec<Message> = Vec::new();
        for n in nodes.iter_mut().take(2) {
            requests.extend(take(n));
        }
        requests.sort_by_key(|m| (m.from != first, m.to));
        for msg in requests {
            let to = msg.to as usize - 1;
            nodes[to].step(msg).unwrap();
        }
        let mut answers = Vec::new();
        for n in nodes.iter_mut() {
            answers.extend(take(n));
        }
        for msg in answers {
            let to = msg.to as usize - 1;
            nodes[to].step(msg).unwrap();
        }
        let leaders: Vec<(u64, u64)> = nodes
            .iter()
            .filter(|n| n.state == StateRole::Leader)
            .map(|n| (n.id, n.term))
            .collect();
        assert_eq!(leaders, vec![(first, 1)]);
    }
}
