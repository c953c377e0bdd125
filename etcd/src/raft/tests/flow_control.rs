//! The leader's flow control per follower: probe until the logs match, then stream within
//! the inflight window and the message size limit; fall back to probing when a peer is lost.

use proto::raftpb::{Entry, Message, MessageType};

use super::paper::{config, m, take};
use crate::raft::raft::Raft;
use crate::raft::storage::MemStorage;
use crate::raft::{Config, ProgressState};

fn leader(cfg: Config) -> Raft<MemStorage> {
    let mut r = Raft::new(&cfg, MemStorage::new_with_conf_state(&[1, 2, 3], &[])).unwrap();
    r.become_candidate();
    r.become_leader();
    take(&mut r);
    r
}

fn propose(r: &mut Raft<MemStorage>, n: usize) {
    for _ in 0..n {
        let mut p = m(MessageType::MsgProp, 1, 1, 0);
        p.entries = vec![Entry {
            data: Some(vec![0; 100]),
            ..Entry::default()
        }];
        r.step(p).unwrap();
    }
}

fn ack(r: &mut Raft<MemStorage>, from: u64, index: u64) {
    let mut resp = m(MessageType::MsgAppResp, from, 1, r.term);
    resp.index = index;
    r.step(resp).unwrap();
}

fn apps_to(msgs: &[Message], to: u64) -> Vec<&Message> {
    msgs.iter()
        .filter(|m| m.to == to && m.r#type() == MessageType::MsgApp)
        .collect()
}

#[test]
fn probe_sends_one_append_until_answered() {
    let mut r = leader(config(1, 10, 1));
    propose(&mut r, 3);
    // One probe per follower, whatever the number of proposals.
    assert_eq!(apps_to(&take(&mut r), 2).len(), 1);
    assert!(r.prs.progress[&2].is_paused());
    ack(&mut r, 2, 4);
    assert_eq!(r.prs.progress[&2].state, ProgressState::Replicate);
}

#[test]
fn replicate_streams_within_the_inflight_window_and_size_limit() {
    let mut r = leader(Config {
        max_inflight_msgs: 2,
        // Room for one 100-byte entry per message.
        max_size_per_msg: 50,
        ..config(1, 10, 1)
    });
    ack(&mut r, 2, 1);
    take(&mut r);
    propose(&mut r, 5);
    let msgs = take(&mut r);
    let to2 = apps_to(&msgs, 2);
    assert_eq!(to2.len(), 2, "the window holds two messages");
    assert!(to2.iter().all(|m| m.entries.len() == 1));
    assert!(r.prs.progress[&2].is_paused());
    // An ack frees the window and the next entries go out.
    ack(&mut r, 2, 2);
    let more = take(&mut r);
    assert_eq!(apps_to(&more, 2).len(), 1);
    assert_eq!(apps_to(&more, 2)[0].entries[0].index, 4);
}

#[test]
fn heartbeat_answer_frees_a_stuck_window() {
    let mut r = leader(Config {
        max_inflight_msgs: 1,
        ..config(1, 10, 1)
    });
    ack(&mut r, 2, 1);
    propose(&mut r, 1);
    take(&mut r);
    propose(&mut r, 1);
    assert!(apps_to(&take(&mut r), 2).is_empty(), "window full");
    // The append was lost, but the follower answers heartbeats: that frees one slot.
    r.step(m(MessageType::MsgHeartbeatResp, 2, 1, r.term))
        .unwrap();
    assert_eq!(apps_to(&take(&mut r), 2).len(), 1);
}

#[test]
fn unreachable_peer_goes_back_to_probing() {
    let mut r = leader(config(1, 10, 1));
    ack(&mut r, 2, 1);
    assert_eq!(r.prs.progress[&2].state, ProgressState::Replicate);
    r.step(m(MessageType::MsgUnreachable, 2, 1, 0)).unwrap();
    assert_eq!(r.prs.progress[&2].state, ProgressState::Probe);
}

#[test]
fn rejection_hint_skips_a_whole_divergent_term() {
    // Leader log: terms [1, 1, 1, 4, 4]; the follower has [1, 1, 1, 2, 2, 2, 2].
    let mut r = super::paper::raft_with_log(1, &[1, 2, 3], &[1, 1, 1, 4, 4], 4);
    r.become_candidate();
    r.become_leader();
    take(&mut r);
    // The follower rejects the probe at index 5 (term 4) and hints its last index at or
    // below 5 with term <= 4: index 5, term 2.
    let mut rej = m(MessageType::MsgAppResp, 2, 1, r.term);
    rej.index = 5;
    rej.reject = true;
    rej.reject_hint = 5;
    rej.log_term = 2;
    r.step(rej).unwrap();
    // The leader has no term-2 entries: the logs can only agree at index 3 (term 1).
    let msgs = take(&mut r);
    let app = apps_to(&msgs, 2);
    assert_eq!(app.len(), 1);
    assert_eq!((app[0].index, app[0].log_term), (3, 1));
}

#[test]
fn status_reports_the_leaders_view() {
    let mut r = leader(config(1, 10, 1));
    ack(&mut r, 2, 1);
    let st = crate::raft::status::Status::new(&r);
    assert_eq!(st.soft_state.leader_id, 1);
    assert_eq!(st.hard_state.term, 1);
    assert_eq!(st.progress.len(), 3);
    assert_eq!(st.progress[&2].matched, 1);
    assert_eq!(st.progress[&2].state, ProgressState::Replicate);
    assert_eq!(st.progress[&3].state, ProgressState::Probe);
}

#[test]
fn a_batch_travels_as_one_message_each_way() {
    let mut net = super::network::Network::new(&[1, 2, 3]);
    net.campaign(1);
    // Settle the followers into replicate state first (their first append is a probe).
    net.propose(1, b"first").unwrap();
    let batch: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
    net.node(2).propose_batch(batch.clone()).unwrap();
    let forwarded = net.process_ready(2);
    let props: Vec<&Message> = forwarded
        .iter()
        .filter(|m| m.r#type() == MessageType::MsgProp)
        .collect();
    assert_eq!(
        props.len(),
        1,
        "the follower forwards the batch in one message"
    );
    assert_eq!((props[0].to, props[0].entries.len()), (1, 3));
    for m in forwarded {
        net.node(m.to).step(m).unwrap();
    }
    let out = net.process_ready(1);
    for to in [2, 3] {
        let apps = apps_to(&out, to);
        assert_eq!(apps.len(), 1, "one append to {to} for the whole batch");
        let data: Vec<&[u8]> = apps[0].entries.iter().map(|e| e.data()).collect();
        assert_eq!(data, [b"a".as_slice(), b"b", b"c"]);
    }
    net.send(out);
    let mut want = vec![b"first".to_vec()];
    want.extend(batch);
    for id in [1, 2, 3] {
        assert_eq!(
            net.applied_data(id),
            want,
            "node {id} applied the batch in order"
        );
    }
}

#[test]
fn a_batch_without_a_leader_is_refused_whole() {
    let mut net = super::network::Network::new(&[1, 2, 3]);
    let r = net
        .node(2)
        .propose_batch(vec![b"x".to_vec(), b"y".to_vec()]);
    assert!(r.is_err(), "no leader yet, yet the batch was taken");
    let out = net.process_ready(2);
    assert!(out.iter().all(|m| m.r#type() != MessageType::MsgProp));
    assert!(net.node(2).raft.raft_log.last_index() == 0);
}
