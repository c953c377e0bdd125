//! Throughput of the pure raft state machine: proposals per second through a 3-node cluster
//! held in memory (no disk, no network), and heap allocations per proposal.
//!
//! Run with `cargo bench -p etcd --bench raft`. Each proposal carries a 128-byte payload;
//! "batch" is how many proposals the leader takes before the cluster handles its Readies, so
//! it is the number of entries per leader Ready.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use etcd::raft::{Config, MemStorage, Peer, RawNode, StateRole};
use proto::raftpb::Message;

/// Counts every allocation (and reallocation) made by the process.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// Safety: delegates to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // Safety: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Safety: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // Safety: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

struct Cluster {
    nodes: Vec<RawNode<MemStorage>>,
    /// Entries applied by node 1 (the leader).
    applied: u64,
}

impl Cluster {
    fn new() -> Self {
        let peers: Vec<Peer> = (1..=3).map(|id| Peer { id, context: None }).collect();
        let nodes = (1..=3)
            .map(|id| {
                let mut n = RawNode::new(&Config::new(id), MemStorage::new()).unwrap();
                n.bootstrap(&peers).unwrap();
                n
            })
            .collect();
        let mut c = Cluster { nodes, applied: 0 };
        c.pump();
        c.nodes[0].campaign().unwrap();
        c.pump();
        assert_eq!(c.nodes[0].role(), StateRole::Leader);
        c
    }

    /// Handles Readies and delivers messages until the cluster is quiet, as the server's raft
    /// loop would (persist to the in-memory storage, send, apply, advance).
    fn pump(&mut self) {
        let mut inbox: Vec<Message> = Vec::new();
        loop {
            for m in inbox.drain(..) {
                let to = m.to as usize - 1;
                let _ = self.nodes[to].step(m);
            }
            let mut any = false;
            for (i, n) in self.nodes.iter_mut().enumerate() {
                if !n.has_ready() {
                    continue;
                }
                any = true;
                let mut rd = n.ready();
                if let Some(hs) = rd.hard_state {
                    n.storage_mut().set_hard_state(hs);
                }
                n.storage_mut().append(&rd.entries);
                inbox.append(&mut rd.messages);
                if i == 0 {
                    self.applied += rd.committed_entries.len() as u64;
                }
                n.advance(rd);
            }
            if !any && inbox.is_empty() {
                return;
            }
        }
    }

    /// Keeps memory flat: snapshot and compact everything applied.
    fn compact(&mut self) {
        for n in &mut self.nodes {
            let applied = n.status().applied;
            let s = n.storage_mut();
            if s.create_snapshot(applied, None, Vec::new()).is_ok() {
                let _ = s.compact(applied);
            }
        }
    }
}

fn run(batch: usize, total: usize) -> (f64, f64) {
    let mut c = Cluster::new();
    let payload = vec![7u8; 128];
    let start_applied = c.applied;
    let allocs0 = ALLOCATIONS.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let mut proposed = 0;
    while proposed < total {
        for _ in 0..batch {
            c.nodes[0].propose(payload.clone()).unwrap();
        }
        proposed += batch;
        c.pump();
        if proposed % 8192 < batch {
            c.compact();
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let allocs = ALLOCATIONS.load(Ordering::Relaxed) - allocs0;
    assert_eq!(c.applied - start_applied, proposed as u64);
    (proposed as f64 / elapsed, allocs as f64 / proposed as f64)
}

fn main() {
    // `cargo test --benches` runs this binary with no time to spare: do a tiny run then.
    let quick = std::env::args().any(|a| a == "--test");
    println!("raft state machine, 3 nodes in memory, 128-byte proposals");
    println!(
        "{:>22} {:>16} {:>22}",
        "proposals per Ready", "proposals/s", "allocations/proposal"
    );
    for batch in [1usize, 16, 256] {
        let total = if quick {
            512
        } else {
            262_144.max(batch * 1024)
        };
        let (rate, allocs) = run(batch, total);
        println!("{batch:>22} {rate:>16.0} {allocs:>22.1}");
    }
}
