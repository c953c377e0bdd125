// Progress bars for long offline jobs (restore, defrag, check, backup): shown only when stderr
// is a terminal, so scripts and logs stay quiet.

use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressStyle};

/// Off for callers that must print exactly what another tool prints (etcdctl 3.4's snapshot
/// commands show no bars).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the bars of this process on or off.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether stderr is a terminal (and bars are enabled).
pub fn stderr_is_tty() -> bool {
    // Safety: isatty only inspects the descriptor.
    ENABLED.load(Ordering::Relaxed) && unsafe { libc::isatty(libc::STDERR_FILENO) == 1 }
}

/// A byte-counting bar of `total` bytes labelled `what`, or None off a terminal.
pub fn bytes_bar(total: u64, what: &str) -> Option<ProgressBar> {
    if !stderr_is_tty() {
        return None;
    }
    let b = ProgressBar::new(total);
    b.set_style(
        ProgressStyle::with_template("{msg} {bytes}/{total_bytes} {wide_bar} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_string());
    Some(b)
}

/// A spinner for a job whose length is unknown, or None off a terminal.
pub fn spinner(what: &str) -> Option<ProgressBar> {
    if !stderr_is_tty() {
        return None;
    }
    let b = ProgressBar::new_spinner();
    b.set_message(what.to_string());
    b.enable_steady_tick(std::time::Duration::from_millis(120));
    Some(b)
}

/// Clears a bar when the job is done.
pub fn finish(bar: Option<ProgressBar>) {
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
