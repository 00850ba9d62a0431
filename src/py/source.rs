//! Sources for Python: `NativeSource` holds one core `Dataset` (source/), built by the Python source classes
//! (`trdata.ImageFolder`, `FileList`, `Bytes`, `Arrays`, `WebDataset`, `Packed`) and handed to `NativeLoader`.
//! Only types are translated here; the rules are the core's (`source::file_list`, `source::bytes`,
//! `source::arrays`, `source::packed_dataset` and `source::packed`'s parameter tables).

use super::args::int_arg;
use super::errors::{IntoPyResult, to_py};
use crate::error::TrdataError;
use crate::source::packed::{CACHE_BLOCKS, MODE, WINDOW_BLOCKS};
use crate::source::{self, Dataset};
use crate::sync::Arc;
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::ffi::OsString;
use std::path::PathBuf;

/// One dataset of the core, ready for a loader; every loader over it shares it (no copy per loader).
#[pyclass(frozen, module = "trdata._core")]
pub struct NativeSource {
    pub(super) dataset: Arc<Dataset>,
}

impl NativeSource {
    fn new(dataset: Dataset) -> Self {
        Self { dataset: Arc::new(dataset) }
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

    /// The packed file `path` (`trdata.Packed`): `mode` "full" (read into memory once) or "partial" (blocks
    /// streamed through a bounded cache of `cache_blocks`, shuffled within windows of `window_blocks` blocks).
    /// The header and index are checked here (`SourceError` naming the file).
    #[staticmethod]
    #[pyo3(signature = (path, mode = "full", window_blocks = None, cache_blocks = None))]
    fn packed(
        py: Python<'_>,
        path: PathBuf,
        mode: &str,
        window_blocks: Option<&Bound<'_, PyAny>>,
        cache_blocks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mode = MODE.parse(mode).py_err()?;
        let window = window_blocks.map(|v| int_arg::<i128>(v, &WINDOW_BLOCKS)).transpose()?;
        let cache = cache_blocks.map(|v| int_arg::<i128>(v, &CACHE_BLOCKS)).transpose()?;
        // Opening reads the index (and in full mode every record): detached, so other threads run meanwhile.
        let dataset = py.detach(|| source::packed_dataset(&path, mode, window, cache)).py_err()?;
        Ok(Self::new(dataset))
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
}
