// Starting a member from its data dir: a new dir bootstraps a cluster from the flags (IDs
// derived as etcd's, members written into the log); an existing dir is replayed from its
// newest usable snapshot, its WAL and its db, whatever the flags say.

use std::collections::BTreeMap;
use std::sync::Arc;

use common::backend::{Batch, BatchConfig, Db, buckets};
use common::fileutil;
use common::snap::{SnapError, Snapshotter};
use common::wal::{self, Wal, WalError, WalOptions};
use prost::Message;
use proto::etcdserverpb::Metadata;
use proto::walpb;

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
    /// Index of the snapshot the node started from (0 = none).
    pub snapshot_index: u64,
    /// Membership from that snapshot (conf changes after it are applied again from the log).
    pub conf_state: proto::raftpb::ConfState,
}

fn open_store(cfg: &Config) -> Result<Arc<KvStore>, BootError> {
    let path = cfg.backend_path();
    let started = std::time::Instant::now();
    let db = Db::open(&path).map_err(|source| BootError::Backend {
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
    let kv = KvStore::open(Arc::new(batch))?;
    tracing::info!(path = %path.display(), took = ?started.elapsed(), "opened backend db");
    Ok(Arc::new(kv))
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

pub fn boot(cfg: &Config) -> Result<Booted, BootError> {
    let wal_dir = cfg.wal_dir();
    let snap_dir = cfg.snap_dir();
    if wal::exists(&wal_dir) {
        restart(cfg)
    } else {
        if cfg.initial_cluster_state == ClusterState::Existing {
            return Err(BootError::Config(
                "joining an existing cluster (--initial-cluster-state=existing) needs the cluster support that is not built yet".into(),
            ));
        }
        fileutil::touch_dir_all(&cfg.data_dir)?;
        fileutil::touch_dir_all(&snap_dir)?;
        if let Some(parent) = wal_dir.parent() {
            fileutil::touch_dir_all(parent)?;
        }
        new_member(cfg)
    }
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
    let metadata = Metadata {
        node_id: me.id,
        cluster_id,
    }
    .encode_to_vec();
    let wal_dir = cfg.wal_dir();
    let wal = Wal::create_with(&wal_dir, &metadata, wal_options(cfg)).map_err(|source| {
        BootError::Wal {
            dir: wal_dir.display().to_string(),
            source,
        }
    })?;
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
        snapshot_index: 0,
        conf_state: Default::default(),
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
    let kv = open_store(cfg)?;
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
    let members = snap_members.unwrap_or_else(|| load_members(&kv));
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

/// The leases in the backend, with the keys that name them attached, each given a full TTL
/// plus an election timeout (nobody knows when they were last renewed).
pub fn load_leases(cfg: &Config, kv: &KvStore) -> Arc<Lessor> {
    let ticks = cfg.election_ticks() as u64;
    let min_ttl_ms = (3 * ticks / 2) * cfg.heartbeat_interval.as_millis() as u64;
    let lessor = Arc::new(Lessor::new(min_ttl_ms.div_ceil(1000) as i64));
    let rows = kv
        .backend()
        .range(buckets::LEASE, &[0u8; 8], Some(&[0xff; 9]), 0)
        .unwrap_or_default();
    for (_, v) in rows {
        if let Ok(l) = proto::leasepb::Lease::decode(v.as_slice()) {
            lessor.grant(l.id, l.ttl);
        }
    }
    if let Ok(all) = kv.range(crate::mvcc::KeyRange::new(b"\0", b"\0"), 0, 0) {
        for k in all.kvs.iter().filter(|k| k.lease != 0) {
            lessor.attach(k.lease, &k.key);
        }
    }
    lessor.extend_all(cfg.election_timeout);
    lessor
}
