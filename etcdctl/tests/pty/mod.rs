//! A program on a pseudo-terminal, as a person runs it: its stdin, stdout and stderr are one
//! terminal (so prompts, echo-less password reads and interleaved output are what a screen shows).
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process whose controlling terminal is the slave side of a pty we hold the master of.
pub struct Term {
    master: File,
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Opens a pty pair of 80x24 cells: (master, slave).
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut master = -1;
    let mut slave = -1;
    let ws = libc::winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // Safety: openpty writes two descriptors into the out-parameters; the name and termios
    // pointers may be null, the winsize pointer is valid for the call.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Safety: both descriptors were just opened by openpty and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) })
}

impl Term {
    /// Starts `prog` with `args` in a new session whose controlling terminal is the pty.
    pub fn spawn<S: AsRef<OsStr>>(prog: &str, args: &[S], env: &[(&str, &str)]) -> Term {
        let (master, slave) = open_pty().expect("openpty");
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .envs(env.iter().copied())
            .env("TERM", "dumb")
            .stdin(Stdio::from(slave.try_clone().expect("dup pty")))
            .stdout(Stdio::from(slave.try_clone().expect("dup pty")))
            .stderr(Stdio::from(slave));
        // Safety: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {prog}: {e}"));
        // The child holds the slave now; our copies are closed (moved into Stdio and dropped
        // with `cmd`), so reading the master ends with EIO when the child is gone.
        drop(cmd);
        let master = File::from(master);
        let mut reading = master.try_clone().expect("dup master");
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reading.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&buf[..n]);
            }
        });
        Term {
            master,
            child,
            out,
            reader: Some(reader),
        }
    }

    /// What the terminal received so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Waits until the output contains `s`; false after `timeout`.
    pub fn wait_for(&self, s: &str, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.text().contains(s) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.text().contains(s)
    }

    /// Types `s` (a newline is Enter, \x03 is Ctrl-C, \x04 Ctrl-D).
    pub fn type_text(&mut self, s: &str) {
        self.master.write_all(s.as_bytes()).expect("write to pty");
        self.master.flush().expect("flush pty");
    }

    /// Waits for the program to end; Ctrl-C after `timeout`, then a kill if it still runs.
    /// Returns its exit status and everything it printed.
    pub fn finish(mut self, timeout: Duration) -> (ExitStatus, String) {
        let status = match self.wait_exit(timeout) {
            Some(s) => s,
            None => {
                self.type_text("\x03");
                match self.wait_exit(Duration::from_secs(3)) {
                    Some(s) => s,
                    None => {
                        let _ = self.child.kill();
                        self.child.wait().expect("wait for killed child")
                    }
                }
            }
        };
        // Children of the program (watch -- cmd) may keep the pty open: give the reader a
        // moment, then take what arrived.
        let end = Instant::now() + Duration::from_secs(2);
        while self.reader.as_ref().is_some_and(|r| !r.is_finished()) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.reader.as_ref().is_some_and(|r| r.is_finished())
            && let Some(r) = self.reader.take()
        {
            let _ = r.join();
        }
        (status, self.text())
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The raw descriptor of the master side (for tests that resize or poll).
    pub fn master_fd(&self) -> i32 {
        self.master.as_raw_fd()
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A terminal transcript as a screen shows it, line by line: carriage returns dropped and
/// ANSI escape sequences (colours, cursor moves of progress bars) removed.
pub fn screen(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {}
            '\x1b' => {
                // CSI: ESC [ params final-byte (0x40..=0x7e).
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('\x40'..='\x7e').contains(&d) {
                            break;
                        }
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}
