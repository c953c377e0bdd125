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

/// Returns freed heap pages to the OS. The server allocates through jemalloc (etcd/src/main.rs),
/// which keeps the unused pages of its arenas for a while; anything allocated through glibc's
/// malloc (the library's tests, C code) sits in glibc's arenas, one per thread that allocated.
/// Called directly once the member is ready: opening the store decodes every stored key-value
/// and frees them again.
pub fn trim() {
    purge_jemalloc();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // Safety: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// jemalloc's mallctl name for "every arena" (MALLCTL_ARENAS_ALL).
const ALL_ARENAS_PURGE: &[u8] = b"arena.4096.purge\0";

fn purge_jemalloc() {
    // Safety: a NUL-terminated mallctl name, and purge neither reads nor writes a value.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            ALL_ARENAS_PURGE.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        tracing::debug!(errno = rc, "jemalloc refused to purge its arenas");
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

    fn assert_trim_gives_back(at_least: u64) {
        let before = rss_bytes();
        trim();
        let after = rss_bytes();
        assert!(
            before.saturating_sub(after) > at_least,
            "rss {before} -> {after}"
        );
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
        assert_trim_gives_back(16 << 20);
        assert!(chunks.iter().flatten().all(|c| c.len() == 64 << 10));
    }

    #[test]
    fn a_trim_returns_jemallocs_free_pages_to_the_os() {
        use std::alloc::{GlobalAlloc, Layout};
        let jemalloc = tikv_jemallocator::Jemalloc;
        let layout = Layout::from_size_align(64 << 10, 8).expect("layout");
        // Safety: each block is allocated and freed once with the same layout and written
        // only within it.
        let blocks: Vec<*mut u8> = (0..1024)
            .map(|_| unsafe {
                let p = jemalloc.alloc(layout);
                assert!(!p.is_null());
                std::ptr::write_bytes(p, 7, layout.size());
                p
            })
            .collect();
        for p in blocks.iter().step_by(2) {
            unsafe { jemalloc.dealloc(*p, layout) };
        }
        assert_trim_gives_back(16 << 20);
        for p in blocks.iter().skip(1).step_by(2) {
            unsafe { jemalloc.dealloc(*p, layout) };
        }
    }
}
