//! timm — timm's auto-augment policies (RandAugment `rand-m9-mstd0.5-inc1`, the DeiT/ViT/ConvNeXt recipes'
//! policy; AutoAugment `original`/`v0`/`…r`; AugMix `augmix-m3-w3`) and timm's RandomErasing as pixel ops of a
//! compiled program ([`super::program`] stage 2, on the uint8 crop, after
//! the folded ROI/DCT decode + resample and before the final normalize/cast/layout write).
//!
//! timm's RandAugment is not torchvision's ([`super::policy`]): its op list has Invert and SolarizeAdd and no
//! Identity, each chosen op runs only with probability `p` (0.5), the magnitude is `m` plus N(0, mstd) noise
//! (uniform in [0, m] when mstd > 100) clipped to [0, mmax] (10), the `inc` list swaps in ops whose severity grows
//! with the magnitude, the warps fill with the dataset's mean pixel and pick bilinear or bicubic per op, and every
//! op is Pillow's (`ImageEnhance`, `ImageOps`, `Image.transform(AFFINE)`, `Image.rotate`), not torchvision's
//! tensor kernels. Both families draw from one sub-op vocabulary ([`super::policy_ops::PolicyOp`]); this file is
//! timm's flavour of it — an op's timm name is the op plus its level function ([`AugmentOp`], [`TimmLevel`]), and
//! [`apply`] runs it with Pillow's semantics. The kernels here port Pillow 13's C and Python step by step — f32
//! `Image.blend` with its truncation, the fixed-point nearest affine, the clamped bilinear/bicubic taps, the SMOOTH
//! filter that leaves the border — because a tensor-kernel stand-in differs from timm by several levels on edges
//! and blends (measured in tests/test_timm.py, which compares each op with Pillow bit for bit); the look-up-table
//! ops, where Pillow's bytes and the tensor kernels' agree, share [`super::kernels`].
//!
//! Randomness, in timm's draw order, from the op's own stream (`SampleRng(seed, epoch, index, OP_BASE + pos)`):
//! RandAugment draws the `num_layers` op choices first (numpy's `choice` with replacement), AutoAugment the
//! sub-policy (`random.choice`), AugMix the Dirichlet chain weights, the Beta blend weight, then per chain its
//! depth and op choices; then every op (timm's `AugmentOp.__call__`) its gate (`random() > p` skips), its
//! magnitude noise, its sign (`random() > 0.5` negates) and, for a warp with `interpolation='random'`, its
//! filter. Streams differ from Python's MT19937; distributions match (tests: χ²
//! and KS over ≥ 10k draws against timm's own sampling).

use super::kernels::{self, Frame};
use super::policy_ops::PolicyOp::{self, *};
use super::site::Site;
use crate::error::{Result, TrdataError};
use crate::param::Choice;
use crate::rng::SampleRng;

/// timm's `_LEVEL_DENOM`: magnitudes are on a 0..10 scale.
const LEVEL_DENOM: f64 = 10.0;

/// timm's level function of an op (`LEVEL_TO_ARG`): how the magnitude becomes the op's argument. timm's op names
/// pair one image op with one level function; the `…Increasing` and `…Original` names are the same op as the plain
/// name with another level (`NAME_TO_OP['PosterizeIncreasing']` is `posterize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimmLevel {
    /// The op's plain level function (`_rotate_level_to_arg`, `_enhance_level_to_arg`,
    /// `_posterize_level_to_arg`, `_translate_rel_level_to_arg`, …).
    Plain,
    /// Severity grows with the magnitude (`_posterize_increasing_level_to_arg`,
    /// `_solarize_increasing_level_to_arg`, `_enhance_increasing_level_to_arg`).
    Increasing,
    /// `_posterize_original_level_to_arg` (AutoAugment's `original` policy).
    Original,
}

/// One of timm's op names (`NAME_TO_OP`/`LEVEL_TO_ARG` keys, timm's `AugmentOp(name)`): the image op, from the
/// policies' one vocabulary, and the level function the name selects. Built only from [`TIMM_OPS`] (and the lists
/// below), so every value is one of timm's names; [`AugmentOp::number`] is what `sample_op` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AugmentOp {
    /// What the op does to the image.
    op: PolicyOp,
    /// How its magnitude becomes its argument.
    level: TimmLevel,
}

impl AugmentOp {
    /// The op with its plain level.
    const fn plain(op: PolicyOp) -> Self {
        AugmentOp { op, level: TimmLevel::Plain }
    }

    /// The op with its increasing level.
    const fn increasing(op: PolicyOp) -> Self {
        AugmentOp { op, level: TimmLevel::Increasing }
    }

    /// What the op does to the image.
    pub fn op(self) -> PolicyOp {
        self.op
    }

    /// Its level function.
    pub fn level(self) -> TimmLevel {
        self.level
    }

    /// The number `sample_op` reports: the position of the name in [`TIMM_OPS`] (timm's `_RAND_TRANSFORMS`
    /// order, then the `…Increasing` names and `PosterizeOriginal`).
    pub fn number(self) -> u8 {
        TIMM_OPS.values.iter().position(|&(_, v)| v == self).unwrap_or(usize::from(u8::MAX)) as u8
    }
}

/// timm's `_RAND_TRANSFORMS`, in its order (the draw picks an index).
pub const RAND_TRANSFORMS: [AugmentOp; 15] = [
    AugmentOp::plain(AutoContrast),
    AugmentOp::plain(Equalize),
    AugmentOp::plain(Invert),
    AugmentOp::plain(Rotate),
    AugmentOp::plain(Posterize),
    AugmentOp::plain(Solarize),
    AugmentOp::plain(SolarizeAdd),
    AugmentOp::plain(Color),
    AugmentOp::plain(Contrast),
    AugmentOp::plain(Brightness),
    AugmentOp::plain(Sharpness),
    AugmentOp::plain(ShearX),
    AugmentOp::plain(ShearY),
    AugmentOp::plain(TranslateX),
    AugmentOp::plain(TranslateY),
];

/// timm's `_RAND_INCREASING_TRANSFORMS` (`inc1`), in its order.
pub const RAND_INCREASING_TRANSFORMS: [AugmentOp; 15] = [
    AugmentOp::plain(AutoContrast),
    AugmentOp::plain(Equalize),
    AugmentOp::plain(Invert),
    AugmentOp::plain(Rotate),
    AugmentOp::increasing(Posterize),
    AugmentOp::increasing(Solarize),
    AugmentOp::plain(SolarizeAdd),
    AugmentOp::increasing(Color),
    AugmentOp::increasing(Contrast),
    AugmentOp::increasing(Brightness),
    AugmentOp::increasing(Sharpness),
    AugmentOp::plain(ShearX),
    AugmentOp::plain(ShearY),
    AugmentOp::plain(TranslateX),
    AugmentOp::plain(TranslateY),
];

/// timm's op names (`NAME_TO_OP` keys) of the ops trdata runs, in the order of the numbers `sample_op` reports
/// ([`AugmentOp::number`]): timm's `_RAND_TRANSFORMS`, then the other levels. The translations are timm's
/// `…Rel` names (a fraction of the size; timm's absolute `TranslateX` is not offered).
pub const TIMM_OPS: Choice<AugmentOp> = Choice {
    name: "ops",
    values: &[
        ("AutoContrast", AugmentOp::plain(AutoContrast)),
        ("Equalize", AugmentOp::plain(Equalize)),
        ("Invert", AugmentOp::plain(Invert)),
        ("Rotate", AugmentOp::plain(Rotate)),
        ("Posterize", AugmentOp::plain(Posterize)),
        ("Solarize", AugmentOp::plain(Solarize)),
        ("SolarizeAdd", AugmentOp::plain(SolarizeAdd)),
        ("Color", AugmentOp::plain(Color)),
        ("Contrast", AugmentOp::plain(Contrast)),
        ("Brightness", AugmentOp::plain(Brightness)),
        ("Sharpness", AugmentOp::plain(Sharpness)),
        ("ShearX", AugmentOp::plain(ShearX)),
        ("ShearY", AugmentOp::plain(ShearY)),
        ("TranslateXRel", AugmentOp::plain(TranslateX)),
        ("TranslateYRel", AugmentOp::plain(TranslateY)),
        ("PosterizeIncreasing", AugmentOp::increasing(Posterize)),
        ("SolarizeIncreasing", AugmentOp::increasing(Solarize)),
        ("ColorIncreasing", AugmentOp::increasing(Color)),
        ("ContrastIncreasing", AugmentOp::increasing(Contrast)),
        ("BrightnessIncreasing", AugmentOp::increasing(Brightness)),
        ("SharpnessIncreasing", AugmentOp::increasing(Sharpness)),
        ("PosterizeOriginal", AugmentOp { op: Posterize, level: TimmLevel::Original }),
    ],
};

/// The resampling of timm's warps (Pillow's filters; `Random` draws bilinear or bicubic per op, timm's default
/// `_RANDOM_INTERPOLATION` when the pipeline's `interpolation` is `'random'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimmInterp {
    /// `Image.NEAREST`.
    Nearest,
    /// `Image.BILINEAR`.
    Bilinear,
    /// `Image.BICUBIC`.
    Bicubic,
    /// `random.choice((BILINEAR, BICUBIC))` per op.
    Random,
}

/// The `interpolation` values of [`TimmPolicy`].
pub const TIMM_INTERPOLATION: Choice<TimmInterp> = Choice {
    name: "interpolation",
    values: &[
        ("nearest", TimmInterp::Nearest),
        ("bilinear", TimmInterp::Bilinear),
        ("bicubic", TimmInterp::Bicubic),
        ("random", TimmInterp::Random),
    ],
};

/// Which timm policy, with what only it has.
#[derive(Debug, Clone, PartialEq)]
pub enum TimmKind {
    /// `RandAugment(rand_augment_ops(magnitude, prob, hparams, transforms), num_layers)` with an unweighted
    /// transform list (the default [`RAND_TRANSFORMS`], `inc1`'s [`RAND_INCREASING_TRANSFORMS`], or any list of
    /// [`TIMM_OPS`]).
    RandAugment {
        /// Ops per sample (`n`, chosen with replacement).
        num_layers: u32,
        /// The op list the uniform choice picks from (duplicates allowed, as in timm's lists).
        ops: Vec<AugmentOp>,
        /// `p`: each chosen op runs with this probability.
        prob: f64,
        /// `m`.
        magnitude: f64,
        /// `choice_weights` (`t<name>` lists): the ops are then drawn *without* replacement, each pick
        /// proportional to the weights of the ops not yet picked (numpy's `choice(replace=False, p=…)`).
        weights: Option<Vec<f64>>,
    },
    /// `AutoAugment(auto_augment_policy(name, hparams))`: one sub-policy drawn per sample, each of its steps
    /// (op, probability, magnitude) an `AugmentOp`.
    AutoAugment {
        /// The sub-policies.
        sub_policies: Vec<Vec<(AugmentOp, f64, f64)>>,
    },
    /// `AugMixAugment(augmix_ops(magnitude, hparams), alpha, width, depth, blended=False)`.
    AugMix {
        /// The op list (each op runs with probability 1).
        ops: Vec<AugmentOp>,
        /// `m`.
        magnitude: f64,
        /// Dirichlet/Beta concentration.
        alpha: f64,
        /// Number of chains.
        width: u32,
        /// Ops per chain; ≤ 0 draws 1..=3 per chain.
        depth: i32,
    },
}

/// A timm policy and the `hparams` its `AugmentOp`s share.
#[derive(Debug, Clone, PartialEq)]
pub struct TimmPolicy {
    /// Which policy.
    pub kind: TimmKind,
    /// `mstd`: 0 = fixed magnitude, `inf` = uniform in [0, m] (timm maps mstd > 100 to inf), else N(m, mstd).
    pub magnitude_std: f64,
    /// `mmax` (timm's default `_LEVEL_DENOM` = 10): the noisy magnitude is clipped to [0, mmax].
    pub magnitude_max: f64,
    /// `hparams['img_mean']`: the warps' fill, one value or one per channel (pixel units, 0..=255).
    pub fill: Vec<f64>,
    /// `hparams['interpolation']`, or `Random` when absent.
    pub interp: TimmInterp,
    /// `hparams['translate_pct']` (default 0.45; AugMix's recipes pass 0.3).
    pub translate_pct: f64,
}

/// The `num_layers` parameter's name (its rules: [`TimmPolicy::check`]).
const NUM_LAYERS: &str = "num_layers";
/// The `magnitude_std` parameter's name (its rules: [`TimmPolicy::check`]).
const MAGNITUDE_STD: &str = "magnitude_std";
/// The `magnitude_max` parameter's name (its rules: [`TimmPolicy::check`]).
const MAGNITUDE_MAX: &str = "magnitude_max";
/// The `translate_pct` parameter's name (its rules: [`TimmPolicy::check`]).
const TRANSLATE_PCT: &str = "translate_pct";
/// RandAugment's `weights` (timm's `choice_weights`; its rules: [`TimmPolicy::check`]).
const WEIGHTS: &str = "weights";
/// AugMix's `width` (its rules: [`TimmPolicy::check`]).
const WIDTH: &str = "width";
/// AugMix's `depth` (its rules: [`TimmPolicy::check`]).
const DEPTH: &str = "depth";
/// RandomErasing's `probability` (its rules: [`TimmRandomErasing::check`]).
const PROBABILITY: &str = "probability";
/// RandomErasing's `min_area` (its rules: [`TimmRandomErasing::check`]).
const MIN_AREA: &str = "min_area";
/// RandomErasing's `max_area` (its rules: [`TimmRandomErasing::check`]).
const MAX_AREA: &str = "max_area";
/// RandomErasing's `min_count` (its rules: [`TimmRandomErasing::check`]).
const MIN_COUNT: &str = "min_count";
/// RandomErasing's `max_count` (its rules: [`TimmRandomErasing::check`]).
const MAX_COUNT: &str = "max_count";

/// The most ops a policy may run per sample (RandAugment's `num_layers`, AugMix's depth, RandomErasing's count):
/// timm has no bound, but a typo such as `n=10**6` would stall every worker on every sample (the same bound as
/// torchvision's policies in `ops`).
pub const MAX_OPS: u32 = 1000;

/// The most AugMix chains (timm's recipes use 3; the weights live in a fixed array, so nothing is allocated per
/// sample).
pub const MAX_CHAINS: u32 = 64;

/// An op's error in the house wording: `invalid <param>: <value> must … (<Op> at transforms[pos])`.
fn bad(param: &str, shown: impl std::fmt::Display, rule: &str, op: &str, pos: Site) -> TrdataError {
    TrdataError::config(param, format!("{shown} must {rule} ({op} at {pos})"))
}

impl TimmPolicy {
    /// timm's class name (for messages).
    pub fn name(&self) -> &'static str {
        match self.kind {
            TimmKind::RandAugment { .. } => "timm RandAugment",
            TimmKind::AutoAugment { .. } => "timm AutoAugment",
            TimmKind::AugMix { .. } => "timm AugMix",
        }
    }

    /// Validate the values (the one place; Python checks types). `pos` names the op in messages.
    pub fn check(&self, pos: Site) -> Result<()> {
        let op = self.name();
        let max_ops = MAX_OPS;
        let check_m = |m: f64| {
            if m.is_finite() && m >= 0.0 { Ok(()) } else { Err(bad("magnitude", m, "be finite and ≥ 0", op, pos)) }
        };
        let check_p =
            |p: f64| if (0.0..=1.0).contains(&p) { Ok(()) } else { Err(bad("p", p, "be in [0, 1]", op, pos)) };
        let check_ops = |n: usize| {
            if (1..=256).contains(&n) { Ok(()) } else { Err(bad("ops", n, "be a list of 1 to 256 op names", op, pos)) }
        };
        match &self.kind {
            TimmKind::RandAugment { num_layers, ops, prob, magnitude, weights } => {
                if *num_layers > max_ops {
                    return Err(bad(NUM_LAYERS, num_layers, &format!("be in 0..={max_ops}"), op, pos));
                }
                check_ops(ops.len())?;
                if let Some(w) = weights {
                    let shown = format!("{w:?}");
                    if w.len() != ops.len() || !w.iter().all(|v| v.is_finite() && *v >= 0.0) {
                        return Err(bad(WEIGHTS, shown, "be one finite weight ≥ 0 per op", op, pos));
                    }
                    // numpy: "Fewer non-zero entries in p than size".
                    if w.iter().filter(|&&v| v > 0.0).count() < *num_layers as usize {
                        let rule = format!("have at least num_layers ({num_layers}) positive entries (no replacement)");
                        return Err(bad(WEIGHTS, shown, &rule, op, pos));
                    }
                }
                check_p(*prob)?;
                check_m(*magnitude)?;
            }
            TimmKind::AutoAugment { sub_policies } => {
                if sub_policies.is_empty() || sub_policies.len() > 256 || sub_policies.iter().any(|s| s.len() > 16) {
                    let rule = "be 1 to 256 sub-policies of at most 16 (op, p, magnitude) steps";
                    return Err(bad("policy", sub_policies.len(), rule, op, pos));
                }
                for &(_, p, m) in sub_policies.iter().flatten() {
                    check_p(p)?;
                    check_m(m)?;
                }
            }
            TimmKind::AugMix { ops, magnitude, alpha, width, depth } => {
                check_ops(ops.len())?;
                check_m(*magnitude)?;
                crate::rng::check_alpha(*alpha, &format!("{op} at transforms[{pos}]"))?;
                if !(1..=MAX_CHAINS).contains(width) {
                    return Err(bad(WIDTH, width, &format!("be in 1..={MAX_CHAINS}"), op, pos));
                }
                if *depth > max_ops as i32 {
                    let rule = format!("be at most {max_ops} (≤ 0 draws 1 to 3 per chain)");
                    return Err(bad(DEPTH, depth, &rule, op, pos));
                }
            }
        }
        // NaN would make every magnitude NaN; a negative std is refused by Python's random.gauss too.
        if self.magnitude_std.is_nan() || self.magnitude_std < 0.0 {
            return Err(bad(MAGNITUDE_STD, self.magnitude_std, "be ≥ 0 (inf: uniform in [0, magnitude])", op, pos));
        }
        if !(self.magnitude_max.is_finite() && self.magnitude_max > 0.0) {
            return Err(bad(MAGNITUDE_MAX, self.magnitude_max, "be finite and > 0", op, pos));
        }
        let fill_ok = matches!(self.fill.len(), 1 | 3) && self.fill.iter().all(|v| (0.0..=255.0).contains(v));
        if !fill_ok {
            let shown = format!("{:?}", self.fill);
            return Err(bad("fill", shown, "be one number or one per channel (1 or 3), in [0, 255]", op, pos));
        }
        if !(self.translate_pct.is_finite() && (0.0..=1.0).contains(&self.translate_pct)) {
            return Err(bad(TRANSLATE_PCT, self.translate_pct, "be in [0, 1]", op, pos));
        }
        Ok(())
    }
}

/// timm's `_randomly_negate`: `-v if random() > 0.5 else v`.
fn negate(rng: &mut SampleRng, v: f64) -> f64 {
    if rng.uniform() > 0.5 { -v } else { v }
}

/// Python's `int(x)` for the finite, non-negative levels here (truncation).
fn py_int(x: f64) -> f64 {
    x.trunc()
}

/// The argument timm's `LEVEL_TO_ARG[name]` makes of magnitude `m` (already clipped), drawing the sign where timm
/// does; `None` for the ops without one.
fn level_arg(op: AugmentOp, m: f64, translate_pct: f64, rng: &mut SampleRng) -> Option<f64> {
    use TimmLevel::{Increasing, Original};
    let l = m / LEVEL_DENOM;
    Some(match (op.op, op.level) {
        (Identity | AutoContrast | Equalize | Invert, _) => return None,
        (Rotate, _) => negate(rng, l * 30.0),
        (Posterize, Increasing) => 4.0 - py_int(l * 4.0),
        (Posterize, Original) => py_int(l * 4.0) + 4.0,
        (Posterize, _) => py_int(l * 4.0),
        (Solarize, Increasing) => 256.0 - py_int(l * 256.0).min(256.0),
        (Solarize, _) => py_int(l * 256.0).min(256.0),
        (SolarizeAdd, _) => py_int(l * 110.0).min(128.0),
        (Color | Contrast | Brightness | Sharpness, Increasing) => (1.0 + negate(rng, l * 0.9)).max(0.1),
        (Color | Contrast | Brightness | Sharpness, _) => l * 1.8 + 0.1,
        (ShearX | ShearY, _) => negate(rng, l * 0.3),
        (TranslateX | TranslateY, _) => negate(rng, l * translate_pct),
    })
}

/// Pillow's filter numbers (what `sample_op` reports for a warp's filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PilFilter {
    /// `Image.NEAREST` (0).
    Nearest = 0,
    /// `Image.BILINEAR` (2).
    Bilinear = 2,
    /// `Image.BICUBIC` (3).
    Bicubic = 3,
}

/// One applied op: which, its argument (NaN when none) and its filter (warps only).
type Step = (AugmentOp, f64, Option<PilFilter>);

/// What a policy decides, in order (for [`trace`]; [`run`] acts on the same decisions).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    /// Apply an op.
    Step(Step),
    /// AugMix: the Beta blend weight of the mix against the original (`Image.blend(img, mixed, m)`).
    Blend(f32),
    /// AugMix: a chain starts with weight `w` (f32, numpy's) and `depth` ops.
    Chain(f32, u32),
}

/// timm's `AugmentOp.__call__` for `op` at probability `prob` and magnitude `m`: the gate, the magnitude noise
/// and clip, the level function (sign), the filter. `None` when the gate skips.
fn augment_op(spec: &TimmPolicy, op: AugmentOp, prob: f64, m: f64, rng: &mut SampleRng) -> Option<Step> {
    if prob < 1.0 && rng.uniform() > prob {
        return None;
    }
    let mut m = m;
    if spec.magnitude_std > 0.0 {
        m = if spec.magnitude_std.is_infinite() {
            rng.uniform_range(0.0, m)
        } else {
            m + spec.magnitude_std * rng.normal_f64()
        };
    }
    let m = m.min(spec.magnitude_max).max(0.0);
    let arg = level_arg(op, m, spec.translate_pct, rng).unwrap_or(f64::NAN);
    let filter = op.op.is_warp().then(|| match spec.interp {
        TimmInterp::Nearest => PilFilter::Nearest,
        TimmInterp::Bilinear => PilFilter::Bilinear,
        TimmInterp::Bicubic => PilFilter::Bicubic,
        TimmInterp::Random => {
            if rng.below(2) == 0 {
                PilFilter::Bilinear
            } else {
                PilFilter::Bicubic
            }
        }
    });
    Some((op, arg, filter))
}

/// numpy's `choice(ops, n, replace=True)` (all n indices drawn before any op runs), then each op's
/// [`augment_op`]. In chunks of 64 on the stack, so nothing is allocated per sample; past 64 ops the gates of a
/// chunk are drawn before the next chunk's choices (no recipe comes near it).
fn choose_and_run(
    spec: &TimmPolicy,
    ops: &[AugmentOp],
    n: usize,
    prob: f64,
    m: f64,
    rng: &mut SampleRng,
    visit: &mut impl FnMut(Event),
) {
    let mut left = n;
    while left > 0 {
        let mut chosen = [0usize; 64];
        let k = left.min(64);
        for c in &mut chosen[..k] {
            *c = rng.below(ops.len() as u64) as usize;
        }
        left -= k;
        for &i in &chosen[..k] {
            if let Some(step) = augment_op(spec, ops[i], prob, m, rng) {
                visit(Event::Step(step));
            }
        }
    }
}

/// The decisions of `spec` for one sample, in timm's draw order, each handed to `visit`.
fn decide(spec: &TimmPolicy, rng: &mut SampleRng, mut visit: impl FnMut(Event)) {
    match &spec.kind {
        TimmKind::RandAugment { num_layers, ops, prob, magnitude, weights: None } => {
            choose_and_run(spec, ops, *num_layers as usize, *prob, *magnitude, rng, &mut visit);
        }
        TimmKind::RandAugment { num_layers, ops, prob, magnitude, weights: Some(w) } => {
            // numpy's choice(replace=False, p=w): all picks first (at most 256, as many as the ops; checked), each
            // an inverse-CDF draw over the weights of the ops not picked yet — the same law as numpy's batched
            // draws that drop repeats — then the ops in pick order.
            let n = *num_layers as usize;
            let mut picked = [false; 256];
            let mut order = [0u8; 256];
            for slot in order.iter_mut().take(n) {
                let total: f64 = w.iter().zip(&picked).filter(|&(_, &p)| !p).map(|(v, _)| v).sum();
                let u = rng.uniform() * total;
                let mut acc = 0.0;
                let mut pick = w.iter().zip(&picked).rposition(|(&v, &p)| !p && v > 0.0).unwrap_or(0);
                for (i, (&v, &p)) in w.iter().zip(&picked).enumerate() {
                    if p || v <= 0.0 {
                        continue;
                    }
                    acc += v;
                    if u < acc {
                        pick = i;
                        break;
                    }
                }
                picked[pick] = true;
                *slot = pick as u8;
            }
            for &i in &order[..n] {
                if let Some(step) = augment_op(spec, ops[usize::from(i)], *prob, *magnitude, rng) {
                    visit(Event::Step(step));
                }
            }
        }
        TimmKind::AutoAugment { sub_policies } => {
            let sub = &sub_policies[rng.below(sub_policies.len() as u64) as usize];
            for &(op, prob, m) in sub {
                if let Some(step) = augment_op(spec, op, prob, m, rng) {
                    visit(Event::Step(step));
                }
            }
        }
        TimmKind::AugMix { ops, magnitude, alpha, width, depth } => {
            // np.float32(dirichlet([alpha] * width)): Gamma(alpha) variates normalised (in log space first, so
            // tiny alphas do not underflow to 0/0), then np.float32(beta(alpha, alpha)).
            let mut ln_g = [0f64; MAX_CHAINS as usize];
            let width = *width as usize; // ≤ MAX_CHAINS (checked)
            let ln_g = &mut ln_g[..width];
            for g in ln_g.iter_mut() {
                *g = rng.ln_gamma_variate(*alpha);
            }
            let max_ln = ln_g.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = ln_g.iter().map(|g| (g - max_ln).exp()).sum();
            let weight = |k: usize| ((ln_g[k] - max_ln).exp() / total) as f32;
            visit(Event::Blend(rng.beta(*alpha, *alpha) as f32));
            for k in 0..width {
                let d = if *depth > 0 { *depth as u32 } else { 1 + rng.below(3) as u32 };
                visit(Event::Chain(weight(k), d));
                choose_and_run(spec, ops, d as usize, 1.0, *magnitude, rng, &mut visit);
            }
        }
    }
}

/// What `spec` decides for one sample, as numbers (`_core.sample_op`): `[op, argument, filter]` per applied op
/// ([`AugmentOp::number`]; the argument timm passes to the op, NaN for none; Pillow's filter number, -1 for ops
/// that do not warp). AugMix: `[blend weight]`, then per chain `[weight, depth]` followed by its ops' triples.
pub fn trace(spec: &TimmPolicy, rng: &mut SampleRng) -> Vec<f64> {
    let mut out = Vec::new();
    decide(spec, rng, |e| match e {
        Event::Step((op, arg, f)) => {
            out.extend([f64::from(op.number()), arg, f.map_or(-1.0, |f| f64::from(f as u8))]);
        }
        Event::Blend(m) => out.push(f64::from(m)),
        Event::Chain(w, d) => out.extend([f64::from(w), f64::from(d)]),
    });
    out
}

/// The buffers of timm's policies beyond the op scratch: AugMix's chain image, its f32 mix. Grown to the largest
/// sample, then reused.
#[derive(Debug, Default)]
pub struct TimmScratch {
    /// The current chain's image (AugMix).
    chain: Frame,
    /// The f32 mix (AugMix).
    mix: Vec<f32>,
}

/// Run `spec` on `frame` (size kept); `spare` is the warps' and sharpness' second buffer.
pub fn run(spec: &TimmPolicy, frame: &mut Frame, spare: &mut Vec<u8>, s: &mut TimmScratch, rng: &mut SampleRng) {
    // Pillow's fill colour is a tuple of ints; timm passes `round(255 · mean)`, so truncation never bites.
    let fill: [u8; 3] = std::array::from_fn(|c| spec.fill[c.min(spec.fill.len() - 1)] as u8);
    let step = |frame: &mut Frame, spare: &mut Vec<u8>, (op, arg, filter): Step| {
        apply(op.op, arg, filter.unwrap_or(PilFilter::Nearest), fill, frame, spare);
    };
    if !matches!(spec.kind, TimmKind::AugMix { .. }) {
        decide(spec, rng, |e| {
            if let Event::Step(st) = e {
                step(frame, spare, st);
            }
        });
        return;
    }
    // AugMix (`_apply_basic`): mixed = Σ w·chain in f32 (numpy: the product rounded, then added), clipped and
    // truncated to uint8, then `Image.blend(img, mixed, m)`.
    let n = frame.h * frame.w * frame.c;
    let TimmScratch { chain, mix } = s;
    mix.clear();
    mix.resize(n, 0.0);
    let (mut blend_m, mut chain_w, mut left) = (0f32, 0f32, 0u32);
    let add_chain = |mix: &mut Vec<f32>, chain: &Frame, w: f32| {
        for (acc, &v) in mix.iter_mut().zip(&chain.buf[..n]) {
            *acc += w * f32::from(v);
        }
    };
    decide(spec, rng, |e| match e {
        Event::Blend(m) => blend_m = m,
        Event::Chain(w, d) => {
            chain.buf.clear();
            chain.buf.extend_from_slice(&frame.buf[..n]);
            (chain.h, chain.w, chain.c) = (frame.h, frame.w, frame.c);
            (chain_w, left) = (w, d);
        }
        Event::Step(st) => {
            step(chain, spare, st);
            left -= 1;
            if left == 0 {
                add_chain(mix, chain, chain_w);
            }
        }
    });
    if blend_m == 0.0 {
        return;
    }
    for (o, &v) in frame.buf[..n].iter_mut().zip(mix.iter()) {
        let mixed = v.clamp(0.0, 255.0) as u8;
        *o = if blend_m == 1.0 { mixed } else { (f32::from(*o) + blend_m * (f32::from(mixed) - f32::from(*o))) as u8 };
    }
}

/// Apply one op with its argument (what timm's `aug_fn(img, *level_args, fillcolor, resample)` does), with
/// Pillow's semantics. The look-up-table ops give Pillow's bytes with the shared kernels of [`super::kernels`].
pub fn apply(op: PolicyOp, arg: f64, filter: PilFilter, fill: [u8; 3], frame: &mut Frame, spare: &mut Vec<u8>) {
    let (h, w) = (frame.h, frame.w);
    match op {
        Identity => {}
        AutoContrast => autocontrast(frame),
        Equalize => equalize(frame),
        Invert => kernels::invert(&mut frame.view()),
        // ImageOps.posterize: mask = ~(2**(8-bits) - 1); bits ≥ 8 keep the image. Pillow ≥ 12 raises for 0 bits
        // (timm's `v0` policy reaches it, and the run dies); trdata writes black, as the mask `~(2**8 - 1)` of
        // earlier Pillow does (a negative argument saturates to 0 bits).
        Posterize => kernels::posterize(&mut frame.view(), arg as u32),
        // ImageOps.solarize: `v if v < threshold else 255 - v`; the threshold is an integer in 0..=256, which the
        // kernel's f32 comparison `v >= threshold` decides exactly.
        Solarize => kernels::solarize(&mut frame.view(), arg),
        SolarizeAdd => kernels::solarize_add(&mut frame.view(), arg as u32),
        Color => {
            if frame.c == 3 {
                blend_with(frame, spare, arg, Degenerate::Gray);
            }
        }
        Contrast => blend_with(frame, spare, arg, Degenerate::Mean),
        Brightness => blend_with(frame, spare, arg, Degenerate::Black),
        Sharpness => blend_with(frame, spare, arg, Degenerate::Smooth),
        ShearX => transform(frame, spare, [1.0, arg, 0.0, 0.0, 1.0, 0.0], filter, fill),
        ShearY => transform(frame, spare, [1.0, 0.0, 0.0, arg, 1.0, 0.0], filter, fill),
        TranslateX => transform(frame, spare, [1.0, 0.0, arg * w as f64, 0.0, 1.0, 0.0], filter, fill),
        TranslateY => transform(frame, spare, [1.0, 0.0, 0.0, 0.0, 1.0, arg * h as f64], filter, fill),
        Rotate => rotate(frame, spare, arg, filter, fill),
    }
}

/// Pillow's `histogram()` of channel `ch` of an interleaved image with `c` channels.
fn channel_histogram(data: &[u8], c: usize, ch: usize) -> [u64; 256] {
    let mut hist = [0u64; 256];
    for px in data.chunks_exact(c) {
        hist[usize::from(px[ch])] += 1;
    }
    hist
}

/// `ImageOps.autocontrast(img)` (cutoff 0): per channel, `int(i·scale + offset)` with `scale = 255/(hi-lo)`,
/// `offset = -lo·scale` in doubles, clamped; a channel with one value is left alone.
pub fn autocontrast(frame: &mut Frame) {
    let c = frame.c;
    let img = frame.view();
    for ch in 0..c {
        let hist = channel_histogram(img.data, c, ch);
        let lo = hist.iter().position(|&n| n > 0).unwrap_or(0);
        let hi = hist.iter().rposition(|&n| n > 0).unwrap_or(0);
        if hi <= lo {
            continue;
        }
        let scale = 255.0 / (hi - lo) as f64;
        let offset = -(lo as f64) * scale;
        let lut: [u8; 256] = std::array::from_fn(|i| ((i as f64 * scale + offset).trunc()).clamp(0.0, 255.0) as u8);
        for px in img.data.chunks_exact_mut(c) {
            px[ch] = lut[usize::from(px[ch])];
        }
    }
}

/// `ImageOps.equalize(img)` (Pillow 13: `step = (sum - last nonzero count) // 255`, `lut[i] = n // step` with
/// `n` starting at `step // 2`).
pub fn equalize(frame: &mut Frame) {
    let c = frame.c;
    let img = frame.view();
    for ch in 0..c {
        let hist = channel_histogram(img.data, c, ch);
        // Pillow: histo = the nonzero counts; identity when ≤ 1 of them or when the step is 0.
        let nonzero = hist.iter().filter(|&&n| n > 0).count();
        if nonzero <= 1 {
            continue;
        }
        let last = hist.iter().rev().copied().find(|&n| n > 0).unwrap_or(0);
        let step = (hist.iter().sum::<u64>() - last) / 255;
        if step == 0 {
            continue;
        }
        let mut n = step / 2;
        let mut lut = [0u8; 256];
        for (i, l) in lut.iter_mut().enumerate() {
            *l = (n / step).min(255) as u8;
            n += hist[i];
        }
        for px in img.data.chunks_exact_mut(c) {
            px[ch] = lut[usize::from(px[ch])];
        }
    }
}

/// The degenerate image of an `ImageEnhance` class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Degenerate {
    /// Color: `img.convert('L').convert('RGB')`.
    Gray,
    /// Contrast: the constant `int(mean of L + 0.5)`.
    Mean,
    /// Brightness: zeros.
    Black,
    /// Sharpness: `img.filter(ImageFilter.SMOOTH)`.
    Smooth,
}

/// Pillow's RGB → L: `(r·19595 + g·38470 + b·7471 + 0x8000) >> 16`.
#[inline]
fn pil_luma(p: &[u8]) -> u8 {
    ((u32::from(p[0]) * 19595 + u32::from(p[1]) * 38470 + u32::from(p[2]) * 7471 + 0x8000) >> 16) as u8
}

/// `Image.blend(degenerate, img, factor)` with Pillow's arithmetic: `alpha` as f32, `in1 + alpha·(in2 - in1)` in
/// f32, truncated (clamped to [0, 255] outside 0 ≤ alpha ≤ 1); alpha 0 and 1 copy.
fn blend_with(frame: &mut Frame, spare: &mut Vec<u8>, factor: f64, kind: Degenerate) {
    let alpha = factor as f32;
    if alpha == 1.0 {
        return;
    }
    let (c, n) = (frame.c, frame.h * frame.w * frame.c);
    let mean = match kind {
        Degenerate::Mean => {
            let mut sum = 0u64;
            for px in frame.buf[..n].chunks_exact(c) {
                sum += u64::from(if c == 3 { pil_luma(px) } else { px[0] });
            }
            let count = (frame.h * frame.w).max(1) as f64;
            (sum as f64 / count + 0.5).trunc() as u8
        }
        _ => 0,
    };
    if kind == Degenerate::Smooth {
        smooth(&frame.buf[..n], (frame.h, frame.w, c), spare);
    }
    let blend = |d: u8, v: u8| -> u8 {
        if alpha == 0.0 {
            return d;
        }
        let t = f32::from(d) + alpha * (f32::from(v) - f32::from(d));
        if (0.0..=1.0).contains(&alpha) { t as u8 } else { t.clamp(0.0, 255.0) as u8 }
    };
    match kind {
        Degenerate::Gray => {
            for px in frame.buf[..n].chunks_exact_mut(c) {
                let g = pil_luma(px);
                for v in px.iter_mut() {
                    *v = blend(g, *v);
                }
            }
        }
        Degenerate::Mean | Degenerate::Black => {
            for v in &mut frame.buf[..n] {
                *v = blend(mean, *v);
            }
        }
        Degenerate::Smooth => {
            for (v, &d) in frame.buf[..n].iter_mut().zip(&spare[..n]) {
                *v = blend(d, *v);
            }
        }
    }
}

/// `img.filter(ImageFilter.SMOOTH)` into `out`: the 3×3 kernel (1 1 1 / 1 5 1 / 1 1 1)/13 as f32 taps summed row
/// by row (below, centre, above) onto 0.5 and truncated; the one-pixel border is copied (Pillow's
/// `ImagingFilter3x3`); images smaller than 3×3 are copied whole.
fn smooth(src: &[u8], (h, w, c): (usize, usize, usize), out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(src);
    if h < 3 || w < 3 {
        return;
    }
    let (k1, k5) = ((1.0f64 / 13.0) as f32, (5.0f64 / 13.0) as f32);
    let stride = w * c;
    for y in 1..h - 1 {
        let (above, mid, below) =
            (&src[(y - 1) * stride..y * stride], &src[y * stride..(y + 1) * stride], &src[(y + 1) * stride..]);
        let dst = &mut out[y * stride..(y + 1) * stride];
        for i in c..stride - c {
            let row =
                |r: &[u8], centre: f32| f32::from(r[i - c]) * k1 + f32::from(r[i]) * centre + f32::from(r[i + c]) * k1;
            // Pillow's order: the row below, the centre row, the row above, onto the 0.5 rounding offset.
            let mut ss = 0.5f32;
            ss += row(below, k1);
            ss += row(mid, k5);
            ss += row(above, k1);
            dst[i] = ss.clamp(0.0, 255.0) as u8;
        }
    }
}

/// Pillow's `COORD`: -1 for negatives, else truncation.
#[inline]
fn coord(v: f64) -> i64 {
    if v < 0.0 { -1 } else { v as i64 }
}

/// Pillow's `FLOOR`.
#[inline]
fn floor_i(v: f64) -> i64 {
    v.floor() as i64
}

/// `img.transform(img.size, Image.AFFINE, a, resample=filter, fillcolor=fill)` (output pixel centre → input
/// `(a0·x + a1·y + a2, a3·x + a4·y + a5)`; outside pixels keep the fill). Nearest follows Pillow's two fast paths
/// (`ImagingScaleAffine` for pure translations with its running sums, 16.16 fixed point otherwise); bilinear and
/// bicubic the generic engine's filters with clamped taps and truncation.
pub fn transform(frame: &mut Frame, spare: &mut Vec<u8>, a: [f64; 6], filter: PilFilter, fill: [u8; 3]) {
    let (h, w, c) = (frame.h, frame.w, frame.c);
    let n = h * w * c;
    spare.clear();
    spare.resize(n, 0);
    for px in spare.chunks_exact_mut(c) {
        px.copy_from_slice(&fill[..c]);
    }
    let src = &frame.buf[..n];
    let (wi, hi) = (w as i64, h as i64);
    let copy_px = |dst: &mut [u8], x: usize, y: usize, sx: i64, sy: i64| {
        let o = (y * w + x) * c;
        let i = (sy as usize * w + sx as usize) * c;
        dst[o..o + c].copy_from_slice(&src[i..i + c]);
    };
    match filter {
        PilFilter::Nearest if a[1] == 0.0 && a[3] == 0.0 => {
            // ImagingScaleAffine: running sums (the column table Pillow builds once is recomputed per row — the
            // same sums in the same order — so nothing is allocated per sample).
            let mut yo = a[5] + a[4] * 0.5;
            for y in 0..h {
                let yi = coord(yo);
                if yi >= 0 && yi < hi {
                    let mut xo = a[2] + a[0] * 0.5;
                    for x in 0..w {
                        let xi = coord(xo);
                        if xi >= 0 && xi < wi {
                            copy_px(spare, x, y, xi, yi);
                        }
                        xo += a[0];
                    }
                }
                yo += a[4];
            }
        }
        PilFilter::Nearest => {
            let fits = |x: f64, y: f64| {
                (x * a[0] + y * a[1] + a[2]).abs() < 32768.0 && (x * a[3] + y * a[4] + a[5]).abs() < 32768.0
            };
            let (wf, hf) = (w as f64, h as f64);
            if fits(0.0, 0.0) && fits(wf, hf) && fits(0.0, hf) && fits(wf, 0.0) {
                // affine_fixed: 16.16 fixed point, FIX(v) = FLOOR(v·65536 + 0.5).
                let fix = |v: f64| floor_i(v * 65536.0 + 0.5) as i32;
                let (a0, a1, a3, a4) = (fix(a[0]), fix(a[1]), fix(a[3]), fix(a[4]));
                let mut a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
                let mut a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
                for y in 0..h {
                    let (mut xx, mut yy) = (a2, a5);
                    for x in 0..w {
                        let xi = i64::from(xx >> 16);
                        if xi >= 0 && xi < wi {
                            let yi = i64::from(yy >> 16);
                            if yi >= 0 && yi < hi {
                                copy_px(spare, x, y, xi, yi);
                            }
                        }
                        xx = xx.wrapping_add(a0);
                        yy = yy.wrapping_add(a3);
                    }
                    a2 = a2.wrapping_add(a1);
                    a5 = a5.wrapping_add(a4);
                }
            } else {
                let mut xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
                let mut yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
                for y in 0..h {
                    let (mut xx, mut yy) = (xo, yo);
                    for x in 0..w {
                        let xi = coord(xx);
                        if xi >= 0 && xi < wi {
                            let yi = coord(yy);
                            if yi >= 0 && yi < hi {
                                copy_px(spare, x, y, xi, yi);
                            }
                        }
                        xx += a[0];
                        yy += a[3];
                    }
                    xo += a[1];
                    yo += a[4];
                }
            }
        }
        PilFilter::Bilinear | PilFilter::Bicubic => {
            let clip = |v: i64, n: i64| v.clamp(0, n - 1) as usize;
            let stride = w * c;
            for y in 0..h {
                for x in 0..w {
                    let (xf, yf) = (x as f64 + 0.5, y as f64 + 0.5);
                    let xin = a[0] * xf + a[1] * yf + a[2];
                    let yin = a[3] * xf + a[4] * yf + a[5];
                    if xin < 0.0 || xin >= w as f64 || yin < 0.0 || yin >= h as f64 {
                        continue;
                    }
                    let (xs, ys) = (xin - 0.5, yin - 0.5);
                    let (x0, y0) = (floor_i(xs), floor_i(ys));
                    let (dx, dy) = (xs - x0 as f64, ys - y0 as f64);
                    let o = (y * w + x) * c;
                    // The clamped taps (Pillow's XCLIP/YCLIP; its "row out of range: repeat the last" is the same
                    // clamp), computed once per pixel for all channels.
                    let cols: [usize; 4] = std::array::from_fn(|i| clip(x0 - 1 + i as i64, wi) * c);
                    let rows: [usize; 4] = std::array::from_fn(|i| clip(y0 - 1 + i as i64, hi) * stride);
                    for ch in 0..c {
                        let at = |r: usize, k: usize| f64::from(src[rows[r] + cols[k] + ch]);
                        spare[o + ch] = if filter == PilFilter::Bilinear {
                            let lerp = |a: f64, b: f64, d: f64| a + (b - a) * d;
                            let v1 = lerp(at(1, 1), at(1, 2), dx);
                            let v2 = lerp(at(2, 1), at(2, 2), dx);
                            lerp(v1, v2, dy) as u8
                        } else {
                            let cubic = |v1: f64, v2: f64, v3: f64, v4: f64, d: f64| {
                                let p1 = v2;
                                let p2 = -v1 + v3;
                                let p3 = 2.0 * (v1 - v2) + v3 - v4;
                                let p4 = -v1 + v2 - v3 + v4;
                                p1 + d * (p2 + d * (p3 + d * p4))
                            };
                            let row = |r: usize| cubic(at(r, 0), at(r, 1), at(r, 2), at(r, 3), dx);
                            let v = cubic(row(0), row(1), row(2), row(3), dy);
                            if v <= 0.0 {
                                0
                            } else if v >= 255.0 {
                                255
                            } else {
                                v as u8
                            }
                        };
                    }
                }
            }
        }
    }
    std::mem::swap(&mut frame.buf, spare);
}

/// Python's `round(v, 15)` (correctly rounded through the shortest exact decimal, as CPython's dtoa does).
fn round15(v: f64) -> f64 {
    format!("{v:.15}").parse().unwrap_or(v)
}

/// `img.rotate(degrees, resample=filter, fillcolor=fill)` (no expand, centre `(w/2, h/2)`): Pillow's matrix —
/// `angle % 360` (0 copies), cos/sin rounded to 15 decimals — then [`transform`].
pub fn rotate(frame: &mut Frame, spare: &mut Vec<u8>, degrees: f64, filter: PilFilter, fill: [u8; 3]) {
    let angle = degrees.rem_euclid(360.0);
    if angle == 0.0 {
        return;
    }
    let (w, h) = (frame.w as f64, frame.h as f64);
    let (cx, cy) = (w / 2.0, h / 2.0);
    let r = -angle.to_radians();
    let (a, b, d, e) = (round15(r.cos()), round15(r.sin()), round15(-r.sin()), round15(r.cos()));
    let c = a * -cx + b * -cy + 0.0 + cx;
    let f = d * -cx + e * -cy + 0.0 + cy;
    transform(frame, spare, [a, b, c, d, e, f], filter, fill);
}

/// How timm's `RandomErasing` fills a box (`mode`, `create_transform`'s `re_mode`), in the normalized units it
/// works in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraseMode {
    /// `'const'`: 0 after Normalize, i.e. the mean pixel.
    Const,
    /// `'rand'`: one N(0, 1) per channel per box.
    Rand,
    /// `'pixel'`: one N(0, 1) per element.
    Pixel,
}

/// The `re_mode` values of [`TimmRandomErasing`] (timm's `mode`, named as `create_transform` names it).
pub const ERASE_MODE: Choice<EraseMode> = Choice {
    name: "re_mode",
    values: &[("const", EraseMode::Const), ("rand", EraseMode::Rand), ("pixel", EraseMode::Pixel)],
};

/// timm's `RandomErasing(probability, min_area, max_area, min_aspect, max_aspect, mode, min_count, max_count)`,
/// which timm runs after `Normalize` on the float tensor. trdata runs it on the uint8 image before its final
/// normalize: a normalized value `z` of channel `k` is written as the pixel `clamp(round((z·std_k + mean_k)·255))`,
/// so the output differs from timm's by the uint8 quantisation (≤ 0.5/255/std_k in normalized units) and, for
/// `rand`/`pixel`, normals beyond the representable range are clipped to the 0/255 pixel (|z| ≳ 2 for ImageNet
/// statistics; timm keeps them). `const` is exact up to the rounding of the mean pixel.
#[derive(Debug, Clone, PartialEq)]
pub struct TimmRandomErasing {
    /// `probability`.
    pub p: f64,
    /// `min_area` (fraction of the image).
    pub min_area: f64,
    /// `max_area`.
    pub max_area: f64,
    /// (`min_aspect`, `max_aspect`): the aspect ratio is drawn log-uniformly between them.
    pub aspect: (f64, f64),
    /// `min_count`.
    pub min_count: u32,
    /// `max_count`.
    pub max_count: u32,
    /// Fill mode.
    pub mode: EraseMode,
    /// The loader's normalize mean per channel, [0, 1] units.
    pub mean: [f64; 3],
    /// The loader's normalize std per channel, [0, 1] units.
    pub std: [f64; 3],
}

impl TimmRandomErasing {
    /// Validate the values (the one place). `op`/`pos` name the op in messages.
    pub fn check(&self, op: &str, pos: Site) -> Result<()> {
        if !(0.0..=1.0).contains(&self.p) {
            return Err(bad(PROBABILITY, self.p, "be in [0, 1]", op, pos));
        }
        if !(0.0..=1.0).contains(&self.min_area) {
            return Err(bad(MIN_AREA, self.min_area, "be in [0, 1]", op, pos));
        }
        if !(self.min_area <= self.max_area && self.max_area <= 1.0) {
            return Err(bad(MAX_AREA, self.max_area, "be in [min_area, 1]", op, pos));
        }
        let (lo, hi) = self.aspect;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
            let shown = format!("({lo}, {hi})");
            return Err(bad("ratio", shown, "be finite with 0 < min_aspect ≤ max_aspect", op, pos));
        }
        let max_ops = MAX_OPS;
        if !(1..=max_ops).contains(&self.min_count) {
            return Err(bad(MIN_COUNT, self.min_count, &format!("be in 1..={max_ops}"), op, pos));
        }
        if !(self.min_count..=max_ops).contains(&self.max_count) {
            let rule = format!("be in min_count..={max_ops} ({}..={max_ops})", self.min_count);
            return Err(bad(MAX_COUNT, self.max_count, &rule, op, pos));
        }
        if !self.mean.iter().chain(&self.std).all(|v| v.is_finite()) || !self.std.iter().all(|&s| s > 0.0) {
            let shown = format!("{:?}, {:?}", self.mean, self.std);
            return Err(bad("normalize", shown, "be finite with std > 0", op, pos));
        }
        Ok(())
    }

    /// The pixel of normalized value `z` in channel `k`.
    fn pixel(&self, z: f64, k: usize) -> u8 {
        ((z * self.std[k] + self.mean[k]) * 255.0).round_ties_even().clamp(0.0, 255.0) as u8
    }
}

/// timm's `_erase` on `frame`, drawing in its order (gate, count, then per box up to 10 attempts of area, aspect,
/// and top/left on success, then the box's normals). Each erased box is handed to `visit` as (top, left, h, w).
pub fn erase(
    spec: &TimmRandomErasing,
    frame: Option<&mut Frame>,
    (img_h, img_w): (usize, usize),
    rng: &mut SampleRng,
    mut visit: impl FnMut([usize; 4]),
) {
    let mut frame = frame;
    if rng.uniform() > spec.p {
        return;
    }
    let area = (img_h * img_w) as f64;
    let count = if spec.min_count == spec.max_count {
        spec.min_count
    } else {
        spec.min_count + rng.below(u64::from(spec.max_count - spec.min_count + 1)) as u32
    };
    for _ in 0..count {
        for _ in 0..10 {
            let target = rng.uniform_range(spec.min_area, spec.max_area) * area / f64::from(count);
            // timm's `log_aspect_ratio = (log(min_aspect), log(max_aspect))`.
            let aspect = rng.uniform_range(spec.aspect.0.ln(), spec.aspect.1.ln()).exp();
            // Python's round() is half-to-even.
            let h = (target * aspect).sqrt().round_ties_even() as usize;
            let w = (target / aspect).sqrt().round_ties_even() as usize;
            if !(w < img_w && h < img_h) {
                continue;
            }
            let top = rng.below((img_h - h + 1) as u64) as usize;
            let left = rng.below((img_w - w + 1) as u64) as usize;
            visit([top, left, h, w]);
            if let Some(f) = frame.as_deref_mut() {
                fill_box(spec, f, [top, left, h, w], rng);
            }
            break;
        }
    }
}

/// Fill one box (timm's `_get_pixels`: zeros, one normal per channel, or one per element in CHW order).
fn fill_box(spec: &TimmRandomErasing, frame: &mut Frame, [top, left, h, w]: [usize; 4], rng: &mut SampleRng) {
    let c = frame.c;
    let stride = frame.w * c;
    let mut per_channel = [0u8; 3];
    for (k, v) in per_channel.iter_mut().enumerate().take(c) {
        let z = if spec.mode == EraseMode::Rand { rng.normal_f64() } else { 0.0 };
        *v = spec.pixel(z, k);
    }
    for (k, &pc) in per_channel.iter().enumerate().take(c) {
        for y in top..top + h {
            for x in left..left + w {
                frame.buf[y * stride + x * c + k] =
                    if spec.mode == EraseMode::Pixel { spec.pixel(rng.normal_f64(), k) } else { pc };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(kind: TimmKind) -> TimmPolicy {
        TimmPolicy {
            kind,
            magnitude_std: 0.5,
            magnitude_max: 10.0,
            fill: vec![124.0, 116.0, 104.0],
            interp: TimmInterp::Random,
            translate_pct: 0.45,
        }
    }

    fn frame(h: usize, w: usize, c: usize, f: impl Fn(usize) -> u8) -> Frame {
        Frame { buf: (0..h * w * c).map(f).collect(), h, w, c }
    }

    /// Python's `round(x, 15)` on the values Pillow's rotate rounds (literal CPython results).
    #[test]
    fn round15_equals_python() {
        assert_eq!(round15(-0.17364817766693033), -0.17364817766693);
        assert_eq!(round15(0.9547607995027975), 0.954760799502797);
        assert_eq!(round15(0.984807753012208), 0.984807753012208);
    }

    #[test]
    fn posterize_zero_bits_is_black_and_eight_is_the_identity() {
        let mut f = frame(2, 3, 3, |i| (i * 37 % 256) as u8);
        let orig = f.buf.clone();
        let mut spare = Vec::new();
        apply(Posterize, 10.0 / LEVEL_DENOM * 20.0, PilFilter::Nearest, [0; 3], &mut f, &mut spare); // bits 20
        assert_eq!(f.buf, orig);
        apply(Posterize, 0.0, PilFilter::Nearest, [0; 3], &mut f, &mut spare); // PosterizeIncreasing at m = 10
        assert!(f.buf.iter().all(|&v| v == 0));
    }

    /// Pillow's SMOOTH: the border is copied, the inside is `trunc(0.5 + Σ f32 taps)`: 255·f32(5/13) + 0.5 → 98.
    #[test]
    fn smooth_copies_the_border_and_rounds_inside() {
        let src = [0, 0, 0, 0, 255, 0, 0, 0, 0];
        let mut out = Vec::new();
        smooth(&src, (3, 3, 1), &mut out);
        assert_eq!(out, [0, 0, 0, 0, 98, 0, 0, 0, 0]);
        let mut f = frame(1, 3, 1, |i| i as u8 * 100);
        let mut spare = Vec::new();
        apply(Sharpness, 0.1, PilFilter::Nearest, [0; 3], &mut f, &mut spare); // too small to filter: blend = copy
        assert_eq!(f.buf, [0, 100, 200]);
    }

    #[test]
    fn rotate_by_zero_and_identity_affine_keep_the_image() {
        for filter in [PilFilter::Nearest, PilFilter::Bilinear, PilFilter::Bicubic] {
            let mut f = frame(5, 7, 3, |i| (i * 11 % 256) as u8);
            let orig = f.buf.clone();
            let mut spare = Vec::new();
            rotate(&mut f, &mut spare, 360.0, filter, [1, 2, 3]);
            transform(&mut f, &mut spare, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], filter, [1, 2, 3]);
            assert_eq!(f.buf, orig, "{filter:?}");
            // A whole-image shift leaves only the fill.
            transform(&mut f, &mut spare, [1.0, 0.0, 100.0, 0.0, 1.0, 0.0], filter, [1, 2, 3]);
            assert!(f.buf.chunks(3).all(|p| p == [1, 2, 3]), "{filter:?}");
        }
    }

    #[test]
    fn auto_augment_runs_the_steps_of_one_sub_policy() {
        let sub = |op| vec![(AugmentOp::plain(op), 1.0, 5.0), (AugmentOp::plain(Equalize), 1.0, 5.0)];
        let spec = policy(TimmKind::AutoAugment { sub_policies: vec![sub(Invert), sub(AutoContrast)] });
        let mut seen = [0; 2];
        for i in 0..400 {
            let t = trace(&spec, &mut SampleRng::new(1, 0, i, 0x100));
            assert_eq!(t.len(), 6);
            assert_eq!(t[3], f64::from(AugmentOp::plain(Equalize).number()));
            seen[usize::from(t[0] == f64::from(AugmentOp::plain(AutoContrast).number()))] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
    }

    #[test]
    fn augmix_trace_holds_its_chains_and_weights_sum_to_one() {
        let kind = TimmKind::AugMix { ops: RAND_TRANSFORMS.to_vec(), magnitude: 3.0, alpha: 1.0, width: 3, depth: -1 };
        let spec = policy(kind);
        for i in 0..200 {
            let t = trace(&spec, &mut SampleRng::new(2, 0, i, 0x100));
            assert!((0.0..=1.0).contains(&t[0]));
            let (mut at, mut sum) = (1, 0.0);
            for _ in 0..3 {
                sum += t[at];
                let d = t[at + 1] as usize;
                assert!((1..=3).contains(&d));
                at += 2 + 3 * d;
            }
            assert_eq!(at, t.len());
            assert!((sum - 1.0).abs() < 1e-5, "{sum}");
        }
    }

    /// timm's `ResizeKeepRatio.get_params` (no random factors), by hand: 500×375 to 256 on the shorter side is
    /// 341.33 → 341 × 256; with `longest=1` the longer side meets 256: 256 × 192.
    #[test]
    fn resize_keep_ratio_rounds_as_timm() {
        use crate::augment::geometry::resize_keep_ratio;
        assert_eq!(resize_keep_ratio(500, 375, (256, 256), 0.0), (341, 256));
        assert_eq!(resize_keep_ratio(500, 375, (256, 256), 1.0), (256, 192));
        // A sliver does not ask for more than 65,536 pixels a side.
        assert_eq!(resize_keep_ratio(1, 60_000, (224, 224), 0.0), (224, 65_536));
    }

    #[test]
    fn check_names_the_parameter_and_the_op() {
        let ra = |prob| TimmKind::RandAugment {
            num_layers: 2,
            ops: RAND_TRANSFORMS.to_vec(),
            prob,
            magnitude: 9.0,
            weights: None,
        };
        let e = policy(ra(1.5)).check(Site::top(3)).unwrap_err().to_string();
        assert!(e.contains("invalid p: 1.5 must be in [0, 1] (timm RandAugment at transforms[3])"), "{e}");
        let mut bad_fill = policy(ra(0.5));
        bad_fill.fill = vec![1.0, 2.0];
        assert!(bad_fill.check(Site::top(0)).unwrap_err().to_string().contains("invalid fill"));
        let kind = TimmKind::AugMix { ops: RAND_TRANSFORMS.to_vec(), magnitude: 3.0, alpha: 1.0, width: 65, depth: 1 };
        assert!(
            policy(kind).check(Site::top(0)).unwrap_err().to_string().contains("invalid width: 65 must be in 1..=64")
        );
    }
}
