//! Whatever arrives from the network, a node never panics: random and adversarial messages
//! (unknown types, strangers, absurd indexes, forged snapshots) are refused or dropped.

use proto::raftpb::{ConfState, Entry, Message, Snapshot, SnapshotMetadata};

use super::network::Network;
use crate::raft::config::SplitMix64;

fn near(rng: &mut SplitMix64, x: u64) -> u64 {
    // Mostly plausible values, so messages get past the sanity checks into raft proper.
    match rng.below(40) {
        0 | 1 => 0,
        2 => u64::MAX,
        3 => rng.next_u64(),
        _ => x.saturating_add(rng.below(5)).saturating_sub(2),
    }
}

fn random_message(rng: &mut SplitMix64, to: u64, term: u64, last: u64) -> Message {
    let index = near(rng, last);
    let n_ents = rng.below(4);
    let contiguous = rng.below(2) == 0;
    let entries = (0..n_ents)
        .map(|i| Entry {
            index: if contiguous {
                index.wrapping_add(i + 1)
            } else {
                near(rng, last)
            },
            term: near(rng, term),
            r#type: 0,
            data: (rng.below(2) == 0).then(|| vec![1, 2, 3]),
        })
        .collect();
    let snapshot = (rng.below(5) == 0).then(|| Snapshot {
        data: None,
        metadata: (rng.below(4) != 0).then(|| SnapshotMetadata {
            index: near(rng, last.saturating_add(3)),
            term: near(rng, term),
            conf_state: Some(ConfState {
                voters: vec![1, 2, 3],
                ..ConfState::default()
            }),
        }),
    });
    Message {
        r#type: rng.below(20) as i32,
        to,
        from: rng.below(5),
        term: near(rng, term),
        log_term: near(rng, term),
        index,
        entries,
        commit: near(rng, last),
        snapshot,
        reject: rng.below(2) == 0,
        reject_hint: near(rng, last),
        context: (rng.below(3) == 0).then(|| vec![rng.below(3) as u8]),
    }
}

#[test]
fn random_messages_never_panic() {
    for seed in 0..2000 {
        let mut rng = SplitMix64::new(seed);
        let mut net = Network::new(&[1, 2, 3]);
        net.campaign(1);
        let _ = net.propose(1, b"a");
        for _ in 0..300 {
            let to = 1 + rng.below(3);
            let term = net.term(to);
            let last = net.nodes[&to].raft.raft_log.last_index();
            let msg = random_message(&mut rng, to, term, last);
            let _ = net.node(to).step(msg);
            match rng.below(8) {
                0 => net.stabilize(),
                1 => net.tick_all(1),
                2 => {
                    let _ = net.propose(1 + rng.below(3), b"p");
                }
                3 => {
                    let _ = net
                        .node(1 + rng.below(3))
                        .read_index(vec![rng.below(4) as u8]);
                }
                _ => {}
            }
        }
        net.stabilize();
    }
}
