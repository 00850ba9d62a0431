//! policy — the auto-augment family of a compiled program's pixel stage (AutoAugment, RandAugment,
//! TrivialAugmentWide, AugMix; [`super::program`] stage 2, on the uint8 crop): per sample a policy picks
//! sub-ops and magnitudes with torchvision v2's probabilities (/work/notes/tv_ops.md §18) and runs them with the
//! kernels of [`super::kernels`] and [`super::warp`]. The sub-ops are the policies' one vocabulary,
//! [`PolicyOp`] (shared with timm's policies); this file is torchvision's flavour of it: the magnitude tables
//! (`magnitude`) and the tensor kernels ([`apply_step`]).
//!
//! Randomness comes only from the op's own stream (`SampleRng(seed, epoch, index, OP_BASE + pos)`), in
//! torchvision's draw order (op choice, then magnitude bin, then sign; AugMix: the two Dirichlet draws first).
//! The choices are made while the ops run ([`run`]), so a policy allocates nothing per sample; [`trace`] walks
//! the same decisions without pixels, which `_core.sample_op` exposes to the tests that compare them with
//! torchvision's own sampling.
//!
//! Magnitude tables: torchvision builds them with `torch.linspace` in f32 and indexes them; [`linspace_f32`]
//! reproduces torch's CPU kernel for tables of up to 31 bins bit for bit (`start + step·k` below the middle,
//! `end - step·(n-1-k)` above it, each one fused multiply-add — the unit tests hold it to the literal values of
//! tv_ops.md Appendix A), and the size-dependent translate tables are computed per image as torchvision does.

use super::kernels;
use super::kernels::Frame;
use super::policy_ops::PolicyOp;
use super::warp::{self, Interp};
use crate::param::Choice;
use crate::rng::SampleRng;

use PolicyOp::*;

/// RandAugment's and TrivialAugmentWide's op list, in torchvision's insertion order (the draw picks an index).
pub const RAND_OPS: [PolicyOp; 14] = [
    Identity,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Brightness,
    Color,
    Contrast,
    Sharpness,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
];

/// AugMix's op list (`all_ops=True`; the first 9 when False), torchvision's order.
pub const AUGMIX_OPS: [PolicyOp; 13] = [
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
    Brightness,
    Color,
    Contrast,
    Sharpness,
];

/// `AutoAugmentPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AaPolicy {
    /// `AutoAugmentPolicy.IMAGENET`.
    ImageNet,
    /// `AutoAugmentPolicy.CIFAR10`.
    Cifar10,
    /// `AutoAugmentPolicy.SVHN`.
    Svhn,
}

/// The `policy` values (torchvision's `AutoAugmentPolicy` values).
pub const AA_POLICY: Choice<AaPolicy> = Choice {
    name: "policy",
    values: &[("imagenet", AaPolicy::ImageNet), ("cifar10", AaPolicy::Cifar10), ("svhn", AaPolicy::Svhn)],
};

/// One sub-policy step: (op, probability, magnitude bin; `u8::MAX` for ops without magnitude).
type Step = (PolicyOp, f64, u8);
/// No magnitude.
const NO: u8 = u8::MAX;

/// torchvision's ImageNet policy, literally (25 sub-policies of 2 steps).
const IMAGENET: [[Step; 2]; 25] = [
    [(Posterize, 0.4, 8), (Rotate, 0.6, 9)],
    [(Solarize, 0.6, 5), (AutoContrast, 0.6, NO)],
    [(Equalize, 0.8, NO), (Equalize, 0.6, NO)],
    [(Posterize, 0.6, 7), (Posterize, 0.6, 6)],
    [(Equalize, 0.4, NO), (Solarize, 0.2, 4)],
    [(Equalize, 0.4, NO), (Rotate, 0.8, 8)],
    [(Solarize, 0.6, 3), (Equalize, 0.6, NO)],
    [(Posterize, 0.8, 5), (Equalize, 1.0, NO)],
    [(Rotate, 0.2, 3), (Solarize, 0.6, 8)],
    [(Equalize, 0.6, NO), (Posterize, 0.4, 6)],
    [(Rotate, 0.8, 8), (Color, 0.4, 0)],
    [(Rotate, 0.4, 9), (Equalize, 0.6, NO)],
    [(Equalize, 0.0, NO), (Equalize, 0.8, NO)],
    [(Invert, 0.6, NO), (Equalize, 1.0, NO)],
    [(Color, 0.6, 4), (Contrast, 1.0, 8)],
    [(Rotate, 0.8, 8), (Color, 1.0, 2)],
    [(Color, 0.8, 8), (Solarize, 0.8, 7)],
    [(Sharpness, 0.4, 7), (Invert, 0.6, NO)],
    [(ShearX, 0.6, 5), (Equalize, 1.0, NO)],
    [(Color, 0.4, 0), (Equalize, 0.6, NO)],
    [(Equalize, 0.4, NO), (Solarize, 0.2, 4)],
    [(Solarize, 0.6, 5), (AutoContrast, 0.6, NO)],
    [(Invert, 0.6, NO), (Equalize, 1.0, NO)],
    [(Color, 0.6, 4), (Contrast, 1.0, 8)],
    [(Equalize, 0.8, NO), (Equalize, 0.6, NO)],
];

/// torchvision's CIFAR10 policy, literally.
const CIFAR10: [[Step; 2]; 25] = [
    [(Invert, 0.1, NO), (Contrast, 0.2, 6)],
    [(Rotate, 0.7, 2), (TranslateX, 0.3, 9)],
    [(Sharpness, 0.8, 1), (Sharpness, 0.9, 3)],
    [(ShearY, 0.5, 8), (TranslateY, 0.7, 9)],
    [(AutoContrast, 0.5, NO), (Equalize, 0.9, NO)],
    [(ShearY, 0.2, 7), (Posterize, 0.3, 7)],
    [(Color, 0.4, 3), (Brightness, 0.6, 7)],
    [(Sharpness, 0.3, 9), (Brightness, 0.7, 9)],
    [(Equalize, 0.6, NO), (Equalize, 0.5, NO)],
    [(Contrast, 0.6, 7), (Sharpness, 0.6, 5)],
    [(Color, 0.7, 7), (TranslateX, 0.5, 8)],
    [(Equalize, 0.3, NO), (AutoContrast, 0.4, NO)],
    [(TranslateY, 0.4, 3), (Sharpness, 0.2, 6)],
    [(Brightness, 0.9, 6), (Color, 0.2, 8)],
    [(Solarize, 0.5, 2), (Invert, 0.0, NO)],
    [(Equalize, 0.2, NO), (AutoContrast, 0.6, NO)],
    [(Equalize, 0.2, NO), (Equalize, 0.6, NO)],
    [(Color, 0.9, 9), (Equalize, 0.6, NO)],
    [(AutoContrast, 0.8, NO), (Solarize, 0.2, 8)],
    [(Brightness, 0.1, 3), (Color, 0.7, 0)],
    [(Solarize, 0.4, 5), (AutoContrast, 0.9, NO)],
    [(TranslateY, 0.9, 9), (TranslateY, 0.7, 9)],
    [(AutoContrast, 0.9, NO), (Solarize, 0.8, 3)],
    [(Equalize, 0.8, NO), (Invert, 0.1, NO)],
    [(TranslateY, 0.7, 9), (AutoContrast, 0.9, NO)],
];

/// torchvision's SVHN policy, literally.
const SVHN: [[Step; 2]; 25] = [
    [(ShearX, 0.9, 4), (Invert, 0.2, NO)],
    [(ShearY, 0.9, 8), (Invert, 0.7, NO)],
    [(Equalize, 0.6, NO), (Solarize, 0.6, 6)],
    [(Invert, 0.9, NO), (Equalize, 0.6, NO)],
    [(Equalize, 0.6, NO), (Rotate, 0.9, 3)],
    [(ShearX, 0.9, 4), (AutoContrast, 0.8, NO)],
    [(ShearY, 0.9, 8), (Invert, 0.4, NO)],
    [(ShearY, 0.9, 5), (Solarize, 0.2, 6)],
    [(Invert, 0.9, NO), (AutoContrast, 0.8, NO)],
    [(Equalize, 0.6, NO), (Rotate, 0.9, 3)],
    [(ShearX, 0.9, 4), (Solarize, 0.3, 3)],
    [(ShearY, 0.8, 8), (Invert, 0.7, NO)],
    [(Equalize, 0.9, NO), (TranslateY, 0.6, 6)],
    [(Invert, 0.9, NO), (Equalize, 0.6, NO)],
    [(Contrast, 0.3, 3), (Rotate, 0.8, 4)],
    [(Invert, 0.8, NO), (TranslateY, 0.0, 2)],
    [(ShearY, 0.7, 6), (Solarize, 0.4, 8)],
    [(Invert, 0.6, NO), (Rotate, 0.8, 4)],
    [(ShearY, 0.3, 7), (TranslateX, 0.9, 3)],
    [(ShearX, 0.1, 6), (Invert, 0.6, NO)],
    [(Solarize, 0.7, 2), (TranslateY, 0.6, 7)],
    [(ShearY, 0.8, 4), (Invert, 0.8, NO)],
    [(ShearX, 0.7, 9), (TranslateY, 0.8, 3)],
    [(ShearY, 0.8, 5), (AutoContrast, 0.7, NO)],
    [(ShearX, 0.7, 2), (Invert, 0.1, NO)],
];

/// The sub-policies of `policy`.
fn sub_policies(policy: AaPolicy) -> &'static [[Step; 2]; 25] {
    match policy {
        AaPolicy::ImageNet => &IMAGENET,
        AaPolicy::Cifar10 => &CIFAR10,
        AaPolicy::Svhn => &SVHN,
    }
}

/// `torch.linspace(start, end, steps)[k]` in f32 as torch's CPU kernel computes it for up to 31 steps (its scalar
/// path: `step = f32((f32(end) - f32(start)) / (steps - 1))`, then `fma(step, k, start)` for `k < steps / 2`
/// and `fma(-step, steps - 1 - k, end)` from the middle on). Longer tables use the same formula (torch's
/// vector path may differ by an ulp there).
pub fn linspace_f32(start: f64, end: f64, steps: u32, k: u32) -> f32 {
    let (s, e) = (start as f32, end as f32);
    if steps <= 1 {
        return s;
    }
    let step = (e - s) / (steps - 1) as f32;
    if k < steps / 2 { step.mul_add(k as f32, s) } else { (-step).mul_add((steps - 1 - k) as f32, e) }
}

/// `(top - arange(bins) / ((bins - 1) / div)).round().int()[k]` (f32 division, half-to-even rounding): the
/// posterize bits tables (top 8, div 4: AutoAugment/RandAugment; div 6: TrivialAugmentWide; top 4: AugMix).
fn posterize_bits(top: f32, div: f64, bins: u32, k: u32) -> f64 {
    let d = ((f64::from(bins) - 1.0) / div) as f32;
    f64::from((top - k as f32 / d).round_ties_even())
}

/// Which magnitude space a policy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Space {
    /// AutoAugment (10 bins) and RandAugment (`num_magnitude_bins`).
    Auto,
    /// TrivialAugmentWide.
    Wide,
    /// AugMix (10 bins).
    Mix,
}

/// The magnitude of `op` at bin `k` of `bins` for an `h × w` image, and whether it is signed; `None` for ops
/// without magnitude (torchvision's `magnitudes is None`: magnitude 0.0, no sign draw).
fn magnitude(space: Space, op: PolicyOp, bins: u32, k: u32, (h, w): (usize, usize)) -> Option<(f64, bool)> {
    let lin = |end: f64| f64::from(linspace_f32(0.0, end, bins, k));
    let v = match (op, space) {
        (ShearX | ShearY, Space::Wide) => lin(0.99),
        (ShearX | ShearY, _) => lin(0.3),
        (TranslateX, Space::Auto) => lin(150.0 / 331.0 * w as f64),
        (TranslateY, Space::Auto) => lin(150.0 / 331.0 * h as f64),
        (TranslateX | TranslateY, Space::Wide) => lin(32.0),
        (TranslateX, Space::Mix) => lin(w as f64 / 3.0),
        (TranslateY, Space::Mix) => lin(h as f64 / 3.0),
        (Rotate, Space::Wide) => lin(135.0),
        (Rotate, _) => lin(30.0),
        (Brightness | Color | Contrast | Sharpness, Space::Wide) => lin(0.99),
        (Brightness | Color | Contrast | Sharpness, _) => lin(0.9),
        (Posterize, Space::Auto) => return Some((posterize_bits(8.0, 4.0, bins, k), false)),
        (Posterize, Space::Wide) => return Some((posterize_bits(8.0, 6.0, bins, k), false)),
        (Posterize, Space::Mix) => return Some((posterize_bits(4.0, 4.0, bins, k), false)),
        (Solarize, _) => return Some((f64::from(linspace_f32(1.0, 0.0, bins, k)), false)),
        // SolarizeAdd is timm's; torchvision's tables never draw it.
        (Identity | AutoContrast | Equalize | Invert | SolarizeAdd, _) => return None,
    };
    Some((v, true))
}

/// torchvision's sign draw: `if signed and torch.rand(()) <= 0.5: m = -m`.
fn signed(rng: &mut SampleRng, (m, is_signed): (f64, bool)) -> f64 {
    if is_signed && rng.uniform() <= 0.5 { -m } else { m }
}

/// How the warping sub-ops sample and fill (the policy's `interpolation` and `fill`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarpStyle {
    /// Interpolation of ShearX/Y, TranslateX/Y, Rotate.
    pub interp: Interp,
    /// `None`: zero padding (torchvision's default `fill=None` for the policies); else the mask path's fill.
    pub fill: Option<[f32; 3]>,
}

/// `_apply_image_or_video_transform(image, op, m)` on `frame` (uint8, size kept); `spare` is the warps' and
/// sharpness' second buffer.
pub fn apply_step(op: PolicyOp, m: f64, frame: &mut Frame, spare: &mut Vec<u8>, style: WarpStyle) {
    let hwc = (frame.h, frame.w, frame.c);
    let n = frame.h * frame.w * frame.c;
    let mut warp_affine = |frame: &mut Frame, params: (f64, [f64; 2], f64, [f64; 2]), center: Option<[f64; 2]>| {
        warp::affine(&frame.buf[..n], hwc, spare, params, style.interp, center, style.fill);
        std::mem::swap(&mut frame.buf, spare);
    };
    match op {
        Identity => {}
        ShearX => warp_affine(frame, (0.0, [0.0; 2], 1.0, [m.atan().to_degrees(), 0.0]), Some([0.0, 0.0])),
        ShearY => warp_affine(frame, (0.0, [0.0; 2], 1.0, [0.0, m.atan().to_degrees()]), Some([0.0, 0.0])),
        TranslateX => warp_affine(frame, (0.0, [m.trunc(), 0.0], 1.0, [0.0; 2]), None),
        TranslateY => warp_affine(frame, (0.0, [0.0, m.trunc()], 1.0, [0.0; 2]), None),
        Rotate => {
            warp::rotate(&frame.buf[..n], hwc, spare, m, style.interp, false, None, style.fill);
            std::mem::swap(&mut frame.buf, spare);
        }
        Brightness => kernels::brightness(&mut frame.view(), 1.0 + m),
        Color => kernels::saturation(&mut frame.view(), 1.0 + m),
        Contrast => kernels::contrast(&mut frame.view(), 1.0 + m),
        Sharpness => kernels::sharpness(&mut frame.view(), spare, 1.0 + m),
        Posterize => kernels::posterize(&mut frame.view(), m as u32),
        Solarize => kernels::solarize(&mut frame.view(), 255.0 * m),
        AutoContrast => kernels::autocontrast(&mut frame.view()),
        Equalize => kernels::equalize(&mut frame.view()),
        Invert => kernels::invert(&mut frame.view()),
        SolarizeAdd => kernels::solarize_add(&mut frame.view(), m as u32),
    }
}

/// A policy's parameters (the ops' variants in [`super::ops::OpSpec`] carry them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PolicyKind {
    /// `AutoAugment(policy)`.
    AutoAugment(AaPolicy),
    /// `RandAugment(num_ops, magnitude, num_magnitude_bins)`.
    RandAugment {
        /// Ops per sample (chosen with replacement).
        num_ops: u32,
        /// The fixed magnitude bin.
        magnitude: u32,
        /// Bins of the magnitude tables.
        bins: u32,
    },
    /// `TrivialAugmentWide(num_magnitude_bins)`.
    TrivialAugmentWide {
        /// Bins of the magnitude tables.
        bins: u32,
    },
    /// `AugMix(severity, mixture_width, chain_depth, alpha, all_ops)`.
    AugMix {
        /// Magnitude bins drawn from [0, severity).
        severity: u32,
        /// Number of chains mixed.
        width: u32,
        /// Ops per chain; ≤ 0 draws 1..=3 per chain.
        depth: i32,
        /// Dirichlet concentration.
        alpha: f64,
        /// All 13 ops (else the first 9).
        all_ops: bool,
    },
}

/// What a policy decides, in order (for [`trace`]; [`run`] acts on the same decisions).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    /// Apply `op` with magnitude `m`.
    Step(PolicyOp, f64),
    /// AugMix: weight of the original image.
    Mix(f32),
    /// AugMix: chain `i` starts with weight `w` and `depth` ops.
    Chain(f32, u32),
}

/// A Gamma(α, 1) variate (Marsaglia–Tsang; α < 1 boosted by `U^(1/α)`), for the Dirichlet draws of AugMix.
fn gamma(rng: &mut SampleRng, alpha: f64) -> f64 {
    if alpha < 1.0 {
        let u = 1.0 - rng.uniform();
        return gamma(rng, alpha + 1.0) * u.powf(1.0 / alpha);
    }
    let d = alpha - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let (x, v) = loop {
            let x = f64::from(rng.normal_f32());
            let v = 1.0 + c * x;
            if v > 0.0 {
                break (x, v * v * v);
            }
        };
        let u = 1.0 - rng.uniform();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// The decisions of `kind` for an `h × w` image, in torchvision's draw order, each handed to `visit`.
/// `weights` is AugMix's reusable buffer of chain weights (grown once).
fn decide(
    kind: &PolicyKind,
    rng: &mut SampleRng,
    hw: (usize, usize),
    weights: &mut Vec<f32>,
    mut visit: impl FnMut(Event),
) {
    match *kind {
        PolicyKind::AutoAugment(policy) => {
            let sub = &sub_policies(policy)[rng.below(25) as usize];
            for &(op, p, bin) in sub {
                if rng.uniform() > p {
                    continue;
                }
                let m = if bin == NO {
                    0.0
                } else {
                    magnitude(Space::Auto, op, 10, u32::from(bin), hw).map_or(0.0, |mg| signed(rng, mg))
                };
                visit(Event::Step(op, m));
            }
        }
        PolicyKind::RandAugment { num_ops, magnitude: k, bins } => {
            for _ in 0..num_ops {
                let op = RAND_OPS[rng.below(RAND_OPS.len() as u64) as usize];
                let m = magnitude(Space::Auto, op, bins, k, hw).map_or(0.0, |mg| signed(rng, mg));
                visit(Event::Step(op, m));
            }
        }
        PolicyKind::TrivialAugmentWide { bins } => {
            let op = RAND_OPS[rng.below(RAND_OPS.len() as u64) as usize];
            let m = match magnitude(Space::Wide, op, bins, 0, hw) {
                None => 0.0,
                Some(_) => {
                    let k = rng.below(u64::from(bins)) as u32;
                    magnitude(Space::Wide, op, bins, k, hw).map_or(0.0, |mg| signed(rng, mg))
                }
            };
            visit(Event::Step(op, m));
        }
        PolicyKind::AugMix { severity, width, depth, alpha, all_ops } => {
            let (g0, g1) = (gamma(rng, alpha), gamma(rng, alpha));
            let (m0, m1) = ((g0 / (g0 + g1)) as f32, (g1 / (g0 + g1)) as f32);
            weights.clear();
            let mut total = 0.0f64;
            for _ in 0..width {
                let g = gamma(rng, alpha);
                total += g;
                weights.push(g as f32);
            }
            for wgt in weights.iter_mut() {
                *wgt = ((f64::from(*wgt) / total) as f32) * m1;
            }
            visit(Event::Mix(m0));
            let ops: &[PolicyOp] = if all_ops { &AUGMIX_OPS } else { &AUGMIX_OPS[..9] };
            for &wgt in weights.iter() {
                let d = if depth > 0 { depth as u32 } else { 1 + rng.below(3) as u32 };
                visit(Event::Chain(wgt, d));
                for _ in 0..d {
                    let op = ops[rng.below(ops.len() as u64) as usize];
                    let m = match magnitude(Space::Mix, op, 10, 0, hw) {
                        None => 0.0,
                        Some(_) => {
                            let k = rng.below(u64::from(severity)) as u32;
                            magnitude(Space::Mix, op, 10, k, hw).map_or(0.0, |mg| signed(rng, mg))
                        }
                    };
                    visit(Event::Step(op, m));
                }
            }
        }
    }
}

/// What `kind` decides for an `h × w` image, as numbers (`_core.sample_op`): AutoAugment/RandAugment/
/// TrivialAugmentWide: `[op, magnitude]` per applied sub-op ([`PolicyOp`]'s discriminant, the signed magnitude
/// torchvision passes to its kernel); AugMix: `[weight of the original]`, then per chain `[weight, depth]` and
/// its `[op, magnitude]` pairs.
pub fn trace(kind: &PolicyKind, rng: &mut SampleRng, hw: (usize, usize)) -> Vec<f64> {
    let mut out = Vec::new();
    let mut weights = Vec::new();
    decide(kind, rng, hw, &mut weights, |e| match e {
        Event::Step(op, m) => out.extend([f64::from(op as u8), m]),
        Event::Mix(m0) => out.push(f64::from(m0)),
        Event::Chain(w, d) => out.extend([f64::from(w), f64::from(d)]),
    });
    out
}

/// The policy's buffers: AugMix's chain image and f32 mix, the chain weights, the sub-ops' spare. Grown to the
/// largest sample, then reused.
#[derive(Debug, Default)]
pub struct PolicyScratch {
    /// The current chain's image (AugMix).
    chain: Frame,
    /// The f32 mix (AugMix).
    mix: Vec<f32>,
    /// Chain weights (AugMix).
    weights: Vec<f32>,
    /// The sub-ops' second buffer.
    spare: Vec<u8>,
}

impl PolicyScratch {
    /// Bytes held by the buffers that grow with the image (see `OpScratch::retained_bytes`).
    #[cfg(test)]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.chain.buf.capacity() + self.mix.capacity() * 4 + self.weights.capacity() * 4 + self.spare.capacity()
    }
}

/// Run `kind` on `frame` (size kept), drawing from `rng`.
pub fn run(kind: &PolicyKind, style: WarpStyle, frame: &mut Frame, s: &mut PolicyScratch, rng: &mut SampleRng) {
    let hw = (frame.h, frame.w);
    let n = frame.h * frame.w * frame.c;
    let PolicyScratch { chain, mix, weights, spare } = s;
    if !matches!(kind, PolicyKind::AugMix { .. }) {
        decide(kind, rng, hw, weights, |e| {
            if let Event::Step(op, m) = e {
                apply_step(op, m, frame, spare, style);
            }
        });
        return;
    }
    // AugMix: mix = m0·x; each chain restarts from x, runs its ops, adds w·chain (product rounded to f32, then
    // added: torch's `mix.add_(w * aug)`); out = trunc(mix) (torch's `.to(uint8)`, no rounding).
    let mut chain_weight = 0.0f32;
    let mut left = 0u32;
    let finish = |mix: &mut Vec<f32>, chain: &Frame, w: f32| {
        for (acc, &v) in mix.iter_mut().zip(&chain.buf[..n]) {
            *acc += w * f32::from(v);
        }
    };
    decide(kind, rng, hw, weights, |e| match e {
        Event::Mix(m0) => {
            mix.clear();
            mix.extend(frame.buf[..n].iter().map(|&v| m0 * f32::from(v)));
        }
        Event::Chain(w, d) => {
            chain.buf.clear();
            chain.buf.extend_from_slice(&frame.buf[..n]);
            (chain.h, chain.w, chain.c) = (frame.h, frame.w, frame.c);
            (chain_weight, left) = (w, d);
        }
        Event::Step(op, m) => {
            apply_step(op, m, chain, spare, style);
            left -= 1;
            if left == 0 {
                finish(mix, chain, chain_weight);
            }
        }
    });
    for (o, &v) in frame.buf[..n].iter_mut().zip(mix.iter()) {
        *o = v.clamp(0.0, 255.0) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tv_ops.md Appendix A, literally (torch f32 values, `repr(float(v))`).
    #[test]
    fn magnitude_tables_equal_torchvision_literally() {
        let lin_0_03_31: [f64; 31] = [
            0.0,
            0.010000000707805157,
            0.020000001415610313,
            0.030000001192092896,
            0.04000000283122063,
            0.05000000447034836,
            0.06000000238418579,
            0.07000000774860382,
            0.08000000566244125,
            0.09000000357627869,
            0.10000000894069672,
            0.11000000685453415,
            0.12000000476837158,
            0.1300000101327896,
            0.14000001549720764,
            0.15000000596046448,
            0.1599999964237213,
            0.17000000178813934,
            0.18000000715255737,
            0.1899999976158142,
            0.20000000298023224,
            0.21000000834465027,
            0.2199999988079071,
            0.23000000417232513,
            0.24000000953674316,
            0.25,
            0.2600000202655792,
            0.27000001072883606,
            0.2800000011920929,
            0.2900000214576721,
            0.30000001192092896,
        ];
        let lin_0_09_31: [f64; 31] = [
            0.0,
            0.029999999329447746,
            0.05999999865889549,
            0.08999999612569809,
            0.11999999731779099,
            0.14999999105930328,
            0.17999999225139618,
            0.20999999344348907,
            0.23999999463558197,
            0.26999998092651367,
            0.29999998211860657,
            0.32999998331069946,
            0.35999998450279236,
            0.38999998569488525,
            0.41999998688697815,
            0.44999998807907104,
            0.47999998927116394,
            0.5099999904632568,
            0.5399999618530273,
            0.5699999928474426,
            0.5999999642372131,
            0.6299999952316284,
            0.6599999666213989,
            0.6899999976158142,
            0.7199999690055847,
            0.75,
            0.7799999713897705,
            0.8100000023841858,
            0.8399999737739563,
            0.8700000047683716,
            0.8999999761581421,
        ];
        let lin_1_0_31: [f64; 31] = [
            1.0,
            0.9666666388511658,
            0.9333333373069763,
            0.8999999761581421,
            0.8666666746139526,
            0.8333333134651184,
            0.800000011920929,
            0.7666666507720947,
            0.7333333492279053,
            0.699999988079071,
            0.6666666269302368,
            0.6333333253860474,
            0.5999999642372131,
            0.5666666626930237,
            0.5333333015441895,
            0.5,
            0.46666669845581055,
            0.4333333671092987,
            0.40000003576278687,
            0.36666667461395264,
            0.3333333432674408,
            0.30000001192092896,
            0.2666666805744171,
            0.23333334922790527,
            0.20000001788139343,
            0.1666666716337204,
            0.13333334028720856,
            0.10000000894069672,
            0.06666667014360428,
            0.03333333507180214,
            0.0,
        ];
        let lin_0_099_31: [f64; 31] = [
            0.0,
            0.032999999821186066,
            0.06599999964237213,
            0.0989999994635582,
            0.13199999928474426,
            0.16499999165534973,
            0.1979999989271164,
            0.23100000619888306,
            0.2639999985694885,
            0.296999990940094,
            0.32999998331069946,
            0.3630000054836273,
            0.3959999978542328,
            0.42899999022483826,
            0.4620000123977661,
            0.4950000047683716,
            0.527999997138977,
            0.5609999895095825,
            0.593999981880188,
            0.6270000338554382,
            0.6600000262260437,
            0.6930000185966492,
            0.7260000109672546,
            0.7590000033378601,
            0.7919999957084656,
            0.824999988079071,
            0.8580000400543213,
            0.8910000324249268,
            0.9240000247955322,
            0.9570000171661377,
            0.9900000095367432,
        ];
        let lin_0_32_31: [f64; 31] = [
            0.0,
            1.0666667222976685,
            2.133333444595337,
            3.200000286102295,
            4.266666889190674,
            5.333333492279053,
            6.40000057220459,
            7.466667175292969,
            8.533333778381348,
            9.600000381469727,
            10.666666984558105,
            11.733333587646484,
            12.80000114440918,
            13.866667747497559,
            14.933334350585938,
            15.999999046325684,
            17.066665649414062,
            18.133333206176758,
            19.19999885559082,
            20.266666412353516,
            21.333332061767578,
            22.399999618530273,
            23.46666717529297,
            24.53333282470703,
            25.600000381469727,
            26.66666603088379,
            27.733333587646484,
            28.799999237060547,
            29.866666793823242,
            30.933332443237305,
            32.0,
        ];
        let lin_0_30_10: [f64; 10] = [
            0.0,
            3.3333332538604736,
            6.666666507720947,
            10.0,
            13.333333015441895,
            16.666667938232422,
            20.0,
            23.33333396911621,
            26.66666603088379,
            30.0,
        ];
        let lin_0_09_10: [f64; 10] = [
            0.0,
            0.09999999403953552,
            0.19999998807907104,
            0.29999998211860657,
            0.3999999761581421,
            0.5,
            0.6000000238418579,
            0.699999988079071,
            0.7999999523162842,
            0.8999999761581421,
        ];
        let aa_tx_224: [f64; 10] = [
            0.0,
            11.278952598571777,
            22.557905197143555,
            33.836856842041016,
            45.11581039428711,
            56.3947639465332,
            67.67371368408203,
            78.95266723632812,
            90.23162078857422,
            101.51057434082031,
        ];
        let check = |want: &[f64], start: f64, end: f64| {
            let n = want.len() as u32;
            let got: Vec<f64> = (0..n).map(|k| f64::from(linspace_f32(start, end, n, k))).collect();
            assert_eq!(got, want, "linspace({start}, {end}, {n})");
        };
        check(&lin_0_03_31, 0.0, 0.3);
        check(&lin_0_09_31, 0.0, 0.9);
        check(&lin_1_0_31, 1.0, 0.0);
        check(&lin_0_099_31, 0.0, 0.99);
        check(&lin_0_32_31, 0.0, 32.0);
        check(&lin_0_30_10, 0.0, 30.0);
        check(&lin_0_09_10, 0.0, 0.9);
        check(&aa_tx_224, 0.0, 150.0 / 331.0 * 224.0);
        let bits = |top, div, n| (0..n).map(|k| posterize_bits(top, div, n, k) as u8).collect::<Vec<_>>();
        assert_eq!(
            bits(8.0, 4.0, 31),
            [8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4]
        );
        assert_eq!(
            bits(8.0, 6.0, 31),
            [8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2]
        );
        assert_eq!(bits(8.0, 4.0, 10), [8, 8, 7, 7, 6, 6, 5, 5, 4, 4]);
        assert_eq!(bits(4.0, 4.0, 10), [4, 4, 3, 3, 2, 2, 1, 1, 0, 0]);
    }

    #[test]
    fn augmix_weights_sum_to_one_and_chains_have_their_depth() {
        let kind = PolicyKind::AugMix { severity: 3, width: 3, depth: -1, alpha: 1.0, all_ops: true };
        for i in 0..200 {
            let t = trace(&kind, &mut SampleRng::new(1, 0, i, 0x100), (32, 32));
            let mut sum = t[0];
            let mut at = 1;
            for _ in 0..3 {
                sum += t[at];
                let d = t[at + 1] as usize;
                assert!((1..=3).contains(&d));
                at += 2 + 2 * d;
            }
            assert_eq!(at, t.len());
            assert!((sum - 1.0).abs() < 1e-5, "{sum}");
        }
    }
}
