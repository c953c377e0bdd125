// The data-dir commands of etcdutl: defrag, backup, hashkv, check, inspect wal|db, repair.
// Each parses etcd's flags, calls the library and prints in the -w format.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use etcdutl::datadir::DataDir;
use etcdutl::output::{Format, table};
use etcdutl::{Error, Result};

#[derive(Args, Debug)]
pub struct DirArgs {
    /// Path to the etcd data dir
    #[arg(long = "data-dir", default_value = "")]
    pub data_dir: String,
    /// Path to the etcd wal dir (default: <data-dir>/member/wal)
    #[arg(long = "wal-dir", default_value = "")]
    pub wal_dir: String,
}

impl DirArgs {
    fn open(&self) -> Result<DataDir> {
        if self.data_dir.is_empty() {
            return Err(Error::bad_args("--data-dir is required"));
        }
        let wal = (!self.wal_dir.is_empty()).then(|| PathBuf::from(&self.wal_dir));
        DataDir::open(Path::new(&self.data_dir), wal.as_deref())
    }
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Path to the backup dir
    #[arg(long = "backup-dir", default_value = "")]
    pub backup_dir: String,
    /// Path to the backup wal dir
    #[arg(long = "backup-wal-dir", default_value = "")]
    pub backup_wal_dir: String,
    /// Backup v3 backend data
    #[arg(long = "with-v3")]
    pub with_v3: bool,
}

#[derive(Args, Debug)]
pub struct HashKvArgs {
    /// A db file (instead of --data-dir)
    pub file: Option<String>,
    #[command(flatten)]
    pub dir: DirArgs,
    /// Revision number; 0 hashes up to the newest revision
    #[arg(long = "rev", default_value_t = 0)]
    pub rev: i64,
}

#[derive(Subcommand, Debug)]
pub enum InspectCmd {
    /// Dumps the WAL's records, decoded (like etcd-dump-logs)
    Wal(InspectWalArgs),
    /// Shows the db's buckets, key counts, sizes and page use
    Db(InspectDbArgs),
}

#[derive(Args, Debug)]
pub struct InspectWalArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// The first index to show
    #[arg(long = "start-index", default_value_t = 0)]
    pub start_index: u64,
    /// Entry types to show, comma-separated (ConfigChange, Normal, Request, InternalRaftRequest, IRRPut, IRRTxn, ...)
    #[arg(long = "entry-type", default_value = "")]
    pub entry_type: String,
}

#[derive(Args, Debug)]
pub struct InspectDbArgs {
    /// A db file (instead of --data-dir)
    pub file: Option<String>,
    #[command(flatten)]
    pub dir: DirArgs,
}

fn db_path(file: &Option<String>, dir: &DirArgs) -> Result<PathBuf> {
    match file {
        Some(f) => Ok(PathBuf::from(f)),
        None => Ok(dir.open()?.db),
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    format!("{}\n", serde_json::to_string(v).unwrap_or_default())
}

pub fn defrag(a: &DirArgs, fmt: Format) -> Result<()> {
    let d = a.open()?;
    match etcdutl::defrag::defrag(&d) {
        Ok(r) => {
            match fmt {
                Format::Json => print!("{}", json(&r)),
                _ => {
                    println!("Finished defragmenting etcd data[{}]", a.data_dir);
                    println!(
                        "db size: {} before, {} after",
                        common::gofmt::humanize_bytes(r.before),
                        common::gofmt::humanize_bytes(r.after)
                    );
                }
            }
            Ok(())
        }
        Err(e) => Err(Error::failed(format!(
            "Failed to defragment etcd data[{}] ({e})",
            a.data_dir
        ))),
    }
}

pub fn backup(a: &BackupArgs) -> Result<()> {
    if a.backup_dir.is_empty() {
        return Err(Error::bad_args("--backup-dir is required"));
    }
    let d = a.dir.open()?;
    let bw = (!a.backup_wal_dir.is_empty()).then(|| PathBuf::from(&a.backup_wal_dir));
    let r = etcdutl::backup::backup(&d, Path::new(&a.backup_dir), bw.as_deref(), a.with_v3)?;
    if !a.with_v3 {
        eprintln!("warning: the v3 data (member/snap/db) is not copied without --with-v3");
    }
    println!(
        "backed up {} to {}: {} WAL segments, {} snapshot files{}",
        a.dir.data_dir,
        a.backup_dir,
        r.wal_segments,
        r.snap_files,
        r.db_bytes
            .map(|n| format!(", db of {n} bytes"))
            .unwrap_or_default()
    );
    Ok(())
}

pub fn hashkv(a: &HashKvArgs, fmt: Format) -> Result<()> {
    let path = db_path(&a.file, &a.dir)?;
    if a.file.is_none() {
        a.dir.open()?.ensure_not_running()?;
    }
    let h = etcdutl::hashkv::hash_kv(&path, a.rev)?;
    match fmt {
        Format::Json => print!("{}", json(&h)),
        Format::Table => print!(
            "{}",
            table(
                &["HASH", "HASH REVISION", "COMPACT REVISION"],
                &[vec![
                    h.hash.to_string(),
                    h.hash_revision.to_string(),
                    h.compact_revision.to_string()
                ]]
            )
        ),
        Format::Fields => print!(
            "\"Hash\" : {}\n\"HashRevision\" : {}\n\"CompactRevision\" : {}\n",
            h.hash, h.hash_revision, h.compact_revision
        ),
        Format::Simple => println!("{}, {}, {}", h.hash, h.hash_revision, h.compact_revision),
    }
    Ok(())
}

pub fn check(a: &DirArgs, fmt: Format) -> Result<()> {
    let d = a.open()?;
    d.ensure_not_running()?;
    let rep = etcdutl::check::check(&d)?;
    match fmt {
        Format::Json => print!("{}", json(&rep)),
        Format::Table => print!(
            "{}",
            table(
                &["CHECK", "RESULT", "DETAIL"],
                &rep.findings
                    .iter()
                    .map(|f| vec![
                        f.check.to_string(),
                        if f.ok { "ok" } else { "FAULT" }.to_string(),
                        f.detail.clone()
                    ])
                    .collect::<Vec<_>>()
            )
        ),
        _ => {
            for f in &rep.findings {
                println!(
                    "{}: {}: {}",
                    f.check,
                    if f.ok { "ok" } else { "FAULT" },
                    f.detail
                );
            }
        }
    }
    match rep.faults() {
        0 => Ok(()),
        n => Err(Error::failed(format!(
            "check found {n} fault(s) in {}",
            a.data_dir
        ))),
    }
}

pub fn inspect(c: &InspectCmd, fmt: Format) -> Result<()> {
    match c {
        InspectCmd::Wal(a) => {
            let d = a.dir.open()?;
            let types: Vec<String> = a
                .entry_type
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            let dump = etcdutl::inspect::dump_wal(&d.wal_dir, a.start_index, &types)?;
            match fmt {
                Format::Json => print!("{}", json(&dump)),
                _ => print!("{}", etcdutl::inspect::format_wal_simple(&dump)),
            }
            Ok(())
        }
        InspectCmd::Db(a) => {
            let path = db_path(&a.file, &a.dir)?;
            let dump = etcdutl::inspect::dump_db(&path)?;
            match fmt {
                Format::Json => print!("{}", json(&dump)),
                Format::Table => print!("{}", etcdutl::inspect::format_db(&dump, true)),
                _ => print!("{}", etcdutl::inspect::format_db(&dump, false)),
            }
            Ok(())
        }
    }
}

pub fn repair(a: &DirArgs, fmt: Format) -> Result<()> {
    let d = a.open()?;
    let r = etcdutl::repair::repair(&d)?;
    match fmt {
        Format::Json => print!("{}", json(&r)),
        _ => {
            for l in &r.actions {
                println!("{l}");
            }
        }
    }
    Ok(())
}
