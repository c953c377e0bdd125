// Membership changes: what a conf change's context says, whether the change is valid against
// the members as of its apply (etcd's rules and errors), and the strict reconfig checks
// (--strict-reconfig-check) made before proposing one.

use std::collections::BTreeSet;

use proto::raftpb::{ConfChange, ConfChangeType};
use serde::Deserialize;

use super::apply::MemberChange;
use crate::error::{self, Error};
use crate::membership::Member;

/// etcd 3.4 allows one learner at a time.
pub const MAX_LEARNERS: usize = 1;

/// A conf change's context: the member JSON for adds and updates, or etcd's promote context
/// (`{"id":…,"peerURLs":null,"isPromote":true}`).
#[derive(Debug, Default, Deserialize)]
struct Context {
    #[serde(default)]
    id: u64,
    #[serde(rename = "peerURLs", default)]
    peer_urls: Option<Vec<String>>,
    #[serde(rename = "isLearner", default)]
    is_learner: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(rename = "clientURLs", default)]
    client_urls: Option<Vec<String>>,
    #[serde(rename = "isPromote", default)]
    is_promote: bool,
}

/// The context of a promotion of learner `id`, as etcd writes it.
pub fn promote_context(id: u64) -> Vec<u8> {
    format!(r#"{{"id":{id},"peerURLs":null,"isPromote":true}}"#).into_bytes()
}

fn urls_in_use(members: &[Member], except: u64) -> BTreeSet<&str> {
    members
        .iter()
        .filter(|m| m.id != except)
        .flat_map(|m| m.peer_urls.iter().map(String::as_str))
        .collect()
}

/// Decides what a committed conf change does, given the members and removed IDs before it:
/// the change to make, or etcd's error (the change is then applied as a no-op everywhere).
pub fn validate(
    members: &[Member],
    removed: &BTreeSet<u64>,
    cc: &ConfChange,
) -> Result<MemberChange, Error> {
    let id = cc.node_id;
    if removed.contains(&id) {
        return Err(error::MEMBER_NOT_FOUND);
    }
    let current = members.iter().find(|m| m.id == id);
    let ctx: Context = if cc.context().is_empty() {
        Context::default()
    } else {
        serde_json::from_slice(cc.context()).map_err(|_| error::MEMBER_BAD_URLS)?
    };
    match ConfChangeType::try_from(cc.r#type) {
        Ok(ConfChangeType::ConfChangeAddNode | ConfChangeType::ConfChangeAddLearnerNode) => {
            if ctx.is_promote {
                let m = current.ok_or(error::MEMBER_NOT_FOUND)?;
                if !m.is_learner {
                    return Err(error::MEMBER_NOT_LEARNER);
                }
                return Ok(MemberChange::Put(Member {
                    is_learner: false,
                    ..m.clone()
                }));
            }
            if current.is_some() {
                return Err(error::MEMBER_EXIST);
            }
            let urls = ctx.peer_urls.unwrap_or_default();
            let used = urls_in_use(members, 0);
            if urls.iter().any(|u| used.contains(u.as_str())) {
                return Err(error::PEER_URL_EXIST);
            }
            // The record says learner if the type or the context does; the limit counts
            // what the record will say (etcd checks the context's member).
            let learner =
                cc.r#type == ConfChangeType::ConfChangeAddLearnerNode as i32 || ctx.is_learner;
            if learner && members.iter().filter(|m| m.is_learner).count() + 1 > MAX_LEARNERS {
                return Err(error::TOO_MANY_LEARNERS);
            }
            Ok(MemberChange::Put(Member {
                id,
                peer_urls: urls,
                is_learner: learner,
                name: ctx.name.unwrap_or_default(),
                client_urls: ctx.client_urls.unwrap_or_default(),
            }))
        }
        Ok(ConfChangeType::ConfChangeRemoveNode) => {
            current.ok_or(error::MEMBER_NOT_FOUND)?;
            Ok(MemberChange::Removed(id))
        }
        Ok(ConfChangeType::ConfChangeUpdateNode) => {
            let m = current.ok_or(error::MEMBER_NOT_FOUND)?;
            let urls = ctx.peer_urls.unwrap_or_default();
            let used = urls_in_use(members, id);
            if urls.iter().any(|u| used.contains(u.as_str())) {
                return Err(error::PEER_URL_EXIST);
            }
            let _ = ctx.id;
            Ok(MemberChange::Put(Member {
                peer_urls: urls,
                ..m.clone()
            }))
        }
        Err(_) => Err(error::MEMBER_BAD_URLS),
    }
}

fn voters(members: &[Member]) -> impl Iterator<Item = &Member> {
    members.iter().filter(|m| !m.is_learner)
}

/// A member is started once it has published its name.
fn started(m: &Member) -> bool {
    !m.name.is_empty()
}

/// Whether adding a voter keeps a quorum of started members (a one-member cluster may always
/// grow to two).
pub fn ready_to_add_voter(members: &[Member]) -> bool {
    let (mut n, mut started_n) = (1usize, 0usize);
    for m in voters(members) {
        n += 1;
        started_n += usize::from(started(m));
    }
    if started_n == 1 && n == 2 {
        return true;
    }
    started_n > n / 2
}

/// Whether removing voter `id` leaves a quorum of started members.
pub fn ready_to_remove_voter(members: &[Member], id: u64) -> bool {
    let (mut n, mut started_n) = (0usize, 0usize);
    for m in voters(members).filter(|m| m.id != id) {
        n += 1;
        started_n += usize::from(started(m));
    }
    started_n > n / 2
}

/// Whether promoting a learner (counted as started) keeps a quorum of started members.
pub fn ready_to_promote(members: &[Member]) -> bool {
    let (mut n, mut started_n) = (1usize, 1usize);
    for m in voters(members) {
        n += 1;
        started_n += usize::from(started(m));
    }
    started_n > n / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, url: &str, name: &str, learner: bool) -> Member {
        Member {
            id,
            peer_urls: vec![url.to_string()],
            is_learner: learner,
            name: name.to_string(),
            client_urls: Vec::new(),
        }
    }

    fn cc(t: ConfChangeType, id: u64, ctx: &[u8]) -> ConfChange {
        ConfChange {
            r#type: t as i32,
            node_id: id,
            context: Some(ctx.to_vec()),
            ..Default::default()
        }
    }

    #[test]
    fn etcds_rules_for_each_change() {
        let ms = vec![
            member(1, "http://a", "a", false),
            member(2, "http://b", "b", true),
        ];
        let none = BTreeSet::new();
        let add = |id: u64, url: &str| {
            cc(
                ConfChangeType::ConfChangeAddNode,
                id,
                format!(r#"{{"id":{id},"peerURLs":["{url}"]}}"#).as_bytes(),
            )
        };
        assert!(
            matches!(validate(&ms, &none, &add(3, "http://c")), Ok(MemberChange::Put(m)) if m.id == 3 && !m.is_learner)
        );
        assert_eq!(
            validate(&ms, &none, &add(1, "http://c")).err(),
            Some(error::MEMBER_EXIST)
        );
        assert_eq!(
            validate(&ms, &none, &add(3, "http://b")).err(),
            Some(error::PEER_URL_EXIST)
        );
        let learner = cc(
            ConfChangeType::ConfChangeAddLearnerNode,
            3,
            br#"{"id":3,"peerURLs":["http://c"],"isLearner":true}"#,
        );
        assert_eq!(
            validate(&ms, &none, &learner).err(),
            Some(error::TOO_MANY_LEARNERS)
        );
        let promote = |id| cc(ConfChangeType::ConfChangeAddNode, id, &promote_context(id));
        assert!(
            matches!(validate(&ms, &none, &promote(2)), Ok(MemberChange::Put(m)) if m.id == 2 && !m.is_learner)
        );
        assert_eq!(
            validate(&ms, &none, &promote(1)).err(),
            Some(error::MEMBER_NOT_LEARNER)
        );
        assert_eq!(
            validate(&ms, &none, &promote(9)).err(),
            Some(error::MEMBER_NOT_FOUND)
        );
        let remove = |id| cc(ConfChangeType::ConfChangeRemoveNode, id, b"");
        assert!(matches!(
            validate(&ms, &none, &remove(2)),
            Ok(MemberChange::Removed(2))
        ));
        assert_eq!(
            validate(&ms, &none, &remove(9)).err(),
            Some(error::MEMBER_NOT_FOUND)
        );
        let removed: BTreeSet<u64> = [3].into();
        assert_eq!(
            validate(&ms, &removed, &add(3, "http://z")).err(),
            Some(error::MEMBER_NOT_FOUND)
        );
        let update = |id, url: &str| {
            cc(
                ConfChangeType::ConfChangeUpdateNode,
                id,
                format!(r#"{{"id":{id},"peerURLs":["{url}"]}}"#).as_bytes(),
            )
        };
        assert!(
            matches!(validate(&ms, &none, &update(1, "http://a2")), Ok(MemberChange::Put(m)) if m.peer_urls == ["http://a2"] && m.name == "a")
        );
        assert_eq!(
            validate(&ms, &none, &update(1, "http://b")).err(),
            Some(error::PEER_URL_EXIST)
        );
    }

    #[test]
    fn strict_reconfig_quorum_of_started_members() {
        let one = vec![member(1, "http://a", "a", false)];
        assert!(ready_to_add_voter(&one));
        let mut three = vec![
            member(1, "http://a", "a", false),
            member(2, "http://b", "b", false),
            member(3, "http://c", "", false),
        ];
        // 4 voters after the add need 3 started; only 2 are.
        assert!(!ready_to_add_voter(&three));
        assert!(ready_to_remove_voter(&three, 3));
        // Removing a started one leaves 1 started of 2.
        assert!(!ready_to_remove_voter(&three, 1));
        three[2].name = "c".into();
        assert!(ready_to_add_voter(&three));
        assert!(ready_to_promote(&three));
    }
}
