// Gives freed heap memory back to the OS after work that frees much of it (compaction,
// defragmentation, snapshots) and once a minute, as Go's scavenger does for etcd.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set by the work that frees memory; the trimmer thread picks it up within a few seconds.
static WANTED: AtomicBool = AtomicBool::new(false);

/// How often the trimmer looks at the flag, and how many looks between unasked trims.
const TICK: Duration = Duration::from_secs(5);
const TICKS_PER_TRIM: u32 = 12;

/// Asks for a trim soon (cheap: a flag; the trim runs off the caller's thread).
pub fn release_soon() {
    WANTED.store(true, Ordering::Relaxed);
}

/// Starts the trimmer thread; call once.
pub fn start() {
    let spawned = std::thread::Builder::new()
        .name("heap-trim".into())
        .spawn(|| {
            let mut ticks = 0u32;
            loop {
                std::thread::sleep(TICK);
                ticks += 1;
                if WANTED.swap(false, Ordering::Relaxed) || ticks >= TICKS_PER_TRIM {
                    ticks = 0;
                    trim();
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the heap trimmer; freed memory stays with the process");
    }
}

/// glibc keeps freed memory in its arenas (one per thread that allocated); malloc_trim
/// returns the free pages of every arena to the OS. Called directly once the member is
/// ready: opening the store decodes every stored key-value and frees them again.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // Safety: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn rss_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        // Safety: sysconf only reads a configuration value.
        pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
    }

    #[test]
    fn a_trim_returns_freed_heap_pages_to_the_os() {
        // 64 MiB in chunks below the mmap threshold; every other one is freed, so each free
        // chunk sits between live ones and free() alone can never give its pages back.
        let mut chunks: Vec<Option<Vec<u8>>> =
            (0..1024).map(|i| Some(vec![i as u8; 64 << 10])).collect();
        for c in chunks.iter_mut().step_by(2) {
            *c = None;
        }
        let before = rss_bytes();
        trim();
        let after = rss_bytes();
        assert!(
            before.saturating_sub(after) > 16 << 20,
            "rss {before} -> {after}"
        );
        assert!(chunks.iter().flatten().all(|c| c.len() == 64 << 10));
    }
}
