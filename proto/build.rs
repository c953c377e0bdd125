// Generates the Rust types and tonic services from proto/*.proto with protox (pure Rust), so no
// protoc binary is needed on the build machine.
const PROTOS: &[&str] = &[
    "mvccpb/kv.proto",
    "authpb/auth.proto",
    "etcdserverpb/rpc.proto",
    "etcdserverpb/etcdserver.proto",
    "etcdserverpb/raft_internal.proto",
    "membershippb/membership.proto",
    "leasepb/lease.proto",
    "raftpb/raft.proto",
    "walpb/record.proto",
    "snappb/snap.proto",
    "v3lockpb/v3lock.proto",
    "v3electionpb/v3election.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<String> = PROTOS.iter().map(|p| format!("proto/{p}")).collect();
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(&files, ["proto"])?;
    // The descriptors themselves, for the JSON gateway's proto3 JSON mapping at run time.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("file_descriptor_set.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
