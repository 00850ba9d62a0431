//! Geometry: the transform list compiled to "crop rectangle in original coordinates + output size + flip", with
//! torchvision's semantics (PIL backend) reproduced exactly, including Python's round-half-to-even.
//!
//! Every supported list reduces, per sample, to one [`Axis`] per dimension: output pixel `j` (0 ≤ j < out_n) is
//! the pixel `start + j` of the image resized to `resized` pixels (Pillow's `resize`, whose sample centres are
//! `(start + j + 0.5) · scale` relative to `lo`), or zero padding when `start + j` falls outside `[0, resized)`.
//! `[lo, hi)` is the source span Pillow clamps its filter to: the whole image for Resize, the crop for
//! RandomResizedCrop (torchvision crops first, then resizes the cropped image).
//!
//! Also here: a leading `RandomCrop` folded into the decode ([`Geometry::RandomCrop`], ROI only). The filter,
//! the axis type and torchvision's size/box rules live in [`super::resize`] (shared with the resampler and the
//! op table); the geometric ops placed after a pixel op run as ops (`ops/geometric.rs`).

use super::kernels::PadMode;
use super::ops::{Drawn, OpSpec, RandomCrop, VerticalFlip};
pub use super::resize::{Axis, Filter, RESIZE_INTERPOLATION, Resample, center_crop_start, resize_output_hw, rrc_draw};
use super::{SampleKey, TransformSpec};
use crate::error::{Result, TrdataError};
use crate::param::IntParam;
use crate::rng::{OP_BASE, OP_HORIZONTAL_FLIP, OP_RANDOM_FILTER, OP_RANDOM_RESIZED_CROP, SampleRng};

/// A sample's geometry: both axes + whether the output is flipped horizontally.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplePlan {
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// Mirror the output left-right.
    pub flip: bool,
    /// Mirror the output top-bottom (`RandomVerticalFlip` in the folded prefix).
    pub vflip: bool,
    /// Run the vertical pass before the horizontal one (Pillow's choice for this resize, see
    /// [`pillow_vertical_first`]); the 8-bit intermediate makes the order visible in the last bit.
    pub vertical_first: bool,
    /// Whether the flips placed before the list's resize mirrored the image (left-right, top-bottom) before it
    /// was resized. The pixels' fold mirrors the output instead, exact for the symmetric resampling filters; a
    /// nearest index map is not symmetric, so the targets' masks follow the list's order
    /// (annot/warp.rs, `AxisMap::mirror_first`).
    pub mirror_first: (bool, bool),
}

/// Which pass Pillow (13.x) runs first when resizing `in_w × in_h` to `out_w × out_h`: vertical first iff the
/// height shrinks by more than twice as many pixels as the width, i.e. `(in_h - out_h) > 2 · max(0, in_w - out_w)`.
/// Measured against Pillow 13.0.0 on several hundred size combinations (earlier Pillow versions always ran the
/// horizontal pass first); it only affects rounding of the 8-bit intermediate (±1).
pub fn pillow_vertical_first(in_w: i64, in_h: i64, out_w: i64, out_h: i64) -> bool {
    in_h - out_h > 2 * (in_w - out_w).max(0)
}

/// The geometric part of a compiled transform list.
#[derive(Debug, Clone, PartialEq)]
pub enum Geometry {
    /// `RandomResizedCrop`.
    RandomResizedCrop {
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
        /// Area fraction range.
        scale: (f64, f64),
        /// `ln` of the aspect-ratio range (the draw is log-uniform).
        log_ratio: (f64, f64),
        /// Aspect-ratio range (for the fallback).
        ratio: (f64, f64),
    },
    /// `Resize(shorter)` followed by `CenterCrop`.
    ResizeShorterCrop {
        /// Shorter side after the resize.
        shorter: u32,
        /// Crop height.
        height: usize,
        /// Crop width.
        width: usize,
    },
    /// `Resize((h, w))`, optionally followed by `CenterCrop`.
    ResizeExact {
        /// Resized height.
        resize_h: u32,
        /// Resized width.
        resize_w: u32,
        /// (height, width) of the centre crop, if any.
        crop: Option<(usize, usize)>,
    },
    /// timm's `ResizeKeepRatio` (the sample's own output size), optionally followed by `CenterCrop`.
    ResizeKeepRatio {
        /// Target (height, width).
        target: (u32, u32),
        /// timm's `longest`, in [0, 1].
        longest: f64,
        /// (height, width) of the centre crop, if any.
        crop: Option<(usize, usize)>,
    },
    /// `CenterCrop` alone (no resampling: scale 1, identity filter).
    CenterCrop {
        /// Crop height.
        height: usize,
        /// Crop width.
        width: usize,
    },
    /// A leading `RandomCrop` that cannot fail and pads with zeros ([`random_crop_folds`]): its window is drawn
    /// from the header size on the op's own stream (`OP_BASE + pos`, exactly as the pixel op would draw it on the
    /// decoded image), only that window is decoded (no DCT scaling: nothing is resampled), and the padding is the
    /// fused pass's zero padding.
    RandomCrop {
        /// The op (its size, padding and `pad_if_needed`; the draw is [`OpSpec::sample`]'s).
        op: OpSpec,
        /// Its list position (its stream).
        pos: usize,
    },
    /// `ScaleJitter` then a folding `RandomCrop` (large scale jitter): the resize to the drawn size is folded
    /// with the crop of it, so only the window is resampled (and the decode DCT-scaled when it shrinks). Each op
    /// draws on its own stream (`OP_BASE + pos`) exactly as the pixel ops would: the jitter from the header
    /// size, the crop from the jittered size.
    ScaleJitterCrop {
        /// The ScaleJitter op and its list position.
        jitter: (OpSpec, usize),
        /// The RandomCrop op and its list position.
        crop: (OpSpec, usize),
    },
    /// Nothing folds (the program starts with a pixel op, `Pad` or `RandomCrop`): the whole image at full size,
    /// whose size is the sample's own.
    Identity,
}

/// A compiled transform list.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledTransforms {
    /// Geometry.
    pub geometry: Geometry,
    /// Flip probabilities in list order, with whether each precedes the cropping op (then it mirrors the crop).
    pub flips: Vec<(f64, bool)>,
    /// Vertical flips: (list position, probability, precedes the cropping op). Each draws from its own stream
    /// `OP_BASE + position` (the horizontal ones keep their shared stream, so today's recipes draw as before).
    pub vflips: Vec<(usize, f64, bool)>,
    /// The resize's filter (`Resampled` around the resize; bilinear antialiased otherwise).
    pub resample: Resample,
    /// How many of `flips` and of `vflips` (the first ones) precede the list's first geometric op, its resize
    /// ([`SamplePlan::mirror_first`]).
    pub flips_first: (usize, usize),
}

/// Whether a `RandomCrop` folds into the decode when it leads the list (after flips only): its draw can never
/// fail — `pad_if_needed`, or padding that fits the crop on a 1-pixel image — so the fused pass needs no error
/// path torchvision would take on a too-small image; and any padding is constant zeros (`fill` below 1 truncates
/// to 0), which is what the fused pass writes outside the image. Otherwise it stays a pixel op (same result,
/// whole image decoded). A `RandomCrop` after a resize does not fold: the unfolded list resizes the whole image
/// on the uint8 tensor (torch's pass order, full-size decode), which the fused, DCT-scaled resize would not
/// reproduce byte for byte.
pub fn random_crop_folds(op: &OpSpec) -> bool {
    let OpSpec::RandomCrop(RandomCrop { height, width, padding: [l, t, r, b], pad_if_needed, fill, mode }) = op else {
        return false;
    };
    let fits = *pad_if_needed
        || (u64::from(*t) + u64::from(*b) + 1 >= u64::from(*height)
            && u64::from(*l) + u64::from(*r) + 1 >= u64::from(*width));
    fits && *mode == PadMode::Constant && super::ops::fill_bytes(fill) == [0; 3]
}

/// The transform's name for messages.
pub fn name(t: &TransformSpec) -> &'static str {
    match t {
        TransformSpec::Op(op) => op.name(),
        TransformSpec::RandomResizedCrop { .. } => "RandomResizedCrop",
        TransformSpec::ResizeShorter { .. } => "Resize(int)",
        TransformSpec::ResizeExact { .. } => "Resize((h, w))",
        TransformSpec::CenterCrop { .. } => "CenterCrop",
        TransformSpec::ResizeKeepRatio { .. } => "ResizeKeepRatio",
        TransformSpec::RandomHorizontalFlip { .. } => "RandomHorizontalFlip",
        TransformSpec::Resampled { inner, .. } => name(inner),
    }
}

/// A transform's output size (each of height and width, or Resize(int)'s shorter side).
pub const SIZE: IntParam = IntParam::new("size", 1, 65_536);
/// RandomResizedCrop's `scale` (fraction of the image area; above 1 the crop could never fit).
const SCALE: &str = "scale";
/// RandomResizedCrop's `ratio` (aspect ratio w/h).
const RATIO: &str = "ratio";
/// RandomHorizontalFlip's `p` (probability).
const P: &str = "p";
/// ResizeKeepRatio's `longest` (which side meets the target).
const LONGEST: &str = "longest";

/// Where in the list an op sits, for messages: `RandomResizedCrop at transforms[0]`.
fn whence(t: &TransformSpec, pos: usize) -> String {
    format!("{} at transforms[{pos}]", name(t))
}

/// Each of `dims` in [`SIZE`]'s range.
fn check_size(t: &TransformSpec, pos: usize, dims: &[u32]) -> Result<()> {
    match dims.iter().find(|&&d| SIZE.check::<u32>(i128::from(d)).is_err()) {
        Some(_) => {
            let shown = dims.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            let shown = if dims.len() == 1 { shown } else { format!("({shown})") };
            Err(SIZE.error_in(&shown, &whence(t, pos)))
        }
        None => Ok(()),
    }
}

/// A `(min, max)` range with 0 < min ≤ max ≤ `max` (both finite).
fn check_range(param: &str, t: &TransformSpec, pos: usize, (lo, hi): (f64, f64), max: f64) -> Result<()> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && lo <= hi && hi <= max) {
        let top = if max.is_finite() { format!(" ≤ {max}") } else { String::new() };
        return Err(TrdataError::config(
            param,
            format!("({lo}, {hi}) must be finite with 0 < min ≤ max{top} ({})", whence(t, pos)),
        ));
    }
    Ok(())
}

const SUPPORTED: &str = "supported lists (RandomHorizontalFlip allowed anywhere): [RandomResizedCrop], \
[Resize(int), CenterCrop], [Resize((h, w))], [Resize((h, w)), CenterCrop], [CenterCrop], \
[ResizeKeepRatio, CenterCrop] (timm's)";

/// Validate a transform list and compile it. Errors name the offending parameter.
pub fn compile(transforms: &[TransformSpec]) -> Result<CompiledTransforms> {
    let mut geo: Vec<(usize, &TransformSpec)> = Vec::new();
    let mut flip_ps: Vec<(usize, f64)> = Vec::new();
    let mut vflip_ps: Vec<(usize, f64)> = Vec::new();
    let mut resample = Resample::default();
    for (pos, t) in transforms.iter().enumerate() {
        // `Resampled` carries the filter of the resize it wraps; the resize itself is compiled as usual.
        let t = match t {
            TransformSpec::Resampled { resample: r, inner } => {
                if !matches!(
                    **inner,
                    TransformSpec::RandomResizedCrop { .. }
                        | TransformSpec::ResizeShorter { .. }
                        | TransformSpec::ResizeExact { .. }
                        | TransformSpec::ResizeKeepRatio { .. }
                ) {
                    return Err(TrdataError::config(
                        "interpolation",
                        format!("is only for Resize and RandomResizedCrop, not {} ({})", name(inner), whence(t, pos)),
                    ));
                }
                resample = *r;
                &**inner
            }
            t => t,
        };
        match *t {
            TransformSpec::Resampled { .. } => unreachable!("unwrapped above"),
            TransformSpec::Op(ref op @ OpSpec::VerticalFlip(VerticalFlip { p })) => {
                op.check(pos)?;
                vflip_ps.push((pos, p));
            }
            TransformSpec::Op(ref op) if random_crop_folds(op) || matches!(op, OpSpec::ScaleJitter(_)) => {
                op.check(pos)?;
                if let OpSpec::ScaleJitter(j) = op {
                    resample = j.resample;
                }
                geo.push((pos, t));
            }
            TransformSpec::Op(ref op) => {
                return Err(TrdataError::config(
                    super::TRANSFORMS,
                    format!("{} at transforms[{pos}] does not fold into the decode", op.name()),
                ));
            }
            TransformSpec::RandomHorizontalFlip { p } => {
                if !(0.0..=1.0).contains(&p) {
                    return Err(TrdataError::config(P, format!("{p} must be in [0, 1] ({})", whence(t, pos))));
                }
                flip_ps.push((pos, p));
            }
            TransformSpec::RandomResizedCrop { height, width, scale, ratio } => {
                check_size(t, pos, &[height, width])?;
                check_range(SCALE, t, pos, scale, 1.0)?;
                check_range(RATIO, t, pos, ratio, f64::INFINITY)?;
                geo.push((pos, t));
            }
            TransformSpec::ResizeShorter { shorter } => {
                check_size(t, pos, &[shorter])?;
                geo.push((pos, t));
            }
            TransformSpec::ResizeKeepRatio { height, width, longest } => {
                check_size(t, pos, &[height, width])?;
                if !(0.0..=1.0).contains(&longest) {
                    return Err(TrdataError::config(
                        LONGEST,
                        format!("{longest} must be in [0, 1] ({})", whence(t, pos)),
                    ));
                }
                geo.push((pos, t));
            }
            TransformSpec::ResizeExact { height, width } | TransformSpec::CenterCrop { height, width } => {
                check_size(t, pos, &[height, width])?;
                geo.push((pos, t));
            }
        }
    }
    let names: Vec<&str> = geo.iter().map(|(_, t)| name(t)).collect();
    // Position of the op that crops (flips before it mirror the crop window); usize::MAX = no crop.
    let (geometry, crop_pos) = match geo.as_slice() {
        [(p, TransformSpec::RandomResizedCrop { height, width, scale, ratio })] => (
            Geometry::RandomResizedCrop {
                height: *height as usize,
                width: *width as usize,
                scale: *scale,
                ratio: *ratio,
                log_ratio: (ratio.0.ln(), ratio.1.ln()),
            },
            *p,
        ),
        [(_, TransformSpec::ResizeShorter { shorter }), (p, TransformSpec::CenterCrop { height, width })] => {
            (Geometry::ResizeShorterCrop { shorter: *shorter, height: *height as usize, width: *width as usize }, *p)
        }
        [(_, TransformSpec::ResizeExact { height, width })] => {
            (Geometry::ResizeExact { resize_h: *height, resize_w: *width, crop: None }, usize::MAX)
        }
        [
            (_, TransformSpec::ResizeExact { height, width }),
            (p, TransformSpec::CenterCrop { height: ch, width: cw }),
        ] => (
            Geometry::ResizeExact { resize_h: *height, resize_w: *width, crop: Some((*ch as usize, *cw as usize)) },
            *p,
        ),
        [(p, TransformSpec::CenterCrop { height, width })] => {
            (Geometry::CenterCrop { height: *height as usize, width: *width as usize }, *p)
        }
        [(p, TransformSpec::Op(op @ OpSpec::RandomCrop(_)))] => (Geometry::RandomCrop { op: op.clone(), pos: *p }, *p),
        [(jp, TransformSpec::Op(j @ OpSpec::ScaleJitter(_))), (cp, TransformSpec::Op(c @ OpSpec::RandomCrop(_)))] => {
            (Geometry::ScaleJitterCrop { jitter: (j.clone(), *jp), crop: (c.clone(), *cp) }, *cp)
        }
        [(_, TransformSpec::ResizeKeepRatio { height, width, longest })] => {
            (Geometry::ResizeKeepRatio { target: (*height, *width), longest: *longest, crop: None }, usize::MAX)
        }
        [
            (_, TransformSpec::ResizeKeepRatio { height, width, longest }),
            (p, TransformSpec::CenterCrop { height: ch, width: cw }),
        ] => (
            Geometry::ResizeKeepRatio {
                target: (*height, *width),
                longest: *longest,
                crop: Some((*ch as usize, *cw as usize)),
            },
            *p,
        ),
        [] => {
            return Err(TrdataError::config(
                super::TRANSFORMS,
                format!("[] must fix the output size (hold a resize or crop); {SUPPORTED}"),
            ));
        }
        [(_, TransformSpec::ResizeShorter { .. })] => {
            return Err(TrdataError::config(
                super::TRANSFORMS,
                format!(
                    "[{}] must fix the output size: Resize(int) alone gives images of different sizes, which cannot \
                     be batched; follow it with CenterCrop, or use Resize((h, w)); {SUPPORTED}",
                    names.join(", ")
                ),
            ));
        }
        _ => {
            return Err(TrdataError::config(
                super::TRANSFORMS,
                format!("[{}] must be one of the {SUPPORTED}", names.join(", ")),
            ));
        }
    };
    let before = |pos: usize| pos < crop_pos && crop_pos != usize::MAX;
    let first = geo.first().map_or(usize::MAX, |(p, _)| *p);
    let flips_first = (
        flip_ps.iter().filter(|(pos, _)| *pos < first).count(),
        vflip_ps.iter().filter(|(pos, _)| *pos < first).count(),
    );
    let flips = flip_ps.into_iter().map(|(pos, p)| (p, before(pos))).collect();
    let vflips = vflip_ps.into_iter().map(|(pos, p)| (pos, p, before(pos))).collect();
    Ok(CompiledTransforms { geometry, flips, vflips, resample, flips_first })
}

/// The identity geometry (see [`Geometry::Identity`]) with the flips of `flips_only` (a list of flips, which
/// [`compile`] validates).
pub fn compile_identity(flips_only: &[TransformSpec]) -> Result<CompiledTransforms> {
    let mut c = CompiledTransforms {
        geometry: Geometry::Identity,
        flips: Vec::new(),
        vflips: Vec::new(),
        resample: Resample::default(),
        flips_first: (0, 0),
    };
    for (pos, t) in flips_only.iter().enumerate() {
        match *t {
            TransformSpec::RandomHorizontalFlip { p } => {
                if !(0.0..=1.0).contains(&p) {
                    return Err(TrdataError::config(P, format!("{p} must be in [0, 1] ({})", whence(t, pos))));
                }
                c.flips.push((p, false));
            }
            TransformSpec::Op(ref op @ OpSpec::VerticalFlip(VerticalFlip { p })) => {
                op.check(pos)?;
                c.vflips.push((pos, p, false));
            }
            _ => unreachable!("compile_identity takes flips only"),
        }
    }
    Ok(c)
}

impl CompiledTransforms {
    /// Output (height, width); `None` for the identity (each sample keeps its own size).
    pub fn output_hw(&self) -> Option<(usize, usize)> {
        Some(match self.geometry {
            Geometry::Identity => return None,
            Geometry::RandomResizedCrop { height, width, .. }
            | Geometry::ResizeShorterCrop { height, width, .. }
            | Geometry::CenterCrop { height, width } => (height, width),
            Geometry::ResizeExact { crop: Some((h, w)), .. } => (h, w),
            Geometry::ResizeExact { resize_h, resize_w, crop: None } => (resize_h as usize, resize_w as usize),
            Geometry::RandomCrop { ref op, .. } | Geometry::ScaleJitterCrop { crop: (ref op, _), .. } => {
                return op.output_hw(None);
            }
            Geometry::ResizeKeepRatio { crop: Some((h, w)), .. } => (h, w),
            Geometry::ResizeKeepRatio { crop: None, .. } => return None,
        })
    }

    /// Whether the folded geometry crops (RandomResizedCrop, a CenterCrop, a folded RandomCrop): torchvision's crop
    /// kernels clamp boxes to their canvas, its resize kernel does not (annot/warp.rs).
    pub fn crops(&self) -> bool {
        match &self.geometry {
            Geometry::Identity => false,
            Geometry::ResizeExact { crop, .. } | Geometry::ResizeKeepRatio { crop, .. } => crop.is_some(),
            Geometry::RandomResizedCrop { .. }
            | Geometry::ScaleJitterCrop { .. }
            | Geometry::ResizeShorterCrop { .. }
            | Geometry::CenterCrop { .. }
            | Geometry::RandomCrop { .. } => true,
        }
    }

    /// Whether the geometry draws random numbers (decides the DCT-scaling policy: random crops may scale harder).
    pub fn is_random_crop(&self) -> bool {
        matches!(self.geometry, Geometry::RandomResizedCrop { .. } | Geometry::ScaleJitterCrop { .. })
    }

    /// The geometry of sample `key` for an image of `width × height` (stored orientation).
    pub fn plan(&self, width: u32, height: u32, key: SampleKey) -> SamplePlan {
        // Flip coins: one stream for all flip ops, drawn in list order (torchvision: `torch.rand(1) < p`).
        let mut coins = SampleRng::new(key.seed, key.epoch, key.index, OP_HORIZONTAL_FLIP);
        let (mut flip, mut mirror_crop, mut mirror_first) = (false, false, (false, false));
        for (k, &(p, before_crop)) in self.flips.iter().enumerate() {
            if coins.uniform() < p {
                flip = !flip;
                if before_crop {
                    mirror_crop = !mirror_crop;
                }
                mirror_first.0 ^= k < self.flips_first.0;
            }
        }
        let (mut vflip, mut mirror_rows) = (false, false);
        for (k, &(pos, p, before_crop)) in self.vflips.iter().enumerate() {
            if SampleRng::new(key.seed, key.epoch, key.index, OP_BASE + pos as u32).uniform() < p {
                vflip = !vflip;
                if before_crop {
                    mirror_rows = !mirror_rows;
                }
                mirror_first.1 ^= k < self.flips_first.1;
            }
        }
        let (w, h) = (i64::from(width), i64::from(height));
        let (x, y, vertical_first) = match self.geometry {
            Geometry::Identity => {
                (resize_crop_axis(w, w, width as usize), resize_crop_axis(h, h, height as usize), false)
            }
            Geometry::RandomResizedCrop { height: oh, width: ow, scale, log_ratio, ratio } => {
                let (top, left, ch, cw) = rrc_params(width, height, scale, log_ratio, ratio, key);
                let vf = pillow_vertical_first(cw, ch, ow as i64, oh as i64);
                (crop_resize_axis(left, cw, ow), crop_resize_axis(top, ch, oh), vf)
            }
            Geometry::ResizeShorterCrop { shorter, height: oh, width: ow } => {
                let (rw, rh) = resize_shorter(width, height, shorter);
                (resize_crop_axis(w, rw, ow), resize_crop_axis(h, rh, oh), pillow_vertical_first(w, h, rw, rh))
            }
            Geometry::ResizeExact { resize_h, resize_w, crop } => {
                let (rw, rh) = (i64::from(resize_w), i64::from(resize_h));
                let (oh, ow) = crop.unwrap_or((resize_h as usize, resize_w as usize));
                (resize_crop_axis(w, rw, ow), resize_crop_axis(h, rh, oh), pillow_vertical_first(w, h, rw, rh))
            }
            Geometry::CenterCrop { height: oh, width: ow } => {
                (resize_crop_axis(w, w, ow), resize_crop_axis(h, h, oh), false)
            }
            Geometry::RandomCrop { ref op, pos } => {
                let mut rng = SampleRng::new(key.seed, key.epoch, key.index, OP_BASE + pos as u32);
                let (oh, ow) = op.output_hw(None).unwrap_or((1, 1));
                // `random_crop_folds` admits only draws that cannot fail; the fallback (a centred window) is
                // never taken.
                let (top, left) = match op.sample(&mut rng, (height as usize, width as usize, 3)) {
                    Ok(Drawn::Crop { padding: [pl, pt, ..], top, left }) => {
                        (i64::from(top) - i64::from(pt), i64::from(left) - i64::from(pl))
                    }
                    _ => (center_crop_start(h, oh as i64), center_crop_start(w, ow as i64)),
                };
                let axis = |len: i64, start: i64, out_n: usize| Axis { start, ..resize_crop_axis(len, len, out_n) };
                (axis(w, left, ow), axis(h, top, oh), false)
            }
            Geometry::ScaleJitterCrop { jitter: (ref j, jp), crop: (ref c, cp) } => {
                let stream = |pos: usize| SampleRng::new(key.seed, key.epoch, key.index, OP_BASE + pos as u32);
                // a jitter that cannot draw (a side out of range, which the pixel op refuses) keeps the size
                let (rh, rw) = match j.sample(&mut stream(jp), (height as usize, width as usize, 3)) {
                    Ok(Drawn::Size { h: rh, w: rw }) => (i64::from(rh), i64::from(rw)),
                    _ => (h, w),
                };
                let (oh, ow) = c.output_hw(None).unwrap_or((1, 1));
                // `random_crop_folds`: the crop's draw cannot fail
                let (top, left) = match c.sample(&mut stream(cp), (rh as usize, rw as usize, 3)) {
                    Ok(Drawn::Crop { padding: [pl, pt, ..], top, left }) => {
                        (i64::from(top) - i64::from(pt), i64::from(left) - i64::from(pl))
                    }
                    _ => (center_crop_start(rh, oh as i64), center_crop_start(rw, ow as i64)),
                };
                let x = Axis { start: left, ..resize_crop_axis(w, rw, ow) };
                let y = Axis { start: top, ..resize_crop_axis(h, rh, oh) };
                (x, y, pillow_vertical_first(w, h, rw, rh))
            }
            Geometry::ResizeKeepRatio { target, longest, crop } => {
                let (rw, rh) = resize_keep_ratio(width, height, target, longest);
                let (oh, ow) = crop.unwrap_or((rh as usize, rw as usize));
                (resize_crop_axis(w, rw, ow), resize_crop_axis(h, rh, oh), pillow_vertical_first(w, h, rw, rh))
            }
        };
        let x = if mirror_crop { x.mirrored(w) } else { x };
        let y = if mirror_rows { y.mirrored(h) } else { y };
        // timm's per-sample `random.choice((BILINEAR, BICUBIC))`.
        let resample = match self.resample.filter {
            Filter::Random => {
                let pick = SampleRng::new(key.seed, key.epoch, key.index, OP_RANDOM_FILTER).below(2);
                Resample { filter: if pick == 0 { Filter::Bilinear } else { Filter::Bicubic }, ..self.resample }
            }
            _ => self.resample,
        };
        let (x, y) = (Axis { resample, ..x }, Axis { resample, ..y });
        SamplePlan { x, y, flip, vflip, vertical_first, mirror_first }
    }
}

/// timm's `ResizeKeepRatio.get_params` without the random factors: (w, h) = `round(side / ratio)` (Python's
/// half-to-even) with `ratio = max(h/th, w/tw)·longest + min(h/th, w/tw)·(1 - longest)`, each side at least 1 and
/// at most 65,536 (timm would allocate whatever a sliver image asks for; trdata bounds the resized image).
pub fn resize_keep_ratio(width: u32, height: u32, (th, tw): (u32, u32), longest: f64) -> (i64, i64) {
    let (rh, rw) = (f64::from(height) / f64::from(th), f64::from(width) / f64::from(tw));
    let ratio = rh.max(rw) * longest + rh.min(rw) * (1.0 - longest);
    let side = |x: u32| ((f64::from(x) * 1.0 / ratio).round_ties_even() as i64).clamp(1, SIZE.max as i64);
    (side(width), side(height))
}

/// torchvision `Resize(int)` output size (w, h): shorter side = `s`, longer = `int(s * long / short)`.
pub fn resize_shorter(width: u32, height: u32, s: u32) -> (i64, i64) {
    let (short, long) = if width <= height { (width, height) } else { (height, width) };
    let new_long = (f64::from(s) * f64::from(long) / f64::from(short)) as i64;
    let s = i64::from(s);
    if width <= height { (s, new_long) } else { (new_long, s) }
}

fn resize_crop_axis(source_len: i64, resized: i64, out_n: usize) -> Axis {
    Axis {
        out_n,
        start: center_crop_start(resized, out_n as i64),
        resized,
        scale: source_len as f64 / resized as f64,
        lo: 0,
        hi: source_len,
        resample: Resample::default(),
    }
}

fn crop_resize_axis(offset: i64, len: i64, out_n: usize) -> Axis {
    Axis {
        out_n,
        start: 0,
        resized: out_n as i64,
        scale: len as f64 / out_n as f64,
        lo: offset,
        hi: offset + len,
        resample: Resample::default(),
    }
}

/// torchvision `RandomResizedCrop.get_params` → (top, left, height, width), drawing from the sample's own stream.
pub fn rrc_params(
    width: u32,
    height: u32,
    scale: (f64, f64),
    log_ratio: (f64, f64),
    ratio: (f64, f64),
    key: SampleKey,
) -> (i64, i64, i64, i64) {
    let mut rng = SampleRng::new(key.seed, key.epoch, key.index, OP_RANDOM_RESIZED_CROP);
    rrc_draw(&mut rng, width, height, scale, log_ratio, ratio)
}
