//! The progress line of `check perf` and `check datascale`, drawn on stdout as etcd's etcdctl
//! draws it (" 12 / 60   20.00% 00m48s", redrawn with '\r' five times a second, always).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A counter towards `total`, redrawn by a background thread until `finish`.
pub struct Progress {
    current: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    drawer: Option<std::thread::JoinHandle<()>>,
    total: u64,
    started: Instant,
}

impl Progress {
    pub fn start(total: u64) -> Progress {
        let current = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let (c, d) = (current.clone(), done.clone());
        let drawer = std::thread::spawn(move || {
            while !d.load(Ordering::Relaxed) {
                draw(&line(
                    c.load(Ordering::Relaxed),
                    total,
                    started.elapsed(),
                    false,
                ));
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Progress {
            current,
            done,
            drawer: Some(drawer),
            total,
            started,
        }
    }

    pub fn inc(&self) {
        self.current.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set(&self, v: u64) {
        self.current.store(v, Ordering::Relaxed);
    }

    /// Draws the last state with the time taken and ends the line.
    pub fn finish(mut self) {
        self.stop();
        let text = line(
            self.current.load(Ordering::Relaxed),
            self.total,
            self.started.elapsed(),
            true,
        );
        draw(&format!("{text}\n"));
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.drawer.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

fn draw(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "\r{text}");
    let _ = out.flush();
}

/// One state: counters, percentage, then the time left (or, at the end, the time taken).
fn line(current: u64, total: u64, elapsed: Duration, finished: bool) -> String {
    let pct = if total == 0 {
        100.0
    } else {
        current as f64 * 100.0 / total as f64
    };
    let mut s = format!(" {current} / {total}  {pct:6.2}%");
    if finished {
        s.push(' ');
        s.push_str(&go_seconds(elapsed));
    } else if current > 0 && current < total {
        let left = elapsed.as_secs_f64() / current as f64 * (total - current) as f64;
        let left = left.round() as u64;
        if left > 0 {
            s.push_str(&format!(" {:02}m{:02}s", left / 60, left % 60));
        }
    }
    s
}

/// A duration rounded to the second, printed as Go prints a time.Duration ("1m0s", "3s").
fn go_seconds(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, m, sec) => format!("{h}h{m}m{sec}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_etcds_bar_draws_them() {
        assert_eq!(line(0, 60, Duration::ZERO, false), " 0 / 60    0.00%");
        assert_eq!(
            line(12, 60, Duration::from_secs(12), false),
            " 12 / 60   20.00% 00m48s"
        );
        assert_eq!(
            line(10000, 10000, Duration::from_millis(1400), true),
            " 10000 / 10000  100.00% 1s"
        );
        assert_eq!(
            line(60, 60, Duration::from_secs(60), true),
            " 60 / 60  100.00% 1m0s"
        );
    }
}
