// etcd 3.6/3.7's server feature gates (--feature-gates, ETCD_FEATURE_GATES, `feature-gates:` in
// a config file): etcd's gate names, defaults and stages, parsed with etcd's syntax and errors.

use std::collections::BTreeMap;

/// A gate etcd registers. AllAlpha and AllBeta are the generic gates of etcd's featuregate
/// package: they set every alpha (beta) gate not named explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    AllAlpha,
    AllBeta,
    CompactHashCheck,
    FastLeaseKeepAlive,
    InitialCorruptCheck,
    LeaseCheckpoint,
    LeaseCheckpointPersist,
    SetMemberLocalAddr,
    StopGRPCServiceOnDefrag,
    TxnModeWriteWithSharedBuffer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
}

impl Stage {
    /// As etcd's help prints it.
    fn label(self) -> &'static str {
        match self {
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
        }
    }
}

/// What etcd-rs does with a gate; docs/FLAGS.md explains each choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// The gate switches behaviour etcd-rs has.
    Drives,
    /// Either value is accepted; the gate changes nothing observable in etcd-rs.
    NoOp,
    /// `false` is accepted; `true` asks for a feature etcd-rs does not have and is refused
    /// with this reason rather than silently ignored.
    RefusedWhenOn(&'static str),
    /// AllAlpha / AllBeta: they only set other gates.
    Generic,
}

#[derive(Debug, Clone, Copy)]
pub struct GateSpec {
    pub gate: Gate,
    pub name: &'static str,
    pub default: bool,
    pub stage: Stage,
    pub support: Support,
}

const fn g(
    gate: Gate,
    name: &'static str,
    default: bool,
    stage: Stage,
    support: Support,
) -> GateSpec {
    GateSpec {
        gate,
        name,
        default,
        stage,
        support,
    }
}

/// etcd's server gates (server/features/etcd_features.go in 3.6, plus FastLeaseKeepAlive from
/// 3.7) and the featuregate package's two generic ones, in etcd's sorted order.
pub const GATES: &[GateSpec] = &[
    g(
        Gate::AllAlpha,
        "AllAlpha",
        false,
        Stage::Alpha,
        Support::Generic,
    ),
    g(
        Gate::AllBeta,
        "AllBeta",
        false,
        Stage::Beta,
        Support::Generic,
    ),
    g(
        Gate::CompactHashCheck,
        "CompactHashCheck",
        false,
        Stage::Alpha,
        Support::RefusedWhenOn(
            "the leader's check of its followers' hashes at their compaction revisions is not implemented (--corrupt-check-time's periodic check is)",
        ),
    ),
    g(
        Gate::FastLeaseKeepAlive,
        "FastLeaseKeepAlive",
        false,
        Stage::Alpha,
        Support::NoOp,
    ),
    g(
        Gate::InitialCorruptCheck,
        "InitialCorruptCheck",
        false,
        Stage::Alpha,
        Support::Drives,
    ),
    g(
        Gate::LeaseCheckpoint,
        "LeaseCheckpoint",
        false,
        Stage::Alpha,
        Support::RefusedWhenOn(
            "lease checkpoints are not implemented: a new leader gives every lease its full TTL again, as etcd without checkpoints",
        ),
    ),
    g(
        Gate::LeaseCheckpointPersist,
        "LeaseCheckpointPersist",
        false,
        Stage::Alpha,
        Support::RefusedWhenOn("lease checkpoints are not implemented"),
    ),
    g(
        Gate::SetMemberLocalAddr,
        "SetMemberLocalAddr",
        false,
        Stage::Alpha,
        Support::RefusedWhenOn(
            "peer connections are not bound to a local address from --initial-advertise-peer-urls",
        ),
    ),
    g(
        Gate::StopGRPCServiceOnDefrag,
        "StopGRPCServiceOnDefrag",
        false,
        Stage::Alpha,
        Support::RefusedWhenOn(
            "there is no gRPC health service to report NOT_SERVING during a defragmentation",
        ),
    ),
    g(
        Gate::TxnModeWriteWithSharedBuffer,
        "TxnModeWriteWithSharedBuffer",
        true,
        Stage::Beta,
        Support::NoOp,
    ),
];

/// A gate's entry; GATES lists the gates in the enum's order (a test checks it).
pub fn spec(gate: Gate) -> &'static GateSpec {
    &GATES[gate as usize]
}

fn by_name(name: &str) -> Option<&'static GateSpec> {
    GATES.iter().find(|s| s.name == name)
}

/// etcd's errors for a bad --feature-gates value (the featuregate package's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("missing bool value for {0}")]
    MissingValue(String),
    #[error("invalid value of {name}={value}, err: {err}")]
    BadValue {
        name: String,
        value: String,
        err: String,
    },
    #[error("unrecognized feature gate: {0}")]
    Unknown(String),
}

/// The gates set explicitly (by --feature-gates, or by an --experimental-* flag that stands
/// for a gate); every other gate has its default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<Gate, bool>,
}

impl FeatureGates {
    /// Parses one `Name=bool,Name=bool` value and adds it to the gates, as etcd's flag does
    /// (a repeated --feature-gates adds to the earlier ones).
    pub fn add(&mut self, value: &str) -> Result<(), GateError> {
        // Syntax first, for every item, then the names: etcd's order of errors.
        let mut pairs: Vec<(String, bool)> = Vec::new();
        for item in value.split(',').filter(|s| !s.is_empty()) {
            let Some((k, v)) = item.split_once('=') else {
                return Err(GateError::MissingValue(item.trim().to_string()));
            };
            let (k, v) = (k.trim(), v.trim());
            let b = common::gofmt::parse_go_bool(v).map_err(|err| GateError::BadValue {
                name: k.to_string(),
                value: v.to_string(),
                err,
            })?;
            // A name given twice in one value: the last one counts (etcd builds a map).
            pairs.retain(|(n, _)| n != k);
            pairs.push((k.to_string(), b));
        }
        let mut specs = Vec::with_capacity(pairs.len());
        for (k, v) in &pairs {
            let s = by_name(k).ok_or_else(|| GateError::Unknown(k.clone()))?;
            specs.push((s, *v));
        }
        // Named gates win over AllAlpha/AllBeta given in the same value, whatever the order.
        for (s, v) in &specs {
            self.set.insert(s.gate, *v);
        }
        for (s, v) in &specs {
            let stage = match s.gate {
                Gate::AllAlpha => Stage::Alpha,
                Gate::AllBeta => Stage::Beta,
                _ => continue,
            };
            for other in GATES.iter().filter(|o| o.stage == stage) {
                if !matches!(other.gate, Gate::AllAlpha | Gate::AllBeta) {
                    self.set.entry(other.gate).or_insert(*v);
                }
            }
        }
        Ok(())
    }

    /// Sets one gate (from its --experimental-* flag).
    pub fn set(&mut self, gate: Gate, on: bool) {
        self.set.insert(gate, on);
    }

    pub fn enabled(&self, gate: Gate) -> bool {
        self.set
            .get(&gate)
            .copied()
            .unwrap_or_else(|| spec(gate).default)
    }

    /// The gates set explicitly, `Name=bool` sorted and comma-joined: what etcd prints for the
    /// flag's value (and what it searches when an --experimental-* flag names the same gate).
    pub fn rendered(&self) -> String {
        let mut pairs: Vec<String> = self
            .set
            .iter()
            .map(|(g, v)| format!("{}={v}", spec(*g).name))
            .collect();
        pairs.sort();
        pairs.join(",")
    }

    /// Gates turned on that etcd-rs refuses, with the reason.
    pub fn refused(&self) -> Vec<(&'static str, &'static str)> {
        GATES
            .iter()
            .filter(|s| self.enabled(s.gate))
            .filter_map(|s| match s.support {
                Support::RefusedWhenOn(why) => Some((s.name, why)),
                _ => None,
            })
            .collect()
    }
}

/// The flag's help, as etcd words it.
pub fn help() -> String {
    let mut out = String::from(
        "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:",
    );
    for s in GATES {
        out.push_str(&format!(
            "\n    {}=true|false ({} - default={})",
            s.name,
            s.stage.label(),
            s.default
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(v: &str) -> Result<FeatureGates, GateError> {
        let mut g = FeatureGates::default();
        g.add(v).map(|_| g)
    }

    #[test]
    fn etcds_defaults() {
        let g = FeatureGates::default();
        assert!(g.enabled(Gate::TxnModeWriteWithSharedBuffer));
        for gate in [
            Gate::InitialCorruptCheck,
            Gate::CompactHashCheck,
            Gate::LeaseCheckpoint,
            Gate::StopGRPCServiceOnDefrag,
            Gate::FastLeaseKeepAlive,
        ] {
            assert!(!g.enabled(gate), "{gate:?}");
        }
        assert_eq!(g.rendered(), "");
        assert!(g.refused().is_empty());
    }

    #[test]
    fn values_and_etcds_errors() {
        let g = parsed("InitialCorruptCheck=true, TxnModeWriteWithSharedBuffer=0,").unwrap();
        assert!(g.enabled(Gate::InitialCorruptCheck));
        assert!(!g.enabled(Gate::TxnModeWriteWithSharedBuffer));
        assert_eq!(
            g.rendered(),
            "InitialCorruptCheck=true,TxnModeWriteWithSharedBuffer=false"
        );
        assert_eq!(
            parsed("Foo=true").unwrap_err().to_string(),
            "unrecognized feature gate: Foo"
        );
        assert_eq!(
            parsed("InitialCorruptCheck").unwrap_err().to_string(),
            "missing bool value for InitialCorruptCheck"
        );
        assert_eq!(
            parsed("InitialCorruptCheck=yes").unwrap_err().to_string(),
            "invalid value of InitialCorruptCheck=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
        // Names are case-sensitive, as etcd's.
        assert!(parsed("initialcorruptcheck=true").is_err());
    }

    #[test]
    fn all_alpha_sets_only_gates_not_named() {
        let g = parsed("CompactHashCheck=false,AllAlpha=true").unwrap();
        assert!(g.enabled(Gate::InitialCorruptCheck));
        assert!(g.enabled(Gate::LeaseCheckpoint));
        assert!(!g.enabled(Gate::CompactHashCheck));
        assert!(g.enabled(Gate::TxnModeWriteWithSharedBuffer));
        let refused: Vec<&str> = g.refused().iter().map(|(n, _)| *n).collect();
        assert!(refused.contains(&"LeaseCheckpoint"), "{refused:?}");
        let g = parsed("AllBeta=false").unwrap();
        assert!(!g.enabled(Gate::TxnModeWriteWithSharedBuffer));
        // A later value does not undo an earlier named gate.
        let mut g = parsed("InitialCorruptCheck=false").unwrap();
        g.add("AllAlpha=true").unwrap();
        assert!(!g.enabled(Gate::InitialCorruptCheck));
    }

    #[test]
    fn gates_are_listed_in_the_enums_order() {
        for (i, s) in GATES.iter().enumerate() {
            assert_eq!(s.gate as usize, i, "{}", s.name);
        }
    }

    #[test]
    fn help_lists_every_gate() {
        let h = help();
        assert!(h.contains("InitialCorruptCheck=true|false (ALPHA - default=false)"));
        assert!(h.contains("TxnModeWriteWithSharedBuffer=true|false (BETA - default=true)"));
    }
}
