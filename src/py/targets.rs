//! Target stores whose records a Python source makes (sample/store.rs): YOLO's parsed label files, label-map
//! PNGs, a pack's stored target fields; and the extras store whose values a Python source reads ([`PyExtras`]:
//! WebDataset members, a pack's extras, a dataset's third item).
//! The worker that makes row i calls `make(i)` (attached to the interpreter
//! for the call only, as `PyReader` does) and translates the dict it returns into a [`TargetRecord`] here; every
//! shape and dtype is checked before it is used, a mismatch being the sample's `Target` error naming the source.
//!
//! The dict (source pixels): `image_id` (int), `size` ((width, height)), and either `boxes` (float64 `(K, 4)`
//! XYXY), `labels` and `iscrowd` (int64 `(K,)`), optionally `keypoints` (float64 `(K, P, 3)`) and `masks` (a list
//! of K pycocotools compressed RLE strings (bytes) of `height × width` masks), or `label_map` (uint8 `(H, W)`).

use crate::annot::mask::rle_from_string;
use crate::error::{ImageError, ImageErrorKind};
use crate::sample::{
    ExtrasStore, Fields, Instances, Keypoints, LabelMap, RowExtras, TargetKind, TargetRecord, TargetStore,
};
use crate::source::Value;
use crate::source::records::NativeExtras;
use numpy::{PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyAnyMethods, PyBytes, PyDict};
use std::sync::Arc;

/// A store whose record `i` is `make(i)`'s dict (module docs).
pub(super) struct PyRecords {
    pub(super) make: Py<PyAny>,
    pub(super) kind: TargetKind,
    pub(super) masks: bool,
    pub(super) keypoints: bool,
    /// The label-map fill (the label where a moved map leaves its image).
    pub(super) fill: u8,
    /// How the records are named in errors (the source: its root or file).
    pub(super) name: String,
}

impl std::fmt::Debug for PyRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyRecords({})", self.name)
    }
}

fn target_error(message: String) -> ImageError {
    ImageError::new(ImageErrorKind::Target, message)
}

impl TargetStore for PyRecords {
    fn read(&self, i: usize) -> Result<TargetRecord, ImageError> {
        // Never attaches to an interpreter that is shutting down (its threads would hang there): an error then.
        Python::try_attach(|py| {
            // A SourceError/DecodeError says what and where; another exception is named by its type.
            let out = self.make.bind(py).call1((i,)).map_err(|e| target_error(e.value(py).to_string()))?;
            let d = out
                .cast::<PyDict>()
                .map_err(|_| target_error(format!("{}: the target reader returned no dict", self.name)))?;
            self.record(d).map_err(|m| target_error(format!("{}: sample {i}: {m}", self.name)))
        })
        .unwrap_or_else(|| Err(target_error("the Python interpreter is shutting down".into())))
    }

    fn kind(&self) -> TargetKind {
        self.kind
    }

    fn name(&self, _i: usize) -> String {
        self.name.clone()
    }

    fn masks(&self) -> bool {
        self.masks
    }

    fn keypoints(&self) -> bool {
        self.keypoints
    }
}

fn item<'py>(d: &Bound<'py, PyDict>, key: &str) -> Result<Bound<'py, PyAny>, String> {
    d.get_item(key).map_err(|e| e.to_string())?.ok_or_else(|| format!("no {key}"))
}

impl PyRecords {
    fn record(&self, d: &Bound<'_, PyDict>) -> Result<TargetRecord, String> {
        let image_id: i64 = item(d, "image_id")?.extract().map_err(|_| "image_id is not an int".to_string())?;
        let size: (u32, u32) = item(d, "size")?.extract().map_err(|_| "size is not (width, height)".to_string())?;
        if size.0 == 0 || size.1 == 0 {
            return Err(format!("size {size:?} is not an image size"));
        }
        let fields = match self.kind {
            TargetKind::LabelMap => {
                let a = item(d, "label_map")?;
                let m: PyReadonlyArray2<'_, u8> =
                    a.extract().map_err(|_| "label_map is not a uint8 (H, W) array".to_string())?;
                let (h, w) = (m.shape()[0], m.shape()[1]);
                if (w, h) != (size.0 as usize, size.1 as usize) {
                    return Err(format!("a {w}x{h} label map for an image of {}x{}", size.0, size.1));
                }
                let data = m.as_array().iter().copied().collect();
                Fields::LabelMap(LabelMap { data, height: h, width: w, fill: self.fill })
            }
            TargetKind::Instances => Fields::Instances(self.instances(d, size)?),
        };
        Ok(TargetRecord { image_id, size, fields })
    }

    fn instances(&self, d: &Bound<'_, PyDict>, (w, h): (u32, u32)) -> Result<Instances, String> {
        let boxes: PyReadonlyArray2<'_, f64> =
            item(d, "boxes")?.extract().map_err(|_| "boxes is not a float64 (K, 4) array".to_string())?;
        let b = boxes.as_array();
        if b.ncols() != 4 {
            return Err(format!("boxes has shape {:?}, not (K, 4)", b.shape()));
        }
        let k = b.nrows();
        let ints = |key: &str| -> Result<Vec<i64>, String> {
            let a: PyReadonlyArray1<'_, i64> =
                item(d, key)?.extract().map_err(|_| format!("{key} is not an int64 (K,) array"))?;
            let v: Vec<i64> = a.as_array().to_vec();
            if v.len() != k {
                return Err(format!("{} {key} for {k} boxes", v.len()));
            }
            Ok(v)
        };
        let mut inst = Instances {
            boxes: b.rows().into_iter().map(|r| [r[0], r[1], r[2], r[3]]).collect(),
            labels: ints("labels")?,
            iscrowd: ints("iscrowd")?,
            ..Instances::default()
        };
        if self.keypoints {
            let kp: PyReadonlyArray3<'_, f64> = item(d, "keypoints")?
                .extract()
                .map_err(|_| "keypoints is not a float64 (K, P, 3) array".to_string())?;
            let a = kp.as_array();
            if a.shape()[0] != k || a.shape()[2] != 3 {
                return Err(format!("keypoints has shape {:?}, not ({k}, P, 3)", a.shape()));
            }
            let xyv = a
                .outer_iter()
                .flat_map(|inst| inst.outer_iter().map(|p| [p[0], p[1], p[2]]).collect::<Vec<_>>())
                .collect();
            inst.keypoints = Some(Keypoints { points: a.shape()[1], xyv });
        }
        if self.masks {
            let strings: Vec<Vec<u8>> =
                item(d, "masks")?.extract().map_err(|_| "masks is not a list of RLE strings".to_string())?;
            if strings.len() != k {
                return Err(format!("{} masks for {k} boxes", strings.len()));
            }
            let rles = (strings.iter().enumerate())
                .map(|(j, s)| rle_from_string(s, h, w).map(Arc::new).map_err(|e| format!("instance {j}: {e}")))
                .collect::<Result<Vec<_>, String>>()?;
            inst.masks = Some(rles);
        }
        Ok(inst)
    }
}

/// An extras store whose value `i` is `read(i, epoch)` (sample/extras.rs), called by the worker that makes the
/// row before its pixels, or after them when the dataset's read makes the value (`after_pixels`): a dict of field name → value, or None for
/// a sample without extras, carried to the consumer as it is. An exception is the sample's error: an `OSError`
/// (`SourceError`: a shard or pack that cannot be read) kind `Io`, a `DecodeError` of kind Corrupt (a member
/// that is not what its extension says) `Corrupt`, anything else `Dataset` (the user's code).
pub(super) struct PyExtras {
    pub(super) read: Py<PyAny>,
    /// The image's read makes the values (a dataset's third item): taken after the pixels.
    pub(super) after_pixels: bool,
}

impl std::fmt::Debug for PyExtras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PyExtras")
    }
}

impl ExtrasStore for PyExtras {
    fn read(&self, i: usize, epoch: u64) -> Result<RowExtras, ImageError> {
        Python::try_attach(|py| {
            let out = self.read.bind(py).call1((i, epoch)).map_err(|e| {
                let value = e.value(py);
                let kind = if e.is_instance_of::<pyo3::exceptions::PyOSError>(py) {
                    ImageErrorKind::Io
                } else if value.getattr("kind").and_then(|k| k.extract::<String>()).is_ok_and(|k| k == "Corrupt") {
                    ImageErrorKind::Corrupt
                } else {
                    ImageErrorKind::Dataset
                };
                ImageError::new(kind, format!("extras: {value}"))
            })?;
            Ok(RowExtras(Box::new(out.unbind())))
        })
        .unwrap_or_else(|| Err(ImageError::new(ImageErrorKind::Dataset, "the Python interpreter is shutting down")))
    }

    fn after_pixels(&self) -> bool {
        self.after_pixels
    }
}

/// A batch's extras (sample/extras.rs) for Python: each row's value as its store's reader returned it (a Python
/// reader's object), or a dict of field → value made of a record store's values (source/records.rs).
pub(super) fn extras_list(py: Python<'_>, rows: Vec<RowExtras>) -> PyResult<Py<PyAny>> {
    let values = rows.into_iter().map(|r| {
        let r = match r.0.downcast::<Py<PyAny>>() {
            Ok(v) => return Ok(*v),
            Err(other) => other,
        };
        match r.downcast::<NativeExtras>() {
            Ok(native) => {
                let d = PyDict::new(py);
                for (name, value) in native.fields.iter().zip(&native.values) {
                    d.set_item(name, value_object(py, value)?)?;
                }
                Ok(d.into_any().unbind())
            }
            Err(_) => Err(pyo3::exceptions::PyRuntimeError::new_err("an extras value of no known reader")),
        }
    });
    Ok(pyo3::types::PyList::new(py, values.collect::<PyResult<Vec<_>>>()?)?.into_any().unbind())
}

/// One record store's value as Python has it: None, int, float, bool, str, bytes or a list of them.
fn value_object(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Int(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::Float(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Text(s) => s.into_pyobject(py)?.into_any().unbind(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any().unbind(),
        Value::List(items) => {
            let items = items.iter().map(|i| value_object(py, i)).collect::<PyResult<Vec<_>>>()?;
            pyo3::types::PyList::new(py, items)?.into_any().unbind()
        }
    })
}

/// A batch's targets (sample/batch.rs) as numpy arrays, moved (no copy): `kind` ("instances" or "label_map"),
/// `image_id` int64 `(B,)`, `orig_size` and `size` int64 `(B, 2)` (height, width); instances: `counts` int64
/// `(B,)`, `boxes` float32 `(ΣK, 4)`, `labels` and `iscrowd` int64 `(ΣK,)`, with keypoints `points` int64 `(B,)`
/// and `keypoints` float32 `(ΣK·P, 3)`, with masks `masks` (a list: each row's uint8 `K·H·W`, the worker's own
/// buffer); label maps: `label_map` (a list: each row's uint8 `H·W`).
pub(super) fn columns(py: Python<'_>, batch: crate::sample::TargetBatch) -> PyResult<Py<PyDict>> {
    use numpy::{PyArray1, PyArrayMethods};
    let c = batch.columns;
    let d = PyDict::new(py);
    let pairs = |v: Vec<[i64; 2]>| {
        let n = v.len();
        PyArray1::from_vec(py, v.into_iter().flatten().collect::<Vec<_>>()).reshape([n, 2])
    };
    d.set_item("kind", if batch.kind == TargetKind::Instances { "instances" } else { "label_map" })?;
    d.set_item("image_id", PyArray1::from_vec(py, c.image_id))?;
    d.set_item("orig_size", pairs(c.orig_size)?)?;
    d.set_item("size", pairs(c.size)?)?;
    if batch.kind == TargetKind::Instances {
        let k = c.boxes.len();
        d.set_item("counts", PyArray1::from_vec(py, c.counts))?;
        d.set_item(
            "boxes",
            PyArray1::from_vec(py, c.boxes.into_iter().flatten().collect::<Vec<_>>()).reshape([k, 4])?,
        )?;
        d.set_item("labels", PyArray1::from_vec(py, c.labels))?;
        d.set_item("iscrowd", PyArray1::from_vec(py, c.iscrowd))?;
        if let Some((points, xyv)) = c.keypoints {
            let n = xyv.len();
            d.set_item("points", PyArray1::from_vec(py, points))?;
            d.set_item(
                "keypoints",
                PyArray1::from_vec(py, xyv.into_iter().flatten().collect::<Vec<_>>()).reshape([n, 3])?,
            )?;
        }
        if let Some(m) = c.masks {
            d.set_item("masks", m.into_iter().map(|m| PyArray1::from_vec(py, m)).collect::<Vec<_>>())?;
        }
    }
    if let Some(m) = c.label_map {
        d.set_item("label_map", m.into_iter().map(|m| PyArray1::from_vec(py, m)).collect::<Vec<_>>())?;
    }
    Ok(d.unbind())
}
