//! program — how a transform list is compiled into the per-sample program the workers run, between decode and
//! staging.
//!
//! A user's list (torchvision order, any order of ops) becomes three stages:
//!
//! 1. **The folded prefix.** The longest leading run of geometric ops the decode can absorb —
//!    `RandomResizedCrop`, `Resize`, `CenterCrop`, `RandomHorizontalFlip`, `RandomVerticalFlip` — is compiled by
//!    [`super::geometry`] into one crop rectangle in original coordinates + output size + flips, which the
//!    decoder turns into an ROI + DCT-scaled decode and the fused resampler into output rows. When the list
//!    starts with anything else the prefix is the identity (the whole image, decoded at full size, no
//!    resampling). The prefix ends at the first op it cannot absorb: every op after it runs in stage 2, so a
//!    flip after `ColorJitter` is a pixel op, not a folded one (the result is the same; only the cost differs).
//! 2. **The pixel ops** ([`super::ops`]), in list order, on the prefix's output as a uint8 HWC image of the
//!    loader's channel count (1 or 3) held in the worker's scratch ([`ProgramScratch`]: two buffers that ops
//!    ping-pong between when they change the size, grown to the largest sample and then reused, so no allocation
//!    per sample). Op `pos` draws from `SampleRng(seed, epoch, index, OP_BASE + pos)`.
//! 3. **The final write**: normalize/cast/layout through the same lookup table as the fused path, row by row
//!    from the uint8 image into the batch slot.
//!
//! When stage 2 is empty (today's train/eval recipes) stages 1 and 3 are the one fused pass of
//! [`super::SamplePipeline::process`], unchanged: no intermediate image is written.
//!
//! The output size must be fixed by the compiled list: the prefix fixes it (a crop or exact resize), or a later
//! `RandomCrop` does; `Pad` adds to it. Otherwise the list is refused, naming `transforms`.

use super::geometry::{self, CompiledTransforms};
use super::ops::{self, Drawn, Frame, OpScratch, OpSpec};
use super::{SampleKey, TRANSFORMS, TransformSpec};
use crate::error::{Result, TrdataError};
use crate::rng::{OP_BASE, SampleRng};

/// A compiled list: the folded prefix and the ops that run on the uint8 image.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// Stage 1 (the identity geometry when nothing folds).
    pub prefix: CompiledTransforms,
    /// Stage 2: (list position, op).
    pub ops: Vec<(usize, OpSpec)>,
    /// Output (height, width) of every sample.
    pub output_hw: (usize, usize),
}

/// Whether the decode can absorb `t` (see the module docs).
fn foldable(t: &TransformSpec) -> bool {
    matches!(
        t,
        TransformSpec::RandomResizedCrop { .. }
            | TransformSpec::ResizeShorter { .. }
            | TransformSpec::ResizeExact { .. }
            | TransformSpec::ResizeKeepRatio { .. }
            | TransformSpec::CenterCrop { .. }
            | TransformSpec::RandomHorizontalFlip { .. }
            | TransformSpec::Op(OpSpec::VerticalFlip { .. })
            | TransformSpec::Resampled { .. }
    )
}

/// Validate `transforms` and compile them (errors name the parameter and the op's position).
pub fn compile(transforms: &[TransformSpec]) -> Result<Program> {
    let split = transforms.iter().position(|t| !foldable(t)).unwrap_or(transforms.len());
    let (head, tail) = transforms.split_at(split);
    let folds_geometry = head.iter().any(|t| {
        !matches!(t, TransformSpec::RandomHorizontalFlip { .. } | TransformSpec::Op(OpSpec::VerticalFlip { .. }))
    });
    // A prefix of flips alone is the identity geometry with those flips; an empty list is refused by geometry
    // (nothing fixes the size).
    let prefix =
        if folds_geometry || tail.is_empty() { geometry::compile(head)? } else { geometry::compile_identity(head)? };
    let mut ops = Vec::new();
    for (i, t) in tail.iter().enumerate() {
        let pos = split + i;
        let op = match t {
            TransformSpec::Op(op) => op.clone(),
            TransformSpec::RandomHorizontalFlip { p } => OpSpec::HorizontalFlip { p: *p },
            other => {
                return Err(TrdataError::config(
                    TRANSFORMS,
                    format!(
                        "{} at transforms[{pos}] must come before the pixel ops (a resize or centre crop after \
                         {} at transforms[{split}] is not supported yet: put the geometric ops first)",
                        geometry::name(other),
                        op_name(&transforms[split]),
                    ),
                ));
            }
        };
        op.check(pos)?;
        ops.push((pos, op));
    }
    let mut hw = prefix.output_hw();
    for (_, op) in &ops {
        hw = op.output_hw(hw);
    }
    let Some(output_hw) = hw else {
        return Err(TrdataError::config(
            TRANSFORMS,
            "must fix the output size: start with a crop or resize (RandomResizedCrop, Resize((h, w)), Resize(int) + \
             CenterCrop, CenterCrop) or end the size changes with RandomCrop; images of different sizes cannot be \
             batched",
        ));
    };
    for (side, v) in [("height", output_hw.0), ("width", output_hw.1)] {
        if v > ops::MAX_SIDE as usize {
            return Err(TrdataError::config(
                TRANSFORMS,
                format!("output {side} {v} must be at most {} (padding adds up)", ops::MAX_SIDE),
            ));
        }
    }
    Ok(Program { prefix, ops, output_hw })
}

/// The op's name for messages.
fn op_name(t: &TransformSpec) -> &'static str {
    match t {
        TransformSpec::Op(op) => op.name(),
        other => geometry::name(other),
    }
}

/// The worker's scratch of stage 2 (see the module docs).
#[derive(Debug, Default)]
pub struct ProgramScratch {
    /// The current image.
    pub frame: Frame,
    /// The ops' spare buffers.
    pub ops: OpScratch,
}

/// The stream of op `pos` for sample `key`.
pub fn op_rng(key: SampleKey, pos: usize) -> SampleRng {
    SampleRng::new(key.seed, key.epoch, key.index, OP_BASE + pos as u32)
}

impl Program {
    /// Run stage 2 on `s.frame` (already holding the prefix's output). An op that cannot run on this sample (a
    /// `RandomCrop` larger than the padded image, as torchvision raises) → the message.
    pub fn run_ops(&self, s: &mut ProgramScratch, key: SampleKey) -> std::result::Result<(), String> {
        for (pos, op) in &self.ops {
            let mut rng = op_rng(key, *pos);
            let drawn = op.sample(&mut rng, (s.frame.h, s.frame.w, s.frame.c))?;
            if drawn != Drawn::Skip {
                ops::apply(op, &drawn, &mut s.frame, &mut s.ops, &mut rng);
            }
        }
        Ok(())
    }
}

/// What op `op` draws for sample `key` on an `h × w × c` image (tests compare its distribution with
/// torchvision's; `_core.sample_op` exposes it).
pub fn sample_op(op: &OpSpec, pos: usize, key: SampleKey, hwc: (usize, usize, usize)) -> Result<Vec<f64>> {
    op.check(pos)?;
    op.trace(&mut op_rng(key, pos), hwc).map_err(|m| TrdataError::config(TRANSFORMS, m))
}
