//! Behaviour tests of the whole raft state machine: paper sentences, interactions through an
//! in-memory network, and the deterministic simulator with crashes and partitions.

mod flow_control;
mod interaction;
mod network;
mod paper;
mod robustness;
mod simulator;
mod thesis;
