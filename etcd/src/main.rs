// The `etcd` server binary.
// The server is built up by the issues that follow the foundation; until then it says so.

fn main() {
    eprintln!("etcd: the server is not built yet (see issue 5)");
    std::process::exit(1);
}
