//! py/storage — object storage for the Python side of `trdata._core` (storage/): what the Python sources and
//! tools need besides the datasets (source.rs):
//!
//! - `storage_list(prefix, storage_options) -> list[(url, relative key, size, etag)]` (`trdata ls`);
//! - `storage_check_target(path, storage_options)`: a pack destination that is a URL must be writable (not plain
//!   HTTP) with valid options, checked before any work;
//! - `storage_upload(file, url, storage_options, progress)`: a finished local file to an object, one multipart
//!   upload, aborted on an error or Ctrl-C (storage/upload.rs);
//! - `scan_object_folder(prefix, storage_options)`: ImageFolder's rules over a listed prefix (source/remote.rs);
//! - `RemoteFile(url, storage_options)`: one object's size, ETag and byte ranges (WebDataset's tar index).
//!
//! Each call detaches while it waits on the network; the upload waits in short slices so Ctrl-C cancels it.

use super::bench::run_interruptibly;
use super::errors::IntoPyResult;
use super::source::storage_options_arg;
use crate::storage::{Location, ObjectReader, StorageOptions, list, upload};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Add the storage functions to `trdata._core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(storage_list, m)?)?;
    m.add_function(wrap_pyfunction!(storage_check_target, m)?)?;
    m.add_function(wrap_pyfunction!(storage_upload, m)?)?;
    m.add_function(wrap_pyfunction!(scan_object_folder, m)?)?;
    m.add_function(wrap_pyfunction!(expand_shards, m)?)?;
    m.add_function(wrap_pyfunction!(check_locations, m)?)?;
    m.add_function(wrap_pyfunction!(check_local_only, m)?)?;
    m.add_class::<RemoteFile>()?;
    Ok(())
}

/// The shard names of webdataset's pattern `pattern` (source/braces.rs).
#[pyfunction]
fn expand_shards(pattern: &str) -> PyResult<Vec<String>> {
    crate::source::braces::expand_shards(pattern).py_err()
}

/// Check a source's `paths` (parameter `parameter`) with `storage_options` (storage/locations.rs): all local or
/// all valid URLs, options only with URLs. Returns whether they are URLs.
#[pyfunction]
#[pyo3(signature = (parameter, paths, storage_options = None, prefixes = false))]
fn check_locations(
    parameter: &str,
    paths: Vec<PathBuf>,
    storage_options: Option<&Bound<'_, PyAny>>,
    prefixes: bool,
) -> PyResult<bool> {
    let opts = options(storage_options)?;
    crate::storage::locations::check_locations(parameter, &paths, &opts, prefixes).py_err()
}

/// A Python-read source (`source`) refuses a URL in `parameter` and any `storage_options` (storage/locations.rs).
#[pyfunction]
fn check_local_only(source: &str, parameter: &str, path: PathBuf, options_given: bool) -> PyResult<()> {
    crate::storage::locations::local_only(source, parameter, &path, options_given).py_err()
}

fn options(value: Option<&Bound<'_, PyAny>>) -> PyResult<StorageOptions> {
    Ok(value.map(storage_options_arg).transpose()?.unwrap_or_default())
}

/// One listed object as Python gets it: (url, relative key, size, etag).
type ListedRow = (String, String, u64, Option<String>);

/// Every object under the URL `prefix` (recursive): (url, key relative to the prefix, size, etag or None).
#[pyfunction]
#[pyo3(signature = (prefix, storage_options = None))]
fn storage_list(
    py: Python<'_>,
    prefix: PathBuf,
    storage_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<ListedRow>> {
    let location = Location::parse_prefix("path", &prefix).py_err()?;
    let opts = options(storage_options)?;
    let listed = py.detach(|| list::list_prefix("path", &location, &opts)).py_err()?;
    Ok(listed.into_iter().map(|l| (l.url, l.relative, l.size, l.e_tag)).collect())
}

/// Check a pack destination `path` before any work: a URL must be one trdata can write (not plain HTTP) with
/// options valid for its store; a local path with options is refused. Returns whether it is a URL.
#[pyfunction]
#[pyo3(signature = (path, storage_options = None))]
fn storage_check_target(path: PathBuf, storage_options: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    let location = Location::parse("path", &path).py_err()?;
    let opts = options(storage_options)?;
    upload::check_target("path", &location, &opts).py_err()?;
    Ok(location.is_remote())
}

/// Upload the local file `file` to the URL `url` (one multipart upload: nothing at the key until it completes;
/// aborted on an error, or when `progress(sent, total)` raises, or on Ctrl-C). Returns the bytes uploaded.
#[pyfunction]
#[pyo3(signature = (file, url, storage_options = None, progress = None))]
fn storage_upload(
    py: Python<'_>,
    file: PathBuf,
    url: PathBuf,
    storage_options: Option<&Bound<'_, PyAny>>,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let location = Location::parse("path", &url).py_err()?;
    let opts = options(storage_options)?;
    let total = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let cancel = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let work = {
        let (cancel, sent) = (Arc::clone(&cancel), Arc::clone(&sent));
        move || {
            upload::upload_file("path", &file, &location, &opts, &|n| {
                sent.store(n, Ordering::Relaxed);
                !cancel.load(Ordering::Relaxed)
            })
        }
    };
    let mut reported = u64::MAX;
    let tick = |_: Python<'_>| -> PyResult<()> {
        let n = sent.load(Ordering::Relaxed);
        match &progress {
            Some(cb) if n != reported => {
                reported = n;
                cb.call1((n, total)).map(|_| ())
            }
            _ => Ok(()),
        }
    };
    run_interruptibly(py, "trdata-upload", &cancel, work, tick)?.py_err()
}

/// ImageFolder's rules over the objects under the URL `prefix`: (urls, labels, classes, sizes, etags).
#[pyfunction]
#[pyo3(signature = (prefix, storage_options = None))]
#[allow(clippy::type_complexity)]
fn scan_object_folder(
    py: Python<'_>,
    prefix: PathBuf,
    storage_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Vec<String>, Vec<i64>, Vec<String>, Vec<Option<u64>>, Vec<Option<String>>)> {
    let location = Location::parse_prefix("root", &prefix).py_err()?;
    let opts = options(storage_options)?;
    let (specs, labels, classes) = py.detach(|| crate::source::object_folder(&location, &opts)).py_err()?;
    let sizes = specs.iter().map(|s| s.size).collect();
    let etags = specs.iter().map(|s| s.e_tag.clone()).collect();
    Ok((specs.into_iter().map(|s| s.url).collect(), labels, classes, sizes, etags))
}

/// One object behind a URL, opened (HEAD): its `size`, `etag` and byte ranges (`read(offset, length)`), each
/// read retried and checked against the ETag seen at open (storage/).
#[pyclass(frozen, module = "trdata._core")]
pub struct RemoteFile {
    reader: ObjectReader,
}

#[pymethods]
impl RemoteFile {
    #[new]
    #[pyo3(signature = (url, storage_options = None))]
    fn new(py: Python<'_>, url: PathBuf, storage_options: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let location = Location::parse("path", &url).py_err()?;
        let opts = options(storage_options)?;
        let reader = py.detach(|| ObjectReader::open(&location, &opts)).py_err()?;
        Ok(Self { reader })
    }

    /// Size at open.
    #[getter]
    fn size(&self) -> u64 {
        self.reader.size()
    }

    /// ETag at open (None when the store gives none).
    #[getter]
    fn etag(&self) -> Option<String> {
        self.reader.e_tag().map(str::to_string)
    }

    /// `length` bytes at `offset` (inside the size at open; at most 64 MiB a call); a failed read is a
    /// `SourceError` naming the URL and the range.
    fn read<'py>(&self, py: Python<'py>, offset: u64, length: u64) -> PyResult<Bound<'py, PyBytes>> {
        let mut buf = Vec::new();
        py.detach(|| self.reader.read_range(offset, length, 64 << 20, &mut buf))
            .map_err(|e| self.reader.source_error(e.to_string()))
            .py_err()?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Counters of its reads: requests, bytes, retries, failures.
    #[getter]
    fn stats(&self) -> std::collections::HashMap<&'static str, u64> {
        let s = self.reader.stats();
        [("requests", s.requests), ("bytes", s.bytes), ("retries", s.retries), ("failures", s.failures)].into()
    }
}
