// Go-style durations as etcd's flags take them ("100ms", "1h30m", "5s", "0"); the parser is
// shared with etcdctl (common::gofmt).

pub use common::gofmt::{format_go_duration, parse_go_duration};
