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
    /// Prints the version of etcdutl
    Version,
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.cmd {
        Command::Snapshot(c) => commands::snapshot::run(c, &cli.write_out),
        Command::Version => {
            println!("etcdutl version: {}", etcd::version::ETCD_VERSION);
            println!("API version: 3.5");
            println!("etcd-rs version: {}", etcd::version::ETCD_RS_VERSION);
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("Error: {e}");
        std::process::exit(e.exit_code());
    }
}
