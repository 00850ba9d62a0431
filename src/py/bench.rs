//! py/bench — benchmark helpers of `trdata._core` (used by `trdata bench` and `benches/peers/throughput.py`):
//!
//! - `generate_synthetic_dataset(root, count, seed, *, threads=None, progress=None) -> dict`: the built-in
//!   default dataset (photo-like JPEGs painted and encoded by `synthetic`, published atomically);
//! - `decode_ceiling(paths, threads, repeat, *, pin=True) -> dict`: the raw libjpeg-turbo full-decode rate
//!   (no ROI, no DCT scaling, no augmentation, no staging) over in-memory file bytes on `threads` std threads
//!   — the ceiling the loader is compared against.
//!
//! Both run their work on native threads and wait for it in short detached slices, checking signals between
//! them, so Ctrl-C interrupts within ~0.1 s (a cancelled generation removes its temp folder).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::errors::IntoPyResult;
use super::wait::{WAIT_SLICE, wait_detached};
use crate::decode::Decoder;
use crate::synthetic::{SYNTHETIC_VERSION, generate_synthetic_dataset as generate};
use crate::topology::{self, PinMode};

/// Add the benchmark functions to `trdata._core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(generate_synthetic_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(decode_ceiling, m)?)?;
    m.add("SYNTHETIC_VERSION", SYNTHETIC_VERSION)?;
    Ok(())
}

/// A one-shot result slot the helper thread fills and the Python thread waits on (with a timeout).
struct Slot<T> {
    value: Mutex<Option<T>>,
    ready: Condvar,
}

/// Run `work` on a helper thread named `name`. The calling thread waits through the GIL helper (wait.rs): between
/// slices it calls `tick` (with the GIL) and checks signals. If either fails, `cancel` is raised, the helper is
/// waited for (it must observe `cancel` promptly) and the error is returned.
pub(super) fn run_interruptibly<T: Send + 'static>(
    py: Python<'_>,
    name: &str,
    cancel: &Arc<AtomicBool>,
    work: impl FnOnce() -> T + Send + 'static,
    mut tick: impl FnMut(Python<'_>) -> PyResult<()>,
) -> PyResult<T> {
    let slot = Arc::new(Slot { value: Mutex::new(None), ready: Condvar::new() });
    let handle = {
        let slot = Arc::clone(&slot);
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let v = work();
                *slot.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
                slot.ready.notify_all();
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start thread {name}: {e}")))?
    };
    // Each slice waits for the helper's value; it is done when there is one or the helper finished without
    // one (it stores its value before it finishes, so that means it panicked).
    let waited = wait_detached(
        py,
        || {
            let guard = slot.value.lock().unwrap_or_else(|e| e.into_inner());
            let (mut guard, _) =
                slot.ready.wait_timeout_while(guard, WAIT_SLICE, |v| v.is_none()).unwrap_or_else(|e| e.into_inner());
            let value = guard.take();
            (value.is_some() || handle.is_finished()).then_some(value)
        },
        &mut tick,
        || cancel.store(true, Ordering::Relaxed),
    );
    let _ = py.detach(|| handle.join());
    let value = waited?;
    // Final tick (a progress bar reaches 100 %); its error no longer matters.
    let _ = tick(py);
    value.ok_or_else(|| PyRuntimeError::new_err(format!("thread {name} panicked")))
}

/// Generate the deterministic synthetic ImageFolder dataset of `count` JPEGs from `seed` into `root`, unless a
/// complete one is already there. Written into a temp folder and renamed into place, so an interrupted run
/// is never mistaken for a dataset. `progress(done, count)` is called every ~0.1 s from the calling thread.
///
/// Returns `{"root", "images", "jpeg_bytes", "pixels", "generated", "version"}` (`generated` is False when the
/// dataset already existed; bytes/pixels are then 0). Raises FileExistsError when `root` exists but is not
/// this dataset, OSError on I/O failures, KeyboardInterrupt on Ctrl-C.
#[pyfunction]
#[pyo3(signature = (root, count, seed, *, threads = None, progress = None))]
fn generate_synthetic_dataset<'py>(
    py: Python<'py>,
    root: PathBuf,
    count: u32,
    seed: u64,
    threads: Option<usize>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    if count == 0 {
        return Err(PyValueError::new_err("count must be at least 1"));
    }
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let cancel = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU32::new(0));
    let work = {
        let (cancel, done, root) = (Arc::clone(&cancel), Arc::clone(&done), root.clone());
        move || {
            generate(&root, count, seed, threads, &|n| {
                done.store(n, Ordering::Relaxed);
                !cancel.load(Ordering::Relaxed)
            })
        }
    };
    let mut reported = u32::MAX;
    let summary = run_interruptibly(py, "trdata-gen", &cancel, work, |_| {
        let n = done.load(Ordering::Relaxed);
        match &progress {
            Some(cb) if n != reported => {
                reported = n;
                cb.call1((n, count)).map(|_| ())
            }
            _ => Ok(()),
        }
    })??;
    let d = PyDict::new(py);
    d.set_item("root", summary.root.to_string_lossy().into_owned())?;
    d.set_item("images", summary.images)?;
    d.set_item("jpeg_bytes", summary.jpeg_bytes)?;
    d.set_item("pixels", summary.pixels)?;
    d.set_item("generated", summary.generated)?;
    d.set_item("version", SYNTHETIC_VERSION)?;
    Ok(d)
}

/// Raw libjpeg-turbo ceiling: read `paths` into memory, then decode every file `repeat` times at full size to
/// RGB8 (`Decoder::decode_full_rgb`: no ROI, no scaling, no augmentation) on `threads` native threads that
/// claim files from one atomic counter. With `pin`, thread t is bound to the t-th CPU (mod count) of the
/// caller's affinity mask, as the loader's workers are. Each thread decodes one file untimed first (buffer
/// growth, page faults); the clock runs from a common barrier to the last thread's end.
///
/// Returns `{"images", "failed", "seconds", "images_per_s", "megapixels_per_s", "cpu_seconds", "threads",
/// "repeat", "first_error"}` (`cpu_seconds`: the decoding threads' CPU time over the timed part); files that
/// fail to decode are counted in `failed` (not in `images`).
#[pyfunction]
#[pyo3(signature = (paths, threads, repeat = 1, *, pin = true))]
fn decode_ceiling<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    threads: usize,
    repeat: usize,
    pin: bool,
) -> PyResult<Bound<'py, PyDict>> {
    if paths.is_empty() {
        return Err(PyValueError::new_err("paths must not be empty"));
    }
    if threads == 0 || repeat == 0 {
        return Err(PyValueError::new_err("threads and repeat must be at least 1"));
    }
    let files: Vec<Vec<u8>> = py.detach(|| {
        paths
            .iter()
            .map(|p| std::fs::read(p).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))))
            .collect::<std::io::Result<_>>()
    })?;
    // Decoders are created here so a libjpeg-turbo init failure surfaces as the core's typed error.
    let decoders = (0..threads).map(|_| Decoder::new()).collect::<Result<Vec<_>, _>>().py_err()?;
    // The loader's own binding plan (round-robin over the allowed CPUs), so the ceiling is pinned as its workers are.
    let mode = if pin { PinMode::RoundRobin } else { PinMode::None };
    let cpus = topology::worker_plan(&topology::loader_topology(mode, false, None), mode, threads, &[]);

    let cancel = Arc::new(AtomicBool::new(false));
    let work = {
        let cancel = Arc::clone(&cancel);
        move || ceiling_run(files, decoders, cpus, repeat, &cancel)
    };
    let r = run_interruptibly(py, "trdata-ceiling", &cancel, work, |_| Ok(()))?;
    let d = PyDict::new(py);
    d.set_item("images", r.images)?;
    d.set_item("failed", r.failed)?;
    d.set_item("seconds", r.seconds)?;
    d.set_item("images_per_s", if r.seconds > 0.0 { r.images as f64 / r.seconds } else { 0.0 })?;
    d.set_item("megapixels_per_s", if r.seconds > 0.0 { r.pixels as f64 / r.seconds / 1e6 } else { 0.0 })?;
    d.set_item("cpu_seconds", r.cpu_seconds)?;
    d.set_item("threads", threads)?;
    d.set_item("repeat", repeat)?;
    d.set_item("first_error", r.first_error)?;
    Ok(d)
}

struct CeilingResult {
    images: u64,
    failed: u64,
    pixels: u64,
    seconds: f64,
    /// CPU time of the decoding threads over the timed part (user + system).
    cpu_seconds: f64,
    first_error: Option<String>,
}

/// CPU time consumed so far by the calling thread, in nanoseconds (0 if the clock is unavailable).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec owned by this frame; clock_gettime only writes into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

fn ceiling_run(
    files: Vec<Vec<u8>>,
    decoders: Vec<Decoder>,
    cpus: Vec<Option<usize>>,
    repeat: usize,
    cancel: &AtomicBool,
) -> CeilingResult {
    let threads = decoders.len();
    let total = files.len() * repeat;
    let next = AtomicUsize::new(0);
    let (images, failed, pixels) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let cpu_ns = AtomicU64::new(0);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let start_line = Barrier::new(threads + 1);
    let files = &files;
    let seconds = std::thread::scope(|scope| {
        for (t, mut decoder) in decoders.into_iter().enumerate() {
            let cpu = cpus[t];
            let (next, images, failed, pixels, cpu_ns, first_error, start_line) =
                (&next, &images, &failed, &pixels, &cpu_ns, &first_error, &start_line);
            scope.spawn(move || {
                if let Some(cpu) = cpu {
                    let _ = topology::pin_current_thread(&[cpu]);
                }
                let mut rgb = Vec::new();
                // Untimed warm-up: grow the output buffer and fault its pages in.
                let _ = decoder.decode_full_rgb(&files[t % files.len()], &mut rgb);
                start_line.wait();
                let cpu_start_ns = thread_cpu_ns();
                let (mut ok, mut bad, mut px) = (0u64, 0u64, 0u64);
                while !cancel.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    match decoder.decode_full_rgb(&files[i % files.len()], &mut rgb) {
                        Ok((w, h)) => {
                            ok += 1;
                            px += u64::from(w) * u64::from(h);
                        }
                        Err(e) => {
                            bad += 1;
                            first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(cpu_start_ns), Ordering::Relaxed);
                images.fetch_add(ok, Ordering::Relaxed);
                failed.fetch_add(bad, Ordering::Relaxed);
                pixels.fetch_add(px, Ordering::Relaxed);
            });
        }
        start_line.wait();
        let t0 = Instant::now();
        // Leaving the scope joins every thread; time until then.
        t0
    })
    .elapsed()
    .as_secs_f64();
    CeilingResult {
        images: images.into_inner(),
        failed: failed.into_inner(),
        pixels: pixels.into_inner(),
        seconds,
        cpu_seconds: cpu_ns.into_inner() as f64 * 1e-9,
        first_error: first_error.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}
