//! augment/mosaic — YOLO's Mosaic (ultralytics' `Mosaic._mosaic4`, re-implemented from its description): four
//! samples on one canvas, made by the worker that makes the row, before the rest of the program.
//!
//! Semantics, for `Mosaic(size = s, p, fill)` at the head of a transform list:
//! - the canvas is `2s × 2s`, filled with `fill`;
//! - the draw ([`MosaicStage::draw`]) comes from the row's own stream (`SampleRng(seed, epoch, index,
//!   Site::top(0).stream())`, the stream of list position 0), in this order: the gate `u < p`, the centre
//!   `xc` then `yc`, each uniform over the integers of `[s/2, 2s − s/2)` (ultralytics' `int(uniform(s/2, 3s/2))`),
//!   then three partner indices, each uniform over the whole source (partners may repeat and may be the row
//!   itself, as ultralytics' `randint` draws them) — or, for a source read window by window (a `partial`
//!   packed file: plan/mod.rs "Block order"), uniform over the records of the row's window in this epoch
//!   ([`Partners::Window`]: the u-th record of the window, its blocks in rank order, each block's records in
//!   file order), so a partner never costs a block the cache does not hold for the window anyway. All four are
//!   drawn whether or not the gate opens, so a row's draw never depends on another op: it is a function of
//!   (seed, epoch, index, source length) and, for windows, the epoch's block order;
//! - each part (the row first, then the partners) is resized so that its long side is `s` (timm's
//!   `ResizeKeepRatio` rule with `longest = 1`: the short side is `round(short · s / long)`, half to even;
//!   ultralytics takes `ceil`, at most one pixel more), by the folded decode's resampler (antialiased bilinear,
//!   DCT-scaled decode as the folded prefix does), then placed in its quadrant around `(xc, yc)` — the row's
//!   image with its bottom-right corner at the centre, the partners' at top-right, bottom-left, bottom-right —
//!   and cropped at the canvas ([`MosaicStage::place`]);
//! - when the gate stays shut (`p < 1`), the canvas holds the row's image alone, resized the same way and
//!   centred (offset `((2s − w) / 2, (2s − h) / 2)`, rounded down), so the output keeps its size.
//!
//! Every op after the Mosaic runs in stage 2 on the canvas (nothing folds into the parts' decodes), with the
//! positions and streams it has in the list. Targets: a part's boxes map as `x · sx + dx` ([`Part`]), are
//! clipped to its window on the canvas (the window is the canvas cut of its quadrant, so clipping to it equals
//! ultralytics' clipping to the canvas) and dropped when empty; its keypoints map the same way, with visibility 0
//! outside the window (python/trdata/sources/targets.py); its instance masks and label maps are its image's,
//! nearest-resized (ATen's index rule) into the window and nothing (0, or the ignore label) elsewhere
//! ([`super::targets::TargetPlan::mosaic_mask`], [`super::targets::TargetPlan::mosaic_dense`]); then the rest of
//! the program moves the merged targets as it moves any sample's (augment/targets.rs).

use super::geometry::{self, CompiledTransforms};
use super::ops::Mosaic;
use super::site::Site;
use super::{SampleKey, TransformSpec};
use crate::error::Result;
use crate::plan::Windows;
use crate::rng::SampleRng;

/// Where a row's partners are drawn from (module docs).
#[derive(Debug, Clone, Copy)]
pub enum Partners<'a> {
    /// The whole source of this many samples.
    Source(u64),
    /// The records of the row's window in this epoch's plan.
    Window(&'a Windows),
}

impl Partners<'_> {
    /// The source's partners: its epoch's windows when it is read window by window, else all `n` samples.
    pub fn of(n: u64, windows: Option<&Windows>) -> Partners<'_> {
        windows.map_or(Partners::Source(n), Partners::Window)
    }

    /// One partner of row `index`: a uniform draw `u` over the pool's length, then its record.
    fn draw(&self, index: u64, rng: &mut SampleRng) -> u64 {
        match self {
            Partners::Source(n) => rng.below((*n).max(1)),
            Partners::Window(w) => w.record_of(index, rng.below(w.len_of(index))),
        }
    }
}

/// A mosaic's draw for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MosaicDraw {
    /// The gate opened: four parts (else the row alone).
    pub apply: bool,
    /// Centre (x, y) on the canvas.
    pub centre: (i64, i64),
    /// The three partners' dataset indices.
    pub partners: [u64; 3],
}

/// One part of a mosaic: where its image lands on the canvas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Dataset index.
    pub index: u64,
    /// Its image's (width, height), as stored.
    pub image: (u32, u32),
    /// Its resized (width, height): long side `s`.
    pub resized: (u32, u32),
    /// Canvas position of the resized image's pixel (0, 0): canvas = resized + offset.
    pub offset: (i64, i64),
    /// The canvas window it covers, `[x0, y0, x1, y1)` (inside the canvas, possibly empty).
    pub clip: [u32; 4],
}

impl Part {
    /// The scale (x, y) from its image to its resized image.
    pub fn scale(&self) -> (f64, f64) {
        (
            f64::from(self.resized.0) / f64::from(self.image.0.max(1)),
            f64::from(self.resized.1) / f64::from(self.image.1.max(1)),
        )
    }
}

/// A compiled Mosaic: the op and the parts' folded resize.
#[derive(Debug, Clone, PartialEq)]
pub struct MosaicStage {
    /// The op as given.
    pub op: Mosaic,
    /// The parts' decode geometry: long side to `size`.
    pub resize: CompiledTransforms,
}

impl MosaicStage {
    /// Compile `op` (already checked).
    pub fn new(op: Mosaic) -> Result<Self> {
        let s = op.size;
        let resize = geometry::compile(&[TransformSpec::ResizeKeepRatio { height: s, width: s, longest: 1.0 }])?;
        Ok(Self { op, resize })
    }

    /// The canvas side, `2s`.
    pub fn canvas(&self) -> usize {
        2 * self.op.size as usize
    }

    /// Row `key`'s draw, its partners from `partners` (module docs).
    pub fn draw(&self, key: SampleKey, partners: Partners<'_>) -> MosaicDraw {
        let mut rng = SampleRng::new(key.seed, key.epoch, key.index, Site::top(0).stream());
        let apply = rng.uniform() < self.op.p;
        let s = i64::from(self.op.size);
        let (lo, span) = (s / 2, 2 * s - 2 * (s / 2));
        let mut centre = || lo + ((rng.uniform() * span as f64) as i64).min(span - 1);
        let centre = (centre(), centre());
        let partners = std::array::from_fn(|_| partners.draw(key.index, &mut rng));
        MosaicDraw { apply, centre, partners }
    }

    /// The parts' dataset indices, in placement order: the row, then its partners (the row alone when the gate
    /// stayed shut).
    pub fn indices(&self, draw: &MosaicDraw, index: u64) -> Vec<u64> {
        if draw.apply { [index].into_iter().chain(draw.partners).collect() } else { vec![index] }
    }

    /// Part `k` (0: the row, top-left; 1 top-right, 2 bottom-left, 3 bottom-right) of `draw` for its image of
    /// `(width, height)` (module docs).
    pub fn place(&self, draw: &MosaicDraw, k: usize, index: u64, (w, h): (u32, u32)) -> Part {
        let s = self.op.size;
        let (rw, rh) = geometry::resize_keep_ratio(w.max(1), h.max(1), (s, s), 1.0);
        let c = self.canvas() as i64;
        let (xc, yc) = draw.centre;
        // canvas window [x0, x1) × [y0, y1) and the image pixel at its top-left (bx, by)
        let (x0, y0, x1, y1, bx, by) = if !draw.apply {
            let (ox, oy) = ((c - rw) / 2, (c - rh) / 2);
            (ox, oy, ox + rw, oy + rh, 0, 0)
        } else {
            match k {
                0 => {
                    let (x0, y0) = ((xc - rw).max(0), (yc - rh).max(0));
                    (x0, y0, xc, yc, rw - (xc - x0), rh - (yc - y0))
                }
                1 => {
                    let (y0, x1) = ((yc - rh).max(0), (xc + rw).min(c));
                    (xc, y0, x1, yc, 0, rh - (yc - y0))
                }
                2 => {
                    let (x0, y1) = ((xc - rw).max(0), (yc + rh).min(c));
                    (x0, yc, xc, y1, rw - (xc - x0), 0)
                }
                _ => (xc, yc, (xc + rw).min(c), (yc + rh).min(c), 0, 0),
            }
        };
        Part {
            index,
            image: (w, h),
            resized: (rw as u32, rh as u32),
            offset: (x0 - bx, y0 - by),
            clip: [x0, y0, x1, y1].map(|v| v.clamp(0, c) as u32),
        }
    }

    /// Every part of `draw` for row `index`, `sizes[k]` the (width, height) of part `k`'s image (the
    /// [`Self::indices`] order).
    pub fn layout(&self, draw: &MosaicDraw, index: u64, sizes: &[(u32, u32)]) -> Vec<Part> {
        self.indices(draw, index)
            .into_iter()
            .zip(sizes)
            .enumerate()
            .map(|(k, (j, &wh))| self.place(draw, k, j, wh))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(size: u32, p: f64) -> MosaicStage {
        MosaicStage::new(Mosaic { size, p, fill: vec![114.0] }).unwrap()
    }

    #[test]
    fn parts_tile_the_canvas_around_the_centre_without_overlap() {
        let st = stage(64, 1.0);
        for index in 0..500 {
            let key = SampleKey { seed: 7, epoch: 1, index };
            let d = st.draw(key, Partners::Source(10));
            assert!(d.apply && (32..96).contains(&d.centre.0) && (32..96).contains(&d.centre.1));
            let sizes = [(100, 50), (30, 90), (64, 64), (7, 300)];
            let parts = st.layout(&d, index, &sizes);
            let mut covered = vec![0u8; 128 * 128];
            for p in &parts {
                assert_eq!(p.resized.0.max(p.resized.1), 64);
                let [x0, y0, x1, y1] = p.clip;
                // the window is a cut of the placed image
                assert!(i64::from(x0) >= p.offset.0 && i64::from(x1) <= p.offset.0 + i64::from(p.resized.0));
                assert!(i64::from(y0) >= p.offset.1 && i64::from(y1) <= p.offset.1 + i64::from(p.resized.1));
                for y in y0..y1 {
                    for x in x0..x1 {
                        covered[(y * 128 + x) as usize] += 1;
                    }
                }
            }
            assert!(covered.iter().all(|&c| c <= 1), "parts overlap");
            // the row's image ends at the centre
            assert_eq!((parts[0].clip[2], parts[0].clip[3]), (d.centre.0 as u32, d.centre.1 as u32));
        }
    }

    #[test]
    fn a_shut_gate_centres_the_row_alone() {
        let st = stage(64, 0.0);
        let d = st.draw(SampleKey { seed: 1, epoch: 0, index: 3 }, Partners::Source(5));
        assert!(!d.apply);
        assert_eq!(st.indices(&d, 3), vec![3]);
        let p = st.place(&d, 0, 3, (200, 100));
        assert_eq!((p.resized, p.offset, p.clip), ((64, 32), (32, 48), [32, 48, 96, 80]));
    }
}
