//! py/annot — detection and segmentation targets in `trdata._core` (`trdata.CocoDetection`):
//!
//! - `CocoAnnotations(path)`: a COCO annotation file parsed by the core (annot/coco.rs), with `images()`,
//!   `annotations()` (flat numpy columns, grouped by image), `categories()`, `orphans` and `rles(annotations)`
//!   (the masks as pycocotools' RLE strings, what a pack stores);
//! - `TargetPlan`: one sample's geometry for its targets (`NativeLoader.target_plans`, augment/targets.rs), with
//!   `canvas`, `boxes(boxes)`, and its `prefix`, `mosaic`, `steps` and `draws`: what tests replay torchvision
//!   with. The targets themselves are moved by the workers (sample/), not here.

use super::errors::IntoPyResult;
use crate::annot::coco::CocoLimits;
use crate::annot::mask::{rle_from_polygon, rle_to_string};
use crate::annot::warp::AxisMap;
use crate::augment::targets::{self, Move};
use crate::error::TrdataError;
use crate::sample::coco::CocoData;
use crate::source::annotations::coco_file;
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::PathBuf;

/// Add the annotation classes to `trdata._core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CocoAnnotations>()?;
    m.add_class::<TargetPlan>()?;
    m.add_function(wrap_pyfunction!(polygon_rles, m)?)?;
    m.add_function(wrap_pyfunction!(open_regular, m)?)?;
    Ok(())
}

/// Open `path` for Python to read as the core reads every file (source/read.rs `open_regular`: never blocking on
/// a FIFO, regular files only): the file descriptor, which the caller then owns (`os.fdopen(fd, "rb")`). What
/// the sources with targets read themselves goes through it: YOLO label files, image headers, label maps. A
/// missing file is a `FileNotFoundError`; one that is not a regular file, or cannot be opened, a `SourceError`
/// naming it and saying what it is.
#[pyfunction]
pub fn open_regular(py: Python<'_>, path: PathBuf) -> PyResult<i32> {
    use std::os::fd::IntoRawFd;
    match py.detach(|| crate::source::open_regular(&path)) {
        Ok((file, _)) => Ok(file.into_raw_fd()),
        Err(e) => {
            if matches!(std::fs::metadata(&path), Err(m) if m.kind() == std::io::ErrorKind::NotFound) {
                let message = "No such file or directory";
                let name = path.into_os_string();
                return Err(pyo3::exceptions::PyFileNotFoundError::new_err((libc::ENOENT, message, name)));
            }
            Err(TrdataError::Source { path, message: e.message }).py_err()
        }
    }
}

/// A mosaic part as Python sees it: (dataset index, sx, sy, dx, dy, x0, y0, x1, y1).
type MosaicPart = (u64, f64, f64, f64, f64, u32, u32, u32, u32);

/// One sample's whole geometry for its targets (`NativeLoader.target_plans`; augment/targets.rs): the folded
/// prefix and each stage-2 op that moves pixels, with the workers' draws.
#[pyclass(frozen, module = "trdata._core")]
pub struct TargetPlan(pub targets::TargetPlan);

#[pymethods]
impl TargetPlan {
    /// The output canvas (height, width).
    #[getter]
    fn canvas(&self) -> (usize, usize) {
        self.0.canvas()
    }

    /// The prefix as (x.lo, x.hi, x.resized, x.start, x.out, y.lo, …, flip, vflip, crops): output pixel `j`
    /// along an axis is pixel `start + j` of the source span `[lo, hi)` resized to `resized` pixels.
    #[getter]
    fn prefix(&self) -> Vec<f64> {
        let g = &self.0.prefix;
        let axis = |a: &AxisMap| [a.lo as f64, a.hi as f64, a.resized as f64, a.start as f64, a.out as f64];
        let mut row = Vec::with_capacity(13);
        row.extend(axis(&g.x));
        row.extend(axis(&g.y));
        row.extend([g.flip, g.vflip, g.clamp].map(|b| f64::from(u8::from(b))));
        row
    }

    /// A leading Mosaic's parts (augment/mosaic.rs; empty without one): (dataset index, sx, sy, dx, dy, x0, y0,
    /// x1, y1): a part's source-pixel point (x, y) lands at (x·sx + dx, y·sy + dy) on the canvas, and its boxes
    /// are clipped to the window [x0, x1) × [y0, y1).
    #[getter]
    fn mosaic(&self) -> Vec<MosaicPart> {
        self.0
            .mosaic
            .iter()
            .map(|p| {
                let (sx, sy) = p.scale();
                let [x0, y0, x1, y1] = p.clip;
                (p.index, sx, sy, p.offset.0 as f64, p.offset.1 as f64, x0, y0, x1, y1)
            })
            .collect()
    }

    /// The stage-2 steps: (op, kind, numbers, (h, w) before, (h, w) after) with kind "affine" (6 numbers, the
    /// forward matrix), "perspective" (8: numerator rows, denominator), "scale" (sx, sy), "shift" (dx, dy),
    /// "hflip", "vflip", "clamp", "sanitize" (min size, min area).
    #[getter]
    fn steps(&self) -> StepRows {
        self.0
            .steps
            .iter()
            .map(|s| {
                let (kind, v): (&str, Vec<f64>) = match s.map {
                    Move::Affine(m) => ("affine", m.to_vec()),
                    Move::Perspective { theta, q } => ("perspective", theta.iter().chain(&q).copied().collect()),
                    Move::Scale(v) => ("scale", v.to_vec()),
                    Move::Shift(d) => ("shift", d.map(|v| v as f64).to_vec()),
                    Move::HFlip => ("hflip", Vec::new()),
                    Move::VFlip => ("vflip", Vec::new()),
                    Move::Clamp => ("clamp", Vec::new()),
                    Move::Sanitize { min_size, min_area } => ("sanitize", vec![min_size, min_area]),
                };
                (s.op, kind, v, s.from, s.canvas)
            })
            .collect()
    }

    /// The stage-2 ops that moved pixels: (op, numbers drawn, (h, w) before); the numbers as `_core.sample_op`
    /// gives them (`Drawn::to_vec`): RandomAffine (angle, tx, ty, scale, shear x, shear y), RandomRotation
    /// (angle), RandomPerspective (the end points, 8), RandomCrop and RandomZoomOut (padding l, t, r, b, top,
    /// left), RandomResizedCrop (top, left, h, w), ScaleJitter and RandomShortestSize (h, w), the others `[1]`.
    #[getter]
    fn draws(&self) -> Vec<(&'static str, Vec<f64>, (usize, usize))> {
        self.0
            .draws
            .iter()
            .map(|(op, d, hw)| {
                let v = d.to_vec();
                (*op, v, *hw)
            })
            .collect()
    }

    /// XYXY boxes `(K, 4)` in source pixels, moved: float32 `(K, 4)`, and bool `(K,)`: whether every
    /// `SanitizeBoundingBoxes` of the list kept the box (the caller drops the others with their labels, masks
    /// and keypoints).
    fn boxes<'py>(&self, py: Python<'py>, boxes: PyReadonlyArray2<'py, f64>) -> PyResult<MovedBoxes<'py>> {
        let b = boxes.as_array();
        if b.ncols() != 4 {
            return Err(pyo3::exceptions::PyValueError::new_err("boxes are (K, 4)"));
        }
        let moved: Vec<([f64; 4], bool)> =
            b.rows().into_iter().map(|r| self.0.boxes([r[0], r[1], r[2], r[3]])).collect();
        let flat: Vec<f32> = moved.iter().flat_map(|(b, _)| b.map(|v| v as f32)).collect();
        let keep = PyArray1::from_iter(py, moved.iter().map(|(_, k)| *k));
        Ok((PyArray1::from_vec(py, flat).reshape([b.nrows(), 4])?, keep))
    }
}

/// `TargetPlan.boxes`' result: the boxes moved and whether each is kept.
type MovedBoxes<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray1<bool>>);

/// `TargetPlan.steps` rows.
type StepRows = Vec<(&'static str, &'static str, Vec<f64>, (usize, usize), (usize, usize))>;

/// A parsed COCO annotation file (annot/coco.rs), and each annotation's mask as an RLE once it was first asked
/// for (sample/coco.rs: a polygon is rasterized once, not every epoch; RLEs are small). `CocoDetection` hands it
/// to its `NativeSource` as the loader's target store (`NativeSource.with_coco_targets`).
#[pyclass(frozen, module = "trdata._core")]
pub struct CocoAnnotations {
    pub(super) data: std::sync::Arc<CocoData>,
}

#[pymethods]
impl CocoAnnotations {
    /// Parse the COCO file `path` (detached: other threads run meanwhile). A hostile or malformed file is a
    /// `SourceError` naming the file and the element. With `masks`, every annotation's mask is made now (and
    /// kept), so that a segmentation that is no mask of its image is a `SourceError` naming the file and the
    /// annotation here, not when its batch is made.
    #[new]
    #[pyo3(signature = (path, masks = false))]
    fn new(py: Python<'_>, path: PathBuf, masks: bool) -> PyResult<Self> {
        let file = py.detach(|| coco_file(&path, &CocoLimits::default())).py_err()?;
        let data = std::sync::Arc::new(CocoData::new(file, path));
        if masks {
            py.detach(|| data.make_every_mask()).py_err()?;
        }
        Ok(Self { data })
    }

    /// The images in torchvision's order: `ids`, `widths`, `heights` (int64 arrays), `file_names` (list of str).
    fn images<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let im = self.data.file().images();
        let d = PyDict::new(py);
        d.set_item("ids", PyArray1::from_iter(py, im.iter().map(|i| i.id)))?;
        d.set_item("widths", PyArray1::from_iter(py, im.iter().map(|i| i64::from(i.width))))?;
        d.set_item("heights", PyArray1::from_iter(py, im.iter().map(|i| i64::from(i.height))))?;
        d.set_item("file_names", im.iter().map(|i| i.file_name.as_str()).collect::<Vec<_>>())?;
        Ok(d)
    }

    /// The annotations, grouped by image: `offsets` (N + 1: image k's are `offsets[k]..offsets[k + 1]`), `ids`,
    /// `category_ids` (int64), `bboxes` (float64 (A, 4), XYWH as the file has them), `iscrowd` (bool), `areas`,
    /// `keypoints_offsets` (A + 1) and `keypoints` (float32, flat x, y, v triples).
    fn annotations<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let f = self.data.file();
        let a = f.annotations();
        let d = PyDict::new(py);
        let n = f.images().len();
        let mut offsets: Vec<i64> = (0..n).map(|k| f.annotation_range(k).start as i64).collect();
        offsets.push(a.len() as i64);
        d.set_item("offsets", PyArray1::from_vec(py, offsets))?;
        d.set_item("ids", PyArray1::from_iter(py, a.iter().map(|x| x.id)))?;
        d.set_item("category_ids", PyArray1::from_iter(py, a.iter().map(|x| x.category_id)))?;
        let boxes: Vec<f64> = a.iter().flat_map(|x| x.bbox).collect();
        d.set_item("bboxes", PyArray1::from_vec(py, boxes).reshape([a.len(), 4])?)?;
        d.set_item("iscrowd", PyArray1::from_iter(py, a.iter().map(|x| x.iscrowd)))?;
        d.set_item("areas", PyArray1::from_iter(py, a.iter().map(|x| x.area)))?;
        let mut kp_offsets = vec![0i64];
        let mut kp = Vec::new();
        for x in a {
            kp.extend_from_slice(x.keypoints.as_deref().unwrap_or(&[]));
            kp_offsets.push(kp.len() as i64);
        }
        d.set_item("keypoints_offsets", PyArray1::from_vec(py, kp_offsets))?;
        d.set_item("keypoints", PyArray1::from_vec(py, kp))?;
        Ok(d)
    }

    /// The categories in file order: (id, name, supercategory, keypoint names).
    fn categories(&self) -> Vec<(i64, String, String, Vec<String>)> {
        (self.data.file().categories().iter())
            .map(|c| (c.id, c.name.clone(), c.supercategory.clone(), c.keypoints.clone()))
            .collect()
    }

    /// Annotations whose `image_id` names no image (not any image's).
    #[getter]
    fn orphans(&self) -> u64 {
        self.data.file().orphans()
    }

    /// The masks of `annotations` (indices into `annotations()`) as pycocotools' compressed RLE strings of the
    /// image's size (polygons rasterized as `frPyObjects` does): what `trdata.pack` stores for a detection
    /// source. An annotation without a segmentation, or with one that is malformed or not of its image's size, is
    /// a `SourceError` naming the file and the annotation.
    fn rles<'py>(&self, py: Python<'py>, annotations: Vec<usize>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let strings = py
            .detach(|| {
                (annotations.iter())
                    .map(|&a| Ok(rle_to_string(self.data.rle(a)?.1)))
                    .collect::<Result<Vec<_>, TrdataError>>()
            })
            .py_err()?;
        Ok(strings.iter().map(|s| PyBytes::new(py, s)).collect())
    }
}

/// Polygons (each a flat float64 array x0, y0, x1, y1, … in pixels) as compressed RLE strings of `(h, w)` masks,
/// rasterized as pycocotools' `frPyObjects` does: YOLO segment lines' instance masks. A polygon that cannot be
/// rasterized (fewer than 3 points, a size out of bounds) is a `ValueError` naming its index.
#[pyfunction]
pub fn polygon_rles<'py>(
    py: Python<'py>,
    polygons: Vec<numpy::PyReadonlyArray1<'py, f64>>,
    size: (u32, u32),
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let polys: Vec<Vec<f64>> = polygons.iter().map(|p| p.as_array().to_vec()).collect();
    let strings = py
        .detach(|| {
            polys
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    rle_from_polygon(p, size.0, size.1)
                        .map(|r| rle_to_string(&r))
                        .map_err(|e| format!("polygon {k}: {e}"))
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(strings.iter().map(|s| PyBytes::new(py, s)).collect())
}
