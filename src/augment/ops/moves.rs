//! moves — how an op moves a detection sample's targets: the [`Step`]s an op's [`super::Op::target_steps`] gives
//! for its draw (torchvision v2's kernel semantics for boxes, keypoints and masks; augment/targets.rs has the
//! rules and composes the steps of a whole program), and the maps they are made of.

use super::{Drawn, Op, OpScratch, OpSpec};
use crate::annot::warp::nearest_index;
use crate::augment::kernels::{Frame, PadMode};
use crate::augment::warp;
use crate::rng::SampleRng;

/// How one step maps a point (x, y) of its input canvas to its output canvas.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Move {
    /// `x' = m0·x + m1·y + m2`, `y' = m3·x + m4·y + m5` (torchvision's forward affine matrix).
    Affine([f64; 6]),
    /// torchvision's perspective thetas: `x' = (t0·x + t1·y + t2) / (q0·x + q1·y + 1)`, `y'` with t3..t5.
    Perspective {
        /// Numerator rows.
        theta: [f64; 6],
        /// Denominator coefficients.
        q: [f64; 2],
    },
    /// Resize: `x' = x·sx`, `y' = y·sy`.
    Scale([f64; 2]),
    /// Crop (negative) or pad (positive): `x' = x + dx`, `y' = y + dy`.
    Shift([i64; 2]),
    /// Mirror left-right.
    HFlip,
    /// Mirror top-bottom.
    VFlip,
    /// `ClampBoundingBoxes`: boxes clamped to the canvas, nothing else moves.
    Clamp,
    /// `SanitizeBoundingBoxes`: nothing moves; boxes failing torchvision's rule are dropped with their labels,
    /// masks and keypoints.
    Sanitize {
        /// Minimum width and height.
        min_size: f64,
        /// Minimum area.
        min_area: f64,
    },
}

/// One stage-2 op's effect on the targets.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The torchvision op it comes from.
    pub op: &'static str,
    /// The map.
    pub map: Move,
    /// Boxes are clamped to the output canvas after the map.
    pub clamp: bool,
    /// Canvas (height, width) before.
    pub from: (usize, usize),
    /// Canvas (height, width) after.
    pub canvas: (usize, usize),
    /// For a warp: the op as a mask moves (nearest, zero fill) and its draw.
    warp: Option<(OpSpec, Drawn)>,
    /// RandomIoUCrop's crop (XYXY, input pixels): a box whose centre is not strictly inside it becomes
    /// `[0, 0, 0, 0]` (torchvision marks it so for SanitizeBoundingBoxes).
    zero_outside: Option<[f64; 4]>,
}
impl Step {
    /// A step that maps every point by `map` from a `from` canvas to a `canvas` one, boxes clamped to it when
    /// `clamp`.
    pub fn new(op: &'static str, map: Move, clamp: bool, from: (usize, usize), canvas: (usize, usize)) -> Self {
        Step { op, map, clamp, from, canvas, warp: None, zero_outside: None }
    }

    /// A crop (negative) or pad (positive) by `(dx, dy)`: boxes clamped to the new canvas.
    pub fn shift(op: &'static str, (dx, dy): (i64, i64), from: (usize, usize), canvas: (usize, usize)) -> Self {
        Step::new(op, Move::Shift([dx, dy]), true, from, canvas)
    }

    /// A resize from `from` to `canvas` (boxes scaled, not clamped: torchvision's resize kernel does not clamp).
    pub fn scale(op: &'static str, from: (usize, usize), canvas: (usize, usize)) -> Self {
        let s = [canvas.1 as f64 / from.1 as f64, canvas.0 as f64 / from.0 as f64];
        Step::new(op, Move::Scale(s), false, from, canvas)
    }

    /// A warp by `map` (boxes clamped): masks move by `mask_op` (the op with nearest sampling and zero fill) run
    /// with `drawn` on the one-channel mask.
    pub fn warp(
        op: &'static str,
        map: Move,
        from: (usize, usize),
        canvas: (usize, usize),
        mask_op: OpSpec,
        drawn: Drawn,
    ) -> Self {
        Step { warp: Some((mask_op, drawn)), ..Step::new(op, map, true, from, canvas) }
    }

    /// This step, with a box whose centre is not strictly inside `crop` (XYXY, input pixels) becoming
    /// `[0, 0, 0, 0]` (RandomIoUCrop: torchvision marks such boxes for SanitizeBoundingBoxes).
    pub fn zeroing_outside(self, crop: [f64; 4]) -> Self {
        Step { zero_outside: Some(crop), ..self }
    }

    /// Whether masks move through this step by a warp kernel (not an index map per axis).
    pub fn is_warp(&self) -> bool {
        self.warp.is_some()
    }

    /// A point under the map; `keypoint` mirrors as `W - 1 - x` (keypoints) instead of `W - x` (box edges).
    pub fn point(&self, x: f64, y: f64, keypoint: bool) -> (f64, f64) {
        let edge = if keypoint { 1.0 } else { 0.0 };
        match self.map {
            Move::Affine(m) => (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]),
            Move::Perspective { theta: t, q } => {
                let d = q[0] * x + q[1] * y + 1.0;
                ((t[0] * x + t[1] * y + t[2]) / d, (t[3] * x + t[4] * y + t[5]) / d)
            }
            Move::Scale([sx, sy]) => (x * sx, y * sy),
            Move::Shift([dx, dy]) => (x + dx as f64, y + dy as f64),
            Move::HFlip => (self.canvas.1 as f64 - edge - x, y),
            Move::VFlip => (x, self.canvas.0 as f64 - edge - y),
            Move::Clamp | Move::Sanitize { .. } => (x, y),
        }
    }

    /// A box under the map: its corners mapped, their bounds, clamped when the op clamps.
    pub fn boxes(&self, [x1, y1, x2, y2]: [f64; 4]) -> [f64; 4] {
        if let Some(crop) = &self.zero_outside
            && !center_within(&[x1, y1, x2, y2], crop)
        {
            return [0.0; 4];
        }
        let corners = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)].map(|(x, y)| self.point(x, y, false));
        let (mut lo, mut hi) = ([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]);
        for (x, y) in corners {
            lo = [lo[0].min(x), lo[1].min(y)];
            hi = [hi[0].max(x), hi[1].max(y)];
        }
        let mut b = [lo[0], lo[1], hi[0], hi[1]];
        if self.clamp || self.map == Move::Clamp {
            let (h, w) = (self.canvas.0 as f64, self.canvas.1 as f64);
            b = [b[0].clamp(0.0, w), b[1].clamp(0.0, h), b[2].clamp(0.0, w), b[3].clamp(0.0, h)];
        }
        b
    }

    /// Move a one-channel mask frame through this step, `fill` where it leaves the image.
    pub fn move_mask(&self, frame: &mut Frame, scratch: &mut OpScratch, fill: u8) {
        if matches!(self.map, Move::Clamp | Move::Sanitize { .. }) {
            return;
        }
        if let Some((op, drawn)) = &self.warp {
            // the op's own kernel (nearest) with this fill; warps do not draw while applying, so the stream is
            // never read
            let op = if fill == 0 { op.clone() } else { op.refilled(f64::from(fill)) };
            super::apply(&op, drawn, frame, scratch, &mut SampleRng::new(0, 0, 0, 0));
            return;
        }
        let (h, w) = self.from;
        let (oh, ow) = self.canvas;
        // each output row/column → the input one it reads (None: outside, zero)
        let index = |n: usize, m: usize, axis: usize| -> Vec<Option<usize>> {
            (0..m)
                .map(|j| match self.map {
                    Move::Scale(_) => Some(nearest_index(j as i64, n as i64, m as i64) as usize),
                    Move::Shift(d) => {
                        let s = j as i64 - d[axis];
                        (0..n as i64).contains(&s).then_some(s as usize)
                    }
                    Move::HFlip if axis == 0 => Some(n - 1 - j),
                    Move::VFlip if axis == 1 => Some(n - 1 - j),
                    _ => Some(j),
                })
                .collect()
        };
        let (cols, rows) = (index(w, ow, 0), index(h, oh, 1));
        let spare = &mut scratch.spare;
        spare.clear();
        spare.resize(oh * ow, fill);
        for (i, r) in rows.iter().enumerate() {
            let Some(r) = r else { continue };
            let src = &frame.buf[r * w..(r + 1) * w];
            for (j, c) in cols.iter().enumerate() {
                if let Some(c) = c {
                    spare[i * ow + j] = src[*c];
                }
            }
        }
        std::mem::swap(&mut frame.buf, spare);
        (frame.h, frame.w) = (oh, ow);
    }
}
/// torchvision's `_get_sanitize_bounding_boxes_mask` for one XYXY box on an `(h, w)` canvas (float32, as its
/// boxes are).
pub fn sanitize_keeps(b: [f64; 4], (h, w): (usize, usize), min_size: f64, min_area: f64) -> bool {
    let b = b.map(|v| v as f32);
    let (ws, hs) = (b[2] - b[0], b[3] - b[1]);
    let (min_size, min_area) = (min_size as f32, min_area as f32);
    ws >= min_size
        && hs >= min_size
        && b.iter().all(|&v| v >= 0.0)
        && ws * hs >= min_area
        && b[0] <= w as f32
        && b[2] <= w as f32
        && b[1] <= h as f32
        && b[3] <= h as f32
}

/// torchvision's `_get_inverse_affine_matrix(center, angle, translate, scale, shear, inverted=False)`: the
/// forward map input → output, `center` in absolute pixels.
pub fn forward_affine(
    center: [f64; 2],
    angle_deg: f64,
    translate: [f64; 2],
    scale: f64,
    shear_deg: [f64; 2],
) -> [f64; 6] {
    let [a, b, c, d] = warp::rotate_shear(angle_deg, shear_deg);
    let [cx, cy] = center;
    let [tx, ty] = translate;
    let mut m = [a * scale, b * scale, 0.0, c * scale, d * scale, 0.0];
    m[2] += m[0] * (-cx) + m[1] * (-cy) + cx + tx;
    m[5] += m[3] * (-cx) + m[4] * (-cy) + cy + ty;
    m
}

/// torchvision's `_compute_perspective_thetas` of the (output → input) coefficients `k`: the input → output map.
/// `None` when it cannot be inverted (torchvision raises).
pub fn perspective_thetas(k: [f32; 8]) -> Option<([f64; 6], [f64; 2])> {
    let k = k.map(f64::from);
    let denom = k[0] * k[4] - k[1] * k[3];
    if denom == 0.0 {
        return None;
    }
    let inv = [
        (k[4] - k[5] * k[7]) / denom,
        (-k[1] + k[2] * k[7]) / denom,
        (k[1] * k[5] - k[2] * k[4]) / denom,
        (-k[3] + k[5] * k[6]) / denom,
        (k[0] - k[2] * k[6]) / denom,
        (-k[0] * k[5] + k[2] * k[3]) / denom,
        (-k[4] * k[6] + k[3] * k[7]) / denom,
        (-k[0] * k[7] + k[1] * k[6]) / denom,
    ];
    Some(([inv[0], inv[1], inv[2], inv[3], inv[4], inv[5]], [inv[6], inv[7]]))
}

/// Whether box `b`'s centre lies strictly inside `crop` (both XYXY): torchvision's `is_within_crop_area`.
pub fn center_within(b: &[f64; 4], crop: &[f64; 4]) -> bool {
    let (cx, cy) = (0.5 * (b[0] + b[2]), 0.5 * (b[1] + b[3]));
    crop[0] < cx && cx < crop[2] && crop[1] < cy && cy < crop[3]
}

/// [`Op::check_targets`] of an op that pads with `mode`: only constant padding can move boxes (torchvision raises
/// for `BoundingBoxes` too).
pub fn constant_for_boxes(mode: PadMode, name: &str) -> Result<(), String> {
    if mode == PadMode::Constant {
        return Ok(());
    }
    Err(format!(
        "{name} with padding_mode other than 'constant' cannot move boxes (torchvision raises for BoundingBoxes too)"
    ))
}

/// The message of an op whose [`Op::target_steps`] got a draw its `sample` never gives.
pub fn unreplayed(op: &impl Op, drawn: &Drawn) -> String {
    format!("{} drew {drawn:?}, which trdata cannot replay for targets", op.name())
}
