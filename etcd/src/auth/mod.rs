// Auth: users, roles and key-range permissions kept in the backend's auth buckets exactly as
// etcd keeps them, the tokens that name a user, and the checks requests go through.
//
// The state is cached in memory (users and roles are few) and changed only by applying raft
// entries; every change writes the backend in the entry's atomic group and bumps the auth
// revision, which stale requests and JWT tokens are compared against.

pub mod perms;
pub mod token;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use prost::Message;
use proto::authpb::{Permission, Role, User, UserAddOptions};
use proto::etcdserverpb::{
    AuthDisableResponse, AuthEnableResponse, AuthRoleAddResponse, AuthRoleDeleteResponse,
    AuthRoleGetResponse, AuthRoleGrantPermissionResponse, AuthRoleListResponse,
    AuthRoleRevokePermissionResponse, AuthStatusResponse, AuthUserAddResponse,
    AuthUserChangePasswordResponse, AuthUserDeleteResponse, AuthUserGetResponse,
    AuthUserGrantRoleResponse, AuthUserListResponse, AuthUserRevokeRoleResponse,
    AuthenticateResponse, InternalRaftRequest, RequestOp, TxnRequest, request_op,
};

use crate::error::{self, Error};
use crate::mvcc::{KvStore, WriteTxn};
use common::backend::buckets;
pub use perms::Access;
use token::TokenProvider;

pub const ROOT_USER: &str = "root";
pub const ROOT_ROLE: &str = "root";
const ENABLED_KEY: &[u8] = b"authEnabled";
const REVISION_KEY: &[u8] = b"authRevision";

/// Who a request comes from: the user a token (or, later, a client certificate) names, and
/// the auth revision the identity was checked at. `revision == 0` means no identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthInfo {
    pub username: String,
    pub revision: u64,
}

/// The auth store as loaded from and written to the backend.
#[derive(Debug, Clone, Default)]
struct AuthState {
    enabled: bool,
    revision: u64,
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
}

/// Why a password check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordError {
    /// One of etcd's API errors (auth not enabled, authentication failed).
    Api(Error),
    /// A password given for a user added with --no-password: etcd returns its auth
    /// package's own error here, not an API one.
    NoPasswordUser,
}

/// The answer of an applied auth request, for the API layer to return.
#[derive(Debug, Clone)]
pub enum AuthResponse {
    Enable(AuthEnableResponse),
    Disable(AuthDisableResponse),
    Status(AuthStatusResponse),
    Authenticate(AuthenticateResponse),
    UserAdd(AuthUserAddResponse),
    UserGet(AuthUserGetResponse),
    UserList(AuthUserListResponse),
    UserDelete(AuthUserDeleteResponse),
    UserChangePassword(AuthUserChangePasswordResponse),
    UserGrantRole(AuthUserGrantRoleResponse),
    UserRevokeRole(AuthUserRevokeRoleResponse),
    RoleAdd(AuthRoleAddResponse),
    RoleGet(AuthRoleGetResponse),
    RoleList(AuthRoleListResponse),
    RoleDelete(AuthRoleDeleteResponse),
    RoleGrantPermission(AuthRoleGrantPermissionResponse),
    RoleRevokePermission(AuthRoleRevokePermissionResponse),
}

/// Whether `req` is one of the Auth service's requests (applied by [`AuthStore::apply`]).
pub fn is_auth_request(req: &InternalRaftRequest) -> bool {
    req.auth_enable.is_some()
        || req.auth_disable.is_some()
        || req.auth_status.is_some()
        || req.authenticate.is_some()
        || req.auth_user_add.is_some()
        || req.auth_user_delete.is_some()
        || req.auth_user_get.is_some()
        || req.auth_user_change_password.is_some()
        || req.auth_user_grant_role.is_some()
        || req.auth_user_revoke_role.is_some()
        || req.auth_user_list.is_some()
        || req.auth_role_list.is_some()
        || req.auth_role_add.is_some()
        || req.auth_role_delete.is_some()
        || req.auth_role_get.is_some()
        || req.auth_role_grant_permission.is_some()
        || req.auth_role_revoke_permission.is_some()
}

/// The requests only a user with the root role may make once auth is on (etcd's
/// needAdminPermission). UserGet and RoleGet are also open to the user itself / its roles.
fn needs_admin(req: &InternalRaftRequest) -> bool {
    req.auth_enable.is_some()
        || req.auth_disable.is_some()
        || req.auth_status.is_some()
        || req.auth_user_add.is_some()
        || req.auth_user_delete.is_some()
        || req.auth_user_change_password.is_some()
        || req.auth_user_grant_role.is_some()
        || req.auth_user_revoke_role.is_some()
        || req.auth_user_list.is_some()
        || req.auth_role_list.is_some()
        || req.auth_role_add.is_some()
        || req.auth_role_delete.is_some()
        || req.auth_role_grant_permission.is_some()
        || req.auth_role_revoke_permission.is_some()
}

fn has_root_role(u: &User) -> bool {
    u.roles.iter().any(|r| r == ROOT_ROLE)
}

/// Users, roles, the enabled flag and revision, and the token provider.
pub struct AuthStore {
    state: RwLock<AuthState>,
    tokens: TokenProvider,
    bcrypt_cost: u32,
}

impl AuthStore {
    /// Loads the auth buckets of `kv` (a db without them is a store with auth off at
    /// revision 1, as etcd starts one).
    pub fn open(kv: &KvStore, tokens: TokenProvider, bcrypt_cost: u32) -> Arc<AuthStore> {
        let s = AuthStore {
            state: RwLock::new(AuthState::default()),
            tokens,
            bcrypt_cost,
        };
        s.reload(kv);
        Arc::new(s)
    }

    /// Re-reads the auth state from the backend (after a snapshot replaced the db).
    pub fn reload(&self, kv: &KvStore) {
        let be = kv.backend();
        let enabled = be
            .get(buckets::AUTH, ENABLED_KEY)
            .ok()
            .flatten()
            .is_some_and(|v| v.first() == Some(&1));
        let revision = be
            .get(buckets::AUTH, REVISION_KEY)
            .ok()
            .flatten()
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0)
            .max(1);
        let all = |bucket: &[u8]| {
            be.range(bucket, &[0], Some(&[0xff; 64]), 0)
                .unwrap_or_default()
                .into_iter()
        };
        let mut users = BTreeMap::new();
        for (k, v) in all(buckets::AUTH_USERS) {
            match User::decode(v.as_slice()) {
                Ok(u) => {
                    users.insert(String::from_utf8_lossy(&k).into_owned(), u);
                }
                Err(e) => tracing::error!(
                    user = %String::from_utf8_lossy(&k),
                    error = %e,
                    "skipping a user record of the authUsers bucket that does not decode"
                ),
            }
        }
        let mut roles = BTreeMap::new();
        for (k, v) in all(buckets::AUTH_ROLES) {
            match Role::decode(v.as_slice()) {
                Ok(r) => {
                    roles.insert(String::from_utf8_lossy(&k).into_owned(), r);
                }
                Err(e) => tracing::error!(
                    role = %String::from_utf8_lossy(&k),
                    error = %e,
                    "skipping a role record of the authRoles bucket that does not decode"
                ),
            }
        }
        let st = AuthState {
            enabled,
            revision,
            users,
            roles,
        };
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = st;
    }

    fn read(&self) -> RwLockReadGuard<'_, AuthState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_enabled(&self) -> bool {
        self.read().enabled
    }

    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    /// The identity of the server's own requests (expired lease revokes): root at the
    /// current revision, as etcd's WithRoot.
    pub fn root_info(&self) -> AuthInfo {
        AuthInfo {
            username: ROOT_USER.to_string(),
            revision: self.revision(),
        }
    }

    pub fn bcrypt_cost(&self) -> u32 {
        self.bcrypt_cost
    }

    pub fn tokens(&self) -> &TokenProvider {
        &self.tokens
    }

    /// The identity `token` carries, or etcd's invalid-token error.
    pub fn info_from_token(&self, token: &str) -> Result<AuthInfo, Error> {
        self.tokens
            .info(token, self.revision())
            .ok_or(error::INVALID_AUTH_TOKEN)
    }

    /// Checks `password` for `name` (etcd's CheckPassword, done before Authenticate is
    /// proposed): the auth revision it was checked at, or the error. bcrypt is slow on
    /// purpose: call this off the async runtime.
    pub fn check_password(&self, name: &str, password: &str) -> Result<u64, PasswordError> {
        let (hash, revision) = {
            let st = self.read();
            if !st.enabled {
                return Err(PasswordError::Api(error::AUTH_NOT_ENABLED));
            }
            let u = st
                .users
                .get(name)
                .ok_or(PasswordError::Api(error::AUTH_FAILED))?;
            if u.options.as_ref().is_some_and(|o| o.no_password) {
                return Err(PasswordError::NoPasswordUser);
            }
            (u.password.clone(), st.revision)
        };
        let hash = String::from_utf8(hash).map_err(|_| PasswordError::Api(error::AUTH_FAILED))?;
        match bcrypt::verify(password, &hash) {
            Ok(true) => Ok(revision),
            _ => Err(PasswordError::Api(error::AUTH_FAILED)),
        }
    }

    /// etcd's isOpPermitted: `access` to `key` (or `[key, range_end)`) for `ai`.
    pub fn check(
        &self,
        ai: &AuthInfo,
        key: &[u8],
        range_end: &[u8],
        access: Access,
    ) -> Result<(), Error> {
        let st = self.read();
        if !st.enabled {
            return Ok(());
        }
        if ai.revision == 0 {
            return Err(error::USER_EMPTY);
        }
        if ai.revision < st.revision {
            tracing::warn!(
                user_name = %ai.username,
                revision = ai.revision,
                current_revision = st.revision,
                "request auth revision is less than current node auth revision"
            );
            return Err(error::AUTH_OLD_REVISION);
        }
        let Some(user) = st.users.get(&ai.username) else {
            tracing::error!(user_name = %ai.username, "cannot find a user for permission check");
            return Err(error::PERMISSION_DENIED);
        };
        if has_root_role(user) {
            return Ok(());
        }
        let roles: Vec<&Role> = user.roles.iter().filter_map(|r| st.roles.get(r)).collect();
        if perms::permitted(&roles, key, range_end, access) {
            Ok(())
        } else {
            Err(error::PERMISSION_DENIED)
        }
    }

    /// etcd's IsAdminPermitted: the user has the root role (always true with auth off).
    pub fn check_admin(&self, ai: &AuthInfo) -> Result<(), Error> {
        let st = self.read();
        if !st.enabled {
            return Ok(());
        }
        if ai.username.is_empty() {
            return Err(error::USER_EMPTY);
        }
        let u = st.users.get(&ai.username).ok_or(error::USER_NOT_FOUND)?;
        if has_root_role(u) {
            Ok(())
        } else {
            Err(error::PERMISSION_DENIED)
        }
    }

    fn has_role(&self, user: &str, role: &str) -> bool {
        self.read()
            .users
            .get(user)
            .is_some_and(|u| u.roles.iter().any(|r| r == role))
    }

    /// Every key a txn reads (compares, ranges, deletes with prev_kv) and writes, in all
    /// branches and nested txns, checked as etcd's checkTxnAuth.
    pub fn check_txn(&self, ai: &AuthInfo, t: &TxnRequest) -> Result<(), Error> {
        for c in &t.compare {
            self.check(ai, &c.key, &c.range_end, Access::Read)?;
        }
        self.check_ops(ai, &t.success)?;
        self.check_ops(ai, &t.failure)
    }

    fn check_ops(&self, ai: &AuthInfo, ops: &[RequestOp]) -> Result<(), Error> {
        for op in ops {
            match &op.request {
                Some(request_op::Request::RequestRange(r)) => {
                    self.check(ai, &r.key, &r.range_end, Access::Read)?
                }
                Some(request_op::Request::RequestPut(p)) => {
                    self.check(ai, &p.key, b"", Access::Write)?;
                    if p.prev_kv {
                        self.check(ai, &p.key, b"", Access::Read)?;
                    }
                }
                Some(request_op::Request::RequestDeleteRange(d)) => {
                    if d.prev_kv {
                        self.check(ai, &d.key, &d.range_end, Access::Read)?;
                    }
                    self.check(ai, &d.key, &d.range_end, Access::Write)?;
                }
                Some(request_op::Request::RequestTxn(t)) => self.check_txn(ai, t)?,
                None => {}
            }
        }
        Ok(())
    }

    /// etcd's checkLeasePuts: writing under (or revoking) a lease needs write permission on
    /// every key already attached to it, or a user could revoke keys it cannot write.
    pub fn check_lease_keys(&self, ai: &AuthInfo, keys: &[Vec<u8>]) -> Result<(), Error> {
        for k in keys {
            self.check(ai, k, b"", Access::Write)?;
        }
        Ok(())
    }

    /// The checks etcd's auth applier makes at apply time, with the identity the proposing
    /// member put in the header: a permission revoked after the proposal is honoured here.
    /// `lease_keys` gives the keys attached to a lease.
    pub fn check_apply(
        &self,
        req: &InternalRaftRequest,
        lease_keys: &dyn Fn(i64) -> Vec<Vec<u8>>,
    ) -> Result<(), Error> {
        if !self.is_enabled() {
            return Ok(());
        }
        let ai = req
            .header
            .as_ref()
            .map(|h| AuthInfo {
                username: h.username.clone(),
                revision: h.auth_revision,
            })
            .unwrap_or_default();
        if needs_admin(req) {
            return self.check_admin(&ai);
        }
        if let Some(g) = &req.auth_user_get {
            return match self.check_admin(&ai) {
                Err(e) if g.name != ai.username => Err(e),
                _ => Ok(()),
            };
        }
        if let Some(g) = &req.auth_role_get {
            return match self.check_admin(&ai) {
                Err(e) if !self.has_role(&ai.username, &g.role) => Err(e),
                _ => Ok(()),
            };
        }
        if let Some(p) = &req.put {
            self.check(&ai, &p.key, b"", Access::Write)?;
            if p.lease != 0 {
                self.check_lease_keys(&ai, &lease_keys(p.lease))?;
            }
            if p.prev_kv {
                self.check(&ai, &p.key, b"", Access::Read)?;
            }
        } else if let Some(d) = &req.delete_range {
            if d.prev_kv {
                self.check(&ai, &d.key, &d.range_end, Access::Read)?;
            }
            self.check(&ai, &d.key, &d.range_end, Access::Write)?;
        } else if let Some(t) = &req.txn {
            self.check_txn(&ai, t)?;
            for lease in txn_leases(t) {
                self.check_lease_keys(&ai, &lease_keys(lease))?;
            }
        } else if let Some(r) = &req.range {
            self.check(&ai, &r.key, &r.range_end, Access::Read)?;
        } else if let Some(r) = &req.lease_revoke {
            self.check_lease_keys(&ai, &lease_keys(r.id))?;
        }
        Ok(())
    }

    /// Applies an Auth service request in the write txn `w` of raft entry `index`.
    pub fn apply(
        &self,
        w: &mut WriteTxn<'_>,
        req: &InternalRaftRequest,
        index: u64,
    ) -> Result<AuthResponse, Error> {
        let mut guard = self.state.write().unwrap_or_else(|e| e.into_inner());
        let mut st = guard.clone();
        let out = self.apply_to(&mut st, w, req, index)?;
        *guard = st;
        Ok(out)
    }

    fn apply_to(
        &self,
        st: &mut AuthState,
        w: &mut WriteTxn<'_>,
        req: &InternalRaftRequest,
        index: u64,
    ) -> Result<AuthResponse, Error> {
        if req.auth_enable.is_some() {
            if st.enabled {
                tracing::info!("authentication is already enabled; ignored auth enable request");
                return Ok(AuthResponse::Enable(Default::default()));
            }
            let root = st.users.get(ROOT_USER).ok_or(error::ROOT_USER_NOT_EXIST)?;
            if !has_root_role(root) {
                return Err(error::ROOT_ROLE_NOT_EXIST);
            }
            w.put_raw(buckets::AUTH, ENABLED_KEY, &[1]);
            st.enabled = true;
            // etcd does not move the revision when enabling (it does when disabling).
            tracing::info!("enabled authentication");
            return Ok(AuthResponse::Enable(Default::default()));
        }
        if req.auth_disable.is_some() {
            if !st.enabled {
                return Ok(AuthResponse::Disable(Default::default()));
            }
            w.put_raw(buckets::AUTH, ENABLED_KEY, &[0]);
            st.enabled = false;
            commit_revision(st, w);
            self.tokens.clear();
            tracing::info!("disabled authentication");
            return Ok(AuthResponse::Disable(Default::default()));
        }
        if req.auth_status.is_some() {
            return Ok(AuthResponse::Status(AuthStatusResponse {
                header: None,
                enabled: st.enabled,
                auth_revision: st.revision,
            }));
        }
        if let Some(a) = &req.authenticate {
            if !st.enabled {
                return Err(error::AUTH_NOT_ENABLED);
            }
            // The password was checked by the member that proposed this; only the user's
            // existence is checked again here, as etcd does.
            let u = st.users.get(&a.name).ok_or(error::AUTH_FAILED)?;
            if u.options.as_ref().is_some_and(|o| o.no_password) {
                return Err(error::AUTH_FAILED);
            }
            let token = self
                .tokens
                .assign(&a.name, st.revision, &a.simple_token, index)
                .map_err(|e| {
                    tracing::error!(error = %e, "failed to assign an auth token");
                    error::AUTH_FAILED
                })?;
            tracing::debug!(user_name = %a.name, "authenticated a user");
            return Ok(AuthResponse::Authenticate(AuthenticateResponse {
                header: None,
                token,
            }));
        }
        if let Some(r) = &req.auth_user_add {
            if r.name.is_empty() {
                return Err(error::USER_EMPTY);
            }
            if st.users.contains_key(&r.name) {
                return Err(error::USER_ALREADY_EXIST);
            }
            let options = r.options.unwrap_or(UserAddOptions { no_password: false });
            let password = if options.no_password {
                Vec::new()
            } else if !r.hashed_password.is_empty() {
                r.hashed_password.as_bytes().to_vec()
            } else {
                // An etcd 3.4 member proposes the plain password; hash it here as it does.
                bcrypt::hash(&r.password, self.bcrypt_cost)
                    .map_err(|_| error::AUTH_FAILED)?
                    .into_bytes()
            };
            let u = User {
                name: r.name.as_bytes().to_vec(),
                password,
                roles: Vec::new(),
                options: Some(options),
            };
            put_user(st, w, u);
            commit_revision(st, w);
            tracing::info!(user_name = %r.name, "added a user");
            return Ok(AuthResponse::UserAdd(Default::default()));
        }
        if let Some(r) = &req.auth_user_delete {
            if st.enabled && r.name == ROOT_USER {
                tracing::error!("cannot delete 'root' user");
                return Err(error::INVALID_AUTH_MGMT);
            }
            if st.users.remove(&r.name).is_none() {
                return Err(error::USER_NOT_FOUND);
            }
            w.delete_raw(buckets::AUTH_USERS, r.name.as_bytes());
            commit_revision(st, w);
            self.tokens.invalidate_user(&r.name);
            tracing::info!(user_name = %r.name, "deleted a user");
            return Ok(AuthResponse::UserDelete(Default::default()));
        }
        if let Some(r) = &req.auth_user_change_password {
            let mut u = st
                .users
                .get(&r.name)
                .cloned()
                .ok_or(error::USER_NOT_FOUND)?;
            u.password = if !r.hashed_password.is_empty() {
                r.hashed_password.as_bytes().to_vec()
            } else {
                bcrypt::hash(&r.password, self.bcrypt_cost)
                    .map_err(|_| error::AUTH_FAILED)?
                    .into_bytes()
            };
            put_user(st, w, u);
            commit_revision(st, w);
            self.tokens.invalidate_user(&r.name);
            tracing::info!(user_name = %r.name, "changed a password of a user");
            return Ok(AuthResponse::UserChangePassword(Default::default()));
        }
        if let Some(r) = &req.auth_user_grant_role {
            let mut u = st
                .users
                .get(&r.user)
                .cloned()
                .ok_or(error::USER_NOT_FOUND)?;
            if r.role != ROOT_ROLE && !st.roles.contains_key(&r.role) {
                return Err(error::ROLE_NOT_FOUND);
            }
            if u.roles.contains(&r.role) {
                tracing::warn!(user_name = %r.user, role_name = %r.role, "ignored grant role request to a user");
                return Ok(AuthResponse::UserGrantRole(Default::default()));
            }
            u.roles.push(r.role.clone());
            u.roles.sort();
            put_user(st, w, u);
            commit_revision(st, w);
            tracing::info!(user_name = %r.user, role_name = %r.role, "granted a role to a user");
            return Ok(AuthResponse::UserGrantRole(Default::default()));
        }
        if let Some(r) = &req.auth_user_get {
            let u = st.users.get(&r.name).ok_or(error::USER_NOT_FOUND)?;
            return Ok(AuthResponse::UserGet(AuthUserGetResponse {
                header: None,
                roles: u.roles.clone(),
            }));
        }
        if req.auth_user_list.is_some() {
            return Ok(AuthResponse::UserList(AuthUserListResponse {
                header: None,
                users: st.users.keys().cloned().collect(),
            }));
        }
        if let Some(r) = &req.auth_user_revoke_role {
            if st.enabled && r.name == ROOT_USER && r.role == ROOT_ROLE {
                tracing::error!("'root' user cannot revoke 'root' role");
                return Err(error::INVALID_AUTH_MGMT);
            }
            let mut u = st
                .users
                .get(&r.name)
                .cloned()
                .ok_or(error::USER_NOT_FOUND)?;
            let before = u.roles.len();
            u.roles.retain(|x| x != &r.role);
            if u.roles.len() == before {
                return Err(error::ROLE_NOT_GRANTED);
            }
            put_user(st, w, u);
            commit_revision(st, w);
            tracing::info!(user_name = %r.name, role_name = %r.role, "revoked a role from a user");
            return Ok(AuthResponse::UserRevokeRole(Default::default()));
        }
        if let Some(r) = &req.auth_role_add {
            if r.name.is_empty() {
                return Err(error::ROLE_EMPTY);
            }
            if st.roles.contains_key(&r.name) {
                return Err(error::ROLE_ALREADY_EXIST);
            }
            put_role(
                st,
                w,
                Role {
                    name: r.name.as_bytes().to_vec(),
                    key_permission: Vec::new(),
                },
            );
            commit_revision(st, w);
            tracing::info!(role_name = %r.name, "created a role");
            return Ok(AuthResponse::RoleAdd(Default::default()));
        }
        if let Some(r) = &req.auth_role_get {
            let role = st.roles.get(&r.role).ok_or(error::ROLE_NOT_FOUND)?;
            return Ok(AuthResponse::RoleGet(AuthRoleGetResponse {
                header: None,
                perm: role.key_permission.clone(),
            }));
        }
        if req.auth_role_list.is_some() {
            return Ok(AuthResponse::RoleList(AuthRoleListResponse {
                header: None,
                roles: st.roles.keys().cloned().collect(),
            }));
        }
        if let Some(r) = &req.auth_role_delete {
            if st.enabled && r.role == ROOT_ROLE {
                tracing::error!("cannot delete 'root' role");
                return Err(error::INVALID_AUTH_MGMT);
            }
            if st.roles.remove(&r.role).is_none() {
                return Err(error::ROLE_NOT_FOUND);
            }
            w.delete_raw(buckets::AUTH_ROLES, r.role.as_bytes());
            // The role goes from every user that had it.
            let holders: Vec<User> = st
                .users
                .values()
                .filter(|u| u.roles.contains(&r.role))
                .cloned()
                .collect();
            for mut u in holders {
                u.roles.retain(|x| x != &r.role);
                put_user(st, w, u);
            }
            commit_revision(st, w);
            tracing::info!(role_name = %r.role, "deleted a role");
            return Ok(AuthResponse::RoleDelete(Default::default()));
        }
        if let Some(r) = &req.auth_role_grant_permission {
            let mut role = st
                .roles
                .get(&r.name)
                .cloned()
                .ok_or(error::ROLE_NOT_FOUND)?;
            let perm = r.perm.clone().ok_or(error::PERMISSION_NOT_GIVEN)?;
            // The same key and range end replace the existing permission's type.
            if let Some(p) = role
                .key_permission
                .iter_mut()
                .find(|p| p.key == perm.key && p.range_end == perm.range_end)
            {
                p.perm_type = perm.perm_type;
            } else {
                role.key_permission.push(Permission {
                    perm_type: perm.perm_type,
                    key: perm.key,
                    range_end: perm.range_end,
                });
                role.key_permission.sort_by(|a, b| a.key.cmp(&b.key));
            }
            put_role(st, w, role);
            commit_revision(st, w);
            tracing::info!(role_name = %r.name, "granted/updated a permission to a role");
            return Ok(AuthResponse::RoleGrantPermission(Default::default()));
        }
        if let Some(r) = &req.auth_role_revoke_permission {
            let mut role = st
                .roles
                .get(&r.role)
                .cloned()
                .ok_or(error::ROLE_NOT_FOUND)?;
            let before = role.key_permission.len();
            role.key_permission
                .retain(|p| !(p.key == r.key && p.range_end == r.range_end));
            if role.key_permission.len() == before {
                return Err(error::PERMISSION_NOT_GRANTED);
            }
            put_role(st, w, role);
            commit_revision(st, w);
            tracing::info!(role_name = %r.role, "revoked a permission on range");
            return Ok(AuthResponse::RoleRevokePermission(Default::default()));
        }
        Err(error::NOT_CAPABLE)
    }
}

/// The leases a txn's puts attach keys to (all branches, nested txns included).
fn txn_leases(t: &TxnRequest) -> Vec<i64> {
    let mut out = Vec::new();
    for op in t.success.iter().chain(&t.failure) {
        match &op.request {
            Some(request_op::Request::RequestPut(p)) if p.lease != 0 => out.push(p.lease),
            Some(request_op::Request::RequestTxn(n)) => out.extend(txn_leases(n)),
            _ => {}
        }
    }
    out
}

fn put_user(st: &mut AuthState, w: &mut WriteTxn<'_>, u: User) {
    let name = String::from_utf8_lossy(&u.name).into_owned();
    w.put_raw(buckets::AUTH_USERS, &u.name, &u.encode_to_vec());
    st.users.insert(name, u);
}

fn put_role(st: &mut AuthState, w: &mut WriteTxn<'_>, r: Role) {
    let name = String::from_utf8_lossy(&r.name).into_owned();
    w.put_raw(buckets::AUTH_ROLES, &r.name, &r.encode_to_vec());
    st.roles.insert(name, r);
}

/// Every change of the auth store moves its revision, stored as etcd stores it.
fn commit_revision(st: &mut AuthState, w: &mut WriteTxn<'_>) {
    st.revision += 1;
    w.put_raw(buckets::AUTH, REVISION_KEY, &st.revision.to_be_bytes());
}
