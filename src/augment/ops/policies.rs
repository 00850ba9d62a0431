//! The policies family: torchvision's `AutoAugment`, `RandAugment`, `TrivialAugmentWide` and `AugMix` as one
//! [`super::Op`] whose run is [`crate::augment::policy`] (the sub-ops and their magnitude tables live there).

use super::{Args, CHAIN_DEPTH, Drawn, MAGNITUDE, MAX_POLICY_OPS, MIXTURE_WIDTH, NUM_OPS, Op, OpScratch, SEVERITY};
use super::{DefaultValue, NUM_MAGNITUDE_BINS, bad, check_bins, check_opt_fill, default as g, fill_f32};
use crate::augment::kernels::Frame;
use crate::augment::policy::{self, AA_POLICY, PolicyKind, WarpStyle};
use crate::augment::site::Site;
use crate::augment::warp::{Interp, WARP_INTERPOLATION};
use crate::error::Result;
use crate::rng::SampleRng;

/// `AutoAugment`, `RandAugment`, `TrivialAugmentWide` or `AugMix` (see [`crate::augment::policy`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Which policy and its parameters.
    pub kind: PolicyKind,
    /// Interpolation of the warping sub-ops.
    pub interp: Interp,
    /// `None` (torchvision's default for the policies) = zero padding; else the mask-path fill.
    pub fill: Option<Vec<f64>>,
}

impl Op for Policy {
    const KINDS: &'static [&'static str] = &["auto_augment", "rand_augment", "trivial_augment_wide", "augmix"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("AutoAugment.policy", DefaultValue::Str(g::AA_POLICY)),
        ("AutoAugment.interpolation", DefaultValue::Str(g::NEAREST)),
        ("RandAugment.interpolation", DefaultValue::Str(g::NEAREST)),
        ("TrivialAugmentWide.interpolation", DefaultValue::Str(g::NEAREST)),
        ("RandAugment.num_ops", DefaultValue::Int(g::RA_NUM_OPS as i64)),
        ("RandAugment.magnitude", DefaultValue::Int(g::RA_MAGNITUDE as i64)),
        ("RandAugment.num_magnitude_bins", DefaultValue::Int(g::MAGNITUDE_BINS as i64)),
        ("TrivialAugmentWide.num_magnitude_bins", DefaultValue::Int(g::MAGNITUDE_BINS as i64)),
        ("AugMix.severity", DefaultValue::Int(g::AUGMIX_SEVERITY as i64)),
        ("AugMix.mixture_width", DefaultValue::Int(g::AUGMIX_WIDTH as i64)),
        ("AugMix.chain_depth", DefaultValue::Int(g::AUGMIX_DEPTH as i64)),
        ("AugMix.alpha", DefaultValue::Num(g::AUGMIX_ALPHA)),
        ("AugMix.all_ops", DefaultValue::Bool(g::AUGMIX_ALL_OPS)),
        ("AugMix.interpolation", DefaultValue::Str(g::BILINEAR)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        // The policy's own arguments, then interpolation and fill.
        let kind = match a.kind() {
            "auto_augment" => PolicyKind::AutoAugment(a.choice(&AA_POLICY)?),
            "rand_augment" => PolicyKind::RandAugment {
                num_ops: a.uint(NUM_OPS)?,
                magnitude: a.uint(MAGNITUDE)?,
                bins: a.uint(NUM_MAGNITUDE_BINS)?,
            },
            "trivial_augment_wide" => PolicyKind::TrivialAugmentWide { bins: a.uint(NUM_MAGNITUDE_BINS)? },
            _ => PolicyKind::AugMix {
                severity: a.uint(SEVERITY)?,
                width: a.uint(MIXTURE_WIDTH)?,
                depth: a.int(CHAIN_DEPTH)? as i32,
                alpha: a.num("alpha")?,
                all_ops: a.boolean("all_ops")?,
            },
        };
        Ok(Policy { kind, interp: a.choice(&WARP_INTERPOLATION)?, fill: a.opt_fill()? })
    }

    fn name(&self) -> &'static str {
        match self.kind {
            PolicyKind::AutoAugment(_) => "AutoAugment",
            PolicyKind::RandAugment { .. } => "RandAugment",
            PolicyKind::TrivialAugmentWide { .. } => "TrivialAugmentWide",
            PolicyKind::AugMix { .. } => "AugMix",
        }
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        match self.kind {
            PolicyKind::AutoAugment(_) => {}
            PolicyKind::RandAugment { num_ops, magnitude, bins } => {
                check_bins(bins, op, pos)?;
                if num_ops > MAX_POLICY_OPS {
                    return Err(bad(NUM_OPS, num_ops, &format!("be in 0..={MAX_POLICY_OPS}"), op, pos));
                }
                if magnitude >= bins {
                    return Err(bad(MAGNITUDE, magnitude, &format!("be below num_magnitude_bins ({bins})"), op, pos));
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
        check_opt_fill(&self.fill, op, pos)
    }

    /// A policy decides while it runs (no per-sample list); [`Op::trace`] shows its decisions.
    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn trace(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Vec<f64>, String> {
        Ok(policy::trace(&self.kind, rng, (h, w)))
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, rng: &mut SampleRng) {
        let style = WarpStyle { interp: self.interp, fill: fill_f32(&self.fill) };
        policy::run(&self.kind, style, frame, &mut scratch.policy, rng);
    }
}
