//! Synchronization shim: std primitives normally, loom's under the `loom` feature (`make test-loom`, tests only:
//! loom's primitives work inside `loom::model` alone) so the station's state machine is model-checked with the
//! very code that runs in production (see transfer/station.rs tests). A feature rather than a `--cfg`: RUSTFLAGS
//! would rebuild every dependency for the model check; the feature rebuilds this crate alone and leaves tokio and
//! hyper themselves (they read `--cfg loom`, never our feature).

// loom is a dev-dependency: the feature builds tests only.
#[cfg(all(feature = "loom", not(test)))]
compile_error!("the `loom` feature is for model-checking tests only: `cargo test --lib --features loom _loom`");

#[cfg(feature = "loom")]
pub use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(feature = "loom")]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(feature = "loom"))]
pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(feature = "loom"))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Lock a mutex, recovering the data if a panicking thread poisoned it. Worker panics are caught and
/// reported through the station's poison state, so the data behind the lock stays consistent.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Spawn a thread (loom's under model checking).
#[cfg(feature = "loom")]
pub fn thread_spawn<F, T>(f: F) -> loom::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    loom::thread::spawn(f)
}

/// Spawn a thread (loom's under model checking).
#[cfg(not(feature = "loom"))]
pub fn thread_spawn<F, T>(f: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::spawn(f)
}
