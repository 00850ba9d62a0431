//! ops — the per-sample ops of a compiled program that run on the uint8 crop (see [`super::program`] for where
//! they sit). Each op is one unit: a struct holding its arguments, with one [`Op`] impl that parses them from
//! the binding's spec ([`Op::parse`]), validates them once ([`Op::check`]), draws its per-sample parameters
//! ([`Op::sample`], a [`Drawn`]) with torchvision's distributions and draw logic from the op's own stream, and
//! calls its kernels ([`Op::apply`]). The ops are grouped by family, one file each: [`color`], [`geometric`],
//! [`erase`] (erasing and noise), [`policies`] (torchvision's auto-augment family), [`containers`] and
//! [`timm`]. [`OpSpec`] is the one vocabulary the program holds: one variant per op, and its methods are
//! one-line delegations written once, by the `registry!` list below.
//!
//! Specs cross the binding by name: Python's `_spec()` is `("kind", {name: value, …})`, the names being the
//! parameters of the Python class (torchvision's, or the core's where torchvision has none), and [`Op::parse`]
//! reads each with an [`Args`] getter by that name (`a.num("p")`, `a.opt_pair("contrast")`). The one parse
//! ([`OpSpec::from_args`], and [`spec`] for the classic transforms and the containers) refuses a missing name
//! (naming it and the kind), a name the op did not read ([`Args::finish`]) and a wrong type, each a ConfigError
//! naming the parameter.
//!
//! Adding an op (3 files, plus tests): its struct and `impl Op` (kinds, defaults, parse by name, check, sample,
//! apply — and, for an op that moves a detection sample's targets, `check_targets` and `target_steps`, or
//! `leaves_geometry` for a photometric one: the op's facts live on the op, [`moves`] has the steps they are
//! made of) in its family's file; one line in `registry!` (this file); its Python class
//! (python/trdata/transforms.py) whose `_spec()` returns `("kind", {…})` with one of the op's [`Op::KINDS`] and
//! exactly the names its `parse` reads, and whose defaults read `_core.DEFAULTS` (filled from [`Op::DEFAULTS`]).
//! tests/test_spec_by_name.py then checks the class's names against the core by itself.
//!
//! Randomness: op `pos` of the user's list draws from `SampleRng(seed, epoch, index, OP_BASE + pos)` only, and an
//! op inside a container from the stream of its [`Site`] (position, inner position, …; [`Site::stream`]), so a
//! sample's pixels depend on (seed, epoch, index, op position) and never on worker, GPU or rank counts. trdata
//! uses Philox, not torch's MT19937, so streams differ from torch's but distributions match (tests compare
//! them with KS/χ² statistics over ≥ 10k draws): a uniform `uniform_(a, b)` is drawn as a double and rounded to
//! f32 (torch's values are f32), `randint(0, n)` is unbiased, `randperm(4)` is Fisher–Yates, probability gates
//! are `u < p` (torchvision's `torch.rand(1) >= p` → skip).

pub mod color;
pub mod containers;
pub mod detection;
pub mod erase;
pub mod geometric;
pub mod moves;
pub mod policies;
pub mod spec;
pub mod step;
pub mod timm;

pub use super::kernels::Frame;
use super::kernels::PadMode;
use super::policy::PolicyScratch;
use super::timm::{TimmPolicy, TimmRandomErasing, TimmScratch};
use crate::error::{Result, TrdataError};
use crate::param::Choice;
use crate::rng::SampleRng;
pub use color::{
    ColorJitter, GaussianBlur, Grayscale, RandomAdjustSharpness, RandomAutocontrast, RandomChannelPermutation,
    RandomEqualize, RandomGrayscale, RandomInvert, RandomPhotometricDistort, RandomPosterize, RandomSolarize,
};
pub use containers::{RandomApply, RandomChoice, RandomOrder};
pub use detection::{
    ClampBoundingBoxes, MAX_MOSAIC_SIZE, Mosaic, RandomIoUCrop, RandomShortestSize, RandomZoomOut,
    SanitizeBoundingBoxes, ScaleJitter,
};
pub use erase::{EraseValue, GaussianNoise, RandomErasing};
pub use geometric::{
    CenterCrop, HorizontalFlip, Pad, RandomAffine, RandomCrop, RandomPerspective, RandomResize, RandomResizedCrop,
    RandomRotation, Resize, ResizeTo, VerticalFlip,
};
pub use moves::{Move, Step};
pub use policies::Policy;
pub use step::{ImageStep, PythonStep, StepRef};
pub use timm::CenterCropOrPad;

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
    /// RandomPhotometricDistort: ColorJitter's order and factors, then the channel permutation (identity when
    /// its gate said no).
    Distort {
        /// Adjustments in the order they run (0 brightness, 1 contrast, 2 saturation, 3 hue).
        order: [u8; 4],
        /// Factors in that numbering (None = off).
        factors: [Option<f64>; 4],
        /// Output channel i takes input channel `perm[i]`.
        perm: [u8; 3],
    },
    /// A resize of the whole image to (h, w) (ScaleJitter's and RandomShortestSize's draw).
    Size {
        /// Output height.
        h: u32,
        /// Output width.
        w: u32,
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
            Drawn::Size { h, w } => vec![f64::from(*h), f64::from(*w)],
            Drawn::Distort { order, factors, perm } => order
                .iter()
                .map(|&o| f64::from(o))
                .chain(factors.iter().map(|f| f.unwrap_or(f64::NAN)))
                .chain(perm.iter().map(|&p| f64::from(p)))
                .collect(),
        }
    }
}
/// torchvision's `uniform_(lo, hi)`: a float32 value (drawn as a double, rounded to f32 like torch's), returned
/// as the Python double `.item()` gives.
fn uniform_f32(rng: &mut SampleRng, (lo, hi): (f64, f64)) -> f64 {
    f64::from(rng.uniform_range(lo, hi) as f32)
}

/// `torch.randperm(n)` as [`Drawn::Order`] (n at most `MAX_CONTAINER_OPS`): forward Fisher–Yates, as ColorJitter's
/// order (RandomOrder's transforms, RandomChannelPermutation's channels).
fn randperm(rng: &mut SampleRng, n: usize) -> Drawn {
    let n = n.min(crate::augment::site::MAX_CONTAINER_OPS);
    let mut order = [0u8; crate::augment::site::MAX_CONTAINER_OPS];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i as u8;
    }
    for i in 0..n.saturating_sub(1) {
        let z = rng.below((n - i) as u64) as usize;
        order.swap(i, i + z);
    }
    Drawn::Order { order, n: n as u8 }
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

fn check_fill(fill: &[f64], op: &str, pos: Site) -> Result<()> {
    if fill.is_empty() || fill.len() > 3 || fill.len() == 2 || !fill.iter().all(|v| v.is_finite()) {
        return Err(bad(FILL, format!("{fill:?}"), "be one number or one per channel (1 or 3), finite", op, pos));
    }
    if !fill.iter().all(|&v| (0.0..256.0).contains(&v)) {
        return Err(bad(FILL, format!("{fill:?}"), "be in [0, 255] (pixel units of the uint8 image)", op, pos));
    }
    Ok(())
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

/// `unreachable!` for a [`Drawn`] that the op's [`Op::sample`] never returns.
fn undrawn(op: &str, drawn: &Drawn) -> ! {
    unreachable!("{op} was drawn {drawn:?}, which its sample() never returns")
}

/// A parameter's default as `_core.DEFAULTS` shows it to Python (python/trdata/transforms.py reads them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DefaultValue {
    /// A float.
    Num(f64),
    /// An int.
    Int(i64),
    /// A bool.
    Bool(bool),
    /// A string (a choice's name).
    Str(&'static str),
    /// A (min, max) pair.
    Pair(f64, f64),
}

/// One op: its spec kinds and parsing, its name, check, output size, draw and kernel call. Implemented once per
/// op in its family's file; [`OpSpec`] delegates to it.
pub trait Op: Sized + Clone {
    /// The spec kinds (the first item of Python's `Transform._spec()`, `("kind", {…})`) that parse into this op; empty for
    /// an op the program or the binding builds otherwise (a stage-2 form of a folding transform, a container).
    const KINDS: &'static [&'static str];

    /// The defaults of its Python class's parameters (`Class.parameter` keys of `_core.DEFAULTS`; each value is
    /// written once, in [`default`] or `augment::default`).
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[];

    /// The op from the spec's parameters, each read by name (`a.kind()` is one of [`Op::KINDS`]); type errors
    /// name the parameter, and every parameter the spec holds must be read ([`Args::finish`]). Value rules are
    /// [`Op::check`]'s, applied when the program is compiled.
    fn parse(a: &Args<'_>) -> Result<Self> {
        Err(a.unknown())
    }

    /// torchvision's (or timm's) class name, for messages.
    fn name(&self) -> &'static str;

    /// Validate the values (the one place; Python checks only types); `op` is [`Op::name`], `pos` its site,
    /// both named in the message.
    fn check(&self, op: &str, pos: Site) -> Result<()>;

    /// (height, width) after this op for an input of `hw` (`None`: depends on the sample — only for ops that
    /// keep the size, applied to a size that already depends on it).
    fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
        hw
    }

    /// [`Op::output_hw`] at `pos`, refusing an output beyond [`MAX_SIDE`]/[`MAX_FRAME_PIXELS`] (containers also
    /// refuse branches of different sizes).
    fn output_hw_at(&self, hw: Option<(usize, usize)>, pos: Site) -> Result<Option<(usize, usize)>> {
        // Every intermediate the list fixes must respect the sides' bound, not only the final size: a
        // `Pad(65536)` or `Resize((65536, 65536))` followed by a small crop would otherwise compile and then
        // allocate tens of GB per worker (or abort) on the first sample.
        let out = self.output_hw(hw);
        if let Some((h, w)) = out
            && frame_too_big((h, w))
        {
            return Err(bad(
                TRANSFORMS,
                format!("the output ({h}, {w})"),
                &format!(
                    "be at most {MAX_SIDE} per side and {MAX_FRAME_PIXELS} pixels (every intermediate image is \
                     held in memory)"
                ),
                self.name(),
                pos,
            ));
        }
        Ok(out)
    }

    /// The (height, width) this op gives a `(h, w)` image when that is too big ([`frame_too_big`]).
    fn oversized(&self, hw: (usize, usize)) -> Option<(usize, usize)> {
        self.output_hw(Some(hw)).filter(|&hw| frame_too_big(hw))
    }

    /// Draw this op's parameters for an image of `h × w` × `c` (torchvision's `make_params`, with its draw order
    /// and its conditions for drawing at all). Errors only where torchvision raises at run time.
    fn sample(&self, rng: &mut SampleRng, hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String>;

    /// What this op draws for one sample as numbers (`_core.sample_op`): [`Drawn::to_vec`] of [`Op::sample`]
    /// unless the op decides while it runs (the policies show their decisions).
    fn trace(&self, rng: &mut SampleRng, hwc: (usize, usize, usize)) -> std::result::Result<Vec<f64>, String> {
        self.sample(rng, hwc).map(|d| d.to_vec())
    }

    /// Run the kernels with `drawn` (never [`Drawn::Skip`]) on `frame`; `rng` continues the op's stream for
    /// the ops that draw per element (noise, erasing, the policies).
    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, rng: &mut SampleRng);

    /// [`Op::apply`] for an op that can fail on a sample (a Python step: the message, naming `site`).
    fn run(
        &self,
        drawn: &Drawn,
        frame: &mut Frame,
        scratch: &mut OpScratch,
        rng: &mut SampleRng,
        _site: Site,
    ) -> std::result::Result<(), String> {
        self.apply(drawn, frame, scratch, rng);
        Ok(())
    }

    // The op's facts for a detection sample's targets (augment/targets.rs replays them; nothing outside ops/
    // matches an op by name for them). A new op that moves pixels overrides `target_steps` and `check_targets`;
    // a photometric one overrides `leaves_geometry`. A container ([`Op::inner`]) answers for its inner ops.

    /// Whether the op leaves a sample's geometry alone (a photometric op; a container all of whose ops do): boxes,
    /// masks and keypoints do not move with it (torchvision v2 passes them through) and the target replay skips
    /// it without drawing.
    fn leaves_geometry(&self) -> bool {
        self.inner().is_some_and(|ops| ops.iter().all(OpSpec::leaves_geometry))
    }

    /// Whether the op moves targets only and leaves the pixels alone (`SanitizeBoundingBoxes`,
    /// `ClampBoundingBoxes`): a stage 2 of only such ops costs the fused pass nothing.
    fn targets_only(&self) -> bool {
        false
    }

    /// Ok when a detection sample's boxes, masks and keypoints can follow the op (checked when the loader is
    /// built, so the message names the op); by default only an op that [`Op::leaves_geometry`], or a container
    /// whose every inner op can.
    fn check_targets(&self) -> std::result::Result<(), String> {
        if let Some(ops) = self.inner() {
            return ops.iter().try_for_each(OpSpec::check_targets);
        }
        if self.leaves_geometry() {
            return Ok(());
        }
        Err(format!(
            "{} may move pixels and cannot move the boxes, masks and keypoints of a detection source (trdata \
             replays crops, pads, resizes, flips, RandomAffine, RandomRotation and RandomPerspective for targets)",
            self.name()
        ))
    }

    /// How the op, drawn `drawn` on an `hw` = (height, width) canvas, moves the targets: its [`Step`]s, with
    /// torchvision v2's kernel semantics (moves.rs). Called for an op that does not leave the geometry alone
    /// and passed [`Op::check_targets`]; an op that cannot follow this draw → the message.
    fn target_steps(&self, drawn: &Drawn, _hw: (usize, usize)) -> std::result::Result<Vec<Step>, String> {
        Err(format!("{} drew {drawn:?}, which trdata cannot replay for targets", self.name()))
    }

    /// Whether the op's draw depends on the sample's boxes (`RandomIoUCrop`; a container holding one): then the
    /// target replay draws it ([`Op::draw_from_boxes`]) and the pixels take that draw.
    fn needs_boxes(&self) -> bool {
        self.inner().is_some_and(|ops| ops.iter().any(OpSpec::needs_boxes))
    }

    /// The draw of an op that [`Op::needs_boxes`] on an `hw` canvas holding `boxes` (XYXY, canvas pixels).
    fn draw_from_boxes(&self, _rng: &mut SampleRng, _hw: (usize, usize), _boxes: &[[f64; 4]]) -> Drawn {
        unreachable!("{} draws without the boxes", self.name())
    }

    /// A container's inner ops (`None` for any other op): the program runs, and the target replay follows,
    /// those [`Op::picked`] says.
    fn inner(&self) -> Option<&[OpSpec]> {
        None
    }

    /// The positions in [`Op::inner`] that a container drawn `drawn` runs, in the order it runs them.
    fn picked(&self, _drawn: &Drawn) -> Vec<usize> {
        Vec::new()
    }

    /// The op with its warp fill set to `fill` (a label map through a warp takes its own fill); ops without a
    /// fill return themselves.
    fn refilled(&self, _fill: f64) -> Self {
        self.clone()
    }
}

/// The spec's parameters (`{name: value}`, the dict of a `("kind", {…})` spec), as [`Op::parse`] reads them:
/// each getter takes the parameter's name, marks it read and names it in its message. A missing name is a
/// ConfigError naming it and the kind; [`Args::finish`] refuses a name no getter read (a typo in a Python class
/// cannot be silently ignored).
#[derive(Debug)]
pub struct Args<'a> {
    kind: &'a str,
    args: &'a [(String, Arg)],
    /// Bit `i`: `args[i]` was read.
    read: std::cell::Cell<u128>,
}

impl<'a> Args<'a> {
    /// The most parameters a spec may have (one bit each in `read`).
    pub const MAX_PARAMS: usize = 128;

    /// `args` of a spec of `kind`; more than [`Args::MAX_PARAMS`] parameters is an error naming the kind.
    pub fn new(kind: &'a str, args: &'a [(String, Arg)]) -> Result<Self> {
        if args.len() > Self::MAX_PARAMS {
            return Err(TrdataError::config(
                TRANSFORMS,
                format!("the {kind:?} spec has {} parameters, more than any op takes", args.len()),
            ));
        }
        Ok(Args { kind, args, read: std::cell::Cell::new(0) })
    }

    /// The spec kind (for ops with several).
    pub fn kind(&self) -> &'a str {
        self.kind
    }

    /// The spec's parameter names, for messages.
    fn names(&self) -> String {
        let names: Vec<&str> = self.args.iter().map(|(k, _)| k.as_str()).collect();
        if names.is_empty() { "none".to_string() } else { names.join(", ") }
    }

    pub(super) fn unknown(&self) -> TrdataError {
        TrdataError::config(TRANSFORMS, format!("unknown transform {:?}", self.kind))
    }

    /// The value of parameter `name` (marked read), or a ConfigError naming it and the kind.
    pub fn get(&self, name: &str) -> Result<&'a Arg> {
        match self.args.iter().position(|(k, _)| k == name) {
            Some(i) => {
                self.read.set(self.read.get() | 1 << i);
                Ok(&self.args[i].1)
            }
            None => Err(TrdataError::config(
                name,
                format!("missing from the {:?} spec (given: {})", self.kind, self.names()),
            )),
        }
    }

    /// Ok when every parameter was read by a getter; else a ConfigError naming the first one that was not
    /// (unknown to the op, or given twice).
    pub fn finish(&self) -> Result<()> {
        let read = self.read.get();
        let Some(i) = (0..self.args.len()).find(|&i| read & 1 << i == 0) else { return Ok(()) };
        let name = self.args[i].0.as_str();
        let known: Vec<&str> =
            (0..self.args.len()).filter(|&j| read & 1 << j != 0).map(|j| self.args[j].0.as_str()).collect();
        let kind = self.kind;
        Err(TrdataError::config(
            name,
            if known.contains(&name) {
                format!("is given twice in the {kind:?} spec")
            } else {
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                format!("is not a parameter of the {kind:?} spec (its parameters: {known})")
            },
        ))
    }

    /// Whether parameter `name` is `None`.
    pub fn is_none(&self, name: &str) -> Result<bool> {
        Ok(*self.get(name)? == Arg::None)
    }

    /// A number (int or float).
    pub fn num(&self, name: &str) -> Result<f64> {
        match self.get(name)? {
            Arg::Num(v) => Ok(*v),
            Arg::Int(v) => Ok(*v as f64),
            other => Err(TrdataError::config(name, format!("{other:?} must be a number"))),
        }
    }

    /// An int in `0..=u32::MAX`.
    pub fn uint(&self, name: &str) -> Result<u32> {
        uint_of(self.get(name)?, name)
    }

    /// A pair of ints in `0..=u32::MAX` (a (height, width) `size`, an (x, y) `kernel_size`).
    pub fn uint_pair(&self, name: &str) -> Result<(u32, u32)> {
        match self.get(name)? {
            Arg::List(v) if v.len() == 2 => Ok((uint_of(&v[0], name)?, uint_of(&v[1], name)?)),
            other => Err(TrdataError::config(name, format!("{other:?} must be a pair of ints"))),
        }
    }

    /// An int of 32 bits.
    pub fn int(&self, name: &str) -> Result<i64> {
        match self.get(name)? {
            Arg::Int(v) if i128::from(i32::MIN) <= *v && *v <= i128::from(i32::MAX) => Ok(*v as i64),
            other => Err(TrdataError::config(name, format!("{other:?} must be an int of 32 bits"))),
        }
    }

    /// A bool.
    pub fn boolean(&self, name: &str) -> Result<bool> {
        match self.get(name)? {
            Arg::Bool(b) => Ok(*b),
            other => Err(TrdataError::config(name, format!("{other:?} must be a bool"))),
        }
    }

    /// A number or a sequence of them.
    pub fn nums(&self, name: &str) -> Result<Vec<f64>> {
        match self.get(name)? {
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
    }

    /// A (min, max) pair.
    pub fn pair(&self, name: &str) -> Result<(f64, f64)> {
        match self.nums(name)?.as_slice() {
            [a, b] => Ok((*a, *b)),
            v => Err(TrdataError::config(name, format!("{v:?} must be a (min, max) pair"))),
        }
    }

    /// `None` or a (min, max) pair.
    pub fn opt_pair(&self, name: &str) -> Result<Option<(f64, f64)>> {
        if self.is_none(name)? { Ok(None) } else { self.pair(name).map(Some) }
    }

    /// `None` or a fill (one number or one per channel), parameter `fill`.
    pub fn opt_fill(&self) -> Result<Option<Vec<f64>>> {
        if self.is_none(FILL)? { Ok(None) } else { self.nums(FILL).map(Some) }
    }

    /// `None` or a pivot (x, y), parameter `center`.
    pub fn center(&self) -> Result<Option<[f64; 2]>> {
        if self.is_none(CENTER)? {
            return Ok(None);
        }
        self.pair(CENTER).map(|(x, y)| Some([x, y]))
    }

    /// (left, top, right, bottom), each an int in `0..=MAX_SIDE`, parameter `padding`.
    pub fn padding(&self) -> Result<[u32; 4]> {
        match self.get(PADDING)? {
            Arg::List(v) if v.len() == 4 => {
                let mut out = [0u32; 4];
                for (o, a) in out.iter_mut().zip(v) {
                    *o = match a {
                        Arg::Int(x) if (0..=i128::from(MAX_SIDE)).contains(x) => *x as u32,
                        other => {
                            return Err(TrdataError::config(
                                PADDING,
                                format!(
                                    "{other:?} must be an int in 0..={MAX_SIDE} (negative padding is not supported)"
                                ),
                            ));
                        }
                    };
                }
                Ok(out)
            }
            other => Err(TrdataError::config(PADDING, format!("{other:?} must be (left, top, right, bottom)"))),
        }
    }

    /// One of `choice`'s strings, parameter `choice.name`.
    pub fn choice<T: Copy + PartialEq>(&self, choice: &Choice<T>) -> Result<T> {
        match self.get(choice.name)? {
            Arg::Str(s) => choice.parse(s),
            other => Err(choice.error(&format!("{other:?}"))),
        }
    }
}

/// `a` as an int in `0..=u32::MAX` (parameter `name` in the message).
fn uint_of(a: &Arg, name: &str) -> Result<u32> {
    match a {
        Arg::Int(v) if (0..=i128::from(u32::MAX)).contains(v) => Ok(*v as u32),
        Arg::Int(v) => Err(TrdataError::config(name, format!("{v} must be in 0..={MAX_SIDE}"))),
        Arg::BigInt(shown) => Err(TrdataError::config(name, format!("{shown} must be in 0..={MAX_SIDE}"))),
        other => Err(TrdataError::config(name, format!("{other:?} must be an int"))),
    }
}

/// The op list: `Variant(Type)` per op, in one place. It defines [`OpSpec`] and its delegations to [`Op`].
macro_rules! registry {
    ($($(#[$doc:meta])* $variant:ident($ty:ty),)*) => {
        /// An op of the program that is not folded into the decode (torchvision v2 names and arguments): one
        /// variant per op, holding the op's struct (its family's file has its [`Op`] impl).
        #[derive(Debug, Clone, PartialEq)]
        pub enum OpSpec {
            $($(#[$doc])* $variant($ty),)*
        }

        impl OpSpec {
            /// Parse `kind` + `args` (the spec's `{name: value}` parameters) into an op ([`Op::parse`] of the
            /// op whose [`Op::KINDS`] hold `kind`); type errors name the parameter, a missing parameter names
            /// itself and the kind, and a parameter the op did not read is refused ([`Args::finish`]). Value
            /// rules are [`OpSpec::check`]'s, applied when the program is compiled.
            pub fn from_args(kind: &str, args: &[(String, Arg)]) -> Result<Self> {
                let a = Args::new(kind, args)?;
                $(if <$ty as Op>::KINDS.contains(&kind) {
                    let op = <$ty as Op>::parse(&a).map(OpSpec::$variant)?;
                    a.finish()?;
                    return Ok(op);
                })*
                Err(a.unknown())
            }

            /// Every op's [`Op::DEFAULTS`] (the binding adds them to `_core.DEFAULTS`).
            pub fn defaults() -> impl Iterator<Item = &'static (&'static str, DefaultValue)> {
                std::iter::empty() $(.chain(<$ty as Op>::DEFAULTS))*
            }

            /// Whether `kind` (the first item of a `_spec()`) is one [`OpSpec::from_args`] parses.
            pub fn is_kind(kind: &str) -> bool {
                false $(|| <$ty as Op>::KINDS.contains(&kind))*
            }

            /// torchvision's class name ([`Op::name`]).
            pub fn name(&self) -> &'static str {
                match self { $(OpSpec::$variant(o) => Op::name(o),)* }
            }

            /// [`OpSpec::check`] for the op at `pos` (a position in the list, or inside a container).
            pub fn check_at(&self, pos: Site) -> Result<()> {
                match self { $(OpSpec::$variant(o) => Op::check(o, Op::name(o), pos),)* }
            }

            /// [`Op::output_hw`].
            pub fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
                match self { $(OpSpec::$variant(o) => Op::output_hw(o, hw),)* }
            }

            /// [`Op::output_hw`], refusing a container whose branches give different sizes (images of different
            /// sizes cannot be batched) and any intermediate beyond the bounds ([`Op::output_hw_at`]).
            pub fn output_hw_at(&self, hw: Option<(usize, usize)>, pos: Site) -> Result<Option<(usize, usize)>> {
                match self { $(OpSpec::$variant(o) => Op::output_hw_at(o, hw, pos),)* }
            }

            /// The (height, width) this op gives a `(h, w)` image when that is too big ([`frame_too_big`]): the
            /// per-sample form of [`OpSpec::output_hw_at`]'s bound, for sizes the list does not fix.
            /// Containers are checked through their inner ops.
            pub fn oversized(&self, hw: (usize, usize)) -> Option<(usize, usize)> {
                match self { $(OpSpec::$variant(o) => Op::oversized(o, hw),)* }
            }

            /// [`Op::sample`].
            pub fn sample(
                &self,
                rng: &mut SampleRng,
                hwc: (usize, usize, usize),
            ) -> std::result::Result<Drawn, String> {
                match self { $(OpSpec::$variant(o) => Op::sample(o, rng, hwc),)* }
            }

            /// [`Op::trace`].
            pub fn trace(
                &self,
                rng: &mut SampleRng,
                hwc: (usize, usize, usize),
            ) -> std::result::Result<Vec<f64>, String> {
                match self { $(OpSpec::$variant(o) => Op::trace(o, rng, hwc),)* }
            }

            fn apply_drawn(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, rng: &mut SampleRng) {
                match self { $(OpSpec::$variant(o) => Op::apply(o, drawn, frame, scratch, rng),)* }
            }

            /// [`Op::run`].
            pub fn run(
                &self,
                drawn: &Drawn,
                frame: &mut Frame,
                scratch: &mut OpScratch,
                rng: &mut SampleRng,
                site: Site,
            ) -> std::result::Result<(), String> {
                if *drawn == Drawn::Skip {
                    return Ok(());
                }
                match self { $(OpSpec::$variant(o) => Op::run(o, drawn, frame, scratch, rng, site),)* }
            }

            /// [`Op::leaves_geometry`].
            pub fn leaves_geometry(&self) -> bool {
                match self { $(OpSpec::$variant(o) => Op::leaves_geometry(o),)* }
            }

            /// [`Op::targets_only`].
            pub fn targets_only(&self) -> bool {
                match self { $(OpSpec::$variant(o) => Op::targets_only(o),)* }
            }

            /// [`Op::check_targets`].
            pub fn check_targets(&self) -> std::result::Result<(), String> {
                match self { $(OpSpec::$variant(o) => Op::check_targets(o),)* }
            }

            /// [`Op::target_steps`].
            pub fn target_steps(
                &self,
                drawn: &Drawn,
                hw: (usize, usize),
            ) -> std::result::Result<Vec<Step>, String> {
                match self { $(OpSpec::$variant(o) => Op::target_steps(o, drawn, hw),)* }
            }

            /// [`Op::needs_boxes`].
            pub fn needs_boxes(&self) -> bool {
                match self { $(OpSpec::$variant(o) => Op::needs_boxes(o),)* }
            }

            /// [`Op::draw_from_boxes`].
            pub fn draw_from_boxes(&self, rng: &mut SampleRng, hw: (usize, usize), boxes: &[[f64; 4]]) -> Drawn {
                match self { $(OpSpec::$variant(o) => Op::draw_from_boxes(o, rng, hw, boxes),)* }
            }

            /// [`Op::inner`].
            pub fn inner(&self) -> Option<&[OpSpec]> {
                match self { $(OpSpec::$variant(o) => Op::inner(o),)* }
            }

            /// [`Op::picked`].
            pub fn picked(&self, drawn: &Drawn) -> Vec<usize> {
                match self { $(OpSpec::$variant(o) => Op::picked(o, drawn),)* }
            }

            /// [`Op::refilled`].
            pub fn refilled(&self, fill: f64) -> OpSpec {
                match self { $(OpSpec::$variant(o) => OpSpec::$variant(Op::refilled(o, fill)),)* }
            }
        }
    };
}

registry! {
    /// `Pad(padding, fill, padding_mode)`.
    Pad(Pad),
    /// `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)`.
    RandomCrop(RandomCrop),
    /// `RandomHorizontalFlip(p)` after the first resample.
    HorizontalFlip(HorizontalFlip),
    /// `RandomVerticalFlip(p)`.
    VerticalFlip(VerticalFlip),
    /// `ColorJitter(brightness, contrast, saturation, hue)`.
    ColorJitter(ColorJitter),
    /// `Grayscale(num_output_channels)`.
    Grayscale(Grayscale),
    /// `RandomGrayscale(p)`.
    RandomGrayscale(RandomGrayscale),
    /// `GaussianBlur(kernel_size, sigma)`.
    GaussianBlur(GaussianBlur),
    /// `GaussianNoise(mean, sigma, clip)`.
    GaussianNoise(GaussianNoise),
    /// `RandomErasing(p, scale, ratio, value)`.
    RandomErasing(RandomErasing),
    /// `RandomAutocontrast(p)`.
    RandomAutocontrast(RandomAutocontrast),
    /// `RandomEqualize(p)`.
    RandomEqualize(RandomEqualize),
    /// `RandomSolarize(threshold, p)`.
    RandomSolarize(RandomSolarize),
    /// `RandomPosterize(bits, p)`.
    RandomPosterize(RandomPosterize),
    /// `RandomAdjustSharpness(sharpness_factor, p)`.
    RandomAdjustSharpness(RandomAdjustSharpness),
    /// `RandomInvert(p)`.
    RandomInvert(RandomInvert),
    /// `RandomChannelPermutation()`.
    RandomChannelPermutation(RandomChannelPermutation),
    /// `RandomRotation(degrees, interpolation, expand, center, fill)`.
    RandomRotation(RandomRotation),
    /// `RandomAffine(degrees, translate, scale, shear, interpolation, fill, center)`.
    RandomAffine(RandomAffine),
    /// `RandomPerspective(distortion_scale, p, interpolation, fill)`.
    RandomPerspective(RandomPerspective),
    /// `AutoAugment`, `RandAugment`, `TrivialAugmentWide` or `AugMix`.
    Policy(Policy),
    /// `Resize(size, interpolation, max_size, antialias)` on the uint8 image.
    Resize(Resize),
    /// `CenterCrop(size)` on the uint8 image.
    CenterCrop(CenterCrop),
    /// `RandomResizedCrop(size, scale, ratio, interpolation, antialias)` on the uint8 image.
    RandomResizedCrop(RandomResizedCrop),
    /// `RandomApply(transforms, p)`.
    RandomApply(RandomApply),
    /// `RandomChoice(transforms, p)`.
    RandomChoice(RandomChoice),
    /// `RandomOrder(transforms)`.
    RandomOrder(RandomOrder),
    /// timm's RandAugment, AutoAugment or AugMix with Pillow's op implementations.
    TimmPolicy(TimmPolicy),
    /// timm's `CenterCropOrPad(size, fill, padding_mode)`.
    CenterCropOrPad(CenterCropOrPad),
    /// timm's `RandomErasing`.
    TimmRandomErasing(TimmRandomErasing),
    /// `PythonStep(fn)`: a step run outside the core (`step`), on the uint8 image at its position.
    PythonStep(PythonStep),
    /// `RandomZoomOut(fill, side_range, p)`.
    RandomZoomOut(RandomZoomOut),
    /// `SanitizeBoundingBoxes(min_size, min_area)` (targets only).
    SanitizeBoundingBoxes(SanitizeBoundingBoxes),
    /// `ClampBoundingBoxes()` (targets only).
    ClampBoundingBoxes(ClampBoundingBoxes),
    /// `RandomPhotometricDistort(brightness, contrast, saturation, hue, p)`.
    RandomPhotometricDistort(RandomPhotometricDistort),
    /// `ScaleJitter(target_size, scale_range, interpolation, antialias)`.
    ScaleJitter(ScaleJitter),
    /// `RandomShortestSize(min_size, max_size, interpolation, antialias)`.
    RandomShortestSize(RandomShortestSize),
    /// `RandomIoUCrop(min_scale, max_scale, min_aspect_ratio, max_aspect_ratio, sampler_options, trials)`.
    RandomIoUCrop(RandomIoUCrop),
    /// `RandomResize(min_size, max_size, interpolation, antialias)`.
    RandomResize(RandomResize),
    /// `Mosaic(size, p, fill)` (YOLO's; taken from the head of the list by the program, augment/mosaic.rs).
    Mosaic(Mosaic),
}

impl OpSpec {
    /// Validate the op's values (the one place; Python checks only types). `pos` is its list position, named in
    /// the message.
    pub fn check(&self, pos: usize) -> Result<()> {
        self.check_at(Site::top(pos))
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
    pub timm: TimmScratch,
}

impl OpScratch {
    /// Bytes held by the buffers that grow with the image (the fuzz tests hold them to the compiled sizes' bound).
    #[cfg(test)]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.spare.capacity() + self.plane.capacity() * 4 + self.policy.retained_bytes() + self.resize.retained_bytes()
    }
}

/// Apply `op` with parameters `drawn` to `frame` ([`Op::apply`]; nothing for [`Drawn::Skip`]). Containers run
/// in `program::run_op` instead (their inner ops need their own streams).
pub fn apply(op: &OpSpec, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, rng: &mut SampleRng) {
    if *drawn == Drawn::Skip {
        return;
    }
    op.apply_drawn(drawn, frame, scratch, rng)
}

/// A value of a spec as the binding hands it over (Python's `Transform._spec()`, `("kind", {name: value, …})`,
/// whole: a container's inner specs are values of its `transforms`), so that the parsing — and every value rule
/// — stays in the core ([`TransformSpec::parse`](crate::augment::TransformSpec::parse)).
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int (any Python int that fits 128 bits).
    Int(i128),
    /// An int beyond 128 bits, as messages show it (outside every range).
    BigInt(String),
    /// A float.
    Num(f64),
    /// A string.
    Str(String),
    /// A tuple or list.
    List(Vec<Arg>),
    /// A dict with string keys: a spec's parameters (`("kind", {name: value, …})`), in the dict's order.
    Map(Vec<(String, Arg)>),
    /// A step the binding made (`_core.Step`, the `step` of a `PythonStep`'s spec).
    Step(StepRef),
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
