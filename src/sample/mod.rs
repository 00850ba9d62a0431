//! sample — what a sample carries beside its pixels: its targets, read from a target store and moved by the worker
//! that decodes its image, with the draws that worker made for the pixels.
//!
//! A detection or segmentation source gives the loader one [`TargetStore`] (store.rs): `read(i)` is sample `i`'s
//! [`TargetRecord`] in its image's pixels, as the annotations declare it (boxes XYXY, labels, iscrowd, keypoints
//! with visibility, instance masks as RLEs, or a semantic label map). A store is one file: COCO through `annot/`
//! (coco.rs); a store whose records a Python source makes (YOLO's label files, label-map PNGs, a pack's stored
//! target fields) is the binding's (py/targets.rs), called by the worker like any other.
//!
//! The worker (worker/targets.rs) reads the record before it decodes the image, replays the row's geometry
//! ([`TargetPlan`], augment/targets.rs: a pure function of seed, epoch, index and the image size, the one the
//! pixels follow) and moves the record with it ([`move_record`]): torchvision v2's kernels' semantics for boxes
//! (clamped where the op clamps; SanitizeBoundingBoxes drops instances from every field), keypoints (visibility 0
//! off the canvas), instance masks (nearest, decoded for the kept window only) and label maps (nearest, the
//! store's fill where the output leaves the image). A Mosaic row's parts are merged on the canvas first
//! ([`merge_mosaic`]). A record that cannot be read or moved is the sample's error (`ImageErrorKind::Target`),
//! under `on_error` as a bad image is.
//!
//! The moved [`RowTargets`] travel in the row's slot of the batch buffer (staging/) and reach the consumer as one
//! [`TargetBatch`] (batch.rs): flat arrays and per-row counts per field, which Python only slices into per-image
//! dicts. A sample's extras (captions, JSON, arrays) are read by the same worker from an [`ExtrasStore`]
//! (extras.rs) and travel beside the targets in the row's [`RowFields`]. A record is a list of fields per image;
//! a clip of T frames would be T records of one sample, each moved by its frame's plan, concatenated in the batch
//! with a per-frame count (the batch's layout needs no new kind).

mod batch;
pub mod coco;
mod extras;
mod store;

pub use batch::{TargetBatch, TargetColumns};
pub use extras::{ExtrasStore, RowExtras};
pub use store::{TargetKind, TargetStore};

use std::sync::Arc;

use crate::annot::mask::Rle;
use crate::augment::targets::TargetPlan;
use crate::error::{ImageError, ImageErrorKind};

/// Instance targets of one image (source pixels): `K` instances, every field of length `K`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Instances {
    /// XYXY boxes.
    pub boxes: Vec<[f64; 4]>,
    /// Class labels (COCO's category ids as torchvision's wrapper gives them).
    pub labels: Vec<i64>,
    /// COCO's iscrowd (0 for sources without it).
    pub iscrowd: Vec<i64>,
    /// Keypoints: `points` (x, y, visibility) triples per instance, row-major `(K, points)`.
    pub keypoints: Option<Keypoints>,
    /// Instance masks, each an RLE of its image's size.
    pub masks: Option<Vec<Arc<Rle>>>,
}

/// `(K, P, 3)` keypoints, flat.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Keypoints {
    /// P: points per instance.
    pub points: usize,
    /// `K · P` (x, y, visibility) triples.
    pub xyv: Vec<[f64; 3]>,
}

/// A semantic label map of one image: class indices, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelMap {
    /// `height · width` class indices.
    pub data: Vec<u8>,
    /// Height.
    pub height: usize,
    /// Width.
    pub width: usize,
    /// The label where the moved map leaves its image (255: torchvision's segmentation references' ignore_index).
    pub fill: u8,
}

/// What the targets of one image hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Fields {
    /// Instances: boxes, labels, iscrowd, keypoints, masks.
    Instances(Instances),
    /// A semantic label map.
    LabelMap(LabelMap),
}

/// One image's targets as the store holds them (source pixels).
#[derive(Debug, Clone, PartialEq)]
pub struct TargetRecord {
    /// The image's id (COCO's `image_id`; the index for sources without one).
    pub image_id: i64,
    /// The image's (width, height) the annotations refer to (the declared size the decode is checked against).
    pub size: (u32, u32),
    /// The fields.
    pub fields: Fields,
}

/// One row's targets moved onto its output canvas (what the batch carries).
#[derive(Debug, Clone, PartialEq)]
pub struct RowTargets {
    /// The image's id.
    pub image_id: i64,
    /// The source image's (height, width).
    pub orig_size: (usize, usize),
    /// The output canvas (height, width).
    pub size: (usize, usize),
    /// The moved fields.
    pub fields: MovedFields,
}

/// What the worker made of a row beside its pixels: its moved targets and its extras (extras.rs), each None
/// when the loader has no such store. Travels in the row's slot of the batch buffer (staging/).
#[derive(Debug, Default)]
pub struct RowFields {
    /// The row's targets on its canvas.
    pub targets: Option<RowTargets>,
    /// The row's extra fields.
    pub extras: Option<RowExtras>,
}

/// Moved fields of one row.
#[derive(Debug, Clone, PartialEq)]
pub enum MovedFields {
    /// `K` instances kept.
    Instances {
        /// XYXY boxes on the canvas.
        boxes: Vec<[f32; 4]>,
        /// Labels.
        labels: Vec<i64>,
        /// iscrowd.
        iscrowd: Vec<i64>,
        /// `(K, P, 3)` keypoints with visibility 0 off the canvas, and P.
        keypoints: Option<(usize, Vec<[f32; 3]>)>,
        /// `(K, H, W)` 0/1 masks on the canvas.
        masks: Option<Vec<u8>>,
    },
    /// The label map on the canvas, `H · W`.
    LabelMap(Vec<u8>),
}

fn target_error(message: String) -> ImageError {
    ImageError::new(ImageErrorKind::Target, message)
}

/// `record` moved by `plan` (module docs). `name` names the record in errors (its annotation file or pack record).
pub fn move_record(plan: &TargetPlan, record: &TargetRecord, name: &str) -> Result<RowTargets, ImageError> {
    let (w, h) = record.size;
    let fields = match &record.fields {
        Fields::Instances(inst) => move_instances(plan, inst, None, name)?,
        Fields::LabelMap(m) => {
            if (m.width, m.height) != (w as usize, h as usize) || m.data.len() != m.width * m.height {
                return Err(target_error(format!(
                    "{name}: a {}x{} label map for an image of {w}x{h}",
                    m.width, m.height
                )));
            }
            MovedFields::LabelMap(plan.dense(&m.data, (m.height, m.width), m.fill))
        }
    };
    Ok(RowTargets { image_id: record.image_id, orig_size: (h as usize, w as usize), size: plan.canvas(), fields })
}

/// Instances moved by `plan`; `parts[k]` names instance `k`'s mosaic part (its mask is that part's image's).
fn move_instances(
    plan: &TargetPlan,
    inst: &Instances,
    parts: Option<&[usize]>,
    name: &str,
) -> Result<MovedFields, ImageError> {
    let k = inst.boxes.len();
    if inst.labels.len() != k
        || inst.iscrowd.len() != k
        || inst.masks.as_ref().is_some_and(|m| m.len() != k)
        || inst.keypoints.as_ref().is_some_and(|p| p.xyv.len() != k * p.points)
    {
        return Err(target_error(format!("{name}: the instances' fields disagree on their count ({k} boxes)")));
    }
    let moved: Vec<([f64; 4], bool)> = inst.boxes.iter().map(|&b| plan.boxes(b)).collect();
    let kept: Vec<usize> = (0..k).filter(|&j| moved[j].1).collect();
    let boxes = kept.iter().map(|&j| moved[j].0.map(|v| v as f32)).collect();
    let labels = kept.iter().map(|&j| inst.labels[j]).collect();
    let iscrowd = kept.iter().map(|&j| inst.iscrowd[j]).collect();
    let keypoints = inst.keypoints.as_ref().map(|p| {
        let mut out = Vec::with_capacity(kept.len() * p.points);
        for &j in &kept {
            for &[x, y, v] in &p.xyv[j * p.points..(j + 1) * p.points] {
                let (x, y, on) = plan.keypoint(x, y);
                out.push([x as f32, y as f32, if on { v as f32 } else { 0.0 }]);
            }
        }
        (p.points, out)
    });
    let masks = match &inst.masks {
        None => None,
        Some(rles) => {
            let (oh, ow) = plan.canvas();
            let mut out = vec![0u8; kept.len() * oh * ow];
            for (r, &j) in kept.iter().enumerate() {
                let m = match parts {
                    Some(p) => plan.mosaic_mask(p[j], &rles[j]),
                    None => plan.mask(&rles[j]),
                }
                .map_err(|e| target_error(format!("{name}: instance {j}: {e}")))?;
                out[r * oh * ow..(r + 1) * oh * ow].copy_from_slice(&m);
            }
            Some(out)
        }
    };
    Ok(MovedFields::Instances { boxes, labels, iscrowd, keypoints, masks })
}

/// A Mosaic row's targets: `parts[k]` is the record of the plan's part `k` (`plan.mosaic[k]`, the row first),
/// merged on the canvas and moved (module docs of targets.py's predecessor, now here): each part's boxes scaled
/// and shifted (`x · sx + dx`), clipped to the part's window and dropped when empty (ultralytics' clip +
/// `remove_zero_area_boxes`), keypoints mapped (never clipped) with visibility 0 outside the window and padded
/// to the row's largest P; instance masks stay their part's and are placed by `TargetPlan::mosaic_mask`. Label
/// maps: each part's map nearest-resized into its window, the fill elsewhere (`TargetPlan::mosaic_dense`). The
/// row's `image_id` and `orig_size` are the row's own image's.
pub fn merge_mosaic(plan: &TargetPlan, parts: &[TargetRecord], name: &str) -> Result<RowTargets, ImageError> {
    let Some(first) = parts.first() else { return Err(target_error(format!("{name}: a mosaic row without parts"))) };
    if parts.len() != plan.mosaic.len() {
        return Err(target_error(format!("{name}: {} records for {} mosaic parts", parts.len(), plan.mosaic.len())));
    }
    let (w, h) = first.size;
    let fields = match &first.fields {
        Fields::LabelMap(m0) => {
            let mut maps = Vec::with_capacity(parts.len());
            for p in parts {
                let Fields::LabelMap(m) = &p.fields else {
                    return Err(target_error(format!("{name}: mosaic parts of different target kinds")));
                };
                maps.push((m.data.as_slice(), (m.height, m.width)));
            }
            let out = plan.mosaic_dense(&maps, m0.fill).map_err(|m| target_error(format!("{name}: {m}")))?;
            MovedFields::LabelMap(out)
        }
        Fields::Instances(i0) => {
            let mut merged = Instances {
                keypoints: i0.keypoints.as_ref().map(|_| Keypoints::default()),
                masks: i0.masks.as_ref().map(|_| Vec::new()),
                ..Instances::default()
            };
            let points = parts
                .iter()
                .map(|p| match &p.fields {
                    Fields::Instances(i) => i.keypoints.as_ref().map_or(0, |k| k.points),
                    Fields::LabelMap(_) => 0,
                })
                .max()
                .unwrap_or(0);
            let mut part_of = Vec::new();
            for (k, (p, rec)) in plan.mosaic.iter().zip(parts).enumerate() {
                let Fields::Instances(inst) = &rec.fields else {
                    return Err(target_error(format!("{name}: mosaic parts of different target kinds")));
                };
                if inst.keypoints.is_some() != merged.keypoints.is_some()
                    || inst.masks.is_some() != merged.masks.is_some()
                {
                    return Err(target_error(format!("{name}: mosaic parts with different target fields")));
                }
                let (sx, sy) = p.scale();
                let (dx, dy) = (p.offset.0 as f64, p.offset.1 as f64);
                let [x0, y0, x1, y1] = p.clip.map(f64::from);
                for j in 0..inst.boxes.len() {
                    let [a, b, c, d] = inst.boxes[j];
                    let bx = [
                        (a * sx + dx).clamp(x0, x1),
                        (b * sy + dy).clamp(y0, y1),
                        (c * sx + dx).clamp(x0, x1),
                        (d * sy + dy).clamp(y0, y1),
                    ];
                    if !(bx[2] > bx[0] && bx[3] > bx[1]) {
                        continue;
                    }
                    merged.boxes.push(bx);
                    merged.labels.push(inst.labels.get(j).copied().unwrap_or_default());
                    merged.iscrowd.push(inst.iscrowd.get(j).copied().unwrap_or_default());
                    part_of.push(k);
                    if let (Some(out), Some(kp)) = (&mut merged.keypoints, &inst.keypoints) {
                        let row = kp.xyv.get(j * kp.points..(j + 1) * kp.points).unwrap_or(&[]);
                        for q in 0..points {
                            out.xyv.push(match row.get(q) {
                                Some(&[x, y, v]) => {
                                    let (x, y) = (x * sx + dx, y * sy + dy);
                                    let inside = x >= x0 && x < x1 && y >= y0 && y < y1;
                                    [x, y, if inside { v } else { 0.0 }]
                                }
                                None => [0.0; 3],
                            });
                        }
                    }
                    if let (Some(out), Some(m)) = (&mut merged.masks, &inst.masks) {
                        let rle = m.get(j).ok_or_else(|| target_error(format!("{name}: instance {j} has no mask")))?;
                        out.push(Arc::clone(rle));
                    }
                }
            }
            if let Some(kp) = &mut merged.keypoints {
                kp.points = points;
            }
            move_instances(plan, &merged, Some(&part_of), name)?
        }
    };
    Ok(RowTargets { image_id: first.image_id, orig_size: (h as usize, w as usize), size: plan.canvas(), fields })
}
