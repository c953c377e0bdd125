//! Settings of one raft node, their validation, and the seeded random source for election
//! jitter (raft never reads the clock or the OS RNG, so a seed makes a whole run repeatable).

use super::errors::{Error, Result};

/// "No node": raft ids are never zero, so zero means "unknown leader" or "no vote".
pub const NONE: u64 = 0;

/// How a raft node behaves. `Config::default()` gives etcd's server defaults (with `id` unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// This node's id; must not be zero.
    pub id: u64,
    /// Ticks a follower waits without hearing from a leader before it campaigns. The actual
    /// timeout is drawn from [election_tick, 2 × election_tick) after every term change.
    pub election_tick: usize,
    /// Ticks between leader heartbeats; must be smaller than `election_tick`.
    pub heartbeat_tick: usize,
    /// The last index the caller has already applied; entries up to it are not handed out
    /// again after a restart.
    pub applied: u64,
    /// Upper bound on the entry bytes in one append message (at least one entry is always sent).
    pub max_size_per_msg: u64,
    /// Upper bound on the bytes of committed entries in one Ready (at least one is sent).
    pub max_committed_size_per_ready: u64,
    /// How many append messages may be in flight to one follower in replicate state.
    pub max_inflight_msgs: usize,
    /// A leader steps down if it has not heard from a quorum within an election timeout, and a
    /// follower that heard from a leader recently ignores vote requests (leader lease).
    pub check_quorum: bool,
    /// Run a pre-vote round before raising the term, so a partitioned node rejoining cannot
    /// disrupt a healthy leader (etcd's `--pre-vote`).
    pub pre_vote: bool,
    /// Followers drop proposals instead of forwarding them to the leader.
    pub disable_proposal_forwarding: bool,
    /// Seed of the election-timeout jitter; give every node a different one.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            id: NONE,
            election_tick: 10,
            heartbeat_tick: 1,
            applied: 0,
            max_size_per_msg: 1024 * 1024,
            max_committed_size_per_ready: u64::MAX,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            disable_proposal_forwarding: false,
            seed: 0,
        }
    }
}

impl Config {
    /// A default config for node `id`, seeded by the id so that nodes do not time out in step.
    pub fn new(id: u64) -> Self {
        Config {
            id,
            seed: id,
            ..Config::default()
        }
    }

    /// Checks the settings, naming the bad value in the error.
    pub fn validate(&self) -> Result<()> {
        if self.id == NONE {
            return Err(Error::ConfigInvalid("cannot use none as id".into()));
        }
        if self.heartbeat_tick == 0 {
            return Err(Error::ConfigInvalid(
                "heartbeat tick must be greater than 0".into(),
            ));
        }
        if self.election_tick <= self.heartbeat_tick {
            return Err(Error::ConfigInvalid(format!(
                "election tick ({}) must be greater than heartbeat tick ({})",
                self.election_tick, self.heartbeat_tick
            )));
        }
        if self.max_inflight_msgs == 0 {
            return Err(Error::ConfigInvalid(
                "max inflight messages must be greater than 0".into(),
            ));
        }
        if self.max_size_per_msg == 0 {
            return Err(Error::ConfigInvalid(
                "max size per message must be greater than 0".into(),
            ));
        }
        Ok(())
    }
}

/// splitmix64: tiny, fast, and good enough for timeout jitter; not for anything secret.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in [0, n); n must be positive.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_bad_values() {
        let cases: Vec<(Config, &str)> = vec![
            (Config::default(), "cannot use none as id"),
            (
                Config {
                    heartbeat_tick: 0,
                    ..Config::new(1)
                },
                "heartbeat tick must be greater than 0",
            ),
            (
                Config {
                    election_tick: 3,
                    heartbeat_tick: 3,
                    ..Config::new(1)
                },
                "election tick (3) must be greater than heartbeat tick (3)",
            ),
            (
                Config {
                    max_inflight_msgs: 0,
                    ..Config::new(1)
                },
                "max inflight messages must be greater than 0",
            ),
        ];
        for (cfg, want) in cases {
            assert_eq!(
                cfg.validate(),
                Err(Error::ConfigInvalid(want.to_string())),
                "{cfg:?}"
            );
        }
        assert_eq!(Config::new(1).validate(), Ok(()));
    }

    #[test]
    fn splitmix_is_deterministic_and_bounded() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            let x = a.below(10);
            assert_eq!(x, b.below(10));
            assert!(x < 10);
        }
    }
}
