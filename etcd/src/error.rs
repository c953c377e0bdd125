// The errors of the etcd server, with etcd's exact message strings and the kind of failure each
// is (named as gRPC names them): clients match these strings, so a different word breaks them.
//
// Server, apply, store, lease, auth and membership code returns these; only the API layer
// (api/errors.rs) turns them into gRPC statuses.

/// The kind of failure, as gRPC's status codes name them (the API layer maps them 1:1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

/// One etcd error: its kind and the message clients match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub code: Code,
    pub message: &'static str,
}

impl Error {
    pub const fn new(code: Code, message: &'static str) -> Error {
        Error { code, message }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

macro_rules! etcd_errors {
    ($($name:ident = $code:ident, $msg:literal;)*) => {
        $(pub const $name: Error = Error::new(Code::$code, $msg);)*
        /// Every error, for lookups by message (e.g. when a forwarded error comes back).
        pub const ALL: &[Error] = &[$($name),*];
    };
}

etcd_errors! {
    EMPTY_KEY = InvalidArgument, "etcdserver: key is not provided";
    KEY_NOT_FOUND = InvalidArgument, "etcdserver: key not found";
    VALUE_PROVIDED = InvalidArgument, "etcdserver: value is provided";
    LEASE_PROVIDED = InvalidArgument, "etcdserver: lease is provided";
    TOO_MANY_OPS = InvalidArgument, "etcdserver: too many operations in txn request";
    DUPLICATE_KEY = InvalidArgument, "etcdserver: duplicate key given in txn request";
    INVALID_SORT_OPTION = InvalidArgument, "etcdserver: invalid sort option";
    // etcd 3.7 answers these Unimplemented (a client falls back to Range); its exact text
    // was not at hand.
    RANGE_STREAM_SORT = Unimplemented, "etcdserver: range stream does not support sort order other than ascending by key";
    RANGE_STREAM_FILTER = Unimplemented, "etcdserver: range stream does not support min/max mod or create revision filters";
    COMPACTED = OutOfRange, "etcdserver: mvcc: required revision has been compacted";
    FUTURE_REV = OutOfRange, "etcdserver: mvcc: required revision is a future revision";
    NO_SPACE = ResourceExhausted, "etcdserver: mvcc: database space exceeded";
    LEASE_NOT_FOUND = NotFound, "etcdserver: requested lease not found";
    LEASE_EXIST = FailedPrecondition, "etcdserver: lease already exists";
    LEASE_TTL_TOO_LARGE = OutOfRange, "etcdserver: too large lease TTL";
    WATCH_CANCELED = Cancelled, "etcdserver: watch canceled";
    MEMBER_EXIST = FailedPrecondition, "etcdserver: member ID already exist";
    PEER_URL_EXIST = FailedPrecondition, "etcdserver: Peer URLs already exists";
    MEMBER_NOT_ENOUGH_STARTED = FailedPrecondition, "etcdserver: re-configuration failed due to not enough started members";
    MEMBER_BAD_URLS = InvalidArgument, "etcdserver: given member URLs are invalid";
    MEMBER_NOT_FOUND = NotFound, "etcdserver: member not found";
    MEMBER_NOT_LEARNER = FailedPrecondition, "etcdserver: can only promote a learner member";
    LEARNER_NOT_READY = FailedPrecondition, "etcdserver: can only promote a learner member which is in sync with leader";
    TOO_MANY_LEARNERS = FailedPrecondition, "etcdserver: too many learner members in cluster";
    REQUEST_TOO_LARGE = InvalidArgument, "etcdserver: request is too large";
    TOO_MANY_REQUESTS = ResourceExhausted, "etcdserver: too many requests";
    ROOT_USER_NOT_EXIST = FailedPrecondition, "etcdserver: root user does not exist";
    ROOT_ROLE_NOT_EXIST = FailedPrecondition, "etcdserver: root user does not have root role";
    USER_ALREADY_EXIST = FailedPrecondition, "etcdserver: user name already exists";
    USER_EMPTY = InvalidArgument, "etcdserver: user name is empty";
    USER_NOT_FOUND = FailedPrecondition, "etcdserver: user name not found";
    ROLE_ALREADY_EXIST = FailedPrecondition, "etcdserver: role name already exists";
    ROLE_NOT_FOUND = FailedPrecondition, "etcdserver: role name not found";
    ROLE_EMPTY = InvalidArgument, "etcdserver: role name is empty";
    AUTH_FAILED = InvalidArgument, "etcdserver: authentication failed, invalid user ID or password";
    PERMISSION_NOT_GIVEN = InvalidArgument, "etcdserver: permission not given";
    PERMISSION_DENIED = PermissionDenied, "etcdserver: permission denied";
    ROLE_NOT_GRANTED = FailedPrecondition, "etcdserver: role is not granted to the user";
    PERMISSION_NOT_GRANTED = FailedPrecondition, "etcdserver: permission is not granted to the role";
    AUTH_NOT_ENABLED = FailedPrecondition, "etcdserver: authentication is not enabled";
    INVALID_AUTH_TOKEN = Unauthenticated, "etcdserver: invalid auth token";
    INVALID_AUTH_MGMT = InvalidArgument, "etcdserver: invalid auth management";
    AUTH_OLD_REVISION = InvalidArgument, "etcdserver: revision of auth store is old";
    NO_LEADER = Unavailable, "etcdserver: no leader";
    NOT_LEADER = FailedPrecondition, "etcdserver: not leader";
    LEADER_CHANGED = Unavailable, "etcdserver: leader changed";
    NOT_CAPABLE = Unavailable, "etcdserver: not capable";
    STOPPED = Unavailable, "etcdserver: server stopped";
    TIMEOUT = Unavailable, "etcdserver: request timed out";
    TIMEOUT_DUE_TO_LEADER_FAIL = Unavailable, "etcdserver: request timed out, possibly due to previous leader failure";
    TIMEOUT_DUE_TO_CONNECTION_LOST = Unavailable, "etcdserver: request timed out, possibly due to connection lost";
    TIMEOUT_WAIT_APPLIED_INDEX = Unavailable, "etcdserver: request timed out, waiting for the applied index took too long";
    UNHEALTHY = Unavailable, "etcdserver: unhealthy cluster";
    CORRUPT = DataLoss, "etcdserver: corrupt cluster";
    NOT_SUPPORTED_FOR_LEARNER = Unavailable, "etcdserver: rpc not supported for learner";
    BAD_LEADER_TRANSFEREE = FailedPrecondition, "etcdserver: bad leader transferee";
    TIMEOUT_LEADER_TRANSFER = Unavailable, "etcdserver: request timed out, leader transfer took too long";
    // etcd 3.5's Downgrade (api/v3rpc/rpctypes/error.go).
    CLUSTER_VERSION_UNAVAILABLE = Unavailable, "etcdserver: cluster version not found during downgrade";
    WRONG_DOWNGRADE_VERSION_FORMAT = InvalidArgument, "etcdserver: wrong downgrade target version format";
    INVALID_DOWNGRADE_TARGET_VERSION = InvalidArgument, "etcdserver: invalid downgrade target version";
    DOWNGRADE_IN_PROCESS = FailedPrecondition, "etcdserver: cluster has a downgrade job in progress";
    NO_INFLIGHT_DOWNGRADE = FailedPrecondition, "etcdserver: no inflight downgrade job";
    // An action etcd's Downgrade does not know: its plain error, which no gRPC status maps.
    UNKNOWN_METHOD = Unknown, "etcdserver: unknown method";
    // Ours, not etcd's: a downgrade entry would stop a member that cannot apply it (etcd 3.4
    // panics on a request it does not know), so it is proposed only when every member has said
    // it runs 3.5 or later. Not prefixed "etcdserver:" so that no client takes it for etcd's.
    DOWNGRADE_MEMBER_CANNOT_APPLY = FailedPrecondition, "downgrade: every member must answer and run etcd 3.5 or later to apply this change (etcd 3.4 cannot)";
}

/// The error whose message is `msg`, if any.
pub fn by_message(msg: &str) -> Option<Error> {
    ALL.iter().copied().find(|e| e.message == msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_identify_their_error() {
        assert_eq!(
            by_message("etcdserver: requested lease not found"),
            Some(LEASE_NOT_FOUND)
        );
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.message, b.message);
            }
        }
    }
}
