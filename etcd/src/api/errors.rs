// The v3 API's errors as gRPC statuses: etcd's errors (crate::error) with their gRPC code and
// exact message, and the conversions the services use.

pub use crate::error::*;
use tonic::Status;

/// An etcd error as the API returns it.
pub type ApiError = crate::error::Error;

fn grpc_code(c: Code) -> tonic::Code {
    match c {
        Code::Ok => tonic::Code::Ok,
        Code::Cancelled => tonic::Code::Cancelled,
        Code::Unknown => tonic::Code::Unknown,
        Code::InvalidArgument => tonic::Code::InvalidArgument,
        Code::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        Code::NotFound => tonic::Code::NotFound,
        Code::AlreadyExists => tonic::Code::AlreadyExists,
        Code::PermissionDenied => tonic::Code::PermissionDenied,
        Code::ResourceExhausted => tonic::Code::ResourceExhausted,
        Code::FailedPrecondition => tonic::Code::FailedPrecondition,
        Code::Aborted => tonic::Code::Aborted,
        Code::OutOfRange => tonic::Code::OutOfRange,
        Code::Unimplemented => tonic::Code::Unimplemented,
        Code::Internal => tonic::Code::Internal,
        Code::Unavailable => tonic::Code::Unavailable,
        Code::DataLoss => tonic::Code::DataLoss,
        Code::Unauthenticated => tonic::Code::Unauthenticated,
    }
}

/// The gRPC status of an etcd error.
pub trait ToStatus {
    fn status(self) -> Status;
}

impl ToStatus for Error {
    fn status(self) -> Status {
        Status::new(grpc_code(self.code), self.message)
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        e.status()
    }
}

impl From<crate::auth::PasswordError> for Status {
    fn from(e: crate::auth::PasswordError) -> Status {
        match e {
            crate::auth::PasswordError::Api(a) => a.status(),
            crate::auth::PasswordError::NoPasswordUser => Status::unknown(
                "auth: authentication failed, password was given for no password user",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_etcds_code_and_text() {
        let s = COMPACTED.status();
        assert_eq!(s.code(), tonic::Code::OutOfRange);
        assert_eq!(
            s.message(),
            "etcdserver: mvcc: required revision has been compacted"
        );
    }
}
