//! Native loader and batch lease. Every blocking call waits through the GIL helper (wait.rs), so Ctrl-C
//! stops within a slice; every loader, CPU or GPU, iterates in one shape (`next_step`: one batch per engine).

use super::args::{int_arg, opt_int_arg, shown_int};
use super::errors::{IntoPyResult, to_py};
use super::gpu::DeviceTensorHandle;
use super::source::NativeSource;
use super::wait::{WAIT_SLICE, wait_detached};
use crate::augment::{self, DType, Normalize, OutputSpec};
use crate::config::{self, Choice, LoaderConfig};
use crate::decode::{self, DecodeLimits};
use crate::error::TrdataError;
use crate::export::{Device, DlpackRequest, ElementType, HostView, TensorExport, into_capsule};
use crate::loader::{BatchImages, DeviceSpec, Loader, LoaderState, NextStep};
use crate::plan::LastBatch;
use crate::source::{self, Files, image_folder_cancellable};
use crate::sync::lock;
use crate::transfer::BatchLease;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyTuple};
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
    let mut ds = ds;
    let Files(paths) = std::mem::take(ds.store_as_mut::<Files>().expect("a folder scan stores files"));
    Ok((paths.into_iter().map(PathBuf::into_os_string).collect(), ds.labels, ds.classes))
}

/// Check an explicit file list (`trdata.FileList`) by the core's rules (`source::check_file_list`), before
/// any Loader exists: the paths and the number of labels.
#[pyfunction]
pub fn check_file_list(paths: Vec<PathBuf>, num_labels: usize) -> PyResult<()> {
    source::check_file_list(&paths, num_labels).py_err()
}

/// A choice parameter (`dtype`, `layout`, `last_batch`, `on_error`, `pin`): the core parses a string; anything
/// else, of any type, gets the core's error for that choice.
fn choice<T: Copy + PartialEq>(value: &Bound<'_, PyAny>, choice: &Choice<T>) -> PyResult<T> {
    match value.extract::<String>() {
        Ok(s) => choice.parse(&s).py_err(),
        Err(_) => {
            let shown = value.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
            Err(to_py(choice.error(&shown)))
        }
    }
}

/// `decode`: one of the core's strings, or a number (the GPU share; a bool is not one), whose range is the core's.
fn decode_arg(value: &Bound<'_, PyAny>) -> PyResult<config::DecodeMode> {
    if value.extract::<String>().is_ok() || value.is_instance_of::<pyo3::types::PyBool>() {
        return choice(value, &config::DECODE);
    }
    match value.extract::<f64>() {
        Ok(share) => config::check_decode_share(share).py_err(),
        Err(_) => choice(value, &config::DECODE),
    }
}

/// The accepted strings of every choice parameter, exported as `_core.CHOICES`.
pub fn choices_dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(config::DTYPE.name, PyTuple::new(py, config::DTYPE.names())?)?;
    d.set_item(config::LAYOUT.name, PyTuple::new(py, config::LAYOUT.names())?)?;
    d.set_item(config::LAST_BATCH.name, PyTuple::new(py, config::LAST_BATCH.names())?)?;
    d.set_item(config::ON_ERROR.name, PyTuple::new(py, config::ON_ERROR.names())?)?;
    d.set_item(config::PIN.name, PyTuple::new(py, config::PIN.names())?)?;
    d.set_item(config::DECODE.name, PyTuple::new(py, config::DECODE.names())?)?;
    Ok(d)
}

/// The core's defaults of the parameters Python shows in its signatures, exported as `_core.DEFAULTS` (keys:
/// the Loader's parameter names, and `Transform.parameter` for the transforms').
pub fn defaults_dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use config::default as d;
    let out = PyDict::new(py);
    out.set_item("batch_size", d::BATCH_SIZE)?;
    out.set_item("dtype", config::DTYPE.name_of(d::DTYPE))?;
    out.set_item("layout", config::LAYOUT.name_of(d::LAYOUT))?;
    out.set_item("shuffle", d::SHUFFLE)?;
    out.set_item("seed", d::SEED)?;
    out.set_item("last_batch", config::LAST_BATCH.name_of(d::LAST_BATCH))?;
    out.set_item("device", d::DEVICE)?;
    out.set_item("on_error", config::ON_ERROR.name_of(d::ON_ERROR))?;
    out.set_item("pin", config::PIN.name_of(d::PIN))?;
    out.set_item("prefetch", d::PREFETCH)?;
    out.set_item("max_held_batches", d::MAX_HELD_BATCHES)?;
    out.set_item("device_slots", d::DEVICE_SLOTS)?;
    out.set_item("exif_transpose", d::EXIF_TRANSPOSE)?;
    out.set_item("decode", d::DECODE)?;
    out.set_item("RandomResizedCrop.scale", augment::default::RRC_SCALE)?;
    out.set_item("RandomResizedCrop.ratio", augment::default::RRC_RATIO)?;
    out.set_item("RandomHorizontalFlip.p", augment::default::FLIP_P)?;
    super::ops::add_defaults(&out)?;
    Ok(out)
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

/// One engine's batch of a step, as Python receives it (see `next_step`).
type StepTuple =
    (Py<PyAny>, Option<DeviceTensorHandle>, Vec<i64>, Vec<i64>, usize, u64, Option<Py<PyDict>>, Option<Py<PyAny>>);

/// The native loader behind `trdata.Loader`.
///
/// A loader belongs to the process that created it (`pid`): in any other process (a fork child) every method
/// raises `LoaderClosedError` (`close` does nothing, `closed` is true) *before* touching `inner`, whose mutex
/// may have been held by a parent thread at fork time and then stays locked forever in the child; the child
/// also never drops `inner` (it leaks, copy-on-write memory).
///
/// Iterations: `new_iteration` hands out a token; the newest token owns the loader's epoch. `start_epoch` and
/// every wait slice of `next_step` compare their token with `iterations` while holding `inner`, so
/// an older iterator gets `StaleIteratorError` instead of a batch of the newer epoch (never interleaved).
/// `load_state_dict` supersedes the running iterators the same way (it cancels their epoch). After `close`,
/// an iterator's next call raises `LoaderClosedError` (the core refuses every call of a closed loader).
#[pyclass(module = "trdata._core", frozen)]
pub struct NativeLoader {
    inner: ManuallyDrop<Mutex<Loader>>,
    stats: std::sync::Arc<crate::stats::Stats>,
    /// Shape of one sample of each view ([C,h,w] or [h,w,C]; one entry without `views=`).
    view_shapes: Vec<[usize; 3]>,
    /// Built with `views=`: each step's images are one handle per view (a tuple in Python).
    multi_view: bool,
    /// Channels of every image (the resolved `channels=`: 1 or 3).
    channels: usize,
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

    /// The core loader, after `check_process`. Taken without holding the GIL while another thread holds it: a
    /// holder may be cancelling an epoch and waiting for a worker that needs the GIL (a Python source's read, a
    /// label map read by `NativeSource.with_targets`), so blocking here attached would deadlock all three. Ctrl-C
    /// interrupts the wait.
    fn lock(&self) -> PyResult<MutexGuard<'_, Loader>> {
        self.check_process()?;
        self.lock_detached()
    }

    /// `inner`, waited for with the GIL released ([`Self::lock`]'s reason), without the process check.
    fn lock_detached(&self) -> PyResult<MutexGuard<'_, Loader>> {
        loop {
            match self.inner.try_lock() {
                Ok(guard) => return Ok(guard),
                Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => Python::attach(|py| {
                    py.check_signals()?;
                    py.detach(|| std::thread::sleep(std::time::Duration::from_millis(1)));
                    Ok::<(), PyErr>(())
                })?,
            }
        }
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
            // Dropping joins the workers: detached, since a Python dataset's workers attach to read a sample
            // (the interpreter may also be past attaching, at exit: then as it stands).
            let inner = &mut self.inner;
            let detached = Python::try_attach(|py| {
                py.detach(|| {
                    // SAFETY: dropped exactly once, here; try_attach ran this closure, so the branch below
                    // does not run; never used again.
                    unsafe { ManuallyDrop::drop(inner) }
                })
            });
            if detached.is_none() {
                // SAFETY: dropped exactly once, here: try_attach ran nothing; never used again.
                unsafe { ManuallyDrop::drop(&mut self.inner) }
            }
        }
    }
}

#[pymethods]
impl NativeLoader {
    #[new]
    #[pyo3(signature = (source, *, batch_size, workers, shuffle, seed, reproducible, last_batch,
                        rank, world_size, pin, on_error, prefetch, max_held_batches, transforms, normalize,
                        dtype, layout, channels, devices, device_slots, cpus, max_pixels, max_scans,
                        max_memory_bytes, exif_transpose, views = None, decode = None,
                        gpu_libraries = (Vec::new(), Vec::new()), pad_to = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        source: PyRef<'_, NativeSource>,
        batch_size: &Bound<'_, PyAny>,
        workers: Option<&Bound<'_, PyAny>>,
        shuffle: bool,
        seed: &Bound<'_, PyAny>,
        reproducible: Option<bool>,
        last_batch: &Bound<'_, PyAny>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
        pin: &Bound<'_, PyAny>,
        on_error: &Bound<'_, PyAny>,
        prefetch: &Bound<'_, PyAny>,
        max_held_batches: &Bound<'_, PyAny>,
        transforms: Vec<Bound<'_, PyTuple>>,
        normalize: Option<(Vec<f64>, Vec<f64>)>,
        dtype: &Bound<'_, PyAny>,
        layout: &Bound<'_, PyAny>,
        channels: Option<&Bound<'_, PyAny>>,
        devices: Option<Vec<u32>>,
        device_slots: &Bound<'_, PyAny>,
        cpus: Option<Vec<Bound<'_, PyAny>>>,
        max_pixels: Option<&Bound<'_, PyAny>>,
        max_scans: Option<&Bound<'_, PyAny>>,
        max_memory_bytes: Option<&Bound<'_, PyAny>>,
        exif_transpose: bool,
        views: Option<Vec<Vec<Bound<'_, PyTuple>>>>,
        decode: Option<&Bound<'_, PyAny>>,
        gpu_libraries: (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>),
        pad_to: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>)>,
    ) -> PyResult<Self> {
        // Translation only: Python values into the core's types. Every rule (ranges, choices, defaults) is the
        // core's: config.rs, augment/, decode/, source/.
        let specs = transforms.iter().map(super::ops::parse_transform).collect::<PyResult<Vec<_>>>()?;
        let view_specs = views
            .map(|vs| {
                vs.iter()
                    .map(|v| v.iter().map(super::ops::parse_transform).collect::<PyResult<Vec<_>>>())
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()?;
        let ds = crate::sync::Arc::clone(&source.dataset);
        let channels = match channels {
            None => config::default::channels(ds.natural_channels()),
            Some(v) => config::check_channels(v.extract::<i128>().ok(), &shown_int(v)).py_err()?,
        };
        let output = OutputSpec {
            dtype: choice(dtype, &config::DTYPE)?,
            layout: choice(layout, &config::LAYOUT)?,
            normalize: normalize.map(|(mean, std)| Normalize::from_user(&mean, &std, channels)).transpose().py_err()?,
            pad_to: pad_to
                .map(|(h, w)| PyResult::Ok((int_arg(&h, &config::PAD_TO)?, int_arg(&w, &config::PAD_TO)?)))
                .transpose()?,
        };
        let pipeline = config::sample_views(&ds, specs, view_specs, output, channels).py_err()?;
        let cpus = cpus
            .map(|ids| ids.iter().map(|c| int_arg::<usize>(c, &config::CPU_ID)).collect::<PyResult<Vec<_>>>())
            .transpose()?;
        let limits = DecodeLimits::default();
        let cfg = LoaderConfig {
            batch_size: int_arg(batch_size, &config::BATCH_SIZE)?,
            workers: workers.map(|w| int_arg(w, &config::WORKERS)).transpose()?,
            shuffle,
            seed: int_arg(seed, &config::SEED)?,
            reproducible: reproducible.unwrap_or_else(|| config::default::reproducible(shuffle)),
            last_batch: choice(last_batch, &config::LAST_BATCH)?,
            rank: int_arg(rank, &config::RANK)?,
            world_size: int_arg(world_size, &config::WORLD_SIZE)?,
            pin: choice(pin, &config::PIN)?,
            cpus,
            on_error: choice(on_error, &config::ON_ERROR)?,
            prefetch: int_arg(prefetch, &config::PREFETCH)?,
            max_held_batches: int_arg(max_held_batches, &config::MAX_HELD_BATCHES)?,
            pipeline: pipeline.clone(),
            decode_limits: DecodeLimits {
                max_pixels: opt_int_arg(max_pixels, &decode::MAX_PIXELS, limits.max_pixels)?,
                max_scans: opt_int_arg(max_scans, &decode::MAX_SCANS, limits.max_scans)?,
                max_memory_bytes: opt_int_arg(max_memory_bytes, &decode::MAX_MEMORY_BYTES, limits.max_memory_bytes)?,
                exif_transpose,
                ..limits
            },
            decode: decode.map_or_else(|| config::DECODE.parse(config::default::DECODE).py_err(), decode_arg)?,
            gpu_libraries: config::GpuLibraries { nvjpeg: gpu_libraries.0, nvrtc: gpu_libraries.1 },
        };
        // Checked for every loader (a CPU loader does not use it, but a wrong value is wrong everywhere).
        let device_slots: usize = int_arg(device_slots, &config::DEVICE_SLOTS)?;
        config::DEVICE_SLOTS.check::<usize>(device_slots as i128).py_err()?;
        let spec = match devices {
            None => DeviceSpec::Cpu,
            Some(ordinals) => DeviceSpec::Cuda { ordinals, device_slots },
        };
        let mut loader = py.detach(|| Loader::with_devices(ds, cfg, spec)).py_err()?;
        if let Some(store) = &source.targets {
            loader.set_targets(std::sync::Arc::clone(store)).py_err()?;
        }
        if let Some(store) = &source.extras {
            loader.set_extras(std::sync::Arc::clone(store)).py_err()?;
        }
        Ok(Self {
            stats: loader.stats(),
            inner: ManuallyDrop::new(Mutex::new(loader)),
            view_shapes: pipeline.views().iter().map(|p| p.sample_shape()).collect(),
            multi_view: pipeline.is_multi(),
            channels: pipeline.first().channels().count(),
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

    /// Run `epoch` on the next iteration (its range: `config::EPOCH`).
    fn set_epoch(&self, epoch: &Bound<'_, PyAny>) -> PyResult<()> {
        let epoch = int_arg(epoch, &config::EPOCH)?;
        self.lock()?.set_epoch(epoch).py_err()
    }

    /// Worker threads (the given number, or the core's default for this loader's CPUs and devices).
    #[getter]
    fn workers(&self) -> PyResult<usize> {
        Ok(self.lock()?.workers())
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
        f.set_item("order", &st.order)?;
        f.set_item("source", &st.source)?;
        d.set_item("fingerprint", f)?;
        let delivered: Vec<Bound<'py, PyBytes>> = st.delivered.iter().map(|b| PyBytes::new(py, b)).collect();
        d.set_item("delivered", delivered)?;
        Ok(d)
    }

    /// Continue from a `state_dict()` on the next iteration (validates the fingerprint).
    #[pyo3(signature = (*, version, seed, epoch, batches, num_samples, world_size, rank, devices, batch_size,
                        last_batch, shuffle, reproducible, delivered, order = "samples".to_string(),
                        source = None))]
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
        order: String,
        source: Option<String>,
    ) -> PyResult<()> {
        self.check_process()?;
        let st = LoaderState {
            version,
            seed,
            epoch,
            batches,
            num_samples,
            world_size,
            rank,
            devices,
            batch_size,
            last_batch: LastBatch::parse(last_batch).py_err()?,
            shuffle,
            reproducible,
            order,
            source,
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

    /// Refuse now what cannot move a detection source's targets (`Loader::check_targets`: EXIF rotation, views,
    /// an op the targets cannot follow): a `ConfigError` naming the parameter.
    fn check_targets(&self) -> PyResult<()> {
        self.lock()?.check_targets().py_err()
    }

    /// Each row's whole geometry, replayed for its targets (`Loader::target_plan`): for rows `indices` of `epoch`
    /// whose images are `sizes[i] = (width, height)`, one `TargetPlan` each. A row whose transforms cannot run
    /// on its image → `ValueError` with the op's message.
    ///
    /// With a leading Mosaic, `parts[i]` holds the (width, height) of each of row i's parts (`mosaic_parts`), and
    /// `sizes` is not read.
    #[pyo3(signature = (indices, epoch, sizes, parts = None))]
    fn target_plans(
        &self,
        py: Python<'_>,
        indices: Vec<u64>,
        epoch: u64,
        sizes: Vec<(u32, u32)>,
        parts: Option<Vec<Vec<(u32, u32)>>>,
    ) -> PyResult<Vec<super::annot::TargetPlan>> {
        let loader = self.lock()?;
        py.detach(|| match &parts {
            Some(parts) => loader
                .mosaic_target_plans(&indices, epoch, parts)
                .map(|plans| plans.into_iter().map(super::annot::TargetPlan).collect()),
            None => indices
                .iter()
                .zip(&sizes)
                .map(|(&index, &(w, h))| loader.target_plan(index, epoch, w, h).map(super::annot::TargetPlan))
                .collect::<Result<Vec<_>, String>>(),
        })
        .map_err(pyo3::exceptions::PyValueError::new_err)
    }

    /// Each row's mosaic parts in `epoch` (`Loader::mosaic_parts`): the dataset indices whose images make it, the
    /// row first; `None` when the transforms start with no Mosaic.
    fn mosaic_parts(&self, indices: Vec<u64>, epoch: u64) -> PyResult<Option<Vec<Vec<u64>>>> {
        self.lock()?.mosaic_parts(&indices, epoch).map_err(pyo3::exceptions::PyValueError::new_err)
    }

    /// Shape of one sample ([C,h,w] or [h,w,C], C = 1 or 3); view 0's with `views=`.
    #[getter]
    fn sample_shape(&self) -> (usize, usize, usize) {
        let s = self.view_shapes[0];
        (s[0], s[1], s[2])
    }

    /// Shape of one sample of each view (one entry without `views=`).
    #[getter]
    fn view_shapes(&self) -> Vec<(usize, usize, usize)> {
        self.view_shapes.iter().map(|s| (s[0], s[1], s[2])).collect()
    }

    /// True when built with `views=`: each step's images are a list of handles, one per view.
    #[getter]
    fn multi_view(&self) -> bool {
        self.multi_view
    }

    /// Channels of every image: the `channels` given, or the source's own (1 for a gray source such as MNIST,
    /// else 3).
    #[getter]
    fn channels(&self) -> usize {
        self.channels
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
    /// images and labels as `DeviceTensorHandle`s. With `views=`, images is a list of such handles, one per
    /// view, all sharing the batch's one lease (host buffer or device slot).
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
                let (mut handles, labels_handle) = match b.images {
                    BatchImages::Host(lease) => {
                        let lease = Arc::new(lease);
                        let handles = (self.view_shapes.iter().enumerate())
                            .map(|(view, s)| {
                                let handle = BatchLeaseHandle {
                                    shape: vec![lease.rows, s[0], s[1], s[2]],
                                    dtype: self.dtype,
                                    view,
                                    ptr: lease.buffer().view_ptr(view) as usize,
                                    lease: ManuallyDrop::new(Arc::clone(&lease)),
                                    pid: self.pid,
                                };
                                Ok(Py::new(py, handle)?.into_any())
                            })
                            .collect::<PyResult<Vec<_>>>()?;
                        (handles, None)
                    }
                    BatchImages::Device(db) => {
                        let lease = db.lease;
                        let handles = if self.multi_view {
                            (self.view_shapes.iter().enumerate())
                                .map(|(view, &s)| {
                                    let h = DeviceTensorHandle::view_images(Arc::clone(&lease), view, s, self.dtype);
                                    Ok(Py::new(py, h)?.into_any())
                                })
                                .collect::<PyResult<Vec<_>>>()?
                        } else {
                            let h = DeviceTensorHandle::images(Arc::clone(&lease), self.view_shapes[0], self.dtype);
                            vec![Py::new(py, h)?.into_any()]
                        };
                        (handles, Some(DeviceTensorHandle::labels(lease)))
                    }
                };
                let images = if self.multi_view {
                    pyo3::types::PyList::new(py, handles)?.into_any().unbind()
                } else {
                    handles.pop().expect("one view")
                };
                let targets = b.targets.map(|t| super::targets::columns(py, t)).transpose()?;
                let extras = b.extras.map(|e| super::targets::extras_list(py, e)).transpose()?;
                Ok((images, labels_handle, b.labels, b.indices, b.valid, b.epoch, targets, extras))
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
        let inner = self.lock_detached()?;
        for (k, v) in inner.dataset().io_stats() {
            d.set_item(k, v)?;
        }
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

    /// Stop and join every worker thread; idempotent. Does nothing in a process other than the creating one. A
    /// worker still in a sample `STOP_WAIT` after the stop (a Python `__getitem__` or `PythonStep` that does not
    /// return) is left running, detached, with a `RuntimeWarning` (`Loader::close`).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.foreign_process() {
            return Ok(());
        }
        let left_running = py.detach(|| lock(&self.inner).close());
        if left_running > 0 {
            let message = format!(
                "{left_running} worker thread(s) of this Loader still in a sample {} s after close(): a dataset's \
                 __getitem__ or a PythonStep that has not returned. They are left running, detached (a thread in \
                 Python cannot be stopped): they end by themselves if the call returns, deliver nothing, and keep \
                 their epoch's memory until then; they do not keep the process from exiting",
                crate::worker::STOP_WAIT.as_secs()
            );
            let category = py.get_type::<pyo3::exceptions::PyRuntimeWarning>().into_any();
            PyErr::warn(py, &category, &std::ffi::CString::new(message).expect("no NUL in the message"), 2)?;
        }
        Ok(())
    }

    /// True once closed, and always in a process other than the creating one (no lock touched there).
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.foreign_process() || self.lock_detached()?.is_closed())
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
    /// Which view's block of the batch this handle exports (0 without `views=`).
    view: usize,
    /// Start of that block.
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
        let owner = HostView::new(Arc::clone(&self.lease), self.view);
        let export = TensorExport::new(owner, ElementType::from(self.dtype), &self.shape, None)?;
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
        config::DTYPE.name_of(self.dtype)
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
