//! The erase/noise family: ops that overwrite pixels with a fill or add per-element noise drawn from the op's own
//! stream (torchvision v2's `RandomErasing` and `GaussianNoise`), each one [`super::Op`].

use super::{Arg, DefaultValue, uniform_f32};
use super::{Args, Drawn, MEAN, Op, OpScratch, RATIO, SCALE, SIGMA, VALUE, bad, check_p, fill_bytes, gate, undrawn};
use crate::augment::default as tv;
use crate::augment::kernels::{self, Frame};
use crate::augment::site::Site;
use crate::error::{Result, TrdataError};
use crate::rng::SampleRng;

/// Erasing's fill.
#[derive(Debug, Clone, PartialEq)]
pub enum EraseValue {
    /// One value per channel (or one for all), in pixel units 0..=255 (truncated as torch casts floats).
    Values(Vec<f64>),
    /// `value="random"`: each erased element an independent normal draw, see [`RandomErasing`].
    Random,
}

/// `RandomErasing(p, scale, ratio, value)` on the uint8 image, before normalize: `value` in pixel units.
/// `Random` draws one N(0, 1) per erased element in [0, 1] units and writes `clamp(round(255 · v))`
/// (torchvision's `"random"` on a uint8 tensor casts N(0,1) floats and wraps negatives to 255 — noise of
/// 0, 1, 2, 254, 255 only — which no one wants; `from_torchvision` maps a `RandomErasing` placed after
/// `Normalize` into pixel units instead).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomErasing {
    /// Probability.
    pub p: f64,
    /// Erased area fraction range, within [0, 1].
    pub scale: (f64, f64),
    /// Aspect ratio range (log-uniform).
    pub ratio: (f64, f64),
    /// Fill.
    pub value: EraseValue,
}

impl Op for RandomErasing {
    const KINDS: &'static [&'static str] = &["random_erasing"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomErasing.p", DefaultValue::Num(tv::GATE_P)),
        ("RandomErasing.scale", DefaultValue::Pair(tv::ERASING_SCALE.0, tv::ERASING_SCALE.1)),
        ("RandomErasing.ratio", DefaultValue::Pair(tv::ERASING_RATIO.0, tv::ERASING_RATIO.1)),
        ("RandomErasing.value", DefaultValue::Num(tv::ERASING_VALUE)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomErasing {
            p: a.num("p")?,
            scale: a.pair("scale")?,
            ratio: a.pair("ratio")?,
            value: match a.get(VALUE)? {
                Arg::Str(s) if s == "random" => EraseValue::Random,
                Arg::Str(s) => {
                    return Err(TrdataError::config(
                        "value",
                        format!("{s:?} must be a number, a sequence or 'random'"),
                    ));
                }
                _ => EraseValue::Values(a.nums(VALUE)?),
            },
        })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RandomErasing"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)?;
        let (lo, hi) = self.scale;
        if !(0.0 <= lo && lo <= hi && hi <= 1.0) {
            return Err(bad(SCALE, format!("({lo}, {hi})"), "be within [0, 1] with min ≤ max", op, pos));
        }
        let (lo, hi) = self.ratio;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
            return Err(bad(RATIO, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
        }
        if let EraseValue::Values(v) = &self.value {
            if v.is_empty() || v.len() == 2 || v.len() > 3 {
                return Err(bad(VALUE, format!("{v:?}"), "be one number or one per channel (1 or 3)", op, pos));
            }
            if !v.iter().all(|&x| (0.0..256.0).contains(&x)) {
                return Err(bad(VALUE, format!("{v:?}"), "be in [0, 255] (pixel units of the uint8 image)", op, pos));
            }
        }
        Ok(())
    }

    fn sample(&self, rng: &mut SampleRng, (h, w, _c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        if !gate(rng, self.p) {
            return Ok(Drawn::Skip);
        }
        let (scale, ratio) = (self.scale, self.ratio);
        let area = (h * w) as f64;
        let log_ratio = ((ratio.0.ln() as f32) as f64, (ratio.1.ln() as f32) as f64);
        for _ in 0..10 {
            let erase_area = area * uniform_f32(rng, scale);
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
        Ok(Drawn::Skip)
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, _: &mut OpScratch, rng: &mut SampleRng) {
        let Drawn::Erase { top, left, h, w } = drawn else { undrawn(self.name(), drawn) };
        let b = (*top as usize, *left as usize, *h as usize, *w as usize);
        match &self.value {
            EraseValue::Values(v) => kernels::erase(&mut frame.view(), b, &fill_bytes(v)),
            EraseValue::Random => kernels::erase_random(&mut frame.view(), b, rng),
        }
    }
}

/// `GaussianNoise(mean, sigma, clip)` on uint8 as torchvision 0.29 defines it: per element
/// `trunc(f32(mean·255) + N(0,1)·f32(sigma·255))` added in int16, clamped to [0, 255] when `clip`, else
/// wrapped modulo 256. (`mean`/`sigma` are in [0, 1] units, as for float images.)
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianNoise {
    /// Mean, [0, 1] units.
    pub mean: f64,
    /// Standard deviation, [0, 1] units, ≥ 0.
    pub sigma: f64,
    /// Clamp to [0, 255] (else wrap).
    pub clip: bool,
}

impl Op for GaussianNoise {
    const KINDS: &'static [&'static str] = &["gaussian_noise"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("GaussianNoise.mean", DefaultValue::Num(tv::NOISE_MEAN)),
        ("GaussianNoise.sigma", DefaultValue::Num(tv::NOISE_SIGMA)),
        ("GaussianNoise.clip", DefaultValue::Bool(tv::NOISE_CLIP)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(GaussianNoise { mean: a.num("mean")?, sigma: a.num("sigma")?, clip: a.boolean("clip")? })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "GaussianNoise"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        if !self.mean.is_finite() {
            return Err(bad(MEAN, self.mean, "be finite", op, pos));
        }
        if !(self.sigma.is_finite() && self.sigma >= 0.0) {
            return Err(bad(SIGMA, self.sigma, "be finite and ≥ 0", op, pos));
        }
        Ok(())
    }

    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, _: &mut OpScratch, rng: &mut SampleRng) {
        kernels::gaussian_noise(&mut frame.view(), rng, (self.mean, self.sigma), self.clip)
    }
}
