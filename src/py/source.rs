//! Sources for Python: `NativeSource` holds one core `Dataset` (source/), built by the Python source classes
//! (`trdata.ImageFolder`, `FileList`, `Bytes`, `Arrays`, `WebDataset`, `Packed`) and handed to `NativeLoader`.
//! Only types are translated here; the rules are the core's (`source::file_list`, `source::bytes`,
//! `source::arrays`, `source::packed_dataset` and `source::packed`'s parameter tables). `PyReader` is the core's
//! `source::Reader` for a Python map-style dataset: the worker thread that needs sample i attaches to the
//! interpreter, calls the package's fetch function (`trdata.sources.python`, which calls `__getitem__` and puts
//! what it returned in one of three shapes), copies the image out and detaches.

use super::args::int_arg;
use super::errors::{IntoPyResult, to_py};
use crate::error::{ImageError, ImageErrorKind, SampleError, TrdataError};
use crate::sample::{ExtrasStore, TargetKind, TargetStore};
use crate::source::packed::{CACHE_BYTES, MODE, PREFETCH_BLOCKS, PartialOptions, WINDOW_BLOCKS};
use crate::source::{self, Dataset, PackedFile};
use crate::source::{ExternalImage, ExternalSample, Reader};
use crate::storage::disk_cache::CACHE_DISK_BYTES;
use crate::storage::{Location, STORAGE_OPTIONS, StorageOptions};
use crate::sync::Arc;
use crate::worker::MAX_FILE_BYTES;
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};
use std::ffi::OsString;
use std::path::PathBuf;

/// One dataset of the core, ready for a loader; every loader over it shares it (no copy per loader).
#[pyclass(frozen, module = "trdata._core")]
pub struct NativeSource {
    pub(super) dataset: Arc<Dataset>,
    /// The samples' targets (sample/): made by the worker beside each image.
    pub(super) targets: Option<std::sync::Arc<dyn TargetStore>>,
    /// The samples' extras (sample/extras.rs): read by the worker beside each image.
    pub(super) extras: Option<std::sync::Arc<dyn ExtrasStore>>,
}

impl NativeSource {
    fn new(dataset: Dataset) -> Self {
        Self { dataset: Arc::new(dataset), targets: None, extras: None }
    }

    /// This source (its dataset as it is) with `targets`.
    fn with_store(&self, targets: std::sync::Arc<dyn TargetStore>) -> Self {
        Self { dataset: Arc::clone(&self.dataset), targets: Some(targets), extras: self.extras.clone() }
    }

    /// This source with `dataset` (its targets kept).
    fn with_dataset(&self, dataset: Dataset) -> Self {
        Self { dataset: Arc::new(dataset), targets: self.targets.clone(), extras: self.extras.clone() }
    }
}

#[pymethods]
impl NativeSource {
    /// Encoded image files with their labels and class names (ImageFolder, FileList).
    #[staticmethod]
    fn files(paths: Vec<PathBuf>, labels: Vec<i64>, classes: Vec<OsString>) -> PyResult<Self> {
        let mut dataset = source::file_list(paths, labels).py_err()?;
        dataset.classes = classes;
        Ok(Self::new(dataset))
    }

    /// This source with each image's boxes (a detection source: XYXY float64 `(A, 4)` in source pixels, image
    /// `i`'s are rows `offsets[i]..offsets[i + 1]`), for the ops whose draw depends on them (RandomIoUCrop).
    fn with_boxes(&self, offsets: Vec<usize>, boxes: numpy::PyReadonlyArray2<'_, f64>) -> PyResult<Self> {
        let b = boxes.as_array();
        if b.ncols() != 4 {
            return Err(pyo3::exceptions::PyValueError::new_err("boxes are (A, 4)"));
        }
        let rows = b.rows().into_iter().map(|r| [r[0], r[1], r[2], r[3]]).collect();
        let table = source::annotations::BoxTable::new(self.dataset.len(), offsets, rows)
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let mut dataset = (*self.dataset).clone();
        dataset.boxes = Some(Arc::new(table));
        Ok(self.with_dataset(dataset))
    }

    /// This source with each image's (width, height) as its annotations declare them (`(N, 2)` int64): the worker
    /// that decodes image i checks its size against row i (`source::check_declared_size`), a mismatch being the
    /// sample's `Target` error.
    fn with_sizes(&self, sizes: numpy::PyReadonlyArray2<'_, i64>) -> PyResult<Self> {
        let a = sizes.as_array();
        if a.nrows() != self.dataset.len() || a.ncols() != 2 {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "sizes are ({}, 2): one (width, height) per image",
                self.dataset.len()
            )));
        }
        let side = |v: i64| u32::try_from(v).ok().filter(|&v| v > 0);
        let table = (a.rows().into_iter())
            .map(|r| side(r[0]).zip(side(r[1])))
            .collect::<Option<Vec<(u32, u32)>>>()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("a size must be 1..=2**32-1 on each side"))?;
        let mut dataset = (*self.dataset).clone();
        dataset.sizes = Some(table.into());
        Ok(self.with_dataset(dataset))
    }

    /// What this source's targets hold: "instances", "label_map", or None without targets.
    #[getter]
    fn target_kind(&self) -> Option<&'static str> {
        self.targets.as_ref().map(|t| match t.kind() {
            TargetKind::Instances => "instances",
            TargetKind::LabelMap => "label_map",
        })
    }

    /// This source with COCO's annotations as its targets (sample/coco.rs): boxes, labels, iscrowd, and
    /// instance masks and/or keypoints when asked for.
    fn with_coco_targets(
        &self,
        annotations: PyRef<'_, super::annot::CocoAnnotations>,
        masks: bool,
        keypoints: bool,
    ) -> Self {
        let store = crate::sample::coco::CocoTargets::new(std::sync::Arc::clone(&annotations.data), masks, keypoints);
        self.with_store(std::sync::Arc::new(store))
    }

    /// This source with targets whose records `make(i)` returns (py/targets.rs): `kind` "instances" (with
    /// `masks` and/or `keypoints`) or "label_map" (moved with `fill` where the output leaves the image); `name`
    /// names the source in errors.
    #[pyo3(signature = (make, kind, name, *, masks = false, keypoints = false, fill = 255))]
    fn with_python_targets(
        &self,
        make: Py<PyAny>,
        kind: &str,
        name: String,
        masks: bool,
        keypoints: bool,
        fill: u8,
    ) -> PyResult<Self> {
        let kind = match kind {
            "instances" => TargetKind::Instances,
            "label_map" => TargetKind::LabelMap,
            _ => return Err(pyo3::exceptions::PyValueError::new_err(format!("kind {kind:?}: instances or label_map"))),
        };
        let store = super::targets::PyRecords { make, kind, masks, keypoints, fill, name };
        Ok(self.with_store(std::sync::Arc::new(store)))
    }

    /// This source with extras whose value for sample `i` is `read(i, epoch)` (py/targets.rs `PyExtras`), read
    /// by the worker that makes the row: before its pixels, or after them with `after_pixels` (the image's read
    /// makes them).
    #[pyo3(signature = (read, *, after_pixels = false))]
    fn with_python_extras(&self, read: Py<PyAny>, after_pixels: bool) -> Self {
        let extras: std::sync::Arc<dyn ExtrasStore> =
            std::sync::Arc::new(super::targets::PyExtras { read, after_pixels });
        Self { dataset: Arc::clone(&self.dataset), targets: self.targets.clone(), extras: Some(extras) }
    }

    /// Encoded images in memory (`trdata.Bytes`), copied once.
    #[staticmethod]
    fn blobs(blobs: Vec<Vec<u8>>, labels: Vec<i64>) -> PyResult<Self> {
        Ok(Self::new(source::bytes(blobs, labels).py_err()?))
    }

    /// Raw uint8 pixels (`trdata.Arrays`): an (N, H, W) or (N, H, W, C) array with C 1 or 3, copied once.
    #[staticmethod]
    fn pixels(images: &Bound<'_, PyArrayDyn<u8>>, labels: Vec<i64>) -> PyResult<Self> {
        let shape = images.shape().to_vec();
        let channels = match shape.len() {
            3 => 1,
            4 => shape[3],
            _ => {
                return Err(to_py(TrdataError::config(
                    "images",
                    format!("an array of shape {shape:?} must be (N, H, W) or (N, H, W, C)"),
                )));
            }
        };
        let dim = |d: usize| u32::try_from(d).unwrap_or(u32::MAX);
        // python/trdata made it C-contiguous (np.ascontiguousarray); a view that is not is refused, never misread.
        let data = images.readonly().as_slice().map(<[u8]>::to_vec).map_err(|_| {
            to_py(TrdataError::config("images", format!("an array of shape {shape:?} must be C-contiguous")))
        })?;
        let dataset = source::arrays(data, shape[0], dim(shape[1]), dim(shape[2]), channels, labels).py_err()?;
        Ok(Self::new(dataset))
    }

    /// Image members of tar shards (`trdata.WebDataset`): sample i is `lens[i]` bytes at `offsets[i]` of
    /// `files[file_index[i]]`.
    #[staticmethod]
    fn spans(
        files: Vec<PathBuf>,
        file_index: Vec<u32>,
        offsets: Vec<u64>,
        lens: Vec<u64>,
        labels: Vec<i64>,
    ) -> PyResult<Self> {
        Ok(Self::new(source::spans(files, file_index, offsets, lens, labels).py_err()?))
    }

    /// The packed file `path` (`trdata.Packed`): a local path or a URL (`s3://`, `gs://`, `az://`, `http(s)://`,
    /// storage/) read with `storage_options`; `mode` "full" (read into memory once) or "partial" (blocks streamed
    /// through a cache of `cache_bytes`, `prefetch_blocks` read ahead in the plan's order, shuffled within windows
    /// of `window_blocks` blocks). The header and index are checked here (`SourceError` naming the file or URL).
    /// In partial mode, `cache_dir` and `cache_disk_bytes` put a local disk cache beneath the block cache
    /// (storage/disk_cache.rs).
    #[staticmethod]
    #[pyo3(signature = (
        path, mode = "full", window_blocks = None, cache_bytes = None, prefetch_blocks = None, storage_options = None,
        cache_dir = None, cache_disk_bytes = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn packed(
        py: Python<'_>,
        path: PathBuf,
        mode: &str,
        window_blocks: Option<&Bound<'_, PyAny>>,
        cache_bytes: Option<&Bound<'_, PyAny>>,
        prefetch_blocks: Option<&Bound<'_, PyAny>>,
        storage_options: Option<&Bound<'_, PyAny>>,
        cache_dir: Option<PathBuf>,
        cache_disk_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mode = MODE.parse(mode).py_err()?;
        let partial = PartialOptions {
            window_blocks: window_blocks.map(|v| int_arg::<i128>(v, &WINDOW_BLOCKS)).transpose()?,
            cache_bytes: cache_bytes.map(|v| int_arg::<i128>(v, &CACHE_BYTES)).transpose()?,
            prefetch_blocks: prefetch_blocks.map(|v| int_arg::<i128>(v, &PREFETCH_BLOCKS)).transpose()?,
        };
        let disk_bytes = cache_disk_bytes.map(|v| int_arg::<i128>(v, &CACHE_DISK_BYTES)).transpose()?;
        let location = Location::parse("path", &path).py_err()?;
        let options = storage_options.map(storage_options_arg).transpose()?.unwrap_or_default();
        // Opening reads the index (and in full mode every record): detached, so other threads run meanwhile.
        let dataset = py
            .detach(|| source::packed_dataset_at(&location, &options, mode, partial, cache_dir.as_deref(), disk_bytes))
            .py_err()?;
        Ok(Self::new(dataset))
    }

    /// Another project's record files (`trdata.Parquet`, `MDS`, `LitData`, `TFRecord`: source/records.rs and the
    /// format's file): `kind` names the format, `paths` its files (local paths or URLs; MDS and LitData: the
    /// dataset's folder), the columns as the user named them (`label_given` false: the format's default label
    /// column; given as None: no labels) and the partial cache's parameters. Opening reads the files' indexes
    /// (footers, index.json, offset tables): detached, so other threads run meanwhile.
    #[staticmethod]
    #[pyo3(signature = (
        kind, paths, image_column = None, label_column = None, label_given = false, extras = None,
        window_blocks = None, cache_bytes = None, prefetch_blocks = None, storage_options = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn records(
        py: Python<'_>,
        kind: &str,
        paths: Vec<PathBuf>,
        image_column: Option<String>,
        label_column: Option<String>,
        label_given: bool,
        extras: Option<Vec<String>>,
        window_blocks: Option<&Bound<'_, PyAny>>,
        cache_bytes: Option<&Bound<'_, PyAny>>,
        prefetch_blocks: Option<&Bound<'_, PyAny>>,
        storage_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let partial = PartialOptions {
            window_blocks: window_blocks.map(|v| int_arg::<i128>(v, &WINDOW_BLOCKS)).transpose()?,
            cache_bytes: cache_bytes.map(|v| int_arg::<i128>(v, &CACHE_BYTES)).transpose()?,
            prefetch_blocks: prefetch_blocks.map(|v| int_arg::<i128>(v, &PREFETCH_BLOCKS)).transpose()?,
        };
        let label = match (label_given, label_column) {
            (false, _) => source::LabelColumn::Default,
            (true, Some(c)) => source::LabelColumn::Named(c),
            (true, None) => source::LabelColumn::Absent,
        };
        let columns = source::Columns { image: image_column, label, extras };
        let options = storage_options.map(storage_options_arg).transpose()?.unwrap_or_default();
        let store = py.detach(|| source::formats::open(kind, &paths, &options, &columns, partial)).py_err()?;
        let extras = store.extras().map(|rows| std::sync::Arc::new(rows) as std::sync::Arc<dyn ExtrasStore>);
        let (n, classes) = (source::ImageStore::len(&store), store.catalogue().classes.clone());
        let dataset = Dataset::new(store, vec![0; n], classes);
        Ok(Self { dataset: Arc::new(dataset), targets: None, extras })
    }

    /// Sample `i`'s extras of a record source as a dict (what its row delivers; `trdata.pack` stores them), read
    /// from its unit; None for another source. A sample that cannot be read is a `DecodeError` naming it.
    fn record_extras(&self, py: Python<'_>, i: usize) -> PyResult<Option<Py<PyAny>>> {
        let Some(store) = self.dataset.store_as::<source::RecordFiles>().and_then(|s| s.extras()) else {
            return Ok(None);
        };
        if i >= self.dataset.len() {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!("sample {i} of {}", self.dataset.len())));
        }
        let row = py.detach(|| store.read(i)).map_err(|error| {
            to_py(TrdataError::Decode(SampleError { path: self.dataset.sample_name(i), index: i as u64, error }))
        })?;
        let list = super::targets::extras_list(py, vec![crate::sample::RowExtras(Box::new(row))])?;
        Ok(Some(list.bind(py).get_item(0)?.unbind()))
    }

    /// The units of a record source (`Catalogue::units`: row groups, runs of records, shards): how many.
    #[getter]
    fn record_units(&self) -> usize {
        self.dataset.store_as::<source::RecordFiles>().map_or(0, |s| s.catalogue().units.len())
    }

    /// The extra fields of a record source (`Catalogue::fields`), in the order its rows give them.
    #[getter]
    fn record_fields(&self) -> Vec<String> {
        self.dataset.store_as::<source::RecordFiles>().map_or_else(Vec::new, |s| s.catalogue().fields.clone())
    }

    /// Objects behind URLs (`trdata.FileList` of URLs, `ImageFolder` over a bucket prefix; source/remote.rs):
    /// `urls[i]` with `labels[i]`, and per object its size and ETag when listed (None: unknown), which every
    /// read checks.
    #[staticmethod]
    #[pyo3(signature = (urls, labels, classes, storage_options = None, sizes = None, etags = None))]
    fn remote_files(
        py: Python<'_>,
        urls: Vec<String>,
        labels: Vec<i64>,
        classes: Vec<OsString>,
        storage_options: Option<&Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        etags: Option<Vec<Option<String>>>,
    ) -> PyResult<Self> {
        let options = storage_options.map(storage_options_arg).transpose()?.unwrap_or_default();
        let specs = object_specs(urls, sizes, etags)?;
        let mut dataset = py.detach(|| source::object_files(specs, labels, &options)).py_err()?;
        dataset.classes = classes;
        Ok(Self::new(dataset))
    }

    /// Image members of tar shards behind URLs (`trdata.WebDataset`): sample i is `lens[i]` bytes at
    /// `offsets[i]` of `urls[file_index[i]]`, whose size and ETag (from the index) every read checks.
    #[staticmethod]
    #[pyo3(signature = (urls, file_index, offsets, lens, labels, storage_options = None, sizes = None, etags = None))]
    #[allow(clippy::too_many_arguments)]
    fn remote_spans(
        py: Python<'_>,
        urls: Vec<String>,
        file_index: Vec<u32>,
        offsets: Vec<u64>,
        lens: Vec<u64>,
        labels: Vec<i64>,
        storage_options: Option<&Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        etags: Option<Vec<Option<String>>>,
    ) -> PyResult<Self> {
        let options = storage_options.map(storage_options_arg).transpose()?.unwrap_or_default();
        let specs = object_specs(urls, sizes, etags)?;
        let dataset =
            py.detach(|| source::object_spans(specs, file_index, offsets, lens, labels, &options)).py_err()?;
        Ok(Self::new(dataset))
    }

    /// The counters of the reads of a packed source or of objects behind URLs, of a partial pack's block cache and
    /// of its disk cache (`Dataset::io_stats`: the names `Loader.stats()` shows), None for any other source.
    #[getter]
    fn storage_stats(&self) -> Option<std::collections::HashMap<&'static str, u64>> {
        let s = self.dataset.io_stats();
        (!s.is_empty()).then(|| s.into_iter().collect())
    }

    /// `len` samples made on demand by `fetch(i, epoch) -> (kind, payload, label)` (`trdata.sources.python`): kind
    /// "encoded" with the file's bytes, "path" with a file path (read by the core, bounded), "pixels" with a
    /// C-contiguous uint8 (H, W) or (H, W, C) array, C 1 or 3; or "error" with the formatted traceback of what
    /// the dataset raised. Called from the worker threads, concurrently for different indices.
    /// `identity` names the dataset in checkpoints (its class: `Reader::identity`).
    #[staticmethod]
    #[pyo3(signature = (len, fetch, identity = String::new()))]
    fn external(len: usize, fetch: Py<PyAny>, identity: String) -> PyResult<Self> {
        Ok(Self::new(source::external(Box::new(PyReader { fetch, identity }), len).py_err()?))
    }

    fn __len__(&self) -> usize {
        self.dataset.len()
    }

    /// One label per sample, in index order.
    #[getter]
    fn labels(&self) -> Vec<i64> {
        self.dataset.labels.clone()
    }

    /// Class names (`os.fsdecode` strings of the stored bytes); empty when the source has none.
    #[getter]
    fn classes(&self) -> Vec<OsString> {
        self.dataset.classes.clone()
    }

    /// A packed file's extra field names, numbered as stored (empty for any other source or a pack without).
    #[getter]
    fn extras_names(&self) -> Vec<String> {
        let pack = self.dataset.store_as::<PackedFile>();
        pack.and_then(|p| p.index().extras.as_ref()).map_or_else(Vec::new, |e| e.names.clone())
    }

    /// A packed file's extras of the records `indices`: per record a list of (field, kind code, bytes)
    /// (source/packed_extras.rs); a damaged record is a `DecodeError` naming it.
    fn packed_extras<'py>(&self, py: Python<'py>, indices: Vec<usize>) -> PyResult<Vec<Vec<StoredExtra<'py>>>> {
        let Some(p) = self.dataset.store_as::<PackedFile>() else { return Ok(vec![Vec::new(); indices.len()]) };
        let mut out = Vec::with_capacity(indices.len());
        for i in indices {
            if i >= self.dataset.len() {
                return Err(pyo3::exceptions::PyIndexError::new_err(format!("record {i} of {}", self.dataset.len())));
            }
            let entries = py.detach(|| p.extras(i)).map_err(|error| {
                TrdataError::Decode(SampleError { path: self.dataset.sample_name(i), index: i as u64, error })
            });
            let entries = entries.py_err()?;
            out.push(entries.into_iter().map(|(f, k, v)| (f, k as u8, PyBytes::new(py, &v))).collect());
        }
        Ok(out)
    }

    /// Every record's value of the extra field `name` (bytes; None where a record lacks it, or the file has no
    /// such field), read in one ordered pass (source/packed.rs `extras_field`); a damaged record is a
    /// `DecodeError` naming it. Empty for a source that is not a packed file.
    fn packed_extras_field<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let Some(p) = self.dataset.store_as::<PackedFile>() else { return Ok(Vec::new()) };
        let Some(field) = p.index().extras.as_ref().and_then(|x| x.names.iter().position(|n| n == name)) else {
            return Ok(vec![None; self.dataset.len()]);
        };
        let values = py.detach(|| p.extras_field(field as u16)).map_err(|(i, error)| {
            to_py(TrdataError::Decode(SampleError { path: self.dataset.sample_name(i), index: i as u64, error }))
        })?;
        Ok(values.into_iter().map(|v| v.map(|b| PyBytes::new(py, &b))).collect())
    }
}

/// `storage_options` as the core takes them: a dict of str keys to str, bool, int or float values (bools as
/// "true"/"false", numbers as written); anything else is a `ConfigError` naming the parameter and the key.
pub(super) fn storage_options_arg(value: &Bound<'_, PyAny>) -> PyResult<StorageOptions> {
    let bad = |m: String| to_py(TrdataError::config(STORAGE_OPTIONS, m));
    let dict = value
        .cast::<PyDict>()
        .map_err(|_| bad(format!("a {} must be a dict of str keys and values", type_name(value))))?;
    let mut pairs = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let key: String = k.extract().map_err(|_| bad(format!("the key {k} must be a str")))?;
        let text = if let Ok(b) = v.cast::<PyBool>() {
            if b.is_true() { "true".to_string() } else { "false".to_string() }
        } else if v.is_instance_of::<PyString>() {
            v.extract::<String>()?
        } else if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
            v.str()?.extract::<String>()?
        } else {
            return Err(bad(format!("{key:?}: a {} must be a str, bool, int or float", type_name(&v))));
        };
        pairs.push((key, text));
    }
    StorageOptions::new(pairs).py_err()
}

/// (url, size, etag) per object; `sizes`/`etags` one per URL when given.
fn object_specs(
    urls: Vec<String>,
    sizes: Option<Vec<Option<u64>>>,
    etags: Option<Vec<Option<String>>>,
) -> PyResult<Vec<crate::storage::objects::ObjectSpec>> {
    let n = urls.len();
    let sizes = sizes.unwrap_or_else(|| vec![None; n]);
    let etags = etags.unwrap_or_else(|| vec![None; n]);
    if sizes.len() != n || etags.len() != n {
        return Err(pyo3::exceptions::PyValueError::new_err("one size and one etag per URL"));
    }
    Ok(urls
        .into_iter()
        .zip(sizes.into_iter().zip(etags))
        .map(|(url, (size, e_tag))| crate::storage::objects::ObjectSpec { url, size, e_tag })
        .collect())
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map_or_else(|_| "value".to_string(), |n| n.to_string())
}

/// One stored extra value as Python gets it: (field, kind code, bytes).
type StoredExtra<'py> = (u16, u8, Bound<'py, PyBytes>);

/// A Python dataset as the core's [`Reader`] (the module docs).
struct PyReader {
    fetch: Py<PyAny>,
    /// The dataset's class, `module.qualname` (`Reader::identity`).
    identity: String,
}

/// A sample the dataset's code failed on, or returned something that is not an image.
fn dataset_error(message: impl Into<String>) -> ImageError {
    ImageError::new(ImageErrorKind::Dataset, message)
}

impl Reader for PyReader {
    fn read(&self, i: usize, epoch: u64, buf: &mut Vec<u8>) -> Result<ExternalSample, ImageError> {
        buf.clear();
        // Never attaches to an interpreter that is shutting down (its threads would hang there): an error then.
        Python::try_attach(|py| read_attached(py, &self.fetch, i, epoch, buf))
            .unwrap_or_else(|| Err(dataset_error("the Python interpreter is shutting down")))
    }

    fn identity(&self) -> &str {
        &self.identity
    }
}

/// [`PyReader::read`] while attached: call `fetch(i)` and copy what it returned into `buf`.
fn read_attached(
    py: Python<'_>,
    fetch: &Py<PyAny>,
    i: usize,
    epoch: u64,
    buf: &mut Vec<u8>,
) -> Result<ExternalSample, ImageError> {
    // An exception fetch did not turn into ("error", traceback) (KeyboardInterrupt, SystemExit): its text.
    let out = fetch.bind(py).call1((i, epoch)).map_err(|e| dataset_error(e.to_string()))?;
    // Never `{out}` in the message: its payload is the image (a 2 MB bytes object made a 2.26 MB message). The
    // package's fetch checks what it hands over (a label beyond int64 included), so this is a defensive check.
    let (kind, payload, label): (String, Bound<'_, PyAny>, i64) = out.extract().map_err(|e| {
        dataset_error(format!("fetch returned a {} that is not (kind, image, label): {e}", type_name(&out)))
    })?;
    let image = match kind.as_str() {
        "encoded" => {
            let bytes = payload.cast::<PyBytes>().map_err(|e| dataset_error(e.to_string()))?.as_bytes();
            if bytes.len() as u64 > MAX_FILE_BYTES {
                let message = format!("{} encoded bytes are over the {MAX_FILE_BYTES}-byte file limit", bytes.len());
                return Err(ImageError::new(ImageErrorKind::TooLarge, message));
            }
            buf.extend_from_slice(bytes);
            ExternalImage::Encoded
        }
        "path" => {
            let path = payload.extract::<PathBuf>().map_err(|e: PyErr| dataset_error(e.to_string()))?;
            // read detached: other workers' Python runs meanwhile
            py.detach(|| source::read_sample(&path, MAX_FILE_BYTES, buf))
                .map_err(|e| ImageError::new(e.kind, format!("{}: {}", path.display(), e.message)))?;
            ExternalImage::Encoded
        }
        "pixels" => pixels(&payload, buf)?,
        "error" => return Err(dataset_error(payload.extract::<String>().unwrap_or_default())),
        other => return Err(dataset_error(format!("fetch returned the unknown kind {other:?}"))),
    };
    Ok(ExternalSample { image, label })
}

/// Copy a uint8 (H, W) or (H, W, C) array into `buf`, after the core's rule for its shape
/// ([`ExternalImage::pixels`]).
fn pixels(payload: &Bound<'_, PyAny>, buf: &mut Vec<u8>) -> Result<ExternalImage, ImageError> {
    let array = payload.cast::<PyArrayDyn<u8>>().map_err(|e| dataset_error(e.to_string()))?;
    let shape = array.shape().to_vec();
    let (h, w, c) = match shape[..] {
        [h, w] => (h, w, 1),
        [h, w, c] => (h, w, c),
        _ => return Err(dataset_error(format!("an image array of shape {shape:?} must be (H, W) or (H, W, C)"))),
    };
    let image = ExternalImage::pixels(h, w, c, MAX_FILE_BYTES)?;
    let readonly = array.readonly();
    let data = readonly
        .as_slice()
        .map_err(|_| dataset_error(format!("an image array of shape {shape:?} must be C-contiguous")))?;
    buf.extend_from_slice(data);
    Ok(image)
}
