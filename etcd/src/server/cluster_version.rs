// The cluster version and member attributes, decided and published as etcd decides them: the
// leader asks every member's `/version` and sets the cluster version to the lowest server
// version (major.minor.0), or while a downgrade job runs to the job's target, through raft;
// a member publishes its name and client URLs.
//
// Member attributes always go into the log as etcd's v2 request, which etcd 3.4 and 3.5
// both apply (etcd 3.4 stops on a v3 request it does not know, and one may rejoin a cluster
// of ours during a rollback). The cluster version goes as a v2 request below 3.5 and as
// 3.5's v3 request from 3.5 on: etcd 3.4 replaying a v2 "3.5.0" would refuse to start,
// while it skips v3 entries its db already holds.

use std::sync::Arc;
use std::time::Duration;

use proto::etcdserverpb::{InternalRaftRequest, Request};
use proto::membershippb::{Attributes, ClusterVersionSetRequest};

use super::EtcdServer;
use crate::membership::id_hex;
use crate::transport::server::parse_version;

/// How often the leader looks at its members' versions (etcd: every 4 s).
const MONITOR: Duration = Duration::from_secs(4);
/// How often it looks while the cluster version is not decided.
const UNDECIDED: Duration = Duration::from_millis(500);

/// (major, minor) of a version string, if it is one.
fn major_minor(v: &str) -> Option<(u64, u64)> {
    parse_version(v).map(|(a, b, _)| (a, b))
}

/// Whether cluster version `cluster` ("" when not decided) is at least `v`.
pub fn at_least(cluster: &str, v: (u64, u64)) -> bool {
    major_minor(cluster).is_some_and(|c| c >= v)
}

/// A v2 PUT as etcd 3.4 writes them in the log.
fn v2_put(path: String, val: String) -> Request {
    Request {
        method: "PUT".into(),
        path,
        val,
        ..Default::default()
    }
}

/// Publishes this member's name and client URLs through raft (etcd's publish step).
pub async fn publish(server: &EtcdServer) {
    let cfg = server.cfg();
    let attrs = Attributes {
        name: cfg.name.clone(),
        client_urls: cfg
            .advertise_client_urls
            .iter()
            .map(|u| u.as_str().to_string())
            .collect(),
    };
    #[derive(serde::Serialize)]
    struct V2Attrs<'a> {
        name: &'a str,
        #[serde(rename = "clientURLs")]
        client_urls: &'a [String],
    }
    let val = serde_json::to_string(&V2Attrs {
        name: &attrs.name,
        client_urls: &attrs.client_urls,
    })
    .unwrap_or_default();
    let path = format!(
        "/0/members/{}/attributes",
        crate::membership::member_key(server.member_id())
    );
    let result = server.propose_v2(v2_put(path, val)).await;
    match result {
        Ok(_) => tracing::info!(
            local_member_id = %id_hex(server.member_id()),
            local_member_attributes = %format!("{{Name:{} ClientURLs:[{}]}}", attrs.name, attrs.client_urls.join(" ")),
            "published local member to cluster through raft"
        ),
        Err(e) => {
            tracing::warn!(error = %e, "failed to publish local member to cluster through raft")
        }
    }
}

/// The version the cluster should run at: the lowest of its members' server versions, as
/// major.minor.0; None while some member's version is unknown.
async fn decide(server: &EtcdServer) -> Option<String> {
    let mut lowest = major_minor(crate::version::ETCD_VERSION)?;
    for m in server.members() {
        if m.id == server.member_id() {
            continue;
        }
        let (sv, _) = crate::transport::forward::version(server.transport().http(), &m.peer_urls)
            .await
            .ok()?;
        let v = major_minor(&sv)?;
        lowest = lowest.min(v);
    }
    Some(format!("{}.{}.0", lowest.0, lowest.1))
}

/// Whether the leader is a member below 3.5 (etcd 3.4) that will leave the cluster version at
/// 3.5 or more: one whose own view of the version is decided and lower than ours. That is an
/// etcd 3.4 member restarted on a data dir it once ran on: it replays its old v2 entries (a
/// version of 3.4) and skips our v3 entries that raised it to 3.5, and being decided it only
/// ever raises. An etcd 3.4 leader whose view is undecided (`not_decided`: started on a dir of
/// ours, whose snapshots leave the version out) sets the version itself at once, as etcd
/// does for a new cluster, so nothing is proposed then (docs/RAFTHTTP.md §14.3).
async fn leader_keeps_too_high(server: &EtcdServer) -> bool {
    let Some(ours) = major_minor(&server.cluster_version()) else {
        return false;
    };
    if ours < (3, 5) {
        return false;
    }
    let leader = server.leader();
    let Some(m) = server.members().into_iter().find(|m| m.id == leader) else {
        return false;
    };
    match crate::transport::forward::version(server.transport().http(), &m.peer_urls).await {
        Ok((sv, cluster)) => {
            major_minor(&sv).is_some_and(|v| v < (3, 5))
                && major_minor(&cluster).is_some_and(|c| c < ours)
        }
        Err(_) => false,
    }
}

/// Sets the cluster version to `ver` through raft.
async fn set(server: &EtcdServer, current: &str, ver: String) {
    let result = if major_minor(&ver).is_none_or(|v| v < (3, 5)) {
        server
            .propose_v2(v2_put("/0/version".into(), ver.clone()))
            .await
    } else {
        server
            .propose(InternalRaftRequest {
                cluster_version_set: Some(ClusterVersionSetRequest { ver: ver.clone() }),
                ..Default::default()
            })
            .await
    };
    match result {
        Ok(_) if current.is_empty() => {
            tracing::info!(cluster_version = %ver, "setting up initial cluster version")
        }
        Ok(_) => tracing::info!(from = %current, to = %ver, "updating cluster version"),
        Err(e) => tracing::warn!(error = %e, "failed to update the cluster version"),
    }
}

/// Every member's loop: the leader decides the cluster version as members come and go and
/// their versions change. A follower steps in only to lower it to 3.4 under an etcd 3.4 leader
/// that sees 3.4 already while ours see 3.5 (see `leader_keeps_too_high`): that leader never
/// proposes a version (it only raises a decided one), and without this a cluster of ours
/// rolled back to etcd 3.4 would stay at 3.5 in our members' view (tests/mixed_cluster.rs
/// rolling_swap_of_an_etcd_cluster_to_ours_and_back_under_writes fails so). etcd's own
/// followers never propose one: an etcd member never needs this, as no etcd leader holds a
/// lower version than its followers.
pub async fn monitor(server: Arc<EtcdServer>) {
    loop {
        // Every MONITOR, at once after this member's election, and more often while the
        // version is not decided yet (a member cannot join until it is).
        let wait = if server.cluster_version().is_empty() {
            UNDECIDED
        } else {
            MONITOR
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = server.shared.version_check.notified() => {}
        }
        if server.failure().is_some() {
            return;
        }
        let leading = server.is_leader();
        if !leading && !leader_keeps_too_high(&server).await {
            continue;
        }
        let Some(target) = decide(&server).await else {
            continue;
        };
        let current = server.cluster_version();
        let job = super::downgrade::info(server.kv());
        let (change, target) = if job.enabled {
            // While a downgrade job runs, the cluster version is its target (one minor
            // below), whatever the members run, and nothing raises it: etcd 3.6's rule (see
            // downgrade.rs for why not 3.5's). The job's end raises it again.
            match (major_minor(&current), job.target()) {
                (Some(c), Some(t)) if c == t => (false, target),
                (Some(c), Some(t)) if super::downgrade::allowed_target(c) == Some(t) => {
                    (true, format!("{}.{}.0", t.0, t.1))
                }
                _ => {
                    tracing::warn!(
                        cluster_version = %current,
                        target_version = %job.target_version,
                        "cannot downgrade from cluster-version to downgrade-target"
                    );
                    (false, target)
                }
            }
        } else {
            // Raised by the leader as members are upgraded. Lowered only to 3.4, as etcd 3.5
            // does when an etcd 3.4 member rejoins (etcd's 3.5 → 3.4 rolling downgrade);
            // other downgrades need the Downgrade API.
            let change = match (major_minor(&current), major_minor(&target)) {
                (None, _) => leading,
                (Some(c), Some(t)) => (leading && t > c) || (t < c && t == (3, 4)),
                _ => false,
            };
            (change, target)
        };
        if change {
            set(&server, &current, target).await;
        }
    }
}
