//! resize — the resize vocabulary the augment rooms share, in one leaf file (it imports no other augment file,
//! so the folded geometry ([`super::geometry`]), the resampler ([`super::resample`]), the op table
//! ([`super::ops`]) and the stage-2 resizes (`stage2`) can all use it without import cycles):
//! the filter ([`Filter`], [`Resample`], torchvision's interpolation names), one axis of a resize ([`Axis`]),
//! and torchvision's size and box rules (`center_crop_start`, `rrc_draw`, `resize_output_hw`).

use crate::param::Choice;
use crate::rng::SampleRng;

/// The resampling filter of the folded resize (torchvision's `interpolation` names; the fused path's reference is
/// Pillow's `Image.resize` with that filter, as torchvision v2 runs it on PIL images).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filter {
    /// Pillow's NEAREST (`ImagingScaleAffine`: source pixel `(int)` of the running sum `0.5·scale + k·scale`).
    Nearest,
    /// Pillow's BILINEAR (triangle, support 1 scaled on downscale).
    #[default]
    Bilinear,
    /// Pillow's BICUBIC (a = -0.5, support 2 scaled on downscale).
    Bicubic,
    /// timm's `interpolation='random'` (`RandomResizedCropAndInterpolation`): bilinear or bicubic with
    /// probability ½ each, drawn per sample from stream `OP_RANDOM_FILTER`. [`CompiledTransforms::plan`]
    /// resolves it, so the resamplers only ever see one of the two.
    Random,
}

/// The `interpolation` values of Resize and RandomResizedCrop.
pub const RESIZE_INTERPOLATION: Choice<Filter> = Choice {
    name: "interpolation",
    values: &[
        ("nearest", Filter::Nearest),
        ("bilinear", Filter::Bilinear),
        ("bicubic", Filter::Bicubic),
        ("random", Filter::Random),
    ],
};

/// How the folded resize resamples: the filter, and whether its support grows with the downscale factor
/// (`antialias`, Pillow's behaviour and torchvision's default; without it a downscale aliases as
/// `F.resize(tensor, antialias=False)` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resample {
    /// Filter.
    pub filter: Filter,
    /// Scale the support on downscale.
    pub antialias: bool,
}

impl Default for Resample {
    fn default() -> Self {
        Resample { filter: Filter::Bilinear, antialias: true }
    }
}

/// One dimension of a sample's geometry (see module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axis {
    /// Output pixels along this axis.
    pub out_n: usize,
    /// Index, in the resized image, of output pixel 0 (negative when the crop is padded before the image).
    pub start: i64,
    /// Length of the resized image along this axis.
    pub resized: i64,
    /// Source pixels per resized pixel (`(hi - lo) / resized`).
    pub scale: f64,
    /// First source pixel of the filter's clamp span (original coordinates).
    pub lo: i64,
    /// End (exclusive) of the clamp span.
    pub hi: i64,
    /// The resampling filter.
    pub resample: Resample,
}

impl Axis {
    /// Output indices that come from the image (the rest is zero padding).
    pub fn valid(&self) -> std::ops::Range<usize> {
        let a = (-self.start).clamp(0, self.out_n as i64) as usize;
        let b = (self.resized - self.start).clamp(a as i64, self.out_n as i64) as usize;
        a..b
    }

    /// The same axis seen in a horizontally mirrored image (for flips that precede the crop).
    pub(crate) fn mirrored(self, source_len: i64) -> Self {
        Self {
            start: self.resized - self.start - self.out_n as i64,
            lo: source_len - self.hi,
            hi: source_len - self.lo,
            ..self
        }
    }
}

/// torchvision CenterCrop offset of a crop of `crop` pixels in an image of `len` pixels: `int(round((len - crop)
/// / 2.0))` when the crop fits; otherwise the image is padded by `(crop - len) // 2` before it (offset negative).
pub fn center_crop_start(len: i64, crop: i64) -> i64 {
    if crop > len {
        -((crop - len) / 2)
    } else {
        // Python's round() rounds halves to even.
        ((len - crop) as f64 / 2.0).round_ties_even() as i64
    }
}

/// torchvision `RandomResizedCrop.get_params` → (top, left, height, width) for a `width × height` image, drawing
/// from `rng` (the folded prefix's stream, or a stage-2 op's own).
pub fn rrc_draw(
    rng: &mut SampleRng,
    width: u32,
    height: u32,
    scale: (f64, f64),
    log_ratio: (f64, f64),
    ratio: (f64, f64),
) -> (i64, i64, i64, i64) {
    let (wf, hf) = (f64::from(width), f64::from(height));
    let (w_i, h_i) = (i64::from(width), i64::from(height));
    let area = wf * hf;
    for _ in 0..10 {
        let target_area = area * rng.uniform_range(scale.0, scale.1);
        let aspect = rng.uniform_range(log_ratio.0, log_ratio.1).exp();
        let w = (target_area * aspect).sqrt().round_ties_even() as i64;
        let h = (target_area / aspect).sqrt().round_ties_even() as i64;
        if 0 < w && w <= w_i && 0 < h && h <= h_i {
            let top = rng.below((h_i - h + 1) as u64) as i64;
            let left = rng.below((w_i - w + 1) as u64) as i64;
            return (top, left, h, w);
        }
    }
    // Fallback: central crop with the aspect ratio clamped to `ratio`.
    let in_ratio = wf / hf;
    let (w, h) = if in_ratio < ratio.0.min(ratio.1) {
        (w_i, ((wf / ratio.0.min(ratio.1)).round_ties_even() as i64).clamp(1, h_i))
    } else if in_ratio > ratio.0.max(ratio.1) {
        (((hf * ratio.0.max(ratio.1)).round_ties_even() as i64).clamp(1, w_i), h_i)
    } else {
        (w_i, h_i)
    };
    ((h_i - h) / 2, (w_i - w) / 2, h, w)
}

/// torchvision's `Resize` output size `(h, w)` for a shorter-side `size` and optional `max_size`
/// (`_compute_resized_output_size`: the longer side truncated, then capped to `max_size` with the shorter side
/// scaled by the same factor, truncated).
pub fn resize_output_hw((h, w): (usize, usize), size: u32, max_size: Option<u32>) -> (usize, usize) {
    let (short, long) = if w <= h { (w, h) } else { (h, w) };
    let mut new_short = f64::from(size);
    let mut new_long = (new_short * long as f64 / short as f64).trunc();
    if let Some(m) = max_size.map(f64::from)
        && new_long > m
    {
        new_short = (m * new_short / new_long).trunc();
        new_long = m;
    }
    // Sizes stay ≥ 1 (a 1 × 100000 image under max_size would truncate to 0, which torch refuses; trdata keeps
    // one pixel instead of failing the sample).
    let (s, l) = ((new_short as usize).max(1), (new_long as usize).max(1));
    if w <= h { (l, s) } else { (s, l) }
}
