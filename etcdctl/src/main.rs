//! The `etcdctl` binary: parses etcd's command line, runs the command, and exits with etcd's
//! exit codes and `Error: ...` text.

mod client;
mod commands;
mod error;
mod global;
mod gojson;
mod printer;
mod util;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use commands::Ctx;
use error::{CtlError, EXIT_ERROR};
use global::GlobalArgs;

/// A simple command line client for etcd3.
#[derive(Parser, Debug)]
#[command(
    name = "etcdctl",
    disable_version_flag = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Gets the key or a range of keys
    Get(commands::get::GetArgs),
    /// Puts the given key into the store
    Put(commands::put::PutArgs),
    /// Removes the specified key or range of keys [key, range_end)
    Del(commands::del::DelArgs),
    /// Txn processes all the requests in one transaction
    Txn(commands::txn::TxnArgs),
    /// Watches events stream on keys or prefixes
    Watch(commands::watch::WatchArgs),
    /// Compacts the event history in etcd
    Compaction(commands::compaction::CompactionArgs),
    /// Lease related commands
    #[command(subcommand)]
    Lease(commands::lease::LeaseCmd),
    /// Membership related commands
    #[command(subcommand)]
    Member(commands::member::MemberCmd),
    /// Endpoint related commands
    #[command(subcommand)]
    Endpoint(commands::endpoint::EndpointCmd),
    /// Alarm related commands
    #[command(subcommand)]
    Alarm(commands::alarm::AlarmCmd),
    /// Defragments the storage of the etcd members with given endpoints
    Defrag(commands::defrag::DefragArgs),
    /// commands for checking properties of the etcd cluster
    #[command(subcommand)]
    Check(commands::check::CheckCmd),
    /// Transfers leadership to another etcd cluster member.
    #[command(name = "move-leader")]
    MoveLeader(commands::move_leader::MoveLeaderArgs),
    /// Enable or disable authentication
    #[command(subcommand)]
    Auth(commands::auth::AuthCmd),
    /// User related commands
    #[command(subcommand)]
    User(commands::user::UserCmd),
    /// Role related commands
    #[command(subcommand)]
    Role(commands::role::RoleCmd),
    /// Manages etcd node snapshots
    #[command(subcommand)]
    Snapshot(commands::snapshot::SnapshotCmd),
    /// Acquires a named lock
    Lock(commands::lock::LockArgs),
    /// Observes and participates in leader election
    Elect(commands::elect::ElectArgs),
    /// Makes a mirror at the destination etcd cluster
    #[command(name = "make-mirror")]
    MakeMirror(commands::make_mirror::MakeMirrorArgs),
    /// Prints the version of etcdctl
    Version,
}

async fn dispatch(ctx: &Ctx, cmd: &Command) -> error::Result<()> {
    match cmd {
        Command::Get(a) => commands::get::run(ctx, a).await,
        Command::Put(a) => commands::put::run(ctx, a).await,
        Command::Del(a) => commands::del::run(ctx, a).await,
        Command::Txn(a) => commands::txn::run(ctx, a).await,
        Command::Watch(a) => commands::watch::run(ctx, a).await,
        Command::Compaction(a) => commands::compaction::run(ctx, a).await,
        Command::Lease(c) => commands::lease::run(ctx, c).await,
        Command::Member(c) => commands::member::run(ctx, c).await,
        Command::Endpoint(c) => commands::endpoint::run(ctx, c).await,
        Command::Alarm(c) => commands::alarm::run(ctx, c).await,
        Command::Defrag(a) => commands::defrag::run(ctx, a).await,
        Command::MoveLeader(a) => commands::move_leader::run(ctx, a).await,
        Command::Check(c) => commands::check::run(ctx, c).await,
        Command::Auth(c) => commands::auth::run(ctx, c).await,
        Command::User(c) => commands::user::run(ctx, c).await,
        Command::Role(c) => commands::role::run(ctx, c).await,
        Command::Snapshot(c) => commands::snapshot::run(ctx, c).await,
        Command::Lock(a) => commands::lock::run(ctx, a).await,
        Command::Elect(a) => commands::elect::run(ctx, a).await,
        Command::MakeMirror(a) => commands::make_mirror::run(ctx, a).await,
        Command::Version => commands::version::run(ctx),
    }
}

/// Turns clap's error into the one line etcd's pflag/cobra would print.
fn clap_error_line(e: &clap::Error) -> String {
    let ctx_str = |k: ContextKind| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let arg = ctx_str(ContextKind::InvalidArg).unwrap_or_default();
            let name = arg.split('=').next().unwrap_or(&arg).to_string();
            if name.starts_with("--") {
                format!("unknown flag: {name}")
            } else {
                format!(
                    "unknown shorthand flag: '{}' in {arg}",
                    name.trim_start_matches('-')
                )
            }
        }
        ErrorKind::InvalidSubcommand => {
            let cmd = ctx_str(ContextKind::InvalidSubcommand).unwrap_or_default();
            format!("unknown command \"{cmd}\" for \"etcdctl\"")
        }
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let arg = ctx_str(ContextKind::InvalidArg).unwrap_or_default();
            let flag = arg
                .split([' ', '=', '['])
                .next()
                .unwrap_or(&arg)
                .to_string();
            let val = ctx_str(ContextKind::InvalidValue).unwrap_or_default();
            let why = std::error::Error::source(e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| "invalid value".to_string());
            format!("invalid argument \"{val}\" for \"{flag}\" flag: {why}")
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("").trim();
            first.strip_prefix("error: ").unwrap_or(first).to_string()
        }
    }
}

/// etcd refuses a flag given both on the command line and in its ETCDCTL_* variable.
fn check_env_conflicts(m: &clap::ArgMatches) -> Result<(), String> {
    for arg in Cli::command().get_arguments() {
        let (Some(env), id) = (arg.get_env(), arg.get_id()) else {
            continue;
        };
        let from_cli = m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
            || m.subcommand().is_some_and(|(_, sm)| {
                sm.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
                    || sm.subcommand().is_some_and(|(_, ssm)| {
                        ssm.value_source(id.as_str())
                            == Some(clap::parser::ValueSource::CommandLine)
                    })
            });
        if from_cli && std::env::var_os(env).is_some() {
            return Err(format!(
                "conflicting environment variable {:?} is shadowed by corresponding command-line flag (either unset environment variable or disable flag)",
                env.to_string_lossy()
            ));
        }
    }
    Ok(())
}

fn main() {
    let parsed = Cli::command().try_get_matches().and_then(|m| {
        if let Err(msg) = check_env_conflicts(&m) {
            eprintln!("Error: {msg}");
            std::process::exit(EXIT_ERROR);
        }
        Cli::from_arg_matches(&m)
    });
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                // Help goes to stdout and is not an error, as etcd's.
                print!("{}", e.render());
                std::process::exit(0);
            }
            _ => {
                eprintln!("Error: {}", clap_error_line(&e));
                std::process::exit(EXIT_ERROR);
            }
        },
    };
    let result = run(cli);
    if let Err(e) = result {
        eprintln!("Error: {e}");
        std::process::exit(e.exit_code());
    }
}

fn run(cli: Cli) -> error::Result<()> {
    let ctx = Ctx::new(cli.global)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CtlError::other(format!("cannot start the runtime: {e}")))?;
    rt.block_on(dispatch(&ctx, &cli.command))
}
