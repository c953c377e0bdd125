// Applying requests to the state machine: the KV requests here; leases, auth and membership
// join as they are built. Every member applies the same entries the same way.

pub mod kv;
