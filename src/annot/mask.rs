//! annot/mask — COCO segmentations to masks (module docs to come).

/// One annotation's `segmentation` as a COCO file holds it (the three forms pycocotools reads).
#[derive(Debug, Clone, PartialEq)]
pub enum Segmentation {
    /// A list of polygons, each `[x0, y0, x1, y1, …]` in pixels (COCO's non-crowd form).
    Polygons(Vec<Vec<f64>>),
    /// Uncompressed RLE: `{"size": [h, w], "counts": [n0, n1, …]}` (column-major runs, zeros first; crowd form).
    Counts {
        /// `[h, w]` as the file says.
        size: [u32; 2],
        /// The runs.
        counts: Vec<u32>,
    },
    /// Compressed RLE: `{"size": [h, w], "counts": "…"}` (pycocotools' LEB128-like string).
    Compressed {
        /// `[h, w]` as the file says.
        size: [u32; 2],
        /// The string's bytes.
        counts: Vec<u8>,
    },
}
