// `snapshot status` and `snapshot restore`: what a snapshot file holds, and a new member data
// dir made from one (etcd 3.4's etcdctl and 3.5's etcdutl behaviour, texts and files).
//
// Restore builds the data dir in a staging dir next to the target and renames it into place
// at the end, so a failure (bad hash, bad file, full disk) leaves nothing behind and a
// half-restored dir can never be started by mistake.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use common::backend::{Db, ReadTxn, buckets};
use common::membership::{self, Member, v2store};
use common::snap::Snapshotter;
use common::wal::Wal;
use prost::Message;
use proto::etcdserverpb::Metadata;
use proto::raftpb::{ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState};
use sha2::{Digest, Sha256};

use crate::datadir::{DataDir, ensure_absent};
use crate::error::{Error, Result, io};
use crate::output::{Format, table};
use crate::progress;

/// What `snapshot status` reports (etcd's JSON names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    pub hash: u32,
    pub revision: i64,
    #[serde(rename = "totalKey")]
    pub total_key: u64,
    #[serde(rename = "totalSize")]
    pub total_size: u64,
}

/// The size of the sha256 trailer `snapshot save` appends.
const TRAILER: u64 = 32;

/// etcd's rule: a file whose size is 32 past a 512-byte boundary carries a sha256 trailer.
pub fn has_trailer(size: u64) -> bool {
    size % 512 == TRAILER
}

fn stat(path: &Path) -> Result<u64> {
    fs::metadata(path).map(|m| m.len()).map_err(|e| {
        Error::BadArgs(common::gofmt::go_io_error(
            "stat",
            &path.display().to_string(),
            &e,
        ))
    })
}

/// Checks the sha256 trailer of `path` (size bytes long) against its db bytes.
fn verify_trailer(path: &Path, size: u64) -> Result<()> {
    let mut f = File::open(path).map_err(io("open", path))?;
    let body = size - TRAILER;
    let bar = progress::bytes_bar(body, "verifying");
    let mut h = Sha256::new();
    copy_n(
        &mut f,
        body,
        |chunk| {
            h.update(chunk);
            if let Some(b) = &bar {
                b.inc(chunk.len() as u64);
            }
            Ok(())
        },
        path,
    )?;
    progress::finish(bar);
    let mut want = [0u8; TRAILER as usize];
    f.read_exact(&mut want).map_err(io("read", path))?;
    let got = h.finalize();
    if got.as_slice() != want {
        return Err(Error::failed(format!(
            "expected sha256 {}, got {}",
            go_bytes(&want),
            go_bytes(&got)
        )));
    }
    Ok(())
}

/// Go's `%v` of a byte slice: "[1 2 3]".
fn go_bytes(b: &[u8]) -> String {
    let parts: Vec<String> = b.iter().map(u8::to_string).collect();
    format!("[{}]", parts.join(" "))
}

/// Reads `n` bytes of `r` in 1 MiB chunks, handing each to `f`.
fn copy_n(
    r: &mut impl Read,
    n: u64,
    mut f: impl FnMut(&[u8]) -> Result<()>,
    path: &Path,
) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut left = n;
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        r.read_exact(&mut buf[..want]).map_err(io("read", path))?;
        f(&buf[..want])?;
        left -= want as u64;
    }
    Ok(())
}

/// Hash, revision, key count and size of the db in a snapshot file (or a member's db file),
/// after checking the sha256 trailer when there is one and the db's structure.
pub fn status(path: &Path) -> Result<Status> {
    let size = stat(path)?;
    if has_trailer(size) {
        verify_trailer(path, size)?;
    }
    let db = Db::open_read_only(path).map_err(|e| {
        Error::failed(format!(
            "{} is not a valid snapshot (a bbolt db file): {e}",
            path.display()
        ))
    })?;
    if let Err(e) = db.check() {
        return Err(Error::failed(format!(
            "snapshot file integrity check failed. 1 errors found.\n{e}"
        )));
    }
    let tx = db.begin_read();
    let mut st = Status {
        hash: 0,
        revision: 0,
        total_key: 0,
        total_size: tx.size(),
    };
    let mut h = 0u32;
    for name in tx.bucket_names()? {
        h = crc32c::crc32c_append(h, &name);
        let is_key = name.as_slice() == buckets::KEY;
        let mut c = tx.cursor(&name)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            h = crc32c::crc32c_append(h, k);
            h = crc32c::crc32c_append(h, v);
            if is_key && k.len() >= 8 {
                let mut b = [0u8; 8];
                b.copy_from_slice(&k[..8]);
                st.revision = i64::from_be_bytes(b);
            }
            st.total_key += 1;
            e = c.next()?;
        }
    }
    st.hash = h;
    Ok(st)
}

/// The status in one of etcd's formats, as `etcdctl snapshot status -w <fmt>` prints it.
pub fn format_status(st: &Status, fmt: Format) -> String {
    let size = common::gofmt::humanize_bytes(st.total_size);
    match fmt {
        Format::Simple => format!(
            "{:x}, {}, {}, {}\n",
            st.hash, st.revision, st.total_key, size
        ),
        Format::Json => format!("{}\n", serde_json::to_string(st).unwrap_or_default()),
        Format::Fields => format!(
            "\"Hash\" : {}\n\"Revision\" : {}\n\"Keys\" : {}\n\"Size\" : {}\n",
            st.hash, st.revision, st.total_key, st.total_size
        ),
        Format::Table => table(
            &["HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"],
            &[vec![
                format!("{:x}", st.hash),
                st.revision.to_string(),
                st.total_key.to_string(),
                size,
            ]],
        ),
    }
}

/// `snapshot restore`'s flags (etcd's names and defaults).
#[derive(Debug, Clone)]
pub struct RestoreConfig {
    pub snapshot: PathBuf,
    pub name: String,
    /// Default: `<name>.etcd`.
    pub data_dir: Option<PathBuf>,
    /// Default: `<data-dir>/member/wal`.
    pub wal_dir: Option<PathBuf>,
    pub initial_cluster: String,
    pub initial_cluster_token: String,
    pub initial_advertise_peer_urls: String,
    pub skip_hash_check: bool,
}

impl Default for RestoreConfig {
    fn default() -> Self {
        RestoreConfig {
            snapshot: PathBuf::new(),
            name: "default".into(),
            data_dir: None,
            wal_dir: None,
            initial_cluster: "default=http://localhost:2380".into(),
            initial_cluster_token: "etcd-cluster".into(),
            initial_advertise_peer_urls: "http://localhost:2380".into(),
            skip_hash_check: false,
        }
    }
}

/// What a restore made.
#[derive(Debug, Clone)]
pub struct Restored {
    pub dir: DataDir,
    pub member_id: u64,
    pub cluster_id: u64,
    pub members: Vec<Member>,
}

/// One zap-style JSON log line on stderr, as etcd's restore prints its progress.
fn log(msg: &str, fields: serde_json::Value) {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut line =
        serde_json::json!({"level": "info", "ts": ts, "caller": "snapshot/restore", "msg": msg});
    if let (Some(l), Some(f)) = (line.as_object_mut(), fields.as_object()) {
        for (k, v) in f {
            l.insert(k.clone(), v.clone());
        }
    }
    eprintln!("{line}");
}

/// The members --initial-cluster describes (in its order of names), checked against --name
/// and --initial-advertise-peer-urls as etcd checks them.
fn cluster_members(cfg: &RestoreConfig) -> Result<Vec<Member>> {
    let pairs = common::url::parse_initial_cluster(&cfg.initial_cluster).map_err(|e| {
        Error::bad_args(format!(
            "invalid --initial-cluster {:?}: {e}",
            cfg.initial_cluster
        ))
    })?;
    let mut members: Vec<Member> = Vec::new();
    let mut urls_of: Vec<(String, Vec<String>)> = Vec::new();
    for (name, url) in pairs {
        match urls_of.iter_mut().find(|(n, _)| *n == name) {
            Some((_, urls)) => urls.push(url.as_str().to_string()),
            None => urls_of.push((name, vec![url.as_str().to_string()])),
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (name, urls) in urls_of {
        for u in &urls {
            if !seen.insert(u.clone()) {
                return Err(Error::bad_args(format!(
                    "--initial-cluster has duplicate url {u}"
                )));
            }
        }
        members.push(Member::new_bootstrap(
            &name,
            urls,
            &cfg.initial_cluster_token,
        ));
    }
    let me = members.iter().find(|m| m.name == cfg.name).ok_or_else(|| {
        Error::bad_args(format!(
            "couldn't find local name {:?} in the initial cluster configuration",
            cfg.name
        ))
    })?;
    let mut advertised: Vec<String> = cfg
        .initial_advertise_peer_urls
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            common::url::Url::parse(s)
                .map(|u| u.as_str().to_string())
                .map_err(|e| {
                    Error::bad_args(format!("invalid --initial-advertise-peer-urls {s:?}: {e}"))
                })
        })
        .collect::<Result<_>>()?;
    advertised.sort();
    let mut mine = me.peer_urls.clone();
    mine.sort();
    if advertised != mine {
        return Err(Error::bad_args(format!(
            "--initial-cluster has {}={} but missing from --initial-advertise-peer-urls={} (resolved urls: {:?} != {:?})",
            cfg.name,
            me.peer_urls.join(","),
            cfg.initial_advertise_peer_urls,
            advertised.join(","),
            mine.join(",")
        )));
    }
    Ok(members)
}

/// A sibling path of `p` for staging (`<p>.restoring.<pid>`).
fn staging(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(format!(".restoring.{}", std::process::id()));
    PathBuf::from(s)
}

/// Removes the staging dirs of a failed restore.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// Makes a new member data dir from a snapshot file: the snapshot's db with the membership
/// replaced and the consistent index set to the new log's last index, a WAL holding the new
/// cluster's conf changes, and a .snap (with the v2 store membership etcd 3.4 reads) at that
/// index, so the member starts as a fresh cluster with every key, revision and lease.
pub fn restore(cfg: &RestoreConfig) -> Result<Restored> {
    let data_dir = cfg
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.etcd", cfg.name)));
    let size = stat(&cfg.snapshot)?;
    let members = cluster_members(cfg)?;
    ensure_absent(&data_dir, "data-dir")?;
    if let Some(w) = &cfg.wal_dir {
        ensure_absent(w, "wal-dir")?;
    }
    let fin = DataDir::layout(&data_dir, cfg.wal_dir.as_deref());
    log(
        "restoring snapshot",
        serde_json::json!({"path": cfg.snapshot.display().to_string(), "wal-dir": fin.wal_dir.display().to_string(), "data-dir": data_dir.display().to_string(), "snap-dir": fin.snap_dir.display().to_string()}),
    );
    if let Some(parent) = data_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io("mkdir", parent))?;
    }
    let stage_data = staging(&data_dir);
    let stage_wal = cfg.wal_dir.as_deref().map(staging);
    let mut cleanup = Cleanup(vec![stage_data.clone()]);
    cleanup.0.extend(stage_wal.clone());
    let _ = fs::remove_dir_all(&stage_data);
    if let Some(w) = &stage_wal {
        let _ = fs::remove_dir_all(w);
    }
    let stage = DataDir::layout(&stage_data, stage_wal.as_deref());
    common::fileutil::touch_dir_all(&stage.snap_dir)?;
    if let Some(p) = stage.wal_dir.parent() {
        common::fileutil::touch_dir_all(p)?;
    }

    copy_db(cfg, size, &stage.db)?;
    let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
    let cluster_id = membership::cluster_id(&ids);
    let me = members
        .iter()
        .find(|m| m.name == cfg.name)
        .map(|m| m.id)
        .unwrap_or_default();
    let commit = members.len() as u64;
    let term = 1u64;
    rewrite_db(&stage.db, &members, commit, term)?;
    for m in &members {
        log(
            "added member",
            serde_json::json!({"cluster-id": membership::id_hex(cluster_id), "local-member-id": "0", "added-peer-id": v2store::member_key(m.id), "added-peer-peer-urls": m.peer_urls}),
        );
    }
    write_wal_and_snap(&stage, &members, me, cluster_id, commit, term)?;

    // Into place: the WAL first (the data dir is what marks a restore as done).
    if let (Some(from), Some(to)) = (&stage_wal, &cfg.wal_dir) {
        fs::rename(from, to).map_err(io("rename", from))?;
    }
    fs::rename(&stage_data, &data_dir).map_err(io("rename", &stage_data))?;
    if let Some(parent) = data_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        common::fileutil::fsync_dir(parent)?;
    }
    cleanup.0.clear();
    log(
        "restored snapshot",
        serde_json::json!({"path": cfg.snapshot.display().to_string(), "wal-dir": fin.wal_dir.display().to_string(), "data-dir": data_dir.display().to_string(), "snap-dir": fin.snap_dir.display().to_string()}),
    );
    Ok(Restored {
        dir: fin,
        member_id: me,
        cluster_id,
        members,
    })
}

/// Copies the snapshot's db bytes to `dest`, checking the sha256 trailer on the way (one pass
/// over the file) unless --skip-hash-check.
fn copy_db(cfg: &RestoreConfig, size: u64, dest: &Path) -> Result<()> {
    let src = &cfg.snapshot;
    let trailer = has_trailer(size);
    if !trailer && !cfg.skip_hash_check {
        return Err(Error::failed(
            "snapshot missing hash but --skip-hash-check=false",
        ));
    }
    let body = if trailer { size - TRAILER } else { size };
    let mut f = File::open(src).map_err(io("open", src))?;
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(io("open", dest))?;
    let mut h = Sha256::new();
    let bar = progress::bytes_bar(body, "restoring");
    copy_n(
        &mut f,
        body,
        |chunk| {
            if trailer {
                h.update(chunk);
            }
            out.write_all(chunk).map_err(io("write", dest))?;
            if let Some(b) = &bar {
                b.inc(chunk.len() as u64);
            }
            Ok(())
        },
        src,
    )?;
    progress::finish(bar);
    if trailer && !cfg.skip_hash_check {
        let mut want = [0u8; TRAILER as usize];
        f.seek(SeekFrom::Start(body)).map_err(io("seek", src))?;
        f.read_exact(&mut want).map_err(io("read", src))?;
        let got = h.finalize();
        if got.as_slice() != want {
            return Err(Error::failed(format!(
                "expected sha256 {}, got {}",
                go_bytes(&want),
                go_bytes(&got)
            )));
        }
    }
    out.sync_all().map_err(io("sync", dest))?;
    Ok(())
}

/// The new membership and consistent index in the restored db: the old cluster's members and
/// removed members go, the new ones are written as etcd 3.5 writes them (the member JSON under
/// its unpadded hex ID), and the consistent index becomes the index of the last conf change,
/// so the new log's entries are not applied twice and later ones are.
fn rewrite_db(path: &Path, members: &[Member], commit: u64, term: u64) -> Result<()> {
    let bad = |e: common::backend::Error| {
        Error::failed(format!(
            "the snapshot's db is not a valid bbolt file ({e}); is this an etcd snapshot?"
        ))
    };
    let db = Db::open(path).map_err(bad)?;
    let mut tx = db.begin_write().map_err(bad)?;
    for b in [buckets::MEMBERS, buckets::MEMBERS_REMOVED] {
        if tx.bucket_exists(b)? {
            tx.delete_bucket(b)?;
        }
        tx.create_bucket(b)?;
    }
    for b in buckets::ALL {
        tx.create_bucket_if_not_exists(b)?;
    }
    for m in members {
        let stored = Member {
            client_urls: Vec::new(),
            ..m.clone()
        };
        tx.put(
            buckets::MEMBERS,
            v2store::member_key(m.id).as_bytes(),
            stored.to_json().as_bytes(),
        )?;
    }
    tx.put(buckets::META, b"consistent_index", &commit.to_be_bytes())?;
    tx.put(buckets::META, b"term", &term.to_be_bytes())?;
    // etcd 3.5's record of the old cluster's voters would contradict the new log.
    tx.delete(buckets::META, b"confState")?;
    tx.commit()?;
    Ok(())
}

/// The new member's log: a WAL with one AddNode conf change per member (term 1, the member as
/// JSON in the context), a hard state committing them, and a snapshot at the last one whose
/// data is the v2 store membership; the same for every member restored with the same flags.
fn write_wal_and_snap(
    dir: &DataDir,
    members: &[Member],
    me: u64,
    cluster_id: u64,
    commit: u64,
    term: u64,
) -> Result<()> {
    let meta = Metadata {
        node_id: me,
        cluster_id,
    }
    .encode_to_vec();
    let entries: Vec<Entry> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ctx = Member {
                client_urls: Vec::new(),
                ..m.clone()
            }
            .to_json()
            .into_bytes();
            let cc = ConfChange {
                r#type: ConfChangeType::ConfChangeAddNode as i32,
                node_id: m.id,
                context: Some(ctx),
                id: 0,
            };
            Entry {
                r#type: EntryType::EntryConfChange as i32,
                term,
                index: i as u64 + 1,
                data: Some(cc.encode_to_vec()),
            }
        })
        .collect();
    let hs = HardState {
        term,
        vote: members.first().map(|m| m.id).unwrap_or_default(),
        commit,
    };
    {
        let mut wal = Wal::create(&dir.wal_dir, &meta)?;
        wal.save(&hs, &entries)?;
        wal.save_snapshot(&proto::walpb::Snapshot {
            index: commit,
            term,
            conf_state: None,
        })?;
        wal.sync()?;
    }
    // The v2 store of a fresh restore holds raftAttributes only: names and client URLs come
    // when each member publishes itself.
    let bare: Vec<Member> = members
        .iter()
        .map(|m| Member {
            id: m.id,
            peer_urls: m.peer_urls.clone(),
            ..Member::default()
        })
        .collect();
    let snap = proto::raftpb::Snapshot {
        data: Some(v2store::membership_image(&bare)),
        metadata: Some(proto::raftpb::SnapshotMetadata {
            conf_state: Some(ConfState {
                voters: members.iter().map(|m| m.id).collect(),
                ..ConfState::default()
            }),
            index: commit,
            term,
        }),
    };
    Snapshotter::new(&dir.snap_dir).save_snap(&snap)?;
    Ok(())
}
