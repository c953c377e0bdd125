// The Cluster service: the member list, and membership changes through raft conf changes
// (add as voter or learner, remove, update peer URLs, promote) with etcd's checks and errors.

use std::sync::Arc;

use proto::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, cluster_server::Cluster,
};
use proto::raftpb::{ConfChange, ConfChangeType};
use tonic::{Request, Response, Status};

use super::errors;
use crate::api::errors::ToStatus;
use crate::membership;
use crate::server::EtcdServer;

pub struct ClusterService {
    pub server: Arc<EtcdServer>,
}

/// A member as the API shows it.
pub fn to_pb(m: &membership::Member) -> Member {
    m.to_pb()
}

fn sorted_pb(ms: &[membership::Member]) -> Vec<Member> {
    let mut out: Vec<Member> = ms.iter().map(to_pb).collect();
    out.sort_by_key(|m| m.id);
    out
}

/// Peer URLs must be absolute http(s) URLs without a path, as etcd's types.NewURLs requires.
fn check_urls(urls: &[String]) -> Result<(), Status> {
    if urls.is_empty() {
        return Err(errors::MEMBER_BAD_URLS.status());
    }
    for u in urls {
        match crate::config::Url::parse(u) {
            Ok(p) if p.scheme == "http" || p.scheme == "https" => {}
            _ => return Err(errors::MEMBER_BAD_URLS.status()),
        }
    }
    Ok(())
}

impl ClusterService {
    pub fn member_list_pb(&self) -> Vec<Member> {
        sorted_pb(&self.server.members())
    }

    /// etcd's member list header carries no revision.
    fn header(&self) -> Option<proto::etcdserverpb::ResponseHeader> {
        self.server.header(0).map(|mut h| {
            h.revision = 0;
            h
        })
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        r: Request<MemberAddRequest>,
    ) -> Result<Response<MemberAddResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &r)?;
        let r = r.into_inner();
        check_urls(&r.peer_ur_ls)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let token = &self.server.cfg().initial_cluster_token;
        let m = membership::Member {
            id: membership::member_id(&r.peer_ur_ls, token, Some(now)),
            peer_urls: r.peer_ur_ls.clone(),
            is_learner: r.is_learner,
            name: String::new(),
            client_urls: Vec::new(),
        };
        self.server.may_add_member(r.is_learner)?;
        let cc = ConfChange {
            r#type: if r.is_learner {
                ConfChangeType::ConfChangeAddLearnerNode
            } else {
                ConfChangeType::ConfChangeAddNode
            } as i32,
            node_id: m.id,
            context: Some(m.to_json().into_bytes()),
            ..Default::default()
        };
        let members = self.server.propose_conf_change(cc).await?;
        Ok(Response::new(MemberAddResponse {
            header: self.header(),
            member: Some(to_pb(&m)),
            members: sorted_pb(&members),
        }))
    }

    async fn member_remove(
        &self,
        r: Request<MemberRemoveRequest>,
    ) -> Result<Response<MemberRemoveResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &r)?;
        let id = r.into_inner().id;
        self.server.may_remove_member(id)?;
        let cc = ConfChange {
            r#type: ConfChangeType::ConfChangeRemoveNode as i32,
            node_id: id,
            ..Default::default()
        };
        let members = self.server.propose_conf_change(cc).await?;
        Ok(Response::new(MemberRemoveResponse {
            header: self.header(),
            members: sorted_pb(&members),
        }))
    }

    async fn member_update(
        &self,
        r: Request<MemberUpdateRequest>,
    ) -> Result<Response<MemberUpdateResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &r)?;
        let r = r.into_inner();
        check_urls(&r.peer_ur_ls)?;
        let m = membership::Member {
            id: r.id,
            peer_urls: r.peer_ur_ls,
            ..Default::default()
        };
        let cc = ConfChange {
            r#type: ConfChangeType::ConfChangeUpdateNode as i32,
            node_id: r.id,
            context: Some(m.to_json().into_bytes()),
            ..Default::default()
        };
        let members = self.server.propose_conf_change(cc).await?;
        Ok(Response::new(MemberUpdateResponse {
            header: self.header(),
            members: sorted_pb(&members),
        }))
    }

    async fn member_list(
        &self,
        r: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        if r.into_inner().linearizable {
            self.server.linearizable_read().await?;
        }
        Ok(Response::new(MemberListResponse {
            header: self.header(),
            members: self.member_list_pb(),
        }))
    }

    async fn member_promote(
        &self,
        r: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &r)?;
        let mut members = self.server.promote_member(r.into_inner().id).await?;
        members.sort_by_key(|m| m.id);
        Ok(Response::new(MemberPromoteResponse {
            header: self.header(),
            members,
        }))
    }
}
