// The key index's heap per key (issue 19): a counting allocator around the index of 1M puts
// on random keys of a 1M key space, before and after a compaction to the last revision.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use etcd::mvcc::{Index, Revision};

/// The system allocator, counting the bytes currently allocated (requested sizes, so
/// malloc's own per-chunk overhead comes on top).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        // Safety: forwarded unchanged to the system allocator.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // Safety: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let puts = env("BENCH_SCALE_PUTS", 1_000_000);
    let space = env("BENCH_SCALE_KEYS", 1_000_000);
    let before = LIVE.load(Ordering::Relaxed);
    let mut index = Index::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for rev in 2..2 + puts as i64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // The scale bench's key shape: a fixed prefix and a decimal number.
        let key = format!("key-{:010}", seed % space);
        index.put(key.as_bytes(), Revision::new(rev, 0));
    }
    let keys = index.len().max(1);
    let loaded = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "{puts} puts on {space} keys: {keys} keys, index heap {:.1} MiB, {} bytes/key",
        loaded as f64 / (1 << 20) as f64,
        loaded / keys
    );
    index.compact(1 + puts as i64);
    let compacted = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "after compacting to the last revision: {:.1} MiB, {} bytes/key",
        compacted as f64 / (1 << 20) as f64,
        compacted / keys
    );
}
