// Auth at apply time, on a real store: the identity and auth revision in a request's header
// are checked when the entry is applied, so a permission revoked after the proposal (or a
// proposal made at an older auth revision) is refused; the auth buckets hold etcd's records.

use std::sync::Arc;

use common::backend::{Batch, BatchConfig, Db, buckets};
use etcd::api::errors;
use etcd::auth::{AuthStore, token::TokenProvider};
use etcd::lease::Lessor;
use etcd::mvcc::KvStore;
use etcd::server::alarms::Alarms;
use etcd::server::apply::{Applied, apply_normal};
use prost::Message;
use proto::authpb::{Permission, User, permission::Type as PermType};
use proto::etcdserverpb::{
    AuthEnableRequest, AuthRoleAddRequest, AuthRoleGrantPermissionRequest,
    AuthRoleRevokePermissionRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
    InternalRaftRequest, PutRequest, RequestHeader,
};
use proto::raftpb::Entry;

struct Node {
    kv: Arc<KvStore>,
    lessor: Lessor,
    alarms: Alarms,
    auth: Arc<AuthStore>,
    index: u64,
}

impl Node {
    fn open(dir: &std::path::Path) -> Node {
        let db = Db::open(dir.join("db")).expect("open db");
        let kv = KvStore::open(Arc::new(Batch::new(db, BatchConfig::default()))).expect("store");
        let tokens = TokenProvider::from_flag("simple", 300).expect("simple tokens");
        let auth = AuthStore::open(&kv, tokens, 4);
        let index = kv.consistent_index();
        Node {
            kv,
            lessor: Lessor::new(5),
            alarms: Alarms::default(),
            auth,
            index,
        }
    }

    /// Applies `req` as `user` at auth revision `rev`, as the next raft entry.
    fn apply(
        &mut self,
        user: &str,
        rev: u64,
        mut req: InternalRaftRequest,
    ) -> Result<Applied, errors::ApiError> {
        self.index += 1;
        req.header = Some(RequestHeader {
            id: self.index,
            username: user.into(),
            auth_revision: rev,
        });
        let e = Entry {
            index: self.index,
            term: 1,
            data: Some(req.encode_to_vec()),
            ..Entry::default()
        };
        let (_, out) = apply_normal(
            &self.kv,
            &e,
            &self.lessor,
            &self.alarms,
            &self.auth,
            &mut Vec::new(),
        )
        .expect("entry applied");
        out.result
    }
}

fn put(key: &str) -> InternalRaftRequest {
    InternalRaftRequest {
        put: Some(PutRequest {
            key: key.into(),
            value: b"v".to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn apply_checks_the_header_identity_at_the_current_auth_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut n = Node::open(dir.path());
    let steps = [
        InternalRaftRequest {
            auth_user_add: Some(AuthUserAddRequest {
                name: "root".into(),
                hashed_password: bcrypt::hash("rootpw", 4).expect("hash"),
                ..Default::default()
            }),
            ..Default::default()
        },
        InternalRaftRequest {
            auth_user_grant_role: Some(AuthUserGrantRoleRequest {
                user: "root".into(),
                role: "root".into(),
            }),
            ..Default::default()
        },
        InternalRaftRequest {
            auth_user_add: Some(AuthUserAddRequest {
                name: "alice".into(),
                hashed_password: bcrypt::hash("apw", 4).expect("hash"),
                ..Default::default()
            }),
            ..Default::default()
        },
        InternalRaftRequest {
            auth_role_add: Some(AuthRoleAddRequest { name: "w".into() }),
            ..Default::default()
        },
        InternalRaftRequest {
            auth_role_grant_permission: Some(AuthRoleGrantPermissionRequest {
                name: "w".into(),
                perm: Some(Permission {
                    perm_type: PermType::Write as i32,
                    key: b"k".to_vec(),
                    range_end: Vec::new(),
                }),
            }),
            ..Default::default()
        },
        InternalRaftRequest {
            auth_user_grant_role: Some(AuthUserGrantRoleRequest {
                user: "alice".into(),
                role: "w".into(),
            }),
            ..Default::default()
        },
        InternalRaftRequest {
            auth_enable: Some(AuthEnableRequest {}),
            ..Default::default()
        },
    ];
    for s in steps {
        n.apply("", 0, s).expect("setup step");
    }
    let rev = n.auth.revision();
    assert_eq!(
        rev, 7,
        "six changes after the initial revision 1; enable adds none"
    );
    // Allowed at the current revision; refused with no user or an older revision.
    n.apply("alice", rev, put("k")).expect("alice writes k");
    assert_eq!(n.apply("", 0, put("k")).err(), Some(errors::USER_EMPTY));
    assert_eq!(
        n.apply("alice", rev - 1, put("k")).err(),
        Some(errors::AUTH_OLD_REVISION)
    );
    assert_eq!(
        n.apply("alice", rev, put("other")).err(),
        Some(errors::PERMISSION_DENIED)
    );
    // Only root manages auth.
    let add_role = InternalRaftRequest {
        auth_role_add: Some(AuthRoleAddRequest { name: "x".into() }),
        ..Default::default()
    };
    assert_eq!(
        n.apply("alice", rev, add_role.clone()).err(),
        Some(errors::PERMISSION_DENIED)
    );
    assert!(n.apply("root", rev, add_role).is_ok());
    // A put proposed at revision r, then the permission is revoked before it is applied:
    // the apply refuses it even though the proposal was allowed.
    let proposed_at = n.auth.revision();
    let revoke = InternalRaftRequest {
        auth_role_revoke_permission: Some(AuthRoleRevokePermissionRequest {
            role: "w".into(),
            key: b"k".to_vec(),
            range_end: Vec::new(),
        }),
        ..Default::default()
    };
    n.apply("root", proposed_at, revoke).expect("revoke");
    assert_eq!(
        n.apply("alice", proposed_at, put("k")).err(),
        Some(errors::AUTH_OLD_REVISION)
    );
    assert_eq!(
        n.apply("alice", n.auth.revision(), put("k")).err(),
        Some(errors::PERMISSION_DENIED)
    );
    // etcd's records in etcd's buckets: authEnabled, authRevision, authpb.User.
    let be = n.kv.backend();
    assert_eq!(
        be.get(buckets::AUTH, b"authEnabled").expect("read"),
        Some(vec![1])
    );
    assert_eq!(
        be.get(buckets::AUTH, b"authRevision").expect("read"),
        Some(n.auth.revision().to_be_bytes().to_vec())
    );
    let alice = User::decode(
        be.get(buckets::AUTH_USERS, b"alice")
            .expect("read")
            .expect("alice stored")
            .as_slice(),
    )
    .expect("authpb.User");
    assert_eq!(alice.roles, vec!["w".to_string()]);
    assert!(bcrypt::verify("apw", &String::from_utf8_lossy(&alice.password)).expect("bcrypt"));
    // Reopened from the backend: the same state.
    let rev_before = n.auth.revision();
    be.force_commit().expect("commit");
    drop(n);
    let n = Node::open(dir.path());
    assert!(n.auth.is_enabled());
    assert_eq!(n.auth.revision(), rev_before);
}
