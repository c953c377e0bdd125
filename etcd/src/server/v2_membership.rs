// The membership as etcd 3.4 and 3.5 recover it: the v2 store of the newest snapshot, then
// the conf changes and published attributes of the log entries after it.

use std::collections::BTreeSet;

use prost::Message;
use proto::raftpb::{ConfChange, Entry, EntryType};

use super::apply::{MemberChange, member_attributes};
use super::reconfig;
use crate::membership::Member;

/// The members and removed IDs after `entries` (in log order) are applied to a snapshot's.
/// A conf change is validated as apply validates it, so a refused one changes nothing here
/// either; attributes of a member not in the cluster are skipped, as apply skips them.
pub fn replay<'a>(
    mut members: Vec<Member>,
    mut removed: BTreeSet<u64>,
    entries: impl IntoIterator<Item = &'a Entry>,
) -> (Vec<Member>, BTreeSet<u64>) {
    for e in entries {
        if e.r#type == EntryType::EntryConfChange as i32 {
            let Ok(cc) = ConfChange::decode(e.data()) else {
                continue;
            };
            match reconfig::validate(&members, &removed, &cc) {
                Ok(MemberChange::Put(m)) => match members.iter_mut().find(|x| x.id == m.id) {
                    Some(x) => *x = m,
                    None => members.push(m),
                },
                Ok(MemberChange::Removed(id)) => {
                    members.retain(|m| m.id != id);
                    removed.insert(id);
                }
                Ok(MemberChange::Nothing) | Err(_) => {}
            }
        } else if e.r#type == EntryType::EntryNormal as i32
            && let Some(a) = member_attributes(e.data())
            && let Some(m) = members.iter_mut().find(|m| m.id == a.id)
        {
            m.name = a.name;
            m.client_urls = a.client_urls;
        }
    }
    members.sort_by_key(|m| m.id);
    (members, removed)
}

/// The members and removed IDs at the db's applied index, recovered as etcd does from the
/// snapshot's members and the log `entries` after the snapshot (up to that index).
/// `db_removed` is the db's `members_removed` bucket, which is as of the applied index: an ID
/// in it that was still a member at the snapshot was removed later, by one of `entries`, and
/// must not be treated as removed before that entry is replayed.
pub fn recover<'a>(
    snapshot_members: Vec<Member>,
    db_removed: &BTreeSet<u64>,
    entries: impl IntoIterator<Item = &'a Entry>,
) -> (Vec<Member>, BTreeSet<u64>) {
    let at_snapshot = db_removed
        .iter()
        .copied()
        .filter(|id| !snapshot_members.iter().any(|m| m.id == *id))
        .collect();
    replay(snapshot_members, at_snapshot, entries)
}

/// Whether two lists hold the same member records, in whatever order.
pub fn same_members(a: &[Member], b: &[Member]) -> bool {
    let sorted = |ms: &[Member]| {
        let mut v = ms.to_vec();
        v.sort_by_key(|m| m.id);
        v
    };
    sorted(a) == sorted(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::etcdserverpb::Request;
    use proto::raftpb::ConfChangeType;

    fn member(id: u64, url: &str) -> Member {
        Member {
            id,
            peer_urls: vec![url.to_string()],
            ..Member::default()
        }
    }

    fn conf_change(index: u64, t: ConfChangeType, m: &Member) -> Entry {
        let cc = ConfChange {
            r#type: t as i32,
            node_id: m.id,
            context: Some(m.to_json().into_bytes()),
            ..ConfChange::default()
        };
        Entry {
            index,
            r#type: EntryType::EntryConfChange as i32,
            data: Some(cc.encode_to_vec()),
            ..Entry::default()
        }
    }

    fn v2_attributes(index: u64, id: u64, name: &str) -> Entry {
        let r = Request {
            method: "PUT".into(),
            path: format!("/0/members/{id:x}/attributes"),
            val: format!(r#"{{"name":"{name}","clientURLs":["http://c/{name}"]}}"#),
            ..Request::default()
        };
        Entry {
            index,
            r#type: EntryType::EntryNormal as i32,
            data: Some(r.encode_to_vec()),
            ..Entry::default()
        }
    }

    /// A member replaced after the snapshot (removed, then a new one added as a learner at its
    /// URLs and promoted): the db's removed set already names the old one.
    #[test]
    fn a_member_replaced_after_the_snapshot_is_replaced_again() {
        let (a, b, c) = (
            member(1, "http://a"),
            member(2, "http://b"),
            member(3, "http://c"),
        );
        let d = member(4, "http://c");
        let promote = ConfChange {
            r#type: ConfChangeType::ConfChangeAddNode as i32,
            node_id: 4,
            context: Some(super::reconfig::promote_context(4)),
            ..ConfChange::default()
        };
        let entries = vec![
            conf_change(5, ConfChangeType::ConfChangeRemoveNode, &c),
            conf_change(6, ConfChangeType::ConfChangeAddLearnerNode, &d),
            Entry {
                index: 7,
                r#type: EntryType::EntryConfChange as i32,
                data: Some(promote.encode_to_vec()),
                ..Entry::default()
            },
        ];
        let db_removed = BTreeSet::from([3, 9]);
        let (ms, removed) = recover(vec![a, b, c], &db_removed, &entries);
        let ids: Vec<(u64, bool)> = ms.iter().map(|m| (m.id, m.is_learner)).collect();
        assert_eq!(ids, vec![(1, false), (2, false), (4, false)]);
        assert_eq!(removed, db_removed);
    }

    #[test]
    fn attributes_and_conf_changes_after_the_snapshot_are_applied_in_order() {
        let (a, b, c) = (
            member(1, "http://a"),
            member(2, "http://b"),
            member(3, "http://c"),
        );
        let entries = vec![
            v2_attributes(4, 1, "a"),
            conf_change(5, ConfChangeType::ConfChangeAddNode, &c),
            v2_attributes(6, 3, "c"),
            conf_change(7, ConfChangeType::ConfChangeRemoveNode, &b),
            // Refused: a member that was removed cannot come back.
            conf_change(8, ConfChangeType::ConfChangeAddNode, &b),
            // Skipped: not a member any more.
            v2_attributes(9, 2, "b"),
        ];
        let (ms, removed) = replay(vec![b.clone(), a.clone()], BTreeSet::new(), &entries);
        let names: Vec<(u64, &str)> = ms.iter().map(|m| (m.id, m.name.as_str())).collect();
        assert_eq!(names, vec![(1, "a"), (3, "c")]);
        assert_eq!(ms[1].client_urls, vec!["http://c/c".to_string()]);
        assert_eq!(removed, BTreeSet::from([2]));
        assert!(same_members(&ms, &[ms[1].clone(), ms[0].clone()]));
        assert!(!same_members(&ms, &[ms[0].clone()]));
    }
}
