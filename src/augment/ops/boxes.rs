//! The detection ops of torchvision v2: `RandomZoomOut` (a random constant pad: a pixel op whose targets move
//! with it) and the target-only `SanitizeBoundingBoxes` / `ClampBoundingBoxes` (pixels untouched; the target
//! replay, augment/targets.rs, applies them to a detection source's boxes).

use super::geometric::pad_crop;
use super::{Args, DefaultValue, Drawn, Op, OpScratch, P, bad, check_fill, check_p, fill_bytes, gate, undrawn};
use crate::augment::kernels::{Frame, PadMode};
use crate::augment::site::Site;
use crate::error::Result;
use crate::rng::SampleRng;

/// `RandomZoomOut(fill, side_range, p)`: with probability `p`, the image is placed on a canvas `r` times its
/// size (`r` uniform in `side_range`) at a random position, the rest filled with `fill`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomZoomOut {
    /// Per-channel (or one) fill, pixel units.
    pub fill: Vec<f64>,
    /// Canvas side over image side, `1 ≤ min ≤ max`.
    pub side_range: (f64, f64),
    /// Probability.
    pub p: f64,
}

impl Op for RandomZoomOut {
    const KINDS: &'static [&'static str] = &["random_zoom_out"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomZoomOut.fill", DefaultValue::Num(0.0)),
        ("RandomZoomOut.side_range", DefaultValue::Pair(1.0, 4.0)),
        ("RandomZoomOut.p", DefaultValue::Num(0.5)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomZoomOut { fill: a.nums("fill")?, side_range: a.pair("side_range")?, p: a.num(P)? })
    }

    fn name(&self) -> &'static str {
        "RandomZoomOut"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (lo, hi) = self.side_range;
        // the canvas side is at most MAX_SIDE-bounded per sample (`oversized`); the range itself must be sane
        if !(lo.is_finite() && hi.is_finite() && 1.0 <= lo && lo <= hi && hi <= 16.0) {
            return Err(bad("side_range", format!("({lo}, {hi})"), "be finite with 1 ≤ min ≤ max ≤ 16", op, pos));
        }
        check_p(self.p, op, pos)?;
        check_fill(&self.fill, op, pos)
    }

    fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
        // random per sample unless the range is one value and the gate always opens
        match (hw, self.side_range.0 == 1.0 && self.side_range.1 == 1.0) {
            (Some(hw), true) => Some(hw),
            _ => None,
        }
    }

    fn oversized(&self, (h, w): (usize, usize)) -> Option<(usize, usize)> {
        let r = self.side_range.1;
        let (oh, ow) = ((h as f64 * r) as usize, (w as f64 * r) as usize);
        super::frame_too_big((oh, ow)).then_some((oh, ow))
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        if !gate(rng, self.p) {
            return Ok(Drawn::Skip);
        }
        // torchvision: r = lo + rand(1)·(hi - lo); canvas = int(side · r); left/top = int((canvas - side)·rand)
        let (lo, hi) = self.side_range;
        let r = (lo as f32 + rng.uniform() as f32 * (hi - lo) as f32) as f64;
        let (cw, ch) = ((w as f64 * r) as usize, (h as f64 * r) as usize);
        let left = ((cw - w) as f64 * f64::from(rng.uniform() as f32)) as usize;
        let top = ((ch - h) as f64 * f64::from(rng.uniform() as f32)) as usize;
        let (right, bottom) = (cw - left - w, ch - top - h);
        let to32 = |v: usize| v as u32;
        Ok(Drawn::Crop { padding: [to32(left), to32(top), to32(right), to32(bottom)], top: 0, left: 0 })
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Crop { padding: [l, t, r, b], .. } = drawn else { undrawn(self.name(), drawn) };
        let (oh, ow) = (frame.h + (t + b) as usize, frame.w + (l + r) as usize);
        let origin = (-(*t as isize), -(*l as isize));
        pad_crop(frame, &mut scratch.spare, (oh, ow), origin, PadMode::Constant, &fill_bytes(&self.fill));
    }
}

/// `SanitizeBoundingBoxes(min_size, min_area)`: drops each box (and its label, mask, keypoints) narrower or
/// shorter than `min_size`, smaller than `min_area`, or reaching outside the canvas — torchvision's rule,
/// applied by the target replay. Pixels are untouched.
#[derive(Debug, Clone, PartialEq)]
pub struct SanitizeBoundingBoxes {
    /// Minimum width and height.
    pub min_size: f64,
    /// Minimum area.
    pub min_area: f64,
}

impl Op for SanitizeBoundingBoxes {
    const KINDS: &'static [&'static str] = &["sanitize_bounding_boxes"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("SanitizeBoundingBoxes.min_size", DefaultValue::Num(1.0)),
        ("SanitizeBoundingBoxes.min_area", DefaultValue::Num(1.0)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(SanitizeBoundingBoxes { min_size: a.num("min_size")?, min_area: a.num("min_area")? })
    }

    fn name(&self) -> &'static str {
        "SanitizeBoundingBoxes"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        // torchvision: "min_size should be >= 1", "min_area should be >= 1"
        for (name, v) in [("min_size", self.min_size), ("min_area", self.min_area)] {
            if !(v.is_finite() && v >= 1.0) {
                return Err(bad(name, v, "be a finite number ≥ 1", op, pos));
            }
        }
        Ok(())
    }

    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn apply(&self, _: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {}
}

/// `ClampBoundingBoxes()`: clamps boxes to the canvas (the target replay does it). Pixels are untouched.
#[derive(Debug, Clone, PartialEq)]
pub struct ClampBoundingBoxes;

impl Op for ClampBoundingBoxes {
    const KINDS: &'static [&'static str] = &["clamp_bounding_boxes"];

    fn parse(_: &Args<'_>) -> Result<Self> {
        Ok(ClampBoundingBoxes)
    }

    fn name(&self) -> &'static str {
        "ClampBoundingBoxes"
    }

    fn check(&self, _: &str, _: Site) -> Result<()> {
        Ok(())
    }

    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn apply(&self, _: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {}
}
