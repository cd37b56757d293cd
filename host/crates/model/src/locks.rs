//! Locks that stay usable after a panic. A thread that panics while holding
//! one of the host's locks is a bug that is logged where it happens; the
//! state it guards is still what the last holder wrote, so the next holder
//! takes it as it is instead of panicking in turn and taking the host down.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`] that takes a poisoned lock as it is.
pub trait MutexExt<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// [`RwLock::read`] and [`RwLock::write`] that take a poisoned lock as it is.
pub trait RwLockExt<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_taken_as_it_was_left() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let rwlock = std::sync::Arc::new(RwLock::new(1));
        let (m, r) = (mutex.clone(), rwlock.clone());
        let panicked = std::thread::spawn(move || {
            *m.lock_unpoisoned() = 2;
            *r.write_unpoisoned() = 2;
            let _held = (m.lock_unpoisoned(), r.write_unpoisoned());
            panic!("poisoning both");
        })
        .join();
        assert!(panicked.is_err());
        assert!(mutex.is_poisoned() && rwlock.is_poisoned());
        assert_eq!(*mutex.lock_unpoisoned(), 2);
        assert_eq!(*rwlock.read_unpoisoned(), 2);
        *rwlock.write_unpoisoned() = 3;
        assert_eq!(*rwlock.read_unpoisoned(), 3);
    }
}
