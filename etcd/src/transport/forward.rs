// Requests a follower forwards to the leader's peer port: lease renewals and TTL queries (the
// leader owns lease expiry) and learner promotion (only the leader knows a learner's progress).
//
// One cached connection to the current leader; errors come back as etcd's errors.

use std::sync::Mutex;
use std::time::Duration;

use proto::etcdserverpb::{
    LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    Member, MemberPromoteRequest,
};
use proto::peerpb::peer_client::PeerClient;
use tonic::transport::Channel;

use super::{Local, sender};
use crate::error::{self, Error};

/// A connection to the leader, reused while it leads.
#[derive(Default)]
pub struct Forwarder {
    leader: Mutex<Option<(u64, Channel)>>,
}

fn forwarded(s: tonic::Status) -> Error {
    error::by_message(s.message()).unwrap_or(error::TIMEOUT_DUE_TO_CONNECTION_LOST)
}

impl Forwarder {
    async fn channel(&self, local: &Local, leader: u64, urls: &[String]) -> Result<Channel, Error> {
        if let Some((id, ch)) = self
            .leader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            && *id == leader
        {
            return Ok(ch.clone());
        }
        let ch = sender::connect(urls, Duration::from_secs(1), local.tls.as_ref())
            .await
            .map_err(|_| error::TIMEOUT_DUE_TO_CONNECTION_LOST)?;
        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = Some((leader, ch.clone()));
        Ok(ch)
    }

    /// Renews lease `id` on the leader (member `leader` at `urls`).
    pub async fn lease_renew(
        &self,
        local: &Local,
        leader: u64,
        urls: &[String],
        id: i64,
    ) -> Result<LeaseKeepAliveResponse, Error> {
        let ch = self.channel(local, leader, urls).await?;
        let req = sender::request(local, LeaseKeepAliveRequest { id });
        Ok(PeerClient::new(ch)
            .lease_renew(req)
            .await
            .map_err(forwarded)?
            .into_inner())
    }

    /// Asks the leader for a lease's remaining TTL.
    pub async fn lease_time_to_live(
        &self,
        local: &Local,
        leader: u64,
        urls: &[String],
        req: LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse, Error> {
        let ch = self.channel(local, leader, urls).await?;
        let req = sender::request(local, req);
        Ok(PeerClient::new(ch)
            .lease_time_to_live(req)
            .await
            .map_err(forwarded)?
            .into_inner())
    }

    /// Asks the leader to promote learner `id`; returns the members after it.
    pub async fn promote(
        &self,
        local: &Local,
        leader: u64,
        urls: &[String],
        id: u64,
    ) -> Result<Vec<Member>, Error> {
        let ch = self.channel(local, leader, urls).await?;
        let req = sender::request(local, MemberPromoteRequest { id });
        Ok(PeerClient::new(ch)
            .promote(req)
            .await
            .map_err(forwarded)?
            .into_inner()
            .members)
    }
}
