// The `etcdutl` binary.
// Its commands are built by their own issue; until then it says so.

fn main() {
    eprintln!("etcdutl: not built yet");
    std::process::exit(1);
}
