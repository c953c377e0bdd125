//! The one error type of etcdctl and the exit codes it maps to.
//! Exit codes are etcd's (cobrautl): 1 error, 2 bad connection, 3 invalid input, 4 bad feature, 5 interrupted, 128 bad args.

use thiserror::Error;

/// Exit code for a failure with no more specific class.
pub const EXIT_ERROR: i32 = 1;
/// Exit code when no endpoint could be reached at all.
pub const EXIT_BAD_CONNECTION: i32 = 2;
/// Exit code for malformed input read from stdin (txn, watch -i).
pub const EXIT_INVALID_INPUT: i32 = 3;
/// Exit code for an unsupported option value (output format, sort order...).
pub const EXIT_BAD_FEATURE: i32 = 4;
/// Exit code when a stream is cut by the server (watch canceled).
pub const EXIT_INTERRUPTED: i32 = 5;
/// Exit code for wrong arguments on the command line.
pub const EXIT_BAD_ARGS: i32 = 128;

/// Every failure a command can end with; `Display` is the text after `Error: `.
#[derive(Debug, Error)]
pub enum CtlError {
    /// Wrong number or shape of command-line arguments.
    #[error("{0}")]
    BadArgs(String),
    /// Malformed input read from stdin.
    #[error("{0}")]
    InvalidInput(String),
    /// A valid request for something this output format or option does not do.
    #[error("{0}")]
    BadFeature(String),
    /// The cluster could not be reached.
    #[error("{0}")]
    BadConnection(String),
    /// A stream ended by the server.
    #[error("{0}")]
    Interrupted(String),
    /// Any other failure, including errors returned by the server.
    #[error("{0}")]
    Other(String),
    /// A local I/O failure (stdout closed, file not writable).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl CtlError {
    /// The process exit code etcd's etcdctl uses for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            CtlError::BadArgs(_) => EXIT_BAD_ARGS,
            CtlError::InvalidInput(_) => EXIT_INVALID_INPUT,
            CtlError::BadFeature(_) => EXIT_BAD_FEATURE,
            CtlError::BadConnection(_) => EXIT_BAD_CONNECTION,
            CtlError::Interrupted(_) => EXIT_INTERRUPTED,
            CtlError::Other(_) | CtlError::Io(_) => EXIT_ERROR,
        }
    }

    /// Shorthand for the most common kind of failure.
    pub fn other(msg: impl Into<String>) -> Self {
        CtlError::Other(msg.into())
    }

    /// Shorthand for a command-line argument failure.
    pub fn bad_args(msg: impl Into<String>) -> Self {
        CtlError::BadArgs(msg.into())
    }
}

impl From<tonic::Status> for CtlError {
    fn from(s: tonic::Status) -> Self {
        CtlError::Other(status_message(&s))
    }
}

/// The text the Go client shows for a gRPC status: etcd's own error strings are shown as they
/// are (clients map them to typed errors), deadlines as Go's context error, anything else in
/// grpc-go's `rpc error: code = X desc = Y` form.
pub fn status_message(s: &tonic::Status) -> String {
    use tonic::Code;
    let msg = s.message();
    if msg.starts_with("etcdserver: ") || msg.starts_with("mvcc: ") || msg.starts_with("auth: ") {
        return msg.to_string();
    }
    match s.code() {
        Code::DeadlineExceeded => return "context deadline exceeded".to_string(),
        Code::Cancelled => return "context canceled".to_string(),
        _ => {}
    }
    format!(
        "rpc error: code = {} desc = {}",
        go_code_name(s.code()),
        msg
    )
}

/// grpc-go's names for status codes (they differ from tonic's in one spelling).
pub fn go_code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Result alias used by every command.
pub type Result<T> = std::result::Result<T, CtlError>;
