// The proto descriptors of every etcd message and service, loaded once: the JSON gateway maps
// messages by them and the gRPC metrics learn each method's streaming kind from them.

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MethodDescriptor};

static POOL: LazyLock<Result<DescriptorPool, String>> = LazyLock::new(|| {
    DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET)
        .map_err(|e| format!("the built-in proto descriptors do not decode: {e}"))
});

/// The pool, or why it could not be built (a build defect, reported instead of a panic).
pub fn pool() -> Result<&'static DescriptorPool, String> {
    POOL.as_ref().map_err(Clone::clone)
}

/// The method `/<service>/<method>` (as in a gRPC path), if it exists.
pub fn method(service: &str, method: &str) -> Option<MethodDescriptor> {
    pool()
        .ok()?
        .get_service_by_name(service)?
        .methods()
        .find(|m| m.name() == method)
}

/// go-grpc-prometheus's grpc_type label for a method.
pub fn grpc_type(m: &MethodDescriptor) -> &'static str {
    match (m.is_client_streaming(), m.is_server_streaming()) {
        (false, false) => "unary",
        (true, false) => "client_stream",
        (false, true) => "server_stream",
        (true, true) => "bidi_stream",
    }
}
