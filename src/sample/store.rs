//! sample/store — the one read of a target store: `read(i)` is sample `i`'s [`TargetRecord`]. A store is one file
//! of sample/ beside this trait, plus a constructor in the binding (py/targets.rs).

use super::TargetRecord;
use crate::error::ImageError;

/// What a store's records hold: the loader checks its transforms against it when built (a Mosaic merges both;
/// ops that cannot move targets are refused for either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// Boxes, labels, iscrowd (+ keypoints, instance masks).
    Instances,
    /// A semantic label map.
    LabelMap,
}

/// A source's targets, one record per sample (sample/mod.rs).
pub trait TargetStore: Send + Sync + std::fmt::Debug {
    /// Sample `i`'s record (`i < len`): a record that cannot be read or is not one of its image is an error
    /// naming the file (or `file#record`) and the annotation, kind `Target` (or `Corrupt` for damaged bytes).
    fn read(&self, i: usize) -> Result<TargetRecord, ImageError>;

    /// What the records hold.
    fn kind(&self) -> TargetKind;

    /// How sample `i`'s record is named in errors (its annotation file, label-map file or `file#record`).
    fn name(&self, i: usize) -> String;

    /// Whether the records carry instance masks (the batch then carries `(K, H, W)` masks per row).
    fn masks(&self) -> bool {
        false
    }

    /// Whether the records carry keypoints.
    fn keypoints(&self) -> bool {
        false
    }
}
