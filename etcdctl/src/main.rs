//! The `etcdctl` binary: parses etcd's command line, runs the command, and exits with etcd's
//! exit codes and `Error: ...` text.

mod client;
mod commands;
mod error;
mod global;
mod gojson;
mod help;
mod printer;
mod progress;
mod util;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use commands::Ctx;
use error::{CtlError, EXIT_ERROR};
use global::GlobalArgs;

/// A simple command line client for etcd3.
#[derive(Parser, Debug)]
#[command(name = "etcdctl", disable_version_flag = true, verbatim_doc_comment)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Gets the key or a range of keys
    #[command(override_usage = "[options] <key> [range_end]")]
    Get(commands::get::GetArgs),
    /// Puts the given key into the store
    #[command(
        override_usage = "[options] <key> <value> (<value> can also be given from stdin)",
        long_about = "Puts the given key into the store.\n\nWhen <value> begins with '-', <value> is interpreted as a flag.\nInsert '--' for workaround:\n\n$ put <key> -- <value>\n$ put -- <key> <value>\n\nIf <value> isn't given as a command line argument and '--ignore-value' is not specified,\nthis command tries to read the value from standard input.\n\nIf <lease> isn't given as a command line argument and '--ignore-lease' is not specified,\nthis command tries to read the value from standard input.\n\nFor example,\n$ cat file | put <key>\nwill store the content of the file to <key>."
    )]
    Put(commands::put::PutArgs),
    /// Removes the specified key or range of keys [key, range_end)
    #[command(override_usage = "[options] <key> [range_end]")]
    Del(commands::del::DelArgs),
    /// Txn processes all the requests in one transaction
    #[command(override_usage = "[options]")]
    Txn(commands::txn::TxnArgs),
    /// Watches events stream on keys or prefixes
    #[command(
        override_usage = "[options] [key or prefix] [range_end] [--] [exec-command arg1 arg2 ...]"
    )]
    Watch(commands::watch::WatchArgs),
    /// Compacts the event history in etcd
    #[command(override_usage = "[options] <revision>")]
    Compaction(commands::compaction::CompactionArgs),
    /// Lease related commands
    #[command(override_usage = "<subcommand>")]
    #[command(subcommand)]
    Lease(commands::lease::LeaseCmd),
    /// Membership related commands
    #[command(override_usage = "<subcommand>")]
    #[command(subcommand)]
    Member(commands::member::MemberCmd),
    /// Endpoint related commands
    #[command(override_usage = "<subcommand>")]
    Endpoint(commands::endpoint::EndpointGroup),
    /// Alarm related commands
    #[command(override_usage = "<subcommand>")]
    #[command(subcommand)]
    Alarm(commands::alarm::AlarmCmd),
    /// Defragments the storage of the etcd members with given endpoints
    Defrag(commands::defrag::DefragArgs),
    /// commands for checking properties of the etcd cluster
    #[command(override_usage = "<subcommand>")]
    #[command(subcommand)]
    Check(commands::check::CheckCmd),
    /// Transfers leadership to another etcd cluster member.
    #[command(verbatim_doc_comment)]
    #[command(override_usage = "<transferee-member-id>")]
    #[command(name = "move-leader")]
    MoveLeader(commands::move_leader::MoveLeaderArgs),
    /// Enable or disable authentication
    #[command(override_usage = "<enable or disable>")]
    #[command(subcommand)]
    Auth(commands::auth::AuthCmd),
    /// User related commands
    #[command(override_usage = "<subcommand>")]
    #[command(subcommand)]
    User(commands::user::UserCmd),
    /// Role related commands
    #[command(override_usage = "<subcommand>")]
    #[command(subcommand)]
    Role(commands::role::RoleCmd),
    /// Manages etcd node snapshots
    #[command(override_usage = "<subcommand>")]
    #[command(subcommand)]
    Snapshot(commands::snapshot::SnapshotCmd),
    /// Acquires a named lock
    #[command(override_usage = "<lockname> [exec-command arg1 arg2 ...]")]
    Lock(commands::lock::LockArgs),
    /// Observes and participates in leader election
    #[command(override_usage = "<election-name> [proposal]")]
    Elect(commands::elect::ElectArgs),
    /// Makes a mirror at the destination etcd cluster
    #[command(override_usage = "[options] <destination>")]
    #[command(name = "make-mirror")]
    MakeMirror(commands::make_mirror::MakeMirrorArgs),
    /// Prints the version of etcdctl
    Version,
    /// Help about any command
    #[command(
        override_usage = "[command]",
        long_about = "Help provides help for any command in the application.\nSimply type etcdctl help [path to command] for full details."
    )]
    Help { topic: Vec<String> },
    /// Generate the autocompletion script for the specified shell
    #[command(
        subcommand,
        override_usage = "",
        long_about = "Generate the autocompletion script for etcdctl for the specified shell.\nSee each sub-command's help for details on how to use the generated script."
    )]
    Completion(commands::completion::CompletionCmd),
    /// Downgrade related commands. Use `etcdctl downgrade --help` to see subcommands
    #[command(
        subcommand,
        override_usage = "<TARGET_VERSION>",
        long_about = "Downgrade related commands"
    )]
    Downgrade(commands::downgrade::DowngradeCmd),
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
        Command::Help { topic } => {
            let root = command_tree();
            match help::resolve(&root, topic) {
                Some(path) => print!("{}", help::render(&root, &path, true)),
                None => {
                    eprintln!("Unknown help topic [`{}`]", topic.join(" "));
                    print!("{}", help::render(&root, &[], false));
                }
            }
            Ok(())
        }
        Command::Completion(c) => commands::completion::run(c),
        Command::Downgrade(c) => commands::downgrade::run(ctx, c).await,
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

/// The clap tree with clap's own help turned off everywhere: help is etcd's (see `help`), and
/// -h/--help is one hidden global flag (Go's bool, so `--help=false` is accepted).
pub fn command_tree() -> clap::Command {
    fn no_clap_help(cmd: clap::Command) -> clap::Command {
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        let mut cmd = cmd.disable_help_flag(true).disable_help_subcommand(true);
        for n in names {
            cmd = cmd.mut_subcommand(n, no_clap_help);
        }
        cmd
    }
    no_clap_help(Cli::command()).arg(
        clap::Arg::new("help")
            .short('h')
            .long("help")
            .global(true)
            .hide(true)
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .value_parser(global::go_bool),
    )
}

/// What the command line asks for before clap parses it: etcd's help, or an unknown command.
enum Early {
    /// Print the help of this command path and exit 0.
    Help(Vec<String>),
    /// A root-level word that is no command.
    UnknownCommand(String),
    /// Parse normally; the command path found, for usage text on a flag error.
    Parse(Vec<String>),
}

/// Finds the command path the way cobra does (flags skipped, an unknown flag taking the next
/// word as its value, unique prefixes of command names accepted), and whether -h/--help was
/// given before "--". A command word given as a prefix is replaced in `args` by the full name,
/// so that clap parses what cobra ran.
fn early(root: &clap::Command, args_out: &mut [std::ffi::OsString]) -> Early {
    let words: Vec<String> = args_out
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let args = &words;
    let mut path: Vec<String> = Vec::new();
    let mut cmd = root;
    let mut known: Vec<&clap::Arg> = root.get_arguments().collect();
    let mut help = false;
    let mut leaf = !root.has_subcommands();
    let mut rewrites: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            break;
        }
        if a.len() > 1 && a.starts_with('-') {
            let (name, value) = match a.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (a.as_str(), None),
            };
            if name == "-h" || name == "--help" {
                help = value.is_none_or(|v| global::go_bool(v).unwrap_or(false));
                continue;
            }
            let arg = if let Some(long) = name.strip_prefix("--") {
                known.iter().find(|x| x.get_long() == Some(long))
            } else if name.chars().count() == 2 {
                let c = name.chars().nth(1);
                known.iter().find(|x| x.get_short() == c)
            } else {
                // Combined short flags or a short flag with its value attached.
                continue;
            };
            let takes_word = match arg {
                Some(x) => {
                    !x.is_require_equals_set()
                        && x.get_num_args().is_none_or(|n| n.min_values() > 0)
                        && !matches!(
                            x.get_action(),
                            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
                        )
                }
                None => true,
            };
            if value.is_none() && takes_word && args.get(i).is_some_and(|n| !n.starts_with('-')) {
                i += 1;
            }
            continue;
        }
        if leaf {
            continue;
        }
        match help::subcommand(cmd, a) {
            Some(sub) => {
                let name = sub.get_name().to_string();
                if name != *a {
                    rewrites.push((i - 1, name.clone()));
                }
                path.push(name.clone());
                cmd = sub;
                known.extend(sub.get_arguments());
                // After `help`, the words are its topic (it is parsed and run as a command).
                leaf = !sub.has_subcommands() || (name == "help" && path.len() == 1);
            }
            None if path.is_empty() => return Early::UnknownCommand(a.clone()),
            // A group given a word that is none of its commands shows its help, as etcd does.
            None => return Early::Help(path),
        }
    }
    if help || !leaf {
        Early::Help(path)
    } else {
        for (i, name) in rewrites {
            args_out[i] = name.into();
        }
        Early::Parse(path)
    }
}

fn main() {
    // Arguments are bytes, as in Go: keys and values need not be UTF-8.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let root = command_tree();
    let path = match early(&root, &mut args[1..]) {
        Early::Help(path) => {
            print!("{}", help::render(&root, &path, true));
            std::process::exit(0);
        }
        Early::UnknownCommand(word) => {
            let mut msg = format!("unknown command {word:?} for \"etcdctl\"");
            let near = help::suggestions(&root, &word);
            if !near.is_empty() {
                msg.push_str("\n\nDid you mean this?\n");
                for n in near {
                    msg.push_str(&format!("\t{n}\n"));
                }
            }
            eprintln!("Error: {msg}");
            eprintln!("Run 'etcdctl --help' for usage.");
            eprintln!("Error: {msg}");
            std::process::exit(EXIT_ERROR);
        }
        Early::Parse(path) => path,
    };
    let parsed = root.clone().try_get_matches_from(args).and_then(|m| {
        if let Err(msg) = check_env_conflicts(&m) {
            eprintln!("Error: {msg}");
            std::process::exit(EXIT_ERROR);
        }
        Cli::from_arg_matches(&m)
    });
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            // As etcd: the error, the command's usage on stdout, then the error again.
            let line = clap_error_line(&e);
            eprintln!("Error: {line}");
            print!("{}", help::render(&root, &path, true));
            eprintln!("\nError: {line}");
            std::process::exit(EXIT_ERROR);
        }
    };
    let result = run(cli);
    if let Err(e) = result {
        eprintln!("Error: {e}");
        std::process::exit(e.exit_code());
    }
}

fn run(cli: Cli) -> error::Result<()> {
    if cli.global.debug {
        for line in cli.global.debug_lines() {
            eprintln!("{line}");
        }
    }
    let ctx = Ctx::new(cli.global)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CtlError::other(format!("cannot start the runtime: {e}")))?;
    rt.block_on(dispatch(&ctx, &cli.command))
}
