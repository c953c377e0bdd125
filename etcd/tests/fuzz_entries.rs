// Fuzzing of the apply path with every kind of committed entry: KV, lease, alarm, auth, cluster
// and downgrade requests, conf changes (the Cluster service's member add/remove/update/promote)
// and corrupted bytes, applied as a member applies them. Each case checks invariants after
// every entry and that a member killed half-way and restarted from its db ends byte for byte
// where a member that never stopped ends.
//
// PROPTEST_CASES raises the case count for a long run; a failure is shrunk and its seed kept in
// etcd/tests/fuzz_entries.proptest-regressions (commit it: those cases run first every time).

#[path = "../../common/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use common::backend::{Batch, BatchConfig, Db, buckets};
use etcd::apply::kv;
use etcd::auth::{AuthStore, token::TokenProvider};
use etcd::lease::Lessor;
use etcd::mvcc::KvStore;
use etcd::server::alarms::Alarms;
use etcd::server::apply::{self, Effect, MemberChange};
use etcd::server::{bootstrap, reconfig};
use proptest::prelude::*;
use prost::Message;
use proto::authpb::{Permission, User};
use proto::etcdserverpb::*;
use proto::membershippb::{
    Attributes, ClusterMemberAttrSetRequest, ClusterVersionSetRequest, DowngradeInfoSetRequest,
};
use proto::raftpb::{ConfChange, ConfChangeType, Entry, EntryType};

/// The plaintext behind every password a case sets, and its bcrypt hash (cost 4, made once):
/// requests carry either, as etcd 3.4 (plaintext, hashed at apply) and 3.5 (hashed) propose.
const PASSWORD: &str = "pw";
fn hashed() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| bcrypt::hash(PASSWORD, 4).expect("bcrypt"))
}

/// Past every key a case writes (a range with no end would be the start key alone).
const ALL_KEYS_END: [u8; 64] = [0xff; 64];

/// A bucket's keys and values.
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// One committed entry of a generated log.
#[derive(Debug, Clone)]
enum Ent {
    Normal(Vec<u8>),
    Conf(ConfChange),
}

/// A member's state machine over one data dir, opened as the server opens it.
struct Member {
    kv: Arc<KvStore>,
    lessor: Lessor,
    alarms: Alarms,
    auth: Arc<AuthStore>,
    stopped: bool,
}

impl Member {
    fn open(dir: &Path) -> Member {
        // A compaction the last instance was running holds the store (and the db's lock) to
        // its end, in a process that would have died: wait for it, as a restart cannot.
        let started = std::time::Instant::now();
        let db = loop {
            match Db::open(dir.join("db")) {
                Ok(db) => break db,
                Err(e) if started.elapsed() > std::time::Duration::from_secs(20) => {
                    panic!("open db: {e}")
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        };
        let kv = KvStore::open(Arc::new(Batch::new(db, BatchConfig::default()))).expect("store");
        let lessor = bootstrap::leases_from_db(1, &kv);
        let alarms = Alarms::load(&kv);
        let tokens = TokenProvider::from_flag("simple", 300).expect("tokens");
        let auth = AuthStore::open(&kv, tokens, 4);
        Member {
            kv,
            lessor,
            alarms,
            auth,
            stopped: false,
        }
    }

    /// Applies entry `index` as the raft loop (conf changes) or the apply loop (the rest)
    /// does; the proposer's answer, or None when the entry was skipped or stopped the member.
    fn apply(&mut self, index: u64, ent: &Ent) -> Option<String> {
        if self.stopped {
            return None;
        }
        match ent {
            Ent::Normal(data) => {
                let e = Entry {
                    term: 1,
                    index,
                    r#type: EntryType::EntryNormal as i32,
                    data: Some(data.clone()),
                };
                let mut effects = Vec::new();
                let out = apply::apply_normal(
                    &self.kv,
                    &e,
                    &self.lessor,
                    &self.alarms,
                    &self.auth,
                    &mut effects,
                );
                if effects.contains(&Effect::Undecodable(index)) {
                    self.stopped = true;
                }
                out.map(|(_, o)| format!("{:?} @{}", o.result, o.revision))
            }
            Ent::Conf(cc) => {
                let e = Entry {
                    term: 1,
                    index,
                    r#type: EntryType::EntryConfChange as i32,
                    data: Some(cc.encode_to_vec()),
                };
                let skipped = index <= self.kv.consistent_index();
                let members = bootstrap::load_members(&self.kv);
                let removed = bootstrap::load_removed(&self.kv);
                let verdict = reconfig::validate(&members, &removed, cc);
                let change = verdict.clone().unwrap_or(MemberChange::Nothing);
                apply::apply_member_change(&self.kv, &e, &change);
                (!skipped).then(|| format!("{verdict:?}"))
            }
        }
    }

    /// The live keys with their leases.
    fn leased_keys(&self) -> BTreeMap<Vec<u8>, i64> {
        let all = kv::range(
            &self.kv,
            // From the empty key on: only the API refuses an empty key, so the applier
            // writes whatever a corrupt proposal names.
            &RangeRequest {
                key: vec![],
                range_end: vec![0],
                ..Default::default()
            },
        )
        .expect("range");
        all.kvs
            .into_iter()
            .filter(|k| k.lease != 0)
            .map(|k| (k.key, k.lease))
            .collect()
    }

    /// Every lease the lessor holds, with its keys.
    fn leases(&self) -> BTreeMap<i64, BTreeSet<Vec<u8>>> {
        self.lessor
            .ids()
            .into_iter()
            .map(|id| {
                let keys = self
                    .lessor
                    .time_to_live(id)
                    .map(|t| t.2)
                    .unwrap_or_default();
                (id, keys.into_iter().collect())
            })
            .collect()
    }

    /// Every bucket's contents; a user's bcrypt hash (salted at random where the password
    /// came in plaintext) stands as whether it matches PASSWORD.
    fn dump(&self) -> BTreeMap<Vec<u8>, Rows> {
        self.kv.wait_compactions();
        let b = self.kv.backend();
        buckets::ALL
            .iter()
            .map(|name| {
                let mut rows = b
                    .range(name, b"", Some(&ALL_KEYS_END), 0)
                    .unwrap_or_default();
                if *name == buckets::AUTH_USERS {
                    for (_, v) in &mut rows {
                        if let Ok(mut u) = User::decode(v.as_slice()) {
                            let ok = std::str::from_utf8(&u.password)
                                .ok()
                                .and_then(|h| bcrypt::verify(PASSWORD, h).ok());
                            u.password = format!("{ok:?}").into_bytes();
                            *v = u.encode_to_vec();
                        }
                    }
                }
                (name.to_vec(), rows)
            })
            .collect()
    }
}

/// What must hold after every entry.
fn check_invariants(m: &Member, added: &BTreeSet<u64>) -> Result<(), TestCaseError> {
    // A key with a lease is attached to that lease in the lessor, and the lessor holds no
    // key that is gone or moved to another lease.
    let leased = m.leased_keys();
    let leases = m.leases();
    for (k, l) in &leased {
        prop_assert!(
            leases.get(l).is_some_and(|ks| ks.contains(k)),
            "key {:?} names lease {} the lessor does not attach it to: {:?}",
            k,
            l,
            leases
        );
    }
    for (l, ks) in &leases {
        for k in ks {
            prop_assert_eq!(
                leased.get(k),
                Some(l),
                "lessor keeps {:?} on lease {}",
                k,
                l
            );
        }
    }
    let recorded: BTreeSet<i64> =
        m.kv.backend()
            .range(buckets::LEASE, b"", Some(&ALL_KEYS_END), 0)
            .unwrap_or_default()
            .iter()
            .filter_map(|(k, _)| k.as_slice().try_into().ok().map(i64::from_be_bytes))
            .collect();
    prop_assert_eq!(&recorded, &leases.keys().copied().collect(), "lease bucket");

    // Members: only ones a conf change added, none removed, no peer URL twice, one learner.
    let members = bootstrap::load_members(&m.kv);
    let removed = bootstrap::load_removed(&m.kv);
    let mut urls = BTreeSet::new();
    for mb in &members {
        prop_assert!(added.contains(&mb.id), "member {:x} was never added", mb.id);
        prop_assert!(
            !removed.contains(&mb.id),
            "removed member {:x} is back",
            mb.id
        );
        for u in &mb.peer_urls {
            prop_assert!(urls.insert(u.clone()), "peer URL {} twice", u);
        }
    }
    prop_assert!(members.iter().filter(|x| x.is_learner).count() <= reconfig::MAX_LEARNERS);
    prop_assert_eq!(
        members.len(),
        members.iter().map(|x| x.id).collect::<BTreeSet<_>>().len()
    );
    Ok(())
}

fn pick<T: Clone + std::fmt::Debug + 'static>(v: &[T]) -> impl Strategy<Value = T> + use<T> {
    prop::sample::select(v.to_vec())
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    pick(&[b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), vec![0], vec![]])
}

fn name() -> impl Strategy<Value = String> {
    pick(&["root", "u1", "u2", ""].map(String::from))
}

fn role() -> impl Strategy<Value = String> {
    pick(&["root", "r1", "r2", ""].map(String::from))
}

fn lease_id() -> impl Strategy<Value = i64> {
    pick(&[0i64, 1, 2, 3, -1])
}

fn put() -> impl Strategy<Value = PutRequest> {
    let rarely = || prop::bool::weighted(0.15);
    (key(), lease_id(), any::<bool>(), rarely(), rarely()).prop_map(
        |(key, lease, prev_kv, iv, il)| PutRequest {
            key,
            value: b"v".to_vec(),
            lease,
            prev_kv,
            ignore_value: iv,
            ignore_lease: il,
        },
    )
}

fn delete() -> impl Strategy<Value = DeleteRangeRequest> {
    (
        key(),
        pick(&[vec![], vec![0], b"c".to_vec()]),
        any::<bool>(),
    )
        .prop_map(|(key, range_end, prev_kv)| DeleteRangeRequest {
            key,
            range_end,
            prev_kv,
        })
}

fn txn() -> impl Strategy<Value = TxnRequest> {
    let op = prop_oneof![
        put().prop_map(request_op::Request::RequestPut),
        delete().prop_map(request_op::Request::RequestDeleteRange),
        (key(), 0i64..4).prop_map(|(key, revision)| request_op::Request::RequestRange(
            RangeRequest {
                key,
                revision,
                ..Default::default()
            }
        )),
    ]
    .prop_map(|r| RequestOp { request: Some(r) });
    let cmp = (key(), 0i64..3).prop_map(|(key, v)| Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Version as i32,
        key,
        range_end: vec![],
        target_union: Some(compare::TargetUnion::Version(v)),
    });
    (
        prop::collection::vec(cmp, 0..2),
        prop::collection::vec(op.clone(), 0..3),
        prop::collection::vec(op, 0..3),
    )
        .prop_map(|(compare, success, failure)| TxnRequest {
            compare,
            success,
            failure,
        })
}

fn permission() -> impl Strategy<Value = Permission> {
    (0i32..4, key(), pick(&[vec![], vec![0], b"b".to_vec()])).prop_map(
        |(perm_type, key, range_end)| Permission {
            perm_type,
            key,
            range_end,
        },
    )
}

/// A password as one of the two proposals carry it.
fn password() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        Just((PASSWORD.to_string(), String::new())),
        Just((String::new(), hashed().to_string())),
        Just((String::new(), String::new())),
    ]
}

/// An InternalRaftRequest of any kind the servers propose (and a few they never would).
fn request() -> impl Strategy<Value = InternalRaftRequest> {
    let r = InternalRaftRequest::default;
    let kvs = prop_oneof![
        6 => put().prop_map(move |p| InternalRaftRequest {
            put: Some(p),
            ..r()
        }),
        2 => delete().prop_map(move |d| InternalRaftRequest {
            delete_range: Some(d),
            ..r()
        }),
        3 => txn().prop_map(move |t| InternalRaftRequest {
            txn: Some(t),
            ..r()
        }),
        1 => (0i64..8).prop_map(move |revision| InternalRaftRequest {
            compaction: Some(CompactionRequest {
                revision,
                physical: false
            }),
            ..r()
        }),
        3 => (lease_id(), pick(&[0i64, 5, 9_000_000_001])).prop_map(move |(id, ttl)| {
            InternalRaftRequest {
                lease_grant: Some(LeaseGrantRequest { ttl, id }),
                ..r()
            }
        }),
        2 => lease_id().prop_map(move |id| InternalRaftRequest {
            lease_revoke: Some(LeaseRevokeRequest { id }),
            ..r()
        }),
        1 => (0i32..4, 0u64..3, 0i32..4).prop_map(move |(action, member_id, alarm)| {
            InternalRaftRequest {
                alarm: Some(AlarmRequest {
                    action,
                    member_id,
                    alarm,
                }),
                ..r()
            }
        }),
    ];
    let users = prop_oneof![
        Just(InternalRaftRequest {
            auth_enable: Some(AuthEnableRequest {}),
            ..r()
        }),
        Just(InternalRaftRequest {
            auth_disable: Some(AuthDisableRequest {}),
            ..r()
        }),
        (name(), password(), any::<bool>()).prop_map(
            move |(name, (password, hashed_password), no_password)| {
                InternalRaftRequest {
                    auth_user_add: Some(AuthUserAddRequest {
                        name,
                        password,
                        options: Some(proto::authpb::UserAddOptions { no_password }),
                        hashed_password,
                    }),
                    ..r()
                }
            }
        ),
        name().prop_map(move |name| InternalRaftRequest {
            auth_user_delete: Some(AuthUserDeleteRequest { name }),
            ..r()
        }),
        (name(), password()).prop_map(move |(name, (password, hashed_password))| {
            InternalRaftRequest {
                auth_user_change_password: Some(AuthUserChangePasswordRequest {
                    name,
                    password,
                    hashed_password,
                }),
                ..r()
            }
        }),
        (name(), role()).prop_map(move |(user, role)| InternalRaftRequest {
            auth_user_grant_role: Some(AuthUserGrantRoleRequest { user, role }),
            ..r()
        }),
        (name(), role()).prop_map(move |(name, role)| InternalRaftRequest {
            auth_user_revoke_role: Some(AuthUserRevokeRoleRequest { name, role }),
            ..r()
        }),
        name().prop_map(move |name| InternalRaftRequest {
            authenticate: Some(InternalAuthenticateRequest {
                name,
                password: String::new(),
                simple_token: "tok".into(),
            }),
            ..r()
        }),
    ];
    let roles = prop_oneof![
        role().prop_map(move |name| InternalRaftRequest {
            auth_role_add: Some(AuthRoleAddRequest { name }),
            ..r()
        }),
        role().prop_map(move |role| InternalRaftRequest {
            auth_role_delete: Some(AuthRoleDeleteRequest { role }),
            ..r()
        }),
        (role(), permission()).prop_map(move |(name, perm)| InternalRaftRequest {
            auth_role_grant_permission: Some(AuthRoleGrantPermissionRequest {
                name,
                perm: Some(perm),
            }),
            ..r()
        }),
        (role(), permission()).prop_map(move |(role, p)| InternalRaftRequest {
            auth_role_revoke_permission: Some(AuthRoleRevokePermissionRequest {
                role,
                key: p.key,
                range_end: p.range_end,
            }),
            ..r()
        }),
        Just(InternalRaftRequest {
            auth_user_list: Some(AuthUserListRequest {}),
            ..r()
        }),
        role().prop_map(move |role| InternalRaftRequest {
            auth_role_get: Some(AuthRoleGetRequest { role }),
            ..r()
        }),
    ];
    let cluster = prop_oneof![
        (1u64..5, name()).prop_map(move |(member_id, name)| InternalRaftRequest {
            cluster_member_attr_set: Some(ClusterMemberAttrSetRequest {
                member_id,
                member_attributes: Some(Attributes {
                    name,
                    client_urls: vec!["http://c".into()],
                }),
            }),
            ..r()
        }),
        pick(&["3.4.0", "3.5.0", "x"].map(String::from)).prop_map(move |ver| {
            InternalRaftRequest {
                cluster_version_set: Some(ClusterVersionSetRequest { ver }),
                ..r()
            }
        }),
        (any::<bool>(), pick(&["3.4.0", ""].map(String::from))).prop_map(move |(enabled, ver)| {
            InternalRaftRequest {
                downgrade_info_set: Some(DowngradeInfoSetRequest { enabled, ver }),
                ..r()
            }
        }),
    ];
    // As root or as a user without roles, at the auth revision of the proposal.
    let header =
        (name(), 0u64..4, 1u64..1000).prop_map(|(username, auth_revision, id)| RequestHeader {
            id,
            username,
            auth_revision,
        });
    (
        prop_oneof![4 => kvs, 3 => users, 2 => roles, 1 => cluster],
        header,
    )
        .prop_map(|(mut req, h)| {
            req.id = h.id;
            req.header = Some(h);
            req
        })
}

fn conf_change() -> impl Strategy<Value = ConfChange> {
    let context = prop_oneof![
        (1u64..4, any::<bool>()).prop_map(|(u, learner)| format!(
            r#"{{"id":0,"peerURLs":["http://p{u}"],"name":"","isLearner":{learner}}}"#
        )
        .into_bytes()),
        (1u64..5).prop_map(reconfig::promote_context),
        Just(Vec::new()),
        Just(b"{not json".to_vec()),
    ];
    (0i32..5, 1u64..5, context).prop_map(|(t, node_id, context)| ConfChange {
        id: 0,
        r#type: t.min(ConfChangeType::ConfChangeAddLearnerNode as i32 + 1),
        node_id,
        context: Some(context),
    })
}

/// etcd 3.4's v2 proposals: a member's attributes and the cluster version.
fn v2_request() -> impl Strategy<Value = Request> {
    let path = prop_oneof![
        (1u64..5).prop_map(|id| format!("/0/members/{id:x}/attributes")),
        Just("/0/version".to_string()),
        Just("/0/members/zz/attributes".to_string()),
    ];
    let val = prop_oneof![
        name().prop_map(|n| format!(r#"{{"name":"{n}","clientURLs":["http://c"]}}"#)),
        Just("3.4.0".to_string()),
        Just("{".to_string()),
    ];
    (
        1u64..1000,
        pick(&["PUT", "GET"].map(String::from)),
        path,
        val,
    )
        .prop_map(|(id, method, path, val)| Request {
            id,
            method,
            path,
            val,
            ..Default::default()
        })
}

/// An entry: a request as proposed, one with bytes broken, random bytes, or a conf change.
fn entry() -> impl Strategy<Value = Ent> {
    let broken = (request(), any::<prop::sample::Index>(), any::<u8>(), 0u8..3).prop_map(
        |(req, at, b, how)| {
            let mut data = req.encode_to_vec();
            let i = at
                .index(data.len().max(1))
                .min(data.len().saturating_sub(1));
            match how {
                0 if !data.is_empty() => data[i] ^= b | 1,
                1 => data.truncate(i),
                _ => data.insert(i, b),
            }
            Ent::Normal(data)
        },
    );
    prop_oneof![
        12 => request().prop_map(|r| Ent::Normal(r.encode_to_vec())),
        2 => v2_request().prop_map(|r| Ent::Normal(r.encode_to_vec())),
        3 => conf_change().prop_map(Ent::Conf),
        2 => broken,
        1 => prop::collection::vec(any::<u8>(), 0..48).prop_map(Ent::Normal),
    ]
}

fn check(log: Vec<Ent>, cut: usize) -> Result<(), TestCaseError> {
    let (da, db) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let mut a = Member::open(da.path());
    let mut added = BTreeSet::new();
    let mut answers = Vec::new();
    for (i, ent) in log.iter().enumerate() {
        let index = i as u64 + 1;
        let before = a.kv.consistent_index();
        let out = a.apply(index, ent);
        if a.stopped {
            // An entry that is no request stops the member before it: nothing of it applied.
            prop_assert_eq!(
                a.kv.consistent_index(),
                before,
                "entry {} moved the index",
                index
            );
            break;
        }
        prop_assert_eq!(a.kv.consistent_index(), index);
        if let (Ent::Conf(cc), Some(v)) = (ent, &out)
            && v.starts_with("Ok(Put")
        {
            added.insert(cc.node_id);
        }
        check_invariants(&a, &added)?;
        answers.push(out);
    }

    // B stops after `cut` entries (dropping the store commits what it applied: each commit
    // carries its consistent index, so a crash would only look like an earlier cut), restarts
    // from its db and is handed the whole log again, as raft replays the WAL after a restart.
    let mut b = Member::open(db.path());
    for (i, ent) in log.iter().take(cut).enumerate() {
        b.apply(i as u64 + 1, ent);
    }
    drop(b);
    let mut b = Member::open(db.path());
    let from = b.kv.consistent_index();
    for (i, ent) in log.iter().enumerate() {
        let index = i as u64 + 1;
        let out = b.apply(index, ent);
        if index > from && !b.stopped && (i < answers.len()) {
            prop_assert_eq!(
                &out,
                &answers[i],
                "answer to entry {} after a restart",
                index
            );
        }
    }
    check_invariants(&b, &added)?;
    prop_assert_eq!(a.kv.consistent_index(), b.kv.consistent_index());
    prop_assert_eq!(a.dump(), b.dump(), "db after a restart at entry {}", cut);
    prop_assert_eq!(a.leases(), b.leases());
    prop_assert_eq!(a.alarms.list(), b.alarms.list());
    prop_assert_eq!(a.auth.is_enabled(), b.auth.is_enabled());
    prop_assert_eq!(a.auth.revision(), b.auth.revision());
    Ok(())
}

proptest! {
    #![proptest_config(fuzz_support::config(192, "tests/fuzz_entries.proptest-regressions"))]

    #[test]
    fn every_entry_kind_applies_the_same_after_a_restart(
        log in prop::collection::vec(entry(), 1..40),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(log.len() + 1);
        check(log, cut)?;
    }
}

/// A request proposed by root with auth off.
fn normal(req: InternalRaftRequest) -> Ent {
    Ent::Normal(
        InternalRaftRequest {
            id: 1,
            header: Some(RequestHeader {
                id: 1,
                username: "root".into(),
                auth_revision: 0,
            }),
            ..req
        }
        .encode_to_vec(),
    )
}

fn add(node_id: u64, learner: bool, context_learner: bool) -> Ent {
    let t = if learner {
        ConfChangeType::ConfChangeAddLearnerNode
    } else {
        ConfChangeType::ConfChangeAddNode
    };
    Ent::Conf(ConfChange {
        id: 0,
        r#type: t as i32,
        node_id,
        context: Some(
            format!(r#"{{"id":0,"peerURLs":["http://p{node_id}"],"isLearner":{context_learner}}}"#)
                .into_bytes(),
        ),
    })
}

fn run_named(log: Vec<Ent>) -> Result<(), TestCaseError> {
    for cut in 0..=log.len() {
        check(log.clone(), cut)?;
    }
    Ok(())
}

#[test]
fn a_restart_keeps_leased_keys_on_their_lease() {
    let log = vec![
        normal(InternalRaftRequest {
            lease_grant: Some(LeaseGrantRequest { ttl: 5, id: 1 }),
            ..Default::default()
        }),
        normal(InternalRaftRequest {
            put: Some(PutRequest {
                key: b"a".to_vec(),
                value: b"v".to_vec(),
                lease: 1,
                ..Default::default()
            }),
            ..Default::default()
        }),
        normal(InternalRaftRequest {
            lease_revoke: Some(LeaseRevokeRequest { id: 1 }),
            ..Default::default()
        }),
    ];
    run_named(log).expect("leases across a restart");
}

#[test]
fn attributes_of_a_removed_member_bring_no_record_back() {
    let attrs = |member_id| {
        normal(InternalRaftRequest {
            cluster_member_attr_set: Some(ClusterMemberAttrSetRequest {
                member_id,
                member_attributes: Some(Attributes {
                    name: "m".into(),
                    client_urls: vec!["http://c".into()],
                }),
            }),
            ..Default::default()
        })
    };
    let remove = Ent::Conf(ConfChange {
        id: 0,
        r#type: ConfChangeType::ConfChangeRemoveNode as i32,
        node_id: 1,
        context: None,
    });
    // Published after the member was removed, and by a member never added.
    run_named(vec![add(1, false, false), remove, attrs(1), attrs(2)]).expect("ghost members");

    // A member in the cluster takes its attributes, by a v3 request or etcd 3.4's v2 one,
    // and keeps its peer URLs.
    let v2 = Ent::Normal(
        Request {
            id: 7,
            method: "PUT".into(),
            path: "/0/members/2/attributes".into(),
            val: r#"{"name":"n2","clientURLs":["http://c2"]}"#.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    let log = vec![add(1, false, false), add(2, false, false), attrs(1), v2];
    run_named(log.clone()).expect("attributes");
    let dir = tempfile::tempdir().expect("tmp");
    let mut m = Member::open(dir.path());
    for (i, e) in log.iter().enumerate() {
        m.apply(i as u64 + 1, e);
    }
    let got: Vec<(u64, String, Vec<String>, Vec<String>)> = bootstrap::load_members(&m.kv)
        .into_iter()
        .map(|x| (x.id, x.name, x.peer_urls, x.client_urls))
        .collect();
    let want = |id: u64, name: &str, c: &str| {
        (
            id,
            name.to_string(),
            vec![format!("http://p{id}")],
            vec![c.to_string()],
        )
    };
    assert_eq!(
        got,
        vec![want(1, "m", "http://c"), want(2, "n2", "http://c2")]
    );
}

#[test]
fn a_member_the_context_calls_a_learner_counts_as_one() {
    run_named(vec![add(1, true, true), add(2, false, true)]).expect("two learners");
}

#[test]
fn alarms_list_alike_after_a_restart() {
    let raise = |member_id| {
        normal(InternalRaftRequest {
            alarm: Some(AlarmRequest {
                action: alarm_request::AlarmAction::Activate as i32,
                member_id,
                alarm: AlarmType::Nospace as i32,
            }),
            ..Default::default()
        })
    };
    run_named(vec![raise(0), raise(1)]).expect("alarm order");
}
