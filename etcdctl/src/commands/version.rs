//! `etcdctl version`: the client's version and the API version it speaks; no server contact.
//! The version printed is etcd 3.4's, the release whose command line this one reproduces.

use super::Ctx;
use crate::error::Result;

/// The etcd release whose command line and output this etcdctl reproduces.
pub const ETCDCTL_VERSION: &str = "3.4.23";
/// The v3 API version spoken.
pub const API_VERSION: &str = "3.4";

pub fn run(_ctx: &Ctx) -> Result<()> {
    // etcd prints the same text whatever --write-out says.
    println!("etcdctl version: {ETCDCTL_VERSION}");
    println!("API version: {API_VERSION}");
    Ok(())
}
