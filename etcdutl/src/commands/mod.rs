// etcdutl's commands: one module per command group (clap arguments and run functions), each a
// thin layer over the library.

pub mod datadir;
pub mod snapshot;
