//! The geometric family: ops that move pixels (pad, crop, flip, warp, resize) on the uint8 image, each one
//! [`super::Op`] over the kernels in [`crate::augment::kernels`], [`crate::augment::warp`] and the stage-2
//! resizer (`stage2::resize_box`). The leading ones fold into the decode instead ([`crate::augment::geometry`]).

use super::OpSpec;
use super::moves::{Move, Step, constant_for_boxes, forward_affine, perspective_thetas, unreplayed};
use super::{Args, CENTER, DEGREES, DISTORTION_SCALE, Drawn, MAX_SIDE, MAX_SIZE, Op, OpScratch, RATIO, SCALE, SHEAR};
use super::{DefaultValue, PADDING, PADDING_MODE, default as g, gated, undrawn, uniform_f32};
use super::{SIZE, TRANSLATE, bad, check_fill, check_opt_fill, check_p, check_side, fill_bytes, fill_f32, gate};
use crate::augment::default as tv;
use crate::augment::kernels::{self, Frame, PadMode};
use crate::augment::resize::{self, Resample, center_crop_start};
use crate::augment::site::Site;
use crate::augment::stage2::resize_box;
use crate::augment::warp::{self, Interp, WARP_INTERPOLATION};
use crate::error::Result;
use crate::rng::SampleRng;

fn check_padding(padding: &[u32; 4], op: &str, pos: Site) -> Result<()> {
    if padding.iter().any(|&v| v > MAX_SIDE) {
        return Err(bad(PADDING, format!("{padding:?}"), &format!("be in 0..={MAX_SIDE} each"), op, pos));
    }
    Ok(())
}

/// An angle range in degrees: finite with min ≤ max (torchvision turns one number d into (-d, d)).
fn check_degrees((lo, hi): (f64, f64), op: &str, pos: Site) -> Result<()> {
    if lo.is_finite() && hi.is_finite() && lo <= hi {
        Ok(())
    } else {
        Err(bad(
            DEGREES,
            format!("({lo}, {hi})"),
            "be finite with min ≤ max (one number d means (-d, d), d ≥ 0)",
            op,
            pos,
        ))
    }
}

fn check_center(center: &Option<[f64; 2]>, op: &str, pos: Site) -> Result<()> {
    match center {
        Some(c) if !c.iter().all(|v| v.is_finite()) => {
            Err(bad(CENTER, format!("{c:?}"), "be a finite (x, y)", op, pos))
        }
        _ => Ok(()),
    }
}

/// Crop (or pad) `frame` to `(oh, ow)` with the window's top-left at `origin` (negative: padding), then swap.
pub(super) fn pad_crop(
    frame: &mut Frame,
    spare: &mut Vec<u8>,
    (oh, ow): (usize, usize),
    origin: (isize, isize),
    mode: PadMode,
    fill: &[u8; 3],
) {
    let n = frame.h * frame.w * frame.c;
    kernels::pad_crop(&frame.buf[..n], (frame.h, frame.w, frame.c), spare, (oh, ow), origin, mode, fill);
    std::mem::swap(&mut frame.buf, spare);
    (frame.h, frame.w) = (oh, ow);
}

/// `Pad(padding, fill, padding_mode)`; `padding` as (left, top, right, bottom).
#[derive(Debug, Clone, PartialEq)]
pub struct Pad {
    /// (left, top, right, bottom) pixels.
    pub padding: [u32; 4],
    /// Per-channel (or one) fill for `constant`, pixel units.
    pub fill: Vec<f64>,
    /// Padding mode.
    pub mode: PadMode,
}

impl Op for Pad {
    const KINDS: &'static [&'static str] = &["pad"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("Pad.fill", DefaultValue::Num(tv::FILL)), ("Pad.padding_mode", DefaultValue::Str(tv::PADDING_MODE))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(Pad { padding: a.padding()?, fill: a.nums("fill")?, mode: a.choice(&PADDING_MODE)? })
    }

    fn name(&self) -> &'static str {
        "Pad"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_padding(&self.padding, op, pos)?;
        check_fill(&self.fill, op, pos)
    }

    fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
        let [l, t, r, b] = self.padding;
        hw.map(|(h, w)| (h + t as usize + b as usize, w + l as usize + r as usize))
    }

    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        constant_for_boxes(self.mode, self.name())
    }

    fn target_steps(&self, _: &Drawn, (h, w): (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let [l, t, r, b] = self.padding.map(|v| v as usize);
        Ok(vec![Step::shift(self.name(), (l as i64, t as i64), (h, w), (h + t + b, w + l + r))])
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let [l, t, r, b] = self.padding;
        let (oh, ow) = (frame.h + (t + b) as usize, frame.w + (l + r) as usize);
        pad_crop(
            frame,
            &mut scratch.spare,
            (oh, ow),
            (-(t as isize), -(l as isize)),
            self.mode,
            &fill_bytes(&self.fill),
        );
    }
}

/// `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)` (v2 draw logic).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomCrop {
    /// Crop height.
    pub height: u32,
    /// Crop width.
    pub width: u32,
    /// (left, top, right, bottom) padding applied first.
    pub padding: [u32; 4],
    /// Pad `size - side` on *both* sides of a dimension that is too small (torchvision v2's rule).
    pub pad_if_needed: bool,
    /// Constant fill.
    pub fill: Vec<f64>,
    /// Padding mode.
    pub mode: PadMode,
}

impl Op for RandomCrop {
    const KINDS: &'static [&'static str] = &["random_crop"];

    fn parse(a: &Args<'_>) -> Result<Self> {
        let size = a.uint_pair(SIZE)?;
        Ok(RandomCrop {
            height: size.0,
            width: size.1,
            padding: a.padding()?,
            pad_if_needed: a.boolean("pad_if_needed")?,
            fill: a.nums("fill")?,
            mode: a.choice(&PADDING_MODE)?,
        })
    }

    fn name(&self) -> &'static str {
        "RandomCrop"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (height, width) = (self.height, self.width);
        if !(1..=MAX_SIDE).contains(&height) || !(1..=MAX_SIDE).contains(&width) {
            return Err(bad(SIZE, format!("({height}, {width})"), &format!("be in 1..={MAX_SIDE}"), op, pos));
        }
        check_padding(&self.padding, op, pos)?;
        check_fill(&self.fill, op, pos)
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        Some((self.height as usize, self.width as usize))
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        let [mut pl, mut pt, mut pr, mut pb] = self.padding.map(|v| v as usize);
        let (mut ph, mut pw) = (h + pt + pb, w + pl + pr);
        let (ch, cw) = (self.height as usize, self.width as usize);
        if self.pad_if_needed {
            if ph < ch {
                let d = ch - ph;
                pt += d;
                pb += d;
                ph += 2 * d;
            }
            if pw < cw {
                let d = cw - pw;
                pl += d;
                pr += d;
                pw += 2 * d;
            }
        }
        if ph < ch || pw < cw {
            return Err(format!(
                "RandomCrop: the crop ({ch}, {cw}) must fit the padded image ({ph}, {pw}); use \
                 pad_if_needed=True or more padding"
            ));
        }
        let top = if ph > ch { rng.below((ph - ch + 1) as u64) } else { 0 };
        let left = if pw > cw { rng.below((pw - cw + 1) as u64) } else { 0 };
        let to32 = |v: usize| v as u32;
        Ok(Drawn::Crop { padding: [to32(pl), to32(pt), to32(pr), to32(pb)], top: top as u32, left: left as u32 })
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        constant_for_boxes(self.mode, self.name())
    }

    fn target_steps(&self, drawn: &Drawn, (h, w): (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Crop { padding: [l, t, r, b], top, left } = *drawn else { return Err(unreplayed(self, drawn)) };
        let padded = (h + (t + b) as usize, w + (l + r) as usize);
        let mut v = Vec::new();
        if padded != (h, w) {
            v.push(Step::shift(self.name(), (i64::from(l), i64::from(t)), (h, w), padded));
        }
        let size = (self.height as usize, self.width as usize);
        v.push(Step::shift(self.name(), (-i64::from(left), -i64::from(top)), padded, size));
        Ok(v)
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Crop { padding: [l, t, ..], top, left } = drawn else { undrawn(self.name(), drawn) };
        let (oh, ow) = (self.height as usize, self.width as usize);
        let origin = (*top as isize - *t as isize, *left as isize - *l as isize);
        pad_crop(frame, &mut scratch.spare, (oh, ow), origin, self.mode, &fill_bytes(&self.fill));
    }
}

/// `RandomHorizontalFlip(p)` after the first resample (before it, it folds into the decode; built from
/// `TransformSpec::RandomHorizontalFlip`, no spec kind of its own).
#[derive(Debug, Clone, PartialEq)]
pub struct HorizontalFlip {
    /// Probability.
    pub p: f64,
}

impl Op for HorizontalFlip {
    const KINDS: &'static [&'static str] = &[];

    fn name(&self) -> &'static str {
        "RandomHorizontalFlip"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(gated(rng, self.p, Drawn::Apply))
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, _: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        Ok(vec![Step::new(self.name(), Move::HFlip, false, hw, hw)])
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        kernels::flip_horizontal(&mut frame.view())
    }
}

/// `RandomVerticalFlip(p)`.
#[derive(Debug, Clone, PartialEq)]
pub struct VerticalFlip {
    /// Probability.
    pub p: f64,
}

impl Op for VerticalFlip {
    const KINDS: &'static [&'static str] = &["vertical_flip"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("RandomVerticalFlip.p", DefaultValue::Num(tv::GATE_P))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(VerticalFlip { p: a.num("p")? })
    }

    fn name(&self) -> &'static str {
        "RandomVerticalFlip"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(gated(rng, self.p, Drawn::Apply))
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, _: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        Ok(vec![Step::new(self.name(), Move::VFlip, false, hw, hw)])
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        kernels::flip_vertical(&mut frame.view())
    }
}

/// `RandomRotation(degrees, interpolation, expand, center, fill)`: positive angles turn counter-clockwise;
/// `expand` makes the output size depend on the angle (a later `RandomCrop` must then fix it).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomRotation {
    /// Angle range in degrees (min, max).
    pub degrees: (f64, f64),
    /// Nearest or bilinear.
    pub interp: Interp,
    /// Grow the output to hold the whole turned image.
    pub expand: bool,
    /// Pivot (x, y) in pixel coordinates; `None` = the image centre.
    pub center: Option<[f64; 2]>,
    /// `None` = zero padding; else the mask-path fill (torchvision's default 0 takes the mask path).
    pub fill: Option<Vec<f64>>,
}

impl Op for RandomRotation {
    const KINDS: &'static [&'static str] = &["random_rotation"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomRotation.interpolation", DefaultValue::Str(g::NEAREST)),
        ("RandomRotation.fill", DefaultValue::Num(g::WARP_FILL)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomRotation {
            degrees: a.pair("degrees")?,
            interp: a.choice(&WARP_INTERPOLATION)?,
            expand: a.boolean("expand")?,
            center: a.center()?,
            fill: a.opt_fill()?,
        })
    }

    fn name(&self) -> &'static str {
        "RandomRotation"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_degrees(self.degrees, op, pos)?;
        check_center(&self.center, op, pos)?;
        check_opt_fill(&self.fill, op, pos)
    }

    fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
        if self.expand { None } else { hw }
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Value(uniform_f32(rng, self.degrees)))
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, (h, w): (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Value(angle) = *drawn else { return Err(unreplayed(self, drawn)) };
        // torchvision: rotate_bounding_boxes = affine with -angle about the centre (absolute), no
        // translate/scale/shear; with expand the canvas is the image's (warp::rotate) and boxes shift by the
        // mapped canvas corners' minimum.
        let center = self.center.unwrap_or([w as f64 * 0.5, h as f64 * 0.5]);
        let mut m = forward_affine(center, -angle, [0.0, 0.0], 1.0, [0.0, 0.0]);
        let mut to = (h, w);
        if self.expand {
            let corners = [(0.0, 0.0), (0.0, h as f64), (w as f64, h as f64), (w as f64, 0.0)];
            let (mut mx, mut my) = (f64::INFINITY, f64::INFINITY);
            for (x, y) in corners {
                mx = mx.min(m[0] * x + m[1] * y + m[2]);
                my = my.min(m[3] * x + m[4] * y + m[5]);
            }
            m[2] -= mx;
            m[5] -= my;
            let cf = self.center.map_or([0.0, 0.0], |[x, y]| [x - w as f64 * 0.5, y - h as f64 * 0.5]);
            let mut a = angle % 360.0;
            if a < 0.0 {
                a += 360.0;
            }
            to = warp::expanded_size(&warp::inverse_affine(cf, -a, [0.0, 0.0], 1.0, [0.0, 0.0]), w, h);
        }
        let mask_op =
            OpSpec::RandomRotation(RandomRotation { interp: Interp::Nearest, fill: Some(vec![0.0]), ..self.clone() });
        Ok(vec![Step::warp(self.name(), Move::Affine(m), (h, w), to, mask_op, drawn.clone())])
    }

    fn refilled(&self, fill: f64) -> Self {
        RandomRotation { fill: Some(vec![fill]), ..self.clone() }
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Value(angle) = drawn else { undrawn(self.name(), drawn) };
        let n = frame.h * frame.w * frame.c;
        let hwc = (frame.h, frame.w, frame.c);
        let (oh, ow) = warp::rotate(
            &frame.buf[..n],
            hwc,
            &mut scratch.spare,
            *angle,
            self.interp,
            self.expand,
            self.center,
            fill_f32(&self.fill),
        );
        std::mem::swap(&mut frame.buf, &mut scratch.spare);
        (frame.h, frame.w) = (oh, ow);
    }
}

/// `RandomAffine(degrees, translate, scale, shear, interpolation, fill, center)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomAffine {
    /// Angle range in degrees.
    pub degrees: (f64, f64),
    /// Maximum translation as fractions of (width, height).
    pub translate: Option<(f64, f64)>,
    /// Scale range.
    pub scale: Option<(f64, f64)>,
    /// Shear ranges in degrees: empty (none), (x min, x max) or (x min, x max, y min, y max).
    pub shear: Vec<f64>,
    /// Nearest or bilinear.
    pub interp: Interp,
    /// As RandomRotation's.
    pub fill: Option<Vec<f64>>,
    /// Pivot (x, y); `None` = the image centre.
    pub center: Option<[f64; 2]>,
}

impl Op for RandomAffine {
    const KINDS: &'static [&'static str] = &["random_affine"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomAffine.interpolation", DefaultValue::Str(g::NEAREST)),
        ("RandomAffine.fill", DefaultValue::Num(g::WARP_FILL)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomAffine {
            degrees: a.pair("degrees")?,
            translate: a.opt_pair("translate")?,
            scale: a.opt_pair("scale")?,
            shear: if a.is_none(SHEAR)? { Vec::new() } else { a.nums("shear")? },
            interp: a.choice(&WARP_INTERPOLATION)?,
            fill: a.opt_fill()?,
            center: a.center()?,
        })
    }

    fn name(&self) -> &'static str {
        "RandomAffine"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_degrees(self.degrees, op, pos)?;
        if let Some((tx, ty)) = self.translate
            && !((0.0..=1.0).contains(&tx) && (0.0..=1.0).contains(&ty))
        {
            return Err(bad(TRANSLATE, format!("({tx}, {ty})"), "be two fractions in [0, 1]", op, pos));
        }
        if let Some((lo, hi)) = self.scale
            && !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi)
        {
            return Err(bad(SCALE, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
        }
        // The length first: a 3-number shear has no (min, max) pairs to look at.
        let shear = &self.shear;
        let pairs_ok = matches!(shear.len(), 0 | 2 | 4)
            && shear.chunks_exact(2).all(|r| r[0].is_finite() && r[1].is_finite() && r[0] <= r[1]);
        if !pairs_ok || shear.iter().any(|v| v.abs() >= 90.0) {
            return Err(bad(
                SHEAR,
                format!("{shear:?}"),
                "be (min, max) or (x min, x max, y min, y max) in degrees, within (-90, 90), min ≤ max",
                op,
                pos,
            ));
        }
        check_center(&self.center, op, pos)?;
        check_opt_fill(&self.fill, op, pos)
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        let angle = uniform_f32(rng, self.degrees);
        let translate = match self.translate {
            Some((fx, fy)) => {
                let (mx, my) = (fx * w as f64, fy * h as f64);
                // `int(round(uniform(-max, max)))`: Python's round is half-to-even.
                let tx = uniform_f32(rng, (-mx, mx)).round_ties_even();
                let ty = uniform_f32(rng, (-my, my)).round_ties_even();
                [tx, ty]
            }
            None => [0.0, 0.0],
        };
        let scale = self.scale.map_or(1.0, |r| uniform_f32(rng, r));
        let shear = &self.shear;
        let sx = if shear.len() >= 2 { uniform_f32(rng, (shear[0], shear[1])) } else { 0.0 };
        let sy = if shear.len() == 4 { uniform_f32(rng, (shear[2], shear[3])) } else { 0.0 };
        Ok(Drawn::Affine { angle, translate, scale, shear: [sx, sy] })
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, (h, w): (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Affine { angle, translate, scale, shear } = *drawn else { return Err(unreplayed(self, drawn)) };
        let center = self.center.unwrap_or([w as f64 * 0.5, h as f64 * 0.5]);
        let m = forward_affine(center, angle, translate, scale, shear);
        let mask_op =
            OpSpec::RandomAffine(RandomAffine { interp: Interp::Nearest, fill: Some(vec![0.0]), ..self.clone() });
        Ok(vec![Step::warp(self.name(), Move::Affine(m), (h, w), (h, w), mask_op, drawn.clone())])
    }

    fn refilled(&self, fill: f64) -> Self {
        RandomAffine { fill: Some(vec![fill]), ..self.clone() }
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Affine { angle, translate, scale, shear } = drawn else { undrawn(self.name(), drawn) };
        let n = frame.h * frame.w * frame.c;
        let hwc = (frame.h, frame.w, frame.c);
        let params = (*angle, *translate, *scale, *shear);
        warp::affine(&frame.buf[..n], hwc, &mut scratch.spare, params, self.interp, self.center, fill_f32(&self.fill));
        std::mem::swap(&mut frame.buf, &mut scratch.spare);
    }
}

/// `RandomPerspective(distortion_scale, p, interpolation, fill)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomPerspective {
    /// How far the corners may move, in [0, 1] of half the side.
    pub distortion_scale: f64,
    /// Probability.
    pub p: f64,
    /// Nearest or bilinear.
    pub interp: Interp,
    /// As RandomRotation's.
    pub fill: Option<Vec<f64>>,
}

impl Op for RandomPerspective {
    const KINDS: &'static [&'static str] = &["random_perspective"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomPerspective.interpolation", DefaultValue::Str(g::BILINEAR)),
        ("RandomPerspective.fill", DefaultValue::Num(g::WARP_FILL)),
        ("RandomPerspective.distortion_scale", DefaultValue::Num(g::DISTORTION_SCALE)),
        ("RandomPerspective.p", DefaultValue::Num(g::PERSPECTIVE_P)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomPerspective {
            distortion_scale: a.num("distortion_scale")?,
            p: a.num("p")?,
            interp: a.choice(&WARP_INTERPOLATION)?,
            fill: a.opt_fill()?,
        })
    }

    fn name(&self) -> &'static str {
        "RandomPerspective"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)?;
        if !(0.0..=1.0).contains(&self.distortion_scale) {
            return Err(bad(DISTORTION_SCALE, self.distortion_scale, "be in [0, 1]", op, pos));
        }
        check_opt_fill(&self.fill, op, pos)
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        if !gate(rng, self.p) {
            return Ok(Drawn::Skip);
        }
        let (h, w) = (h as i64, w as i64);
        let bh = (self.distortion_scale * (h / 2) as f64) as i64 + 1;
        let bw = (self.distortion_scale * (w / 2) as f64) as i64 + 1;
        // torch.randint(lo, hi): uniform in [lo, hi).
        let mut randint = |lo: i64, hi: i64| lo + rng.below((hi - lo).max(1) as u64) as i64;
        let tl = [randint(0, bw), randint(0, bh)];
        let tr = [randint(w - bw, w), randint(0, bh)];
        let br = [randint(w - bw, w), randint(h - bh, h)];
        let bl = [randint(0, bw), randint(h - bh, h)];
        Ok(Drawn::Perspective([tl[0], tl[1], tr[0], tr[1], br[0], br[1], bl[0], bl[1]]))
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, (h, w): (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Perspective(end) = *drawn else { return Err(unreplayed(self, drawn)) };
        let (start, end) = warp::perspective_points(h, w, end);
        // degenerate corners: the image is left as it is (warp's rule), so are the targets
        let Some(k) = warp::perspective_coeffs(start, end) else { return Ok(Vec::new()) };
        let Some((theta, q)) = perspective_thetas(k) else { return Ok(Vec::new()) };
        let mask_op = OpSpec::RandomPerspective(RandomPerspective {
            interp: Interp::Nearest,
            fill: Some(vec![0.0]),
            ..self.clone()
        });
        Ok(vec![Step::warp(self.name(), Move::Perspective { theta, q }, (h, w), (h, w), mask_op, drawn.clone())])
    }

    fn refilled(&self, fill: f64) -> Self {
        RandomPerspective { fill: Some(vec![fill]), ..self.clone() }
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Perspective(end) = drawn else { undrawn(self.name(), drawn) };
        let (start, end) = warp::perspective_points(frame.h, frame.w, *end);
        // Degenerate corners (a 1-pixel side) have no perspective: the image stays as it is.
        let Some(k) = warp::perspective_coeffs(start, end) else { return };
        let n = frame.h * frame.w * frame.c;
        let hwc = (frame.h, frame.w, frame.c);
        let map = warp::GridMap::Perspective(k);
        let (interp, fill) = (self.interp, fill_f32(&self.fill));
        warp::warp(&frame.buf[..n], hwc, &mut scratch.spare, (frame.h, frame.w), &map, interp, fill);
        std::mem::swap(&mut frame.buf, &mut scratch.spare);
    }
}

/// What a stage-2 `Resize` resizes to (torchvision's `size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeTo {
    /// `Resize(int)`: the shorter side.
    Shorter(u32),
    /// `Resize((h, w))`.
    Exact(u32, u32),
}

/// `Resize(size, interpolation, max_size, antialias)` on the uint8 image (stage 2: after a pixel op, or with
/// `max_size`), with torchvision v2's semantics on uint8 tensors ([`resize::resize_output_hw`] for the size;
/// the resampler: `stage2::resize_box`).
#[derive(Debug, Clone, PartialEq)]
pub struct Resize {
    /// Shorter side or exact (height, width).
    pub size: ResizeTo,
    /// torchvision's `max_size` (only with a shorter-side `size`): the longer side is capped to it.
    pub max_size: Option<u32>,
    /// Filter and antialias.
    pub resample: Resample,
}

impl Op for Resize {
    /// Only the `max_size` form has a spec kind (the others are `TransformSpec`s that fold or become this op).
    const KINDS: &'static [&'static str] = &["resize_max"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("Resize.interpolation", DefaultValue::Str(g::BILINEAR)), ("Resize.antialias", DefaultValue::Bool(true))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(Resize {
            size: ResizeTo::Shorter(a.uint("size")?),
            max_size: Some(a.uint("max_size")?),
            resample: Resample { filter: a.choice(&resize::RESIZE_INTERPOLATION)?, antialias: a.boolean("antialias")? },
        })
    }

    fn name(&self) -> &'static str {
        match self.size {
            ResizeTo::Shorter(_) => "Resize(int)",
            ResizeTo::Exact(..) => "Resize((h, w))",
        }
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (a, b) = match self.size {
            ResizeTo::Shorter(s) => (s, s),
            ResizeTo::Exact(h, w) => (h, w),
        };
        check_side(a, b, op, pos)?;
        match (self.size, self.max_size) {
            (_, None) => Ok(()),
            (ResizeTo::Shorter(s), Some(m)) if s < m && m <= MAX_SIDE => Ok(()),
            (ResizeTo::Shorter(s), Some(m)) => {
                Err(bad(MAX_SIZE, m, &format!("be greater than size ({s}) and at most {MAX_SIDE}"), op, pos))
            }
            (ResizeTo::Exact(..), Some(m)) => {
                Err(bad(MAX_SIZE, m, "be None when size is (h, w) (torchvision's rule)", op, pos))
            }
        }
    }

    fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
        match self.size {
            ResizeTo::Exact(height, width) => Some((height as usize, width as usize)),
            ResizeTo::Shorter(s) => hw.map(|hw| resize::resize_output_hw(hw, s, self.max_size)),
        }
    }

    fn sample(&self, _: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // torchvision returns the image untouched when the size would not change (no resampling at all).
        Ok(if self.output_hw(Some((h, w))) == Some((h, w)) { Drawn::Skip } else { Drawn::Apply })
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, _: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let to = self.output_hw(Some(hw)).expect("a stage-2 Resize has an output size for a sized input");
        Ok(vec![Step::scale(self.name(), hw, to)])
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let (h, w) = (frame.h, frame.w);
        let out = self.output_hw(Some((h, w))).unwrap_or((h, w));
        resize_box(frame, &mut scratch.spare, &mut scratch.resize, (0, 0, h, w), out, self.resample);
    }
}

/// `RandomResize(min_size, max_size, interpolation, antialias)` (torchvision's segmentation recipe): the shorter
/// side resized to a size drawn uniformly from `min_size..max_size` (`torch.randint`: `max_size` excluded), the
/// longer one in proportion (`Resize(int)`'s rule, truncated).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomResize {
    /// Smallest shorter side.
    pub min_size: u32,
    /// One past the largest shorter side.
    pub max_size: u32,
    /// Filter and antialias.
    pub resample: Resample,
}

impl Op for RandomResize {
    const KINDS: &'static [&'static str] = &["random_resize"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomResize.interpolation", DefaultValue::Str(g::BILINEAR)),
        ("RandomResize.antialias", DefaultValue::Bool(true)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomResize {
            min_size: a.uint("min_size")?,
            max_size: a.uint(MAX_SIZE)?,
            resample: Resample { filter: a.choice(&resize::RESIZE_INTERPOLATION)?, antialias: a.boolean("antialias")? },
        })
    }

    fn name(&self) -> &'static str {
        "RandomResize"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        if !(1..=MAX_SIDE).contains(&self.min_size) {
            return Err(bad("min_size", self.min_size, &format!("be in 1..={MAX_SIDE}"), op, pos));
        }
        if self.max_size <= self.min_size || self.max_size > MAX_SIDE {
            let rule = format!("be greater than min_size ({}) and at most {MAX_SIDE} (torch.randint)", self.min_size);
            return Err(bad(MAX_SIZE, self.max_size, &rule, op, pos));
        }
        Ok(())
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        None
    }

    fn oversized(&self, hw: (usize, usize)) -> Option<(usize, usize)> {
        Some(resize::resize_output_hw(hw, self.max_size - 1, None)).filter(|&hw| super::frame_too_big(hw))
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // torchvision: size = int(torch.randint(min_size, max_size, ())); F.resize(inpt, [size])
        let size = self.min_size + rng.below(u64::from(self.max_size - self.min_size)) as u32;
        let (oh, ow) = resize::resize_output_hw((h, w), size, None);
        // the resize kernels return an input already of that size as it is
        Ok(if (oh, ow) == (h, w) { Drawn::Skip } else { Drawn::Size { h: oh as u32, w: ow as u32 } })
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Size { h, w } = *drawn else { return Err(unreplayed(self, drawn)) };
        Ok(vec![Step::scale(self.name(), hw, (h as usize, w as usize))])
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Size { h, w } = *drawn else { undrawn(self.name(), drawn) };
        let (fh, fw) = (frame.h, frame.w);
        resize_box(
            frame,
            &mut scratch.spare,
            &mut scratch.resize,
            (0, 0, fh, fw),
            (h as usize, w as usize),
            self.resample,
        );
    }
}

/// `CenterCrop(size)` on the uint8 image (zero padding where the crop is larger, as torchvision; the folded one
/// is `TransformSpec::CenterCrop`, no spec kind of its own).
#[derive(Debug, Clone, PartialEq)]
pub struct CenterCrop {
    /// Crop height.
    pub height: u32,
    /// Crop width.
    pub width: u32,
}

impl Op for CenterCrop {
    const KINDS: &'static [&'static str] = &[];

    fn name(&self) -> &'static str {
        "CenterCrop"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_side(self.height, self.width, op, pos)
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        Some((self.height as usize, self.width as usize))
    }

    fn sample(&self, _: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // torchvision returns the image untouched when the size would not change.
        Ok(if self.output_hw(Some((h, w))) == Some((h, w)) { Drawn::Skip } else { Drawn::Apply })
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, _: &Drawn, (h, w): (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let (oh, ow) = (self.height as usize, self.width as usize);
        let (y0, x0) = (center_crop_start(h as i64, oh as i64), center_crop_start(w as i64, ow as i64));
        Ok(vec![Step::shift(self.name(), (-x0, -y0), (h, w), (oh, ow))])
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let (oh, ow) = (self.height as usize, self.width as usize);
        let y0 = center_crop_start(frame.h as i64, oh as i64) as isize;
        let x0 = center_crop_start(frame.w as i64, ow as i64) as isize;
        pad_crop(frame, &mut scratch.spare, (oh, ow), (y0, x0), PadMode::Constant, &[0; 3]);
    }
}

/// `RandomResizedCrop(size, scale, ratio, interpolation, antialias)` on the uint8 image (the folded one is
/// `TransformSpec::RandomResizedCrop`, no spec kind of its own).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomResizedCrop {
    /// Output height.
    pub height: u32,
    /// Output width.
    pub width: u32,
    /// Area fraction range, 0 < min ≤ max ≤ 1.
    pub scale: (f64, f64),
    /// Aspect-ratio (w/h) range, 0 < min ≤ max; drawn log-uniformly.
    pub ratio: (f64, f64),
    /// Filter and antialias.
    pub resample: Resample,
}

impl Op for RandomResizedCrop {
    const KINDS: &'static [&'static str] = &[];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomResizedCrop.interpolation", DefaultValue::Str(g::BILINEAR)),
        ("RandomResizedCrop.antialias", DefaultValue::Bool(true)),
    ];

    fn name(&self) -> &'static str {
        "RandomResizedCrop"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_side(self.height, self.width, op, pos)?;
        let (lo, hi) = self.scale;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi && hi <= 1.0) {
            return Err(bad(SCALE, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max ≤ 1", op, pos));
        }
        let (lo, hi) = self.ratio;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
            return Err(bad(RATIO, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
        }
        Ok(())
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        Some((self.height as usize, self.width as usize))
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        let ratio = self.ratio;
        let log_ratio = (ratio.0.ln(), ratio.1.ln());
        let (top, left, ch, cw) = resize::rrc_draw(rng, w as u32, h as u32, self.scale, log_ratio, ratio);
        Ok(Drawn::Box { top: top as u32, left: left as u32, h: ch as u32, w: cw as u32 })
    }

    fn check_targets(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn target_steps(&self, drawn: &Drawn, hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        let Drawn::Box { top, left, h: ch, w: cw } = *drawn else { return Err(unreplayed(self, drawn)) };
        let crop = (ch as usize, cw as usize);
        let to = (self.height as usize, self.width as usize);
        let shift = Step::shift(self.name(), (-i64::from(left), -i64::from(top)), hw, crop);
        Ok(vec![shift, Step::scale(self.name(), crop, to)])
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Box { top, left, h: ch, w: cw } = drawn else { undrawn(self.name(), drawn) };
        let b = (*top as usize, *left as usize, *ch as usize, *cw as usize);
        let out = (self.height as usize, self.width as usize);
        resize_box(frame, &mut scratch.spare, &mut scratch.resize, b, out, self.resample);
    }
}
