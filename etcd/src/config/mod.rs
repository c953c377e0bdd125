// The server's configuration: etcd 3.5's flags with etcd's defaults, from the command line and
// ETCD_* variables, checked before anything is written (a bad value stops the start).

pub mod duration;
pub mod features;
pub mod file;
pub mod flags;
// URL parsing is shared with etcdutl's restore, which takes --initial-cluster as well.
pub use common::url;

use std::path::PathBuf;
use std::time::Duration;

pub use duration::{format_go_duration, parse_go_duration};
pub use features::{FeatureGates, Gate};
pub use flags::Action;
use flags::{FEATURE_GATES, FLAGS, GATE_FLAGS, RENAMED};
pub use url::{Url, parse_initial_cluster};

/// etcd's default backend quota (2 GiB) when --quota-backend-bytes is 0.
pub const DEFAULT_QUOTA_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// etcd's hard ceiling for the quota (8 GiB): larger values are capped with a warning.
pub const MAX_QUOTA_BYTES: i64 = 8 * 1024 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionMode {
    Periodic,
    Revision,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
    Panic,
    Fatal,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag that does not parse; the text is etcd's (`invalid value "x" for flag -y: ...`).
    #[error("{0}")]
    Flag(String),
    /// A combination of values etcd refuses when verifying flags.
    #[error("error verifying flags, {0}. See 'etcd --help'.")]
    Verify(String),
    #[error("{0}")]
    Unsupported(String),
    /// A value etcd refuses at start (after flag parsing), e.g. an unknown cipher suite.
    #[error("{0}")]
    Invalid(String),
}

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub data_dir: PathBuf,
    pub wal_dir: Option<PathBuf>,
    pub snapshot_count: u64,
    pub heartbeat_interval: Duration,
    pub election_timeout: Duration,
    pub initial_election_tick_advance: bool,
    pub listen_peer_urls: Vec<Url>,
    pub listen_client_urls: Vec<Url>,
    pub listen_metrics_urls: Vec<Url>,
    pub max_snapshots: usize,
    pub max_wals: usize,
    pub quota_backend_bytes: i64,
    pub backend_batch_interval: Duration,
    pub backend_batch_limit: usize,
    pub max_txn_ops: usize,
    pub max_request_bytes: usize,
    pub max_concurrent_streams: u32,
    pub grpc_keepalive_min_time: Duration,
    pub grpc_keepalive_interval: Duration,
    pub grpc_keepalive_timeout: Duration,
    pub unsafe_no_fsync: bool,
    pub initial_advertise_peer_urls: Vec<Url>,
    /// (name, peer URL) pairs; a name may appear with several URLs.
    pub initial_cluster: Vec<(String, Url)>,
    pub initial_cluster_state: ClusterState,
    pub initial_cluster_token: String,
    pub advertise_client_urls: Vec<Url>,
    pub strict_reconfig_check: bool,
    pub pre_vote: bool,
    pub auto_compaction_mode: CompactionMode,
    pub auto_compaction_retention: String,
    pub cert_file: String,
    pub key_file: String,
    pub client_cert_auth: bool,
    pub trusted_ca_file: String,
    pub auto_tls: bool,
    pub peer_cert_file: String,
    pub peer_key_file: String,
    pub peer_client_cert_auth: bool,
    pub peer_trusted_ca_file: String,
    pub peer_auto_tls: bool,
    pub client_crl_file: String,
    pub client_cert_allowed_hostname: String,
    pub peer_crl_file: String,
    pub peer_cert_allowed_cn: String,
    pub peer_cert_allowed_hostname: String,
    /// --cipher-suites, Go names (checked against what rustls offers at start).
    pub cipher_suites: Vec<String>,
    pub auth_token: String,
    pub bcrypt_cost: u32,
    pub auth_token_ttl: u64,
    pub metrics: String,
    pub log_level: LogLevel,
    pub log_outputs: Vec<String>,
    /// --feature-gates with the --experimental-* flags that stand for gates folded in
    /// (InitialCorruptCheck drives the start-up corruption check).
    pub feature_gates: FeatureGates,
    // The settings etcd 3.6 renamed hold the value of whichever spelling was given
    // (flags::RENAMED); the field names are the 3.5 ones the server reads.
    pub experimental_corrupt_check_time: Duration,
    pub experimental_compaction_batch_limit: usize,
    pub experimental_compaction_sleep_interval: Duration,
    pub experimental_snapshot_catchup_entries: u64,
    pub experimental_watch_progress_notify_interval: Duration,
    pub experimental_warning_apply_duration: Duration,
    pub force_new_cluster: bool,
    /// Non-fatal remarks made while parsing (unknown ETCD_* variables, capped values).
    pub warnings: Vec<String>,
}

fn bad(name: &str, value: &str, why: &str) -> ConfigError {
    ConfigError::Flag(format!("invalid value \"{value}\" for flag -{name}: {why}"))
}

fn num<T: std::str::FromStr>(f: &flags::FlagValues, name: &str) -> Result<T, ConfigError> {
    let v = f.get(name);
    v.trim().parse().map_err(|_| bad(name, v, "parse error"))
}

fn boolean(f: &flags::FlagValues, name: &str) -> Result<bool, ConfigError> {
    let v = f.get(name);
    flags::parse_bool(v).ok_or_else(|| bad(name, v, "parse error"))
}

fn urls(f: &flags::FlagValues, name: &str) -> Result<Vec<Url>, ConfigError> {
    let v = f.get(name);
    Url::parse_list(v).map_err(|e| bad(name, v, &e))
}

fn duration(f: &flags::FlagValues, name: &str) -> Result<Duration, ConfigError> {
    let v = f.get(name);
    parse_go_duration(v).map_err(|e| bad(name, v, &e))
}

fn millis(f: &flags::FlagValues, name: &str) -> Result<Duration, ConfigError> {
    Ok(Duration::from_millis(num::<u64>(f, name)?))
}

fn nonzero(d: Duration, default: Duration) -> Duration {
    if d.is_zero() { default } else { d }
}

/// The spelling of a renamed setting to read: the --experimental-* one when only it is set.
fn current(f: &flags::FlagValues, new: &'static str) -> &'static str {
    RENAMED
        .iter()
        .find(|(old, n)| *n == new && f.is_set(old))
        .map_or(new, |(old, _)| old)
}

/// --feature-gates, then the --experimental-* flags that stand for gates, as etcd 3.6 folds
/// them in: naming a gate both ways is an error (etcd looks for the gate's name in the
/// flag's value, so LeaseCheckpointPersist=... also counts for LeaseCheckpoint).
fn feature_gates(f: &flags::FlagValues) -> Result<FeatureGates, ConfigError> {
    let mut gates = FeatureGates::default();
    let value = f.get(FEATURE_GATES);
    gates
        .add(value)
        .map_err(|e| bad(FEATURE_GATES, value, &e.to_string()))?;
    let rendered = gates.rendered();
    let mut from_flags = Vec::new();
    for (flag, gate) in GATE_FLAGS {
        if !f.is_set(flag) {
            continue;
        }
        let on = boolean(f, flag)?;
        let name = features::spec(*gate).name;
        if rendered.contains(name) {
            let now = gates.enabled(*gate);
            return Err(ConfigError::Verify(format!(
                "cannot specify both flags: --{flag}={on} and --{FEATURE_GATES}={name}={now} at the same time, please just use --{FEATURE_GATES}={name}={now}"
            )));
        }
        from_flags.push((*gate, on));
    }
    for (gate, on) in from_flags {
        gates.set(gate, on);
    }
    Ok(gates)
}

/// The value of a --config-file (or -config-file) argument, if any.
fn config_file_arg(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let name = a.trim_start_matches('-');
        if name.len() == a.len() {
            continue;
        }
        if let Some(v) = name.strip_prefix("config-file=") {
            return Some(v.to_string());
        }
        if name == "config-file" {
            return it.next().cloned();
        }
    }
    None
}

impl Config {
    /// Builds the config from command-line `args` (without the program name) and `env`.
    pub fn from_args(
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(Action, Config), ConfigError> {
        // As etcd: a configuration file replaces every flag and environment variable, so it
        // is looked for before they are parsed (they may even conflict).
        let file = config_file_arg(args).or_else(|| {
            env.iter()
                .find(|(k, _)| k == "ETCD_CONFIG_FILE")
                .map(|(_, v)| v.clone())
        });
        let help_or_version = args
            .iter()
            .any(|a| matches!(a.trim_start_matches('-'), "h" | "help" | "version"));
        let (action, f) = match file {
            Some(path) if !help_or_version => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    ConfigError::Unsupported(format!(
                        "cannot read the configuration file {path}: {e}"
                    ))
                })?;
                let (file_args, warnings) =
                    file::to_args(&path, &text).map_err(ConfigError::Unsupported)?;
                let (_, mut f) = flags::parse(&file_args, &[]).map_err(ConfigError::Flag)?;
                f.warnings.extend(warnings);
                (Action::Run, f)
            }
            _ => flags::parse(args, env).map_err(ConfigError::Flag)?,
        };
        let cfg = Config::from_flags(&f)?;
        Ok((action, cfg))
    }

    fn from_flags(f: &flags::FlagValues) -> Result<Config, ConfigError> {
        let name = f.get("name").to_string();
        let data_dir = if f.is_set("data-dir") {
            PathBuf::from(f.get("data-dir"))
        } else {
            PathBuf::from(format!("{name}.etcd"))
        };
        let initial_advertise_peer_urls = urls(f, "initial-advertise-peer-urls")?;
        // As etcd: without --initial-cluster, a member named by --name bootstraps alone on its
        // advertised peer URLs.
        let initial_cluster = if f.is_set("initial-cluster") {
            let v = f.get("initial-cluster");
            parse_initial_cluster(v).map_err(|e| bad("initial-cluster", v, &e))?
        } else {
            initial_advertise_peer_urls
                .iter()
                .map(|u| (name.clone(), u.clone()))
                .collect()
        };
        let initial_cluster_state = match f.get("initial-cluster-state") {
            "new" => ClusterState::New,
            "existing" => ClusterState::Existing,
            v => return Err(bad("initial-cluster-state", v, "invalid value")),
        };
        let auto_compaction_mode = match f.get("auto-compaction-mode") {
            "periodic" => CompactionMode::Periodic,
            "revision" => CompactionMode::Revision,
            v => return Err(bad("auto-compaction-mode", v, "invalid value")),
        };
        let log_level = match f.get("log-level") {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warn" => LogLevel::Warn,
            "error" => LogLevel::Error,
            "panic" | "dpanic" => LogLevel::Panic,
            "fatal" => LogLevel::Fatal,
            v => return Err(bad("log-level", v, "invalid value")),
        };
        if f.get("logger") != "zap" {
            return Err(bad("logger", f.get("logger"), "only 'zap' is supported"));
        }
        let batch_interval = duration(f, "backend-batch-interval")?;
        let batch_limit: usize = num(f, "backend-batch-limit")?;
        let mut warnings = f.warnings.clone();
        let mut quota: i64 = num(f, "quota-backend-bytes")?;
        if quota < 0 {
            return Err(bad(
                "quota-backend-bytes",
                f.get("quota-backend-bytes"),
                "must not be negative",
            ));
        }
        if quota == 0 {
            quota = DEFAULT_QUOTA_BYTES;
        } else if quota > MAX_QUOTA_BYTES {
            warnings.push(format!(
                "quota exceeds the maximum value; using the maximum {MAX_QUOTA_BYTES} bytes"
            ));
            quota = MAX_QUOTA_BYTES;
        }
        let mut cfg = Config {
            name,
            data_dir,
            wal_dir: Some(f.get("wal-dir"))
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            snapshot_count: num(f, "snapshot-count")?,
            heartbeat_interval: millis(f, "heartbeat-interval")?,
            election_timeout: millis(f, "election-timeout")?,
            initial_election_tick_advance: boolean(f, "initial-election-tick-advance")?,
            listen_peer_urls: urls(f, "listen-peer-urls")?,
            listen_client_urls: urls(f, "listen-client-urls")?,
            listen_metrics_urls: urls(f, "listen-metrics-urls")?,
            max_snapshots: num(f, "max-snapshots")?,
            max_wals: num(f, "max-wals")?,
            quota_backend_bytes: quota,
            backend_batch_interval: if batch_interval.is_zero() {
                Duration::from_millis(100)
            } else {
                batch_interval
            },
            backend_batch_limit: if batch_limit == 0 {
                10_000
            } else {
                batch_limit
            },
            max_txn_ops: num(f, "max-txn-ops")?,
            max_request_bytes: num(f, "max-request-bytes")?,
            max_concurrent_streams: num(f, "max-concurrent-streams")?,
            grpc_keepalive_min_time: duration(f, "grpc-keepalive-min-time")?,
            grpc_keepalive_interval: duration(f, "grpc-keepalive-interval")?,
            grpc_keepalive_timeout: duration(f, "grpc-keepalive-timeout")?,
            unsafe_no_fsync: boolean(f, "unsafe-no-fsync")?,
            initial_advertise_peer_urls,
            initial_cluster,
            initial_cluster_state,
            initial_cluster_token: f.get("initial-cluster-token").to_string(),
            advertise_client_urls: urls(f, "advertise-client-urls")?,
            strict_reconfig_check: boolean(f, "strict-reconfig-check")?,
            pre_vote: boolean(f, "pre-vote")?,
            auto_compaction_mode,
            auto_compaction_retention: f.get("auto-compaction-retention").to_string(),
            cert_file: f.get("cert-file").to_string(),
            key_file: f.get("key-file").to_string(),
            client_cert_auth: boolean(f, "client-cert-auth")?,
            trusted_ca_file: f.get("trusted-ca-file").to_string(),
            auto_tls: boolean(f, "auto-tls")?,
            peer_cert_file: f.get("peer-cert-file").to_string(),
            peer_key_file: f.get("peer-key-file").to_string(),
            peer_client_cert_auth: boolean(f, "peer-client-cert-auth")?,
            peer_trusted_ca_file: f.get("peer-trusted-ca-file").to_string(),
            peer_auto_tls: boolean(f, "peer-auto-tls")?,
            client_crl_file: f.get("client-crl-file").to_string(),
            client_cert_allowed_hostname: f.get("client-cert-allowed-hostname").to_string(),
            peer_crl_file: f.get("peer-crl-file").to_string(),
            peer_cert_allowed_cn: f.get("peer-cert-allowed-cn").to_string(),
            peer_cert_allowed_hostname: f.get("peer-cert-allowed-hostname").to_string(),
            cipher_suites: f
                .get("cipher-suites")
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            auth_token: f.get("auth-token").to_string(),
            bcrypt_cost: num(f, "bcrypt-cost")?,
            auth_token_ttl: num(f, "auth-token-ttl")?,
            metrics: f.get("metrics").to_string(),
            log_level,
            log_outputs: f
                .get("log-outputs")
                .split(',')
                .map(|s| s.trim().to_string())
                .collect(),
            feature_gates: FeatureGates::default(),
            experimental_corrupt_check_time: duration(f, current(f, "corrupt-check-time"))?,
            // 0 means etcd's default for these three, as etcd's mvcc and watch take it.
            experimental_compaction_batch_limit: match num(f, current(f, "compaction-batch-limit"))?
            {
                0 => 1000,
                n => n,
            },
            experimental_compaction_sleep_interval: nonzero(
                duration(f, current(f, "compaction-sleep-interval"))?,
                Duration::from_millis(10),
            ),
            experimental_snapshot_catchup_entries: num(f, current(f, "snapshot-catchup-entries"))?,
            experimental_watch_progress_notify_interval: nonzero(
                duration(f, current(f, "watch-progress-notify-interval"))?,
                Duration::from_secs(600),
            ),
            experimental_warning_apply_duration: duration(f, current(f, "warning-apply-duration"))?,
            force_new_cluster: boolean(f, "force-new-cluster")?,
            warnings,
        };
        // As etcd: flag values parse first, then the gates and their --experimental-* flags
        // are reconciled, then the cross-flag checks.
        cfg.feature_gates = feature_gates(f)?;
        for flag in FLAGS.iter().map(|s| s.name).filter(|n| f.is_set(n)) {
            cfg.warnings.extend(flags::deprecation_warning(flag));
        }
        cfg.verify(f)?;
        Ok(cfg)
    }

    /// The cross-flag checks etcd makes before starting.
    fn verify(&self, f: &flags::FlagValues) -> Result<(), ConfigError> {
        for (old, new) in RENAMED {
            if f.is_set(old) && f.is_set(new) {
                return Err(ConfigError::Verify(format!(
                    "cannot set --{old} and --{new} at the same time, please use --{new} only"
                )));
            }
        }
        let hb = self.heartbeat_interval.as_millis();
        let et = self.election_timeout.as_millis();
        if hb == 0 {
            return Err(ConfigError::Verify(
                "--heartbeat-interval must be greater than 0".into(),
            ));
        }
        if 5 * hb > et {
            return Err(ConfigError::Verify(format!(
                "--election-timeout[{et}ms] should be at least as 5 times as --heartbeat-interval[{hb}ms]"
            )));
        }
        if et > 50_000 {
            return Err(ConfigError::Verify(format!(
                "--election-timeout[{et}ms] is too long, and should be set less than 50000ms"
            )));
        }
        if !(4..=31).contains(&self.bcrypt_cost) {
            return Err(bad(
                "bcrypt-cost",
                f.get("bcrypt-cost"),
                "must be between 4 and 31",
            ));
        }
        if f.is_set("listen-client-urls") && !f.is_set("advertise-client-urls") {
            return Err(ConfigError::Verify(
                "--advertise-client-urls is required when --listen-client-urls is set explicitly"
                    .into(),
            ));
        }
        if self.initial_cluster_state == ClusterState::New {
            let mine: Vec<&Url> = self
                .initial_cluster
                .iter()
                .filter(|(n, _)| *n == self.name)
                .map(|(_, u)| u)
                .collect();
            if mine.is_empty() {
                return Err(ConfigError::Verify(format!(
                    "couldn't find local name \"{}\" in the initial cluster configuration",
                    self.name
                )));
            }
            let mut a: Vec<&str> = mine.iter().map(|u| u.as_str()).collect();
            let mut b: Vec<&str> = self
                .initial_advertise_peer_urls
                .iter()
                .map(Url::as_str)
                .collect();
            a.sort_unstable();
            b.sort_unstable();
            if a != b {
                return Err(ConfigError::Verify(format!(
                    "--initial-cluster has {}={} but missing from --initial-advertise-peer-urls={} (resolved urls: \"{}\" != \"{}\")",
                    self.name,
                    a.join(","),
                    b.join(","),
                    a.join(","),
                    b.join(",")
                )));
            }
        }
        crate::tls::verify_config(self).map_err(ConfigError::Invalid)?;
        let gates = &self.feature_gates;
        if gates.enabled(Gate::LeaseCheckpointPersist) && !gates.enabled(Gate::LeaseCheckpoint) {
            return Err(ConfigError::Verify(
                "enabling feature gate LeaseCheckpointPersist requires enabling feature gate LeaseCheckpoint".into(),
            ));
        }
        if let Some((name, why)) = gates.refused().into_iter().next() {
            let by = GATE_FLAGS
                .iter()
                .find(|(flag, g)| features::spec(*g).name == name && f.is_set(flag))
                .map(|(flag, _)| format!("--{flag}"))
                .unwrap_or_else(|| format!("--{FEATURE_GATES}"));
            return Err(ConfigError::Unsupported(format!(
                "{by} turns on feature gate {name}, which etcd-rs does not support: {why}; start without it"
            )));
        }
        for (flag, unsupported) in [
            ("discovery", !f.get("discovery").is_empty()),
            ("discovery-srv", !f.get("discovery-srv").is_empty()),
            ("enable-v2", self.flag_true(f, "enable-v2")),
            ("enable-pprof", self.flag_true(f, "enable-pprof")),
        ] {
            if unsupported {
                return Err(ConfigError::Unsupported(format!(
                    "--{flag} is not supported by etcd-rs; start without it"
                )));
            }
        }
        Ok(())
    }

    fn flag_true(&self, f: &flags::FlagValues, name: &str) -> bool {
        flags::parse_bool(f.get(name)).unwrap_or(false)
    }

    /// The WAL directory: --wal-dir, or `<data-dir>/member/wal`.
    pub fn wal_dir(&self) -> PathBuf {
        self.wal_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("member").join("wal"))
    }

    pub fn snap_dir(&self) -> PathBuf {
        self.data_dir.join("member").join("snap")
    }

    pub fn backend_path(&self) -> PathBuf {
        self.snap_dir().join("db")
    }

    /// Raft ticks per election timeout.
    pub fn election_ticks(&self) -> usize {
        (self.election_timeout.as_millis() / self.heartbeat_interval.as_millis().max(1)) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(args: &[&str]) -> Result<Config, ConfigError> {
        let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Config::from_args(&a, &[]).map(|(_, c)| c)
    }

    #[test]
    fn defaults_are_etcds() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.name, "default");
        assert_eq!(c.data_dir, PathBuf::from("default.etcd"));
        assert_eq!(c.wal_dir(), PathBuf::from("default.etcd/member/wal"));
        assert_eq!(c.snapshot_count, 100_000);
        assert_eq!(c.election_ticks(), 10);
        assert_eq!(c.backend_batch_interval, Duration::from_millis(100));
        assert_eq!(c.backend_batch_limit, 10_000);
        assert_eq!(c.quota_backend_bytes, DEFAULT_QUOTA_BYTES);
        assert_eq!(c.max_request_bytes, 1_572_864);
        assert_eq!(c.max_txn_ops, 128);
        assert!(c.pre_vote && c.strict_reconfig_check);
        assert_eq!(c.initial_cluster.len(), 1);
        assert_eq!(c.initial_cluster[0].0, "default");
        assert_eq!(c.listen_client_urls[0].as_str(), "http://localhost:2379");
    }

    #[test]
    fn name_sets_data_dir_and_initial_cluster() {
        let c = cfg(&[
            "--name",
            "infra1",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:2380",
        ])
        .unwrap();
        assert_eq!(c.data_dir, PathBuf::from("infra1.etcd"));
        assert_eq!(c.initial_cluster[0].0, "infra1");
    }

    #[test]
    fn bad_values_get_etcds_messages() {
        let e = cfg(&["--snapshot-count", "abc"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid value \"abc\" for flag -snapshot-count: parse error"
        );
        let e = cfg(&["--listen-client-urls", "foo"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid value \"foo\" for flag -listen-client-urls: URL scheme must be http, https, unix, or unixs: foo"
        );
        let e = cfg(&["--initial-cluster-state", "bad"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid value \"bad\" for flag -initial-cluster-state: invalid value"
        );
        let e = cfg(&["--heartbeat-interval", "1000", "--election-timeout", "500"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "error verifying flags, --election-timeout[500ms] should be at least as 5 times as --heartbeat-interval[1000ms]. See 'etcd --help'."
        );
        assert!(
            cfg(&["--name", "x", "--initial-cluster", "y=http://a:1"])
                .unwrap_err()
                .to_string()
                .contains("couldn't find local name \"x\"")
        );
        assert!(cfg(&["--discovery", "http://d:1"]).is_err());
    }

    #[test]
    fn tls_flags_are_checked_as_etcd() {
        let e = cfg(&[
            "--listen-client-urls",
            "https://127.0.0.1:2379",
            "--advertise-client-urls",
            "https://127.0.0.1:2379",
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "TLS key/cert (--cert-file, --key-file) must be provided for client url https://127.0.0.1:2379 with HTTPS scheme"
        );
        let e = cfg(&["--cipher-suites", "FOO"]).unwrap_err().to_string();
        assert_eq!(e, "unexpected TLS cipher suite \"FOO\"");
        let e = cfg(&[
            "--listen-peer-urls",
            "https://127.0.0.1:2380",
            "--initial-advertise-peer-urls",
            "https://127.0.0.1:2380",
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "cannot listen on TLS for 127.0.0.1:2380: KeyFile and CertFile are not presented"
        );
        // Auto TLS stands in for the files; known suites parse; peer flags are kept.
        let c = cfg(&[
            "--listen-client-urls",
            "https://127.0.0.1:2379",
            "--advertise-client-urls",
            "https://127.0.0.1:2379",
            "--auto-tls",
            "--peer-auto-tls",
            "--peer-cert-allowed-cn",
            "peer",
            "--cipher-suites",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        ])
        .unwrap();
        assert!(c.auto_tls && c.peer_auto_tls);
        assert_eq!(c.peer_cert_allowed_cn, "peer");
        assert_eq!(c.cipher_suites.len(), 2);
        assert!(cfg(&["--cipher-suites", "TLS_RSA_WITH_AES_128_CBC_SHA"]).is_err());
    }

    fn cfg_env(args: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let e: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_args(&a, &e).map(|(_, c)| c)
    }

    fn err(args: &[&str], env: &[(&str, &str)]) -> String {
        cfg_env(args, env).unwrap_err().to_string()
    }

    /// The value each renamed setting takes in the Config, as text.
    fn renamed_value(c: &Config, new: &str) -> String {
        match new {
            "corrupt-check-time" => format_go_duration(c.experimental_corrupt_check_time),
            "compaction-batch-limit" => c.experimental_compaction_batch_limit.to_string(),
            "compaction-sleep-interval" => {
                format_go_duration(c.experimental_compaction_sleep_interval)
            }
            "watch-progress-notify-interval" => {
                format_go_duration(c.experimental_watch_progress_notify_interval)
            }
            "warning-apply-duration" => format_go_duration(c.experimental_warning_apply_duration),
            "snapshot-catchup-entries" => c.experimental_snapshot_catchup_entries.to_string(),
            other => panic!("no field for {other}"),
        }
    }

    #[test]
    fn renamed_flags_take_either_spelling_but_not_both() {
        for (old, new, value) in [
            (
                "experimental-corrupt-check-time",
                "corrupt-check-time",
                "3m0s",
            ),
            (
                "experimental-compaction-batch-limit",
                "compaction-batch-limit",
                "77",
            ),
            (
                "experimental-compaction-sleep-interval",
                "compaction-sleep-interval",
                "3ms",
            ),
            (
                "experimental-watch-progress-notify-interval",
                "watch-progress-notify-interval",
                "5s",
            ),
            (
                "experimental-warning-apply-duration",
                "warning-apply-duration",
                "2s",
            ),
            (
                "experimental-snapshot-catchup-entries",
                "snapshot-catchup-entries",
                "123",
            ),
        ] {
            assert!(RENAMED.contains(&(old, new)), "{old}");
            let default = renamed_value(&cfg(&[]).unwrap(), new);
            assert_ne!(
                default, value,
                "{new}: pick a value that is not the default"
            );
            for args in [
                vec![format!("--{old}={value}")],
                vec![format!("--{new}={value}")],
                vec![format!("--{new}"), value.to_string()],
            ] {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                assert_eq!(renamed_value(&cfg(&a).unwrap(), new), value, "{a:?}");
            }
            // The environment, both spellings.
            for var in [flags::env_name(old), flags::env_name(new)] {
                let c = cfg_env(&[], &[(&var, value)]).unwrap();
                assert_eq!(renamed_value(&c, new), value, "{var}");
            }
            let both = format!(
                "error verifying flags, cannot set --{old} and --{new} at the same time, please use --{new} only. See 'etcd --help'."
            );
            let (o, n) = (format!("--{old}={value}"), format!("--{new}={value}"));
            assert_eq!(err(&[&o, &n], &[]), both);
            // A flag and the other spelling's variable count as both, as in etcd.
            assert_eq!(err(&[&n], &[(&flags::env_name(old), value)]), both);
        }
    }

    #[test]
    fn deprecated_spellings_warn_as_etcd_3_6() {
        let c = cfg(&[
            "--experimental-watch-progress-notify-interval=5s",
            "--experimental-compaction-sleep-interval=1ms",
            "--experimental-txn-mode-write-with-shared-buffer=false",
            "--snapshot-catchup-entries=10",
        ])
        .unwrap();
        assert_eq!(
            c.warnings,
            [
                "--experimental-txn-mode-write-with-shared-buffer is deprecated in v3.6 and will be decommissioned in v3.7. Use '--feature-gates=TxnModeWriteWithSharedBuffer=true' instead.",
                "--experimental-compaction-sleep-interval is deprecated in v3.6 and will be decommissioned in v3.7. Use 'compaction-sleep-interval' instead.",
                "--experimental-watch-progress-notify-interval is deprecated in v3.6 and will be decommissioned in v3.7. Use '--watch-progress-notify-interval' instead.",
            ]
        );
        assert!(
            cfg(&["--watch-progress-notify-interval=5s"])
                .unwrap()
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn zero_means_etcds_default() {
        let c = cfg(&[
            "--compaction-batch-limit=0",
            "--compaction-sleep-interval=0",
            "--watch-progress-notify-interval=0",
        ])
        .unwrap();
        assert_eq!(c.experimental_compaction_batch_limit, 1000);
        assert_eq!(
            c.experimental_compaction_sleep_interval,
            Duration::from_millis(10)
        );
        assert_eq!(
            c.experimental_watch_progress_notify_interval,
            Duration::from_secs(600)
        );
    }

    #[test]
    fn feature_gates_drive_and_refuse_as_documented() {
        let on = |c: &Config| c.feature_gates.enabled(Gate::InitialCorruptCheck);
        assert!(!on(&cfg(&[]).unwrap()));
        assert!(on(
            &cfg(&["--feature-gates=InitialCorruptCheck=true"]).unwrap()
        ));
        assert!(on(&cfg(&["--experimental-initial-corrupt-check"]).unwrap()));
        assert!(on(&cfg_env(
            &[],
            &[("ETCD_FEATURE_GATES", "InitialCorruptCheck=true")]
        )
        .unwrap()));
        assert!(on(&cfg_env(
            &[],
            &[("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true")]
        )
        .unwrap()));
        // A repeated flag adds to the gates, as etcd's.
        let c = cfg(&[
            "--feature-gates",
            "InitialCorruptCheck=true",
            "--feature-gates=TxnModeWriteWithSharedBuffer=false",
        ])
        .unwrap();
        assert!(on(&c) && !c.feature_gates.enabled(Gate::TxnModeWriteWithSharedBuffer));
        // Accepted, changing nothing observable.
        for g in [
            "TxnModeWriteWithSharedBuffer=false",
            "FastLeaseKeepAlive=true",
            "CompactHashCheck=false",
            "LeaseCheckpoint=false",
            "AllBeta=true",
        ] {
            cfg(&[&format!("--feature-gates={g}")]).unwrap_or_else(|e| panic!("{g}: {e}"));
        }
        cfg(&["--experimental-txn-mode-write-with-shared-buffer=false"]).unwrap();
        // Features etcd-rs does not have are refused, not ignored.
        assert_eq!(
            err(&["--feature-gates=CompactHashCheck=true"], &[]),
            "--feature-gates turns on feature gate CompactHashCheck, which etcd-rs does not support: the leader's check of its followers' hashes at their compaction revisions is not implemented (--corrupt-check-time's periodic check is); start without it"
        );
        assert!(
            err(&["--experimental-enable-lease-checkpoint"], &[])
                .starts_with("--experimental-enable-lease-checkpoint turns on feature gate LeaseCheckpoint, which etcd-rs does not support: ")
        );
        assert!(
            err(&["--feature-gates=AllAlpha=true"], &[])
                .starts_with("--feature-gates turns on feature gate CompactHashCheck")
        );
        for g in ["SetMemberLocalAddr", "StopGRPCServiceOnDefrag"] {
            let e = err(&[&format!("--feature-gates={g}=true")], &[]);
            assert!(
                e.contains(&format!("feature gate {g}, which etcd-rs does not support")),
                "{e}"
            );
        }
        // etcd's own rule comes first.
        assert_eq!(
            err(&["--feature-gates=LeaseCheckpointPersist=true"], &[]),
            "error verifying flags, enabling feature gate LeaseCheckpointPersist requires enabling feature gate LeaseCheckpoint. See 'etcd --help'."
        );
    }

    #[test]
    fn feature_gate_errors_are_etcds() {
        assert_eq!(
            err(&["--feature-gates=Foo=true"], &[]),
            "invalid value \"Foo=true\" for flag -feature-gates: unrecognized feature gate: Foo"
        );
        assert_eq!(
            err(&["--feature-gates", "InitialCorruptCheck"], &[]),
            "invalid value \"InitialCorruptCheck\" for flag -feature-gates: missing bool value for InitialCorruptCheck"
        );
        assert_eq!(
            err(&[], &[("ETCD_FEATURE_GATES", "Foo=true")]),
            "invalid value \"Foo=true\" for ETCD_FEATURE_GATES: unrecognized feature gate: Foo"
        );
        // The gate and its 3.5 flag together.
        assert_eq!(
            err(
                &[
                    "--experimental-initial-corrupt-check=true",
                    "--feature-gates=InitialCorruptCheck=true"
                ],
                &[]
            ),
            "error verifying flags, cannot specify both flags: --experimental-initial-corrupt-check=true and --feature-gates=InitialCorruptCheck=true at the same time, please just use --feature-gates=InitialCorruptCheck=true. See 'etcd --help'."
        );
        // etcd searches the flag's value for the gate's name: LeaseCheckpointPersist counts.
        assert!(
            err(
                &[
                    "--experimental-enable-lease-checkpoint=false",
                    "--feature-gates=LeaseCheckpointPersist=false"
                ],
                &[]
            )
            .contains("cannot specify both flags: --experimental-enable-lease-checkpoint=false and --feature-gates=LeaseCheckpoint=false")
        );
        assert!(
            err(
                &[
                    "--feature-gates=AllAlpha=false",
                    "--experimental-initial-corrupt-check"
                ],
                &[]
            )
            .contains("--feature-gates=InitialCorruptCheck=false at the same time")
        );
    }

    #[test]
    fn kubeadms_command_lines_parse() {
        let common = [
            "--advertise-client-urls=https://10.0.0.5:2379",
            "--cert-file=/etc/kubernetes/pki/etcd/server.crt",
            "--client-cert-auth=true",
            "--data-dir=/var/lib/etcd",
            "--initial-advertise-peer-urls=https://10.0.0.5:2380",
            "--initial-cluster=cp1=https://10.0.0.5:2380",
            "--key-file=/etc/kubernetes/pki/etcd/server.key",
            "--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.5:2379",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            "--listen-peer-urls=https://10.0.0.5:2380",
            "--name=cp1",
            "--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt",
            "--peer-client-cert-auth=true",
            "--peer-key-file=/etc/kubernetes/pki/etcd/peer.key",
            "--peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
            "--snapshot-count=10000",
            "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
        ];
        for era in [
            &[
                "--feature-gates=InitialCorruptCheck=true",
                "--watch-progress-notify-interval=5s",
            ],
            &[
                "--experimental-initial-corrupt-check=true",
                "--experimental-watch-progress-notify-interval=5s",
            ],
        ] {
            let args: Vec<&str> = common.iter().chain(era.iter()).copied().collect();
            let c = cfg(&args).unwrap();
            assert!(c.feature_gates.enabled(Gate::InitialCorruptCheck));
            assert_eq!(
                c.experimental_watch_progress_notify_interval,
                Duration::from_secs(5)
            );
            assert_eq!(c.snapshot_count, 10_000);
            assert!(c.client_cert_auth && c.peer_client_cert_auth);
            assert_eq!(c.listen_metrics_urls[0].as_str(), "http://127.0.0.1:2381");
        }
    }

    #[test]
    fn config_file_keys_follow_etcds_names() {
        let dir = tempfile::tempdir().unwrap();
        let run = |yaml: &str| {
            let p = dir.path().join("etcd.yml");
            std::fs::write(&p, yaml).unwrap();
            cfg(&["--config-file", p.to_str().unwrap()])
        };
        let c = run("feature-gates: InitialCorruptCheck=true,TxnModeWriteWithSharedBuffer=false\nwatch-progress-notify-interval: 5s\ncompaction-batch-limit: 20\n").unwrap();
        assert!(c.feature_gates.enabled(Gate::InitialCorruptCheck));
        assert!(!c.feature_gates.enabled(Gate::TxnModeWriteWithSharedBuffer));
        assert_eq!(
            c.experimental_watch_progress_notify_interval,
            Duration::from_secs(5)
        );
        assert_eq!(c.experimental_compaction_batch_limit, 20);
        // 3.5 keys, including the one whose YAML name is not its flag's.
        let c = run("experimental-initial-corrupt-check: true\nexperimental-watch-progress-notify-interval: 7s\nexperimental-snapshot-catch-up-entries: 99\n").unwrap();
        assert!(c.feature_gates.enabled(Gate::InitialCorruptCheck));
        assert_eq!(
            c.experimental_watch_progress_notify_interval,
            Duration::from_secs(7)
        );
        assert_eq!(c.experimental_snapshot_catchup_entries, 99);
        assert_eq!(
            run("experimental-warning-apply-duration: 1s\nwarning-apply-duration: 2s\n")
                .unwrap_err()
                .to_string(),
            "error verifying flags, cannot set --experimental-warning-apply-duration and --warning-apply-duration at the same time, please use --warning-apply-duration only. See 'etcd --help'."
        );
        assert!(
            run("experimental-initial-corrupt-check: true\nfeature-gates: InitialCorruptCheck=true\n")
                .unwrap_err()
                .to_string()
                .contains("cannot specify both flags")
        );
        assert_eq!(
            run("feature-gates: Nope=true\n").unwrap_err().to_string(),
            "invalid value \"Nope=true\" for flag -feature-gates: unrecognized feature gate: Nope"
        );
    }
}
