//! program — how a transform list is compiled into the per-sample program the workers run, between decode and
//! staging.
//!
//! A user's list (torchvision order, any order of ops) becomes three stages:
//!
//! 1. **The folded prefix.** The longest leading run of geometric ops the decode can absorb and that forms one of
//!    geometry's lists — `[RandomResizedCrop]`, `[Resize(int), CenterCrop]`, `[Resize((h, w))]`,
//!    `[Resize((h, w)), CenterCrop]`, `[CenterCrop]`, or `[RandomCrop]` when it cannot fail and pads with zeros
//!    ([`geometry::random_crop_folds`]), with `RandomHorizontalFlip`/`RandomVerticalFlip` anywhere among them —
//!    is compiled by [`super::geometry`] into one crop rectangle in original coordinates + output size + flips,
//!    which the decoder turns into an ROI + DCT-scaled decode (a folded RandomCrop: ROI only, no scaling) and the
//!    fused resampler into output rows. When the list starts with anything else the prefix is the identity (the
//!    whole image, decoded at full size, no resampling). Every op after the prefix runs in stage 2, so a flip
//!    after `ColorJitter` is a pixel op, not a folded one (the result is the same; only the cost differs).
//! 2. **The stage-2 ops** ([`super::ops`]), in list order, on the prefix's output as a uint8 HWC image of the
//!    loader's channel count (1 or 3) held in the worker's scratch ([`ProgramScratch`]: two buffers that ops
//!    ping-pong between when they change the size, grown to the largest sample and then reused, so no allocation
//!    per sample). Geometric ops may come anywhere: a `Resize`, `CenterCrop` or `RandomResizedCrop` after a
//!    pixel op (or after the prefix) becomes its stage-2 op ([`stage2_op`]) and runs with torchvision v2's
//!    semantics on uint8 tensors, through the fused pass's own resampler (`stage2::resize_box` says where
//!    the rounding differs). Containers (`RandomApply`, `RandomChoice`, `RandomOrder`) hold stage-2 ops and
//!    run them as their draw says.
//!
//!    Randomness: the op at [`Site`] `s` draws from `SampleRng(seed, epoch, index, s.stream())` — `OP_BASE +
//!    pos` for a top-level op, a stream of its own (position, inner position, …) for an op inside containers
//!    ([`Site::stream`]) — so every draw is a function of (seed, epoch, index, op position) only, whatever a
//!    container decided for the ops around it.
//! 3. **The final write**: normalize/cast/layout through the same lookup table as the fused path, row by row
//!    from the uint8 image into the batch slot.
//!
//! When stage 2 is empty (today's train/eval recipes) stages 1 and 3 are the one fused pass of
//! [`super::SamplePipeline::process`], unchanged: no intermediate image is written.
//!
//! The output size must be fixed by the compiled list: the prefix fixes it (a crop or exact resize), or a later
//! crop or exact resize does (a shorter-side resize of a fixed size is fixed too); `Pad` adds to it; a container
//! must give one size whichever branch runs ([`OpSpec::output_hw_at`]). Otherwise the list is refused, naming
//! `transforms` — unless every image of the source has one size (raw pixel stores), which then fixes it
//! ([`sized_by_source`]).

use super::geometry::{self, CompiledTransforms, Resample};
use super::mosaic::MosaicStage;
use super::ops::{self, Drawn, Frame, OpScratch, OpSpec, ResizeTo, Site};
use super::{SampleKey, TRANSFORMS, TransformSpec};
use crate::error::{Result, TrdataError};
use crate::rng::SampleRng;

/// A compiled list: the folded prefix and the ops that run on the uint8 image.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// Stage 1 (the identity geometry when nothing folds).
    pub prefix: CompiledTransforms,
    /// Stage 2: (list position, op).
    pub ops: Vec<(usize, OpSpec)>,
    /// Output (height, width) of every sample: the canvas with `pad_to`.
    pub output_hw: (usize, usize),
    /// `pad_to`: each sample keeps the size its transforms give it (at most the canvas), at the canvas's top left.
    pub pad_to: Option<(usize, usize)>,
    /// A leading `Mosaic` (augment/mosaic.rs): the parts are decoded onto its canvas, the prefix is the identity
    /// over that canvas and every other op runs in stage 2.
    pub mosaic: Option<MosaicStage>,
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
            | TransformSpec::Op(OpSpec::VerticalFlip(_))
            | TransformSpec::Resampled { .. }
    ) || matches!(t, TransformSpec::Op(op) if geometry::random_crop_folds(op) || matches!(op, OpSpec::ScaleJitter(_)))
}

/// Whether `t` is a flip (folds anywhere in the prefix without fixing its geometry).
fn is_flip(t: &TransformSpec) -> bool {
    matches!(t, TransformSpec::RandomHorizontalFlip { .. } | TransformSpec::Op(OpSpec::VerticalFlip(_)))
}

/// The geometric kind of a foldable non-flip op, looking through `Resampled` (1 RandomResizedCrop, 2
/// Resize(int), 3 Resize((h, w)), 4 CenterCrop, 5 a folding RandomCrop, 6 timm's ResizeKeepRatio).
fn geo_kind(t: &TransformSpec) -> u8 {
    match t {
        TransformSpec::Resampled { inner, .. } => geo_kind(inner),
        TransformSpec::RandomResizedCrop { .. } => 1,
        TransformSpec::ResizeShorter { .. } => 2,
        TransformSpec::ResizeExact { .. } => 3,
        TransformSpec::CenterCrop { .. } => 4,
        TransformSpec::Op(OpSpec::RandomCrop(_)) => 5,
        TransformSpec::ResizeKeepRatio { .. } => 6,
        TransformSpec::Op(OpSpec::ScaleJitter(_)) => 7,
        _ => 0,
    }
}

/// How many leading ops of `head` (a run of foldable ops) the decode absorbs: the longest prefix whose geometric
/// ops form one of geometry's lists ([RandomResizedCrop], [Resize(int), CenterCrop], [Resize((h, w))],
/// [Resize((h, w)), CenterCrop], [CenterCrop], [RandomCrop] when `geometry::random_crop_folds`, timm's
/// [ResizeKeepRatio] and [ResizeKeepRatio, CenterCrop]; flips anywhere
/// among them), plus the flips right after it; the
/// rest runs in stage 2. `None` when no such prefix exists (then only the leading flips fold, onto the identity
/// geometry).
fn fold_len(head: &[TransformSpec]) -> Option<usize> {
    const LISTS: [&[u8]; 9] = [&[1], &[2, 4], &[3], &[3, 4], &[4], &[5], &[6], &[6, 4], &[7, 5]];
    let mut kinds = Vec::new();
    let mut best = None;
    for (i, t) in head.iter().enumerate() {
        if !is_flip(t) {
            kinds.push(geo_kind(t));
        }
        if !is_flip(t) && LISTS.contains(&kinds.as_slice()) {
            best = Some(i + 1);
        }
    }
    best.map(|b| b + head[b..].iter().take_while(|t| is_flip(t)).count())
}

/// The stage-2 op of a transform (a geometric op after a pixel op becomes its uint8 op; `Resampled` gives its
/// resize the filter). `interpolation` on an op that does not resample is refused, naming the op's site.
pub fn stage2_op(t: &TransformSpec, at: Site) -> Result<OpSpec> {
    Ok(match t {
        TransformSpec::Op(op) => op.clone(),
        TransformSpec::RandomHorizontalFlip { p } => OpSpec::HorizontalFlip(ops::HorizontalFlip { p: *p }),
        TransformSpec::RandomResizedCrop { height, width, scale, ratio } => {
            OpSpec::RandomResizedCrop(ops::RandomResizedCrop {
                height: *height,
                width: *width,
                scale: *scale,
                ratio: *ratio,
                resample: Resample::default(),
            })
        }
        TransformSpec::ResizeShorter { shorter } => {
            let size = ResizeTo::Shorter(*shorter);
            OpSpec::Resize(ops::Resize { size, max_size: None, resample: Resample::default() })
        }
        TransformSpec::ResizeExact { height, width } => {
            let size = ResizeTo::Exact(*height, *width);
            OpSpec::Resize(ops::Resize { size, max_size: None, resample: Resample::default() })
        }
        TransformSpec::CenterCrop { height, width } => {
            OpSpec::CenterCrop(ops::CenterCrop { height: *height, width: *width })
        }
        TransformSpec::ResizeKeepRatio { .. } => {
            return Err(TrdataError::config(
                TRANSFORMS,
                format!(
                    "timm's ResizeKeepRatio at {at} must come before the pixel ops (it folds into the decode only)"
                ),
            ));
        }
        TransformSpec::Resampled { resample: r, inner } => match stage2_op(inner, at)? {
            OpSpec::Resize(op) => OpSpec::Resize(ops::Resize { resample: *r, ..op }),
            OpSpec::RandomResizedCrop(op) => OpSpec::RandomResizedCrop(ops::RandomResizedCrop { resample: *r, ..op }),
            other => {
                return Err(TrdataError::config(
                    "interpolation",
                    format!(
                        "is only for Resize and RandomResizedCrop, not {} ({} at {at})",
                        other.name(),
                        other.name()
                    ),
                ));
            }
        },
    })
}

/// Validate `transforms` and compile them (errors name the parameter and the op's position).
pub fn compile(transforms: &[TransformSpec]) -> Result<Program> {
    compile_sized(transforms, None, None)
}

/// `pad_to`: each side of the canvas, in 1..=`ops::MAX_SIDE` (checked by [`compile_on`]).
pub const PAD_TO: crate::param::IntParam = crate::param::IntParam::new("pad_to", 1, ops::MAX_SIDE as i128);

/// [`compile`] for a loader with `pad_to` = (height, width) (`None`: [`compile`]): the list need not fix the
/// output size — each sample keeps its own, placed at the top left of the canvas (`SamplePipeline::run_stages`
/// refuses a sample larger than it) — and a list that does fix it must fit the canvas.
pub fn compile_on(transforms: &[TransformSpec], pad_to: Option<(usize, usize)>) -> Result<Program> {
    if let Some((h, w)) = pad_to {
        PAD_TO.check::<usize>(h as i128)?;
        PAD_TO.check::<usize>(w as i128)?;
    }
    compile_sized(transforms, None, pad_to)
}

/// [`compile`] for a source whose images all have `source_hw` = (height, width) (raw pixel stores: see
/// [`sized_by_source`]): the identity prefix then has that size, so the list needs no crop of its own.
fn compile_sized(
    transforms: &[TransformSpec],
    source_hw: Option<(usize, usize)>,
    pad_to: Option<(usize, usize)>,
) -> Result<Program> {
    let run = transforms.iter().position(|t| !foldable(t)).unwrap_or(transforms.len());
    let leading_flips = transforms.iter().take_while(|t| is_flip(t)).count();
    let mosaic = match transforms.first() {
        Some(TransformSpec::Op(op @ OpSpec::Mosaic(m))) => {
            op.check(0)?;
            Some(MosaicStage::new(m.clone())?)
        }
        _ => None,
    };
    let (split, prefix) = match fold_len(&transforms[..run]) {
        // nothing folds into a mosaic's parts: every op after it runs on its canvas
        _ if mosaic.is_some() => (1, geometry::compile_identity(&[])?),
        Some(k) => (k, geometry::compile(&transforms[..k])?),
        // Nothing fixes the size: an all-flip list is refused by geometry (its message says what would).
        None if leading_flips == transforms.len() && source_hw.is_none() && pad_to.is_none() => {
            (leading_flips, geometry::compile(transforms)?)
        }
        None => (leading_flips, geometry::compile_identity(&transforms[..leading_flips])?),
    };
    let mut ops = Vec::new();
    let mut hw = match (&mosaic, &prefix.geometry) {
        (Some(m), _) => Some((m.canvas(), m.canvas())),
        (None, geometry::Geometry::Identity) => source_hw,
        _ => prefix.output_hw(),
    };
    for (i, t) in transforms[split..].iter().enumerate() {
        let pos = split + i;
        let op = stage2_op(t, Site::top(pos))?;
        op.check(pos)?;
        hw = op.output_hw_at(hw, Site::top(pos))?;
        ops.push((pos, op));
    }
    if let Some(canvas) = pad_to {
        if let Some((h, w)) = hw
            && (h > canvas.0 || w > canvas.1)
        {
            return Err(TrdataError::config(
                "pad_to",
                format!("{canvas:?} must hold the transforms' output ({h}, {w}): each image is placed on it"),
            ));
        }
        return Ok(Program { prefix, ops, output_hw: canvas, pad_to, mosaic });
    }
    let Some(output_hw) = hw else {
        if run == transforms.len() {
            // A list of foldable ops alone ([Resize(int)]): geometry's message says which list would fix the size.
            geometry::compile(transforms)?;
        }
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
    Ok(Program { prefix, ops, output_hw, pad_to: None, mosaic })
}

/// `transforms` for a source whose images all have one size, `source_hw` = (height, width) (raw pixel stores:
/// `trdata.Arrays`, MNIST, CIFAR, a packed file of raw records of one size; `None` for any other source).
///
/// Such a source needs no crop: the PyTorch tutorials' `Compose([ToTensor(), Normalize(..)])` (here `[]`), a
/// flip or a pixel op keeps every image at the source's size. A list that [`compile`] refuses only because
/// nothing fixes the output size, and whose size walk from `source_hw` is fixed, gets a trailing
/// `CenterCrop` of that size appended: a no-op on every sample (each already has it), it fixes the size for
/// [`compile`] without moving any op (their positions name them in errors and key their random streams). Every
/// other list is returned as it is, so its own rules (and its refusal) stay [`compile`]'s.
pub fn sized_by_source(mut transforms: Vec<TransformSpec>, source_hw: Option<(u32, u32)>) -> Vec<TransformSpec> {
    let Some((h, w)) = source_hw else { return transforms };
    if compile(&transforms).is_ok() {
        return transforms;
    }
    if let Ok(Program { output_hw: (oh, ow), .. }) = compile_sized(&transforms, Some((h as usize, w as usize)), None)
        && let (Ok(height), Ok(width)) = (u32::try_from(oh), u32::try_from(ow))
    {
        transforms.push(TransformSpec::CenterCrop { height, width });
    }
    transforms
}

/// The worker's scratch of stage 2 (see the module docs).
#[derive(Debug, Default)]
pub struct ProgramScratch {
    /// The current image.
    pub frame: Frame,
    /// The ops' spare buffers.
    pub ops: OpScratch,
    /// The sample's boxes (XYXY, source pixels) when its source has them (`None`: it has none).
    pub boxes: Option<Vec<[f64; 4]>>,
    /// The draws made from the boxes (RandomIoUCrop's), by site: `augment::targets::TargetPlan::replay`'s, made
    /// before stage 2 runs.
    pub box_draws: Vec<(Site, Drawn)>,
}

/// The stream of the op at `site` for sample `key` (`OP_BASE + pos` at the top level; [`Site::stream`] inside
/// containers).
pub fn op_rng(key: SampleKey, site: Site) -> SampleRng {
    SampleRng::new(key.seed, key.epoch, key.index, site.stream())
}

/// Run `op` (at `site`) on `s.frame`: draw from its own stream, then apply it — or, for a container, run the
/// inner ops its draw selects, each on the stream of its own [`Site::child`] (its position in the container's
/// list, whatever order they run in).
fn run_op(op: &OpSpec, site: Site, s: &mut ProgramScratch, key: SampleKey) -> std::result::Result<(), String> {
    let mut rng = op_rng(key, site);
    // A size the list does not fix (the identity prefix, or after an expanding rotation) may make an op's output
    // absurd on an odd sample: refuse the sample (its error policy applies) instead of allocating it.
    if let Some((oh, ow)) = op.oversized((s.frame.h, s.frame.w)) {
        return Err(format!(
            "{} at {site}: the image ({}, {}) would become ({oh}, {ow}); sides must be at most {} and pixels at \
             most {}",
            op.name(),
            s.frame.h,
            s.frame.w,
            ops::MAX_SIDE,
            ops::MAX_FRAME_PIXELS
        ));
    }
    let drawn = if op.needs_boxes() && op.inner().is_none() {
        // drawn from the boxes by the target replay, before stage 2 (SamplePipeline::run_stages)
        match s.box_draws.iter().find(|(at, _)| *at == site) {
            Some((_, d)) => d.clone(),
            None => return Err(format!("{} at {site}: no draw from the sample's boxes", op.name())),
        }
    } else {
        op.sample(&mut rng, (s.frame.h, s.frame.w, s.frame.c))?
    };
    if drawn == Drawn::Skip {
        return Ok(());
    }
    match op.inner() {
        Some(inner) => {
            for i in op.picked(&drawn) {
                run_op(&inner[i], site.child(i), s, key)?;
            }
            Ok(())
        }
        None => op.run(&drawn, &mut s.frame, &mut s.ops, &mut rng, site),
    }
}

/// `RandomZoomOut` at `site` and the `RandomIoUCrop` at `crop_site` right after it in one pass
/// (`RandomZoomOut::apply_cropped`), with the draws `run_op` would make; false (nothing done) when either op
/// draws nothing (then each runs on its own).
fn zoom_then_crop(
    zoom: &ops::RandomZoomOut,
    site: Site,
    crop_site: Site,
    s: &mut ProgramScratch,
    key: SampleKey,
) -> std::result::Result<bool, String> {
    use ops::Op as _;
    if zoom.oversized((s.frame.h, s.frame.w)).is_some() {
        return Ok(false); // run_op refuses the sample, as without the crop
    }
    let zoomed = zoom.sample(&mut op_rng(key, site), (s.frame.h, s.frame.w, s.frame.c))?;
    let crop = s.box_draws.iter().find(|(at, _)| *at == crop_site).map(|(_, d)| d.clone());
    match (&zoomed, crop) {
        (Drawn::Crop { .. }, Some(crop @ Drawn::Box { .. })) => {
            zoom.apply_cropped(&zoomed, &crop, &mut s.frame, &mut s.ops);
            Ok(true)
        }
        _ => Ok(false),
    }
}

impl Program {
    /// Whether stage 2 touches pixels: false when it is empty or holds only target-only ops
    /// (`SanitizeBoundingBoxes`, `ClampBoundingBoxes`), which then cost the fused pass nothing.
    pub fn moves_pixels(&self) -> bool {
        self.ops.iter().any(|(_, op)| !op.targets_only())
    }

    /// Run stage 2 on `s.frame` (already holding the prefix's output). An op that cannot run on this sample (a
    /// `RandomCrop` larger than the padded image, as torchvision raises) → the message.
    pub fn run_ops(&self, s: &mut ProgramScratch, key: SampleKey) -> std::result::Result<(), String> {
        let mut k = 0;
        while k < self.ops.len() {
            let (pos, op) = &self.ops[k];
            // ssd's RandomZoomOut → RandomIoUCrop: the crop's window only, never the zoomed canvas
            if let (OpSpec::RandomZoomOut(z), Some((next, OpSpec::RandomIoUCrop(_)))) = (op, self.ops.get(k + 1))
                && zoom_then_crop(z, Site::top(*pos), Site::top(*next), s, key)?
            {
                k += 2;
                continue;
            }
            run_op(op, Site::top(*pos), s, key)?;
            k += 1;
        }
        Ok(())
    }
}

/// What op `op` draws for sample `key` on an `h × w × c` image (tests compare its distribution with
/// torchvision's; `_core.sample_op` exposes it). For a container, its own decision: `[]`/`[1]` for
/// RandomApply, `[i]` for RandomChoice, the permutation for RandomOrder.
pub fn sample_op(op: &OpSpec, pos: usize, key: SampleKey, hwc: (usize, usize, usize)) -> Result<Vec<f64>> {
    op.check(pos)?;
    op.trace(&mut op_rng(key, Site::top(pos)), hwc).map_err(|m| TrdataError::config(TRANSFORMS, m))
}

#[cfg(test)]
#[path = "program_fuzz_tests.rs"]
mod fuzz_tests;
