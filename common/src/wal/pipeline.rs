// Pre-creates the next WAL segment (`0.tmp`/`1.tmp`, preallocated to the segment size) on a
// background thread, so a segment cut on the raft loop never waits for a 64 MB allocation.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use crate::fileutil::{self, LockedFile};

pub struct Pipeline {
    rx: Option<Receiver<fileutil::Result<LockedFile>>>,
    handle: Option<JoinHandle<()>>,
}

impl Pipeline {
    pub fn start(dir: &Path, size: u64) -> Pipeline {
        // A rendezvous channel: the thread keeps exactly one file ready and waits for it to be
        // taken before making the next.
        let (tx, rx) = sync_channel(0);
        let dir = dir.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("wal-pipeline".into())
            .spawn(move || run(dir, size, tx))
            .ok();
        Pipeline {
            rx: Some(rx),
            handle,
        }
    }

    /// The next preallocated, locked segment file, waiting for it if it is still being made.
    pub fn take(&mut self) -> fileutil::Result<LockedFile> {
        let closed = || fileutil::FileError::Io {
            op: "allocate next WAL segment",
            path: PathBuf::from("<pipeline>"),
            source: std::io::Error::other("the segment pre-allocation thread stopped"),
        };
        match &self.rx {
            Some(rx) => rx.recv().map_err(|_| closed())?,
            None => Err(closed()),
        }
    }
}

fn run(dir: PathBuf, size: u64, tx: SyncSender<fileutil::Result<LockedFile>>) {
    let mut count = 0u64;
    loop {
        let path = dir.join(format!("{}.tmp", count % 2));
        count += 1;
        let made = alloc(&path, size);
        let failed = made.is_err();
        if let Err(std::sync::mpsc::SendError(unsent)) = tx.send(made) {
            // The WAL closed: leave no half-used temp file behind.
            if let Ok(f) = unsent {
                let _ = std::fs::remove_file(f.path());
            }
            return;
        }
        if failed {
            return;
        }
    }
}

fn alloc(path: &Path, size: u64) -> fileutil::Result<LockedFile> {
    let f = fileutil::try_lock_file(path, true, true)?;
    // A temp file left by a crash may hold records of an unfinished cut: start from zero.
    f.file()
        .set_len(0)
        .map_err(fileutil::io_err("truncate", path))?;
    fileutil::preallocate(f.file(), size, true, path)?;
    Ok(f)
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Closing the channel wakes the thread, which removes its file and exits.
        self.rx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
