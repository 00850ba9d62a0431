//! The one GIL helper (docs/design/architecture.md "The Rust/Python boundary"): every call of the binding that can block waits here,
//! detached from the interpreter in slices of at most [`WAIT_SLICE`], running Python's signal handlers between
//! slices, so Ctrl-C stops any wait within a slice and other Python threads run meanwhile.

use pyo3::prelude::*;
use std::time::Duration;

/// Longest wait between two signal checks.
pub const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Call `slice` detached until it yields `Some`; `slice` must itself wait at most about [`WAIT_SLICE`] before
/// returning `None`. Between slices, with the interpreter attached, `between` runs (e.g. a progress callback)
/// and then the signal handlers; if either raises (Ctrl-C → `KeyboardInterrupt`), `interrupted` runs (e.g. to
/// cancel the work being waited for) and the exception is returned.
pub fn wait_detached<T, F>(
    py: Python<'_>,
    mut slice: F,
    mut between: impl FnMut(Python<'_>) -> PyResult<()>,
    interrupted: impl FnOnce(),
) -> PyResult<T>
where
    T: Send,
    F: FnMut() -> Option<T> + Send,
{
    loop {
        if let Some(v) = py.detach(&mut slice) {
            return Ok(v);
        }
        if let Err(e) = between(py).and_then(|()| py.check_signals()) {
            interrupted();
            return Err(e);
        }
    }
}
