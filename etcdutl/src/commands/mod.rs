// etcdutl's commands: one module per command (clap arguments and a run function), each a thin
// layer over the library.

pub mod snapshot;
