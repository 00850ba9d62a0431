//! sample/coco — COCO's annotations as a target store: the file parsed by annot/coco.rs (bounded, hostile input
//! refused there), each annotation's mask made once as an RLE (polygons rasterized as pycocotools does, kept:
//! RLEs are small), and sample `i`'s record read from image `i`'s annotations in file order, as torchvision's
//! `CocoDetection` + `wrap_dataset_for_transforms_v2` present them (boxes XYXY from the file's XYWH, labels the
//! category ids, iscrowd, keypoints padded to the image's largest count with zeros).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::{Fields, Instances, Keypoints, TargetKind, TargetRecord, TargetStore};
use crate::annot::coco::CocoFile;
use crate::annot::mask::Rle;
use crate::error::{ImageError, ImageErrorKind, TrdataError};

/// A parsed COCO file and its annotations' masks, made on first use.
#[derive(Debug)]
pub struct CocoData {
    file: CocoFile,
    path: PathBuf,
    rles: Vec<OnceLock<Result<Arc<Rle>, String>>>,
}

impl CocoData {
    /// `file`, parsed from `path`.
    pub fn new(file: CocoFile, path: PathBuf) -> Self {
        let rles = (0..file.annotations().len()).map(|_| OnceLock::new()).collect();
        CocoData { file, path, rles }
    }

    /// The parsed file.
    pub fn file(&self) -> &CocoFile {
        &self.file
    }

    /// The annotation file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fail(&self, message: String) -> TrdataError {
        TrdataError::Source { path: self.path.clone(), message }
    }

    /// Annotation `a`'s id and its mask as an RLE (made once: polygons are rasterized on first use). No such
    /// annotation, or one whose segmentation is no mask of its image → a `Source` error naming the file.
    pub fn rle(&self, a: usize) -> Result<(i64, &Arc<Rle>), TrdataError> {
        let f = &self.file;
        let ann = f.annotations().get(a).ok_or_else(|| self.fail(format!("has no annotation {a}")))?;
        let rle = self.rles[a].get_or_init(|| f.mask(a).map(Arc::new)).as_ref().map_err(|m| self.fail(m.clone()))?;
        Ok((ann.id, rle))
    }

    /// Every annotation's mask made (on a few threads: the work is linear in the annotations and their polygons'
    /// crossings), then the first bad one in the file's order reported: with `masks=True` a segmentation that
    /// is no mask of its image is an error when the source is made, not when its batch is.
    pub fn make_every_mask(&self) -> Result<(), TrdataError> {
        use rayon::prelude::*;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("trdata-masks{i}"))
            .build()
            .map_err(|e| TrdataError::Worker(format!("cannot start the mask-check pool: {e}")))?;
        pool.install(|| {
            (0..self.rles.len()).into_par_iter().for_each(|a| {
                let _ = self.rle(a); // made and kept, or its error kept
            })
        });
        (0..self.rles.len()).try_for_each(|a| self.rle(a).map(|_| ()))
    }
}

/// COCO as a target store: which fields a `CocoDetection` asked for.
#[derive(Debug)]
pub struct CocoTargets {
    data: Arc<CocoData>,
    masks: bool,
    keypoints: bool,
}

impl CocoTargets {
    /// The store over `data`, with instance masks and/or keypoints.
    pub fn new(data: Arc<CocoData>, masks: bool, keypoints: bool) -> Self {
        CocoTargets { data, masks, keypoints }
    }
}

impl TargetStore for CocoTargets {
    fn read(&self, i: usize) -> Result<TargetRecord, ImageError> {
        let f = &self.data.file;
        let image = f.images().get(i).ok_or_else(|| {
            ImageError::new(ImageErrorKind::Target, format!("{}: has no image {i}", self.data.path.display()))
        })?;
        let range = f.annotation_range(i);
        let anns = &f.annotations()[range.clone()];
        let mut inst = Instances {
            boxes: anns.iter().map(|a| [a.bbox[0], a.bbox[1], a.bbox[0] + a.bbox[2], a.bbox[1] + a.bbox[3]]).collect(),
            labels: anns.iter().map(|a| a.category_id).collect(),
            iscrowd: anns.iter().map(|a| i64::from(a.iscrowd)).collect(),
            ..Instances::default()
        };
        if self.keypoints {
            let points = anns.iter().map(|a| a.keypoints.as_ref().map_or(0, |k| k.len() / 3)).max().unwrap_or(0);
            let mut xyv = Vec::with_capacity(anns.len() * points);
            for a in anns {
                let k = a.keypoints.as_deref().unwrap_or(&[]);
                xyv.extend((0..points).map(|q| match k.get(3 * q..3 * q + 3) {
                    Some(t) => [f64::from(t[0]), f64::from(t[1]), f64::from(t[2])],
                    None => [0.0; 3],
                }));
            }
            inst.keypoints = Some(Keypoints { points, xyv });
        }
        if self.masks {
            let masks = range
                .map(|a| self.data.rle(a).map(|(_, r)| Arc::clone(r)))
                .collect::<Result<Vec<_>, TrdataError>>()
                .map_err(|e| ImageError::new(ImageErrorKind::Target, e.to_string()))?;
            inst.masks = Some(masks);
        }
        Ok(TargetRecord { image_id: image.id, size: (image.width, image.height), fields: Fields::Instances(inst) })
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Instances
    }

    fn name(&self, _i: usize) -> String {
        self.data.path.display().to_string()
    }

    fn masks(&self) -> bool {
        self.masks
    }

    fn keypoints(&self) -> bool {
        self.keypoints
    }
}
