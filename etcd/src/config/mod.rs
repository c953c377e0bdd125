// The server's configuration: etcd 3.5's flags with etcd's defaults, from the command line and
// ETCD_* variables, checked before anything is written (a bad value stops the start).

pub mod duration;
pub mod file;
pub mod flags;
pub mod url;

use std::path::PathBuf;
use std::time::Duration;

pub use duration::{format_go_duration, parse_go_duration};
pub use flags::Action;
pub use url::Url;

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
    pub experimental_initial_corrupt_check: bool,
    pub experimental_corrupt_check_time: Duration,
    pub experimental_enable_lease_checkpoint: bool,
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

/// Parses `name1=url1,name2=url2` (etcd's --initial-cluster).
pub fn parse_initial_cluster(s: &str) -> Result<Vec<(String, Url)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, url) = part
            .split_once('=')
            .ok_or_else(|| format!("missing '=' in initial cluster member {part:?}"))?;
        out.push((name.to_string(), Url::parse(url)?));
    }
    Ok(out)
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
        let cfg = Config {
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
            experimental_initial_corrupt_check: boolean(f, "experimental-initial-corrupt-check")?,
            experimental_corrupt_check_time: duration(f, "experimental-corrupt-check-time")?,
            experimental_enable_lease_checkpoint: boolean(
                f,
                "experimental-enable-lease-checkpoint",
            )?,
            experimental_compaction_batch_limit: num(f, "experimental-compaction-batch-limit")?,
            experimental_compaction_sleep_interval: duration(
                f,
                "experimental-compaction-sleep-interval",
            )?,
            experimental_snapshot_catchup_entries: num(f, "experimental-snapshot-catchup-entries")?,
            experimental_watch_progress_notify_interval: duration(
                f,
                "experimental-watch-progress-notify-interval",
            )?,
            experimental_warning_apply_duration: duration(
                f,
                "experimental-warning-apply-duration",
            )?,
            force_new_cluster: boolean(f, "force-new-cluster")?,
            warnings,
        };
        cfg.verify(f)?;
        Ok(cfg)
    }

    /// The cross-flag checks etcd makes before starting.
    fn verify(&self, f: &flags::FlagValues) -> Result<(), ConfigError> {
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
}
