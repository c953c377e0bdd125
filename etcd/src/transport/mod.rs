// The peer transport: raft messages and snapshots between the members of a cluster, over the
// peer URLs (etcd-rs's own gRPC service, peerpb). Nothing here ever blocks the raft loop.
//
// Each peer has a bounded queue drained by one task that keeps a long-lived stream open to it;
// a full queue drops the message (raft retries) and tells raft the peer is unreachable.

pub mod forward;
pub mod peer_tls;
pub mod sender;
pub mod service;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prost::Message as _;
use proto::raftpb::{Message, MessageType};
use tokio::sync::mpsc;

use crate::membership::id_hex;

/// Messages a peer's queue holds before new ones are dropped (etcd's streamBufSize).
const QUEUE: usize = 4096;

/// gRPC metadata naming the sender's cluster and member.
pub const CLUSTER_ID_HEADER: &str = "etcd-cluster-id";
pub const FROM_HEADER: &str = "etcd-from";

/// Why a peer refused us: we were removed from the cluster.
pub const REMOVED_MESSAGE: &str = "the member has been permanently removed from the cluster";

/// What the transport tells the raft loop.
#[derive(Debug)]
pub enum Report {
    Unreachable(u64),
    Snapshot {
        to: u64,
        ok: bool,
    },
    /// A peer says this member was removed from the cluster.
    Removed,
}

/// Where reports go (the raft loop's queue).
pub type ReportFn = Arc<dyn Fn(Report) + Send + Sync>;

struct Peer {
    tx: mpsc::Sender<Vec<u8>>,
    urls: Arc<RwLock<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
    connected: Arc<std::sync::atomic::AtomicBool>,
}

/// Identity and settings every peer connection carries.
#[derive(Clone)]
pub struct Local {
    pub member_id: u64,
    pub cluster_id: u64,
    pub dial_timeout: Duration,
    /// TLS for dialing peers (https peer URLs).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

pub struct Transport {
    local: Local,
    rt: tokio::runtime::Handle,
    report: ReportFn,
    peers: Mutex<HashMap<u64, Peer>>,
    dropped: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Transport {
    pub fn new(local: Local, rt: tokio::runtime::Handle, report: ReportFn) -> Transport {
        Transport {
            local,
            rt,
            report,
            peers: Mutex::new(HashMap::new()),
            dropped: AtomicU64::new(0),
        }
    }

    pub fn local(&self) -> &Local {
        &self.local
    }

    /// Starts (or re-aims) the connection to member `id` at `urls`.
    pub fn set_peer(&self, id: u64, urls: Vec<String>) {
        if id == self.local.member_id {
            return;
        }
        let mut peers = lock(&self.peers);
        if let Some(p) = peers.get(&id) {
            *p.urls.write().unwrap_or_else(|e| e.into_inner()) = urls;
            return;
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let urls = Arc::new(RwLock::new(urls));
        let connected = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = self.rt.spawn(sender::run(
            id,
            urls.clone(),
            rx,
            self.local.clone(),
            self.report.clone(),
            connected.clone(),
        ));
        peers.insert(
            id,
            Peer {
                tx,
                urls,
                task,
                connected,
            },
        );
    }

    /// Stops talking to a member that left the cluster.
    pub fn remove_peer(&self, id: u64) {
        if let Some(p) = lock(&self.peers).remove(&id) {
            p.task.abort();
        }
    }

    /// The peer URLs of a member, as the transport knows them.
    pub fn peer_urls(&self, id: u64) -> Option<Vec<String>> {
        lock(&self.peers)
            .get(&id)
            .map(|p| p.urls.read().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Whether the stream to `id` is up now (etcd's "active" peers for reconfig checks).
    pub fn is_connected(&self, id: u64) -> bool {
        lock(&self.peers)
            .get(&id)
            .is_some_and(|p| p.connected.load(Ordering::Relaxed))
    }

    /// Messages dropped because a peer's queue was full (or the peer unknown).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues raft messages for their peers without waiting.
    pub fn send(&self, msgs: Vec<Message>) {
        let peers = lock(&self.peers);
        for m in msgs {
            let to = m.to;
            let Some(p) = peers.get(&to) else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(to = %id_hex(to), "dropping a message to an unknown member");
                continue;
            };
            let snap = m.r#type == MessageType::MsgSnap as i32;
            if p.tx.try_send(m.encode_to_vec()).is_err() {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(to = %id_hex(to), dropped_total = n, "dropped an internal raft message since the sending buffer is full");
                }
                (self.report)(if snap {
                    Report::Snapshot { to, ok: false }
                } else {
                    Report::Unreachable(to)
                });
            }
        }
    }

    /// Streams a snapshot message with the db image `tx` reads to its member; the outcome is
    /// reported to raft when the peer has the image (or failed to get it).
    pub fn send_snapshot(&self, m: Message, db: common::backend::Db, tx: common::backend::ReadTx) {
        let to = m.to;
        let Some(urls) = self.peer_urls(to) else {
            (self.report)(Report::Snapshot { to, ok: false });
            return;
        };
        self.rt.spawn(sender::send_snapshot(
            m,
            db,
            tx,
            urls,
            self.local.clone(),
            self.report.clone(),
        ));
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        for (_, p) in lock(&self.peers).drain() {
            p.task.abort();
        }
    }
}
