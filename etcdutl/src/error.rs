// The one error type of etcdutl's library: every failure says what failed and on which file,
// with etcd's own texts where etcd has one (`data-dir "x" exists`, `expected sha256 ...`).

/// Exit code for a failure (etcd's cobrautl ExitError).
pub const EXIT_ERROR: i32 = 1;
/// Exit code for wrong arguments (etcd's cobrautl ExitBadArgs).
pub const EXIT_BAD_ARGS: i32 = 128;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Wrong or missing arguments, or an input file that cannot be found.
    #[error("{0}")]
    BadArgs(String),
    /// Any other failure; the text is complete (file, cause, what to do).
    #[error("{0}")]
    Failed(String),
}

impl Error {
    pub fn failed(msg: impl Into<String>) -> Error {
        Error::Failed(msg.into())
    }

    pub fn bad_args(msg: impl Into<String>) -> Error {
        Error::BadArgs(msg.into())
    }

    /// The process exit code etcd's tools use for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::BadArgs(_) => EXIT_BAD_ARGS,
            Error::Failed(_) => EXIT_ERROR,
        }
    }
}

impl From<common::backend::Error> for Error {
    fn from(e: common::backend::Error) -> Error {
        Error::Failed(e.to_string())
    }
}

impl From<common::wal::WalError> for Error {
    fn from(e: common::wal::WalError) -> Error {
        Error::Failed(e.to_string())
    }
}

impl From<common::snap::SnapError> for Error {
    fn from(e: common::snap::SnapError) -> Error {
        Error::Failed(e.to_string())
    }
}

impl From<common::fileutil::FileError> for Error {
    fn from(e: common::fileutil::FileError) -> Error {
        Error::Failed(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An I/O error on `path`, worded as Go's os package words it.
pub fn io<'a>(
    op: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| {
        Error::Failed(common::gofmt::go_io_error(
            op,
            &path.display().to_string(),
            &e,
        ))
    }
}
