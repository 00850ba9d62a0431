//! The detection ops of torchvision v2: `RandomZoomOut` (a random constant pad), `ScaleJitter` and
//! `RandomShortestSize` (a resize to a drawn size) — pixel ops whose targets move with them — and the target-only `SanitizeBoundingBoxes` / `ClampBoundingBoxes` (pixels untouched; the target
//! replay, augment/targets.rs, applies them to a detection source's boxes).

use super::geometric::pad_crop;
use super::moves::{Move, Step, center_within, unreplayed};
use super::{Args, DefaultValue, Drawn, MAX_SIDE, MAX_SIZE, Op, OpScratch, P, bad, check_fill, check_p, fill_bytes};
use super::{default as g, gate, undrawn};
use crate::augment::kernels::{Frame, PadMode};
use crate::augment::resize::{self, Resample};
use crate::augment::site::Site;
use crate::augment::stage2::resize_box;
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

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, (h, w): (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Crop { padding: [l, t, r, b], .. } = *drawn else { return Err(unreplayed(self, drawn)) };
        let to = (h + (t + b) as usize, w + (l + r) as usize);
        Ok(vec![Step::shift(self.name(), (i64::from(l), i64::from(t)), (h, w), to)])
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Crop { padding: [l, t, r, b], .. } = drawn else { undrawn(self.name(), drawn) };
        let (oh, ow) = (frame.h + (t + b) as usize, frame.w + (l + r) as usize);
        let origin = (-(*t as isize), -(*l as isize));
        pad_crop(frame, &mut scratch.spare, (oh, ow), origin, PadMode::Constant, &fill_bytes(&self.fill));
    }
}

impl RandomZoomOut {
    /// This op (drawn `zoom`) followed at once by a `RandomIoUCrop` (drawn `crop`, a box of the zoomed canvas) in
    /// one pass: only the crop's window of the canvas is made (the image where it lies, this op's fill
    /// elsewhere), never the canvas, which is up to 16× the image. The same bytes as the two ops one after the
    /// other: the crop lies inside the canvas (torchvision draws it there), so the crop's own fill is never used.
    pub fn apply_cropped(&self, zoom: &Drawn, crop: &Drawn, frame: &mut Frame, scratch: &mut OpScratch) {
        let Drawn::Crop { padding: [l, t, r, b], .. } = zoom else { undrawn(self.name(), zoom) };
        let Drawn::Box { top, left, h, w } = crop else { undrawn("RandomIoUCrop", crop) };
        debug_assert!(top + h <= frame.h as u32 + t + b && left + w <= frame.w as u32 + l + r);
        let origin = (*top as isize - *t as isize, *left as isize - *l as isize);
        pad_crop(
            frame,
            &mut scratch.spare,
            (*h as usize, *w as usize),
            origin,
            PadMode::Constant,
            &fill_bytes(&self.fill),
        );
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

    fn targets_only(&self) -> bool {
        true
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, _: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let map = Move::Sanitize { min_size: self.min_size, min_area: self.min_area };
        Ok(vec![Step::new(self.name(), map, false, hw, hw)])
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

    fn targets_only(&self) -> bool {
        true
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, _: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        Ok(vec![Step::new(self.name(), Move::Clamp, false, hw, hw)])
    }

    fn apply(&self, _: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {}
}

/// Resize `frame` whole to the drawn size (ScaleJitter, RandomShortestSize).
fn resize_to(drawn: &Drawn, name: &str, frame: &mut Frame, scratch: &mut OpScratch, resample: Resample) {
    let Drawn::Size { h, w } = drawn else { undrawn(name, drawn) };
    let (fh, fw) = (frame.h, frame.w);
    resize_box(frame, &mut scratch.spare, &mut scratch.resize, (0, 0, fh, fw), (*h as usize, *w as usize), resample);
}

/// A drawn size of at least one pixel a side (torchvision would fail on a zero side; trdata refuses the sample).
fn drawn_size(name: &str, (h, w): (usize, usize), (nh, nw): (f64, f64)) -> std::result::Result<Drawn, String> {
    let (nh, nw) = (nh as i64, nw as i64);
    if nh < 1 || nw < 1 || nh > i64::from(MAX_SIDE) || nw > i64::from(MAX_SIDE) {
        return Err(format!(
            "{name}: the image ({h}, {w}) would be resized to ({nh}, {nw}); each side must be in 1..={MAX_SIDE}"
        ));
    }
    Ok(Drawn::Size { h: nh as u32, w: nw as u32 })
}

/// `ScaleJitter(target_size, scale_range=(0.1, 2.0), interpolation, antialias)` (large scale jitter): the image
/// resized by `min(target_size[1] / h, target_size[0] / w) · s`, `s` uniform in `scale_range` — torchvision's
/// formula word for word (it reads `target_size` as (width, height) there; the references pass a square).
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleJitter {
    /// The size the scale is relative to, as torchvision indexes it (module docs).
    pub target_size: (u32, u32),
    /// Range of `s`.
    pub scale_range: (f64, f64),
    /// Filter and antialias.
    pub resample: Resample,
}

impl Op for ScaleJitter {
    const KINDS: &'static [&'static str] = &["scale_jitter"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("ScaleJitter.scale_range", DefaultValue::Pair(0.1, 2.0)),
        ("ScaleJitter.interpolation", DefaultValue::Str(g::BILINEAR)),
        ("ScaleJitter.antialias", DefaultValue::Bool(true)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(ScaleJitter {
            target_size: a.uint_pair("target_size")?,
            scale_range: a.pair("scale_range")?,
            resample: Resample { filter: a.choice(&resize::RESIZE_INTERPOLATION)?, antialias: a.boolean("antialias")? },
        })
    }

    fn name(&self) -> &'static str {
        "ScaleJitter"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (h, w) = self.target_size;
        if !(1..=MAX_SIDE).contains(&h) || !(1..=MAX_SIDE).contains(&w) {
            return Err(bad("target_size", format!("({h}, {w})"), &format!("be in 1..={MAX_SIDE}"), op, pos));
        }
        let (lo, hi) = self.scale_range;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi && hi <= 16.0) {
            return Err(bad("scale_range", format!("({lo}, {hi})"), "be finite with 0 < min ≤ max ≤ 16", op, pos));
        }
        Ok(())
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        None
    }

    fn oversized(&self, (h, w): (usize, usize)) -> Option<(usize, usize)> {
        let (t0, t1) = (f64::from(self.target_size.0), f64::from(self.target_size.1));
        let r = (t1 / h as f64).min(t0 / w as f64) * self.scale_range.1;
        let (oh, ow) = ((h as f64 * r) as usize, (w as f64 * r) as usize);
        super::frame_too_big((oh, ow)).then_some((oh, ow))
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // torchvision: scale = lo + rand(1)·(hi - lo) (float32); r = min(ts[1]/h, ts[0]/w) · scale (float32);
        // new side = int(side · r)
        let (lo, hi) = self.scale_range;
        let scale = lo as f32 + rng.uniform() as f32 * (hi - lo) as f32;
        let (t0, t1) = (f64::from(self.target_size.0), f64::from(self.target_size.1));
        let r = ((t1 / h as f64).min(t0 / w as f64) as f32) * scale;
        drawn_size(self.name(), (h, w), (f64::from(h as f32 * r), f64::from(w as f32 * r)))
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Size { h, w } = *drawn else { return Err(unreplayed(self, drawn)) };
        Ok(vec![Step::scale(self.name(), hw, (h as usize, w as usize))])
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        resize_to(drawn, self.name(), frame, scratch, self.resample);
    }
}

/// `RandomShortestSize(min_size, max_size=None, interpolation, antialias)`: the shorter side resized to one of
/// `min_size` (picked uniformly), the longer side kept at most `max_size`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomShortestSize {
    /// The candidate shorter sides (ints, checked).
    pub min_size: Vec<f64>,
    /// Bound on the longer side.
    pub max_size: Option<u32>,
    /// Filter and antialias.
    pub resample: Resample,
}

impl Op for RandomShortestSize {
    const KINDS: &'static [&'static str] = &["random_shortest_size"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomShortestSize.interpolation", DefaultValue::Str(g::BILINEAR)),
        ("RandomShortestSize.antialias", DefaultValue::Bool(true)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomShortestSize {
            min_size: a.nums("min_size")?,
            max_size: if a.is_none(MAX_SIZE)? { None } else { Some(a.uint(MAX_SIZE)?) },
            resample: Resample { filter: a.choice(&resize::RESIZE_INTERPOLATION)?, antialias: a.boolean("antialias")? },
        })
    }

    fn name(&self) -> &'static str {
        "RandomShortestSize"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let side = |v: &f64| v.fract() == 0.0 && (1.0..=f64::from(MAX_SIDE)).contains(v);
        if self.min_size.is_empty() || self.min_size.len() > 64 || !self.min_size.iter().all(side) {
            return Err(bad(
                "min_size",
                format!("{:?}", self.min_size),
                &format!("hold 1 to 64 ints in 1..={MAX_SIDE}"),
                op,
                pos,
            ));
        }
        if let Some(m) = self.max_size
            && !(1..=MAX_SIDE).contains(&m)
        {
            return Err(bad(MAX_SIZE, m, &format!("be in 1..={MAX_SIDE}"), op, pos));
        }
        Ok(())
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        None
    }

    fn oversized(&self, (h, w): (usize, usize)) -> Option<(usize, usize)> {
        let s = self.min_size.iter().copied().fold(1.0, f64::max);
        let mut r = s / h.min(w) as f64;
        if let Some(m) = self.max_size {
            r = r.min(f64::from(m) / h.max(w) as f64);
        }
        let (oh, ow) = ((h as f64 * r) as usize, (w as f64 * r) as usize);
        super::frame_too_big((oh, ow)).then_some((oh, ow))
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // torchvision: min_size[randint(len)]; r = min_size / min(h, w), at most max_size / max(h, w) (doubles)
        let s = self.min_size[rng.below(self.min_size.len() as u64) as usize];
        let mut r = s / h.min(w) as f64;
        if let Some(m) = self.max_size {
            r = r.min(f64::from(m) / h.max(w) as f64);
        }
        drawn_size(self.name(), (h, w), (h as f64 * r, w as f64 * r))
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Size { h, w } = *drawn else { return Err(unreplayed(self, drawn)) };
        Ok(vec![Step::scale(self.name(), hw, (h as usize, w as usize))])
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        resize_to(drawn, self.name(), frame, scratch, self.resample);
    }
}

/// `RandomIoUCrop(min_scale, max_scale, min_aspect_ratio, max_aspect_ratio, sampler_options, trials)` (SSD's):
/// a crop whose overlap (IoU) with at least one box whose centre it holds reaches a threshold picked from
/// `sampler_options` (a value ≥ 1 leaves the image as it is); boxes whose centre falls outside are zeroed (a
/// later `SanitizeBoundingBoxes` drops them). Its draw depends on the sample's boxes, so it is made by the
/// target replay ([`RandomIoUCrop::draw`], augment/targets.rs), for the workers and the targets alike.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomIoUCrop {
    /// Crop side range, as fractions of the image's.
    pub scale: (f64, f64),
    /// Crop aspect-ratio (w/h) range.
    pub aspect_ratio: (f64, f64),
    /// IoU thresholds to pick from.
    pub sampler_options: Vec<f64>,
    /// Crops tried per threshold.
    pub trials: u32,
}

/// At most this many thresholds are picked for one sample; then the image is left as it is (torchvision
/// loops forever when no threshold can be met and none is ≥ 1).
pub const IOU_CROP_MAX_PICKS: usize = 1000;

impl Op for RandomIoUCrop {
    const KINDS: &'static [&'static str] = &["random_iou_crop"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomIoUCrop.min_scale", DefaultValue::Num(0.3)),
        ("RandomIoUCrop.max_scale", DefaultValue::Num(1.0)),
        ("RandomIoUCrop.min_aspect_ratio", DefaultValue::Num(0.5)),
        ("RandomIoUCrop.max_aspect_ratio", DefaultValue::Num(2.0)),
        ("RandomIoUCrop.trials", DefaultValue::Int(40)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomIoUCrop {
            scale: (a.num("min_scale")?, a.num("max_scale")?),
            aspect_ratio: (a.num("min_aspect_ratio")?, a.num("max_aspect_ratio")?),
            sampler_options: a.nums("sampler_options")?,
            trials: a.uint("trials")?,
        })
    }

    fn name(&self) -> &'static str {
        "RandomIoUCrop"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (lo, hi) = self.scale;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi && hi <= 1.0) {
            return Err(bad("min_scale", format!("({lo}, {hi})"), "and max_scale be 0 < min ≤ max ≤ 1", op, pos));
        }
        let (lo, hi) = self.aspect_ratio;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
            return Err(bad(
                "min_aspect_ratio",
                format!("({lo}, {hi})"),
                "and max_aspect_ratio be 0 < min ≤ max",
                op,
                pos,
            ));
        }
        let o = &self.sampler_options;
        if o.is_empty() || o.len() > 64 || !o.iter().all(|v| v.is_finite() && *v >= 0.0) {
            return Err(bad("sampler_options", format!("{o:?}"), "hold 1 to 64 finite numbers ≥ 0", op, pos));
        }
        if !(1..=1000).contains(&self.trials) {
            return Err(bad("trials", self.trials, "be in 1..=1000", op, pos));
        }
        Ok(())
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        None
    }

    fn oversized(&self, _: (usize, usize)) -> Option<(usize, usize)> {
        None // a crop never grows the image
    }

    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Err("RandomIoUCrop draws from the sample's boxes: it runs on a detection source only".to_string())
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn needs_boxes(&self) -> bool {
        true
    }

    fn draw_from_boxes(&self, rng: &mut SampleRng, hw: (usize, usize), boxes: &[[f64; 4]]) -> Drawn {
        self.draw(rng, hw, boxes)
    }

    fn target_steps(&self, drawn: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Box { top, left, h: ch, w: cw } = *drawn else { return Err(unreplayed(self, drawn)) };
        let crop = [f64::from(left), f64::from(top), f64::from(left + cw), f64::from(top + ch)];
        let step = Step::shift(self.name(), (-i64::from(left), -i64::from(top)), hw, (ch as usize, cw as usize));
        Ok(vec![step.zeroing_outside(crop)])
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Box { top, left, h, w } = drawn else { undrawn(self.name(), drawn) };
        let origin = (*top as isize, *left as isize);
        pad_crop(frame, &mut scratch.spare, (*h as usize, *w as usize), origin, PadMode::Constant, &[0; 3]);
    }
}

impl RandomIoUCrop {
    /// torchvision v2's `make_params` on an `h × w` image with `boxes` (XYXY, this image's pixels): the crop
    /// (`Drawn::Box`) or `Drawn::Skip` (leave the image as it is).
    pub fn draw(&self, rng: &mut SampleRng, (h, w): (usize, usize), boxes: &[[f64; 4]]) -> Drawn {
        let f32_rand = |rng: &mut SampleRng| rng.uniform() as f32;
        let (smin, smax) = (self.scale.0 as f32, self.scale.1 as f32);
        for _ in 0..IOU_CROP_MAX_PICKS {
            let min_iou = self.sampler_options[rng.below(self.sampler_options.len() as u64) as usize];
            if min_iou >= 1.0 {
                return Drawn::Skip;
            }
            for _ in 0..self.trials {
                let (r0, r1) = (smin + (smax - smin) * f32_rand(rng), smin + (smax - smin) * f32_rand(rng));
                let (nw, nh) = ((w as f32 * r0) as usize, (h as f32 * r1) as usize);
                if nh == 0 {
                    continue; // torchvision divides by zero here
                }
                let aspect = nw as f64 / nh as f64;
                if !(self.aspect_ratio.0 <= aspect && aspect <= self.aspect_ratio.1) {
                    continue;
                }
                let (q0, q1) = (f32_rand(rng), f32_rand(rng));
                let left = ((w - nw) as f32 * q0) as usize;
                let top = ((h - nh) as f32 * q1) as usize;
                let (right, bottom) = (left + nw, top + nh);
                if left == right || top == bottom {
                    continue;
                }
                let crop = [left as f64, top as f64, right as f64, bottom as f64];
                let mut any = false;
                let mut best = f64::NEG_INFINITY;
                for b in boxes.iter().filter(|b| center_within(b, &crop)) {
                    any = true;
                    best = best.max(iou(b, &crop));
                }
                if !any || best < min_iou {
                    continue;
                }
                return Drawn::Box { top: top as u32, left: left as u32, h: nh as u32, w: nw as u32 };
            }
        }
        Drawn::Skip
    }
}

/// torchvision's `box_iou` of two XYXY boxes (float32 arithmetic, as on its float32 boxes).
fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let (a, b) = (a.map(|v| v as f32), b.map(|v| v as f32));
    let area = |x: &[f32; 4]| (x[2] - x[0]) * (x[3] - x[1]);
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    f64::from(inter / (area(&a) + area(&b) - inter))
}

/// `Mosaic(size, p, fill)` (YOLO's, not torchvision's): the sample and three partners, each resized so its long
/// side is `size`, around a random centre of a `2·size` square canvas filled with `fill`. It is not a stage-2
/// op: the program takes it from the head of the list ([`crate::augment::mosaic`] says how it runs), so it is
/// refused anywhere else.
#[derive(Debug, Clone, PartialEq)]
pub struct Mosaic {
    /// Long side of each of the four images; the canvas is `2·size` square.
    pub size: u32,
    /// Probability of the mosaic (otherwise the sample alone, centred on the canvas).
    pub p: f64,
    /// Per-channel (or one) fill of the canvas, pixel units.
    pub fill: Vec<f64>,
}

/// Mosaic's largest `size` (its canvas is `2·size` square and must be an image the program may hold).
pub const MAX_MOSAIC_SIZE: u32 = 8192;

impl Op for Mosaic {
    const KINDS: &'static [&'static str] = &["mosaic"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("Mosaic.p", DefaultValue::Num(1.0)), ("Mosaic.fill", DefaultValue::Num(114.0))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(Mosaic { size: a.uint("size")?, p: a.num(P)?, fill: a.nums("fill")? })
    }

    fn name(&self) -> &'static str {
        "Mosaic"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        if pos != Site::top(0) {
            return Err(bad(
                super::TRANSFORMS,
                format!("Mosaic at {pos}"),
                "be the first transform of the list (it makes the canvas the others run on), not inside a container",
                op,
                pos,
            ));
        }
        if !(1..=MAX_MOSAIC_SIZE).contains(&self.size) {
            return Err(bad("size", self.size, &format!("be in [1, {MAX_MOSAIC_SIZE}]"), op, pos));
        }
        check_p(self.p, op, pos)?;
        check_fill(&self.fill, op, pos)
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        let side = 2 * self.size as usize;
        Some((side, side))
    }

    fn sample(&self, _: &mut SampleRng, _: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // `check` refuses a Mosaic the program would run as a stage-2 op
        Err("Mosaic must be the first transform".to_string())
    }

    fn apply(&self, _: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `RandomZoomOut::apply_cropped` gives the bytes of the zoom-out followed by the crop, for crops anywhere in
    /// the canvas (over the image, over the fill only, across its edges), both channel counts.
    #[test]
    fn zoom_then_crop_in_one_pass_equals_the_two_ops() {
        let zoom = RandomZoomOut { fill: vec![11.0, 22.0, 33.0], side_range: (1.0, 4.0), p: 1.0 };
        let crop =
            RandomIoUCrop { scale: (0.3, 1.0), aspect_ratio: (0.5, 2.0), sampler_options: vec![0.0], trials: 40 };
        for c in [1usize, 3] {
            let (h, w) = (7usize, 9usize);
            let image: Vec<u8> = (0..h * w * c).map(|i| (i * 37 % 251) as u8).collect();
            let zoomed = Drawn::Crop { padding: [5, 3, 4, 6], top: 0, left: 0 };
            let (ch, cw) = (h as u32 + 3 + 6, w as u32 + 5 + 4);
            for (top, left, bh, bw) in
                [(0, 0, ch, cw), (2, 3, 8, 10), (0, 0, 3, 5), (ch - 4, cw - 4, 4, 4), (3, 5, h as u32, w as u32)]
            {
                let boxed = Drawn::Box { top, left, h: bh, w: bw };
                let frame = || Frame { buf: image.clone(), h, w, c };
                let (mut one, mut two) = (frame(), frame());
                let mut scratch = OpScratch::default();
                zoom.apply_cropped(&zoomed, &boxed, &mut one, &mut scratch);
                let mut rng = SampleRng::new(0, 0, 0, 0);
                zoom.apply(&zoomed, &mut two, &mut scratch, &mut rng);
                crop.apply(&boxed, &mut two, &mut scratch, &mut rng);
                assert_eq!((one.h, one.w), (two.h, two.w));
                let n = one.h * one.w * c;
                assert_eq!(one.buf[..n], two.buf[..n], "c {c}, box {top} {left} {bh} {bw}");
            }
        }
    }
}
