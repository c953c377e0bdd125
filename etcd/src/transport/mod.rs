// The peer transport: raft messages, snapshots and membership requests between the members of
// a cluster over their peer URLs, in etcd's own protocol (rafthttp, docs/RAFTHTTP.md), so etcd
// members and ours form one cluster. Its tasks run on the raft thread while the raft loop waits
// (server/raft_thread.rs): nothing here may block that thread or wait for the raft loop; file
// I/O goes through spawn_blocking or tokio::fs.
//
// Outgoing messages are queued per peer (a full queue drops the message and tells raft the peer
// is unreachable); incoming ones reach raft through `DeliverFn`.

pub mod client;
pub mod forward;
pub mod peer;
pub mod peer_tls;
pub mod refusals;
pub mod server;
pub mod snapshot;
pub mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::raftpb::{Message, MessageType};

use crate::membership::id_hex;
pub use client::Identity;
use client::PeerHttp;
use peer::{Peer, PeerCtx};

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
/// Where messages received from peers go (the raft loop's queue).
pub type DeliverFn = Arc<dyn Fn(Message) + Send + Sync>;

/// Identity and settings every peer connection carries.
#[derive(Clone)]
pub struct Local {
    pub member_id: u64,
    pub cluster_id: u64,
    /// This member's advertised peer URLs (sent as X-PeerURLs).
    pub peer_urls: Vec<String>,
    pub dial_timeout: Duration,
    /// TLS for dialing peers (https peer URLs).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

pub struct Transport {
    local: Local,
    ctx: PeerCtx,
    rt: tokio::runtime::Handle,
    peers: Mutex<HashMap<u64, Arc<Peer>>>,
    dropped: AtomicU64,
    refusals: refusals::Refusals,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Transport {
    pub fn new(
        local: Local,
        rt: tokio::runtime::Handle,
        report: ReportFn,
        deliver: DeliverFn,
    ) -> Transport {
        let http = Arc::new(PeerHttp::new(local.tls.clone(), local.dial_timeout));
        let ctx = PeerCtx {
            me: Identity {
                member_id: local.member_id,
                cluster_id: local.cluster_id,
                peer_urls: local.peer_urls.clone(),
                server_version: crate::version::ETCD_VERSION,
            },
            http,
            report,
            deliver,
        };
        Transport {
            local,
            ctx,
            rt,
            peers: Mutex::new(HashMap::new()),
            dropped: AtomicU64::new(0),
            refusals: refusals::Refusals::default(),
        }
    }

    pub fn local(&self) -> &Local {
        &self.local
    }

    /// The HTTP client to peers (for membership, lease and hash requests).
    pub fn http(&self) -> &Arc<PeerHttp> {
        &self.ctx.http
    }

    /// The refusals the peer port has logged (each peer and reason once).
    pub fn refusals(&self) -> &refusals::Refusals {
        &self.refusals
    }

    /// The headers raft requests carry for this member.
    pub fn identity(&self) -> &Identity {
        &self.ctx.me
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
        peers.insert(id, Arc::new(Peer::start(id, urls, &self.ctx, &self.rt)));
    }

    /// Stops talking to a member that left the cluster.
    pub fn remove_peer(&self, id: u64) {
        if let Some(p) = lock(&self.peers).remove(&id) {
            p.stop();
        }
    }

    /// A member we talk to, for the peer server attaching a stream it dialed.
    pub fn peer(&self, id: u64) -> Option<Arc<Peer>> {
        lock(&self.peers).get(&id).cloned()
    }

    /// The peer URLs of a member, as the transport knows them.
    pub fn peer_urls(&self, id: u64) -> Option<Vec<String>> {
        lock(&self.peers)
            .get(&id)
            .map(|p| p.urls.read().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Whether a stream with `id` is up now (etcd's "active" peers for reconfig checks).
    pub fn is_connected(&self, id: u64) -> bool {
        lock(&self.peers).get(&id).is_some_and(|p| p.is_active())
    }

    /// Messages dropped because a peer's queue was full (or the peer unknown).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues raft messages for their peers without waiting.
    pub fn send(&self, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to;
            let Some(p) = self.peer(to) else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(to = %id_hex(to), "dropping a message to an unknown member");
                continue;
            };
            let snap = m.r#type == MessageType::MsgSnap as i32;
            if !p.send(m) {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(to = %id_hex(to), dropped_total = n, "dropped an internal raft message since the sending buffer is full");
                }
                (self.ctx.report)(if snap {
                    Report::Snapshot { to, ok: false }
                } else {
                    Report::Unreachable(to)
                });
            }
        }
    }

    /// Sends a snapshot message with the db image `tx` reads to its member (`POST
    /// /raft/snapshot`); the outcome is reported to raft.
    pub fn send_snapshot(&self, m: Message, db: common::backend::Db, tx: common::backend::ReadTx) {
        let to = m.to;
        let Some(urls) = self.peer_urls(to) else {
            (self.ctx.report)(Report::Snapshot { to, ok: false });
            return;
        };
        self.rt
            .spawn(snapshot::send(m, db, tx, urls, self.ctx.clone()));
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        for (_, p) in lock(&self.peers).drain() {
            p.stop();
        }
    }
}
