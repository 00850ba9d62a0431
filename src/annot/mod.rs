//! annot — targets beyond a class index: the annotations of detection and segmentation samples (boxes, instance
//! and semantic masks, keypoints) as the files of other projects hold them, parsed and checked before anything is
//! allocated from them. A room of the platform layer (pure functions of bytes; no data-path imports): the sources
//! (source/) read annotation files through it, the worker decodes the masks of the kept crop with it.
//!
//! - `mask`: COCO segmentations (polygons, uncompressed and compressed RLE) to masks, exactly as pycocotools'
//!   `maskApi.c` computes them, decoded only inside a crop window;
//! - `coco`: COCO `instances_*.json` / `person_keypoints_*.json` files, parsed with bounded allocations;
//! - `warp`: a sample's boxes, keypoints and masks moved with its image's geometry, as torchvision v2 moves them.

pub mod coco;
pub mod mask;
pub mod warp;
