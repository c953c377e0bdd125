// The Cluster service: the member list of this member's view. Changing membership comes with
// the cluster issue; until then those calls answer `unimplemented`.

use std::sync::Arc;

use proto::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, cluster_server::Cluster,
};
use tonic::{Request, Response, Status};

use crate::server::EtcdServer;

pub struct ClusterService {
    pub server: Arc<EtcdServer>,
}

fn not_yet(what: &str) -> Status {
    Status::unimplemented(format!(
        "{what} is not supported by etcd-rs yet (single-member server)"
    ))
}

impl ClusterService {
    pub fn member_list_pb(&self) -> Vec<Member> {
        let mut ms = self.server.members();
        ms.sort_by_key(|m| m.id);
        ms.into_iter()
            .map(|m| Member {
                id: m.id,
                name: m.name,
                peer_ur_ls: m.peer_urls,
                client_ur_ls: m.client_urls,
                is_learner: m.is_learner,
            })
            .collect()
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        _r: Request<MemberAddRequest>,
    ) -> Result<Response<MemberAddResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &_r)?;
        Err(not_yet("MemberAdd"))
    }

    async fn member_remove(
        &self,
        _r: Request<MemberRemoveRequest>,
    ) -> Result<Response<MemberRemoveResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &_r)?;
        Err(not_yet("MemberRemove"))
    }

    async fn member_update(
        &self,
        _r: Request<MemberUpdateRequest>,
    ) -> Result<Response<MemberUpdateResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &_r)?;
        Err(not_yet("MemberUpdate"))
    }

    async fn member_list(
        &self,
        r: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        if r.into_inner().linearizable {
            self.server.linearizable_read().await?;
        }
        Ok(Response::new(MemberListResponse {
            header: self.server.header(0).map(|mut h| {
                // etcd's member list header carries no revision.
                h.revision = 0;
                h
            }),
            members: self.member_list_pb(),
        }))
    }

    async fn member_promote(
        &self,
        _r: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &_r)?;
        Err(not_yet("MemberPromote"))
    }
}
