// The Auth service (enable/disable, authenticate, users, roles, permissions) and the one place
// where a request's identity is found: `auth_info` reads the `token` metadata etcd's clients send.

use std::sync::Arc;

use proto::etcdserverpb::{
    AuthDisableRequest, AuthDisableResponse, AuthEnableRequest, AuthEnableResponse,
    AuthRoleAddRequest, AuthRoleAddResponse, AuthRoleDeleteRequest, AuthRoleDeleteResponse,
    AuthRoleGetRequest, AuthRoleGetResponse, AuthRoleGrantPermissionRequest,
    AuthRoleGrantPermissionResponse, AuthRoleListRequest, AuthRoleListResponse,
    AuthRoleRevokePermissionRequest, AuthRoleRevokePermissionResponse, AuthStatusRequest,
    AuthStatusResponse, AuthUserAddRequest, AuthUserAddResponse, AuthUserChangePasswordRequest,
    AuthUserChangePasswordResponse, AuthUserDeleteRequest, AuthUserDeleteResponse,
    AuthUserGetRequest, AuthUserGetResponse, AuthUserGrantRoleRequest, AuthUserGrantRoleResponse,
    AuthUserListRequest, AuthUserListResponse, AuthUserRevokeRoleRequest,
    AuthUserRevokeRoleResponse, AuthenticateRequest, AuthenticateResponse,
    InternalAuthenticateRequest, InternalRaftRequest, RequestHeader, auth_server::Auth,
};
use tonic::{Request, Response, Status};

use super::errors::{self, ApiError};
use crate::api::errors::ToStatus;
use crate::auth::{Access, AuthInfo, AuthResponse, PasswordError};
use crate::server::EtcdServer;
use crate::server::apply::Applied;

/// The gRPC metadata keys etcd reads a token from (clientv3 and the JSON gateway).
const TOKEN_KEYS: [&str; 2] = ["token", "authorization"];

/// The identity of a request: the user its token names, or None when it carries no token.
/// A token that is unknown, expired or forged is etcd's "invalid auth token", even with auth
/// off. This is the hook for other identities (client certificate CNs) later.
pub fn auth_info<T>(server: &EtcdServer, req: &Request<T>) -> Result<Option<AuthInfo>, ApiError> {
    let md = req.metadata();
    let Some(token) = TOKEN_KEYS
        .iter()
        .find_map(|k| md.get(*k))
        .and_then(|v| v.to_str().ok())
    else {
        // etcd's certificate users: with --client-cert-auth and no token, the verified
        // client certificate's CN is the user, at the current auth revision.
        let auth = server.auth();
        if server.cfg().client_cert_auth
            && auth.is_enabled()
            && let Some(cn) = crate::tls::client_cert_cn(req)
        {
            return Ok(Some(AuthInfo {
                username: cn.to_string(),
                revision: auth.revision(),
            }));
        }
        return Ok(None);
    };
    match server.auth().info_from_token(token) {
        Ok(ai) => Ok(Some(ai)),
        Err(e) => {
            tracing::warn!("invalid auth token");
            Err(e)
        }
    }
}

/// The identity, or the empty one (no user) that permission checks refuse when auth is on.
pub fn identity<T>(server: &EtcdServer, req: &Request<T>) -> Result<AuthInfo, ApiError> {
    Ok(auth_info(server, req)?.unwrap_or_default())
}

/// The header that carries the identity through raft, so the apply re-checks it.
pub fn header(ai: &AuthInfo) -> Option<RequestHeader> {
    Some(RequestHeader {
        id: 0,
        username: ai.username.clone(),
        auth_revision: ai.revision,
    })
}

/// etcd's Maintenance service returns the auth package's own errors (code Unknown, text
/// "auth: ..."), not the etcdserver ones: the Go etcdctl prints exactly that.
pub fn maintenance_status(e: ApiError) -> Status {
    let text = if e == errors::PERMISSION_DENIED {
        "auth: permission denied"
    } else if e == errors::USER_EMPTY {
        "auth: user name is empty"
    } else if e == errors::USER_NOT_FOUND {
        "auth: user not found"
    } else if e == errors::INVALID_AUTH_TOKEN {
        "auth: invalid auth token"
    } else {
        return e.status();
    };
    Status::unknown(text)
}

/// Root-only Maintenance calls (Snapshot, Defragment, Hash, HashKV, MoveLeader).
pub fn check_maintenance_admin<T>(server: &EtcdServer, req: &Request<T>) -> Result<(), Status> {
    let ai = auth_info(server, req).map_err(maintenance_status)?;
    server
        .auth()
        .check_admin(&ai.unwrap_or_default())
        .map_err(maintenance_status)
}

/// Root-only Cluster calls (member add, remove, update, promote), with etcdserver errors.
pub fn check_cluster_admin<T>(server: &EtcdServer, req: &Request<T>) -> Result<(), Status> {
    let ai = identity(server, req)?;
    server.auth().check_admin(&ai).map_err(Status::from)
}

/// Lock and Election are KV recipes run for the caller: it needs read over the name's
/// `prefix` (when given) and write on its `key`, as the client-side recipes would.
pub fn check_recipe(
    server: &EtcdServer,
    ai: &AuthInfo,
    prefix: &[u8],
    key: Option<&[u8]>,
) -> Result<(), Status> {
    let auth = server.auth();
    if !prefix.is_empty() {
        let end = super::lock::prefix_end(prefix);
        auth.check(ai, prefix, &end, Access::Read)?;
    }
    if let Some(k) = key {
        auth.check(ai, k, b"", Access::Write)?;
    }
    Ok(())
}

pub struct AuthService {
    pub server: Arc<EtcdServer>,
}

fn unexpected() -> Status {
    tracing::error!("apply returned a result of the wrong kind");
    errors::CORRUPT.status()
}

/// bcrypt is slow on purpose: hash off the async runtime.
async fn hash_password(password: String, cost: u32) -> Result<String, Status> {
    tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
        .await
        .map_err(|_| errors::STOPPED.status())?
        .map_err(|e| {
            tracing::error!(error = %e, "failed to bcrypt hash password");
            Status::internal(format!("etcdserver: cannot hash the password: {e}"))
        })
}

impl AuthService {
    /// Proposes an auth request with the caller's identity and returns the applied answer.
    async fn propose<T>(
        &self,
        request: &Request<T>,
        mut req: InternalRaftRequest,
    ) -> Result<(AuthResponse, i64), Status> {
        let ai = identity(&self.server, request)?;
        req.header = header(&ai);
        let out = self.server.propose(req).await?;
        match out.result? {
            Applied::Auth(a) => Ok((a, out.revision)),
            _ => Err(unexpected()),
        }
    }
}

macro_rules! answer {
    ($self:ident, $request:ident, $field:ident, $variant:ident) => {{
        let r = $request.get_ref().clone();
        let (a, rev) = $self
            .propose(
                &$request,
                InternalRaftRequest {
                    $field: Some(r),
                    ..Default::default()
                },
            )
            .await?;
        match a {
            AuthResponse::$variant(mut resp) => {
                resp.header = $self.server.header(rev);
                Ok(Response::new(resp))
            }
            _ => Err(unexpected()),
        }
    }};
}

impl AuthService {
    /// etcd 3.5 hashes a new password before proposing it (hashed_password); etcd 3.4
    /// proposes it plain and every member hashes it when applying, and knows no
    /// hashed_password. Below cluster version 3.5 an etcd 3.4 member may apply the entry, so
    /// it is proposed as 3.4 proposes it.
    fn hashes_before_proposing(&self) -> bool {
        crate::server::cluster_version::at_least(&self.server.cluster_version(), (3, 5))
    }
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(
        &self,
        request: Request<AuthEnableRequest>,
    ) -> Result<Response<AuthEnableResponse>, Status> {
        answer!(self, request, auth_enable, Enable)
    }

    async fn auth_disable(
        &self,
        request: Request<AuthDisableRequest>,
    ) -> Result<Response<AuthDisableResponse>, Status> {
        answer!(self, request, auth_disable, Disable)
    }

    async fn auth_status(
        &self,
        request: Request<AuthStatusRequest>,
    ) -> Result<Response<AuthStatusResponse>, Status> {
        // etcd 3.5 puts AuthStatus through raft, and an etcd 3.4 member panics on an entry it
        // has no applier for; below cluster version 3.5 the status is therefore read from the
        // local auth store after a linearizable read, which is how etcd 3.4 answers it.
        if !crate::server::cluster_version::at_least(&self.server.cluster_version(), (3, 5)) {
            self.server.linearizable_read().await?;
            let auth = self.server.auth();
            return Ok(Response::new(AuthStatusResponse {
                header: self.server.header(self.server.kv().current_rev()),
                enabled: auth.is_enabled(),
                auth_revision: auth.revision(),
            }));
        }
        answer!(self, request, auth_status, Status)
    }

    async fn authenticate(
        &self,
        request: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let r = request.into_inner();
        self.server.linearizable_read().await?;
        loop {
            let store = self.server.auth().clone();
            let (name, password) = (r.name.clone(), r.password.clone());
            let checked =
                tokio::task::spawn_blocking(move || store.check_password(&name, &password))
                    .await
                    .map_err(|_| errors::STOPPED.status())?;
            let checked_revision = match checked {
                Ok(rev) => rev,
                Err(e) => {
                    if e != PasswordError::Api(errors::AUTH_NOT_ENABLED) {
                        tracing::warn!(user_name = %r.name, error = ?e, "invalid authentication was requested");
                    }
                    return Err(e.into());
                }
            };
            let Some(simple_token) = self.server.auth().tokens().gen_prefix() else {
                tracing::error!("the OS gave no randomness for an auth token");
                return Err(Status::internal(
                    "etcdserver: cannot generate an auth token: no OS randomness",
                ));
            };
            // The password is checked here and never proposed: it must not reach the WAL.
            let req = InternalRaftRequest {
                authenticate: Some(InternalAuthenticateRequest {
                    name: r.name.clone(),
                    password: String::new(),
                    simple_token,
                }),
                ..Default::default()
            };
            let out = self.server.propose(req).await?;
            let resp = match out.result? {
                Applied::Auth(AuthResponse::Authenticate(mut a)) => {
                    a.header = self.server.header(out.revision);
                    a
                }
                _ => return Err(unexpected()),
            };
            // A password changed between the check and the apply: check again.
            if checked_revision == self.server.auth().revision() {
                return Ok(Response::new(resp));
            }
            tracing::info!("revision when password checked became stale; retrying");
        }
    }

    async fn user_add(
        &self,
        mut request: Request<AuthUserAddRequest>,
    ) -> Result<Response<AuthUserAddResponse>, Status> {
        let no_password = request
            .get_ref()
            .options
            .as_ref()
            .is_some_and(|o| o.no_password);
        if !no_password && self.hashes_before_proposing() {
            let pw = std::mem::take(&mut request.get_mut().password);
            request.get_mut().hashed_password =
                hash_password(pw, self.server.auth().bcrypt_cost()).await?;
        }
        answer!(self, request, auth_user_add, UserAdd)
    }

    async fn user_get(
        &self,
        request: Request<AuthUserGetRequest>,
    ) -> Result<Response<AuthUserGetResponse>, Status> {
        answer!(self, request, auth_user_get, UserGet)
    }

    async fn user_list(
        &self,
        request: Request<AuthUserListRequest>,
    ) -> Result<Response<AuthUserListResponse>, Status> {
        answer!(self, request, auth_user_list, UserList)
    }

    async fn user_delete(
        &self,
        request: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        answer!(self, request, auth_user_delete, UserDelete)
    }

    async fn user_change_password(
        &self,
        mut request: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        if self.hashes_before_proposing() {
            let pw = std::mem::take(&mut request.get_mut().password);
            request.get_mut().hashed_password =
                hash_password(pw, self.server.auth().bcrypt_cost()).await?;
        }
        answer!(self, request, auth_user_change_password, UserChangePassword)
    }

    async fn user_grant_role(
        &self,
        request: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        answer!(self, request, auth_user_grant_role, UserGrantRole)
    }

    async fn user_revoke_role(
        &self,
        request: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        answer!(self, request, auth_user_revoke_role, UserRevokeRole)
    }

    async fn role_add(
        &self,
        request: Request<AuthRoleAddRequest>,
    ) -> Result<Response<AuthRoleAddResponse>, Status> {
        answer!(self, request, auth_role_add, RoleAdd)
    }

    async fn role_get(
        &self,
        request: Request<AuthRoleGetRequest>,
    ) -> Result<Response<AuthRoleGetResponse>, Status> {
        answer!(self, request, auth_role_get, RoleGet)
    }

    async fn role_list(
        &self,
        request: Request<AuthRoleListRequest>,
    ) -> Result<Response<AuthRoleListResponse>, Status> {
        answer!(self, request, auth_role_list, RoleList)
    }

    async fn role_delete(
        &self,
        request: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        answer!(self, request, auth_role_delete, RoleDelete)
    }

    async fn role_grant_permission(
        &self,
        request: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        answer!(
            self,
            request,
            auth_role_grant_permission,
            RoleGrantPermission
        )
    }

    async fn role_revoke_permission(
        &self,
        request: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        answer!(
            self,
            request,
            auth_role_revoke_permission,
            RoleRevokePermission
        )
    }
}
