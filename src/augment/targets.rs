//! augment/targets — a detection sample's boxes, keypoints and masks moved through its whole program: the folded
//! prefix's geometry ([`TargetGeometry`], annot/warp.rs), then every stage-2 op that moves pixels, replayed with
//! the worker's own draws.
//!
//! Replay. A stage-2 op's draw is a function of (seed, epoch, index, site) and the frame's size when it runs
//! ([`super::program`]): [`TargetPlan::replay`] walks the program as `program::run_op` does — the same site
//! streams, the same container decisions, the frame size tracked from the prefix's output through each op — but
//! moves no pixels. Ops that leave the geometry alone are not drawn at all (their streams are their own, so
//! skipping them changes no other draw).
//!
//! Each moving op becomes one or two [`Step`]s ([`ops::Op::target_steps`], in the op's own file) with torchvision
//! v2's kernel semantics:
//! - boxes: the four corners mapped, their min/max taken, then clamped to the new canvas by the ops whose kernel
//!   clamps (crop, pad, affine, rotate, perspective; not resize and not the flips), mirrored as `W - x`;
//! - keypoints: mapped (never clamped), mirrored as `W - 1 - x`; a point off the final canvas gets visibility 0;
//! - masks: the crops, pads, resizes and flips as exact index maps (nearest: ATen's rule,
//!   [`nearest_index`]), the warps by the op's own kernel run on the one-channel mask with nearest sampling and
//!   zero fill (torchvision's references pass `fill={Mask: 0}`; a mask never takes the image's fill).
//!
//! Ops that torchvision cannot apply to boxes (non-constant padding) or that trdata cannot replay (policies,
//! Python steps, timm ops) are refused by [`check_program`] when the loader is built, naming the op
//! ([`ops::Op::check_targets`]). Nothing here matches an op by name: each fact is a method of the op.

use super::SampleKey;
use super::geometry::SamplePlan;
use super::kernels::Frame;
use super::mosaic::Part;
use super::ops::moves::sanitize_keeps;
pub use super::ops::moves::{Move, Step, forward_affine};
use super::ops::{Drawn, OpScratch, OpSpec};
use super::program::{Program, op_rng};
use super::site::Site;
use crate::annot::mask::{MaskError, MaskErrorKind, Rle};
use crate::annot::warp::{AxisMap, TargetGeometry, gather_mask, nearest_index};

/// A sample's whole target geometry.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetPlan {
    /// The folded prefix.
    pub prefix: TargetGeometry,
    /// The stage-2 steps, in order.
    pub steps: Vec<Step>,
    /// The stage-2 ops that moved pixels, in order: (op, its draw, canvas (height, width) before).
    pub draws: Vec<(&'static str, Drawn, (usize, usize))>,
    /// The draws made from the sample's boxes (RandomIoUCrop), by site: the workers run them as drawn here.
    pub box_draws: Vec<(Site, Drawn)>,
    /// A leading Mosaic's parts (augment/mosaic.rs; empty without one): each part's boxes map onto the canvas
    /// (`x · sx + dx`, clipped to its window, empty ones dropped) before the steps move them.
    pub mosaic: Vec<Part>,
}

/// The prefix's geometry for targets: `plan` (the decode's) and whether the prefix crops.
pub fn prefix_geometry(plan: &SamplePlan, crops: bool) -> TargetGeometry {
    let axis = |a: &super::resize::Axis, mirror_first: bool| AxisMap {
        lo: a.lo,
        hi: a.hi,
        resized: a.resized,
        start: a.start,
        out: a.out_n,
        mirror_first,
    };
    let (mx, my) = plan.mirror_first;
    TargetGeometry { x: axis(&plan.x, mx), y: axis(&plan.y, my), flip: plan.flip, vflip: plan.vflip, clamp: crops }
}

/// Whether `program` has an op whose draw depends on the sample's boxes (RandomIoUCrop, inside containers too).
pub fn needs_boxes(program: &Program) -> bool {
    program.ops.iter().any(|(_, op)| op.needs_boxes())
}

/// Refuse a program whose ops cannot move a detection sample's targets (module docs): the first such op's
/// message.
pub fn check_program(program: &Program) -> Result<(), String> {
    if program.mosaic.is_some() && needs_boxes(program) {
        return Err("RandomIoUCrop cannot follow a Mosaic (its draw would need the merged boxes)".to_string());
    }
    program.ops.iter().try_for_each(|(_, op)| op.check_targets())
}

impl TargetPlan {
    /// Replay `program` for sample `key` of an image `w × h` (module docs). `channels` is the loader's (some
    /// draws see the frame's shape). An op that cannot run on this sample (a RandomCrop larger than the padded
    /// image) → its message, as the worker reports it.
    ///
    /// `boxes` (XYXY, source pixels) are the sample's, for the ops whose draw depends on them (RandomIoUCrop:
    /// refused without them).
    pub fn replay(
        program: &Program,
        key: SampleKey,
        (w, h): (u32, u32),
        channels: usize,
        boxes: Option<&[[f64; 4]]>,
    ) -> Result<Self, String> {
        let plan = program.prefix.plan(w, h, key);
        let prefix = prefix_geometry(&plan, program.prefix.crops());
        let mut out =
            TargetPlan { prefix, steps: Vec::new(), draws: Vec::new(), box_draws: Vec::new(), mosaic: Vec::new() };
        let mut hw = (plan.y.out_n, plan.x.out_n);
        // the boxes as the ops see them, moved step by step (only when an op needs them)
        let mut cur = boxes.filter(|_| needs_boxes(program)).map(|b| b.iter().map(|&b| prefix.boxes(b)).collect());
        for (pos, op) in &program.ops {
            out.replay_op(op, Site::top(*pos), key, &mut hw, channels, &mut cur)?;
        }
        Ok(out)
    }

    /// [`Self::replay`] for a program that starts with a Mosaic: row `key`, its partners from `partners`, whose
    /// parts' images ([`super::mosaic::MosaicStage::indices`], the row first) are `sizes` = (width, height) each.
    /// The wrong number of sizes → a message.
    pub fn replay_mosaic(
        program: &Program,
        key: SampleKey,
        partners: super::mosaic::Partners<'_>,
        sizes: &[(u32, u32)],
        channels: usize,
    ) -> Result<Self, String> {
        let Some(stage) = &program.mosaic else { return Err("the transforms start with no Mosaic".to_string()) };
        let draw = stage.draw(key, partners);
        let want = stage.indices(&draw, key.index).len();
        if sizes.len() != want {
            return Err(format!("row {} has {want} mosaic parts, {} sizes were given", key.index, sizes.len()));
        }
        let side = stage.canvas() as u32;
        let mut out = Self::replay(program, key, (side, side), channels, None)?;
        out.mosaic = stage.layout(&draw, key.index, sizes);
        Ok(out)
    }

    /// The output canvas (height, width).
    pub fn canvas(&self) -> (usize, usize) {
        self.steps.last().map_or((self.prefix.y.out, self.prefix.x.out), |s| s.canvas)
    }

    fn replay_op(
        &mut self,
        op: &OpSpec,
        site: Site,
        key: SampleKey,
        hw: &mut (usize, usize),
        c: usize,
        cur: &mut Option<Vec<[f64; 4]>>,
    ) -> Result<(), String> {
        if op.leaves_geometry() {
            return Ok(());
        }
        let mut rng = op_rng(key, site);
        let drawn = if op.needs_boxes() && op.inner().is_none() {
            let boxes = cur.as_deref().ok_or_else(|| {
                format!("{} draws from the sample's boxes: it runs on a detection source only", op.name())
            })?;
            let d = op.draw_from_boxes(&mut rng, *hw, boxes);
            self.box_draws.push((site, d.clone()));
            d
        } else {
            op.sample(&mut rng, (hw.0, hw.1, c))?
        };
        if drawn == Drawn::Skip {
            return Ok(());
        }
        if let Some(inner) = op.inner() {
            for i in op.picked(&drawn) {
                self.replay_op(&inner[i], site.child(i), key, hw, c, cur)?;
            }
            return Ok(());
        }
        self.draws.push((op.name(), drawn.clone(), *hw));
        for step in op.target_steps(&drawn, *hw)? {
            *hw = step.canvas;
            if let Some(cur) = cur {
                cur.iter_mut().for_each(|b| *b = step.boxes(*b));
            }
            self.steps.push(step);
        }
        Ok(())
    }

    /// Box `[x1, y1, x2, y2]` (source pixels) in output pixels, and whether every `SanitizeBoundingBoxes` kept
    /// it.
    pub fn boxes(&self, b: [f64; 4]) -> ([f64; 4], bool) {
        let mut b = self.prefix.boxes(b);
        let mut keep = true;
        for s in &self.steps {
            b = s.boxes(b);
            if let Move::Sanitize { min_size, min_area } = s.map {
                keep &= sanitize_keeps(b, s.canvas, min_size, min_area);
            }
        }
        (b, keep)
    }

    /// Keypoint `(x, y)` (source pixels) in output pixels, and whether it lies on the output canvas.
    pub fn keypoint(&self, x: f64, y: f64) -> (f64, f64, bool) {
        let (mut px, mut py, _) = self.prefix.keypoint(x, y);
        for s in &self.steps {
            (px, py) = s.point(px, py, true);
        }
        let (h, w) = self.canvas();
        (px, py, (0.0..w as f64).contains(&px) && (0.0..h as f64).contains(&py))
    }

    /// The mask `rle` (of the source image) on the output canvas, row-major 0/1 (`canvas()` sized): nearest
    /// everywhere, 0 where the output leaves the image ([`Self::gather`]).
    pub fn mask(&self, rle: &Rle) -> Result<Vec<u8>, MaskError> {
        let (cols, rows) = self.prefix.source_indices();
        self.gather(rle, &cols, &rows)
    }

    /// The instance mask `rle` of mosaic part `part` (`self.mosaic[part]`; `rle` of its image's size) on the
    /// output canvas, row-major 0/1: canvas column `x` reads the part's source column
    /// `nearest_index(x - offset.x, image.w, resized.w)` when `x` is inside its window `[clip.x0, clip.x1)`, none
    /// (0) outside; rows likewise. The prefix (the identity on the canvas for a mosaic program) and the steps then
    /// move it as [`Self::mask`] moves any mask. An RLE of another size is read as [`Self::mask`] reads one
    /// (pixels past it are 0). No such part → a `MaskError`.
    pub fn mosaic_mask(&self, part: usize, rle: &Rle) -> Result<Vec<u8>, MaskError> {
        let p = self.mosaic.get(part).ok_or_else(|| MaskError {
            kind: MaskErrorKind::Window,
            message: format!("no mosaic part {part} (the row has {})", self.mosaic.len()),
        })?;
        let (cols, rows) = self.part_indices(p);
        self.gather(rle, &cols, &rows)
    }

    /// Each prefix output column's source column in mosaic part `p`'s image, and each row's: prefix index →
    /// canvas index `x` → `nearest_index(x - offset.x, image.w, resized.w)` when `x` is inside the part's window
    /// `[clip.x0, clip.x1)`, None outside (and where the prefix pads).
    fn part_indices(&self, p: &Part) -> (Vec<Option<i64>>, Vec<Option<i64>>) {
        let (pc, pr) = self.prefix.source_indices();
        let axis = |v: Vec<Option<i64>>, lo: u32, hi: u32, offset: i64, n: u32, m: u32| -> Vec<Option<i64>> {
            let window = i64::from(lo)..i64::from(hi);
            let map = |c: i64| nearest_index(c - offset, i64::from(n), i64::from(m));
            v.into_iter().map(|c| c.filter(|c| window.contains(c)).map(map)).collect()
        };
        let [x0, y0, x1, y1] = p.clip;
        (axis(pc, x0, x1, p.offset.0, p.image.0, p.resized.0), axis(pr, y0, y1, p.offset.1, p.image.1, p.resized.1))
    }

    /// The mask `rle` on the output canvas, given the prefix's output columns' and rows' source indices
    /// (`cols`, `rows`; None: nothing, 0). Without warps every step maps each axis on its own: the output's
    /// source rows and columns are composed through the steps and only the window they read is decoded (the
    /// common detection recipes); with a warp, the prefix-level mask runs through the steps.
    fn gather(&self, rle: &Rle, cols: &[Option<i64>], rows: &[Option<i64>]) -> Result<Vec<u8>, MaskError> {
        if !self.steps.iter().any(Step::is_warp) {
            let (oh, ow) = self.canvas();
            let through = |j: usize, axis: usize, prefix: &[Option<i64>]| -> Option<i64> {
                let mut j = j;
                for s in self.steps.iter().rev() {
                    let (n, m) = if axis == 0 { (s.from.1, s.canvas.1) } else { (s.from.0, s.canvas.0) };
                    j = match s.map {
                        Move::Scale(_) => nearest_index(j as i64, n as i64, m as i64) as usize,
                        Move::Shift(d) => {
                            let v = j as i64 - d[axis];
                            if !(0..n as i64).contains(&v) {
                                return None;
                            }
                            v as usize
                        }
                        Move::HFlip if axis == 0 => n - 1 - j,
                        Move::VFlip if axis == 1 => n - 1 - j,
                        _ => j,
                    };
                }
                prefix[j]
            };
            let out_cols: Vec<Option<i64>> = (0..ow).map(|j| through(j, 0, cols)).collect();
            let out_rows: Vec<Option<i64>> = (0..oh).map(|i| through(i, 1, rows)).collect();
            let mut out = vec![0u8; oh * ow];
            gather_mask(rle, &out_cols, &out_rows, &mut out)?;
            return Ok(out);
        }
        let (ph, pw) = (rows.len(), cols.len());
        let mut frame = Frame { buf: vec![0; ph * pw], h: ph, w: pw, c: 1 };
        gather_mask(rle, cols, rows, &mut frame.buf)?;
        Ok(self.move_frame(frame, 0))
    }

    /// A dense label map `src` (`h × w`, row-major, of the source image: a semantic-segmentation target) on the
    /// output canvas: nearest everywhere, `fill` where the output leaves the image (255, the usual
    /// `ignore_index`, in torchvision's segmentation references).
    pub fn dense(&self, src: &[u8], (h, w): (usize, usize), fill: u8) -> Vec<u8> {
        let (ph, pw) = (self.prefix.y.out, self.prefix.x.out);
        let mut frame = Frame { buf: vec![0; ph * pw], h: ph, w: pw, c: 1 };
        self.prefix.dense(src, (h, w), fill, &mut frame.buf);
        self.move_frame(frame, fill)
    }

    /// A mosaic row's dense label map (semantic segmentation) on the output canvas: `maps[k]` is part `k`'s
    /// (`self.mosaic[k]`; `(height, width)` its image's, row-major), each nearest-resized as
    /// [`Self::mosaic_mask`] resizes a mask and set inside its window; `fill` elsewhere on the canvas and where
    /// the output leaves it. A map per part of its image's size, else a message.
    pub fn mosaic_dense(&self, maps: &[(&[u8], (usize, usize))], fill: u8) -> Result<Vec<u8>, String> {
        if maps.len() != self.mosaic.len() {
            return Err(format!("{} label maps for {} mosaic parts", maps.len(), self.mosaic.len()));
        }
        let (ph, pw) = (self.prefix.y.out, self.prefix.x.out);
        let mut frame = Frame { buf: vec![fill; ph * pw], h: ph, w: pw, c: 1 };
        for (k, (p, &(src, (h, w)))) in self.mosaic.iter().zip(maps).enumerate() {
            if (w, h) != (p.image.0 as usize, p.image.1 as usize) || src.len() != h * w || h == 0 || w == 0 {
                return Err(format!(
                    "mosaic part {k}: a {w}x{h} label map ({} bytes) for its {}x{} image",
                    src.len(),
                    p.image.0,
                    p.image.1
                ));
            }
            let (cols, rows) = self.part_indices(p);
            for (i, r) in rows.iter().enumerate() {
                let Some(r) = r else { continue };
                let row = &src[*r as usize * w..(*r as usize + 1) * w];
                for (d, c) in frame.buf[i * pw..(i + 1) * pw].iter_mut().zip(&cols) {
                    if let Some(c) = c {
                        *d = row[*c as usize];
                    }
                }
            }
        }
        Ok(self.move_frame(frame, fill))
    }

    /// A one-channel frame (the prefix's output) through the stage-2 steps.
    fn move_frame(&self, mut frame: Frame, fill: u8) -> Vec<u8> {
        let mut scratch = OpScratch::default();
        for s in &self.steps {
            s.move_mask(&mut frame, &mut scratch, fill);
        }
        frame.buf.truncate(frame.h * frame.w);
        frame.buf
    }
}

#[cfg(test)]
mod tests {
    use super::super::warp;
    use super::*;
    use crate::augment::ops::Move;

    #[test]
    fn forward_affine_inverts_the_image_map() {
        // the image kernel's inverse map (about the centre, relative) undoes the boxes' forward map (absolute)
        let (w, h) = (40.0, 30.0);
        let f = forward_affine([w * 0.5, h * 0.5], 17.0, [3.0, -2.0], 1.3, [5.0, -4.0]);
        let inv = warp::inverse_affine([0.0, 0.0], 17.0, [3.0, -2.0], 1.3, [5.0, -4.0]);
        for (x, y) in [(0.0, 0.0), (12.5, 7.0), (39.0, 29.0)] {
            let (ox, oy) = (f[0] * x + f[1] * y + f[2], f[3] * x + f[4] * y + f[5]);
            // the image map works about the centre: shift to centred coordinates and back
            let (cx, cy) = (ox - w * 0.5, oy - h * 0.5);
            let (ix, iy) = (inv[0] * cx + inv[1] * cy + inv[2] + w * 0.5, inv[3] * cx + inv[4] * cy + inv[5] + h * 0.5);
            assert!((ix - x).abs() < 1e-9 && (iy - y).abs() < 1e-9, "{x},{y} → {ix},{iy}");
        }
    }

    #[test]
    fn a_mosaic_parts_mask_and_label_map_are_their_nearest_resize_pasted_in_its_window_then_moved() {
        use super::super::TransformSpec;
        use super::super::ops::Mosaic;
        use crate::annot::mask::{decode, rle_from_polygon};
        // Mosaic(32) → 64×64 canvas, mirrored, then a centre crop of 50×70 (rows cropped by 7, columns padded by
        // 3 on each side: torchvision's center_crop rule)
        let t = [
            TransformSpec::Op(OpSpec::Mosaic(Mosaic { size: 32, p: 1.0, fill: vec![114.0] })),
            TransformSpec::RandomHorizontalFlip { p: 1.0 },
            TransformSpec::CenterCrop { height: 50, width: 70 },
        ];
        let program = super::super::program::compile(&t).unwrap();
        let sizes = [(40, 30), (17, 45), (64, 64), (90, 20)];
        let (oh, ow, c) = (50usize, 70usize, 64usize);
        let mut clipped = 0;
        // mirrored, then cropped / padded with `fill`
        let moved = |canvas: &[u8], fill: u8| -> Vec<u8> {
            let mut out = vec![fill; oh * ow];
            for y in 0..oh {
                for x in 0..ow {
                    let (cy, cx) = (y as i64 + 7, x as i64 - 3);
                    if (0..c as i64).contains(&cy) && (0..c as i64).contains(&cx) {
                        out[y * ow + x] = canvas[cy as usize * c + (c - 1 - cx as usize)];
                    }
                }
            }
            out
        };
        for index in 0..40 {
            let key = SampleKey { seed: 3, epoch: 0, index };
            let plan =
                TargetPlan::replay_mosaic(&program, key, crate::augment::mosaic::Partners::Source(10), &sizes, 3)
                    .unwrap();
            assert_eq!(plan.canvas(), (oh, ow));
            // the parts' label maps (their masks as labels k + 1) on a canvas of 255
            let mut dense = vec![255u8; c * c];
            let mut maps = Vec::new();
            for (k, p) in plan.mosaic.iter().enumerate() {
                let (w, h) = p.image;
                // an instance over most of the image (a hexagon), so the window cuts it where it cuts the image
                let (fw, fh) = (f64::from(w), f64::from(h));
                let poly = [0.1, 0.5, 0.3, 0.0, 0.8, 0.05, 1.0, 0.5, 0.7, 0.97, 0.2, 0.9]
                    .chunks(2)
                    .flat_map(|v| [v[0] * fw, v[1] * fh])
                    .collect::<Vec<_>>();
                let rle = rle_from_polygon(&poly, h, w).unwrap();
                let full = decode(&rle).unwrap();
                // brute force: nearest resize pasted into the window of the canvas …
                let mut canvas = vec![0u8; c * c];
                let [x0, y0, x1, y1] = p.clip.map(|v| v as usize);
                for y in y0..y1 {
                    for x in x0..x1 {
                        let sy = nearest_index(y as i64 - p.offset.1, i64::from(h), i64::from(p.resized.1));
                        let sx = nearest_index(x as i64 - p.offset.0, i64::from(w), i64::from(p.resized.0));
                        canvas[y * c + x] = full[sy as usize * w as usize + sx as usize];
                        dense[y * c + x] = canvas[y * c + x] * (k as u8 + 1);
                    }
                }
                let inside = full.iter().filter(|&&v| v == 1).count();
                if (x1 - x0) < p.resized.0 as usize || (y1 - y0) < p.resized.1 as usize {
                    clipped += usize::from(inside > 0);
                }
                // … mirrored, then cropped / padded
                assert_eq!(plan.mosaic_mask(k, &rle).unwrap(), moved(&canvas, 0), "row {index} part {k}");
                maps.push((full.iter().map(|&v| v * (k as u8 + 1)).collect::<Vec<u8>>(), (h as usize, w as usize)));
                // a mask one row taller is read as the plain path reads it: the same pixels (the extra row is
                // never read)
                let other = rle_from_polygon(&poly, h + 1, w).unwrap();
                assert_eq!(plan.mosaic_mask(k, &other).unwrap(), moved(&canvas, 0), "row {index} part {k}");
            }
            assert!(plan.mosaic_mask(plan.mosaic.len(), &Rle { h: 1, w: 1, counts: vec![1] }).is_err());
            let maps: Vec<(&[u8], (usize, usize))> = maps.iter().map(|(m, hw)| (m.as_slice(), *hw)).collect();
            assert_eq!(plan.mosaic_dense(&maps, 255).unwrap(), moved(&dense, 255), "row {index}");
            assert!(plan.mosaic_dense(&maps[1..], 255).is_err());
        }
        assert!(clipped > 10, "windows cut instances in {clipped} parts only");
    }

    #[test]
    fn steps_move_boxes_points_and_masks() {
        // pad 2 left / 1 top, then mirror: a box and a mask pixel land where the image pixel lands
        let pad = Step::new("Pad", Move::Shift([2, 1]), true, (3, 4), (4, 6));
        let flip = Step::new("RandomHorizontalFlip", Move::HFlip, false, (4, 6), (4, 6));
        assert_eq!(flip.boxes(pad.boxes([0.0, 0.0, 1.0, 1.0])), [3.0, 1.0, 4.0, 2.0]);
        assert_eq!(flip.point(2.0, 1.0, true), (3.0, 1.0));
        let mut f = Frame { buf: vec![0; 12], h: 3, w: 4, c: 1 };
        f.buf[0] = 1; // pixel (0, 0)
        let mut s = OpScratch::default();
        pad.move_mask(&mut f, &mut s, 0);
        flip.move_mask(&mut f, &mut s, 0);
        assert_eq!((f.h, f.w), (4, 6));
        let on: Vec<usize> = (0..24).filter(|&i| f.buf[i] == 1).collect();
        assert_eq!(on, [6 + 3]); // row 1, column 6 - 1 - 2 = 3
    }
}
