// What woke a watch stream's loop. The loop waits on three sources (its mailbox, the client's
// side, the progress ticker); each source gets a waker of its own that marks it before waking
// the loop's task, so a wake-up polls only what fired.
//
// A busy stream wakes once per revision for its mailbox; polling the client's side each time
// takes the connection's lock and re-registers wakers there and in the timer for nothing.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

/// The stream's mailbox in the watch hub: its waker is the hub's (`WatchHub::open_stream`),
/// and the mail itself says what came, so the source needs no polling.
pub const MAILBOX: u8 = 1;
/// The client's side of the stream.
pub const INBOUND: u8 = 2;
/// The progress ticker.
pub const TICK: u8 = 4;

/// The sources that fired, and the task to wake when one does.
struct Fired {
    bits: AtomicU8,
    task: Mutex<Option<Waker>>,
}

struct Source {
    fired: Arc<Fired>,
    bit: u8,
}

impl Wake for Source {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    /// Wakes the task only when the source was not marked already: a marked source has woken
    /// it and not been looked at since.
    fn wake_by_ref(self: &Arc<Self>) {
        if self.fired.bits.fetch_or(self.bit, Ordering::AcqRel) & self.bit != 0 {
            return;
        }
        if let Some(w) = self
            .fired
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            w.wake_by_ref();
        }
    }
}

/// One stream's wakers, one per source, in the order of the bits.
pub struct Wakes {
    fired: Arc<Fired>,
    sources: [Waker; 3],
}

impl Wakes {
    /// INBOUND and TICK start marked: the first wait polls each once, which registers it.
    pub fn new() -> Wakes {
        let fired = Arc::new(Fired {
            bits: AtomicU8::new(INBOUND | TICK),
            task: Mutex::new(None),
        });
        let source = |bit| {
            Waker::from(Arc::new(Source {
                fired: fired.clone(),
                bit,
            }))
        };
        Wakes {
            sources: [source(MAILBOX), source(INBOUND), source(TICK)],
            fired,
        }
    }

    /// Makes `cx`'s task the one a source wakes. Call before looking at any source: a source
    /// that fires after this wakes the task.
    pub fn wake_into(&self, cx: &Context<'_>) {
        let mut task = self.fired.task.lock().unwrap_or_else(|e| e.into_inner());
        if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *task = Some(cx.waker().clone());
        }
    }

    /// Whether `bit` fired since it was last taken (it is cleared: look at the source now).
    pub fn take(&self, bit: u8) -> bool {
        self.fired.bits.fetch_and(!bit, Ordering::AcqRel) & bit != 0
    }

    /// Looks at `bit`'s source at the next wait too (it was ready: it may be ready again).
    pub fn again(&self, bit: u8) {
        self.fired.bits.fetch_or(bit, Ordering::AcqRel);
    }

    /// `bit`'s waker.
    pub fn waker(&self, bit: u8) -> &Waker {
        &self.sources[bit.trailing_zeros() as usize]
    }

    /// The context to poll `bit`'s source with.
    pub fn context(&self, bit: u8) -> Context<'_> {
        Context::from_waker(self.waker(bit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_source_marks_itself_and_wakes_the_task() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let w = Wakes::new();
        // Both start marked, so the first wait polls both.
        assert!(w.take(INBOUND) && w.take(TICK));
        assert!(!w.take(INBOUND) && !w.take(TICK));
        w.wake_into(&Context::from_waker(&task));
        w.context(TICK).waker().wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(!w.take(INBOUND), "the client's side did not fire");
        assert!(w.take(TICK));
        w.again(INBOUND);
        assert!(w.take(INBOUND));
    }
}
