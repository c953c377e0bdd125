// etcd 3.5's Downgrade (Maintenance.Downgrade): validating, enabling and cancelling a downgrade
// job of the cluster version by one minor, and the job's record in the db's cluster bucket.
//
// The job is a raft entry (InternalRaftRequest.downgrade_info_set, 1302) applied by every
// member into `cluster`/`downgrade` as etcd's JSON, {"target-version":"3.4.0","enabled":true}.
// While it is enabled the leader sets the cluster version to the target (cluster_version.rs):
// etcd 3.6's rule. etcd 3.5 waited for a member of the target version to run, but etcd 3.4
// refuses to join a cluster whose version is above its own, so only 3.6's rule lets a 3.4
// member join. Entries written at cluster version 3.4 are the ones 3.4 applies (v2 cluster
// version, 3.4's auth records), which is what makes the way back to etcd 3.4 safe.

use proto::etcdserverpb::InternalRaftRequest;
use proto::membershippb::DowngradeInfoSetRequest;

use super::EtcdServer;
use crate::error::{self, Error};
use crate::membership::id_hex;
use crate::mvcc::KvStore;
use crate::transport::server::parse_version;
use common::backend::buckets;

/// The key of the job's record in the cluster bucket (etcd's `backendDowngradeKey`).
pub const DOWNGRADE_KEY: &[u8] = b"downgrade";

/// etcd's `DowngradeInfo`, as it stores it (Go's encoding/json, fields in this order).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DowngradeInfo {
    /// The cluster version the job lowers to ("3.4.0"); empty when no job runs.
    #[serde(rename = "target-version")]
    pub target_version: String,
    pub enabled: bool,
}

impl DowngradeInfo {
    /// What an applied DowngradeInfoSetRequest records: the target only while enabled, as
    /// etcd's apply does.
    pub fn from_request(r: &DowngradeInfoSetRequest) -> DowngradeInfo {
        if r.enabled {
            DowngradeInfo {
                target_version: r.ver.clone(),
                enabled: true,
            }
        } else {
            DowngradeInfo::default()
        }
    }

    /// The record's bytes, as etcd writes them.
    pub fn to_json(&self) -> Vec<u8> {
        // Two plain fields: serialising cannot fail; an empty record reads as "no job".
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// (major, minor) of an enabled job's target.
    pub fn target(&self) -> Option<(u64, u64)> {
        if !self.enabled {
            return None;
        }
        parse_semver(&self.target_version).map(|(a, b, _)| (a, b))
    }
}

/// The job recorded in `kv`'s db. No record, or one that does not decode (etcd would stop on
/// it), is no job.
pub fn info(kv: &KvStore) -> DowngradeInfo {
    match kv.backend().get(buckets::CLUSTER, DOWNGRADE_KEY) {
        Ok(Some(v)) => serde_json::from_slice(&v).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the downgrade record in the db does not decode; taken as no downgrade job");
            DowngradeInfo::default()
        }),
        _ => DowngradeInfo::default(),
    }
}

/// Whether `id` is a semver identifier list (dot-separated [0-9A-Za-z-]+), as Go's semver
/// checks pre-release and build metadata.
fn valid_identifiers(id: &str) -> bool {
    id.is_empty()
        || id
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

/// A version as etcd's semver package (coreos/go-semver) reads it: "X.Y.Z" with an optional
/// "-pre-release" and "+metadata"; each number an int64 in base 10.
pub fn parse_semver(v: &str) -> Option<(u64, u64, u64)> {
    let (rest, metadata) = v.split_once('+').unwrap_or((v, ""));
    let (rest, pre) = rest.split_once('-').unwrap_or((rest, ""));
    if !valid_identifiers(pre) || !valid_identifiers(metadata) {
        return None;
    }
    let mut parts = rest.splitn(3, '.');
    let mut num = || -> Option<u64> {
        let p = parts.next()?;
        // strconv.ParseInt: digits (a sign cannot remain after the splits above), int64 range.
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse::<i64>().ok().and_then(|n| u64::try_from(n).ok())
    };
    Some((num()?, num()?, num()?))
}

/// etcd's `convertToClusterVersion`: a target given as "X.Y.Z" or "X.Y", kept as (X, Y).
pub fn target_version(v: &str) -> Result<(u64, u64), Error> {
    parse_semver(v)
        .or_else(|| parse_semver(&format!("{v}.0")))
        .map(|(a, b, _)| (a, b))
        .ok_or(error::WRONG_DOWNGRADE_VERSION_FORMAT)
}

/// The one version a cluster at `cluster` may be downgraded to: one minor below, same major.
pub fn allowed_target(cluster: (u64, u64)) -> Option<(u64, u64)> {
    cluster.1.checked_sub(1).map(|m| (cluster.0, m))
}

/// The cluster version as etcd prints it in a DowngradeResponse ("3.5.0").
fn cluster_version(server: &EtcdServer) -> Result<(u64, u64), Error> {
    parse_semver(&server.cluster_version())
        .map(|(a, b, _)| (a, b))
        .ok_or(error::CLUSTER_VERSION_UNAVAILABLE)
}

fn show((major, minor): (u64, u64)) -> String {
    format!("{major}.{minor}.0")
}

/// VALIDATE: whether the cluster may be downgraded to `version` now; answers the cluster
/// version. Read after a linearizable read, so a job another member just enabled is seen.
pub async fn validate(server: &EtcdServer, version: &str) -> Result<String, Error> {
    validate_target(server, target_version(version)?).await
}

async fn validate_target(server: &EtcdServer, target: (u64, u64)) -> Result<String, Error> {
    server.linearizable_read().await?;
    check(cluster_version(server)?, target, info(server.kv()).enabled)
}

/// etcd's checks, in its order: the target first, then a job already running. Once the
/// leader has lowered the version for a running job, a second ENABLE of the same target fails
/// on the target (as in etcd 3.6); "in progress" answers between the job's apply and that.
fn check(cluster: (u64, u64), target: (u64, u64), enabled: bool) -> Result<String, Error> {
    if allowed_target(cluster) != Some(target) {
        return Err(error::INVALID_DOWNGRADE_TARGET_VERSION);
    }
    if enabled {
        return Err(error::DOWNGRADE_IN_PROCESS);
    }
    Ok(show(cluster))
}

/// Refuses a downgrade entry that some member could not apply: every other member must answer
/// its /version with a server version of 3.5 or later (etcd 3.4 stops on the entry).
async fn every_member_can_apply(server: &EtcdServer) -> Result<(), Error> {
    for m in server.members() {
        if m.id == server.member_id() {
            continue;
        }
        let v = crate::transport::forward::version(server.transport().http(), &m.peer_urls).await;
        let ok = match &v {
            Ok((sv, _)) => parse_version(sv).is_some_and(|(a, b, _)| (a, b) >= (3, 5)),
            Err(_) => false,
        };
        if !ok {
            tracing::warn!(
                remote_member_id = %id_hex(m.id),
                remote_member_version = ?v,
                "reject downgrade request: a member may not be able to apply it"
            );
            return Err(error::DOWNGRADE_MEMBER_CANNOT_APPLY);
        }
    }
    Ok(())
}

async fn propose(server: &EtcdServer, r: DowngradeInfoSetRequest) -> Result<(), Error> {
    let out = server
        .propose(InternalRaftRequest {
            downgrade_info_set: Some(r),
            ..Default::default()
        })
        .await?;
    out.result.map(|_| ())
}

/// ENABLE: validates, then records the job through raft; answers the cluster version it
/// validated against. Not one read after the proposal: the leader lowers the version to the
/// target right after the job applies, and the answer would race that (etcd 3.5 lowers it only
/// once members run the target, so its answer is the version before the job).
pub async fn enable(server: &EtcdServer, version: &str) -> Result<String, Error> {
    let result = async {
        let target = target_version(version)?;
        let before = validate_target(server, target).await?;
        every_member_can_apply(server).await?;
        propose(
            server,
            DowngradeInfoSetRequest {
                enabled: true,
                ver: show(target),
            },
        )
        .await?;
        Ok(before)
    }
    .await;
    if let Err(e) = &result {
        tracing::warn!(error = %e, "reject downgrade request");
    }
    result
}

/// CANCEL: ends the job through raft; answers the cluster version as it was before (the leader
/// raises it again to its members' lowest version right after, which the answer must not race).
pub async fn cancel(server: &EtcdServer) -> Result<String, Error> {
    server.linearizable_read().await?;
    if !info(server.kv()).enabled {
        return Err(error::NO_INFLIGHT_DOWNGRADE);
    }
    let before = show(cluster_version(server)?);
    every_member_can_apply(server).await?;
    propose(
        server,
        DowngradeInfoSetRequest {
            enabled: false,
            ver: String::new(),
        },
    )
    .await?;
    Ok(before)
}

/// The peer endpoint /downgrade/enabled: the job's state after a linearizable read, as etcd
/// serves it to members deciding whether they may join.
pub async fn enabled(server: &EtcdServer) -> Result<bool, Error> {
    server.linearizable_read().await?;
    Ok(info(server.kv()).enabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_go_semver_reads_them() {
        assert_eq!(parse_semver("3.4.0"), Some((3, 4, 0)));
        assert_eq!(parse_semver("3.4.23"), Some((3, 4, 23)));
        assert_eq!(parse_semver("3.5.0-alpha.1+build.7"), Some((3, 5, 0)));
        assert_eq!(parse_semver("03.04.00"), Some((3, 4, 0)));
        // Go splits off an empty pre-release or build and takes the rest.
        assert_eq!(parse_semver("3.4.0-"), Some((3, 4, 0)));
        assert_eq!(parse_semver("3.4.0+"), Some((3, 4, 0)));
        for bad in [
            "",
            "3",
            "3.4",
            "3.4.",
            "v3.4.0",
            "3.4.0.1",
            "3.4.x",
            "3.4.0-a..b",
            "3.4.0-a_b",
            " 3.4.0",
            "3.-4.0",
            "99999999999999999999.1.0",
        ] {
            assert_eq!(parse_semver(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn targets_are_major_minor_with_or_without_a_patch() {
        assert_eq!(target_version("3.4"), Ok((3, 4)));
        assert_eq!(target_version("3.4.9"), Ok((3, 4)));
        assert_eq!(target_version("3.4.0-rc.1"), Ok((3, 4)));
        for bad in ["", "3", "three.four", "3.4-rc.1", "3.4.0.0", "v3.4"] {
            assert_eq!(
                target_version(bad),
                Err(error::WRONG_DOWNGRADE_VERSION_FORMAT),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_one_minor_below_is_allowed() {
        assert_eq!(allowed_target((3, 5)), Some((3, 4)));
        assert_eq!(allowed_target((3, 0)), None);
    }

    #[test]
    fn the_target_is_checked_before_a_running_job() {
        assert_eq!(check((3, 5), (3, 4), false), Ok("3.5.0".to_string()));
        assert_eq!(
            check((3, 5), (3, 4), true),
            Err(error::DOWNGRADE_IN_PROCESS)
        );
        assert_eq!(
            check((3, 5), (3, 3), true),
            Err(error::INVALID_DOWNGRADE_TARGET_VERSION)
        );
        // A running job to 3.4 once the cluster version is lowered to it.
        assert_eq!(
            check((3, 4), (3, 4), true),
            Err(error::INVALID_DOWNGRADE_TARGET_VERSION)
        );
    }

    #[test]
    fn the_record_is_etcds_json() {
        let on = DowngradeInfo::from_request(&DowngradeInfoSetRequest {
            enabled: true,
            ver: "3.4.0".into(),
        });
        assert_eq!(
            on.to_json(),
            br#"{"target-version":"3.4.0","enabled":true}"#.to_vec()
        );
        assert_eq!(on.target(), Some((3, 4)));
        let off = DowngradeInfo::from_request(&DowngradeInfoSetRequest {
            enabled: false,
            ver: "3.4.0".into(),
        });
        assert_eq!(
            off.to_json(),
            br#"{"target-version":"","enabled":false}"#.to_vec()
        );
        assert_eq!(off.target(), None);
    }
}
