//! The bounded window of append messages in flight to one follower in replicate state, so a
//! leader never floods a slow peer: each slot remembers the last index a message carried.

use std::collections::VecDeque;

/// Last indexes of the append messages sent but not yet acknowledged, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inflights {
    slots: VecDeque<u64>,
    cap: usize,
}

impl Inflights {
    pub fn new(cap: usize) -> Self {
        Inflights {
            slots: VecDeque::new(),
            cap,
        }
    }

    /// Whether no more messages may be sent until an acknowledgement frees a slot.
    pub fn full(&self) -> bool {
        self.slots.len() >= self.cap
    }

    pub fn count(&self) -> usize {
        self.slots.len()
    }

    /// Records a message whose last entry is `last`.
    ///
    /// # Panics
    /// When full: the caller must check `full` first.
    pub fn add(&mut self, last: u64) {
        assert!(
            !self.full(),
            "raft: cannot add into a full inflights window"
        );
        self.slots.push_back(last);
    }

    /// Frees every message whose entries are all at or below `to` (they were acknowledged).
    pub fn free_le(&mut self, to: u64) {
        while self.slots.front().is_some_and(|&i| i <= to) {
            self.slots.pop_front();
        }
    }

    /// Frees the oldest slot: a heartbeat response proves the follower is alive, so one more
    /// message may go out even if acknowledgements were lost.
    pub fn free_first_one(&mut self) {
        self.slots.pop_front();
    }

    pub fn reset(&mut self) {
        self.slots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_fills_and_frees_in_order() {
        let mut ins = Inflights::new(3);
        for i in [2, 4, 6] {
            assert!(!ins.full());
            ins.add(i);
        }
        assert!(ins.full());
        ins.free_le(3);
        assert_eq!(ins.count(), 2);
        ins.free_le(1);
        assert_eq!(ins.count(), 2);
        ins.free_first_one();
        assert_eq!(ins.count(), 1);
        ins.free_le(10);
        assert_eq!(ins.count(), 0);
    }
}
