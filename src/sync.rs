//! Locks that outlive a panic. Owns the poison policy of every `Mutex` and `RwLock` in the
//! library: a panic while a lock is held (a bug, never an expected path) must not turn every
//! later request on that collection into a 500 until a restart, which is what
//! `lock().expect(..)` does once the lock is poisoned. The guarded data is taken as it is —
//! the structures behind these locks are caches, indexes rebuilt from the store, or job
//! records, each valid after any prefix of an update — the poisoning is cleared, logged once
//! and counted ([`recovered`], exported by the server as a metric).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

static RECOVERED: AtomicU64 = AtomicU64::new(0);

/// How many poisoned locks were taken over since the process started.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub fn recovered() -> u64 {
    RECOVERED.load(Ordering::Relaxed)
}

fn take_over<G>(e: PoisonError<G>, clear: impl FnOnce()) -> G {
    RECOVERED.fetch_add(1, Ordering::Relaxed);
    tracing::error!(
        "a thread panicked while holding a lock; its data is used as the panic left it \
         (see the log line before this one for the panic)"
    );
    clear();
    e.into_inner()
}

/// [`Mutex::lock`] that takes over a poisoned lock instead of failing.
pub trait MutexExt<T> {
    /// The guard, poisoned or not.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(|e| take_over(e, || self.clear_poison()))
    }
}

/// [`RwLock::read`] and [`RwLock::write`] that take over a poisoned lock instead of failing.
pub trait RwLockExt<T> {
    /// A read guard, poisoned or not.
    fn reading(&self) -> RwLockReadGuard<'_, T>;
    /// A write guard, poisoned or not.
    fn writing(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn reading(&self) -> RwLockReadGuard<'_, T> {
        self.read()
            .unwrap_or_else(|e| take_over(e, || self.clear_poison()))
    }
    fn writing(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(|e| take_over(e, || self.clear_poison()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_taken_over_once() {
        let m = Mutex::new(vec![1]);
        let rw = RwLock::new(7);
        let before = recovered();
        let _ = std::panic::catch_unwind(|| {
            let mut g = m.lock().unwrap();
            g.push(2);
            let _w = rw.write().unwrap();
            panic!("a bug while both locks are held");
        });
        assert!(m.is_poisoned() && rw.is_poisoned());
        assert_eq!(*m.locked(), vec![1, 2], "the data as the panic left it");
        assert!(!m.is_poisoned(), "the poisoning is cleared");
        assert_eq!(*m.locked(), vec![1, 2]);
        *rw.writing() += 1;
        assert_eq!(*rw.reading(), 8);
        // Other tests may poison locks of their own at the same time.
        assert!(recovered() >= before + 2);
    }
}
