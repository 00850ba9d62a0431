//! ops — the per-sample ops of a compiled program that run on the uint8 crop (see [`super::program`] for where
//! they sit): each is data ([`OpSpec`], torchvision v2's names and arguments), validated once ([`OpSpec::check`]),
//! then per sample [`OpSpec::sample`] draws its parameters ([`Drawn`]) with torchvision's distributions and draw
//! logic from the op's own stream, and [`apply`] runs the [`super::kernels`] with them.
//!
//! Randomness: op `pos` of the user's list draws from `SampleRng(seed, epoch, index, OP_BASE + pos)` only, and an
//! op inside a container from the stream of its [`Site`] (position, inner position, …; [`Site::stream`]), so a
//! sample's pixels depend on (seed, epoch, index, op position) and never on worker, GPU or rank counts. trdata
//! uses Philox, not torch's MT19937, so streams differ from torch's but distributions match (tests compare
//! them with KS/χ² statistics over ≥ 10k draws): a uniform `uniform_(a, b)` is drawn as a double and rounded to
//! f32 (torch's values are f32), `randint(0, n)` is unbiased, `randperm(4)` is Fisher–Yates, probability gates
//! are `u < p` (torchvision's `torch.rand(1) >= p` → skip).
//!
//! Adding an op (the later geometric ops, the policies' building blocks): a variant here, its `check`, `sample`
//! and `apply` arms; a policy calls [`apply`] with a `Drawn` it builds from its magnitude tables.

pub use super::kernels::Frame;
use super::kernels::{self, PadMode};
use super::policy::{self, AA_POLICY, PolicyKind, PolicyScratch, WarpStyle};
use super::resize::{self, Resample};
use super::timm::{self, ERASE_MODE, TIMM_INTERPOLATION, TIMM_OPS, TimmKind, TimmOp, TimmPolicy, TimmRandomErasing};
use super::warp::{self, Interp, WARP_INTERPOLATION};
use crate::error::{Result, TrdataError};
use crate::param::Choice;
use crate::rng::SampleRng;

/// The largest padding and crop side (the same bound as the transforms' sizes: a header or user size larger
/// than this would allocate before anything could refuse it).
pub const MAX_SIDE: u32 = 65_536;
/// The most pixels any intermediate image of a program may have: Pillow's decompression-bomb error threshold
/// (2 × `Image.MAX_IMAGE_PIXELS`), ~537 MB for RGB. Without it a list could pass every side check and still hold
/// a 65536² (12.9 GB) intermediate per worker.
pub const MAX_FRAME_PIXELS: usize = 178_956_970;

/// Whether an intermediate of `(h, w)` exceeds [`MAX_SIDE`] or [`MAX_FRAME_PIXELS`].
pub fn frame_too_big((h, w): (usize, usize)) -> bool {
    h.max(w) > MAX_SIDE as usize || h.saturating_mul(w) > MAX_FRAME_PIXELS
}

/// The `bits` parameter's name (its rules: [`OpSpec::check`]).
const BITS: &str = "bits";
/// The `fill` parameter's name (its rules: [`OpSpec::check`]).
const FILL: &str = "fill";
/// The `hue` parameter's name (its rules: [`OpSpec::check`]).
const HUE: &str = "hue";
/// The `kernel_size` parameter's name (its rules: [`OpSpec::check`]).
const KERNEL_SIZE: &str = "kernel_size";
/// The `mean` parameter's name (its rules: [`OpSpec::check`]).
const MEAN: &str = "mean";
/// The `num_output_channels` parameter's name (its rules: [`OpSpec::check`]).
const NUM_OUTPUT_CHANNELS: &str = "num_output_channels";
/// The `p` parameter's name (its rules: [`OpSpec::check`]).
const P: &str = "p";
/// The `padding` parameter's name (its rules: [`OpSpec::check`]).
const PADDING: &str = "padding";
/// The `ratio` parameter's name (its rules: [`OpSpec::check`]).
const RATIO: &str = "ratio";
/// The `scale` parameter's name (its rules: [`OpSpec::check`]).
const SCALE: &str = "scale";
/// The `max_size` parameter's name (its rules: [`OpSpec::check`]).
const MAX_SIZE: &str = "max_size";
/// The `transforms` parameter's name (a container's list; its rules: [`OpSpec::check`]).
const TRANSFORMS: &str = "transforms";
/// The `sharpness_factor` parameter's name (its rules: [`OpSpec::check`]).
const SHARPNESS_FACTOR: &str = "sharpness_factor";
/// The `sigma` parameter's name (its rules: [`OpSpec::check`]).
const SIGMA: &str = "sigma";
/// The `size` parameter's name (its rules: [`OpSpec::check`]).
const SIZE: &str = "size";
/// The `threshold` parameter's name (its rules: [`OpSpec::check`]).
const THRESHOLD: &str = "threshold";
/// The `value` parameter's name (its rules: [`OpSpec::check`]).
const VALUE: &str = "value";
/// The `degrees` parameter's name (its rules: [`OpSpec::check`]).
const DEGREES: &str = "degrees";
/// The `translate` parameter's name (its rules: [`OpSpec::check`]).
const TRANSLATE: &str = "translate";
/// The `shear` parameter's name (its rules: [`OpSpec::check`]).
const SHEAR: &str = "shear";
/// The `center` parameter's name (its rules: [`OpSpec::check`]).
const CENTER: &str = "center";
/// The `distortion_scale` parameter's name (its rules: [`OpSpec::check`]).
const DISTORTION_SCALE: &str = "distortion_scale";
/// The `num_ops` parameter's name (its rules: [`OpSpec::check`]).
const NUM_OPS: &str = "num_ops";
/// The `magnitude` parameter's name (its rules: [`OpSpec::check`]).
const MAGNITUDE: &str = "magnitude";
/// The `num_magnitude_bins` parameter's name (its rules: [`OpSpec::check`]).
const NUM_MAGNITUDE_BINS: &str = "num_magnitude_bins";
/// The `severity` parameter's name (its rules: [`OpSpec::check`]).
const SEVERITY: &str = "severity";
/// The `mixture_width` parameter's name (its rules: [`OpSpec::check`]).
const MIXTURE_WIDTH: &str = "mixture_width";
/// The `chain_depth` parameter's name (its rules: [`OpSpec::check`]).
const CHAIN_DEPTH: &str = "chain_depth";

/// The most sub-ops a policy may run per sample (RandAugment's `num_ops`, AugMix's chain count and depth):
/// torchvision has no bound, but a typo such as `num_ops=10**6` would stall every worker on every sample.
pub const MAX_POLICY_OPS: u32 = 1000;
/// The most magnitude bins (RandAugment/TrivialAugmentWide tables are built per sample from this).
pub const MAX_MAGNITUDE_BINS: u32 = 1000;

pub use super::site::{MAX_CONTAINER_OPS, MAX_CONTAINER_POSITION, MAX_NESTING, Site};

/// Defaults of the geometric ops' and policies' parameters (torchvision v2's), exported in `_core.DEFAULTS`
/// (the one place each is written; python/trdata/transforms.py reads them).
pub mod default {
    /// `interpolation` of RandomRotation, RandomAffine and the policies but AugMix.
    pub const NEAREST: &str = "nearest";
    /// `interpolation` of RandomPerspective and AugMix.
    pub const BILINEAR: &str = "bilinear";
    /// `fill` of RandomRotation, RandomAffine, RandomPerspective (0 takes torchvision's mask path).
    pub const WARP_FILL: f64 = 0.0;
    /// `RandomPerspective.distortion_scale`.
    pub const DISTORTION_SCALE: f64 = 0.5;
    /// `RandomPerspective.p`.
    pub const PERSPECTIVE_P: f64 = 0.5;
    /// `AutoAugment.policy`.
    pub const AA_POLICY: &str = "imagenet";
    /// `RandAugment.num_ops`.
    pub const RA_NUM_OPS: u32 = 2;
    /// `RandAugment.magnitude`.
    pub const RA_MAGNITUDE: u32 = 9;
    /// `num_magnitude_bins` of RandAugment and TrivialAugmentWide.
    pub const MAGNITUDE_BINS: u32 = 31;
    /// `AugMix.severity`.
    pub const AUGMIX_SEVERITY: u32 = 3;
    /// `AugMix.mixture_width`.
    pub const AUGMIX_WIDTH: u32 = 3;
    /// `AugMix.chain_depth` (≤ 0: 1 to 3 per chain).
    pub const AUGMIX_DEPTH: i32 = -1;
    /// `AugMix.alpha`.
    pub const AUGMIX_ALPHA: f64 = 1.0;
    /// `AugMix.all_ops`.
    pub const AUGMIX_ALL_OPS: bool = true;
}

/// Erasing's fill.
#[derive(Debug, Clone, PartialEq)]
pub enum EraseValue {
    /// One value per channel (or one for all), in pixel units 0..=255 (truncated as torch casts floats).
    Values(Vec<f64>),
    /// `value="random"`: each erased element an independent normal draw, see [`OpSpec::RandomErasing`].
    Random,
}

/// An op of the program that is not folded into the decode (torchvision v2 names and arguments).
#[derive(Debug, Clone, PartialEq)]
pub enum OpSpec {
    /// `Pad(padding, fill, padding_mode)`; `padding` as (left, top, right, bottom).
    Pad {
        /// (left, top, right, bottom) pixels.
        padding: [u32; 4],
        /// Per-channel (or one) fill for `constant`, pixel units.
        fill: Vec<f64>,
        /// Padding mode.
        mode: PadMode,
    },
    /// `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)` (v2 draw logic).
    RandomCrop {
        /// Crop height.
        height: u32,
        /// Crop width.
        width: u32,
        /// (left, top, right, bottom) padding applied first.
        padding: [u32; 4],
        /// Pad `size - side` on *both* sides of a dimension that is too small (torchvision v2's rule).
        pad_if_needed: bool,
        /// Constant fill.
        fill: Vec<f64>,
        /// Padding mode.
        mode: PadMode,
    },
    /// `RandomHorizontalFlip(p)` after the first resample (before it, it folds into the decode).
    HorizontalFlip {
        /// Probability.
        p: f64,
    },
    /// `RandomVerticalFlip(p)`.
    VerticalFlip {
        /// Probability.
        p: f64,
    },
    /// `ColorJitter`: each range `None` when disabled; applied in a random order (`randperm(4)`).
    ColorJitter {
        /// Brightness factor range.
        brightness: Option<(f64, f64)>,
        /// Contrast factor range.
        contrast: Option<(f64, f64)>,
        /// Saturation factor range.
        saturation: Option<(f64, f64)>,
        /// Hue shift range within [-0.5, 0.5].
        hue: Option<(f64, f64)>,
    },
    /// `Grayscale(num_output_channels)`; the program's channel count is the loader's `channels`, so with 3
    /// the gray value is written to all three (torchvision's `num_output_channels=3`), with 1 it is the image.
    Grayscale {
        /// 1 or 3 (torchvision's check; the loader's `channels` decides the output's).
        num_output_channels: u32,
    },
    /// `RandomGrayscale(p)`: gray replicated over the image's channels.
    RandomGrayscale {
        /// Probability.
        p: f64,
    },
    /// `GaussianBlur(kernel_size=(kx, ky), sigma=(lo, hi))`.
    GaussianBlur {
        /// Kernel width (x), odd.
        kx: u32,
        /// Kernel height (y), odd.
        ky: u32,
        /// σ range, 0 < lo ≤ hi.
        sigma: (f64, f64),
    },
    /// `GaussianNoise(mean, sigma, clip)` on uint8 as torchvision 0.29 defines it: per element
    /// `trunc(f32(mean·255) + N(0,1)·f32(sigma·255))` added in int16, clamped to [0, 255] when `clip`, else
    /// wrapped modulo 256. (`mean`/`sigma` are in [0, 1] units, as for float images.)
    GaussianNoise {
        /// Mean, [0, 1] units.
        mean: f64,
        /// Standard deviation, [0, 1] units, ≥ 0.
        sigma: f64,
        /// Clamp to [0, 255] (else wrap).
        clip: bool,
    },
    /// `RandomErasing(p, scale, ratio, value)` on the uint8 image, before normalize: `value` in pixel units.
    /// `Random` draws one N(0, 1) per erased element in [0, 1] units and writes `clamp(round(255 · v))`
    /// (torchvision's `"random"` on a uint8 tensor casts N(0,1) floats and wraps negatives to 255 — noise of
    /// 0, 1, 2, 254, 255 only — which no one wants; `from_torchvision` maps a `RandomErasing` placed after
    /// `Normalize` into pixel units instead).
    RandomErasing {
        /// Probability.
        p: f64,
        /// Erased area fraction range, within [0, 1].
        scale: (f64, f64),
        /// Aspect ratio range (log-uniform).
        ratio: (f64, f64),
        /// Fill.
        value: EraseValue,
    },
    /// `RandomAutocontrast(p)`.
    RandomAutocontrast {
        /// Probability.
        p: f64,
    },
    /// `RandomEqualize(p)`.
    RandomEqualize {
        /// Probability.
        p: f64,
    },
    /// `RandomSolarize(threshold, p)`; threshold in pixel units (uint8 semantics).
    RandomSolarize {
        /// Pixels ≥ threshold are inverted.
        threshold: f64,
        /// Probability.
        p: f64,
    },
    /// `RandomPosterize(bits, p)`.
    RandomPosterize {
        /// Bits kept, 0..=8.
        bits: u32,
        /// Probability.
        p: f64,
    },
    /// `RandomAdjustSharpness(sharpness_factor, p)`.
    RandomAdjustSharpness {
        /// Factor ≥ 0 (0 blurs, 1 is the identity, 2 sharpens).
        sharpness_factor: f64,
        /// Probability.
        p: f64,
    },
    /// `RandomInvert(p)`.
    RandomInvert {
        /// Probability.
        p: f64,
    },
    /// `RandomRotation(degrees, interpolation, expand, center, fill)`: positive angles turn counter-clockwise;
    /// `expand` makes the output size depend on the angle (a later `RandomCrop` must then fix it).
    RandomRotation {
        /// Angle range in degrees (min, max).
        degrees: (f64, f64),
        /// Nearest or bilinear.
        interp: Interp,
        /// Grow the output to hold the whole turned image.
        expand: bool,
        /// Pivot (x, y) in pixel coordinates; `None` = the image centre.
        center: Option<[f64; 2]>,
        /// `None` = zero padding; else the mask-path fill (torchvision's default 0 takes the mask path).
        fill: Option<Vec<f64>>,
    },
    /// `RandomAffine(degrees, translate, scale, shear, interpolation, fill, center)`.
    RandomAffine {
        /// Angle range in degrees.
        degrees: (f64, f64),
        /// Maximum translation as fractions of (width, height).
        translate: Option<(f64, f64)>,
        /// Scale range.
        scale: Option<(f64, f64)>,
        /// Shear ranges in degrees: empty (none), (x min, x max) or (x min, x max, y min, y max).
        shear: Vec<f64>,
        /// Nearest or bilinear.
        interp: Interp,
        /// As RandomRotation's.
        fill: Option<Vec<f64>>,
        /// Pivot (x, y); `None` = the image centre.
        center: Option<[f64; 2]>,
    },
    /// `RandomPerspective(distortion_scale, p, interpolation, fill)`.
    RandomPerspective {
        /// How far the corners may move, in [0, 1] of half the side.
        distortion_scale: f64,
        /// Probability.
        p: f64,
        /// Nearest or bilinear.
        interp: Interp,
        /// As RandomRotation's.
        fill: Option<Vec<f64>>,
    },
    /// `AutoAugment`, `RandAugment`, `TrivialAugmentWide` or `AugMix` (see [`super::policy`]).
    Policy {
        /// Which policy and its parameters.
        kind: PolicyKind,
        /// Interpolation of the warping sub-ops.
        interp: Interp,
        /// `None` (torchvision's default for the policies) = zero padding; else the mask-path fill.
        fill: Option<Vec<f64>>,
    },
    /// `Resize(size, interpolation, max_size, antialias)` on the uint8 image (stage 2: after a pixel op, or with
    /// `max_size`), with torchvision v2's semantics on uint8 tensors ([`resize::resize_output_hw`] for the size).
    Resize {
        /// Shorter side or exact (height, width).
        size: ResizeTo,
        /// torchvision's `max_size` (only with a shorter-side `size`): the longer side is capped to it.
        max_size: Option<u32>,
        /// Filter and antialias.
        resample: Resample,
    },
    /// `CenterCrop(size)` on the uint8 image (zero padding where the crop is larger, as torchvision).
    CenterCrop {
        /// Crop height.
        height: u32,
        /// Crop width.
        width: u32,
    },
    /// `RandomResizedCrop(size, scale, ratio, interpolation, antialias)` on the uint8 image.
    RandomResizedCrop {
        /// Output height.
        height: u32,
        /// Output width.
        width: u32,
        /// Area fraction range, 0 < min ≤ max ≤ 1.
        scale: (f64, f64),
        /// Aspect-ratio (w/h) range, 0 < min ≤ max; drawn log-uniformly.
        ratio: (f64, f64),
        /// Filter and antialias.
        resample: Resample,
    },
    /// `RandomApply(transforms, p)`: one gate draw; when it passes, every inner op in order (each on its own
    /// stream, [`Site::child`]).
    RandomApply {
        /// The inner ops.
        transforms: Vec<OpSpec>,
        /// Probability of applying them all.
        p: f64,
    },
    /// `RandomChoice(transforms, p)`: one inner op, picked with probability `p[i] / sum(p)` (torchvision v2
    /// normalises `p`; `None` is uniform).
    RandomChoice {
        /// The inner ops.
        transforms: Vec<OpSpec>,
        /// Weights (one per op, ≥ 0, positive sum; not yet normalised).
        p: Vec<f64>,
    },
    /// `RandomOrder(transforms)`: every inner op, in a random permutation (`torch.randperm`).
    RandomOrder {
        /// The inner ops.
        transforms: Vec<OpSpec>,
    },
    /// timm's RandAugment (`rand-m9-mstd0.5-inc1`…), AutoAugment or AugMix with Pillow's op implementations
    /// (see [`super::timm`]).
    TimmPolicy(TimmPolicy),
    /// timm's `CenterCropOrPad(size, fill, padding_mode)`: pad the short dimensions by `(size - side) // 2`
    /// before (the rest after) with `fill`/`mode`, then crop the centre (`round((side - size) / 2)`, half to even).
    CenterCropOrPad {
        /// Output height.
        height: u32,
        /// Output width.
        width: u32,
        /// Constant fill (pixel units).
        fill: Vec<f64>,
        /// Padding mode.
        mode: PadMode,
    },
    /// timm's `RandomErasing` (count, normalized-space fills; see [`super::timm::TimmRandomErasing`]).
    TimmRandomErasing(TimmRandomErasing),
}

/// What a stage-2 `Resize` resizes to (torchvision's `size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeTo {
    /// `Resize(int)`: the shorter side.
    Shorter(u32),
    /// `Resize((h, w))`.
    Exact(u32, u32),
}

/// The parameters one op drew for one sample (what [`apply`] needs; the policies build them from magnitudes).
#[derive(Debug, Clone, PartialEq)]
pub enum Drawn {
    /// The op does nothing to this sample (its gate said no, or erasing found no box).
    Skip,
    /// The op applies with no parameters (flip, gray, invert, equalize, autocontrast, pad).
    Apply,
    /// One real parameter (solarize threshold, posterize bits, sharpness factor, blur σ).
    Value(f64),
    /// A crop of the padded image: padding (left, top, right, bottom) then the window at (top, left).
    Crop {
        /// Padding (left, top, right, bottom).
        padding: [u32; 4],
        /// Window top in the padded image.
        top: u32,
        /// Window left in the padded image.
        left: u32,
    },
    /// ColorJitter: the order (0 brightness, 1 contrast, 2 saturation, 3 hue) and the factors (None = off).
    Jitter {
        /// torchvision's `fn_idx`.
        order: [u8; 4],
        /// Factors in `fn_idx` numbering.
        factors: [Option<f64>; 4],
    },
    /// RandomAffine's draw: angle (degrees), integer translation (x, y) in pixels, scale, shear (x, y) degrees.
    Affine {
        /// Degrees.
        angle: f64,
        /// Pixels (integers, as torchvision rounds them).
        translate: [f64; 2],
        /// Scale factor.
        scale: f64,
        /// Shear (x, y) in degrees.
        shear: [f64; 2],
    },
    /// RandomPerspective's end points (x, y) of the top-left, top-right, bottom-right, bottom-left corners.
    Perspective([i64; 8]),
    /// A crop box (top, left, height, width) of the current image (a stage-2 RandomResizedCrop's draw).
    Box {
        /// Top row.
        top: u32,
        /// Left column.
        left: u32,
        /// Height.
        h: u32,
        /// Width.
        w: u32,
    },
    /// RandomChoice: the inner op picked.
    Pick(u32),
    /// RandomOrder: the permutation (the first `n` entries; inner positions in the order they run).
    Order {
        /// Inner positions.
        order: [u8; MAX_CONTAINER_OPS],
        /// How many ops.
        n: u8,
    },
    /// Erase box (top, left, height, width).
    Erase {
        /// Top row.
        top: u32,
        /// Left column.
        left: u32,
        /// Height.
        h: u32,
        /// Width.
        w: u32,
    },
}

impl Drawn {
    /// The drawn values as numbers (for `_core.sample_op`, which tests compare with torchvision's sampling):
    /// `[]` for Skip, `[1]` for Apply, otherwise the fields in declaration order (Jitter: order then factors,
    /// NaN for a disabled one).
    pub fn to_vec(&self) -> Vec<f64> {
        match self {
            Drawn::Skip => vec![],
            Drawn::Apply => vec![1.0],
            Drawn::Value(v) => vec![*v],
            Drawn::Crop { padding, top, left } => padding.iter().chain([top, left]).map(|&v| f64::from(v)).collect(),
            Drawn::Jitter { order, factors } => {
                order.iter().map(|&o| f64::from(o)).chain(factors.iter().map(|f| f.unwrap_or(f64::NAN))).collect()
            }
            Drawn::Erase { top, left, h, w } | Drawn::Box { top, left, h, w } => {
                [top, left, h, w].iter().map(|&&v| f64::from(v)).collect()
            }
            Drawn::Pick(i) => vec![f64::from(*i)],
            Drawn::Order { order, n } => order[..usize::from(*n)].iter().map(|&v| f64::from(v)).collect(),
            Drawn::Affine { angle, translate, scale, shear } => {
                vec![*angle, translate[0], translate[1], *scale, shear[0], shear[1]]
            }
            Drawn::Perspective(p) => p.iter().map(|&v| v as f64).collect(),
        }
    }
}

/// torchvision's `uniform_(lo, hi)`: a float32 value (drawn as a double, rounded to f32 like torch's), returned
/// as the Python double `.item()` gives.
fn uniform_f32(rng: &mut SampleRng, (lo, hi): (f64, f64)) -> f64 {
    f64::from(rng.uniform_range(lo, hi) as f32)
}

/// The probability gate (`_RandomApplyTransform`): one draw, apply iff `u < p`.
fn gate(rng: &mut SampleRng, p: f64) -> bool {
    rng.uniform() < p
}

/// `drawn` with probability `p` (one draw, as torchvision's gate), else [`Drawn::Skip`].
fn gated(rng: &mut SampleRng, p: f64, drawn: Drawn) -> Drawn {
    if gate(rng, p) { drawn } else { Drawn::Skip }
}

/// An op's error: `invalid <param>: <value> must … (<Op> at transforms[pos])` (or the nested [`Site`]).
fn bad(param: &str, shown: impl std::fmt::Display, rule: &str, op: &str, pos: Site) -> TrdataError {
    TrdataError::config(param, format!("{shown} must {rule} ({op} at {pos})"))
}

fn check_p(p: f64, op: &str, pos: Site) -> Result<()> {
    if (0.0..=1.0).contains(&p) { Ok(()) } else { Err(bad(P, p, "be in [0, 1]", op, pos)) }
}

/// The `brightness`/`contrast`/`saturation` parameter's name.
const BRIGHTNESS: &str = "brightness";
/// See [`BRIGHTNESS`].
const CONTRAST: &str = "contrast";
/// See [`BRIGHTNESS`].
const SATURATION: &str = "saturation";

/// A ColorJitter factor range: finite with 0 ≤ min ≤ max (a negative factor has no meaning).
fn check_factor_range(name: &str, r: &Option<(f64, f64)>, op: &str, pos: Site) -> Result<()> {
    if let Some((lo, hi)) = *r
        && !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi)
    {
        return Err(bad(name, format!("({lo}, {hi})"), "be finite with 0 ≤ min ≤ max", op, pos));
    }
    Ok(())
}

fn check_fill(fill: &[f64], op: &str, pos: Site) -> Result<()> {
    if fill.is_empty() || fill.len() > 3 || fill.len() == 2 || !fill.iter().all(|v| v.is_finite()) {
        return Err(bad(FILL, format!("{fill:?}"), "be one number or one per channel (1 or 3), finite", op, pos));
    }
    if !fill.iter().all(|&v| (0.0..256.0).contains(&v)) {
        return Err(bad(FILL, format!("{fill:?}"), "be in [0, 255] (pixel units of the uint8 image)", op, pos));
    }
    Ok(())
}

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

fn check_opt_fill(fill: &Option<Vec<f64>>, op: &str, pos: Site) -> Result<()> {
    fill.as_deref().map_or(Ok(()), |f| check_fill(f, op, pos))
}

fn check_bins(bins: u32, op: &str, pos: Site) -> Result<()> {
    if (2..=MAX_MAGNITUDE_BINS).contains(&bins) {
        Ok(())
    } else {
        Err(bad(NUM_MAGNITUDE_BINS, bins, &format!("be in 2..={MAX_MAGNITUDE_BINS}"), op, pos))
    }
}

/// A crop or resize side (`size`): 1..=[`MAX_SIDE`] each.
fn check_side(height: u32, width: u32, op: &str, pos: Site) -> Result<()> {
    if (1..=MAX_SIDE).contains(&height) && (1..=MAX_SIDE).contains(&width) {
        Ok(())
    } else {
        Err(bad(SIZE, format!("({height}, {width})"), &format!("be in 1..={MAX_SIDE}"), op, pos))
    }
}

/// A container's inner list: 1..=[`MAX_CONTAINER_OPS`] ops (torchvision refuses an empty one), nested at most
/// [`MAX_NESTING`] deep, at a position below [`MAX_CONTAINER_POSITION`] — the bounds [`Site::stream`] needs for
/// distinct streams — and each inner op valid.
fn check_inner(transforms: &[OpSpec], op: &str, pos: Site) -> Result<()> {
    if transforms.is_empty() || transforms.len() > MAX_CONTAINER_OPS {
        return Err(bad(
            TRANSFORMS,
            format!("a list of {}", transforms.len()),
            &format!("hold 1 to {MAX_CONTAINER_OPS} transforms"),
            op,
            pos,
        ));
    }
    if pos.depth() >= MAX_NESTING {
        return Err(bad(TRANSFORMS, op, &format!("be nested at most {MAX_NESTING} containers deep"), op, pos));
    }
    if pos.position() >= MAX_CONTAINER_POSITION {
        return Err(bad(
            TRANSFORMS,
            op,
            &format!("sit in the first {MAX_CONTAINER_POSITION} positions of the list"),
            op,
            pos,
        ));
    }
    for (i, t) in transforms.iter().enumerate() {
        t.check_at(pos.child(i))?;
    }
    Ok(())
}

/// `Some((h, w))` or the words for `None`, for size messages.
fn shown_hw(hw: Option<(usize, usize)>) -> String {
    hw.map_or_else(|| "each image's own size".to_string(), |(h, w)| format!("({h}, {w})"))
}

/// A warp's fill as torchvision's f32 per-channel values (`None` stays `None`: no mask path).
pub fn fill_f32(fill: &Option<Vec<f64>>) -> Option<[f32; 3]> {
    fill.as_deref().map(|f| std::array::from_fn(|c| f[c.min(f.len() - 1)] as f32))
}

/// A per-channel fill as bytes (torch truncates floats cast to uint8).
pub fn fill_bytes(fill: &[f64]) -> [u8; 3] {
    std::array::from_fn(|c| fill[c.min(fill.len() - 1)] as u8)
}

impl OpSpec {
    /// torchvision's class name.
    pub fn name(&self) -> &'static str {
        match self {
            OpSpec::Pad { .. } => "Pad",
            OpSpec::RandomCrop { .. } => "RandomCrop",
            OpSpec::HorizontalFlip { .. } => "RandomHorizontalFlip",
            OpSpec::VerticalFlip { .. } => "RandomVerticalFlip",
            OpSpec::ColorJitter { .. } => "ColorJitter",
            OpSpec::Grayscale { .. } => "Grayscale",
            OpSpec::RandomGrayscale { .. } => "RandomGrayscale",
            OpSpec::GaussianBlur { .. } => "GaussianBlur",
            OpSpec::GaussianNoise { .. } => "GaussianNoise",
            OpSpec::RandomErasing { .. } => "RandomErasing",
            OpSpec::RandomAutocontrast { .. } => "RandomAutocontrast",
            OpSpec::RandomEqualize { .. } => "RandomEqualize",
            OpSpec::RandomSolarize { .. } => "RandomSolarize",
            OpSpec::RandomPosterize { .. } => "RandomPosterize",
            OpSpec::RandomAdjustSharpness { .. } => "RandomAdjustSharpness",
            OpSpec::RandomInvert { .. } => "RandomInvert",
            OpSpec::RandomRotation { .. } => "RandomRotation",
            OpSpec::RandomAffine { .. } => "RandomAffine",
            OpSpec::RandomPerspective { .. } => "RandomPerspective",
            OpSpec::Resize { size: ResizeTo::Shorter(_), .. } => "Resize(int)",
            OpSpec::Resize { size: ResizeTo::Exact(..), .. } => "Resize((h, w))",
            OpSpec::CenterCrop { .. } => "CenterCrop",
            OpSpec::RandomResizedCrop { .. } => "RandomResizedCrop",
            OpSpec::RandomApply { .. } => "RandomApply",
            OpSpec::RandomChoice { .. } => "RandomChoice",
            OpSpec::RandomOrder { .. } => "RandomOrder",
            OpSpec::Policy { kind, .. } => match kind {
                PolicyKind::AutoAugment(_) => "AutoAugment",
                PolicyKind::RandAugment { .. } => "RandAugment",
                PolicyKind::TrivialAugmentWide { .. } => "TrivialAugmentWide",
                PolicyKind::AugMix { .. } => "AugMix",
            },
            OpSpec::TimmPolicy(spec) => spec.name(),
            OpSpec::TimmRandomErasing(_) => "timm RandomErasing",
            OpSpec::CenterCropOrPad { .. } => "CenterCropOrPad",
        }
    }

    /// Validate the op's values (the one place; Python checks only types). `pos` is its list position, named in
    /// the message.
    pub fn check(&self, pos: usize) -> Result<()> {
        self.check_at(Site::top(pos))
    }

    /// [`OpSpec::check`] for the op at `pos` (a position in the list, or inside a container).
    pub fn check_at(&self, pos: Site) -> Result<()> {
        let op = self.name();
        match self {
            OpSpec::Pad { padding, fill, .. } => {
                check_padding(padding, op, pos)?;
                check_fill(fill, op, pos)
            }
            OpSpec::RandomCrop { height, width, padding, fill, .. } => {
                if !(1..=MAX_SIDE).contains(height) || !(1..=MAX_SIDE).contains(width) {
                    return Err(bad(SIZE, format!("({height}, {width})"), &format!("be in 1..={MAX_SIDE}"), op, pos));
                }
                check_padding(padding, op, pos)?;
                check_fill(fill, op, pos)
            }
            OpSpec::HorizontalFlip { p }
            | OpSpec::VerticalFlip { p }
            | OpSpec::RandomGrayscale { p }
            | OpSpec::RandomAutocontrast { p }
            | OpSpec::RandomEqualize { p }
            | OpSpec::RandomInvert { p } => check_p(*p, op, pos),
            OpSpec::ColorJitter { brightness, contrast, saturation, hue } => {
                check_factor_range(BRIGHTNESS, brightness, op, pos)?;
                check_factor_range(CONTRAST, contrast, op, pos)?;
                check_factor_range(SATURATION, saturation, op, pos)?;
                if let Some((lo, hi)) = *hue
                    && !(-0.5 <= lo && lo <= hi && hi <= 0.5)
                {
                    return Err(bad(HUE, format!("({lo}, {hi})"), "be within [-0.5, 0.5] with min ≤ max", op, pos));
                }
                Ok(())
            }
            OpSpec::Grayscale { num_output_channels } => {
                if matches!(num_output_channels, 1 | 3) {
                    Ok(())
                } else {
                    Err(bad(NUM_OUTPUT_CHANNELS, num_output_channels, "be 1 or 3", op, pos))
                }
            }
            OpSpec::GaussianBlur { kx, ky, sigma } => {
                for k in [kx, ky] {
                    if k % 2 == 0 || *k > 1001 {
                        return Err(bad(
                            KERNEL_SIZE,
                            format!("({kx}, {ky})"),
                            "be odd and positive, at most 1001",
                            op,
                            pos,
                        ));
                    }
                }
                let (lo, hi) = *sigma;
                if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
                    return Err(bad(SIGMA, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
                }
                Ok(())
            }
            OpSpec::GaussianNoise { mean, sigma, .. } => {
                if !mean.is_finite() {
                    return Err(bad(MEAN, mean, "be finite", op, pos));
                }
                if !(sigma.is_finite() && *sigma >= 0.0) {
                    return Err(bad(SIGMA, sigma, "be finite and ≥ 0", op, pos));
                }
                Ok(())
            }
            OpSpec::RandomErasing { p, scale, ratio, value } => {
                check_p(*p, op, pos)?;
                let (lo, hi) = *scale;
                if !(0.0 <= lo && lo <= hi && hi <= 1.0) {
                    return Err(bad(SCALE, format!("({lo}, {hi})"), "be within [0, 1] with min ≤ max", op, pos));
                }
                let (lo, hi) = *ratio;
                if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
                    return Err(bad(RATIO, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
                }
                if let EraseValue::Values(v) = value {
                    if v.is_empty() || v.len() == 2 || v.len() > 3 {
                        return Err(bad(VALUE, format!("{v:?}"), "be one number or one per channel (1 or 3)", op, pos));
                    }
                    if !v.iter().all(|&x| (0.0..256.0).contains(&x)) {
                        return Err(bad(
                            VALUE,
                            format!("{v:?}"),
                            "be in [0, 255] (pixel units of the uint8 image)",
                            op,
                            pos,
                        ));
                    }
                }
                Ok(())
            }
            OpSpec::RandomSolarize { threshold, p } => {
                check_p(*p, op, pos)?;
                if !(threshold.is_finite() && (0.0..=255.0).contains(threshold)) {
                    return Err(bad(THRESHOLD, threshold, "be in [0, 255] (pixel units of the uint8 image)", op, pos));
                }
                Ok(())
            }
            OpSpec::RandomPosterize { bits, p } => {
                check_p(*p, op, pos)?;
                if *bits > 8 { Err(bad(BITS, bits, "be in 0..=8", op, pos)) } else { Ok(()) }
            }
            OpSpec::RandomAdjustSharpness { sharpness_factor, p } => {
                check_p(*p, op, pos)?;
                if !(sharpness_factor.is_finite() && *sharpness_factor >= 0.0) {
                    return Err(bad(SHARPNESS_FACTOR, sharpness_factor, "be finite and ≥ 0", op, pos));
                }
                Ok(())
            }
            OpSpec::RandomRotation { degrees, center, fill, .. } => {
                check_degrees(*degrees, op, pos)?;
                check_center(center, op, pos)?;
                check_opt_fill(fill, op, pos)
            }
            OpSpec::RandomAffine { degrees, translate, scale, shear, fill, center, .. } => {
                check_degrees(*degrees, op, pos)?;
                if let Some((tx, ty)) = *translate
                    && !((0.0..=1.0).contains(&tx) && (0.0..=1.0).contains(&ty))
                {
                    return Err(bad(TRANSLATE, format!("({tx}, {ty})"), "be two fractions in [0, 1]", op, pos));
                }
                if let Some((lo, hi)) = *scale
                    && !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi)
                {
                    return Err(bad(SCALE, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
                }
                // The length first: a 3-number shear has no (min, max) pairs to look at.
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
                check_center(center, op, pos)?;
                check_opt_fill(fill, op, pos)
            }
            OpSpec::RandomPerspective { distortion_scale, p, fill, .. } => {
                check_p(*p, op, pos)?;
                if !(0.0..=1.0).contains(distortion_scale) {
                    return Err(bad(DISTORTION_SCALE, distortion_scale, "be in [0, 1]", op, pos));
                }
                check_opt_fill(fill, op, pos)
            }
            OpSpec::Resize { size, max_size, .. } => {
                let (a, b) = match *size {
                    ResizeTo::Shorter(s) => (s, s),
                    ResizeTo::Exact(h, w) => (h, w),
                };
                check_side(a, b, op, pos)?;
                match (*size, *max_size) {
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
            OpSpec::CenterCrop { height, width } => check_side(*height, *width, op, pos),
            OpSpec::RandomResizedCrop { height, width, scale, ratio, .. } => {
                check_side(*height, *width, op, pos)?;
                let (lo, hi) = *scale;
                if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi && hi <= 1.0) {
                    return Err(bad(SCALE, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max ≤ 1", op, pos));
                }
                let (lo, hi) = *ratio;
                if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
                    return Err(bad(RATIO, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
                }
                Ok(())
            }
            OpSpec::RandomApply { transforms, p } => {
                check_p(*p, op, pos)?;
                check_inner(transforms, op, pos)
            }
            OpSpec::RandomChoice { transforms, p } => {
                check_inner(transforms, op, pos)?;
                let total: f64 = p.iter().sum();
                if p.len() != transforms.len() || !p.iter().all(|v| v.is_finite() && *v >= 0.0) || total <= 0.0 {
                    return Err(bad(
                        P,
                        format!("{p:?}"),
                        &format!(
                            "be None or one weight per transform ({}), each finite and ≥ 0, with a positive sum",
                            transforms.len()
                        ),
                        op,
                        pos,
                    ));
                }
                Ok(())
            }
            OpSpec::RandomOrder { transforms } => check_inner(transforms, op, pos),
            OpSpec::Policy { kind, fill, .. } => {
                match *kind {
                    PolicyKind::AutoAugment(_) => {}
                    PolicyKind::RandAugment { num_ops, magnitude, bins } => {
                        check_bins(bins, op, pos)?;
                        if num_ops > MAX_POLICY_OPS {
                            return Err(bad(NUM_OPS, num_ops, &format!("be in 0..={MAX_POLICY_OPS}"), op, pos));
                        }
                        if magnitude >= bins {
                            return Err(bad(
                                MAGNITUDE,
                                magnitude,
                                &format!("be below num_magnitude_bins ({bins})"),
                                op,
                                pos,
                            ));
                        }
                    }
                    PolicyKind::TrivialAugmentWide { bins } => check_bins(bins, op, pos)?,
                    PolicyKind::AugMix { severity, width, depth, alpha, .. } => {
                        if !(1..=10).contains(&severity) {
                            return Err(bad(SEVERITY, severity, "be in 1..=10", op, pos));
                        }
                        if !(1..=MAX_POLICY_OPS).contains(&width) {
                            return Err(bad(MIXTURE_WIDTH, width, &format!("be in 1..={MAX_POLICY_OPS}"), op, pos));
                        }
                        if depth > MAX_POLICY_OPS as i32 {
                            return Err(bad(
                                CHAIN_DEPTH,
                                depth,
                                &format!("be at most {MAX_POLICY_OPS} (≤ 0 draws 1 to 3 per chain)"),
                                op,
                                pos,
                            ));
                        }
                        // Each bound alone still allows 1000 chains of 1000 ops: a million sub-ops per sample
                        // would stall every worker (≤ 0 draws at most 3 per chain, bounded by the width's rule).
                        if depth > 0 && u64::from(width) * depth as u64 > u64::from(MAX_POLICY_OPS) {
                            return Err(bad(
                                CHAIN_DEPTH,
                                depth,
                                &format!(
                                    "keep mixture_width × chain_depth ({width} × {depth}) at most {MAX_POLICY_OPS} \
                                     sub-ops per sample"
                                ),
                                op,
                                pos,
                            ));
                        }
                        crate::rng::check_alpha(alpha, &format!("{op} at {pos}"))?;
                    }
                }
                check_opt_fill(fill, op, pos)
            }
            OpSpec::TimmPolicy(spec) => spec.check(pos),
            OpSpec::TimmRandomErasing(spec) => spec.check(op, pos),
            OpSpec::CenterCropOrPad { height, width, fill, .. } => {
                if !(1..=MAX_SIDE).contains(height) || !(1..=MAX_SIDE).contains(width) {
                    return Err(bad(SIZE, format!("({height}, {width})"), &format!("be in 1..={MAX_SIDE}"), op, pos));
                }
                check_fill(fill, op, pos)
            }
        }
    }

    /// (height, width) after this op for an input of `hw` (`None`: depends on the sample — only for ops that
    /// keep the size, applied to a size that already depends on it).
    pub fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
        match self {
            OpSpec::Pad { padding: [l, t, r, b], .. } => {
                hw.map(|(h, w)| (h + *t as usize + *b as usize, w + *l as usize + *r as usize))
            }
            OpSpec::RandomCrop { height, width, .. }
            | OpSpec::CenterCropOrPad { height, width, .. }
            | OpSpec::CenterCrop { height, width }
            | OpSpec::RandomResizedCrop { height, width, .. }
            | OpSpec::Resize { size: ResizeTo::Exact(height, width), .. } => Some((*height as usize, *width as usize)),
            OpSpec::Resize { size: ResizeTo::Shorter(s), max_size, .. } => {
                hw.map(|hw| resize::resize_output_hw(hw, *s, *max_size))
            }
            OpSpec::RandomRotation { expand: true, .. } => None,
            // Containers: the size every branch gives ([`OpSpec::output_hw_at`] refuses lists where they differ).
            OpSpec::RandomChoice { transforms, .. } => transforms.first().map_or(hw, |t| t.output_hw(hw)),
            OpSpec::RandomApply { .. } | OpSpec::RandomOrder { .. } => hw,
            _ => hw,
        }
    }

    /// [`OpSpec::output_hw`], refusing a container whose branches give different sizes (images of different
    /// sizes cannot be batched): a `RandomApply` must keep its input's size (the skipped branch does), every
    /// `RandomChoice` branch must give the same size, and every op of a `RandomOrder` must keep its input's size
    /// (so that any order gives the same). The error names the container's `transforms` and its [`Site`].
    pub fn output_hw_at(&self, hw: Option<(usize, usize)>, pos: Site) -> Result<Option<(usize, usize)>> {
        let op = self.name();
        let chain = |ts: &[OpSpec], hw: Option<(usize, usize)>, i0: usize| -> Result<Option<(usize, usize)>> {
            ts.iter().enumerate().try_fold(hw, |hw, (i, t)| t.output_hw_at(hw, pos.child(i0 + i)))
        };
        match self {
            OpSpec::RandomApply { transforms, .. } => {
                let out = chain(transforms, hw, 0)?;
                if out != hw {
                    return Err(bad(
                        TRANSFORMS,
                        "the inner list",
                        &format!(
                            "keep the size of its input, {}, since the skipped branch does; it gives {}",
                            shown_hw(hw),
                            shown_hw(out)
                        ),
                        op,
                        pos,
                    ));
                }
                Ok(out)
            }
            OpSpec::RandomChoice { transforms, .. } => {
                let first = transforms[0].output_hw_at(hw, pos.child(0))?;
                for (i, t) in transforms.iter().enumerate().skip(1) {
                    let out = t.output_hw_at(hw, pos.child(i))?;
                    if out != first {
                        return Err(bad(
                            TRANSFORMS,
                            "the inner list",
                            &format!(
                                "give one output size whichever is picked: {} gives {}, {} gives {}",
                                pos.child(0),
                                shown_hw(first),
                                pos.child(i),
                                shown_hw(out)
                            ),
                            op,
                            pos,
                        ));
                    }
                }
                Ok(first)
            }
            OpSpec::RandomOrder { transforms } => {
                for (i, t) in transforms.iter().enumerate() {
                    let out = t.output_hw_at(hw, pos.child(i))?;
                    if out != hw {
                        return Err(bad(
                            TRANSFORMS,
                            "the inner list",
                            &format!(
                                "hold ops that keep the size of their input, {} (they run in any order): {} gives {}",
                                shown_hw(hw),
                                pos.child(i),
                                shown_hw(out)
                            ),
                            op,
                            pos,
                        ));
                    }
                }
                Ok(hw)
            }
            _ => {
                // Every intermediate the list fixes must respect the sides' bound, not only the final size: a
                // `Pad(65536)` or `Resize((65536, 65536))` followed by a small crop would otherwise compile and
                // then allocate tens of GB per worker (or abort) on the first sample.
                let out = self.output_hw(hw);
                if let Some((h, w)) = out
                    && frame_too_big((h, w))
                {
                    return Err(bad(
                        TRANSFORMS,
                        format!("the output ({h}, {w})"),
                        &format!(
                            "be at most {MAX_SIDE} per side and {MAX_FRAME_PIXELS} pixels (every intermediate image \
                             is held in memory)"
                        ),
                        op,
                        pos,
                    ));
                }
                Ok(out)
            }
        }
    }

    /// The (height, width) this op gives a `(h, w)` image when that is too big ([`frame_too_big`]): the
    /// per-sample form of [`OpSpec::output_hw_at`]'s bound, for sizes the list does not fix (a `Resize(int)` of a
    /// 3 × 700 image to 65536 would be 65536 × 15 M pixels). Containers are checked through their inner ops.
    pub fn oversized(&self, (h, w): (usize, usize)) -> Option<(usize, usize)> {
        match self {
            OpSpec::RandomApply { .. } | OpSpec::RandomChoice { .. } | OpSpec::RandomOrder { .. } => None,
            _ => self.output_hw(Some((h, w))).filter(|&hw| frame_too_big(hw)),
        }
    }

    /// Draw this op's parameters for an image of `h × w` × `c` (torchvision's `make_params`, with its draw order
    /// and its conditions for drawing at all). Errors only where torchvision raises at run time (a crop larger
    /// than the padded image), naming the op.
    pub fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(match self {
            OpSpec::Pad { .. } | OpSpec::CenterCropOrPad { .. } => Drawn::Apply,
            OpSpec::RandomCrop { height, width, padding, pad_if_needed, .. } => {
                let [mut pl, mut pt, mut pr, mut pb] = padding.map(|v| v as usize);
                let (mut ph, mut pw) = (h + pt + pb, w + pl + pr);
                let (ch, cw) = (*height as usize, *width as usize);
                if *pad_if_needed {
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
                Drawn::Crop { padding: [to32(pl), to32(pt), to32(pr), to32(pb)], top: top as u32, left: left as u32 }
            }
            OpSpec::HorizontalFlip { p }
            | OpSpec::VerticalFlip { p }
            | OpSpec::RandomGrayscale { p }
            | OpSpec::RandomAutocontrast { p }
            | OpSpec::RandomEqualize { p }
            | OpSpec::RandomInvert { p } => gated(rng, *p, Drawn::Apply),
            OpSpec::Grayscale { .. } => Drawn::Apply,
            OpSpec::ColorJitter { brightness, contrast, saturation, hue } => {
                // randperm(4) always (Fisher–Yates), then the enabled factors in b, c, s, h order.
                let mut order = [0u8, 1, 2, 3];
                for i in 0..3 {
                    let z = rng.below((4 - i) as u64) as usize;
                    order.swap(i, i + z);
                }
                let factors = [brightness, contrast, saturation, hue].map(|r| r.map(|r| uniform_f32(rng, r)));
                Drawn::Jitter { order, factors }
            }
            OpSpec::GaussianBlur { sigma, .. } => Drawn::Value(uniform_f32(rng, *sigma)),
            OpSpec::GaussianNoise { .. } => Drawn::Apply,
            OpSpec::RandomErasing { p, scale, ratio, .. } => {
                if !gate(rng, *p) {
                    return Ok(Drawn::Skip);
                }
                let area = (h * w) as f64;
                let log_ratio = ((ratio.0.ln() as f32) as f64, (ratio.1.ln() as f32) as f64);
                for _ in 0..10 {
                    let erase_area = area * uniform_f32(rng, *scale);
                    let aspect = f64::from((uniform_f32(rng, log_ratio) as f32).exp());
                    let eh = (erase_area * aspect).sqrt().round_ties_even() as usize;
                    let ew = (erase_area / aspect).sqrt().round_ties_even() as usize;
                    if !(eh < h && ew < w) {
                        continue;
                    }
                    let top = rng.below((h - eh + 1) as u64) as u32;
                    let left = rng.below((w - ew + 1) as u64) as u32;
                    return Ok(Drawn::Erase { top, left, h: eh as u32, w: ew as u32 });
                }
                Drawn::Skip
            }
            OpSpec::RandomSolarize { threshold, p } => gated(rng, *p, Drawn::Value(*threshold)),
            OpSpec::RandomPosterize { bits, p } => gated(rng, *p, Drawn::Value(f64::from(*bits))),
            OpSpec::RandomAdjustSharpness { sharpness_factor, p } => gated(rng, *p, Drawn::Value(*sharpness_factor)),
            OpSpec::RandomRotation { degrees, .. } => Drawn::Value(uniform_f32(rng, *degrees)),
            OpSpec::RandomAffine { degrees, translate, scale, shear, .. } => {
                let angle = uniform_f32(rng, *degrees);
                let translate = match *translate {
                    Some((fx, fy)) => {
                        let (mx, my) = (fx * w as f64, fy * h as f64);
                        // `int(round(uniform(-max, max)))`: Python's round is half-to-even.
                        let tx = uniform_f32(rng, (-mx, mx)).round_ties_even();
                        let ty = uniform_f32(rng, (-my, my)).round_ties_even();
                        [tx, ty]
                    }
                    None => [0.0, 0.0],
                };
                let scale = scale.map_or(1.0, |r| uniform_f32(rng, r));
                let sx = if shear.len() >= 2 { uniform_f32(rng, (shear[0], shear[1])) } else { 0.0 };
                let sy = if shear.len() == 4 { uniform_f32(rng, (shear[2], shear[3])) } else { 0.0 };
                Drawn::Affine { angle, translate, scale, shear: [sx, sy] }
            }
            OpSpec::RandomPerspective { distortion_scale, p, .. } => {
                if !gate(rng, *p) {
                    return Ok(Drawn::Skip);
                }
                let (h, w) = (h as i64, w as i64);
                let bh = (distortion_scale * (h / 2) as f64) as i64 + 1;
                let bw = (distortion_scale * (w / 2) as f64) as i64 + 1;
                // torch.randint(lo, hi): uniform in [lo, hi).
                let mut randint = |lo: i64, hi: i64| lo + rng.below((hi - lo).max(1) as u64) as i64;
                let tl = [randint(0, bw), randint(0, bh)];
                let tr = [randint(w - bw, w), randint(0, bh)];
                let br = [randint(w - bw, w), randint(h - bh, h)];
                let bl = [randint(0, bw), randint(h - bh, h)];
                Drawn::Perspective([tl[0], tl[1], tr[0], tr[1], br[0], br[1], bl[0], bl[1]])
            }
            // A policy decides while it runs (no per-sample list); `trace` shows its decisions.
            OpSpec::Policy { .. } | OpSpec::TimmPolicy(_) | OpSpec::TimmRandomErasing(_) => Drawn::Apply,
            // torchvision returns the image untouched when the size would not change (no resampling at all).
            OpSpec::Resize { .. } | OpSpec::CenterCrop { .. } => {
                if self.output_hw(Some((h, w))) == Some((h, w)) {
                    Drawn::Skip
                } else {
                    Drawn::Apply
                }
            }
            OpSpec::RandomResizedCrop { scale, ratio, .. } => {
                let log_ratio = (ratio.0.ln(), ratio.1.ln());
                let (top, left, ch, cw) = resize::rrc_draw(rng, w as u32, h as u32, *scale, log_ratio, *ratio);
                Drawn::Box { top: top as u32, left: left as u32, h: ch as u32, w: cw as u32 }
            }
            OpSpec::RandomApply { p, .. } => gated(rng, *p, Drawn::Apply),
            OpSpec::RandomChoice { p, .. } => {
                // torch.multinomial(p / sum(p), 1): one uniform against the cumulative weights; a zero weight is
                // never picked (the fallback is the last positive one, for a u that rounding put past the end).
                let total: f64 = p.iter().sum();
                let u = rng.uniform() * total;
                let mut cum = 0.0;
                let last = p.iter().rposition(|&v| v > 0.0).unwrap_or(0);
                let pick = p.iter().position(|&v| {
                    cum += v;
                    v > 0.0 && u < cum
                });
                Drawn::Pick(pick.unwrap_or(last) as u32)
            }
            OpSpec::RandomOrder { transforms } => {
                // torch.randperm(n): forward Fisher–Yates (as ColorJitter's order).
                let n = transforms.len().min(MAX_CONTAINER_OPS);
                let mut order = [0u8; MAX_CONTAINER_OPS];
                for (i, o) in order.iter_mut().enumerate() {
                    *o = i as u8;
                }
                for i in 0..n.saturating_sub(1) {
                    let z = rng.below((n - i) as u64) as usize;
                    order.swap(i, i + z);
                }
                Drawn::Order { order, n: n as u8 }
            }
        })
    }

    /// What this op draws for one sample as numbers (`_core.sample_op`): [`Drawn::to_vec`] of [`OpSpec::sample`],
    /// or for a policy its decisions ([`policy::trace`]).
    pub fn trace(&self, rng: &mut SampleRng, hwc: (usize, usize, usize)) -> std::result::Result<Vec<f64>, String> {
        match self {
            OpSpec::Policy { kind, .. } => Ok(policy::trace(kind, rng, (hwc.0, hwc.1))),
            OpSpec::TimmPolicy(spec) => Ok(timm::trace(spec, rng)),
            OpSpec::TimmRandomErasing(spec) => {
                let mut out = Vec::new();
                timm::erase(spec, None, (hwc.0, hwc.1), rng, |b| out.extend(b.map(|v| v as f64)));
                Ok(out)
            }
            _ => self.sample(rng, hwc).map(|d| d.to_vec()),
        }
    }
}

/// The scratch an op may need beyond the image: a second image buffer (ping-pong for ops that change the size
/// or read unmodified neighbours) and an f32 plane (blur). Grown once, reused.
#[derive(Debug, Default)]
pub struct OpScratch {
    /// The spare image buffer; ops that write a new image put it here and the program swaps.
    pub spare: Vec<u8>,
    /// f32 intermediate (blur's horizontal pass).
    pub plane: Vec<f32>,
    /// The policies' buffers.
    pub policy: PolicyScratch,
    /// The stage-2 resizes' taps and intermediates.
    pub(crate) resize: super::resample::ResampleScratch,
    /// timm's policies' buffers.
    pub timm: timm::TimmScratch,
}

impl OpScratch {
    /// Bytes held by the buffers that grow with the image (the fuzz tests hold them to the compiled sizes' bound).
    #[cfg(test)]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.spare.capacity() + self.plane.capacity() * 4 + self.policy.retained_bytes() + self.resize.retained_bytes()
    }
}

/// Apply `op` with parameters `drawn` to `frame` (the kernels' arithmetic; `rng` continues the op's stream for
/// the ops that draw per element: noise, random erasing).
pub fn apply(op: &OpSpec, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, rng: &mut SampleRng) {
    if *drawn == Drawn::Skip {
        return;
    }
    match (op, drawn) {
        (OpSpec::Pad { padding: [l, t, r, b], fill, mode }, _) => {
            let (oh, ow) = (frame.h + (*t + *b) as usize, frame.w + (*l + *r) as usize);
            let n = frame.h * frame.w * frame.c;
            kernels::pad_crop(
                &frame.buf[..n],
                (frame.h, frame.w, frame.c),
                &mut scratch.spare,
                (oh, ow),
                (-(*t as isize), -(*l as isize)),
                *mode,
                &fill_bytes(fill),
            );
            std::mem::swap(&mut frame.buf, &mut scratch.spare);
            (frame.h, frame.w) = (oh, ow);
        }
        (OpSpec::RandomCrop { height, width, fill, mode, .. }, Drawn::Crop { padding: [l, t, ..], top, left }) => {
            let (oh, ow) = (*height as usize, *width as usize);
            let n = frame.h * frame.w * frame.c;
            kernels::pad_crop(
                &frame.buf[..n],
                (frame.h, frame.w, frame.c),
                &mut scratch.spare,
                (oh, ow),
                (*top as isize - *t as isize, *left as isize - *l as isize),
                *mode,
                &fill_bytes(fill),
            );
            std::mem::swap(&mut frame.buf, &mut scratch.spare);
            (frame.h, frame.w) = (oh, ow);
        }
        (OpSpec::CenterCropOrPad { height, width, fill, mode }, _) => {
            // timm's center_crop_or_pad: a padded dimension starts `(size - side) // 2` before the image; a cropped
            // one at `round((side - size) / 2)`.
            let start = |side: usize, size: usize| -> isize {
                if size > side {
                    -(((size - side) / 2) as isize)
                } else {
                    ((side - size) as f64 / 2.0).round_ties_even() as isize
                }
            };
            let (oh, ow) = (*height as usize, *width as usize);
            let n = frame.h * frame.w * frame.c;
            let origin = (start(frame.h, oh), start(frame.w, ow));
            let hwc = (frame.h, frame.w, frame.c);
            kernels::pad_crop(&frame.buf[..n], hwc, &mut scratch.spare, (oh, ow), origin, *mode, &fill_bytes(fill));
            std::mem::swap(&mut frame.buf, &mut scratch.spare);
            (frame.h, frame.w) = (oh, ow);
        }
        (OpSpec::HorizontalFlip { .. }, _) => kernels::flip_horizontal(&mut frame.view()),
        (OpSpec::VerticalFlip { .. }, _) => kernels::flip_vertical(&mut frame.view()),
        (OpSpec::Grayscale { .. } | OpSpec::RandomGrayscale { .. }, _) => kernels::grayscale(&mut frame.view()),
        (OpSpec::ColorJitter { .. }, Drawn::Jitter { order, factors }) => {
            for &i in order {
                let Some(f) = factors[usize::from(i)] else { continue };
                let img = &mut frame.view();
                match i {
                    0 => kernels::brightness(img, f),
                    1 => kernels::contrast(img, f),
                    2 => kernels::saturation(img, f),
                    _ => kernels::hue(img, f),
                }
            }
        }
        (OpSpec::GaussianBlur { kx, ky, .. }, Drawn::Value(sigma)) => {
            let (kxv, kyv) =
                (kernels::gaussian_kernel(*kx as usize, *sigma), kernels::gaussian_kernel(*ky as usize, *sigma));
            kernels::gaussian_blur(&mut frame.view(), &mut scratch.plane, &kxv, &kyv);
        }
        (OpSpec::GaussianNoise { mean, sigma, clip }, _) => {
            kernels::gaussian_noise(&mut frame.view(), rng, (*mean, *sigma), *clip)
        }
        (OpSpec::RandomErasing { value, .. }, Drawn::Erase { top, left, h, w }) => {
            let b = (*top as usize, *left as usize, *h as usize, *w as usize);
            match value {
                EraseValue::Values(v) => kernels::erase(&mut frame.view(), b, &fill_bytes(v)),
                EraseValue::Random => kernels::erase_random(&mut frame.view(), b, rng),
            }
        }
        (OpSpec::RandomAutocontrast { .. }, _) => kernels::autocontrast(&mut frame.view()),
        (OpSpec::RandomEqualize { .. }, _) => kernels::equalize(&mut frame.view()),
        (OpSpec::RandomSolarize { .. }, Drawn::Value(t)) => kernels::solarize(&mut frame.view(), *t),
        (OpSpec::RandomPosterize { .. }, Drawn::Value(b)) => kernels::posterize(&mut frame.view(), *b as u32),
        (OpSpec::RandomAdjustSharpness { .. }, Drawn::Value(f)) => {
            kernels::sharpness(&mut frame.view(), &mut scratch.spare, *f)
        }
        (OpSpec::RandomInvert { .. }, _) => kernels::invert(&mut frame.view()),
        (OpSpec::RandomRotation { interp, expand, center, fill, .. }, Drawn::Value(angle)) => {
            let n = frame.h * frame.w * frame.c;
            let hwc = (frame.h, frame.w, frame.c);
            let (oh, ow) = warp::rotate(
                &frame.buf[..n],
                hwc,
                &mut scratch.spare,
                *angle,
                *interp,
                *expand,
                *center,
                fill_f32(fill),
            );
            std::mem::swap(&mut frame.buf, &mut scratch.spare);
            (frame.h, frame.w) = (oh, ow);
        }
        (OpSpec::RandomAffine { interp, fill, center, .. }, Drawn::Affine { angle, translate, scale, shear }) => {
            let n = frame.h * frame.w * frame.c;
            let hwc = (frame.h, frame.w, frame.c);
            let params = (*angle, *translate, *scale, *shear);
            warp::affine(&frame.buf[..n], hwc, &mut scratch.spare, params, *interp, *center, fill_f32(fill));
            std::mem::swap(&mut frame.buf, &mut scratch.spare);
        }
        (OpSpec::RandomPerspective { interp, fill, .. }, Drawn::Perspective(end)) => {
            let (start, end) = warp::perspective_points(frame.h, frame.w, *end);
            // Degenerate corners (a 1-pixel side) have no perspective: the image stays as it is.
            let Some(k) = warp::perspective_coeffs(start, end) else { return };
            let n = frame.h * frame.w * frame.c;
            let hwc = (frame.h, frame.w, frame.c);
            let map = warp::GridMap::Perspective(k);
            warp::warp(&frame.buf[..n], hwc, &mut scratch.spare, (frame.h, frame.w), &map, *interp, fill_f32(fill));
            std::mem::swap(&mut frame.buf, &mut scratch.spare);
        }
        (OpSpec::Policy { kind, interp, fill }, _) => {
            let style = WarpStyle { interp: *interp, fill: fill_f32(fill) };
            policy::run(kind, style, frame, &mut scratch.policy, rng);
        }
        (OpSpec::Resize { .. } | OpSpec::CenterCrop { .. } | OpSpec::RandomResizedCrop { .. }, _) => {
            unreachable!("stage-2 geometric ops run in program::run_op (stage2::apply_stage2)")
        }
        (OpSpec::RandomApply { .. } | OpSpec::RandomChoice { .. } | OpSpec::RandomOrder { .. }, _) => {
            unreachable!("containers run in program::run_op (their inner ops need their own streams)")
        }
        (OpSpec::TimmPolicy(spec), _) => timm::run(spec, frame, &mut scratch.spare, &mut scratch.timm, rng),
        (OpSpec::TimmRandomErasing(spec), _) => {
            let hw = (frame.h, frame.w);
            timm::erase(spec, Some(frame), hw, rng, |_| {});
        }
        (op, drawn) => unreachable!("{} was drawn {drawn:?}, which its sample() never returns", op.name()),
    }
}

/// A value of an op's spec as the binding hands it over (Python's `Transform._spec()` tuple items), so that the
/// parsing — and every value rule — stays in the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int (any Python int that fits 128 bits).
    Int(i128),
    /// A float.
    Num(f64),
    /// A string.
    Str(String),
    /// A tuple or list.
    List(Vec<Arg>),
}

/// `padding_mode` values.
pub const PADDING_MODE: Choice<PadMode> = Choice {
    name: "padding_mode",
    values: &[
        ("constant", PadMode::Constant),
        ("edge", PadMode::Edge),
        ("reflect", PadMode::Reflect),
        ("symmetric", PadMode::Symmetric),
    ],
};

/// The spec kinds [`OpSpec::from_args`] parses (the first item of Python's `_spec()` tuple).
pub const KINDS: &[&str] = &[
    "pad",
    "random_crop",
    "vertical_flip",
    "color_jitter",
    "grayscale",
    "random_grayscale",
    "gaussian_blur",
    "gaussian_noise",
    "random_erasing",
    "random_autocontrast",
    "random_equalize",
    "random_solarize",
    "random_posterize",
    "random_adjust_sharpness",
    "random_invert",
    "random_rotation",
    "random_affine",
    "random_perspective",
    "auto_augment",
    "rand_augment",
    "trivial_augment_wide",
    "augmix",
    "resize_max",
    "timm_rand_augment",
    "timm_auto_augment",
    "timm_augmix",
    "timm_random_erasing",
    "center_crop_or_pad",
];

impl OpSpec {
    /// Parse `kind` + `args` (the spec tuple after its kind) into an op; shape errors name the parameter
    /// (`invalid transforms: …` when the tuple itself is malformed, which only a hand-made spec can be). Value
    /// rules are [`OpSpec::check`]'s, applied when the program is compiled.
    pub fn from_args(kind: &str, args: &[Arg]) -> Result<Self> {
        let shape = |what: &str| TrdataError::config("transforms", format!("{kind} spec {args:?} must have {what}"));
        let get = |i: usize| args.get(i).ok_or_else(|| shape(&format!("at least {} items", i + 1)));
        let num = |i: usize, name: &str| -> Result<f64> {
            match get(i)? {
                Arg::Num(v) => Ok(*v),
                Arg::Int(v) => Ok(*v as f64),
                other => Err(TrdataError::config(name, format!("{other:?} must be a number"))),
            }
        };
        let uint = |i: usize, name: &str| -> Result<u32> {
            match get(i)? {
                Arg::Int(v) if (0..=i128::from(u32::MAX)).contains(v) => Ok(*v as u32),
                Arg::Int(v) => Err(TrdataError::config(name, format!("{v} must be in 0..={MAX_SIDE}"))),
                other => Err(TrdataError::config(name, format!("{other:?} must be an int"))),
            }
        };
        let boolean = |i: usize, name: &str| -> Result<bool> {
            match get(i)? {
                Arg::Bool(b) => Ok(*b),
                other => Err(TrdataError::config(name, format!("{other:?} must be a bool"))),
            }
        };
        let nums = |i: usize, name: &str| -> Result<Vec<f64>> {
            match get(i)? {
                Arg::List(v) => v
                    .iter()
                    .map(|a| match a {
                        Arg::Num(x) => Ok(*x),
                        Arg::Int(x) => Ok(*x as f64),
                        other => Err(TrdataError::config(name, format!("{other:?} must be a number"))),
                    })
                    .collect(),
                Arg::Num(x) => Ok(vec![*x]),
                Arg::Int(x) => Ok(vec![*x as f64]),
                other => Err(TrdataError::config(name, format!("{other:?} must be a number or a sequence of them"))),
            }
        };
        let pair = |i: usize, name: &str| -> Result<(f64, f64)> {
            match nums(i, name)?.as_slice() {
                [a, b] => Ok((*a, *b)),
                v => Err(TrdataError::config(name, format!("{v:?} must be a (min, max) pair"))),
            }
        };
        let opt_pair = |i: usize, name: &str| -> Result<Option<(f64, f64)>> {
            if *get(i)? == Arg::None { Ok(None) } else { pair(i, name).map(Some) }
        };
        let padding = |i: usize| -> Result<[u32; 4]> {
            match get(i)? {
                Arg::List(v) if v.len() == 4 => {
                    let mut out = [0u32; 4];
                    for (o, a) in out.iter_mut().zip(v) {
                        *o = match a {
                            Arg::Int(x) if (0..=i128::from(MAX_SIDE)).contains(x) => *x as u32,
                            other => {
                                return Err(TrdataError::config(
                                    "padding",
                                    format!(
                                        "{other:?} must be an int in 0..={MAX_SIDE} (negative padding is not supported)"
                                    ),
                                ));
                            }
                        };
                    }
                    Ok(out)
                }
                other => Err(TrdataError::config("padding", format!("{other:?} must be (left, top, right, bottom)"))),
            }
        };
        let mode = |i: usize| -> Result<PadMode> {
            match get(i)? {
                Arg::Str(s) => PADDING_MODE.parse(s),
                other => Err(PADDING_MODE.error(&format!("{other:?}"))),
            }
        };
        let opt_fill = |i: usize| -> Result<Option<Vec<f64>>> {
            if *get(i)? == Arg::None { Ok(None) } else { nums(i, "fill").map(Some) }
        };
        let interp = |i: usize| -> Result<Interp> {
            match get(i)? {
                Arg::Str(s) => WARP_INTERPOLATION.parse(s),
                other => Err(WARP_INTERPOLATION.error(&format!("{other:?}"))),
            }
        };
        let center = |i: usize| -> Result<Option<[f64; 2]>> {
            if *get(i)? == Arg::None {
                return Ok(None);
            }
            pair(i, "center").map(|(x, y)| Some([x, y]))
        };
        let int = |i: usize, name: &str| -> Result<i64> {
            match get(i)? {
                Arg::Int(v) if i128::from(i32::MIN) <= *v && *v <= i128::from(i32::MAX) => Ok(*v as i64),
                other => Err(TrdataError::config(name, format!("{other:?} must be an int of 32 bits"))),
            }
        };
        Ok(match kind {
            "random_rotation" => OpSpec::RandomRotation {
                degrees: pair(0, "degrees")?,
                interp: interp(1)?,
                expand: boolean(2, "expand")?,
                center: center(3)?,
                fill: opt_fill(4)?,
            },
            "random_affine" => OpSpec::RandomAffine {
                degrees: pair(0, "degrees")?,
                translate: opt_pair(1, "translate")?,
                scale: opt_pair(2, "scale")?,
                shear: if *get(3)? == Arg::None { Vec::new() } else { nums(3, "shear")? },
                interp: interp(4)?,
                fill: opt_fill(5)?,
                center: center(6)?,
            },
            "random_perspective" => OpSpec::RandomPerspective {
                distortion_scale: num(0, "distortion_scale")?,
                p: num(1, "p")?,
                interp: interp(2)?,
                fill: opt_fill(3)?,
            },
            "auto_augment" => OpSpec::Policy {
                kind: PolicyKind::AutoAugment(match get(0)? {
                    Arg::Str(s) => AA_POLICY.parse(s)?,
                    other => return Err(AA_POLICY.error(&format!("{other:?}"))),
                }),
                interp: interp(1)?,
                fill: opt_fill(2)?,
            },
            "rand_augment" => OpSpec::Policy {
                kind: PolicyKind::RandAugment {
                    num_ops: uint(0, "num_ops")?,
                    magnitude: uint(1, "magnitude")?,
                    bins: uint(2, "num_magnitude_bins")?,
                },
                interp: interp(3)?,
                fill: opt_fill(4)?,
            },
            "trivial_augment_wide" => OpSpec::Policy {
                kind: PolicyKind::TrivialAugmentWide { bins: uint(0, "num_magnitude_bins")? },
                interp: interp(1)?,
                fill: opt_fill(2)?,
            },
            "augmix" => OpSpec::Policy {
                kind: PolicyKind::AugMix {
                    severity: uint(0, "severity")?,
                    width: uint(1, "mixture_width")?,
                    depth: int(2, "chain_depth")? as i32,
                    alpha: num(3, "alpha")?,
                    all_ops: boolean(4, "all_ops")?,
                },
                interp: interp(5)?,
                fill: opt_fill(6)?,
            },
            "resize_max" => OpSpec::Resize {
                size: ResizeTo::Shorter(uint(0, "size")?),
                max_size: Some(uint(1, "max_size")?),
                resample: Resample {
                    filter: match get(2)? {
                        Arg::Str(s) => resize::RESIZE_INTERPOLATION.parse(s)?,
                        other => return Err(resize::RESIZE_INTERPOLATION.error(&format!("{other:?}"))),
                    },
                    antialias: boolean(3, "antialias")?,
                },
            },
            "timm_rand_augment" => timm_policy(
                TimmKind::RandAugment {
                    num_layers: uint(0, "num_layers")?,
                    magnitude: num(1, "magnitude")?,
                    prob: num(4, "p")?,
                    ops: timm_ops(get(5)?)?,
                    weights: if *get(9)? == Arg::None { None } else { Some(nums(9, "weights")?) },
                },
                (
                    num(2, "magnitude_std")?,
                    num(3, "magnitude_max")?,
                    nums(6, "fill")?,
                    get(7)?,
                    num(8, "translate_pct")?,
                ),
            )?,
            "timm_auto_augment" => timm_policy(
                TimmKind::AutoAugment {
                    sub_policies: match get(0)? {
                        Arg::List(subs) => subs.iter().map(timm_steps).collect::<Result<Vec<_>>>()?,
                        other => return Err(TrdataError::config("policy", format!("{other:?} must be a list"))),
                    },
                },
                (
                    num(1, "magnitude_std")?,
                    num(2, "magnitude_max")?,
                    nums(3, "fill")?,
                    get(4)?,
                    num(5, "translate_pct")?,
                ),
            )?,
            "timm_augmix" => timm_policy(
                TimmKind::AugMix {
                    ops: timm_ops(get(0)?)?,
                    magnitude: num(1, "magnitude")?,
                    alpha: num(2, "alpha")?,
                    width: uint(3, "width")?,
                    depth: int(4, "depth")? as i32,
                },
                (
                    num(5, "magnitude_std")?,
                    num(6, "magnitude_max")?,
                    nums(7, "fill")?,
                    get(8)?,
                    num(9, "translate_pct")?,
                ),
            )?,
            "timm_random_erasing" => OpSpec::TimmRandomErasing(TimmRandomErasing {
                p: num(0, "p")?,
                min_area: num(1, "min_area")?,
                max_area: num(2, "max_area")?,
                aspect: pair(3, "ratio")?,
                min_count: uint(4, "min_count")?,
                max_count: uint(5, "max_count")?,
                mode: match get(6)? {
                    Arg::Str(s) => ERASE_MODE.parse(s)?,
                    other => return Err(ERASE_MODE.error(&format!("{other:?}"))),
                },
                mean: {
                    let v = nums(7, "mean")?;
                    std::array::from_fn(|k| v.get(k.min(v.len().saturating_sub(1))).copied().unwrap_or(f64::NAN))
                },
                std: {
                    let v = nums(8, "std")?;
                    std::array::from_fn(|k| v.get(k.min(v.len().saturating_sub(1))).copied().unwrap_or(f64::NAN))
                },
            }),
            "center_crop_or_pad" => OpSpec::CenterCropOrPad {
                height: uint(0, "size")?,
                width: uint(1, "size")?,
                fill: nums(2, "fill")?,
                mode: mode(3)?,
            },
            "pad" => OpSpec::Pad { padding: padding(0)?, fill: nums(1, "fill")?, mode: mode(2)? },
            "random_crop" => OpSpec::RandomCrop {
                height: uint(0, "size")?,
                width: uint(1, "size")?,
                padding: padding(2)?,
                pad_if_needed: boolean(3, "pad_if_needed")?,
                fill: nums(4, "fill")?,
                mode: mode(5)?,
            },
            "vertical_flip" => OpSpec::VerticalFlip { p: num(0, "p")? },
            "color_jitter" => OpSpec::ColorJitter {
                brightness: opt_pair(0, "brightness")?,
                contrast: opt_pair(1, "contrast")?,
                saturation: opt_pair(2, "saturation")?,
                hue: opt_pair(3, "hue")?,
            },
            "grayscale" => OpSpec::Grayscale { num_output_channels: uint(0, "num_output_channels")? },
            "random_grayscale" => OpSpec::RandomGrayscale { p: num(0, "p")? },
            "gaussian_blur" => OpSpec::GaussianBlur {
                kx: uint(0, "kernel_size")?,
                ky: uint(1, "kernel_size")?,
                sigma: pair(2, "sigma")?,
            },
            "gaussian_noise" => {
                OpSpec::GaussianNoise { mean: num(0, "mean")?, sigma: num(1, "sigma")?, clip: boolean(2, "clip")? }
            }
            "random_erasing" => OpSpec::RandomErasing {
                p: num(0, "p")?,
                scale: pair(1, "scale")?,
                ratio: pair(2, "ratio")?,
                value: match get(3)? {
                    Arg::Str(s) if s == "random" => EraseValue::Random,
                    Arg::Str(s) => {
                        return Err(TrdataError::config(
                            "value",
                            format!("{s:?} must be a number, a sequence or 'random'"),
                        ));
                    }
                    _ => EraseValue::Values(nums(3, "value")?),
                },
            },
            "random_autocontrast" => OpSpec::RandomAutocontrast { p: num(0, "p")? },
            "random_equalize" => OpSpec::RandomEqualize { p: num(0, "p")? },
            "random_solarize" => OpSpec::RandomSolarize { threshold: num(0, "threshold")?, p: num(1, "p")? },
            "random_posterize" => OpSpec::RandomPosterize { bits: uint(0, "bits")?, p: num(1, "p")? },
            "random_adjust_sharpness" => {
                OpSpec::RandomAdjustSharpness { sharpness_factor: num(0, "sharpness_factor")?, p: num(1, "p")? }
            }
            "random_invert" => OpSpec::RandomInvert { p: num(0, "p")? },
            other => return Err(TrdataError::config("transforms", format!("unknown transform {other:?}"))),
        })
    }
}

/// timm's op names (an `Arg::List` of strings) → ops.
fn timm_ops(a: &Arg) -> Result<Vec<TimmOp>> {
    match a {
        Arg::List(v) => v
            .iter()
            .map(|a| match a {
                Arg::Str(s) => TIMM_OPS.parse(s),
                other => Err(TIMM_OPS.error(&format!("{other:?}"))),
            })
            .collect(),
        other => Err(TrdataError::config("ops", format!("{other:?} must be a list of op names"))),
    }
}

/// One AutoAugment sub-policy: a list of `(name, p, magnitude)`.
fn timm_steps(a: &Arg) -> Result<Vec<(TimmOp, f64, f64)>> {
    let shape = || TrdataError::config("policy", format!("{a:?} must be a list of (op name, p, magnitude)"));
    let Arg::List(steps) = a else { return Err(shape()) };
    let number = |v: &Arg| match v {
        Arg::Num(x) => Ok(*x),
        Arg::Int(x) => Ok(*x as f64),
        _ => Err(shape()),
    };
    steps
        .iter()
        .map(|st| match st {
            Arg::List(t) if t.len() == 3 => {
                let Arg::Str(name) = &t[0] else { return Err(shape()) };
                Ok((TIMM_OPS.parse(name)?, number(&t[1])?, number(&t[2])?))
            }
            _ => Err(shape()),
        })
        .collect()
}

/// A timm policy from its kind and the shared hparams (magnitude_std, magnitude_max, fill, interpolation,
/// translate_pct); values are checked by [`TimmPolicy::check`].
fn timm_policy(
    kind: TimmKind,
    (mstd, mmax, fill, interp, translate_pct): (f64, f64, Vec<f64>, &Arg, f64),
) -> Result<OpSpec> {
    let interp = match interp {
        Arg::Str(s) => TIMM_INTERPOLATION.parse(s)?,
        other => return Err(TIMM_INTERPOLATION.error(&format!("{other:?}"))),
    };
    Ok(OpSpec::TimmPolicy(TimmPolicy { kind, magnitude_std: mstd, magnitude_max: mmax, fill, interp, translate_pct }))
}
