//! The timm family: timm's policies (`rand-m9-mstd0.5-inc1`…, AutoAugment, AugMix), its `RandomErasing` and
//! `CenterCropOrPad`, each one [`super::Op`]. The policies' and erasing's values and Pillow-exact runs live with
//! their kernels in [`crate::augment::timm`] (which holds their structs); this file adds their spec parsing and
//! delegates the rest.

use super::{Arg, Args, Drawn, MAX_SIDE, Op, OpScratch, PADDING_MODE, SIZE, bad, check_fill, fill_bytes};
use crate::augment::kernels::{self, Frame, PadMode};
use crate::augment::site::Site;
use crate::augment::timm::TimmRandomErasing;
use crate::augment::timm::{self as pillow, AugmentOp, ERASE_MODE, TIMM_INTERPOLATION, TIMM_OPS, TimmKind, TimmPolicy};
use crate::error::{Result, TrdataError};
use crate::rng::SampleRng;

/// timm's op names (an `Arg::List` of strings) → ops.
fn timm_ops(a: &Arg) -> Result<Vec<AugmentOp>> {
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
fn timm_steps(a: &Arg) -> Result<Vec<(AugmentOp, f64, f64)>> {
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

/// `mean`/`std` as three channels (one value stands for all; an empty list gives NaN, which the check refuses).
fn channels(v: Vec<f64>) -> [f64; 3] {
    std::array::from_fn(|k| v.get(k.min(v.len().saturating_sub(1))).copied().unwrap_or(f64::NAN))
}

impl Op for TimmPolicy {
    const KINDS: &'static [&'static str] = &["timm_rand_augment", "timm_auto_augment", "timm_augmix"];

    /// The kind's own arguments, then the hparams every kind shares (magnitude_std, magnitude_max, fill,
    /// interpolation, translate_pct); values are checked by [`TimmPolicy::check`].
    fn parse(a: &Args<'_>) -> Result<Self> {
        let kind = match a.kind() {
            "timm_rand_augment" => TimmKind::RandAugment {
                num_layers: a.uint("num_layers")?,
                magnitude: a.num("magnitude")?,
                prob: a.num("p")?,
                ops: timm_ops(a.get("ops")?)?,
                weights: if a.is_none("weights")? { None } else { Some(a.nums("weights")?) },
            },
            "timm_auto_augment" => TimmKind::AutoAugment {
                sub_policies: match a.get("policy")? {
                    Arg::List(subs) => subs.iter().map(timm_steps).collect::<Result<Vec<_>>>()?,
                    other => return Err(TrdataError::config("policy", format!("{other:?} must be a list"))),
                },
            },
            _ => TimmKind::AugMix {
                ops: timm_ops(a.get("ops")?)?,
                magnitude: a.num("magnitude")?,
                alpha: a.num("alpha")?,
                width: a.uint("width")?,
                depth: a.int("depth")? as i32,
            },
        };
        let magnitude_std = a.num("magnitude_std")?;
        let magnitude_max = a.num("magnitude_max")?;
        let fill = a.nums("fill")?;
        let translate_pct = a.num("translate_pct")?;
        let interp = a.choice(&TIMM_INTERPOLATION)?;
        Ok(TimmPolicy { kind, magnitude_std, magnitude_max, fill, interp, translate_pct })
    }

    fn name(&self) -> &'static str {
        TimmPolicy::name(self)
    }

    fn check(&self, _op: &str, pos: Site) -> Result<()> {
        TimmPolicy::check(self, pos)
    }

    /// A policy decides while it runs (no per-sample list); [`Op::trace`] shows its decisions.
    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn trace(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Vec<f64>, String> {
        Ok(pillow::trace(self, rng))
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, rng: &mut SampleRng) {
        pillow::run(self, frame, &mut scratch.spare, &mut scratch.timm, rng)
    }
}

impl Op for TimmRandomErasing {
    const KINDS: &'static [&'static str] = &["timm_random_erasing"];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(TimmRandomErasing {
            p: a.num("p")?,
            min_area: a.num("min_area")?,
            max_area: a.num("max_area")?,
            aspect: a.pair("ratio")?,
            min_count: a.uint("min_count")?,
            max_count: a.uint("max_count")?,
            mode: a.choice(&ERASE_MODE)?,
            mean: channels(a.nums("mean")?),
            std: channels(a.nums("std")?),
        })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "timm RandomErasing"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        TimmRandomErasing::check(self, op, pos)
    }

    /// The boxes are drawn while it runs; [`Op::trace`] lists them.
    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn trace(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Vec<f64>, String> {
        let mut out = Vec::new();
        pillow::erase(self, None, (h, w), rng, |b| out.extend(b.map(|v| v as f64)));
        Ok(out)
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, _: &mut OpScratch, rng: &mut SampleRng) {
        let hw = (frame.h, frame.w);
        pillow::erase(self, Some(frame), hw, rng, |_| {});
    }
}

/// timm's `CenterCropOrPad(size, fill, padding_mode)`: pad the short dimensions by `(size - side) // 2` before
/// (the rest after) with `fill`/`mode`, then crop the centre (`round((side - size) / 2)`, half to even).
#[derive(Debug, Clone, PartialEq)]
pub struct CenterCropOrPad {
    /// Output height.
    pub height: u32,
    /// Output width.
    pub width: u32,
    /// Constant fill (pixel units).
    pub fill: Vec<f64>,
    /// Padding mode.
    pub mode: PadMode,
}

impl Op for CenterCropOrPad {
    const KINDS: &'static [&'static str] = &["center_crop_or_pad"];

    fn parse(a: &Args<'_>) -> Result<Self> {
        let size = a.uint_pair(SIZE)?;
        Ok(CenterCropOrPad { height: size.0, width: size.1, fill: a.nums("fill")?, mode: a.choice(&PADDING_MODE)? })
    }

    fn name(&self) -> &'static str {
        "CenterCropOrPad"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (height, width) = (self.height, self.width);
        if !(1..=MAX_SIDE).contains(&height) || !(1..=MAX_SIDE).contains(&width) {
            return Err(bad(SIZE, format!("({height}, {width})"), &format!("be in 1..={MAX_SIDE}"), op, pos));
        }
        check_fill(&self.fill, op, pos)
    }

    fn output_hw(&self, _: Option<(usize, usize)>) -> Option<(usize, usize)> {
        Some((self.height as usize, self.width as usize))
    }

    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        // timm's center_crop_or_pad: a padded dimension starts `(size - side) // 2` before the image; a cropped
        // one at `round((side - size) / 2)`.
        let start = |side: usize, size: usize| -> isize {
            if size > side {
                -(((size - side) / 2) as isize)
            } else {
                ((side - size) as f64 / 2.0).round_ties_even() as isize
            }
        };
        let (oh, ow) = (self.height as usize, self.width as usize);
        let n = frame.h * frame.w * frame.c;
        let origin = (start(frame.h, oh), start(frame.w, ow));
        let hwc = (frame.h, frame.w, frame.c);
        kernels::pad_crop(
            &frame.buf[..n],
            hwc,
            &mut scratch.spare,
            (oh, ow),
            origin,
            self.mode,
            &fill_bytes(&self.fill),
        );
        std::mem::swap(&mut frame.buf, &mut scratch.spare);
        (frame.h, frame.w) = (oh, ow);
    }
}
