// File helpers shared by the WAL, snap and backend code: directory fsync, exclusive lock files,
// preallocation, and creating data dirs with etcd's permission rules.
