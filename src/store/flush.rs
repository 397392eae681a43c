//! sled's flush on a thread of its own, with a deadline for whoever waits on it.
//!
//! sled can wait forever for a log write that failed on a full disk (its `flush` blocks on a
//! condition that is never signalled; seen here on a tmpfs filled while sled wrote). A write
//! waiting on it would hold its collection's writer lock for good and wedge every later
//! write. Here the caller waits at most [`FLUSH_TIMEOUT`], gets an error (the write is not
//! acknowledged) and the store is marked failed; only this thread stays stuck, and the store
//! knows not to reopen sled's files while it is (see `Store::reopen`).
//!
//! Flushes are grouped: requests that arrive while one runs are answered together by the next
//! (each by a flush that started after it was asked for).

use std::sync::mpsc::{channel, sync_channel, Sender, SyncSender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{InternalError, Result};
use crate::sync::MutexExt;

/// Longest a caller waits for sled to confirm a flush.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(20);

type Reply = SyncSender<std::result::Result<(), sled::Error>>;

/// The flushing thread of one sled instance.
pub(crate) struct Flusher {
    requests: Mutex<Option<Sender<Reply>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Flusher {
    /// Starts the thread flushing `db`.
    pub fn start(db: sled::Db) -> Result<Self> {
        let (tx, rx) = channel::<Reply>();
        let thread = std::thread::Builder::new()
            .name("kindred-flush".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let waiting: Vec<Reply> = std::iter::once(first).chain(rx.try_iter()).collect();
                    let done = db.flush().map(|_| ());
                    for w in waiting {
                        let _ = w.send(done.clone());
                    }
                }
            })
            .map_err(|e| InternalError::io("starting the store's flush thread", e))?;
        Ok(Flusher {
            requests: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Flushes everything written so far to disk, or fails after `timeout` (marking the
    /// storage engine failed: see [`crate::error::storage_engine_io_failed`]).
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        let (tx, rx) = sync_channel(1);
        let sent = self.requests.locked().as_ref().map(|r| r.send(tx));
        if !matches!(sent, Some(Ok(()))) {
            return Err(stalled("the store's flush thread has stopped"));
        }
        match rx.recv_timeout(timeout) {
            Ok(done) => done.map_err(Into::into),
            Err(_) => {
                crate::error::storage_engine_stalled();
                Err(stalled(&format!(
                    "the storage engine did not confirm the write to disk within {} s",
                    timeout.as_secs()
                )))
            }
        }
    }

    /// Stops taking flushes and waits up to `wait` for the thread to finish (it finishes after
    /// the flush it runs, if sled ever ends that one); true when it has.
    pub fn close(&self, wait: Duration) -> bool {
        self.requests.locked().take();
        let mut thread = self.thread.locked();
        let deadline = std::time::Instant::now() + wait;
        while thread.as_ref().is_some_and(|t| !t.is_finished()) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(t) = thread.take() {
            let _ = t.join();
        }
        true
    }
}

impl Drop for Flusher {
    /// Waits for the thread, so that sled's files are unlocked once the store is dropped (a
    /// test or a CLI command may open them again at once); not for one stuck in sled.
    fn drop(&mut self) {
        self.close(Duration::from_secs(5));
    }
}

fn stalled(what: &str) -> crate::Error {
    InternalError::io(
        "flushing the store",
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what} (a full or failing disk?); the write is not acknowledged"),
        ),
    )
    .into()
}
