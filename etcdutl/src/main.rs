// The `etcdutl` binary: etcd 3.5's offline tool over data dirs and snapshot files, with its
// commands, flags, output formats and exit codes; the work itself is in the library.

mod commands;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "etcdutl",
    about = "An administrative command line tool for etcd3.",
    disable_version_flag = true
)]
struct Cli {
    /// set the output format (fields, json, protobuf, simple, table)
    #[arg(
        short = 'w',
        long = "write-out",
        default_value = "simple",
        global = true
    )]
    write_out: String,
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Manages etcd node snapshots
    #[command(subcommand)]
    Snapshot(commands::snapshot::SnapshotCmd),
    /// Defragments the storage of a stopped etcd member (offline)
    Defrag(commands::datadir::DirArgs),
    /// Makes a consistent copy of a stopped member's data dir
    Backup(commands::datadir::BackupArgs),
    /// Prints the KV history hash of a stopped member's db (the value HashKV reports)
    Hashkv(commands::datadir::HashKvArgs),
    /// Verifies a data dir: WAL CRC chain, snap files, db pages and structure, consistent index
    Check(commands::datadir::DirArgs),
    /// Shows what a data dir's WAL and db hold
    #[command(subcommand)]
    Inspect(commands::datadir::InspectCmd),
    /// Fixes a torn WAL tail, temp files and orphaned snapshots; refuses anything else
    Repair(commands::datadir::DirArgs),
    /// Prints the version of etcdutl
    Version,
}

fn main() {
    let cli = Cli::parse();
    let fmt = etcdutl::output::Format::parse(&cli.write_out);
    let result = match &cli.cmd {
        Command::Snapshot(c) => commands::snapshot::run(c, &cli.write_out),
        Command::Defrag(a) => fmt.and_then(|f| commands::datadir::defrag(a, f)),
        Command::Backup(a) => commands::datadir::backup(a),
        Command::Hashkv(a) => fmt.and_then(|f| commands::datadir::hashkv(a, f)),
        Command::Check(a) => fmt.and_then(|f| commands::datadir::check(a, f)),
        Command::Inspect(c) => fmt.and_then(|f| commands::datadir::inspect(c, f)),
        Command::Repair(a) => fmt.and_then(|f| commands::datadir::repair(a, f)),
        Command::Version => {
            println!("etcdutl version: {}", common::version::ETCD_VERSION);
            println!("API version: 3.5");
            println!("etcd-rs version: {}", common::version::ETCD_RS_VERSION);
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("Error: {e}");
        std::process::exit(e.exit_code());
    }
}
