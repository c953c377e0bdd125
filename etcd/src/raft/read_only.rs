//! Linearizable reads without writing to the log (ReadIndex, thesis §6.4): the leader records
//! its commit index per request and answers once a heartbeat round shows it is still leader.

use std::collections::{BTreeSet, HashMap, VecDeque};

use proto::raftpb::Message;

/// A read that may be served once the state machine has applied `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadState {
    /// The commit index at the time the read was confirmed.
    pub index: u64,
    /// The caller's context from `read_index`, to match the answer with the request.
    pub request_ctx: Vec<u8>,
}

/// One read waiting for its heartbeat round.
#[derive(Debug, Clone)]
pub struct ReadIndexStatus {
    /// The original request (its `from` says whom to answer).
    pub req: Message,
    /// The leader's commit index when the request arrived.
    pub index: u64,
    /// Peers that answered a heartbeat carrying this request's context.
    pub acks: BTreeSet<u64>,
}

/// Pending reads in arrival order. A quorum acknowledging a later request also confirms every
/// earlier one, which is how many reads share one heartbeat round.
#[derive(Debug, Clone, Default)]
pub struct ReadOnly {
    pending: HashMap<Vec<u8>, ReadIndexStatus>,
    queue: VecDeque<Vec<u8>>,
}

impl ReadOnly {
    /// Queues a read at commit index `index`; a context already pending is ignored.
    pub fn add_request(&mut self, index: u64, ctx: Vec<u8>, req: Message) {
        if self.pending.contains_key(&ctx) {
            return;
        }
        self.pending.insert(
            ctx.clone(),
            ReadIndexStatus {
                req,
                index,
                acks: BTreeSet::new(),
            },
        );
        self.queue.push_back(ctx);
    }

    /// Records that `id` answered a heartbeat carrying `ctx`; returns who has so far.
    pub fn recv_ack(&mut self, id: u64, ctx: &[u8]) -> Option<&BTreeSet<u64>> {
        let rs = self.pending.get_mut(ctx)?;
        rs.acks.insert(id);
        Some(&rs.acks)
    }

    /// Removes and returns every request up to and including `ctx`, oldest first.
    pub fn advance(&mut self, ctx: &[u8]) -> Vec<ReadIndexStatus> {
        let Some(pos) = self.queue.iter().position(|c| c.as_slice() == ctx) else {
            return Vec::new();
        };
        self.queue
            .drain(..=pos)
            .filter_map(|c| self.pending.remove(&c))
            .collect()
    }

    /// The context of the newest pending request, to piggyback on heartbeats.
    pub fn last_pending_request_ctx(&self) -> Option<Vec<u8>> {
        self.queue.back().cloned()
    }

    pub fn pending_count(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_round_confirms_every_earlier_read() {
        let mut ro = ReadOnly::default();
        for (i, ctx) in [b"a", b"b", b"c"].into_iter().enumerate() {
            ro.add_request(10 + i as u64, ctx.to_vec(), Message::default());
        }
        ro.add_request(99, b"b".to_vec(), Message::default());
        assert_eq!(ro.pending_count(), 3);
        assert_eq!(ro.recv_ack(2, b"b").map(|a| a.len()), Some(1));
        assert!(ro.recv_ack(2, b"zz").is_none());
        let done: Vec<u64> = ro.advance(b"b").iter().map(|s| s.index).collect();
        assert_eq!(done, vec![10, 11]);
        assert_eq!(ro.last_pending_request_ctx(), Some(b"c".to_vec()));
        assert!(ro.advance(b"a").is_empty());
    }
}
