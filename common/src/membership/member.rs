// A cluster member and its IDs, derived exactly as etcd derives them so the same flags give
// the same member and cluster IDs here as on a real etcd.

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

/// The first 8 bytes of a SHA-1, big-endian.
fn sha1_u64(data: &[u8]) -> u64 {
    let h = Sha1::digest(data);
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[..8]);
    u64::from_be_bytes(b)
}

/// A member's ID: SHA-1 over its sorted peer URLs joined, the cluster token, and for members
/// added at runtime the time of the add in Unix seconds.
pub fn member_id(peer_urls: &[String], cluster_token: &str, added_at_unix: Option<i64>) -> u64 {
    let mut urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    urls.sort_unstable();
    let mut b = urls.concat().into_bytes();
    b.extend_from_slice(cluster_token.as_bytes());
    if let Some(t) = added_at_unix {
        b.extend_from_slice(t.to_string().as_bytes());
    }
    sha1_u64(&b)
}

/// The cluster ID: SHA-1 over the sorted member IDs, each as 8 big-endian bytes.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let b: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
    sha1_u64(&b)
}

/// A member's key in the db's `members` and `members_removed` buckets: hex without padding,
/// as etcd writes it.
pub fn member_key(id: u64) -> String {
    format!("{id:x}")
}

/// IDs print as 16 lowercase hex digits, as etcd's.
pub fn id_hex(id: u64) -> String {
    format!("{id:016x}")
}

/// A member as etcd serialises it to JSON (the conf-change context and the `members` bucket):
/// `{"id":…,"peerURLs":[…],"name":"…","clientURLs":[…],"isLearner":true}`, empty fields omitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Member {
    pub id: u64,
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    #[serde(rename = "isLearner", default, skip_serializing_if = "is_false")]
    pub is_learner: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "clientURLs", default, skip_serializing_if = "Vec::is_empty")]
    pub client_urls: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Member {
    /// The member as the v3 API's `etcdserverpb.Member`.
    pub fn to_pb(&self) -> proto::etcdserverpb::Member {
        proto::etcdserverpb::Member {
            id: self.id,
            name: self.name.clone(),
            peer_ur_ls: self.peer_urls.clone(),
            client_ur_ls: self.client_urls.clone(),
            is_learner: self.is_learner,
        }
    }

    /// A member of a cluster bootstrapped from --initial-cluster (no time in its ID).
    pub fn new_bootstrap(name: &str, peer_urls: Vec<String>, cluster_token: &str) -> Member {
        Member {
            id: member_id(&peer_urls, cluster_token, None),
            peer_urls,
            is_learner: false,
            name: name.to_string(),
            client_urls: Vec::new(),
        }
    }

    pub fn to_json(&self) -> String {
        // Serialising plain strings, numbers and bools cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(b: &[u8]) -> Result<Member, serde_json::Error> {
        serde_json::from_slice(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_a_real_etcd() {
        // A real etcd 3.4 started with --initial-cluster n1=http://127.0.0.1:23801 and the
        // default token printed member 13668033151171901709 in cluster 15118495548433857066.
        let id = member_id(
            &["http://127.0.0.1:23801".to_string()],
            "etcd-cluster",
            None,
        );
        assert_eq!(id, 13668033151171901709);
        assert_eq!(id_hex(id), "bdae9bbc11dd390d");
        assert_eq!(cluster_id(&[id]), 15118495548433857066);
    }

    #[test]
    fn peer_url_order_does_not_matter_and_time_does() {
        let a = vec!["http://b:2380".to_string(), "http://a:2380".to_string()];
        let b = vec!["http://a:2380".to_string(), "http://b:2380".to_string()];
        assert_eq!(member_id(&a, "t", None), member_id(&b, "t", None));
        assert_ne!(member_id(&a, "t", None), member_id(&a, "t", Some(1)));
        assert_eq!(cluster_id(&[3, 1, 2]), cluster_id(&[1, 2, 3]));
    }

    #[test]
    fn json_is_etcds() {
        // The conf-change context of a real etcd 3.4 bootstrap entry.
        let real =
            br#"{"id":13668033151171901709,"peerURLs":["http://127.0.0.1:23801"],"name":"n1"}"#;
        let m = Member::from_json(real).unwrap();
        assert_eq!(m.id, 13668033151171901709);
        assert_eq!(m.name, "n1");
        assert_eq!(m.to_json().as_bytes(), real);
        let learner = Member {
            is_learner: true,
            client_urls: vec!["http://c:2379".into()],
            ..m
        };
        let j = learner.to_json();
        assert!(
            j.contains(r#""isLearner":true"#) && j.contains(r#""clientURLs":["http://c:2379"]"#),
            "{j}"
        );
        assert_eq!(Member::from_json(j.as_bytes()).unwrap(), learner);
    }
}
