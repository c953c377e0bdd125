// Corruption checks (--experimental-initial-corrupt-check, --experimental-corrupt-check-time):
// members compare HashKV at the same revision; a mismatch stops a starting member, or raises
// the CORRUPT alarm for the member that differs from the leader.

use std::sync::Arc;

use proto::etcdserverpb::{
    AlarmRequest, AlarmType, HashKvResponse, InternalRaftRequest, alarm_request::AlarmAction,
};

use super::EtcdServer;
use crate::error::{self, Error};
use crate::transport::wire::id_path;

/// This member's HashKV at `rev` (0 = now), as the Maintenance service answers it.
pub async fn local_hash(server: &EtcdServer, rev: i64) -> Result<HashKvResponse, Error> {
    let store = server.kv().clone();
    let started = std::time::Instant::now();
    let (hash, hashed, compact) = tokio::task::spawn_blocking(move || store.hash_kv(rev))
        .await
        .map_err(|_| error::STOPPED)?
        .map_err(crate::apply::kv::mvcc_error)?;
    crate::metrics::METRICS
        .hash_rev
        .observe(started.elapsed().as_secs_f64());
    Ok(HashKvResponse {
        header: server.header(server.kv().current_rev()),
        hash,
        // etcd reports -1 until the first compaction.
        compact_revision: if compact == 0 { -1 } else { compact },
        hash_revision: hashed,
    })
}

/// Each peer's answer to HashKV at `rev`: (member id, answer or error text).
async fn peer_hashes(server: &EtcdServer, rev: i64) -> Vec<(u64, Result<HashKvResponse, String>)> {
    let mut out = Vec::new();
    for m in server.members() {
        if m.id == server.member_id() {
            continue;
        }
        let r =
            crate::transport::forward::hash_kv(server.transport().http(), &m.peer_urls, rev).await;
        out.push((m.id, r));
    }
    out
}

/// The check before serving: this member's hash against every peer's at this member's
/// revision. Differences at the same compaction point mean this member's data is corrupt.
pub async fn initial_check(server: &EtcdServer) -> Result<(), String> {
    let mine = local_hash(server, 0)
        .await
        .map_err(|e| format!("initial corruption check: {}", e.message))?;
    tracing::info!(local_member_id = %id_path(server.member_id()), revision = mine.hash_revision, "starting initial corruption check");
    let mut mismatches = 0;
    for (id, r) in peer_hashes(server, mine.hash_revision).await {
        match r {
            Ok(p) if p.compact_revision == mine.compact_revision && p.hash != mine.hash => {
                tracing::error!(
                    local_member_id = %id_path(server.member_id()),
                    local_member_hash = mine.hash,
                    remote_peer_id = %id_path(id),
                    remote_peer_hash = p.hash,
                    revision = mine.hash_revision,
                    compact_revision = mine.compact_revision,
                    "found different hash values from remote peer"
                );
                mismatches += 1;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(remote_peer_id = %id_path(id), error = %e, "cannot fetch hash from remote peer")
            }
        }
    }
    if mismatches > 0 {
        return Err(format!(
            "{} found data inconsistency with peers",
            id_path(server.member_id())
        ));
    }
    tracing::info!(local_member_id = %id_path(server.member_id()), "initial corruption checking passed; no corruption was detected");
    Ok(())
}

/// The leader's periodic check, as etcd 3.4 and 3.5 run it: a peer whose hash at the
/// leader's revision differs at the same compaction point raises the CORRUPT alarm for the
/// cluster, with member ID 0 (not the peer's: both etcd versions were seen doing so, and the
/// alarm is what every member then stores and `alarm list` shows). Unreachable peers and the
/// number checked are logged each round, as etcd does.
pub async fn run_periodic(server: Arc<EtcdServer>) {
    let every = server.cfg().experimental_corrupt_check_time;
    if every.is_zero() {
        return;
    }
    loop {
        tokio::time::sleep(every).await;
        if !server.is_leader() {
            continue;
        }
        let Ok(mine) = local_hash(&server, 0).await else {
            continue;
        };
        let mut checked = 0;
        let mut mismatch = false;
        for (id, r) in peer_hashes(&server, mine.hash_revision).await {
            let p = match r {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(
                        local_member_id = %id_path(server.member_id()),
                        requested_revision = mine.hash_revision,
                        remote_peer_id = %id_path(id),
                        error = %e,
                        "failed hash kv request"
                    );
                    continue;
                }
            };
            checked += 1;
            if p.compact_revision == mine.compact_revision && p.hash != mine.hash {
                tracing::warn!(
                    leader_compact_revision = mine.compact_revision,
                    leader_hash = mine.hash,
                    follower_compact_revision = p.compact_revision,
                    follower_hash = p.hash,
                    follower_peer_id = %id_path(id),
                    "same compact revision then hashes must match"
                );
                mismatch = true;
            }
        }
        tracing::info!(
            number_of_peers_checked = checked,
            "finished peer corruption check"
        );
        if !mismatch {
            continue;
        }
        let req = InternalRaftRequest {
            alarm: Some(AlarmRequest {
                action: AlarmAction::Activate as i32,
                member_id: 0,
                alarm: AlarmType::Corrupt as i32,
            }),
            ..Default::default()
        };
        if let Err(e) = server.propose(req).await {
            tracing::warn!(error = %e, "failed to raise the CORRUPT alarm");
        }
    }
}
