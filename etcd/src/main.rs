// The `etcd` server binary: parses etcd's flags and environment, then starts the member.
// The serving side is built by the server issue; until it lands, a valid start says so.

use std::process::ExitCode;

use etcd::config::{Action, Config, ConfigError};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: Vec<(String, String)> = std::env::vars().collect();
    let (action, cfg) = match Config::from_args(&args, &env) {
        Ok(v) => v,
        Err(e @ ConfigError::Flag(_)) => {
            // Go's flag package: the error, then a pointer to the usage, exit 2.
            eprintln!("{e}");
            eprintln!("Usage: etcd [flags] (see 'etcd --help')");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("etcd: {e}");
            return ExitCode::from(1);
        }
    };
    match action {
        Action::Help => {
            print!("{}", etcd::config::flags::help());
            ExitCode::SUCCESS
        }
        Action::Version => {
            print!("{}", etcd::version::version_text());
            ExitCode::SUCCESS
        }
        Action::ConfigFile(path) => {
            eprintln!(
                "etcd: --config-file {path}: configuration files are not supported yet; pass the settings as flags or ETCD_* variables"
            );
            ExitCode::from(1)
        }
        Action::Run => {
            if let Err(e) = etcd::logging::init(&cfg.log_outputs, cfg.log_level) {
                eprintln!("etcd: cannot open log output: {e}");
                return ExitCode::from(1);
            }
            for w in &cfg.warnings {
                tracing::warn!("{w}");
            }
            tracing::error!(
                data_dir = %cfg.data_dir.display(),
                "etcd-rs cannot serve yet: the server (raft loop, backend, gRPC API) is still being built"
            );
            ExitCode::from(1)
        }
    }
}
