// The `etcdctl` binary.
// Its commands are built by their own issue; until then it says so.

fn main() {
    eprintln!("etcdctl: not built yet");
    std::process::exit(1);
}
