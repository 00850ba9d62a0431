//! The color family: ops that change pixel values in place without moving them (torchvision v2's color ops and
//! `GaussianBlur`), each its arguments, check, draw and kernel call ([`super::Op`]) over [`crate::augment::kernels`].

use super::{Args, BITS, Drawn, HUE, KERNEL_SIZE, NUM_OUTPUT_CHANNELS, Op, OpScratch, SHARPNESS_FACTOR, SIGMA};
use super::{DefaultValue, THRESHOLD, bad, check_p, gate, gated, randperm, undrawn, uniform_f32};
use crate::augment::default as tv;
use crate::augment::kernels::{self, Frame};
use crate::augment::site::{MAX_CONTAINER_OPS, Site};
use crate::error::Result;
use crate::rng::SampleRng;

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

/// `ColorJitter`: each range `None` when disabled; applied in a random order (`randperm(4)`).
#[derive(Debug, Clone, PartialEq)]
pub struct ColorJitter {
    /// Brightness factor range.
    pub brightness: Option<(f64, f64)>,
    /// Contrast factor range.
    pub contrast: Option<(f64, f64)>,
    /// Saturation factor range.
    pub saturation: Option<(f64, f64)>,
    /// Hue shift range within [-0.5, 0.5].
    pub hue: Option<(f64, f64)>,
}

impl Op for ColorJitter {
    const KINDS: &'static [&'static str] = &["color_jitter"];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(ColorJitter {
            brightness: a.opt_pair("brightness")?,
            contrast: a.opt_pair("contrast")?,
            saturation: a.opt_pair("saturation")?,
            hue: a.opt_pair("hue")?,
        })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "ColorJitter"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_factor_range(BRIGHTNESS, &self.brightness, op, pos)?;
        check_factor_range(CONTRAST, &self.contrast, op, pos)?;
        check_factor_range(SATURATION, &self.saturation, op, pos)?;
        if let Some((lo, hi)) = self.hue
            && !(-0.5 <= lo && lo <= hi && hi <= 0.5)
        {
            return Err(bad(HUE, format!("({lo}, {hi})"), "be within [-0.5, 0.5] with min ≤ max", op, pos));
        }
        Ok(())
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // randperm(4) always (Fisher–Yates), then the enabled factors in b, c, s, h order.
        let mut order = [0u8, 1, 2, 3];
        for i in 0..3 {
            let z = rng.below((4 - i) as u64) as usize;
            order.swap(i, i + z);
        }
        let factors =
            [&self.brightness, &self.contrast, &self.saturation, &self.hue].map(|r| r.map(|r| uniform_f32(rng, r)));
        Ok(Drawn::Jitter { order, factors })
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Jitter { order, factors } = drawn else { undrawn(self.name(), drawn) };
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
}

/// `Grayscale(num_output_channels)`; the program's channel count is the loader's `channels`, so with 3 the gray
/// value is written to all three (torchvision's `num_output_channels=3`), with 1 it is the image.
#[derive(Debug, Clone, PartialEq)]
pub struct Grayscale {
    /// 1 or 3 (torchvision's check; the loader's `channels` decides the output's).
    pub num_output_channels: u32,
}

impl Op for Grayscale {
    const KINDS: &'static [&'static str] = &["grayscale"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("Grayscale.num_output_channels", DefaultValue::Int(tv::GRAYSCALE_CHANNELS as i64))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(Grayscale { num_output_channels: a.uint("num_output_channels")? })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "Grayscale"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        if matches!(self.num_output_channels, 1 | 3) {
            Ok(())
        } else {
            Err(bad(NUM_OUTPUT_CHANNELS, self.num_output_channels, "be 1 or 3", op, pos))
        }
    }

    fn sample(&self, _: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn apply(&self, _: &Drawn, frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        kernels::grayscale(&mut frame.view())
    }
}

/// An op gated by `p` alone, with no parameter: its struct, spec kind, name and kernel call.
macro_rules! gated_op {
    ($(#[$doc:meta])* $ty:ident, $kind:literal, $name:literal, p = $p:expr, |$frame:ident| $kernel:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $ty {
            /// Probability.
            pub p: f64,
        }

        impl Op for $ty {
            const KINDS: &'static [&'static str] = &[$kind];
            const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[(concat!($name, ".p"), DefaultValue::Num($p))];

            fn parse(a: &Args<'_>) -> Result<Self> {
                Ok($ty { p: a.num("p")? })
            }

            fn leaves_geometry(&self) -> bool {
                true
            }

            fn name(&self) -> &'static str {
                $name
            }

            fn check(&self, op: &str, pos: Site) -> Result<()> {
                check_p(self.p, op, pos)
            }

            fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
                Ok(gated(rng, self.p, Drawn::Apply))
            }

            fn apply(&self, _: &Drawn, $frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
                $kernel
            }
        }
    };
}

gated_op!(
    /// `RandomGrayscale(p)`: gray replicated over the image's channels.
    RandomGrayscale,
    "random_grayscale",
    "RandomGrayscale",
    p = tv::GRAYSCALE_P,
    |frame| kernels::grayscale(&mut frame.view())
);
gated_op!(
    /// `RandomAutocontrast(p)`.
    RandomAutocontrast,
    "random_autocontrast",
    "RandomAutocontrast",
    p = tv::GATE_P,
    |frame| kernels::autocontrast(&mut frame.view())
);
gated_op!(
    /// `RandomEqualize(p)`.
    RandomEqualize,
    "random_equalize",
    "RandomEqualize",
    p = tv::GATE_P,
    |frame| kernels::equalize(&mut frame.view())
);
gated_op!(
    /// `RandomInvert(p)`.
    RandomInvert,
    "random_invert",
    "RandomInvert",
    p = tv::GATE_P,
    |frame| kernels::invert(&mut frame.view())
);

/// `RandomChannelPermutation()`: the image's channels in the order of `torch.randperm(C)` (forward Fisher–Yates,
/// as ColorJitter's order); output channel c is input channel `order[c]`, as torchvision's
/// `image[..., permutation, :, :]`. A gray image (C = 1) stays as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomChannelPermutation;

impl Op for RandomChannelPermutation {
    const KINDS: &'static [&'static str] = &["random_channel_permutation"];

    fn parse(_: &Args<'_>) -> Result<Self> {
        Ok(RandomChannelPermutation)
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RandomChannelPermutation"
    }

    fn check(&self, _: &str, _: Site) -> Result<()> {
        Ok(())
    }

    fn sample(&self, rng: &mut SampleRng, (_, _, c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(randperm(rng, c))
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Order { order, n } = drawn else { undrawn(self.name(), drawn) };
        permute_channels(frame, &order[..usize::from(*n)]);
    }
}

/// Output channel `i` takes input channel `order[i]` (the first `c` entries).
fn permute_channels(frame: &mut Frame, order: &[u8]) {
    let img = frame.view();
    let order = &order[..order.len().min(img.c)];
    if order.iter().enumerate().all(|(i, &o)| usize::from(o) == i) {
        return;
    }
    let mut px = [0u8; MAX_CONTAINER_OPS];
    for pixel in img.data.chunks_exact_mut(img.c) {
        px[..pixel.len()].copy_from_slice(pixel);
        for (dst, &src) in pixel.iter_mut().zip(order) {
            *dst = px[usize::from(src)];
        }
    }
}

/// `RandomPhotometricDistort(brightness, contrast, saturation, hue, p)` (SSD's): each of ColorJitter's
/// adjustments with probability `p` (its factor uniform in its range), contrast before or after saturation and
/// hue (a coin), then the channels permuted with probability `p` — torchvision v2's draw order.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomPhotometricDistort {
    /// The ranges (all four set).
    pub jitter: ColorJitter,
    /// Probability of each adjustment and of the permutation.
    pub p: f64,
}

impl Op for RandomPhotometricDistort {
    const KINDS: &'static [&'static str] = &["random_photometric_distort"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[
        ("RandomPhotometricDistort.brightness", DefaultValue::Pair(0.875, 1.125)),
        ("RandomPhotometricDistort.contrast", DefaultValue::Pair(0.5, 1.5)),
        ("RandomPhotometricDistort.saturation", DefaultValue::Pair(0.5, 1.5)),
        ("RandomPhotometricDistort.hue", DefaultValue::Pair(-0.05, 0.05)),
        ("RandomPhotometricDistort.p", DefaultValue::Num(0.5)),
    ];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomPhotometricDistort {
            jitter: ColorJitter {
                brightness: Some(a.pair("brightness")?),
                contrast: Some(a.pair("contrast")?),
                saturation: Some(a.pair("saturation")?),
                hue: Some(a.pair("hue")?),
            },
            p: a.num("p")?,
        })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RandomPhotometricDistort"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        self.jitter.check(op, pos)?;
        check_p(self.p, op, pos)
    }

    fn sample(&self, rng: &mut SampleRng, (_, _, c): (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        let j = &self.jitter;
        let mut factors = [None; 4];
        for (f, r) in factors.iter_mut().zip([&j.brightness, &j.contrast, &j.saturation, &j.hue]) {
            if gate(rng, self.p) {
                *f = r.map(|r| uniform_f32(rng, r));
            }
        }
        let contrast_before = gate(rng, 0.5);
        let order = if contrast_before { [0, 1, 2, 3] } else { [0, 2, 3, 1] };
        let mut perm = [0u8, 1, 2];
        let permute = gate(rng, self.p);
        if permute && let Drawn::Order { order: o, n } = randperm(rng, c) {
            perm[..usize::from(n).min(3)].copy_from_slice(&o[..usize::from(n).min(3)]);
        }
        Ok(Drawn::Distort { order, factors, perm })
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, rng: &mut SampleRng) {
        let Drawn::Distort { order, factors, perm } = drawn else { undrawn(self.name(), drawn) };
        self.jitter.apply(&Drawn::Jitter { order: *order, factors: *factors }, frame, scratch, rng);
        permute_channels(frame, perm);
    }
}

/// `RandomSolarize(threshold, p)`; threshold in pixel units (uint8 semantics).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomSolarize {
    /// Pixels ≥ threshold are inverted.
    pub threshold: f64,
    /// Probability.
    pub p: f64,
}

impl Op for RandomSolarize {
    const KINDS: &'static [&'static str] = &["random_solarize"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[("RandomSolarize.p", DefaultValue::Num(tv::GATE_P))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomSolarize { threshold: a.num("threshold")?, p: a.num("p")? })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RandomSolarize"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)?;
        let threshold = self.threshold;
        if !(threshold.is_finite() && (0.0..=255.0).contains(&threshold)) {
            return Err(bad(THRESHOLD, threshold, "be in [0, 255] (pixel units of the uint8 image)", op, pos));
        }
        Ok(())
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(gated(rng, self.p, Drawn::Value(self.threshold)))
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Value(t) = drawn else { undrawn(self.name(), drawn) };
        kernels::solarize(&mut frame.view(), *t)
    }
}

/// `RandomPosterize(bits, p)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomPosterize {
    /// Bits kept, 0..=8.
    pub bits: u32,
    /// Probability.
    pub p: f64,
}

impl Op for RandomPosterize {
    const KINDS: &'static [&'static str] = &["random_posterize"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] = &[("RandomPosterize.p", DefaultValue::Num(tv::GATE_P))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomPosterize { bits: a.uint("bits")?, p: a.num("p")? })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RandomPosterize"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)?;
        if self.bits > 8 { Err(bad(BITS, self.bits, "be in 0..=8", op, pos)) } else { Ok(()) }
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(gated(rng, self.p, Drawn::Value(f64::from(self.bits))))
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Value(b) = drawn else { undrawn(self.name(), drawn) };
        kernels::posterize(&mut frame.view(), *b as u32)
    }
}

/// `RandomAdjustSharpness(sharpness_factor, p)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomAdjustSharpness {
    /// Factor ≥ 0 (0 blurs, 1 is the identity, 2 sharpens).
    pub sharpness_factor: f64,
    /// Probability.
    pub p: f64,
}

impl Op for RandomAdjustSharpness {
    const KINDS: &'static [&'static str] = &["random_adjust_sharpness"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("RandomAdjustSharpness.p", DefaultValue::Num(tv::GATE_P))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        Ok(RandomAdjustSharpness { sharpness_factor: a.num("sharpness_factor")?, p: a.num("p")? })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RandomAdjustSharpness"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)?;
        let f = self.sharpness_factor;
        if !(f.is_finite() && f >= 0.0) {
            return Err(bad(SHARPNESS_FACTOR, f, "be finite and ≥ 0", op, pos));
        }
        Ok(())
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(gated(rng, self.p, Drawn::Value(self.sharpness_factor)))
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Value(f) = drawn else { undrawn(self.name(), drawn) };
        kernels::sharpness(&mut frame.view(), &mut scratch.spare, *f)
    }
}

/// `GaussianBlur(kernel_size=(kx, ky), sigma=(lo, hi))`.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianBlur {
    /// Kernel width (x), odd.
    pub kx: u32,
    /// Kernel height (y), odd.
    pub ky: u32,
    /// σ range, 0 < lo ≤ hi.
    pub sigma: (f64, f64),
}

impl Op for GaussianBlur {
    const KINDS: &'static [&'static str] = &["gaussian_blur"];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("GaussianBlur.sigma", DefaultValue::Pair(tv::BLUR_SIGMA.0, tv::BLUR_SIGMA.1))];

    fn parse(a: &Args<'_>) -> Result<Self> {
        let (kx, ky) = a.uint_pair(KERNEL_SIZE)?;
        Ok(GaussianBlur { kx, ky, sigma: a.pair(SIGMA)? })
    }

    fn leaves_geometry(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "GaussianBlur"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (kx, ky) = (self.kx, self.ky);
        for k in [kx, ky] {
            if k % 2 == 0 || k > 1001 {
                return Err(bad(KERNEL_SIZE, format!("({kx}, {ky})"), "be odd and positive, at most 1001", op, pos));
            }
        }
        let (lo, hi) = self.sigma;
        if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi) {
            return Err(bad(SIGMA, format!("({lo}, {hi})"), "be finite with 0 < min ≤ max", op, pos));
        }
        Ok(())
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Value(uniform_f32(rng, self.sigma)))
    }

    fn apply(&self, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch, _: &mut SampleRng) {
        let Drawn::Value(sigma) = drawn else { undrawn(self.name(), drawn) };
        let (kxv, kyv) =
            (kernels::gaussian_kernel(self.kx as usize, *sigma), kernels::gaussian_kernel(self.ky as usize, *sigma));
        kernels::gaussian_blur(&mut frame.view(), &mut scratch.plane, &kxv, &kyv);
    }
}
