//! The flags every command takes (etcd's global flags), each with its ETCDCTL_* environment
//! variable, and the parsers that make clap accept what Go's pflag accepts.

use std::time::Duration;

use clap::Args;

use crate::util::{parse_go_bool, parse_go_duration};

/// Go's pflag booleans: `--flag`, `--flag=true|false|1|0|t|f...`, never `--flag false`.
pub fn go_bool(s: &str) -> Result<bool, String> {
    parse_go_bool(s)
}

/// A Go duration flag value ("2s", "500ms").
pub fn go_duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s)
}

#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// gRPC endpoints
    #[arg(
        long,
        global = true,
        env = "ETCDCTL_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:2379"
    )]
    pub endpoints: Vec<String>,

    /// dial timeout for client connections
    #[arg(long, global = true, env = "ETCDCTL_DIAL_TIMEOUT", default_value = "2s", value_parser = go_duration)]
    pub dial_timeout: Duration,

    /// timeout for short running command (excluding dial timeout)
    #[arg(long, global = true, env = "ETCDCTL_COMMAND_TIMEOUT", default_value = "5s", value_parser = go_duration)]
    pub command_timeout: Duration,

    /// keepalive time for client connections
    #[arg(long, global = true, env = "ETCDCTL_KEEPALIVE_TIME", default_value = "2s", value_parser = go_duration)]
    pub keepalive_time: Duration,

    /// keepalive timeout for client connections
    #[arg(long, global = true, env = "ETCDCTL_KEEPALIVE_TIMEOUT", default_value = "6s", value_parser = go_duration)]
    pub keepalive_timeout: Duration,

    /// username[:password] for authentication (prompt if password is not supplied)
    #[arg(long, global = true, env = "ETCDCTL_USER")]
    pub user: Option<String>,

    /// password for authentication (if this option is used, --user option shouldn't include password)
    #[arg(long, global = true, env = "ETCDCTL_PASSWORD")]
    pub password: Option<String>,

    /// verify certificates of TLS-enabled secure servers using this CA bundle
    #[arg(long, global = true, env = "ETCDCTL_CACERT")]
    pub cacert: Option<String>,

    /// identify secure client using this TLS certificate file
    #[arg(long, global = true, env = "ETCDCTL_CERT")]
    pub cert: Option<String>,

    /// identify secure client using this TLS key file
    #[arg(long, global = true, env = "ETCDCTL_KEY")]
    pub key: Option<String>,

    /// skip server certificate verification (CAUTION: this option should be enabled only for testing purposes)
    #[arg(long, global = true, env = "ETCDCTL_INSECURE_SKIP_TLS_VERIFY", default_value = "false",
          num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub insecure_skip_tls_verify: bool,

    /// disable transport security for client connections
    #[arg(long, global = true, env = "ETCDCTL_INSECURE_TRANSPORT", default_value = "true",
          num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub insecure_transport: bool,

    /// accept insecure SRV records describing cluster endpoints
    #[arg(long, global = true, env = "ETCDCTL_INSECURE_DISCOVERY", default_value = "true",
          num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub insecure_discovery: bool,

    /// domain name to query for SRV records describing cluster endpoints
    #[arg(short = 'd', long, global = true, env = "ETCDCTL_DISCOVERY_SRV")]
    pub discovery_srv: Option<String>,

    /// service name to query when using DNS discovery
    #[arg(long, global = true, env = "ETCDCTL_DISCOVERY_SRV_NAME")]
    pub discovery_srv_name: Option<String>,

    /// set the output format (fields, json, protobuf, simple, table)
    #[arg(
        short = 'w',
        long,
        global = true,
        env = "ETCDCTL_WRITE_OUT",
        default_value = "simple"
    )]
    pub write_out: String,

    /// print byte strings as hex encoded strings
    #[arg(long, global = true, env = "ETCDCTL_HEX", default_value = "false",
          num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub hex: bool,

    /// enable client-side debug logging
    #[arg(long, global = true, env = "ETCDCTL_DEBUG", default_value = "false",
          num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub debug: bool,
}

impl GlobalArgs {
    /// What `--debug` prints first: every global flag as its ETCDCTL_* variable with the value
    /// in use, sorted, as etcd's etcdctl prints them.
    pub fn debug_lines(&self) -> Vec<String> {
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let dur = |d: Duration| crate::util::format_go_duration(d);
        let mut v = vec![
            ("CACERT", opt(&self.cacert)),
            ("CERT", opt(&self.cert)),
            ("COMMAND_TIMEOUT", dur(self.command_timeout)),
            ("DEBUG", self.debug.to_string()),
            ("DIAL_TIMEOUT", dur(self.dial_timeout)),
            ("DISCOVERY_SRV", opt(&self.discovery_srv)),
            ("DISCOVERY_SRV_NAME", opt(&self.discovery_srv_name)),
            ("ENDPOINTS", format!("[{}]", self.endpoints.join(","))),
            ("HEX", self.hex.to_string()),
            ("INSECURE_DISCOVERY", self.insecure_discovery.to_string()),
            (
                "INSECURE_SKIP_TLS_VERIFY",
                self.insecure_skip_tls_verify.to_string(),
            ),
            ("INSECURE_TRANSPORT", self.insecure_transport.to_string()),
            ("KEEPALIVE_TIME", dur(self.keepalive_time)),
            ("KEEPALIVE_TIMEOUT", dur(self.keepalive_timeout)),
            ("KEY", opt(&self.key)),
            ("PASSWORD", opt(&self.password)),
            ("USER", opt(&self.user)),
            ("WRITE_OUT", self.write_out.clone()),
        ];
        v.sort();
        v.into_iter()
            .map(|(k, val)| format!("ETCDCTL_{k}={val}"))
            .collect()
    }
}
