// Checks our API error table against the real etcd 3.4: provoke each error with the real Go
// etcdctl and compare the gRPC code and message the server sent with ours.

#[path = "../../common/tests/support/mod.rs"]
mod support;

use etcd::api::errors::{self, ToStatus};
use support::RealEtcd;

/// The `code = X desc = Y` the Go client logs for a failed RPC.
fn server_error(stderr: &str) -> Option<(String, String)> {
    let i = stderr.find("code = ")?;
    let rest = &stderr[i + 7..];
    let (code, rest) = rest.split_once(" desc = ")?;
    let desc = rest.split('"').next()?.trim_end_matches('\\');
    Some((code.to_string(), desc.to_string()))
}

fn code_name(c: tonic::Code) -> String {
    // tonic's Debug names match Go's grpc code names except for the spelling of Canceled.
    match c {
        tonic::Code::Cancelled => "Canceled".into(),
        other => format!("{other:?}"),
    }
}

#[test]
fn real_etcd_errors_match_our_table() {
    let tmp = tempfile::tempdir().unwrap();
    let etcd = RealEtcd::start(&tmp.path().join("d"), "errs");
    etcd.etcdctl_ok(&["put", "k", "v1"]);
    etcd.etcdctl_ok(&["put", "k", "v2"]);
    etcd.etcdctl_ok(&["compaction", "3"]);
    let cases: &[(&[&str], errors::ApiError)] = &[
        (&["get", "k", "--rev", "1"], errors::COMPACTED),
        (&["get", "k", "--rev", "100000"], errors::FUTURE_REV),
        (&["lease", "revoke", "1234"], errors::LEASE_NOT_FOUND),
        (&["put", "", "v"], errors::EMPTY_KEY),
        (&["user", "get", "nobody"], errors::USER_NOT_FOUND),
        (&["role", "get", "nobody"], errors::ROLE_NOT_FOUND),
        (&["auth", "enable"], errors::ROOT_USER_NOT_EXIST),
        (&["member", "remove", "1234"], errors::MEMBER_NOT_FOUND),
        (&["move-leader", "1234"], errors::BAD_LEADER_TRANSFEREE),
    ];
    for (args, want) in cases {
        let out = etcd.etcdctl(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let (code, desc) = server_error(&stderr)
            .unwrap_or_else(|| panic!("{args:?}: no server error in {stderr}"));
        assert_eq!(desc, want.message, "{args:?}");
        assert_eq!(code, code_name(want.status().code()), "{args:?}");
    }

    // A txn that writes one key twice.
    let out = etcd.etcdctl_stdin(&["txn"], "\n\nput a 1\nput a 2\n\n\n");
    let (_, desc) = server_error(&String::from_utf8_lossy(&out.stderr)).unwrap();
    assert_eq!(desc, errors::DUPLICATE_KEY.message);
}
