// The v2 store image etcd 3.4/3.5 keep in a raft snapshot's `data` (the JSON of its v2 store):
// etcd 3.4 reads the membership from it at boot (/0/members/<id>/raftAttributes, attributes).
//
// We never serve the v2 API; we write this image so that a data dir we create (restore, our
// server's own snapshots) can be taken over by a real etcd. The layout is exactly what etcd
// 3.4's `store.Save()` produces for the same operations (checked against a real restore):
// directories `/0` (cluster) and `/1` (keys), one node per member with `raftAttributes` (and
// `attributes` once the member has a name or client URLs), each write recorded as an event in
// a 1000-slot event history ring. The cluster version (/0/version) is left out on purpose: the
// running cluster decides it again, and a version newer than the reader (our 3.5.0 vs etcd
// 3.4) would make etcd 3.4 refuse to start ("cluster cannot be downgraded"). The reverse,
// members_from_image, is how a member restarted from a snapshot learns its membership (etcd's
// rule: the snapshot's v2 store, not the db, which etcd 3.4's restore leaves stale).

use std::collections::BTreeMap;

use serde::Serialize;

use super::Member;

/// Go's zero `time.Time` as encoding/json writes it: the node never expires.
const NO_EXPIRY: &str = "0001-01-01T00:00:00Z";
/// etcd's v2 event history keeps the last 1000 events.
const HISTORY_CAPACITY: usize = 1000;

#[derive(Serialize, Clone)]
#[serde(rename_all = "PascalCase")]
struct Node {
    path: String,
    created_index: u64,
    modified_index: u64,
    expire_time: &'static str,
    value: String,
    /// `null` for a value node, an object (possibly empty) for a directory: etcd tells the
    /// two apart by this field.
    children: Option<BTreeMap<String, Node>>,
}

impl Node {
    fn dir(path: &str, index: u64) -> Node {
        Node {
            path: path.to_string(),
            created_index: index,
            modified_index: index,
            expire_time: NO_EXPIRY,
            value: String::new(),
            children: Some(BTreeMap::new()),
        }
    }
}

#[derive(Serialize, Clone)]
struct EventNode {
    key: String,
    value: String,
    #[serde(rename = "modifiedIndex")]
    modified_index: u64,
    #[serde(rename = "createdIndex")]
    created_index: u64,
}

#[derive(Serialize, Clone)]
struct Event {
    action: &'static str,
    node: EventNode,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Stats {
    gets_success: u64,
    gets_fail: u64,
    sets_success: u64,
    sets_fail: u64,
    delete_success: u64,
    delete_fail: u64,
    update_success: u64,
    update_fail: u64,
    create_success: u64,
    create_fail: u64,
    compare_and_swap_success: u64,
    compare_and_swap_fail: u64,
    compare_and_delete_success: u64,
    compare_and_delete_fail: u64,
    expire_count: u64,
    watchers: u64,
}

/// A v2 store being built by the writes etcd would make, then saved as etcd saves it.
struct Store {
    root: Node,
    current_index: u64,
    events: Vec<Event>,
    stats: Stats,
}

impl Store {
    fn new() -> Store {
        let mut root = Node::dir("/", 0);
        if let Some(c) = root.children.as_mut() {
            c.insert("0".into(), Node::dir("/0", 0));
            c.insert("1".into(), Node::dir("/1", 0));
        }
        Store {
            root,
            current_index: 0,
            events: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Writes a value at `path` (directories created on the way, as etcd's v2 store does),
    /// as a `create` (new node) or `set` (a node that may exist).
    fn write(&mut self, path: &str, value: String, action: &'static str) {
        self.current_index += 1;
        let index = self.current_index;
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let mut node = &mut self.root;
        let mut at = String::new();
        for (i, part) in parts.iter().enumerate() {
            at.push('/');
            at.push_str(part);
            let last = i + 1 == parts.len();
            let children = node.children.get_or_insert_with(BTreeMap::new);
            node = children.entry(part.to_string()).or_insert_with(|| {
                if last {
                    Node {
                        path: at.clone(),
                        created_index: index,
                        modified_index: index,
                        expire_time: NO_EXPIRY,
                        value: String::new(),
                        children: None,
                    }
                } else {
                    Node::dir(&at, index)
                }
            });
        }
        node.value = value.clone();
        node.modified_index = index;
        let created = node.created_index;
        match action {
            "create" => self.stats.create_success += 1,
            _ => self.stats.sets_success += 1,
        }
        self.events.push(Event {
            action,
            node: EventNode {
                key: path.to_string(),
                value,
                modified_index: index,
                created_index: created,
            },
        });
    }

    fn save(self) -> Vec<u8> {
        // The event history ring: event i sits in slot i % capacity.
        let n = self.events.len();
        let mut slots: Vec<Option<Event>> = vec![None; HISTORY_CAPACITY];
        for (i, e) in self.events.iter().enumerate() {
            slots[i % HISTORY_CAPACITY] = Some(e.clone());
        }
        let back = n % HISTORY_CAPACITY;
        let front = if n > HISTORY_CAPACITY { back } else { 0 };
        let start_index = self
            .events
            .get(n.saturating_sub(HISTORY_CAPACITY))
            .map(|e| e.node.modified_index)
            .unwrap_or(0);
        let last_index = self
            .events
            .last()
            .map(|e| e.node.modified_index)
            .unwrap_or(0);
        let image = serde_json::json!({
            "Root": self.root,
            "WatcherHub": {
                "EventHistory": {
                    "Queue": {
                        "Events": slots,
                        "Size": n.min(HISTORY_CAPACITY),
                        "Front": front,
                        "Back": back,
                        "Capacity": HISTORY_CAPACITY,
                    },
                    "StartIndex": start_index,
                    "LastIndex": last_index,
                }
            },
            "CurrentIndex": self.current_index,
            "Stats": self.stats,
            "CurrentVersion": 2,
        });
        // Serialising maps of strings and numbers cannot fail.
        serde_json::to_vec(&image).unwrap_or_default()
    }
}

/// etcd's member directory name: the ID in hex without zero padding (Go's types.ID.String()).
pub fn member_key(id: u64) -> String {
    format!("{id:x}")
}

#[derive(Serialize)]
struct RaftAttributes<'a> {
    #[serde(rename = "peerURLs")]
    peer_urls: &'a [String],
    #[serde(rename = "isLearner", skip_serializing_if = "std::ops::Not::not")]
    is_learner: bool,
}

#[derive(Serialize)]
struct Attributes<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(rename = "clientURLs", skip_serializing_if = "<[String]>::is_empty")]
    client_urls: &'a [String],
}

/// The v2 store image holding `members`, as etcd 3.4 saves it in a snapshot's data: each
/// member's raftAttributes created in the given order, then the attributes (name, client URLs)
/// of the members that have published them.
pub fn membership_image(members: &[Member]) -> Vec<u8> {
    let mut st = Store::new();
    for m in members {
        let ra = RaftAttributes {
            peer_urls: &m.peer_urls,
            is_learner: m.is_learner,
        };
        st.write(
            &format!("/0/members/{}/raftAttributes", member_key(m.id)),
            serde_json::to_string(&ra).unwrap_or_default(),
            "create",
        );
    }
    for m in members {
        if m.name.is_empty() && m.client_urls.is_empty() {
            continue;
        }
        let a = Attributes {
            name: &m.name,
            client_urls: &m.client_urls,
        };
        st.write(
            &format!("/0/members/{}/attributes", member_key(m.id)),
            serde_json::to_string(&a).unwrap_or_default(),
            "set",
        );
    }
    st.save()
}

/// The members a v2 store image holds (/0/members/<id>/raftAttributes and attributes), as
/// etcd 3.4 and 3.5 recover their membership at boot; None when `image` is not a v2 store.
pub fn members_from_image(image: &[u8]) -> Option<Vec<Member>> {
    let v: serde_json::Value = serde_json::from_slice(image).ok()?;
    let dirs = v
        .get("Root")?
        .get("Children")?
        .get("0")?
        .get("Children")?
        .get("members")
        .and_then(|m| m.get("Children"))
        .and_then(|c| c.as_object());
    let Some(dirs) = dirs else {
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    for (key, node) in dirs {
        let Ok(id) = u64::from_str_radix(key, 16) else {
            continue;
        };
        let value = |name: &str| -> Option<serde_json::Value> {
            let s = node.get("Children")?.get(name)?.get("Value")?.as_str()?;
            serde_json::from_str(s).ok()
        };
        let Some(ra) = value("raftAttributes") else {
            continue;
        };
        let strings = |v: Option<&serde_json::Value>| -> Vec<String> {
            v.and_then(|a| a.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let attrs = value("attributes");
        out.push(Member {
            id,
            peer_urls: strings(ra.get("peerURLs")),
            is_learner: ra
                .get("isLearner")
                .and_then(|b| b.as_bool())
                .unwrap_or(false),
            name: attrs
                .as_ref()
                .and_then(|a| a.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_string(),
            client_urls: strings(attrs.as_ref().and_then(|a| a.get("clientURLs"))),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_member_image_is_what_etcd_3_4_restore_writes() {
        // Printed from the .snap of `etcdctl snapshot restore` (etcd 3.4) with default flags,
        // with the 999 empty event slots cut out.
        let m = Member {
            id: 0x8e9e05c52164694d,
            peer_urls: vec!["http://localhost:2380".into()],
            ..Member::default()
        };
        let got = String::from_utf8(membership_image(&[m])).unwrap();
        let nulls = vec!["null"; 999].join(",");
        let want = format!(
            r#"{{"Root":{{"Path":"/","CreatedIndex":0,"ModifiedIndex":0,"ExpireTime":"0001-01-01T00:00:00Z","Value":"","Children":{{"0":{{"Path":"/0","CreatedIndex":0,"ModifiedIndex":0,"ExpireTime":"0001-01-01T00:00:00Z","Value":"","Children":{{"members":{{"Path":"/0/members","CreatedIndex":1,"ModifiedIndex":1,"ExpireTime":"0001-01-01T00:00:00Z","Value":"","Children":{{"8e9e05c52164694d":{{"Path":"/0/members/8e9e05c52164694d","CreatedIndex":1,"ModifiedIndex":1,"ExpireTime":"0001-01-01T00:00:00Z","Value":"","Children":{{"raftAttributes":{{"Path":"/0/members/8e9e05c52164694d/raftAttributes","CreatedIndex":1,"ModifiedIndex":1,"ExpireTime":"0001-01-01T00:00:00Z","Value":"{{\"peerURLs\":[\"http://localhost:2380\"]}}","Children":null}}}}}}}}}}}}}},"1":{{"Path":"/1","CreatedIndex":0,"ModifiedIndex":0,"ExpireTime":"0001-01-01T00:00:00Z","Value":"","Children":{{}}}}}}}},"WatcherHub":{{"EventHistory":{{"Queue":{{"Events":[{{"action":"create","node":{{"key":"/0/members/8e9e05c52164694d/raftAttributes","value":"{{\"peerURLs\":[\"http://localhost:2380\"]}}","modifiedIndex":1,"createdIndex":1}}}},{nulls}],"Size":1,"Front":0,"Back":1,"Capacity":1000}},"StartIndex":1,"LastIndex":1}}}},"CurrentIndex":1,"Stats":{{"getsSuccess":0,"getsFail":0,"setsSuccess":0,"setsFail":0,"deleteSuccess":0,"deleteFail":0,"updateSuccess":0,"updateFail":0,"createSuccess":1,"createFail":0,"compareAndSwapSuccess":0,"compareAndSwapFail":0,"compareAndDeleteSuccess":0,"compareAndDeleteFail":0,"expireCount":0,"watchers":0}},"CurrentVersion":2}}"#
        );
        assert_eq!(got, want);
    }

    #[test]
    fn attributes_and_unpadded_ids() {
        let m = Member {
            id: 0x0b647f29678b82df,
            peer_urls: vec!["http://127.0.0.1:1".into()],
            name: "a".into(),
            client_urls: vec!["http://127.0.0.1:9".into()],
            is_learner: true,
        };
        let v: serde_json::Value = serde_json::from_slice(&membership_image(&[m])).unwrap();
        let node = &v["Root"]["Children"]["0"]["Children"]["members"]["Children"]["b647f29678b82df"]
            ["Children"];
        assert_eq!(
            node["raftAttributes"]["Value"],
            r#"{"peerURLs":["http://127.0.0.1:1"],"isLearner":true}"#
        );
        assert_eq!(
            node["attributes"]["Value"],
            r#"{"name":"a","clientURLs":["http://127.0.0.1:9"]}"#
        );
        assert_eq!(v["CurrentIndex"], 2);
        assert_eq!(v["Stats"]["setsSuccess"], 1);
    }

    #[test]
    fn members_read_back_from_the_image() {
        let ms = vec![
            Member {
                id: 0x0b647f29678b82df,
                peer_urls: vec!["http://127.0.0.1:1".into()],
                name: "a".into(),
                client_urls: vec!["http://127.0.0.1:9".into()],
                is_learner: false,
            },
            Member {
                id: 0xd1dd0451a6b74da3,
                peer_urls: vec!["http://127.0.0.1:2".into()],
                is_learner: true,
                ..Member::default()
            },
        ];
        let mut got = members_from_image(&membership_image(&ms)).unwrap();
        got.sort_by_key(|m| m.id);
        assert_eq!(got, ms);
        assert_eq!(members_from_image(b"not json"), None);
    }
}
