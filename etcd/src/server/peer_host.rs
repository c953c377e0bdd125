// The server as the peer port sees it: transport::server::PeerHost implemented on EtcdServer,
// so the transport layer serves peers without depending on the server's types.

use proto::etcdserverpb::HashKvResponse;
use proto::raftpb::Message;

use super::EtcdServer;
use crate::error::Error;
use crate::membership::Member;
use crate::transport::Transport;
use crate::transport::server::PeerHost;

impl PeerHost for EtcdServer {
    fn cluster_id(&self) -> u64 {
        EtcdServer::cluster_id(self)
    }

    fn member_id(&self) -> u64 {
        EtcdServer::member_id(self)
    }

    fn cluster_version(&self) -> String {
        EtcdServer::cluster_version(self)
    }

    fn is_removed(&self, id: u64) -> bool {
        EtcdServer::is_removed(self, id)
    }

    fn is_leader(&self) -> bool {
        EtcdServer::is_leader(self)
    }

    fn members(&self) -> Vec<Member> {
        EtcdServer::members(self)
    }

    fn step(&self, m: Message) {
        // Only a stopped server refuses; the peer learns of that from the closed port.
        let _ = EtcdServer::step(self, m);
    }

    fn snap_db_path(&self, index: u64) -> std::path::PathBuf {
        EtcdServer::snap_db_path(self, index)
    }

    fn transport(&self) -> &Transport {
        EtcdServer::transport(self)
    }

    async fn promote_member(&self, id: u64) -> Result<(), Error> {
        EtcdServer::promote_member(self, id).await.map(|_| ())
    }

    fn renew_lease(&self, id: i64) -> Option<i64> {
        self.lessor().renew(id)
    }

    fn lease_time_to_live(&self, id: i64) -> Option<(i64, i64, Vec<Vec<u8>>)> {
        self.lessor().time_to_live(id)
    }

    async fn hash_kv(&self, revision: i64) -> Result<HashKvResponse, Error> {
        super::corrupt::local_hash(self, revision).await
    }

    async fn downgrade_enabled(&self) -> Result<bool, Error> {
        super::downgrade::enabled(self).await
    }
}
