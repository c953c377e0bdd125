//! Behaviours from Ongaro's thesis beyond the paper — pre-vote, check-quorum, learners,
//! leadership transfer, ReadIndex, snapshots, membership changes — run on an in-memory cluster.

use prost::Message as _;
use proto::raftpb::{ConfChange, ConfChangeType, Entry, Message, MessageType};

use super::network::Network;
use super::paper::m;
use crate::raft::config::NONE;
use crate::raft::{Error, ProgressState, SnapshotStatus, StateRole};

fn cc(ty: ConfChangeType, node: u64) -> ConfChange {
    ConfChange {
        r#type: ty as i32,
        node_id: node,
        ..ConfChange::default()
    }
}

fn leader_of(net: &Network) -> Option<u64> {
    net.nodes
        .iter()
        .find(|(_, n)| n.role() == StateRole::Leader)
        .map(|(&id, _)| id)
}

// Pre-vote (§9.6): "a candidate would first ask other servers whether its log was
// up-to-date enough to get their vote. Only if the candidate believed it could get votes from
// a majority of the cluster would it increment its term and start a normal election."
#[test]
fn pre_vote_keeps_a_partitioned_node_from_raising_its_term() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    assert_eq!(net.role(1), StateRole::Leader);
    let term = net.term(1);
    net.isolate(3);
    // Node 3 times out again and again, but can never win a pre-vote.
    net.tick(3, 100);
    assert_eq!(net.term(3), term, "pre-vote must not raise the term");
    assert_eq!(net.role(3), StateRole::PreCandidate);
    // Once healed it rejoins without deposing the leader.
    net.recover();
    net.tick_all(5);
    assert_eq!(net.role(1), StateRole::Leader);
    assert_eq!(net.term(1), term);
    assert_eq!(net.node(3).leader_id(), 1);
}

#[test]
fn without_pre_vote_a_rejoining_node_disrupts_the_leader() {
    let mut net = Network::with_config(&[1, 2, 3], |c| {
        c.pre_vote = false;
        c.check_quorum = false;
    });
    net.campaign(1);
    net.isolate(3);
    net.tick(3, 40);
    assert!(net.term(3) > net.term(1));
    net.recover();
    // Its higher term forces the leader to step down: the problem pre-vote solves.
    net.tick(3, 20);
    assert!(net.term(1) > 1);
}

// Check-quorum (§6.2): "a leader steps down if an election timeout elapses without a
// successful round of heartbeats to a majority of its cluster".
#[test]
fn check_quorum_leader_steps_down_without_a_quorum() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.isolate(1);
    net.tick(1, 21);
    assert_eq!(net.role(1), StateRole::Follower);
}

#[test]
fn check_quorum_leader_keeps_leading_with_a_quorum() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.isolate(3);
    net.tick(1, 50);
    assert_eq!(net.role(1), StateRole::Leader);
}

// §4.2.3: "if a server receives a RequestVote request within the minimum election timeout of
// hearing from a current leader, it does not update its term or grant its vote".
#[test]
fn vote_requests_are_ignored_within_the_leader_lease() {
    let mut net = Network::with_config(&[1, 2, 3], |c| c.pre_vote = false);
    net.campaign(1);
    let term = net.term(2);
    let mut vote = m(MessageType::MsgVote, 3, 2, term + 5);
    vote.index = 100;
    vote.log_term = term + 5;
    net.node(2).step(vote).unwrap();
    assert_eq!(net.term(2), term);
    assert!(net.process_ready(2).is_empty(), "no answer in lease");
}

#[test]
fn learners_never_campaign_and_their_votes_do_not_count() {
    let mut net = Network::new(&[1, 2]);
    net.add_empty_node(3, &[1, 2]);
    net.campaign(1);
    net.node(1)
        .propose_conf_change(&cc(ConfChangeType::ConfChangeAddLearnerNode, 3))
        .unwrap();
    net.stabilize();
    // The leader learns of 3 when it applies the change, and reaches it on the next beat.
    net.tick(1, 1);
    assert!(net.node(3).raft.is_learner);
    assert_eq!(net.node(3).leader_id(), 1);
    // A learner may time out forever without campaigning.
    net.isolate(3);
    net.tick(3, 100);
    assert_eq!(net.role(3), StateRole::Follower);
    assert_eq!(net.term(3), net.term(1));
    // Node 2 cannot win with node 3's vote: 3 is not a voter.
    net.recover();
    net.isolate(1);
    let r2 = &mut net.node(2).raft;
    r2.pre_vote = false;
    r2.check_quorum = false;
    r2.become_candidate();
    r2.prs.record_vote(2, true);
    r2.prs.record_vote(3, true);
    let (yes, _, result) = r2.prs.tally_votes();
    assert_eq!(yes, 1);
    assert_eq!(result, crate::raft::quorum::VoteResult::Pending);
}

#[test]
fn a_promoted_learner_votes_and_counts() {
    let mut net = Network::new(&[1, 2]);
    net.add_empty_node(3, &[1, 2]);
    net.campaign(1);
    for ty in [
        ConfChangeType::ConfChangeAddLearnerNode,
        ConfChangeType::ConfChangeAddNode,
    ] {
        net.node(1).propose_conf_change(&cc(ty, 3)).unwrap();
        net.stabilize();
        net.tick(1, 1);
    }
    assert!(!net.node(3).raft.is_learner);
    assert_eq!(net.conf_states[&1].voters, vec![1, 2, 3]);
    assert_eq!(net.conf_states[&3].voters, vec![1, 2, 3]);
    // Now 1 and 3 make a quorum without 2.
    net.isolate(2);
    net.propose(1, b"x").unwrap();
    assert_eq!(net.applied_data(3), vec![b"x".to_vec()]);
}

// Leadership transfer (§3.10): the leader brings the target up to date, then sends it
// TimeoutNow so it campaigns at once, skipping pre-vote and the lease.
#[test]
fn leader_transfer_to_an_up_to_date_follower() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.node(1).transfer_leader(2);
    net.stabilize();
    assert_eq!(net.role(2), StateRole::Leader);
    assert_eq!(net.role(1), StateRole::Follower);
    assert_eq!(net.node(1).leader_id(), 2);
}

#[test]
fn leader_transfer_to_a_lagging_follower_catches_it_up_first() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.isolate(3);
    net.propose(1, b"a").unwrap();
    net.recover();
    // Heartbeat answers would repair 3 anyway; ask for the transfer before any.
    net.node(1).transfer_leader(3);
    net.stabilize();
    assert_eq!(net.role(3), StateRole::Leader);
    assert_eq!(net.applied_data(3), vec![b"a".to_vec()]);
}

#[test]
fn proposals_are_dropped_during_transfer_and_it_aborts_after_an_election_timeout() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.isolate(3);
    net.node(1).transfer_leader(3);
    net.stabilize();
    assert_eq!(net.node(1).status().lead_transferee, Some(3));
    assert_eq!(net.propose(1, b"x"), Err(Error::ProposalDropped));
    net.tick(1, 10);
    assert_eq!(net.node(1).status().lead_transferee, None);
    assert_eq!(net.role(1), StateRole::Leader);
    assert_eq!(net.propose(1, b"y"), Ok(()));
}

#[test]
fn transfer_to_a_learner_is_ignored() {
    let mut net = Network::new(&[1, 2]);
    net.add_empty_node(3, &[1, 2]);
    net.campaign(1);
    net.node(1)
        .propose_conf_change(&cc(ConfChangeType::ConfChangeAddLearnerNode, 3))
        .unwrap();
    net.stabilize();
    net.node(1).transfer_leader(3);
    net.stabilize();
    assert_eq!(net.role(1), StateRole::Leader);
    assert_eq!(net.node(1).status().lead_transferee, None);
}

// ReadIndex (§6.4): the leader records its commit index, confirms leadership with a round of
// heartbeats acknowledged by a majority, and only answers after committing an entry of its
// own term.
#[test]
fn read_index_on_the_leader_needs_a_heartbeat_quorum() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.propose(1, b"a").unwrap();
    let commit = net.node(1).status().hard_state.commit;
    net.isolate(1);
    net.node(1).read_index(b"r1".to_vec()).unwrap();
    net.stabilize();
    assert!(
        net.read_states.get(&1).is_none_or(|v| v.is_empty()),
        "no quorum, no answer"
    );
    net.recover();
    net.node(1).read_index(b"r2".to_vec()).unwrap();
    net.stabilize();
    let got: Vec<(u64, Vec<u8>)> = net.read_states[&1]
        .iter()
        .map(|rs| (rs.index, rs.request_ctx.clone()))
        .collect();
    // One round confirms both reads.
    assert_eq!(
        got,
        vec![(commit, b"r1".to_vec()), (commit, b"r2".to_vec())]
    );
}

#[test]
fn read_index_is_forwarded_by_followers() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.propose(1, b"a").unwrap();
    let commit = net.node(1).status().hard_state.commit;
    net.node(2).read_index(b"f".to_vec()).unwrap();
    net.stabilize();
    assert_eq!(net.read_states[&2].len(), 1);
    assert_eq!(net.read_states[&2][0].index, commit);
    assert_eq!(net.read_states[&2][0].request_ctx, b"f".to_vec());
}

#[test]
fn read_index_waits_for_a_commit_in_the_leaders_term() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    // Node 2 wins term 2, but its empty entry cannot commit while it is cut off.
    net.node(1).transfer_leader(2);
    net.ignore(MessageType::MsgApp);
    net.stabilize();
    assert_eq!(net.role(2), StateRole::Leader);
    net.node(2).read_index(b"early".to_vec()).unwrap();
    net.stabilize();
    assert!(net.read_states.get(&2).is_none_or(|v| v.is_empty()));
    net.recover();
    net.tick(2, 1);
    let rs = &net.read_states[&2];
    assert_eq!(rs.len(), 1);
    let r2 = &net.nodes[&2].raft;
    assert_eq!(r2.raft_log.term(rs[0].index), Ok(r2.term));
}

#[test]
fn read_index_without_a_leader_is_dropped() {
    let mut net = Network::new(&[1, 2, 3]);
    assert_eq!(
        net.node(2).read_index(b"x".to_vec()),
        Err(Error::ProposalDropped)
    );
}

// Snapshots (§5 of the paper, §5.1 of the thesis): a follower that needs entries the leader
// compacted receives the leader's snapshot instead.
#[test]
fn a_lagging_follower_is_sent_a_snapshot() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.isolate(3);
    for i in 0..5u8 {
        net.propose(1, &[i]).unwrap();
    }
    let applied = net.node(1).status().applied;
    let cs = net.node(1).raft.prs.conf_state();
    let s = net.node(1).storage_mut();
    s.create_snapshot(applied, Some(cs), b"state".to_vec())
        .unwrap();
    s.compact(applied).unwrap();
    net.recover();
    net.tick(1, 1);
    let n3 = net.node(3);
    assert_eq!(n3.raft.raft_log.committed, applied);
    assert_eq!(n3.status().applied, applied);
    assert_eq!(
        crate::raft::Storage::snapshot(n3.storage()).unwrap().data(),
        b"state"
    );
    // The leader finds 3 caught up and goes back to replicating.
    net.node(1).report_snapshot(3, SnapshotStatus::Finish);
    net.tick(1, 1);
    net.propose(1, b"after").unwrap();
    assert_eq!(net.applied_data(3), vec![b"after".to_vec()]);
    assert_eq!(
        net.node(1).status().progress[&3].state,
        ProgressState::Replicate
    );
}

#[test]
fn a_failed_snapshot_is_retried() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.isolate(3);
    net.propose(1, b"a").unwrap();
    let applied = net.node(1).status().applied;
    let s = net.node(1).storage_mut();
    s.create_snapshot(
        applied,
        Some(proto::raftpb::ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        }),
        vec![],
    )
    .unwrap();
    s.compact(applied).unwrap();
    net.recover();
    net.ignore(MessageType::MsgSnap);
    net.tick(1, 1);
    assert_eq!(
        net.node(1).status().progress[&3].state,
        ProgressState::Snapshot
    );
    net.node(1).report_snapshot(3, SnapshotStatus::Failure);
    assert_eq!(
        net.node(1).status().progress[&3].state,
        ProgressState::Probe
    );
    net.recover();
    net.tick(1, 2);
    assert_eq!(
        net.nodes[&3].raft.raft_log.committed,
        net.nodes[&1].raft.raft_log.committed
    );
}

#[test]
fn only_one_conf_change_is_in_flight() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.isolate(2);
    net.isolate(3);
    net.node(1)
        .propose_conf_change(&cc(ConfChangeType::ConfChangeAddLearnerNode, 4))
        .unwrap();
    net.node(1)
        .propose_conf_change(&cc(ConfChangeType::ConfChangeAddLearnerNode, 5))
        .unwrap();
    let last = net.node(1).raft.raft_log.last_index();
    let second = net
        .node(1)
        .raft
        .raft_log
        .slice(last, last + 1, u64::MAX)
        .unwrap();
    assert_eq!(
        second[0].r#type,
        proto::raftpb::EntryType::EntryNormal as i32
    );
    assert!(
        second[0].data().is_empty(),
        "the second change became an empty entry"
    );
    net.recover();
    net.stabilize();
    net.tick(1, 2);
    assert_eq!(net.conf_states[&1].learners, vec![4]);
}

#[test]
fn a_removed_leader_steps_down() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.node(1)
        .propose_conf_change(&cc(ConfChangeType::ConfChangeRemoveNode, 1))
        .unwrap();
    net.stabilize();
    assert_eq!(net.role(1), StateRole::Follower);
    assert_eq!(net.conf_states[&2].voters, vec![2, 3]);
    // The remaining two elect a leader among themselves; 1 never campaigns again.
    net.isolate(1);
    net.tick_all(40);
    let l = leader_of(&net).expect("a new leader");
    assert!(l == 2 || l == 3);
    assert!(!net.node(1).raft.promotable());
}

#[test]
fn removing_a_voter_lets_a_smaller_quorum_commit() {
    let mut net = Network::new(&[1, 2, 3, 4]);
    net.campaign(1);
    net.isolate(3);
    net.isolate(4);
    net.node(1).propose(b"stuck".to_vec()).unwrap();
    net.stabilize();
    assert!(net.applied_data(1).is_empty());
    // Removing 4 needs 3 of 4 acks; let 3 back in to commit the removal.
    net.recover();
    net.isolate(4);
    net.node(1)
        .propose_conf_change(&cc(ConfChangeType::ConfChangeRemoveNode, 4))
        .unwrap();
    net.stabilize();
    assert_eq!(net.conf_states[&1].voters, vec![1, 2, 3]);
    assert_eq!(net.applied_data(1), vec![b"stuck".to_vec()]);
}

// Proposals: followers forward them to the leader (unless configured not to); with no leader
// they are dropped so the server can answer "no leader".
#[test]
fn followers_forward_proposals() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.propose(2, b"fwd").unwrap();
    assert_eq!(net.applied_data(1), vec![b"fwd".to_vec()]);
    assert_eq!(net.applied_data(3), vec![b"fwd".to_vec()]);
}

#[test]
fn proposals_without_a_leader_or_forwarding_are_dropped() {
    let mut net = Network::new(&[1, 2, 3]);
    assert_eq!(net.propose(1, b"x"), Err(Error::ProposalDropped));
    let mut net = Network::with_config(&[1, 2, 3], |c| c.disable_proposal_forwarding = true);
    net.campaign(1);
    assert_eq!(net.propose(2, b"x"), Err(Error::ProposalDropped));
    assert_eq!(net.propose(1, b"y"), Ok(()));
}

#[test]
fn a_node_restarts_from_storage_without_reapplying() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.propose(1, b"a").unwrap();
    net.propose(1, b"b").unwrap();
    let st = net.node(2).status();
    let storage = net.nodes.remove(&2).unwrap().into_storage();
    let cfg = crate::raft::Config {
        applied: st.applied,
        ..crate::raft::Config::new(2)
    };
    let restarted = crate::raft::RawNode::new(&cfg, storage).unwrap();
    assert_eq!(restarted.status().hard_state, st.hard_state);
    assert_eq!(restarted.status().applied, st.applied);
    net.nodes.insert(2, restarted);
    net.applied.remove(&2);
    net.propose(1, b"c").unwrap();
    assert_eq!(net.applied_data(2), vec![b"c".to_vec()]);
}

#[test]
fn bootstrap_writes_members_as_committed_conf_changes() {
    use crate::raft::{Config, MemStorage, Peer, RawNode};
    let mut n = RawNode::new(&Config::new(1), MemStorage::new()).unwrap();
    let peers: Vec<Peer> = [1, 2, 3]
        .iter()
        .map(|&id| Peer {
            id,
            context: Some(format!("member {id}").into_bytes()),
        })
        .collect();
    n.bootstrap(&peers).unwrap();
    let rd = n.ready();
    n.storage_mut().append(&rd.entries);
    assert_eq!(rd.entries.len(), 3);
    assert_eq!(rd.committed_entries.len(), 3);
    assert_eq!(rd.hard_state.map(|h| (h.term, h.commit)), Some((1, 3)));
    assert!(rd.must_sync);
    let cc = ConfChange::decode(rd.entries[2].data()).unwrap();
    assert_eq!((cc.node_id, cc.context), (3, Some(b"member 3".to_vec())));
    n.advance(rd);
    assert_eq!(n.status().applied, 3);
    assert!(n.bootstrap(&peers).is_err());
}

// Nothing from the network may panic: malformed or unexpected messages are dropped.
#[test]
fn malformed_messages_are_dropped_not_panicked_on() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    net.propose(1, b"a").unwrap();
    let term = net.term(1);
    let mut bad: Vec<Message> = Vec::new();
    let mut unknown = m(MessageType::MsgApp, 2, 1, term);
    unknown.r#type = 999;
    bad.push(unknown);
    // local-only types
    bad.push(m(MessageType::MsgHup, 2, 1, term));
    bad.push(m(MessageType::MsgCheckQuorum, 2, 1, term));
    // responses with impossible indexes or from strangers
    let mut resp = m(MessageType::MsgAppResp, 2, 1, term);
    resp.index = u64::MAX;
    bad.push(resp);
    bad.push(m(MessageType::MsgAppResp, 77, 1, term));
    // an empty proposal and a read without context
    bad.push(m(MessageType::MsgProp, 2, 1, 0));
    bad.push(m(MessageType::MsgReadIndex, 2, 1, 0));
    for msg in bad {
        let _ = net.node(1).step(msg);
    }
    // to a follower: gaps, commit past the log, a snapshot-less MsgSnap, a bad read response
    let mut gap = m(MessageType::MsgApp, 1, 2, term);
    gap.index = 2;
    gap.log_term = term;
    gap.entries = vec![Entry {
        index: 9,
        term,
        ..Entry::default()
    }];
    let mut beat = m(MessageType::MsgHeartbeat, 1, 2, term);
    beat.commit = u64::MAX;
    let mut huge = m(MessageType::MsgApp, 1, 2, term);
    huge.index = u64::MAX;
    huge.entries = vec![Entry {
        index: 0,
        term,
        ..Entry::default()
    }];
    for msg in [
        gap,
        beat,
        huge,
        m(MessageType::MsgSnap, 1, 2, term),
        m(MessageType::MsgReadIndexResp, 1, 2, term),
        m(MessageType::MsgTimeoutNow, 77, 2, NONE),
    ] {
        let _ = net.node(2).step(msg);
    }
    net.stabilize();
    assert_eq!(net.role(1), StateRole::Leader);
    net.propose(1, b"b").unwrap();
    assert_eq!(net.applied_data(2), vec![b"a".to_vec(), b"b".to_vec()]);
}

// Leader Completeness (§5.4): "If a log entry is committed in a given term, then that entry
// will be present in the logs of the leaders for all higher-numbered terms." The node that
// missed a committed entry cannot collect a majority, so whoever leads next has it.
#[test]
fn a_node_missing_a_committed_entry_cannot_become_leader() {
    let mut net = Network::with_config(&[1, 2, 3], |c| {
        c.pre_vote = false;
        c.check_quorum = false;
    });
    net.campaign(1);
    net.isolate(3);
    net.propose(1, b"committed").unwrap();
    assert_eq!(net.applied_data(2), vec![b"committed".to_vec()]);
    // The old leader disappears; 3 (behind) and 2 (up to date) remain.
    net.recover();
    net.isolate(1);
    net.campaign(3);
    assert_ne!(net.role(3), StateRole::Leader, "2 must refuse its vote");
    net.campaign(2);
    assert_eq!(net.role(2), StateRole::Leader);
    net.propose(2, b"next").unwrap();
    assert_eq!(
        net.applied_data(3),
        vec![b"committed".to_vec(), b"next".to_vec()]
    );
}

#[test]
fn step_names_what_it_refuses() {
    use crate::raft::{Config, MemStorage, RawNode};
    let mut n = RawNode::new(
        &Config::new(1),
        MemStorage::new_with_conf_state(&[1, 2], &[]),
    )
    .unwrap();
    let cases = [
        (m(MessageType::MsgHup, 2, 1, 1), Error::StepLocalMsg),
        (m(MessageType::MsgBeat, 2, 1, 1), Error::StepLocalMsg),
        (m(MessageType::MsgAppResp, 9, 1, 1), Error::StepPeerNotFound),
        (m(MessageType::MsgProp, 2, 1, 0), Error::ProposalDropped),
    ];
    for (msg, want) in cases {
        let ty = msg.r#type();
        assert_eq!(n.step(msg), Err(want), "{ty:?}");
    }
    for msg in [
        m(MessageType::MsgApp, 1, 1, 1),
        m(MessageType::MsgApp, NONE, 1, 1),
        m(MessageType::MsgApp, 2, 1, 0),
        m(MessageType::MsgApp, 2, 1, 1 << 62),
    ] {
        assert!(matches!(n.step(msg), Err(Error::MalformedMessage(_))));
    }
}

#[test]
fn restart_refuses_inconsistent_persisted_state() {
    use crate::raft::{Config, MemStorage, RawNode};
    use proto::raftpb::HardState;
    let mut s = MemStorage::new_with_conf_state(&[1], &[]);
    s.append(&[super::paper::ent(1, 1)]);
    s.set_hard_state(HardState {
        term: 1,
        vote: 1,
        commit: 5,
    });
    let err = RawNode::new(&Config::new(1), s.clone()).err();
    assert_eq!(
        err,
        Some(Error::CorruptState(
            "commit index 5 is out of range [0, 1]".into()
        ))
    );
    s.set_hard_state(HardState {
        term: 1,
        vote: 1,
        commit: 1,
    });
    let cfg = Config {
        applied: 2,
        ..Config::new(1)
    };
    assert_eq!(
        RawNode::new(&cfg, s).err(),
        Some(Error::CorruptState(
            "applied index 2 is past the commit index 1".into()
        ))
    );
}

#[test]
fn a_follower_forwards_a_transfer_request_for_the_named_node() {
    let mut net = Network::new(&[1, 2, 3]);
    net.campaign(1);
    // Asked on follower 2, for node 3: the leader must hand over to 3, not to 2.
    net.node(2).transfer_leader(3);
    net.stabilize();
    assert_eq!(net.role(3), StateRole::Leader);
    assert_eq!(net.node(2).leader_id(), 3);
}
