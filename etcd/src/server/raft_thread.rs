// The raft thread: one thread that runs the raft loop and, while the loop waits for work, the
// peer transport's tasks (streams to and from the other members, the peer listener).
//
// A raft message then goes from the socket to the loop and from the loop to the socket without
// waking another thread: on a busy cluster half of a separate transport thread's CPU went to
// being put to sleep and woken for each message.

use std::sync::{Arc, Mutex};

use tokio::runtime::{Handle, Runtime};
use tokio::sync::oneshot;

/// What the thread runs once the member has booted: the raft loop, given the runtime to drive
/// the peer tasks with while it waits.
pub type Job = Box<dyn FnOnce(Arc<Runtime>) + Send>;

pub struct RaftThread {
    handle: Handle,
    job: Mutex<Option<oneshot::Sender<Job>>>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl RaftThread {
    /// Starts the thread; until `run` hands it the raft loop it drives the peer tasks only (the
    /// peer listeners bind there, and the transport starts dialing its peers).
    pub fn start() -> std::io::Result<RaftThread> {
        let rt = Arc::new(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
        );
        let handle = rt.handle().clone();
        let (job_tx, job_rx) = oneshot::channel::<Job>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("raft-loop".into())
            .spawn(move || {
                let mut stop_rx = stop_rx;
                let job = rt.block_on(async {
                    tokio::select! {
                        job = job_rx => job.ok(),
                        _ = &mut stop_rx => None,
                    }
                });
                if let Some(job) = job {
                    job(rt.clone());
                    // The loop ended (the member stops): the peer tasks still run until the
                    // process lets go of them.
                    rt.block_on(async {
                        let _ = stop_rx.await;
                    });
                }
                if let Ok(rt) = Arc::try_unwrap(rt) {
                    rt.shutdown_background();
                }
            })?;
        Ok(RaftThread {
            handle,
            job: Mutex::new(Some(job_tx)),
            stop: Mutex::new(Some(stop_tx)),
        })
    }

    /// Where the peer transport spawns its tasks.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Hands the thread its raft loop (once); false if the thread is gone or already has one.
    pub fn run(&self, job: Job) -> bool {
        let tx = self.job.lock().unwrap_or_else(|e| e.into_inner()).take();
        tx.is_some_and(|tx| tx.send(job).is_ok())
    }

    /// Lets go of the peer tasks once the raft loop has ended (connections that outlived the
    /// listeners' deadline are not waited for, nor is the thread: the member has stopped).
    pub fn shutdown(&self) {
        if let Some(tx) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(());
        }
    }
}
