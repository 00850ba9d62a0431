//! py/pack — the packed-file tooling of `trdata._core` (`trdata.pack`, `trdata.Packed.info/verify`, the CLI):
//!
//! - `pack(source, path, short_side, max_side, quality, workers, classes, progress, block_bytes=None) -> dict`
//!   writes `source`'s dataset into the packed file `path` (src/pack: atomic, parallel, optional re-encode);
//! - `packed_info(path) -> dict`: header, options, classes and the per-record index columns;
//! - `packed_verify(path, workers, progress) -> list[(record, message)]`: CRC + decode check of every record;
//!   `source_verify(source, workers, progress)` the same for any source's samples (record files).
//!
//! `pack` and `packed_verify` run on a helper thread while this one waits detached in short slices (bench.rs
//! `run_interruptibly`): `progress(done, total)` is called from the Python thread between slices, Ctrl-C (or an
//! exception from `progress`) cancels the work, and a cancelled pack removes its temp file before returning.

use super::args::int_arg;
use super::bench::run_interruptibly;
use super::errors::IntoPyResult;
use super::source::NativeSource;
use crate::error::TrdataError;
use crate::pack::{MAX_SIDE, PackConfig, QUALITY, SHORT_SIDE, pack_with_extras as write_pack, verify_at};
use crate::plan::claim::WORKERS;
use crate::source::packed::{BLOCK_BYTES, PackedIndex, RecordFormat, SUBSAMPLING_NAMES};
use crate::source::packed::{FLAG_CMYK, FLAG_LOSSLESS, FLAG_PROGRESSIVE};
use crate::source::packed_extras::ExtraKind;
use crate::storage::{Location, ObjectReader};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Add the pack functions to `trdata._core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pack, m)?)?;
    m.add_function(wrap_pyfunction!(packed_info, m)?)?;
    m.add_function(wrap_pyfunction!(packed_verify, m)?)?;
    m.add_function(wrap_pyfunction!(source_verify, m)?)?;
    Ok(())
}

type OptInt<'py> = Option<Bound<'py, PyAny>>;

/// A `progress(done, total)` caller for the waiting thread: calls only when `done` moved.
fn progress_tick<'a>(
    progress: &'a Option<Bound<'_, PyAny>>,
    done: &'a AtomicU64,
    total: u64,
) -> impl FnMut(Python<'_>) -> PyResult<()> + 'a {
    let mut reported = u64::MAX;
    move |_| {
        let n = done.load(Ordering::Relaxed);
        match progress {
            Some(cb) if n != reported => {
                reported = n;
                cb.call1((n, total)).map(|_| ())
            }
            _ => Ok(()),
        }
    }
}

/// The packed file `path` (a local path or a URL, storage/) opened with `storage_options`.
fn open_reader(
    py: Python<'_>,
    path: &std::path::Path,
    storage_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<ObjectReader> {
    let location = Location::parse("path", path).py_err()?;
    let options = storage_options.map(super::source::storage_options_arg).transpose()?.unwrap_or_default();
    py.detach(|| ObjectReader::open(&location, &options)).py_err()
}

/// Write `source` into the packed file `path` (`targets`: its annotations ride along as `target.*` extras, so no
/// resize; PackConfig::with_targets). Re-encodes when `short_side`, `max_side` or `quality` is given
/// (quality 90 by default); `workers` threads (default: usable CPUs); `classes` stored in the file; blocks of
/// about `block_bytes` (default 8 MiB). Returns `{"records", "bytes_in", "bytes_out", "seconds", "warnings"}`
/// (`warnings`: (record, message) of records stored although their header could not be read).
#[pyfunction]
#[pyo3(signature = (source, path, short_side, max_side, quality, workers, classes, progress, block_bytes = None, extras = None, targets = false))]
#[allow(clippy::too_many_arguments)]
fn pack<'py>(
    py: Python<'py>,
    source: PyRef<'py, NativeSource>,
    path: PathBuf,
    short_side: OptInt<'py>,
    max_side: OptInt<'py>,
    quality: OptInt<'py>,
    workers: OptInt<'py>,
    classes: Vec<OsString>,
    progress: Option<Bound<'py, PyAny>>,
    block_bytes: OptInt<'py>,
    extras: Option<Bound<'py, PyAny>>,
    targets: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let int = |v: &OptInt<'py>, p| v.as_ref().map(|v| int_arg::<i128>(v, p)).transpose();
    let cfg = PackConfig::new(
        int(&short_side, &SHORT_SIDE)?,
        int(&max_side, &MAX_SIDE)?,
        int(&quality, &QUALITY)?,
        int(&workers, &WORKERS)?,
        int(&block_bytes, &BLOCK_BYTES)?,
        classes,
    )
    .and_then(|c| c.with_targets(targets))
    .py_err()?;
    let dataset = Arc::clone(&source.dataset);
    drop(source);
    let total = dataset.len() as u64;
    let cancel = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let work = {
        let (cancel, done) = (Arc::clone(&cancel), Arc::clone(&done));
        let extras = extras.map(Bound::unbind);
        move || {
            let extras_of = |i: usize| extras_of(extras.as_ref(), i);
            write_pack(&dataset, &path, &cfg, &extras_of, &|n| {
                done.store(n, Ordering::Relaxed);
                !cancel.load(Ordering::Relaxed)
            })
        }
    };
    let summary =
        run_interruptibly(py, "trdata-pack", &cancel, work, progress_tick(&progress, &done, total))?.py_err()?;
    let d = PyDict::new(py);
    d.set_item("records", summary.records)?;
    d.set_item("bytes_in", summary.bytes_in)?;
    d.set_item("bytes_out", summary.bytes_out)?;
    d.set_item("seconds", summary.seconds)?;
    d.set_item("warnings", summary.warnings)?;
    Ok(d)
}

/// Record `i`'s extras as `extras(i)` returns them: a list of (name, kind code, bytes) (kinds:
/// source/packed_extras.rs); nothing without a callable. Called on the pack's writer thread, attached per call;
/// an exception (a value the Python side cannot store, say) is a `ConfigError` on `extras` with its text.
fn extras_of(extras: Option<&Py<PyAny>>, i: usize) -> crate::error::Result<Vec<(String, ExtraKind, Vec<u8>)>> {
    let Some(f) = extras else { return Ok(Vec::new()) };
    let fail = |m: String| TrdataError::config("extras", m);
    Python::try_attach(|py| {
        let got = f.bind(py).call1((i,)).map_err(|e| fail(e.to_string()))?;
        let got: Vec<(String, u8, Bound<'_, PyBytes>)> = got.extract().map_err(|e: PyErr| fail(e.to_string()))?;
        got.into_iter()
            .map(|(name, code, value)| {
                let kind = ExtraKind::from_code(code).ok_or_else(|| fail(format!("{name:?}: unknown kind {code}")))?;
                Ok((name, kind, value.as_bytes().to_vec()))
            })
            .collect()
    })
    .unwrap_or_else(|| Err(fail("the Python interpreter is shutting down".into())))
}

/// What the header, metadata and index of the packed file `path` say (nothing of the data region is read).
/// Per-record columns are numpy arrays (offsets, lengths, widths, heights, labels, channels: integers; progressive,
/// cmyk, lossless, gpu_decodable: bools) or lists of str (formats, subsampling).
#[pyfunction]
#[pyo3(signature = (path, storage_options = None))]
fn packed_info<'py>(
    py: Python<'py>,
    path: PathBuf,
    storage_options: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let reader = open_reader(py, &path, storage_options)?;
    let ix = py.detach(|| PackedIndex::read(&reader)).py_err()?;
    let h = &ix.header;
    let d = PyDict::new(py);
    d.set_item("version", h.version)?;
    d.set_item("records", h.records)?;
    d.set_item("blocks", h.blocks)?;
    d.set_item("block_bytes", h.block_bytes)?;
    d.set_item("file_bytes", h.file_bytes)?;
    d.set_item("data_bytes", h.data_bytes)?;
    d.set_item("index_offset", h.index_offset)?;
    d.set_item("classes", ix.meta.classes.clone())?;
    d.set_item("extras", ix.meta.extras.clone())?;
    let o = &ix.meta.options;
    let opts = PyDict::new(py);
    opts.set_item("short_side", o.short_side)?;
    opts.set_item("max_side", o.max_side)?;
    opts.set_item("quality", o.quality)?;
    opts.set_item("source", &o.source)?;
    opts.set_item("identity", &o.identity)?;
    d.set_item("options", opts)?;
    let col = |f: &dyn Fn(&crate::source::packed::IndexRow) -> i64| -> Vec<i64> { ix.rows.iter().map(f).collect() };
    let flag = |bit: u8| -> Vec<bool> { ix.rows.iter().map(|r| r.meta.flags & bit != 0).collect() };
    d.set_item("offsets", PyArray1::from_vec(py, ix.rows.iter().map(|r| r.offset).collect::<Vec<u64>>()))?;
    d.set_item("lengths", PyArray1::from_vec(py, col(&|r| i64::from(r.len))))?;
    d.set_item("widths", PyArray1::from_vec(py, col(&|r| i64::from(r.meta.width))))?;
    d.set_item("heights", PyArray1::from_vec(py, col(&|r| i64::from(r.meta.height))))?;
    d.set_item("channels", PyArray1::from_vec(py, col(&|r| i64::from(r.meta.channels))))?;
    d.set_item("labels", PyArray1::from_vec(py, col(&|r| r.label)))?;
    d.set_item("progressive", PyArray1::from_vec(py, flag(FLAG_PROGRESSIVE)))?;
    d.set_item("cmyk", PyArray1::from_vec(py, flag(FLAG_CMYK)))?;
    d.set_item("lossless", PyArray1::from_vec(py, flag(FLAG_LOSSLESS)))?;
    let gpu: Vec<bool> = ix.rows.iter().map(|r| r.meta.gpu_decodable()).collect();
    d.set_item("gpu_decodable", PyArray1::from_vec(py, gpu))?;
    let formats: Vec<&str> = ix.rows.iter().map(|r| r.meta.format.name()).collect();
    d.set_item("formats", formats)?;
    let sub: Vec<&str> =
        ix.rows
            .iter()
            .map(|r| {
                if r.meta.format == RecordFormat::Jpeg {
                    SUBSAMPLING_NAMES[usize::from(r.meta.subsampling)]
                } else {
                    ""
                }
            })
            .collect();
    d.set_item("subsampling", sub)?;
    let starts: Vec<i64> = ix.blocks.iter().map(|b| i64::from(b.first_record)).collect();
    d.set_item("block_starts", PyArray1::from_vec(py, starts))?;
    Ok(d)
}

/// Check every sample of `source` (a record source's reads and a full decode: `pack::verify_dataset`) on
/// `workers` threads. Returns (sample, message) for each bad sample.
#[pyfunction]
#[pyo3(signature = (source, workers = None, progress = None))]
fn source_verify(
    py: Python<'_>,
    source: PyRef<'_, super::source::NativeSource>,
    workers: OptInt<'_>,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<Vec<(u64, String)>> {
    let workers = workers.as_ref().map(|v| int_arg::<i128>(v, &WORKERS)).transpose()?;
    let dataset = Arc::clone(&source.dataset);
    let total = dataset.len() as u64;
    let cancel = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let work = {
        let (cancel, done) = (Arc::clone(&cancel), Arc::clone(&done));
        move || {
            crate::pack::verify_dataset(&dataset, workers, &|n| {
                done.fetch_max(n, Ordering::Relaxed);
                !cancel.load(Ordering::Relaxed)
            })
        }
    };
    run_interruptibly(py, "trdata-verify", &cancel, work, progress_tick(&progress, &done, total))?.py_err()
}

/// Check every record of the packed file `path` (CRC32C and a full decode) on `workers` threads (default:
/// usable CPUs). Returns (record, message) for each bad record; header/index problems raise `SourceError`.
#[pyfunction]
#[pyo3(signature = (path, workers = None, progress = None, storage_options = None))]
fn packed_verify(
    py: Python<'_>,
    path: PathBuf,
    workers: OptInt<'_>,
    progress: Option<Bound<'_, PyAny>>,
    storage_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(u64, String)>> {
    let workers = workers.as_ref().map(|v| int_arg::<i128>(v, &WORKERS)).transpose()?;
    let reader = open_reader(py, &path, storage_options)?;
    let total = py.detach(|| PackedIndex::read(&reader)).py_err()?.header.records;
    let cancel = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let work = {
        let (cancel, done) = (Arc::clone(&cancel), Arc::clone(&done));
        move || {
            verify_at(&reader, workers, &|n| {
                done.fetch_max(n, Ordering::Relaxed);
                !cancel.load(Ordering::Relaxed)
            })
        }
    };
    run_interruptibly(py, "trdata-verify", &cancel, work, progress_tick(&progress, &done, total))?.py_err()
}
