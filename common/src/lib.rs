// What etcd's server, etcdctl and etcdutl share, so the tools need not link the server: etcd's
// on-disk formats, its member records, URLs, versions, Go-style values and the TLS client side.
//
// The file formats are written exactly as etcd 3.4/3.5 writes them (../shared/FORMATS.md), so
// data dirs and snapshots move between etcd and us in both directions.

pub mod backend;
pub mod fileutil;
pub mod gofmt;
pub mod membership;
pub mod observe;
pub mod snap;
#[cfg(feature = "tls")]
pub mod tls;
pub mod url;
pub mod version;
pub mod wal;
