// Starting a member from its data dir: a new dir bootstraps a cluster from the flags (IDs
// derived as etcd's, members written into the log); an existing dir is replayed from its
// newest usable snapshot, its WAL and its db, whatever the flags say.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::backend::{Batch, BatchConfig, Db, buckets};
use common::fileutil;
use common::snap::{SnapError, Snapshotter};
use common::wal::{self, Wal, WalError, WalOptions};
use prost::Message;
use proto::etcdserverpb::Metadata;
use proto::walpb;

use super::v2_membership;
use crate::config::{ClusterState, Config};
use crate::lease::Lessor;
use crate::membership::{self, Member};
use crate::mvcc::KvStore;
use crate::raft::{self, MemStorage, Peer, RawNode};

#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error(transparent)]
    File(#[from] fileutil::FileError),
    #[error("cannot open the WAL in {dir}: {source}")]
    Wal {
        dir: String,
        #[source]
        source: WalError,
    },
    #[error("cannot load a snapshot: {0}")]
    Snap(#[from] SnapError),
    #[error("cannot open the backend {path}: {source}")]
    Backend {
        path: String,
        #[source]
        source: common::backend::Error,
    },
    #[error("cannot read the store: {0}")]
    Store(#[from] crate::mvcc::MvccError),
    #[error("raft: {0}")]
    Raft(#[from] raft::errors::Error),
    #[error("{0}")]
    Config(String),
    /// The member's own store says it was removed: etcd's end of life for it, not a fault.
    #[error("member {0}: {msg}", msg = crate::transport::REMOVED_MESSAGE)]
    Removed(String),
}

/// A member ready to run: raft node, WAL, snapshots, store and membership.
pub struct Booted {
    pub node: RawNode<MemStorage>,
    pub wal: Wal,
    pub snapshotter: Snapshotter,
    pub kv: Arc<KvStore>,
    pub lessor: Arc<Lessor>,
    pub member_id: u64,
    pub cluster_id: u64,
    pub members: Vec<Member>,
    pub removed: BTreeSet<u64>,
    /// Index of the snapshot the node started from (0 = none).
    pub snapshot_index: u64,
    /// Membership from that snapshot (conf changes after it are applied again from the log).
    pub conf_state: proto::raftpb::ConfState,
}

/// Opens the member's db as the flags say: --unsafe-no-fsync skips the backend's fsyncs too,
/// as etcd 3.5 passes it to bbolt (NoSync).
pub fn open_db(cfg: &Config, path: &std::path::Path) -> common::backend::Result<Db> {
    Db::open_with(
        path,
        common::backend::Options {
            no_sync: cfg.unsafe_no_fsync,
            ..Default::default()
        },
    )
}

fn open_store(cfg: &Config) -> Result<Arc<KvStore>, BootError> {
    let path = cfg.backend_path();
    let started = std::time::Instant::now();
    let db = open_db(cfg, &path).map_err(|source| BootError::Backend {
        path: path.display().to_string(),
        source,
    })?;
    let batch = Batch::new(
        db,
        BatchConfig {
            interval: cfg.backend_batch_interval,
            limit: cfg.backend_batch_limit,
        },
    );
    let kv = KvStore::open_with(
        Arc::new(batch),
        crate::mvcc::CompactionConfig {
            batch_limit: cfg.experimental_compaction_batch_limit,
            sleep_interval: cfg.experimental_compaction_sleep_interval,
        },
    )?;
    // The old revisions' index entries and cached events are gone: give the heap back.
    kv.on_compacted(|_| super::heap::release_soon());
    tracing::info!(path = %path.display(), took = ?started.elapsed(), "opened backend db");
    Ok(kv)
}

fn raft_config(cfg: &Config, id: u64, applied: u64) -> raft::Config {
    raft::Config {
        id,
        election_tick: cfg.election_ticks(),
        heartbeat_tick: 1,
        applied,
        check_quorum: true,
        pre_vote: cfg.pre_vote,
        seed: id
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
        ..raft::Config::default()
    }
}

/// The members --initial-cluster describes, in its order of names.
pub fn initial_members(cfg: &Config) -> Vec<Member> {
    let mut by_name: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut order = Vec::new();
    for (name, url) in &cfg.initial_cluster {
        if !by_name.contains_key(name.as_str()) {
            order.push(name.as_str());
        }
        by_name
            .entry(name)
            .or_default()
            .push(url.as_str().to_string());
    }
    order
        .into_iter()
        .map(|n| {
            Member::new_bootstrap(
                n,
                by_name.remove(n).unwrap_or_default(),
                &cfg.initial_cluster_token,
            )
        })
        .collect()
}

/// The raft peers of a new cluster; each conf change carries the member as JSON without its
/// client URLs, as etcd's do.
fn bootstrap_peers(members: &[Member]) -> Vec<Peer> {
    members
        .iter()
        .map(|m| Peer {
            id: m.id,
            context: Some(
                Member {
                    client_urls: Vec::new(),
                    ..m.clone()
                }
                .to_json()
                .into_bytes(),
            ),
        })
        .collect()
}

/// The cluster a new member joins (--initial-cluster-state existing), as its peers told it.
#[derive(Debug, Clone)]
pub struct Joined {
    pub cluster_id: u64,
    pub members: Vec<Member>,
    pub removed: BTreeSet<u64>,
}

/// Whether starting needs the cluster from the peers first (a new member of a running
/// cluster).
pub fn needs_join(cfg: &Config) -> bool {
    !wal::exists(&cfg.wal_dir()) && cfg.initial_cluster_state == ClusterState::Existing
}

/// Asks the peers of --initial-cluster (other than this member) for the cluster it joins.
pub async fn fetch_cluster(cfg: &Config) -> Result<Joined, BootError> {
    let mine: BTreeSet<String> = cfg
        .initial_advertise_peer_urls
        .iter()
        .map(|u| u.as_str().to_string())
        .collect();
    let urls: Vec<String> = cfg
        .initial_cluster
        .iter()
        .map(|(_, u)| u.as_str().to_string())
        .filter(|u| !mine.contains(u))
        .collect();
    let tls = crate::transport::peer_tls::client_config(cfg).map_err(BootError::Config)?;
    let http = crate::transport::client::PeerHttp::new(tls, std::time::Duration::from_secs(1));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut last = String::from("no peer URLs in --initial-cluster besides this member's");
    while !urls.is_empty() {
        for u in &urls {
            match crate::transport::forward::members(&http, u).await {
                Ok((cluster_id, members)) => {
                    check_cluster_versions(&http, &members, &mine).await?;
                    return Ok(Joined {
                        cluster_id,
                        members,
                        removed: BTreeSet::new(),
                    });
                }
                Err(e) => last = format!("{u}: {e}"),
            }
        }
        if tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    Err(BootError::Config(format!(
        "cannot fetch cluster info from peer urls: could not retrieve cluster information from the given URLs ({last})"
    )))
}

/// etcd's check before joining, as etcd 3.4.23 and 3.5.16 were seen to make it (fake peers
/// answering `/version`, docs/RAFTHTTP.md §14.2): each other member is asked its cluster
/// version; one that cannot be asked, or answers a version that does not parse (`not_decided`
/// while the cluster has not decided yet), is skipped with a warning; one whose version this
/// member cannot run at (above its own major.minor) refuses the join at once; and the join is
/// refused too unless at least one member answered a version this member can run at.
async fn check_cluster_versions(
    http: &crate::transport::client::PeerHttp,
    members: &[Member],
    mine: &BTreeSet<String>,
) -> Result<(), BootError> {
    use crate::transport::wire::id_path;
    let refused = || BootError::Config("incompatible with current running cluster".into());
    let ours = crate::transport::server::parse_version(crate::version::ETCD_VERSION);
    let mut compatible = false;
    for m in members {
        if m.peer_urls.iter().any(|u| mine.contains(u)) {
            continue;
        }
        let cluster = match crate::transport::forward::version(http, &m.peer_urls).await {
            Ok((_, cluster)) => cluster,
            Err(e) => {
                tracing::warn!(remote_member_id = %id_path(m.id), error = %e, "failed to get version");
                continue;
            }
        };
        let Some(c) = crate::transport::server::parse_version(&cluster) else {
            tracing::warn!(
                remote_member_id = %id_path(m.id),
                remote_member_cluster_version = %cluster,
                error = %format!("{cluster} is not in dotted-tri format"),
                "failed to parse cluster version of remote member"
            );
            continue;
        };
        if ours.is_none_or(|o| (c.0, c.1) > (o.0, o.1)) {
            tracing::error!(
                remote_member_id = %id_path(m.id),
                remote_member_cluster_version = %cluster,
                local_member_server_version = crate::version::ETCD_VERSION,
                "cluster version of remote member is not compatible; too high"
            );
            return Err(refused());
        }
        if c < (3, 0, 0) {
            tracing::error!(
                remote_member_id = %id_path(m.id),
                remote_member_cluster_version = %cluster,
                minimum_cluster_version_supported = crate::transport::wire::MIN_CLUSTER_VERSION,
                "cluster version of remote member is not compatible; too low"
            );
            return Err(refused());
        }
        compatible = true;
    }
    if compatible { Ok(()) } else { Err(refused()) }
}

pub fn boot(cfg: &Config, joined: Option<Joined>) -> Result<Booted, BootError> {
    let wal_dir = cfg.wal_dir();
    let snap_dir = cfg.snap_dir();
    if wal::exists(&wal_dir) {
        restart(cfg)
    } else {
        let joined = match (cfg.initial_cluster_state, joined) {
            (ClusterState::Existing, Some(j)) => Some(j),
            (ClusterState::Existing, None) => {
                return Err(BootError::Config(
                    "--initial-cluster-state=existing: the cluster was not fetched from its peers"
                        .into(),
                ));
            }
            _ => None,
        };
        fileutil::touch_dir_all(&cfg.data_dir)?;
        fileutil::touch_dir_all(&snap_dir)?;
        if let Some(parent) = wal_dir.parent() {
            fileutil::touch_dir_all(parent)?;
        }
        match joined {
            Some(j) => join_member(cfg, j),
            None => new_member(cfg),
        }
    }
}

/// A member added with `member add` starting for the first time: it takes its ID from the
/// cluster's member list (matched by peer URLs) and an empty log the leader fills.
fn join_member(cfg: &Config, j: Joined) -> Result<Booted, BootError> {
    let mut mine: Vec<String> = cfg
        .initial_advertise_peer_urls
        .iter()
        .map(|u| u.as_str().to_string())
        .collect();
    mine.sort();
    let me = j
        .members
        .iter()
        .find(|m| {
            let mut u = m.peer_urls.clone();
            u.sort();
            u == mine
        })
        .cloned()
        .ok_or_else(|| {
            BootError::Config(format!(
                "error validating peerURLs: no member of cluster {} has the peer URLs {} (add it first with `etcdctl member add {} --peer-urls={}`)",
                membership::id_hex(j.cluster_id),
                mine.join(","),
                cfg.name,
                mine.join(",")
            ))
        })?;
    if j.removed.contains(&me.id) {
        return Err(BootError::Config(format!(
            "member {} was removed from the cluster and cannot join it again",
            membership::id_hex(me.id)
        )));
    }
    let kv = open_store(cfg)?;
    let wal = create_wal(cfg, me.id, j.cluster_id)?;
    let node = RawNode::new(&raft_config(cfg, me.id, 0), MemStorage::new())?;
    tracing::info!(
        local_member_id = %membership::id_hex(me.id),
        cluster_id = %membership::id_hex(j.cluster_id),
        "joining an existing cluster"
    );
    Ok(Booted {
        node,
        wal,
        snapshotter: Snapshotter::new(cfg.snap_dir()),
        lessor: load_leases(cfg, &kv),
        kv,
        member_id: me.id,
        cluster_id: j.cluster_id,
        members: j.members,
        removed: j.removed,
        snapshot_index: 0,
        conf_state: Default::default(),
    })
}

fn new_member(cfg: &Config) -> Result<Booted, BootError> {
    let members = initial_members(cfg);
    let me = members
        .iter()
        .find(|m| m.name == cfg.name)
        .cloned()
        .ok_or_else(|| {
            BootError::Config(format!(
                "couldn't find local name {:?} in the initial cluster configuration",
                cfg.name
            ))
        })?;
    let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
    let cluster_id = membership::cluster_id(&ids);
    let kv = open_store(cfg)?;
    let wal = create_wal(cfg, me.id, cluster_id)?;
    let mut node = RawNode::new(&raft_config(cfg, me.id, 0), MemStorage::new())?;
    node.bootstrap(&bootstrap_peers(&members))?;
    tracing::info!(
        local_member_id = %membership::id_hex(me.id),
        cluster_id = %membership::id_hex(cluster_id),
        "starting local member"
    );
    Ok(Booted {
        node,
        wal,
        snapshotter: Snapshotter::new(cfg.snap_dir()),
        lessor: load_leases(cfg, &kv),
        kv,
        member_id: me.id,
        cluster_id,
        members,
        removed: BTreeSet::new(),
        snapshot_index: 0,
        conf_state: Default::default(),
    })
}

/// A new member's WAL, its metadata naming the member and its cluster.
fn create_wal(cfg: &Config, node_id: u64, cluster_id: u64) -> Result<Wal, BootError> {
    let metadata = Metadata {
        node_id,
        cluster_id,
    }
    .encode_to_vec();
    let wal_dir = cfg.wal_dir();
    Wal::create_with(&wal_dir, &metadata, wal_options(cfg)).map_err(|source| BootError::Wal {
        dir: wal_dir.display().to_string(),
        source,
    })
}

fn wal_options(cfg: &Config) -> WalOptions {
    WalOptions {
        unsafe_no_sync: cfg.unsafe_no_fsync,
        ..WalOptions::default()
    }
}

fn restart(cfg: &Config) -> Result<Booted, BootError> {
    let wal_dir = cfg.wal_dir();
    let wal_err = |source| BootError::Wal {
        dir: wal_dir.display().to_string(),
        source,
    };
    fileutil::check_dir_permission(&cfg.data_dir, fileutil::PRIVATE_DIR_MODE).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "check file permission");
    });
    let snapshotter = Snapshotter::new(cfg.snap_dir());
    fileutil::touch_dir_all(snapshotter.dir())?;
    snapshotter.cleanup_tmp()?;
    let markers = wal::valid_snapshot_entries(&wal_dir).map_err(wal_err)?;
    let snapshot = match snapshotter.load_newest_available(&markers) {
        Ok(s) => Some(s),
        Err(SnapError::NoSnapshot) => None,
        Err(e) => return Err(e.into()),
    };
    // etcd's rule: a snapshot's v2 store holds the membership (the db's `members` bucket can
    // be stale: etcd 3.4's restore leaves the old cluster's members there).
    let snap_members = snapshot
        .as_ref()
        .and_then(|s| s.data.as_deref())
        .and_then(membership::v2store::members_from_image)
        .filter(|m| !m.is_empty());
    let mut kv = open_store(cfg)?;
    if let Some(md) = snapshot.as_ref().and_then(|s| s.metadata.as_ref())
        && md.index > kv.consistent_index()
    {
        // A crash after a follower saved the leader's snapshot but before its db was moved
        // into place: the image is still next to the .snap file.
        drop(kv);
        install_snapshot_db(&snapshotter, md.index, &cfg.backend_path())?;
        kv = open_store(cfg)?;
    }
    let marker = snapshot
        .as_ref()
        .and_then(|s| s.metadata.as_ref())
        .map(|m| walpb::Snapshot {
            index: m.index,
            term: m.term,
            conf_state: None,
        })
        .unwrap_or_default();
    let opts = wal_options(cfg);
    let (wal, read) = {
        let mut w = Wal::open_with(&wal_dir, &marker, opts).map_err(wal_err)?;
        match w.read_all() {
            Ok(r) => (w, r),
            Err(WalError::TornTail { file, offset }) => {
                drop(w);
                tracing::warn!(file = %file.display(), offset, "repairing a torn WAL tail left by a crash");
                wal::repair(&wal_dir).map_err(wal_err)?;
                let mut w = Wal::open_with(&wal_dir, &marker, opts).map_err(wal_err)?;
                let r = w.read_all().map_err(wal_err)?;
                (w, r)
            }
            Err(e) => return Err(wal_err(e)),
        }
    };
    let meta = Metadata::decode(read.metadata.as_slice())
        .map_err(|e| BootError::Config(format!("the WAL's metadata does not decode: {e}")))?;
    let mut storage = MemStorage::new();
    let mut snapshot_index = 0;
    let mut conf_state = proto::raftpb::ConfState::default();
    if let Some(s) = snapshot {
        snapshot_index = s.metadata.as_ref().map(|m| m.index).unwrap_or(0);
        conf_state = s
            .metadata
            .as_ref()
            .and_then(|m| m.conf_state.clone())
            .unwrap_or_default();
        storage
            .apply_snapshot(s)
            .map_err(|e| BootError::Config(format!("cannot install the snapshot: {e}")))?;
    }
    storage.set_hard_state(read.state);
    storage.append(&read.entries);
    let never_started = snapshot_index == 0
        && read.entries.is_empty()
        && read.state == proto::raftpb::HardState::default();
    let mut node = RawNode::new(&raft_config(cfg, meta.node_id, snapshot_index), storage)?;
    if never_started {
        // The first start crashed after creating the WAL but before its bootstrap entries
        // were saved: bootstrap again (restarting with an empty log would leave the member
        // without a membership, and it could elect itself alone).
        let members = initial_members(cfg);
        if !members.iter().any(|m| m.id == meta.node_id) {
            return Err(BootError::Config(format!(
                "the WAL in {} belongs to member {}, which --initial-cluster does not describe",
                wal_dir.display(),
                membership::id_hex(meta.node_id)
            )));
        }
        tracing::warn!("the WAL holds no entries: bootstrapping the member again");
        node.bootstrap(&bootstrap_peers(&members))?;
    }
    // etcd 3.4 and 3.5 take the membership from the snapshot's v2 store and the log after it,
    // not from the db: the db's `members` bucket of a dir etcd 3.4 restored still lists the
    // old cluster's members and lacks the new ones until they publish. So the bucket is made
    // to agree with the snapshot's members plus the conf changes and attributes of the
    // entries the db has applied since (later ones are applied as usual).
    let mut removed = load_removed(&kv);
    let mut members = load_members(&kv);
    if let Some(ms) = snap_members {
        let applied = kv.consistent_index();
        let after = read
            .entries
            .iter()
            .filter(|e| e.index > snapshot_index && e.index <= applied);
        let (v2, v2_removed) = v2_membership::recover(ms, &removed, after);
        if !v2_membership::same_members(&v2, &members) || v2_removed != removed {
            tracing::warn!(
                bucket = ?members.iter().map(|m| membership::id_hex(m.id)).collect::<Vec<_>>(),
                snapshot_and_log = ?v2.iter().map(|m| membership::id_hex(m.id)).collect::<Vec<_>>(),
                "the db's members bucket disagrees with the snapshot's v2 store and the log; rewriting it as etcd recovers the membership"
            );
            replace_members_bucket(&kv, &v2, &v2_removed);
        }
        members = v2;
        removed = v2_removed;
    }
    if removed.contains(&meta.node_id) {
        return Err(BootError::Removed(membership::id_hex(meta.node_id)));
    }
    tracing::info!(
        local_member_id = %membership::id_hex(meta.node_id),
        cluster_id = %membership::id_hex(meta.cluster_id),
        commit_index = read.state.commit,
        snapshot_index,
        "restarting local member"
    );
    Ok(Booted {
        node,
        wal,
        snapshotter,
        lessor: load_leases(cfg, &kv),
        kv,
        member_id: meta.node_id,
        cluster_id: meta.cluster_id,
        members,
        removed,
        snapshot_index,
        conf_state,
    })
}

/// The members recorded in the backend (`members` bucket).
pub fn load_members(kv: &KvStore) -> Vec<Member> {
    kv.backend()
        .range(buckets::MEMBERS, b"\0", Some(&[0xff]), 0)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(_, v)| Member::from_json(&v).ok())
        .collect()
}

/// Rewrites the `members` bucket to hold exactly `members`, and records `removed` in
/// `members_removed`.
pub fn replace_members_bucket(kv: &KvStore, members: &[Member], removed: &BTreeSet<u64>) {
    let backend = kv.backend();
    let old = backend
        .range(buckets::MEMBERS, b"\0", Some(&[0xff]), 0)
        .unwrap_or_default();
    let mut g = backend.begin();
    for (k, _) in old {
        g.delete(buckets::MEMBERS, &k);
    }
    for m in members {
        g.put(
            buckets::MEMBERS,
            membership::member_key(m.id).as_bytes(),
            m.to_json().as_bytes(),
        );
    }
    for id in removed {
        g.put(
            buckets::MEMBERS_REMOVED,
            membership::member_key(*id).as_bytes(),
            b"removed",
        );
    }
    if let Err(e) = g.finish() {
        tracing::warn!(error = %e, "cannot rewrite the members bucket from the snapshot");
    }
}

/// The IDs of removed members (`members_removed` bucket): they may never come back.
pub fn load_removed(kv: &KvStore) -> BTreeSet<u64> {
    kv.backend()
        .range(buckets::MEMBERS_REMOVED, b"\0", Some(&[0xff]), 0)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, _)| {
            std::str::from_utf8(&k)
                .ok()
                .and_then(|s| u64::from_str_radix(s, 16).ok())
        })
        .collect()
}

/// Moves the db image received with the leader's snapshot at `index` over the member's db
/// (and fsyncs the directory), so a restart finds the db that matches the snapshot.
pub fn install_snapshot_db(
    snapshotter: &Snapshotter,
    index: u64,
    db_path: &std::path::Path,
) -> Result<(), BootError> {
    let src = snapshotter.db_file_path_existing(index)?;
    std::fs::rename(&src, db_path).map_err(|e| {
        BootError::Config(format!(
            "cannot move the snapshot db {} to {}: {e}",
            src.display(),
            db_path.display()
        ))
    })?;
    if let Some(dir) = db_path.parent() {
        fileutil::fsync_dir(dir)?;
    }
    tracing::info!(path = %db_path.display(), snapshot_index = index, "installed the snapshot's db");
    Ok(())
}

/// The leases in the backend, with the keys that name them attached, each given a full TTL
/// plus an election timeout (nobody knows when they were last renewed).
pub fn load_leases(cfg: &Config, kv: &KvStore) -> Arc<Lessor> {
    Arc::new(leases_of(cfg, kv))
}

/// As `load_leases`, unshared.
pub fn leases_of(cfg: &Config, kv: &KvStore) -> Lessor {
    let ticks = cfg.election_ticks() as u64;
    let min_ttl_ms = (3 * ticks / 2) * cfg.heartbeat_interval.as_millis() as u64;
    let lessor = leases_from_db(min_ttl_ms.div_ceil(1000) as i64, kv);
    lessor.extend_all(cfg.election_timeout);
    lessor
}

/// The leases recorded in `kv`'s backend with the keys that name them attached, at their
/// granted TTLs (`min_ttl` in seconds): what a restarted member knows of its leases.
pub fn leases_from_db(min_ttl: i64, kv: &KvStore) -> Lessor {
    let lessor = Lessor::new(min_ttl);
    let rows = kv
        .backend()
        .range(buckets::LEASE, &[0u8; 8], Some(&[0xff; 9]), 0)
        .unwrap_or_default();
    for (_, v) in rows {
        if let Ok(l) = proto::leasepb::Lease::decode(v.as_slice()) {
            lessor.grant(l.id, l.ttl);
        }
    }
    // Found by the index rebuild, which read every key-value anyway: reading them all again
    // here held every value in memory at once (issue 19).
    for (key, lease) in kv.take_leased_keys() {
        lessor.attach(lease, &key);
    }
    lessor
}
