//! Native loader and batch lease. Every blocking call waits through the GIL helper (wait.rs), so Ctrl-C
//! stops within a slice; every loader, CPU or GPU, iterates in one shape (`next_step`: one batch per engine).

use super::errors::{IntoPyResult, to_py};
use super::gpu::DeviceTensorHandle;
use super::wait::{WAIT_SLICE, wait_detached};
use crate::augment::{DType, Normalize, OutputSpec, SamplePipeline, TransformSpec};
use crate::config::{self, Choices, LoaderConfig};
use crate::decode::DecodeLimits;
use crate::error::TrdataError;
use crate::export::{Device, DlpackRequest, ElementType, TensorExport, into_capsule};
use crate::loader::{BatchImages, DeviceSpec, EPOCH_LIMIT, Loader, LoaderState, NextStep};
use crate::plan::LastBatch;
use crate::source::{Dataset, file_list, image_folder_cancellable};
use crate::sync::lock;
use crate::topology::PinMode;
use crate::transfer::BatchLease;
use crate::worker::ErrorPolicy;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyInt, PyTuple};
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Scan an ImageFolder root → (paths, labels, classes), names as `os.fsdecode` strings (bytes kept exactly).
/// The scan runs on its own thread while this one waits detached in short slices and checks signals: Ctrl-C
/// sets the scan's cancel flag and raises `KeyboardInterrupt` at once, without waiting for the scan thread
/// (which may sit in a slow `readdir` on a network file system; it ends at its next directory).
#[pyfunction]
pub fn scan_image_folder(
    py: Python<'_>,
    root: PathBuf,
) -> PyResult<(Vec<std::ffi::OsString>, Vec<i64>, Vec<std::ffi::OsString>)> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::RecvTimeoutError;
    let cancel = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = std::sync::mpsc::channel();
    let scan_cancel = Arc::clone(&cancel);
    std::thread::Builder::new()
        .name("trdata-scan".into())
        .spawn(move || {
            let _ = tx.send(image_folder_cancellable(&root, &scan_cancel));
        })
        .map_err(|e| to_py(TrdataError::Worker(format!("cannot start the folder scan: {e}"))))?;
    // The receiver is Send but not Sync: the slice holds it by unique reference.
    let rx = &mut rx;
    let scanned = wait_detached(
        py,
        move || match rx.recv_timeout(WAIT_SLICE) {
            Err(RecvTimeoutError::Timeout) => None,
            other => Some(other),
        },
        |_| Ok(()),
        || cancel.store(true, Ordering::Relaxed),
    )?;
    let ds = match scanned {
        Ok(result) => result.py_err()?,
        Err(_) => return Err(to_py(TrdataError::Worker("the folder scan panicked".into()))),
    };
    let labels = ds.samples.iter().map(|s| s.label).collect();
    let paths = ds.samples.into_iter().map(|s| s.path.into_os_string()).collect();
    Ok((paths, labels, ds.classes))
}

/// Largest transform size (height, width or shorter side) the core accepts.
const MAX_SIZE: u32 = 65_536;

/// A Python int shown in a message: itself when short, else its first digits and its length (an int beyond
/// `sys.get_int_max_str_digits()` cannot even be turned into a string).
fn shown_int(v: &Bound<'_, PyAny>) -> String {
    match v.repr() {
        Ok(r) => {
            let r = r.to_string();
            if r.len() <= 40 { r } else { format!("{}… ({} digits)", &r[..20], r.trim_start_matches('-').len()) }
        }
        Err(_) => "an int of thousands of digits".to_string(),
    }
}

/// A transform size argument (a Python int of any magnitude): 1..=65536, else a ConfigError naming `name`
/// (never an unnamed OverflowError for an int beyond 64 bits).
fn size_arg(v: &Bound<'_, PyAny>, name: &str) -> PyResult<u32> {
    if !v.is_instance_of::<PyInt>() {
        let shown = v.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
        return Err(to_py(TrdataError::config(name, format!("{shown} must be an int"))));
    }
    match v.extract::<i64>() {
        Ok(n) if (1..=i64::from(MAX_SIZE)).contains(&n) => Ok(n as u32),
        _ => Err(to_py(TrdataError::config(name, format!("{} must be in 1..={MAX_SIZE}", shown_int(v))))),
    }
}

fn parse_transform(t: &Bound<'_, PyTuple>) -> PyResult<TransformSpec> {
    let kind: String = t.get_item(0)?.extract()?;
    let u = |i: usize, name: &str| -> PyResult<u32> { size_arg(&t.get_item(i)?, name) };
    let f = |i: usize| -> PyResult<f64> { t.get_item(i)?.extract() };
    Ok(match kind.as_str() {
        "random_resized_crop" => {
            let (scale, ratio) = ((f(3)?, f(4)?), (f(5)?, f(6)?));
            if !(scale.0 > 0.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                return Err(to_py(TrdataError::config("scale", format!("{scale:?} must satisfy 0 < min ≤ max ≤ 1"))));
            }
            if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                return Err(to_py(TrdataError::config("ratio", format!("{ratio:?} must satisfy 0 < min ≤ max"))));
            }
            TransformSpec::RandomResizedCrop { height: u(1, "size")?, width: u(2, "size")?, scale, ratio }
        }
        "resize_shorter" => TransformSpec::ResizeShorter { shorter: u(1, "size")? },
        "resize" => TransformSpec::ResizeExact { height: u(1, "size")?, width: u(2, "size")? },
        "center_crop" => TransformSpec::CenterCrop { height: u(1, "size")?, width: u(2, "size")? },
        "horizontal_flip" => {
            let p = f(1)?;
            if !(0.0..=1.0).contains(&p) {
                return Err(to_py(TrdataError::config("p", format!("{p} must be in [0, 1]"))));
            }
            TransformSpec::RandomHorizontalFlip { p }
        }
        other => return Err(to_py(TrdataError::config("transforms", format!("unknown transform {other:?}")))),
    })
}

/// A choice parameter (`dtype`, `layout`, `last_batch`, `on_error`, `pin`): exactly one of the core's
/// strings (config.rs holds the one list per choice); anything else, of any type, is a ConfigError naming it.
fn choice<T: Copy>(value: &Bound<'_, PyAny>, parameter: &str, choices: Choices<T>) -> PyResult<T> {
    match value.extract::<String>() {
        Ok(s) => config::parse_choice(parameter, choices, &s).py_err(),
        Err(_) => {
            let shown = value.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
            Err(to_py(config::choice_error(parameter, choices, &shown)))
        }
    }
}

/// The accepted strings of every choice parameter, exported as `_core.CHOICES`.
pub fn choices_dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    fn names<T>(c: Choices<T>) -> Vec<&'static str> {
        c.iter().map(|(n, _)| *n).collect()
    }
    let d = PyDict::new(py);
    d.set_item("dtype", PyTuple::new(py, names(config::DTYPE))?)?;
    d.set_item("layout", PyTuple::new(py, names(config::LAYOUT))?)?;
    d.set_item("last_batch", PyTuple::new(py, names(config::LAST_BATCH))?)?;
    d.set_item("on_error", PyTuple::new(py, names(config::ON_ERROR))?)?;
    d.set_item("pin", PyTuple::new(py, names(config::PIN))?)?;
    Ok(d)
}

fn check_epoch(epoch: u64) -> PyResult<u64> {
    if epoch >= EPOCH_LIMIT {
        return Err(to_py(TrdataError::config("epoch", format!("{epoch} must be < 2**63"))));
    }
    Ok(epoch)
}

/// The error a superseded iterator gets (`trdata.StaleIteratorError`).
fn stale_iterator() -> PyErr {
    Python::attach(|py| {
        let made = py.import("trdata.errors").and_then(|m| m.getattr("StaleIteratorError")).and_then(|cls| {
            cls.call1(("this iterator of the Loader was superseded by a newer iter() or load_state_dict() of it (one \
                 Loader runs one epoch at a time; the newer iteration owns it); iterate the newest iterator, or \
                 create one Loader per concurrent stream",))
        });
        match made {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        }
    })
}

/// One wait slice of an iteration: what the core said, or that a newer iteration superseded this one.
enum Slice<T> {
    Core(T),
    Stale,
}

/// numpy typestr of a dtype (bfloat16 travels as its raw uint16 bits; the Python layer reinterprets).
fn typestr(d: DType) -> &'static str {
    match d {
        DType::U8 => "|u1",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::F32 => "<f4",
    }
}

/// What `next_batch` hands to Python: (lease, labels, indices, valid, epoch).
/// One engine's batch of a step, as Python receives it (see `next_step`).
type StepTuple = (Py<PyAny>, Option<DeviceTensorHandle>, Vec<i64>, Vec<i64>, usize, u64);

/// The native loader behind `trdata.Loader`.
///
/// A loader belongs to the process that created it (`pid`): in any other process (a fork child) every method
/// raises `LoaderClosedError` (`close` does nothing, `closed` is true) *before* touching `inner`, whose mutex
/// may have been held by a parent thread at fork time and then stays locked forever in the child; the child
/// also never drops `inner` (it leaks, copy-on-write memory).
///
/// Iterations: `new_iteration` hands out a token; the newest token owns the loader's epoch. `start_epoch` and
/// every wait slice of `next_batch`/`next_step` compare their token with `iterations` while holding `inner`, so
/// an older iterator gets `StaleIteratorError` instead of a batch of the newer epoch (never interleaved).
/// `load_state_dict` supersedes the running iterators the same way (it cancels their epoch). After `close`,
/// an iterator's next call raises `LoaderClosedError` (the core refuses every call of a closed loader).
#[pyclass(module = "trdata._core", frozen)]
pub struct NativeLoader {
    inner: ManuallyDrop<Mutex<Loader>>,
    stats: std::sync::Arc<crate::stats::Stats>,
    sample_shape: [usize; 3],
    dtype: DType,
    /// The creating process.
    pid: u32,
    /// Tokens handed out by `new_iteration`; the newest (this value) is the live iteration.
    iterations: AtomicU64,
}

impl NativeLoader {
    /// LoaderClosedError unless this is the creating process. Touches no lock.
    fn check_process(&self) -> PyResult<()> {
        let here = std::process::id();
        if here != self.pid {
            return Err(to_py(TrdataError::Closed(format!(
                "this Loader was created in process {} and cannot be used in process {here} (a fork of it): its \
                 worker threads and locks stay in the parent; create the Loader in the child process",
                self.pid
            ))));
        }
        Ok(())
    }

    /// The core loader, after `check_process`.
    fn lock(&self) -> PyResult<MutexGuard<'_, Loader>> {
        self.check_process()?;
        Ok(lock(&self.inner))
    }

    fn foreign_process(&self) -> bool {
        std::process::id() != self.pid
    }

    /// Lock `inner` for one step of iteration `token`, unless a newer iteration exists.
    fn step<T>(&self, token: u64, f: impl FnOnce(&mut Loader) -> T) -> Slice<T> {
        let mut inner = lock(&self.inner);
        if self.iterations.load(Ordering::SeqCst) != token {
            return Slice::Stale;
        }
        Slice::Core(f(&mut inner))
    }
}

impl Drop for NativeLoader {
    fn drop(&mut self) {
        if !self.foreign_process() {
            // SAFETY: dropped exactly once, here; never used again.
            unsafe { ManuallyDrop::drop(&mut self.inner) }
        }
    }
}

#[pymethods]
impl NativeLoader {
    #[new]
    #[pyo3(signature = (paths, labels, classes, *, batch_size, workers, shuffle, seed, reproducible, last_batch,
                        rank, world_size, pin, on_error, prefetch, max_held_batches, transforms, normalize,
                        dtype, layout, devices=None, device_slots=3, cpus=None, max_pixels=None, max_scans=None,
                        max_memory_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        labels: Vec<i64>,
        classes: Vec<std::ffi::OsString>,
        batch_size: i64,
        workers: i64,
        shuffle: bool,
        seed: u64,
        reproducible: Option<bool>,
        last_batch: &Bound<'_, PyAny>,
        rank: i64,
        world_size: i64,
        pin: &Bound<'_, PyAny>,
        on_error: &Bound<'_, PyAny>,
        prefetch: i64,
        max_held_batches: i64,
        transforms: Vec<Bound<'_, PyTuple>>,
        normalize: Option<([f32; 3], [f32; 3])>,
        dtype: &Bound<'_, PyAny>,
        layout: &Bound<'_, PyAny>,
        devices: Option<Vec<u32>>,
        device_slots: i64,
        cpus: Option<Vec<usize>>,
        max_pixels: Option<i64>,
        max_scans: Option<i64>,
        max_memory_bytes: Option<i64>,
    ) -> PyResult<Self> {
        let nonneg = |v: i64, name: &str| -> PyResult<usize> {
            usize::try_from(v).map_err(|_| to_py(TrdataError::config(name, format!("{v} must be ≥ 0"))))
        };
        if let Some((_, std)) = &normalize {
            if std.iter().any(|s| !(s.is_finite() && *s != 0.0)) {
                return Err(to_py(TrdataError::config(
                    "normalize",
                    format!("std {std:?} must be finite and non-zero"),
                )));
            }
        }
        let specs = transforms.iter().map(parse_transform).collect::<PyResult<Vec<_>>>()?;
        let output = OutputSpec {
            dtype: choice(dtype, "dtype", config::DTYPE)?,
            layout: choice(layout, "layout", config::LAYOUT)?,
            normalize: normalize.map(|(mean, std)| Normalize { mean, std }),
        };
        let pipeline = SamplePipeline::new(specs, output).py_err()?;
        let cfg = LoaderConfig {
            batch_size: nonneg(batch_size, "batch_size")?,
            workers: nonneg(workers, "workers")?,
            shuffle,
            seed,
            reproducible: reproducible.unwrap_or_else(|| LoaderConfig::default_reproducible(shuffle)),
            last_batch: choice(last_batch, "last_batch", config::LAST_BATCH)?,
            rank: nonneg(rank, "rank")?,
            world_size: nonneg(world_size, "world_size")?,
            pin: choice::<PinMode>(pin, "pin", config::PIN)?,
            cpus,
            on_error: choice::<ErrorPolicy>(on_error, "on_error", config::ON_ERROR)?,
            prefetch: nonneg(prefetch, "prefetch")?,
            max_held_batches: nonneg(max_held_batches, "max_held_batches")?,
            pipeline: pipeline.clone(),
            decode_limits: {
                let d = DecodeLimits::default();
                let pick = |v: Option<i64>, name: &str, default: u64| -> PyResult<u64> {
                    v.map_or(Ok(default), |v| Ok(nonneg(v, name)? as u64))
                };
                let scans = pick(max_scans, "max_scans", u64::from(d.max_scans))?;
                DecodeLimits {
                    max_pixels: pick(max_pixels, "max_pixels", d.max_pixels)?,
                    max_scans: u32::try_from(scans)
                        .map_err(|_| to_py(TrdataError::config("max_scans", format!("{scans} must be below 2**32"))))?,
                    max_memory_bytes: pick(max_memory_bytes, "max_memory_bytes", d.max_memory_bytes)?,
                    ..d
                }
            },
        };
        let mut ds: Dataset = file_list(paths, labels).py_err()?;
        ds.classes = classes;
        // Checked for every loader (a CPU loader does not use it, but a wrong value is wrong everywhere).
        let device_slots = config::check_device_slots(device_slots).py_err()?;
        let spec = match devices {
            None => DeviceSpec::Cpu,
            Some(ordinals) => DeviceSpec::Cuda { ordinals, device_slots },
        };
        let loader = py.detach(|| Loader::with_devices(ds, cfg, spec)).py_err()?;
        Ok(Self {
            stats: loader.stats(),
            inner: ManuallyDrop::new(Mutex::new(loader)),
            sample_shape: pipeline.sample_shape(),
            dtype: output.dtype,
            pid: std::process::id(),
            iterations: AtomicU64::new(0),
        })
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.lock()?.len())
    }

    /// Epoch of the next iteration.
    #[getter]
    fn epoch(&self) -> PyResult<u64> {
        Ok(self.lock()?.epoch())
    }

    /// Run `epoch` (< 2**63) on the next iteration.
    fn set_epoch(&self, epoch: u64) -> PyResult<()> {
        check_epoch(epoch)?;
        self.lock()?.set_epoch(epoch);
        Ok(())
    }

    /// Position + configuration fingerprint at the current batch boundary, as a dict (loader.py documents
    /// the format; plan/resume.rs the protocol).
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?.state();
        let d = PyDict::new(py);
        d.set_item("version", st.version)?;
        d.set_item("seed", st.seed)?;
        d.set_item("epoch", st.epoch)?;
        d.set_item("batches", st.batches)?;
        let f = PyDict::new(py);
        f.set_item("num_samples", st.num_samples)?;
        f.set_item("world_size", st.world_size)?;
        f.set_item("rank", st.rank)?;
        f.set_item("devices", st.devices)?;
        f.set_item("batch_size", st.batch_size)?;
        f.set_item("last_batch", st.last_batch.name())?;
        f.set_item("shuffle", st.shuffle)?;
        f.set_item("reproducible", st.reproducible)?;
        d.set_item("fingerprint", f)?;
        let delivered: Vec<Bound<'py, PyBytes>> = st.delivered.iter().map(|b| PyBytes::new(py, b)).collect();
        d.set_item("delivered", delivered)?;
        Ok(d)
    }

    /// Continue from a `state_dict()` on the next iteration (validates the fingerprint).
    #[pyo3(signature = (*, version, seed, epoch, batches, num_samples, world_size, rank, devices, batch_size,
                        last_batch, shuffle, reproducible, delivered))]
    #[allow(clippy::too_many_arguments)]
    fn load_state_dict(
        &self,
        py: Python<'_>,
        version: u32,
        seed: u64,
        epoch: u64,
        batches: u64,
        num_samples: u64,
        world_size: u64,
        rank: u64,
        devices: u64,
        batch_size: u64,
        last_batch: &str,
        shuffle: bool,
        reproducible: bool,
        delivered: Vec<Bound<'_, PyBytes>>,
    ) -> PyResult<()> {
        self.check_process()?;
        let st = LoaderState {
            version,
            seed,
            epoch: check_epoch(epoch)?,
            batches,
            num_samples,
            world_size,
            rank,
            devices,
            batch_size,
            last_batch: LastBatch::parse(last_batch).py_err()?,
            shuffle,
            reproducible,
            delivered: delivered.iter().map(|b| b.as_bytes().to_vec()).collect(),
        };
        // A loaded state supersedes every running iterator, as a new `iter()` does: their next `next()` raises
        // StaleIteratorError (the core cancelled their epoch; without this they would end quietly, like a
        // completed epoch). Bumped while `inner` is held, so no wait slice of theirs sees the cancelled epoch.
        py.detach(|| {
            let mut inner = lock(&self.inner);
            inner.load_state(&st)?;
            self.iterations.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .py_err()
    }

    /// Shape of one sample ([3,h,w] or [h,w,3]).
    #[getter]
    fn sample_shape(&self) -> (usize, usize, usize) {
        (self.sample_shape[0], self.sample_shape[1], self.sample_shape[2])
    }

    /// A new iteration's token; from now on older tokens are stale (their next call raises
    /// `StaleIteratorError`). Its epoch starts at `start_epoch(token)`.
    fn new_iteration(&self) -> PyResult<u64> {
        self.check_process()?;
        Ok(self.iterations.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Start the epoch of iteration `token` (cancelling a running one); returns its number.
    fn start_epoch(&self, py: Python<'_>, token: u64) -> PyResult<u64> {
        self.check_process()?;
        match py.detach(|| self.step(token, |l| l.start_epoch())) {
            Slice::Core(r) => r.py_err(),
            Slice::Stale => Err(stale_iterator()),
        }
    }

    /// Next step of iteration `token`'s epoch, None at its end: one (images, labels_handle, labels, indices,
    /// valid, epoch) per engine in engine order. A CPU loader is one engine: images is a `BatchLeaseHandle`
    /// (numpy/DLPack view of the host buffer) and labels_handle None; a CUDA loader has one entry per GPU with
    /// images and labels as `DeviceTensorHandle`s.
    fn next_step(&self, py: Python<'_>, token: u64) -> PyResult<Option<Vec<StepTuple>>> {
        self.check_process()?;
        let next = wait_detached(
            py,
            || match self.step(token, |l| l.next_step(WAIT_SLICE)) {
                Slice::Core(Ok(NextStep::Timeout)) => None,
                other => Some(other),
            },
            |_| Ok(()),
            || (),
        )?;
        let batches = match next {
            Slice::Core(r) => match r.py_err()? {
                NextStep::Step(batches) => batches,
                NextStep::End | NextStep::Timeout => return Ok(None),
            },
            Slice::Stale => return Err(stale_iterator()),
        };
        batches
            .into_iter()
            .map(|b| {
                let (images, labels_handle) = match b.images {
                    BatchImages::Host(lease) => {
                        let s = self.sample_shape;
                        let handle = BatchLeaseHandle {
                            shape: vec![lease.rows, s[0], s[1], s[2]],
                            dtype: self.dtype,
                            ptr: lease.buffer().images_ptr() as usize,
                            lease: ManuallyDrop::new(Arc::new(lease)),
                            pid: self.pid,
                        };
                        (Py::new(py, handle)?.into_any(), None)
                    }
                    BatchImages::Device(db) => {
                        let lease = db.lease;
                        let images = DeviceTensorHandle::images(Arc::clone(&lease), self.sample_shape, self.dtype);
                        (Py::new(py, images)?.into_any(), Some(DeviceTensorHandle::labels(lease)))
                    }
                };
                Ok((images, labels_handle, b.labels, b.indices, b.valid, b.epoch))
            })
            .collect::<PyResult<Vec<_>>>()
            .map(Some)
    }

    /// CUDA ordinals this loader feeds (empty for a CPU loader).
    #[getter]
    fn devices(&self) -> PyResult<Vec<u32>> {
        Ok(match self.lock()?.devices() {
            DeviceSpec::Cpu => Vec::new(),
            DeviceSpec::Cuda { ordinals, .. } => ordinals.clone(),
        })
    }

    /// (free, total) bytes of each GPU's memory, from the driver (empty before the first iteration).
    fn device_mem_info(&self, py: Python<'_>) -> PyResult<Vec<(usize, usize)>> {
        self.check_process()?;
        py.detach(|| lock(&self.inner).device_mem_info()).py_err()
    }

    /// Counters and timers. CUDA loaders add the H2D counters, and their `consumer_wait_ns` is the time the
    /// caller waited for device batches (the host station's wait is then `h2d_wait_host_ns`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_process()?;
        let d = PyDict::new(py);
        for (k, v) in self.stats.snapshot() {
            d.set_item(k, v)?;
        }
        let inner = lock(&self.inner);
        if *inner.devices() != DeviceSpec::Cpu {
            let gpu = inner.gpu_stats();
            for (k, v) in &gpu {
                d.set_item(*k, *v)?;
            }
            if let Some((_, wait)) = gpu.iter().find(|(k, _)| *k == "device_wait_ns") {
                d.set_item("consumer_wait_ns", *wait)?;
            }
        }
        Ok(d)
    }

    /// Skipped files not reported yet: [(path, reason)].
    fn drain_skipped(&self) -> PyResult<Vec<(std::ffi::OsString, String)>> {
        Ok(self.lock()?.drain_skipped().into_iter().map(|r| (r.path.into_os_string(), r.message)).collect())
    }

    /// Stop and join every worker thread; idempotent. Does nothing in a process other than the creating one.
    fn close(&self, py: Python<'_>) {
        if !self.foreign_process() {
            py.detach(|| lock(&self.inner).close());
        }
    }

    /// True once closed, and always in a process other than the creating one (no lock touched there).
    #[getter]
    fn closed(&self) -> bool {
        self.foreign_process() || lock(&self.inner).is_closed()
    }
}

/// Owner of one batch buffer. numpy views (`__array_interface__`) keep the handle alive; DLPack exports
/// (`__dlpack__`) each own a clone of the lease, so the buffer returns to the station only when the handle
/// and every consumer tensor (torch, numpy, JAX…) died, in any order, on any thread. Dropped in a process
/// other than the one that made it (a fork child), the lease is leaked: returning it would lock the parent's
/// station, whose mutex a parent thread may have held at fork time.
#[pyclass(module = "trdata._core", frozen)]
pub struct BatchLeaseHandle {
    shape: Vec<usize>,
    dtype: DType,
    ptr: usize,
    lease: ManuallyDrop<Arc<BatchLease>>,
    pid: u32,
}

impl Drop for BatchLeaseHandle {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // SAFETY: dropped exactly once, here; never used again.
            unsafe { ManuallyDrop::drop(&mut self.lease) }
        }
    }
}

impl BatchLeaseHandle {
    /// Where the images live. Host batches today; the GPU path's device slots will report
    /// `Device::Cuda(ordinal)` and attach their `StreamOrder` hook in `__dlpack__`.
    const DEVICE: Device = Device::Cpu;
}

#[pymethods]
impl BatchLeaseHandle {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", typestr(self.dtype))?;
        d.set_item("data", (self.ptr, false))?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    /// DLPack export of the images (zero-copy; bfloat16 as kDLBfloat). `max_version` ≥ (1, 0) gives a
    /// versioned capsule ("dltensor_versioned"), otherwise a legacy one ("dltensor"). `dl_device` must be
    /// ours (BufferError otherwise); `copy=True` exports a private copy; `stream` must be None (or -1)
    /// for host memory.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<(i64, i64)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let plan = DlpackRequest { stream, max_version, dl_device, copy }.plan(Self::DEVICE)?;
        let export = TensorExport::new(Arc::clone(&self.lease), ElementType::from(self.dtype), &self.shape, None)?;
        // GPU hook: a device slot adds `.with_stream_order(slot_order, plan.stream)` here.
        let export = if plan.copy { py.detach(move || export.host_copy())? } else { export };
        into_capsule(py, export, plan.versioned)
    }

    /// (device_type, device_id) of the images: (1, 0) = kDLCPU.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = Self::DEVICE.dl();
        (d.device_type, d.device_id)
    }

    /// Element type of the images ('uint8', 'float16', 'bfloat16', 'float32').
    #[getter]
    fn dtype(&self) -> &'static str {
        config::choice_name(config::DTYPE, self.dtype)
    }

    /// Shape of the images.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// Batch number within its epoch.
    #[getter]
    fn batch(&self) -> u64 {
        self.lease.batch
    }
}
