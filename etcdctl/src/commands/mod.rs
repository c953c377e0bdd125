//! The command tree: one module per command or command group, and the context each run gets
//! (global flags, the chosen printer, and a way to reach the cluster).

pub mod alarm;
pub mod auth;
pub mod check;
pub mod compaction;
pub mod completion;
pub mod datascale;
pub mod defrag;
pub mod del;
pub mod downgrade;
pub mod elect;
pub mod endpoint;
pub mod get;
pub mod lease;
pub mod lock;
pub mod make_mirror;
pub mod member;
pub mod move_leader;
pub mod put;
pub mod role;
pub mod session;
pub mod snapshot;
pub mod txn;
pub mod user;
pub mod version;
pub mod watch;

use std::io::Write;

use crate::client::Client;
use crate::error::{CtlError, Result};
use crate::global::GlobalArgs;
use crate::printer::{Printer, new_printer};
use crate::util::parse_go_i64;

/// What every command's run function receives.
pub struct Ctx {
    pub g: GlobalArgs,
    pub printer: Box<dyn Printer>,
}

impl Ctx {
    pub fn new(g: GlobalArgs) -> Result<Ctx> {
        let printer = new_printer(&g.write_out, g.hex)?;
        Ok(Ctx { g, printer })
    }

    /// Connects to the cluster as the global flags say.
    pub async fn client(&self) -> Result<Client> {
        Client::connect(&self.g).await
    }

    /// Runs `f` with stdout, flushing afterwards so streamed output appears at once.
    pub fn print(&self, f: impl FnOnce(&dyn Printer, &mut dyn Write) -> Result<()>) -> Result<()> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        f(self.printer.as_ref(), &mut out)?;
        out.flush()?;
        Ok(())
    }
}

/// A lease ID given in hex on the command line; `what` names it in etcd's error text.
pub fn parse_lease_id(s: &str, what: &str) -> Result<i64> {
    parse_go_i64(s, 16)
        .map_err(|e| CtlError::bad_args(format!("{what} ({e}), expecting ID in Hex")))
}

/// etcd's checks of `<key> [range_end]` with --prefix/--from-key (get and del); `cmd` names
/// the command in the message.
pub fn check_key_args<T>(cmd: &str, args: &[T], prefix: bool, from_key: bool) -> Result<()> {
    if args.is_empty() {
        return Err(CtlError::bad_args(format!(
            "{cmd} command needs one argument as key and an optional argument as range_end"
        )));
    }
    if prefix && from_key {
        return Err(CtlError::bad_args(
            "`--prefix` and `--from-key` cannot be set at the same time, choose one",
        ));
    }
    if args.len() > 1 && (prefix || from_key) {
        return Err(CtlError::bad_args(
            "too many arguments, only accept one argument when `--prefix` or `--from-key` is set",
        ));
    }
    Ok(())
}

/// A key range from a key and the --prefix/--from-key flags, as etcd's client builds it.
pub fn key_range(
    key: &[u8],
    end: Option<&[u8]>,
    prefix: bool,
    from_key: bool,
) -> (Vec<u8>, Vec<u8>) {
    if prefix {
        if key.is_empty() {
            return (vec![0], vec![0]);
        }
        return (key.to_vec(), crate::util::prefix_end(key));
    }
    if from_key {
        let k = if key.is_empty() {
            vec![0]
        } else {
            key.to_vec()
        };
        return (k, vec![0]);
    }
    (key.to_vec(), end.map(|e| e.to_vec()).unwrap_or_default())
}

/// A decimal integer flag, failing with Go's strconv text.
pub fn go_i64(s: &str) -> std::result::Result<i64, String> {
    parse_go_i64(s, 10)
}
