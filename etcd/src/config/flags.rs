// The server's command line, parsed the way etcd's (Go flag package) is: `--flag value`,
// `--flag=value`, `-flag`, bool flags as `--flag` or `--flag=false`, and ETCD_* environment
// variables for every flag, refused when a command-line flag shadows them (as etcd does).

use std::collections::BTreeMap;

use super::features::{FeatureGates, Gate};

/// Where a flag's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Default,
    Env,
    CommandLine,
}

#[derive(Debug, Clone, Copy)]
pub struct FlagSpec {
    pub name: &'static str,
    pub default: &'static str,
    pub is_bool: bool,
    pub group: &'static str,
    pub help: &'static str,
}

const fn v(
    group: &'static str,
    name: &'static str,
    default: &'static str,
    help: &'static str,
) -> FlagSpec {
    FlagSpec {
        name,
        default,
        is_bool: false,
        group,
        help,
    }
}

const fn b(
    group: &'static str,
    name: &'static str,
    default: &'static str,
    help: &'static str,
) -> FlagSpec {
    FlagSpec {
        name,
        default,
        is_bool: true,
        group,
        help,
    }
}

/// Every flag we accept, with etcd 3.5's defaults. Flags for features we do not have are still
/// listed so that using them gives a clear error instead of "flag provided but not defined".
pub const FLAGS: &[FlagSpec] = &[
    v(
        "Member",
        "name",
        "default",
        "Human-readable name for this member.",
    ),
    v(
        "Member",
        "data-dir",
        "${name}.etcd",
        "Path to the data directory.",
    ),
    v(
        "Member",
        "wal-dir",
        "",
        "Path to the dedicated wal directory.",
    ),
    v(
        "Member",
        "snapshot-count",
        "100000",
        "Number of committed transactions to trigger a snapshot to disk.",
    ),
    v(
        "Member",
        "heartbeat-interval",
        "100",
        "Time (in milliseconds) of a heartbeat interval.",
    ),
    v(
        "Member",
        "election-timeout",
        "1000",
        "Time (in milliseconds) for an election to timeout. See tuning documentation for details.",
    ),
    b(
        "Member",
        "initial-election-tick-advance",
        "true",
        "Whether to fast-forward initial election ticks on boot for faster election.",
    ),
    v(
        "Member",
        "listen-peer-urls",
        "http://localhost:2380",
        "List of URLs to listen on for peer traffic.",
    ),
    v(
        "Member",
        "listen-client-urls",
        "http://localhost:2379",
        "List of URLs to listen on for client traffic.",
    ),
    v(
        "Member",
        "max-snapshots",
        "5",
        "Maximum number of snapshot files to retain (0 is unlimited).",
    ),
    v(
        "Member",
        "max-wals",
        "5",
        "Maximum number of wal files to retain (0 is unlimited).",
    ),
    v(
        "Member",
        "quota-backend-bytes",
        "0",
        "Raise alarms when backend size exceeds the given quota (0 defaults to low space quota).",
    ),
    v(
        "Member",
        "backend-batch-interval",
        "0",
        "BackendBatchInterval is the maximum time before commit the backend transaction.",
    ),
    v(
        "Member",
        "backend-batch-limit",
        "0",
        "BackendBatchLimit is the maximum operations before commit the backend transaction.",
    ),
    v(
        "Member",
        "max-txn-ops",
        "128",
        "Maximum number of operations permitted in a transaction.",
    ),
    v(
        "Member",
        "max-request-bytes",
        "1572864",
        "Maximum client request size in bytes the server will accept.",
    ),
    v(
        "Member",
        "max-concurrent-streams",
        "4294967295",
        "Maximum concurrent streams that each client can open at a time.",
    ),
    v(
        "Member",
        "grpc-keepalive-min-time",
        "5s",
        "Minimum duration interval that a client should wait before pinging server.",
    ),
    v(
        "Member",
        "grpc-keepalive-interval",
        "2h",
        "Frequency duration of server-to-client ping to check if a connection is alive (0 to disable).",
    ),
    v(
        "Member",
        "grpc-keepalive-timeout",
        "20s",
        "Additional duration of wait before closing a non-responsive connection (0 to disable).",
    ),
    b(
        "Member",
        "unsafe-no-fsync",
        "false",
        "Disables fsync, unsafe, will cause data loss.",
    ),
    v(
        "Clustering",
        "initial-advertise-peer-urls",
        "http://localhost:2380",
        "List of this member's peer URLs to advertise to the rest of the cluster.",
    ),
    v(
        "Clustering",
        "initial-cluster",
        "default=http://localhost:2380",
        "Initial cluster configuration for bootstrapping.",
    ),
    v(
        "Clustering",
        "initial-cluster-state",
        "new",
        "Initial cluster state ('new' or 'existing').",
    ),
    v(
        "Clustering",
        "initial-cluster-token",
        "etcd-cluster",
        "Initial cluster token for the etcd cluster during bootstrap.",
    ),
    v(
        "Clustering",
        "advertise-client-urls",
        "http://localhost:2379",
        "List of this member's client URLs to advertise to the public.",
    ),
    v(
        "Clustering",
        "discovery",
        "",
        "Discovery URL used to bootstrap the cluster.",
    ),
    v(
        "Clustering",
        "discovery-fallback",
        "proxy",
        "Expected behavior ('exit' or 'proxy') when discovery services fails.",
    ),
    v(
        "Clustering",
        "discovery-proxy",
        "",
        "HTTP proxy to use for traffic to discovery service.",
    ),
    v(
        "Clustering",
        "discovery-srv",
        "",
        "DNS srv domain used to bootstrap the cluster.",
    ),
    v(
        "Clustering",
        "discovery-srv-name",
        "",
        "Suffix to the dns srv name queried when bootstrapping.",
    ),
    b(
        "Clustering",
        "strict-reconfig-check",
        "true",
        "Reject reconfiguration requests that would cause quorum loss.",
    ),
    b(
        "Clustering",
        "pre-vote",
        "true",
        "Enable to run an additional Raft election phase.",
    ),
    v(
        "Clustering",
        "auto-compaction-retention",
        "0",
        "Auto compaction retention length. 0 means disable auto compaction.",
    ),
    v(
        "Clustering",
        "auto-compaction-mode",
        "periodic",
        "Interpret 'auto-compaction-retention' one of: periodic|revision.",
    ),
    b(
        "Clustering",
        "enable-v2",
        "false",
        "Accept etcd V2 client requests. Not supported by etcd-rs.",
    ),
    v(
        "Security",
        "cert-file",
        "",
        "Path to the client server TLS cert file.",
    ),
    v(
        "Security",
        "key-file",
        "",
        "Path to the client server TLS key file.",
    ),
    b(
        "Security",
        "client-cert-auth",
        "false",
        "Enable client cert authentication.",
    ),
    v(
        "Security",
        "client-crl-file",
        "",
        "Path to the client certificate revocation list file.",
    ),
    v(
        "Security",
        "client-cert-allowed-hostname",
        "",
        "Allowed TLS hostname for client cert authentication.",
    ),
    v(
        "Security",
        "trusted-ca-file",
        "",
        "Path to the client server TLS trusted CA cert file.",
    ),
    b(
        "Security",
        "auto-tls",
        "false",
        "Client TLS using generated certificates.",
    ),
    v(
        "Security",
        "peer-cert-file",
        "",
        "Path to the peer server TLS cert file.",
    ),
    v(
        "Security",
        "peer-key-file",
        "",
        "Path to the peer server TLS key file.",
    ),
    b(
        "Security",
        "peer-client-cert-auth",
        "false",
        "Enable peer client cert authentication.",
    ),
    v(
        "Security",
        "peer-trusted-ca-file",
        "",
        "Path to the peer server TLS trusted CA file.",
    ),
    v(
        "Security",
        "peer-cert-allowed-cn",
        "",
        "Required CN for client certs connecting to the peer endpoint.",
    ),
    v(
        "Security",
        "peer-cert-allowed-hostname",
        "",
        "Allowed TLS hostname for inter peer authentication.",
    ),
    b(
        "Security",
        "peer-auto-tls",
        "false",
        "Peer TLS using self-generated certificates if --peer-key-file and --peer-cert-file are not provided.",
    ),
    v(
        "Security",
        "peer-crl-file",
        "",
        "Path to the peer certificate revocation list file.",
    ),
    v(
        "Security",
        "cipher-suites",
        "",
        "Comma-separated list of supported TLS cipher suites between client/server and peers.",
    ),
    v(
        "Security",
        "cors",
        "*",
        "Comma-separated whitelist of origins for CORS, or cross-origin resource sharing, (empty or * means allow all).",
    ),
    v(
        "Security",
        "host-whitelist",
        "*",
        "Acceptable hostnames from HTTP client requests, if server is not secure (empty or * means allow all).",
    ),
    v(
        "Auth",
        "auth-token",
        "simple",
        "Specify a v3 authentication token type and its options ('simple' or 'jwt').",
    ),
    v(
        "Auth",
        "bcrypt-cost",
        "10",
        "Specify the cost / strength of the bcrypt algorithm for hashing auth passwords. Valid values are between 4 and 31.",
    ),
    v(
        "Auth",
        "auth-token-ttl",
        "300",
        "Time (in seconds) of the auth-token-ttl.",
    ),
    b(
        "Profiling and Monitoring",
        "enable-pprof",
        "false",
        "Enable runtime profiling data via HTTP server. Not supported by etcd-rs.",
    ),
    v(
        "Profiling and Monitoring",
        "metrics",
        "basic",
        "Set level of detail for exported metrics, specify 'extensive' to include server side grpc histogram metrics.",
    ),
    v(
        "Profiling and Monitoring",
        "listen-metrics-urls",
        "",
        "List of URLs to listen on for the metrics and health endpoints.",
    ),
    v(
        "Logging",
        "logger",
        "zap",
        "Currently only supports 'zap' for structured logging.",
    ),
    v(
        "Logging",
        "log-outputs",
        "default",
        "Specify 'stdout' or 'stderr' to skip journald logging even when running under systemd, or list of comma separated output targets.",
    ),
    v(
        "Logging",
        "log-level",
        "info",
        "Configures log level. Only supports debug, info, warn, error, panic, or fatal.",
    ),
    v(
        "Feature",
        "feature-gates",
        "",
        "A set of key=value pairs that describe feature gates for alpha/experimental features.",
    ),
    v(
        "Feature",
        "corrupt-check-time",
        "0s",
        "Duration of time between cluster corruption check passes.",
    ),
    v(
        "Feature",
        "compaction-batch-limit",
        "1000",
        "Sets the maximum revisions deleted in each compaction batch.",
    ),
    v(
        "Feature",
        "compaction-sleep-interval",
        "10ms",
        "Sets the sleep interval between each compaction batch.",
    ),
    v(
        "Feature",
        "watch-progress-notify-interval",
        "10m",
        "Duration of periodic watch progress notifications.",
    ),
    v(
        "Feature",
        "warning-apply-duration",
        "100ms",
        "Time duration after which a warning is generated if request takes more time.",
    ),
    v(
        "Feature",
        "snapshot-catchup-entries",
        "5000",
        "Number of entries for a slow follower to catch up after compacting the raft storage entries.",
    ),
    b(
        "Experimental feature",
        "experimental-initial-corrupt-check",
        "false",
        "Enable to check data corruption before serving any client/peer traffic. Use '--feature-gates=InitialCorruptCheck=true' instead.",
    ),
    v(
        "Experimental feature",
        "experimental-corrupt-check-time",
        "0s",
        "Duration of time between cluster corruption check passes. Use --corrupt-check-time instead.",
    ),
    b(
        "Experimental feature",
        "experimental-compact-hash-check-enabled",
        "false",
        "Enable leader to periodically check followers compaction hashes. Use '--feature-gates=CompactHashCheck=true' instead.",
    ),
    b(
        "Experimental feature",
        "experimental-enable-lease-checkpoint",
        "false",
        "Enable leader to send regular checkpoints to other members to prevent reset of remaining TTL on leader change. Use '--feature-gates=LeaseCheckpoint=true' instead.",
    ),
    b(
        "Experimental feature",
        "experimental-enable-lease-checkpoint-persist",
        "false",
        "Enable persisting remainingTTL to prevent indefinite auto-renewal of long lived leases. Use '--feature-gates=LeaseCheckpointPersist=true' instead.",
    ),
    b(
        "Experimental feature",
        "experimental-txn-mode-write-with-shared-buffer",
        "true",
        "Enable the write transaction to use a shared buffer in its readonly check operations. Use '--feature-gates=TxnModeWriteWithSharedBuffer=true' instead.",
    ),
    b(
        "Experimental feature",
        "experimental-stop-grpc-service-on-defrag",
        "false",
        "Enable etcd gRPC service to stop serving client requests on defragmentation. Use '--feature-gates=StopGRPCServiceOnDefrag=true' instead.",
    ),
    v(
        "Experimental feature",
        "experimental-snapshot-catchup-entries",
        "5000",
        "Number of entries for a slow follower to catch up after compacting the raft storage entries. Use --snapshot-catchup-entries instead.",
    ),
    v(
        "Experimental feature",
        "experimental-compaction-batch-limit",
        "1000",
        "Sets the maximum revisions deleted in each compaction batch. Use --compaction-batch-limit instead.",
    ),
    v(
        "Experimental feature",
        "experimental-compaction-sleep-interval",
        "10ms",
        "Sets the sleep interval between each compaction batch. Use --compaction-sleep-interval instead.",
    ),
    v(
        "Experimental feature",
        "experimental-watch-progress-notify-interval",
        "10m",
        "Duration of periodic watch progress notifications. Use --watch-progress-notify-interval instead.",
    ),
    v(
        "Experimental feature",
        "experimental-warning-apply-duration",
        "100ms",
        "Time duration after which a warning is generated if request takes more time. Use --warning-apply-duration instead.",
    ),
    b(
        "Unsafe feature",
        "force-new-cluster",
        "false",
        "Force to create a new one-member cluster.",
    ),
];

pub fn spec(name: &str) -> Option<&'static FlagSpec> {
    FLAGS.iter().find(|f| f.name == name)
}

/// etcd 3.4/3.5's --experimental-* flags that etcd 3.6 renamed (upgrade_3_6 "Flags
/// deprecated"), and the new name. Both are accepted; giving both is etcd 3.6's error.
pub const RENAMED: &[(&str, &str)] = &[
    ("experimental-corrupt-check-time", "corrupt-check-time"),
    (
        "experimental-compaction-batch-limit",
        "compaction-batch-limit",
    ),
    (
        "experimental-compaction-sleep-interval",
        "compaction-sleep-interval",
    ),
    (
        "experimental-watch-progress-notify-interval",
        "watch-progress-notify-interval",
    ),
    (
        "experimental-warning-apply-duration",
        "warning-apply-duration",
    ),
    (
        "experimental-snapshot-catchup-entries",
        "snapshot-catchup-entries",
    ),
];

/// etcd 3.5's boolean --experimental-* flags that etcd 3.6 replaced by feature gates
/// (upgrade_3_6 "Equivalent flags of v3.5 feature gates").
pub const GATE_FLAGS: &[(&str, Gate)] = &[
    (
        "experimental-stop-grpc-service-on-defrag",
        Gate::StopGRPCServiceOnDefrag,
    ),
    (
        "experimental-initial-corrupt-check",
        Gate::InitialCorruptCheck,
    ),
    (
        "experimental-compact-hash-check-enabled",
        Gate::CompactHashCheck,
    ),
    (
        "experimental-txn-mode-write-with-shared-buffer",
        Gate::TxnModeWriteWithSharedBuffer,
    ),
    (
        "experimental-enable-lease-checkpoint",
        Gate::LeaseCheckpoint,
    ),
    (
        "experimental-enable-lease-checkpoint-persist",
        Gate::LeaseCheckpointPersist,
    ),
];

/// The warning etcd 3.6 logs for a deprecated flag that is set (its texts, quirks included:
/// "3.6" or "v3.6" as etcd writes them, and no dashes before compaction-sleep-interval).
pub fn deprecation_warning(flag: &str) -> Option<String> {
    let gate_flag = |gate: &str| format!("'--feature-gates={gate}=true'");
    let (version, instead) = match flag {
        "experimental-compact-hash-check-enabled" => ("3.6", gate_flag("CompactHashCheck")),
        "experimental-txn-mode-write-with-shared-buffer" => {
            ("v3.6", gate_flag("TxnModeWriteWithSharedBuffer"))
        }
        "experimental-compaction-sleep-interval" => {
            ("v3.6", "'compaction-sleep-interval'".to_string())
        }
        _ => {
            let (_, new) = RENAMED.iter().find(|(old, _)| *old == flag)?;
            ("v3.6", format!("'--{new}'"))
        }
    };
    let next = if version == "3.6" { "3.7" } else { "v3.7" };
    Some(format!(
        "--{flag} is deprecated in {version} and will be decommissioned in {next}. Use {instead} instead."
    ))
}

/// The flag whose value is a list of gates.
pub const FEATURE_GATES: &str = "feature-gates";

/// The ETCD_* variable of a flag: upper case, '-' → '_'.
pub fn env_name(flag: &str) -> String {
    format!("ETCD_{}", flag.to_ascii_uppercase().replace('-', "_"))
}

/// What the command line asked for besides running a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Run,
    Help,
    Version,
    ConfigFile(String),
}

/// Parsed flag values (every known flag has one) and where each came from.
#[derive(Debug, Clone)]
pub struct FlagValues {
    pub values: BTreeMap<&'static str, (String, Source)>,
    pub warnings: Vec<String>,
}

impl FlagValues {
    pub fn get(&self, name: &str) -> &str {
        self.values.get(name).map(|(v, _)| v.as_str()).unwrap_or("")
    }

    pub fn is_set(&self, name: &str) -> bool {
        self.values
            .get(name)
            .is_some_and(|(_, s)| *s != Source::Default)
    }
}

/// Parses Go's bool syntax.
pub fn parse_bool(s: &str) -> Option<bool> {
    common::gofmt::parse_go_bool(s).ok()
}

/// Parses `args` (without the program name) and the environment. Errors are etcd's texts.
pub fn parse(args: &[String], env: &[(String, String)]) -> Result<(Action, FlagValues), String> {
    let mut values: BTreeMap<&'static str, (String, Source)> = FLAGS
        .iter()
        .map(|f| (f.name, (f.default.to_string(), Source::Default)))
        .collect();
    let mut action = Action::Run;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some(stripped) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(format!("'{arg}' is not a valid flag"));
        };
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (stripped, None),
        };
        match name {
            "h" | "help" => {
                action = Action::Help;
                continue;
            }
            "version" => {
                action = Action::Version;
                continue;
            }
            "config-file" => {
                let v = match inline {
                    Some(v) => v,
                    None => {
                        let v = args
                            .get(i)
                            .cloned()
                            .ok_or_else(|| format!("flag needs an argument: -{name}"))?;
                        i += 1;
                        v
                    }
                };
                action = Action::ConfigFile(v);
                continue;
            }
            _ => {}
        }
        let spec = spec(name).ok_or_else(|| format!("flag provided but not defined: -{name}"))?;
        let value = if spec.is_bool {
            let v = inline.unwrap_or_else(|| "true".to_string());
            if parse_bool(&v).is_none() {
                return Err(format!(
                    "invalid boolean value \"{v}\" for -{name}: parse error"
                ));
            }
            v
        } else {
            match inline {
                Some(v) => v,
                None => {
                    let v = args
                        .get(i)
                        .cloned()
                        .ok_or_else(|| format!("flag needs an argument: -{name}"))?;
                    i += 1;
                    v
                }
            }
        };
        let value = if spec.name == FEATURE_GATES {
            // Checked as it is read, as etcd's flag is; a repeated flag adds to the gates.
            FeatureGates::default()
                .add(&value)
                .map_err(|e| format!("invalid value \"{value}\" for flag -{name}: {e}"))?;
            match values.get(FEATURE_GATES) {
                Some((prev, Source::CommandLine)) => format!("{prev},{value}"),
                _ => value,
            }
        } else {
            value
        };
        values.insert(spec.name, (value, Source::CommandLine));
    }

    let mut warnings = Vec::new();
    for (k, val) in env {
        let Some(rest) = k.strip_prefix("ETCD_") else {
            continue;
        };
        if rest == "CONFIG_FILE" {
            // Read by Config::from_args, which then ignores the rest of the environment.
            continue;
        }
        let flag = rest.to_ascii_lowercase().replace('_', "-");
        let Some(spec) = spec(&flag) else {
            // ETCD_UNSUPPORTED_ARCH and the like are read elsewhere by etcd; not ours to judge.
            warnings.push(format!("unrecognized environment variable {k}={val}"));
            continue;
        };
        match values.get(spec.name) {
            Some((_, Source::CommandLine)) => {
                return Err(format!(
                    "conflicting environment variable \"{k}\" is shadowed by corresponding command-line flag (either unset environment variable or disable flag)"
                ));
            }
            _ => {
                if spec.is_bool && parse_bool(val).is_none() {
                    return Err(format!("invalid value \"{val}\" for {k}: parse error"));
                }
                if spec.name == FEATURE_GATES
                    && let Err(e) = FeatureGates::default().add(val)
                {
                    return Err(format!("invalid value \"{val}\" for {k}: {e}"));
                }
                values.insert(spec.name, (val.clone(), Source::Env));
            }
        }
    }
    Ok((action, FlagValues { values, warnings }))
}

/// The help text, grouped as etcd's.
pub fn help() -> String {
    let mut out = String::from(
        "Usage:\n\n  etcd [flags]\n    Start an etcd server.\n\n  etcd --version\n    Show the version of etcd.\n\n  etcd -h | --help\n    Show the help information about etcd.\n\n  etcd --config-file\n    Path to the server configuration file. Note that if a configuration file is provided, other command line flags and environment variables will be ignored.\n",
    );
    let mut group = "";
    for f in FLAGS {
        if f.group != group {
            group = f.group;
            out.push_str(&format!("\n{group}:\n"));
        }
        let help = if f.name == FEATURE_GATES {
            super::features::help()
        } else {
            f.help.to_string()
        };
        out.push_str(&format!("  --{} '{}'\n    {help}\n", f.name, f.default));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_flag_syntax() {
        let (a, f) = parse(
            &args(&[
                "-name",
                "n1",
                "--data-dir=/x",
                "--pre-vote=false",
                "--force-new-cluster",
                "--snapshot-count",
                "5",
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(a, Action::Run);
        assert_eq!(f.get("name"), "n1");
        assert_eq!(f.get("data-dir"), "/x");
        assert_eq!(f.get("pre-vote"), "false");
        assert_eq!(f.get("force-new-cluster"), "true");
        assert_eq!(f.get("snapshot-count"), "5");
        assert!(f.is_set("name") && !f.is_set("wal-dir"));
        assert_eq!(
            parse(&args(&["--bogus"]), &[]).unwrap_err(),
            "flag provided but not defined: -bogus"
        );
        assert_eq!(
            parse(&args(&["--name"]), &[]).unwrap_err(),
            "flag needs an argument: -name"
        );
        assert_eq!(
            parse(&args(&["--version"]), &[]).unwrap().0,
            Action::Version
        );
    }

    #[test]
    fn environment_and_its_conflicts() {
        let env = vec![
            ("ETCD_NAME".to_string(), "e".to_string()),
            ("ETCD_FOO".to_string(), "1".to_string()),
        ];
        let (_, f) = parse(&[], &env).unwrap();
        assert_eq!(f.get("name"), "e");
        assert!(f.is_set("name"));
        assert_eq!(
            f.warnings,
            vec!["unrecognized environment variable ETCD_FOO=1".to_string()]
        );
        let err = parse(&args(&["--name", "y"]), &env).unwrap_err();
        assert!(
            err.starts_with("conflicting environment variable \"ETCD_NAME\""),
            "{err}"
        );
        assert_eq!(
            env_name("initial-cluster-token"),
            "ETCD_INITIAL_CLUSTER_TOKEN"
        );
    }
}
