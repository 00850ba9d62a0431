//! Synchronization shim: std primitives normally, loom's under `--cfg trdata_loom` so the station's state machine
//! is model-checked with the very code that runs in production (see transfer/station.rs tests).

#[cfg(trdata_loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(trdata_loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(trdata_loom))]
pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(trdata_loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Lock a mutex, recovering the data if a panicking thread poisoned it. Worker panics are caught and
/// reported through the station's poison state, so the data behind the lock stays consistent.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Spawn a thread (loom's under model checking).
#[cfg(trdata_loom)]
pub fn thread_spawn<F, T>(f: F) -> loom::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    loom::thread::spawn(f)
}

/// Spawn a thread (loom's under model checking).
#[cfg(not(trdata_loom))]
pub fn thread_spawn<F, T>(f: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::spawn(f)
}
