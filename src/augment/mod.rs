//! augment — the per-sample program: geometry folded into the decode (RandomResizedCrop, Resize, CenterCrop,
//! flips, a leading RandomCrop, timm's ResizeKeepRatio), pixel ops on the uint8 crop and the fused writer; sits
//! between decode (which hands over a decoded region of the DCT-scaled image) and staging (whose slot `dst` is).
//! [`program`]'s module docs say how a transform list is compiled.
//!
//! Files, in import order (no file imports one below it, `layering_tests` checks it): [`site`] (an op's place
//! in the list and its random stream), [`resize`] (filter, axis, torchvision's size and box rules), `resample`
//! (the fused resampler; `simd` dispatches it and the kernels to AVX2), [`kernels`] and [`warp`] (the pixel
//! kernels), [`policy_ops`] (the policies' one sub-op vocabulary), [`policy`] (torchvision's auto-augment
//! family), [`timm`] (timm's policies, Pillow-exact), `stage2` (the resampler of the geometric ops after a pixel
//! op), [`ops`] (the ops, one unit each — arguments, check, sampling, kernel call — in a file per family),
//! [`geometry`] (the folded prefix), [`mosaic`] (YOLO's Mosaic: its draw and layout), [`program`] (compile and
//! run), [`views`]. A program that starts with a Mosaic runs [`SamplePipeline::process_mosaic`] instead of
//! [`SamplePipeline::process`]: steps 1–4 for each part under the mosaic's resize, the parts placed on its
//! canvas, then the stages after the prefix.
//!
//! Protocol of [`SamplePipeline::process`] for one sample:
//! 1. `decode::Decoder::read_header` → width × height (stored, as torchvision's PIL loading sees it; the
//!    oriented size under `exif_transpose=True`, decode mapping the window back).
//! 2. [`geometry`]: the compiled transform list + the sample's key give both axes of the crop in original
//!    coordinates and the flip; all randomness comes from `SampleRng(seed, epoch, index, OP_…)`, so a sample's
//!    pixels depend on (seed, epoch, index) only.
//! 3. DCT scale M/8 ([`DctScaling`]), then Pillow's filter taps for exactly the output's rows and columns, in
//!    scaled-image pixels; their union is the window to decode (filter margin included, clamped at the image
//!    edges exactly as Pillow clamps).
//! 4. `decode_window` decodes that window (ROI + DCT scaling) into the worker's scratch.
//! 5. [`color`] (only when the output's channels differ from the source's): the filter window becomes luma
//!    (Pillow's `convert("L")`) or RGB. Then [`resample`]: horizontal pass into an 8-bit intermediate, vertical
//!    pass row by row, each row written through the normalize/cast table straight into `dst` in the requested
//!    layout. `dst` is fully written on success and left untouched on error.
//!
//! Channels ([`Channels`], the loader's `channels=`): 1 or 3 per output image. Gray output converts *before*
//! resampling, on the crop window, so it equals torchvision's `[Grayscale(), Resize(…), CenterCrop(…)]` (Pillow
//! converts, then resizes the L image) bit for bit at full-size decode; torchvision's other habit,
//! `[RandomResizedCrop(…), Grayscale()]` (resize RGB, then convert), differs from it only by the rounding of the
//! 8-bit intermediates (at most 2 levels at full-size decode; `tests/test_channels.py` measures it against
//! torchvision). Converting first also resamples one channel instead of three.
//!
//! Views ([`views`], the loader's `views=`): several pipelines run on one sample's bytes, each through this
//! protocol with its own key ([`SampleKey::for_view`]) into its own part of the batch row.

mod color;
pub mod geometry;
pub mod kernels;
pub mod mosaic;
pub mod ops;
pub mod policy;
pub mod policy_ops;
pub mod program;
#[cfg(test)]
mod program_tests;
mod resample;
pub mod resize;
mod simd;
pub mod site;
mod stage2;
pub mod targets;
#[cfg(test)]
mod tests;
pub mod timm;
pub mod views;
pub mod warp;

use std::time::Instant;

use crate::decode::{DecodeLimits, DecodedRegion, Decoder, PixelWindow, choose_scale_eighths};
use crate::error::{ImageError, Result, TrdataError};
use crate::param::Choice;
use program::{Program, ProgramScratch};
use resample::{OutputLut, ResampleScratch};
use simd::Simd;

/// A transform as data (built from Python's `trdata.RandomResizedCrop(...)` etc.).
#[derive(Debug, Clone, PartialEq)]
pub enum TransformSpec {
    /// torchvision RandomResizedCrop semantics; output `height`×`width`.
    RandomResizedCrop {
        /// Output height.
        height: u32,
        /// Output width.
        width: u32,
        /// Range of the crop's area as a fraction of the image area (torchvision default (0.08, 1.0)).
        scale: (f64, f64),
        /// Range of the crop's aspect ratio w/h, drawn log-uniformly (default (3/4, 4/3)).
        ratio: (f64, f64),
    },
    /// Resize so the shorter side is `shorter` (torchvision `Resize(int)`).
    ResizeShorter {
        /// Length of the shorter side after resizing.
        shorter: u32,
    },
    /// Resize to exactly `height`×`width` (torchvision `Resize((h, w))`).
    ResizeExact {
        /// Output height.
        height: u32,
        /// Output width.
        width: u32,
    },
    /// timm's `ResizeKeepRatio(size, longest)` without its random scale/aspect: both sides divided by
    /// `ratio = max(h/th, w/tw)·longest + min(h/th, w/tw)·(1 - longest)` and rounded half-to-even (so the output
    /// size is the sample's own unless a `CenterCrop` or a later crop fixes it).
    ResizeKeepRatio {
        /// Target height `th`.
        height: u32,
        /// Target width `tw`.
        width: u32,
        /// 0: the shorter side (relative to the target) meets it; 1: the longer one; in between, a mix.
        longest: f64,
    },
    /// Center crop `height`×`width` (torchvision `CenterCrop`).
    CenterCrop {
        /// Crop height (zero padding when larger than the image).
        height: u32,
        /// Crop width.
        width: u32,
    },
    /// Horizontal flip with probability `p`.
    RandomHorizontalFlip {
        /// Probability of flipping, in [0, 1].
        p: f64,
    },
    /// A resize (`RandomResizedCrop`, `ResizeShorter`, `ResizeExact`) with a filter other than antialiased
    /// bilinear (torchvision's `interpolation`/`antialias`); see [`geometry::Resample`].
    Resampled {
        /// Filter and antialias.
        resample: geometry::Resample,
        /// The resize.
        inner: Box<TransformSpec>,
    },
    /// Any op of the compiled per-sample program beyond the four above (pixel ops, padding, random crops,
    /// vertical flips): see [`program`] for how a list is compiled and [`ops::OpSpec`] for the ops.
    Op(ops::OpSpec),
}

/// Element type of the output batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// uint8, 0..=255 (no normalization allowed).
    U8,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// float32.
    F32,
}

impl DType {
    /// The largest finite value of the type (as f64).
    pub fn max_finite(self) -> f64 {
        match self {
            DType::U8 => 255.0,
            DType::F16 => 65504.0,
            DType::BF16 => 3.3895313892515355e38,
            DType::F32 => f64::from(f32::MAX),
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
        }
    }
}

/// Memory layout of one image in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Channels first: [C, H, W] per sample.
    Nchw,
    /// Channels last: [H, W, C] per sample.
    Nhwc,
}

/// Channels of every output image (the loader's `channels=`; its rule and default: `config::check_channels`,
/// `config::default::channels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channels {
    /// One channel: luma of RGB sources as Pillow's `convert("L")`; gray sources pass through unchanged.
    Gray,
    /// R, G, B: gray sources widened (each channel the gray value), as Pillow's `convert("RGB")`.
    Rgb,
}

impl Channels {
    /// 1 or 3.
    pub fn count(self) -> usize {
        match self {
            Channels::Gray => 1,
            Channels::Rgb => 3,
        }
    }
}

/// `dtype` values (output element type).
pub const DTYPE: Choice<DType> = Choice {
    name: "dtype",
    values: &[("float32", DType::F32), ("float16", DType::F16), ("bfloat16", DType::BF16), ("uint8", DType::U8)],
};
/// `layout` values.
pub const LAYOUT: Choice<Layout> = Choice { name: "layout", values: &[("NCHW", Layout::Nchw), ("NHWC", Layout::Nhwc)] };

/// Defaults of the transforms' parameters (torchvision's): the one place each is written. The binding exports
/// them as `_core.DEFAULTS`, which python/trdata/transforms.py reads.
pub mod default {
    /// `RandomResizedCrop.scale`.
    pub const RRC_SCALE: (f64, f64) = (0.08, 1.0);
    /// `RandomResizedCrop.ratio`.
    pub const RRC_RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);
    /// `RandomHorizontalFlip.p`.
    pub const FLIP_P: f64 = 0.5;
    /// `p` of the gated ops whose torchvision default is 0.5 (RandomVerticalFlip, RandomErasing,
    /// RandomAutocontrast, RandomEqualize, RandomSolarize, RandomPosterize, RandomAdjustSharpness, RandomInvert).
    pub const GATE_P: f64 = 0.5;
    /// `RandomGrayscale.p`.
    pub const GRAYSCALE_P: f64 = 0.1;
    /// `Grayscale.num_output_channels`.
    pub const GRAYSCALE_CHANNELS: u32 = 1;
    /// `GaussianBlur.sigma`.
    pub const BLUR_SIGMA: (f64, f64) = (0.1, 2.0);
    /// `GaussianNoise.mean`.
    pub const NOISE_MEAN: f64 = 0.0;
    /// `GaussianNoise.sigma`.
    pub const NOISE_SIGMA: f64 = 0.1;
    /// `GaussianNoise.clip`.
    pub const NOISE_CLIP: bool = true;
    /// `RandomErasing.scale`.
    pub const ERASING_SCALE: (f64, f64) = (0.02, 0.33);
    /// `RandomErasing.ratio`.
    pub const ERASING_RATIO: (f64, f64) = (0.3, 3.3);
    /// `RandomErasing.value`.
    pub const ERASING_VALUE: f64 = 0.0;
    /// `fill` of Pad and RandomCrop.
    pub const FILL: f64 = 0.0;
    /// `padding_mode` of Pad and RandomCrop.
    pub const PADDING_MODE: &str = "constant";
}

/// The `normalize` parameter's name (its rules: [`Normalize::from_user`], [`Normalize::check`] and the output
/// type's range in [`SamplePipeline::new`]).
const NORMALIZE: &str = "normalize";
/// The `transforms` parameter's name (its rules: `geometry::compile` and the sample size in
/// [`SamplePipeline::new`]).
pub(crate) const TRANSFORMS: &str = "transforms";

/// Per-channel normalization in [0, 1] units: out = (x / 255 - mean) / std. A gray output uses channel 0 (and
/// [`SamplePipeline::with_channels`] requires the three to be equal then).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// Per-channel mean (RGB), in [0, 1] units.
    pub mean: [f32; 3],
    /// Per-channel standard deviation (RGB), non-zero.
    pub std: [f32; 3],
}

impl Normalize {
    /// `normalize=(mean, std)` as the user gives it: in [0, 1] units (torchvision's `Normalize` after
    /// `ToTensor`, e.g. `trdata.IMAGENET`) or in 0–255 units (the DALI/FFCV habit): when any std > 1 or every
    /// mean > 1, both are read as 0–255 units and divided by 255, so the two conventions give identical
    /// batches. Mixed units (a 0–255 mean with a [0, 1] std, or a 0–255 std with a mean ≤ 1 that is not 0),
    /// a negative mean in [0, 1] units and non-finite values are refused, then [`check`](Self::check) applies.
    ///
    /// `mean` and `std` each hold one value (applied to every channel, e.g. `MNIST_NORM`) or one per output
    /// channel: 3 (R, G, B) for `channels` RGB; for gray output only 1 — three values for one channel would be
    /// a preset for colour images silently reduced to its first channel.
    pub fn from_user(mean: &[f64], std: &[f64], channels: Channels) -> Result<Self> {
        let shown = || format!("mean={mean:?} std={std:?}");
        let n = channels.count();
        if ![mean.len(), std.len()].iter().all(|&l| l == 1 || l == n) {
            let want = match channels {
                Channels::Gray => "1 value each with channels=1 (gray output; a 3-value preset is for RGB)",
                Channels::Rgb => "1 or 3 values each (R, G, B) with channels=3",
            };
            return Err(TrdataError::config(NORMALIZE, format!("{} must have {want}", shown())));
        }
        let per_channel = |v: &[f64]| -> [f64; 3] { std::array::from_fn(|c| v[c.min(v.len() - 1)]) };
        let (mean, std) = (per_channel(mean), per_channel(std));
        if !mean.iter().chain(&std).all(|v| v.is_finite()) {
            return Err(TrdataError::config(NORMALIZE, format!("{} must be finite", shown())));
        }
        let (mean, std) = if std.iter().any(|&s| s > 1.0) || mean.iter().all(|&m| m > 1.0) {
            if !(std.iter().all(|&s| 1.0 < s && s <= 255.0)
                && mean.iter().all(|&m| m == 0.0 || (1.0 < m && m <= 255.0)))
            {
                return Err(TrdataError::config(
                    NORMALIZE,
                    format!(
                        "{} must be in one unit: both in [0, 1] units (torchvision, e.g. trdata.IMAGENET) or both in \
                         0–255 units (every std > 1, every mean 0 or > 1, all ≤ 255)",
                        shown()
                    ),
                ));
            }
            (mean.map(|m| m / 255.0), std.map(|s| s / 255.0))
        } else if mean.iter().any(|&m| m > 1.0) {
            return Err(TrdataError::config(
                NORMALIZE,
                format!("{} must be in one unit: the mean is in 0–255 units but the std in [0, 1] units", shown()),
            ));
        } else if mean.iter().any(|&m| m < 0.0) {
            return Err(TrdataError::config(
                NORMALIZE,
                format!("{} must have mean ≥ 0 (a pixel value in [0, 1] units)", shown()),
            ));
        } else {
            (mean, std)
        };
        let n = Self { mean: mean.map(|m| m as f32), std: std.map(|s| s as f32) };
        n.check()?;
        Ok(n)
    }

    /// Values in [0, 1] units: finite, std > 1e-6 (a std of ~0 divides by ~0).
    pub fn check(&self) -> Result<()> {
        if !self.mean.iter().chain(&self.std).all(|v| v.is_finite()) || self.std.iter().any(|&s| s <= 1e-6) {
            return Err(TrdataError::config(
                NORMALIZE,
                format!(
                    "mean={:?} std={:?} must be finite with every std > 1e-6 in [0, 1] units (a std of ~0 divides \
                     by ~0)",
                    self.mean, self.std
                ),
            ));
        }
        Ok(())
    }
}

/// What the fused writer produces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputSpec {
    /// Element type.
    pub dtype: DType,
    /// Layout of one image.
    pub layout: Layout,
    /// Normalization; `None` gives x/255 for float types and raw values for uint8.
    pub normalize: Option<Normalize>,
    /// `pad_to`: every image at the top left of a (height, width) canvas, zeros (after normalization) elsewhere;
    /// the transforms may then give each image its own size, at most the canvas (`program::compile_on`).
    pub pad_to: Option<(usize, usize)>,
}

/// Identity of a sample's randomness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleKey {
    /// The loader's seed.
    pub seed: u64,
    /// Epoch number.
    pub epoch: u64,
    /// Dataset index of the sample (not its position in the epoch).
    pub index: u64,
}

/// Time spent in each stage of one sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleTiming {
    /// Header, geometry, filter taps and the ROI/DCT-scaled decode (wall clock).
    pub decode_ns: u64,
    /// Resampling, flip, normalize, cast and the write into `dst` (wall clock).
    pub augment_ns: u64,
    /// libjpeg-turbo met damaged entropy data and filled it in (accepted, as Pillow does; counted by the loader).
    pub damaged: bool,
}

impl SampleTiming {
    /// Decode from `t0` to `t1`, augment from `t1` to now.
    fn since(t0: Instant, t1: Instant, damaged: bool) -> Self {
        let t2 = Instant::now();
        Self { decode_ns: (t1 - t0).as_nanos() as u64, augment_ns: (t2 - t1).as_nanos() as u64, damaged }
    }
}

/// A region the resampler reads: `pixels` rows of `stride` bytes of `channels` (3: RGB, 1: gray) interleaved
/// bytes per pixel, whose top-left pixel is (`x0`, `y0`) of the (scaled) image.
struct SourcePixels<'a> {
    pixels: &'a [u8],
    stride: usize,
    x0: u32,
    y0: u32,
    channels: usize,
}

/// One axis of a [`GpuPlan`]: output `o` reads image pixels `start[o] .. start[o] + taps` with weights
/// `k[o * taps ..][..taps]` (Pillow's 22-bit fixed point, flip applied; all zero for a padding output); every
/// tap lies in `[win0, win1)`.
#[derive(Debug, Clone, Copy)]
pub struct GpuAxis<'a> {
    /// First pixel of each output's taps (full-scale image pixels).
    pub start: &'a [u32],
    /// Weights, `taps` per output.
    pub k: &'a [i32],
    /// Taps per output (the same for all).
    pub taps: usize,
    /// Union of the taps: `[win0, win1)`.
    pub win0: u32,
    /// End of the union.
    pub win1: u32,
}

/// One sample's resample at full scale for the GPU resampler, from [`SamplePipeline::prepare_gpu`]: the window
/// to decode, both axes' taps and the pass order. Reused across samples (its vectors only grow).
#[derive(Debug, Default)]
pub struct GpuPlan {
    x: resample::AxisCoeffs,
    y: resample::AxisCoeffs,
    vertical_first: bool,
    flip: bool,
    vflip: bool,
    image_size: (u32, u32),
}

impl GpuPlan {
    fn axis(c: &resample::AxisCoeffs) -> GpuAxis<'_> {
        GpuAxis { start: &c.start, k: &c.k, taps: c.taps, win0: c.win0, win1: c.win1 }
    }

    /// Column taps (`out_w` outputs).
    pub fn x(&self) -> GpuAxis<'_> {
        Self::axis(&self.x)
    }

    /// Row taps (`out_h` outputs).
    pub fn y(&self) -> GpuAxis<'_> {
        Self::axis(&self.y)
    }

    /// The pixels the taps read (full-scale image pixels): what must be decoded, at least.
    pub fn window(&self) -> PixelWindow {
        PixelWindow { x0: self.x.win0, y0: self.y.win0, x1: self.x.win1, y1: self.y.win1 }
    }

    /// Pass order of the CPU fused writer for this sample (vertical pass first).
    pub fn vertical_first(&self) -> bool {
        self.vertical_first
    }

    /// (horizontal, vertical) flip of the sample (already folded into the taps; for tests and stats).
    pub fn flips(&self) -> (bool, bool) {
        (self.flip, self.vflip)
    }

    /// The image size the plan was made for.
    pub fn image_size(&self) -> (u32, u32) {
        self.image_size
    }
}

/// How far DCT-domain downscaling (libjpeg-turbo's M/8 IDCT) may go before the bilinear resampling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DctScaling {
    /// Smallest M/8 whose scaled crop is still at least this many times the output size in both dimensions
    /// (1.0 = "at least the output size", the fastest setting that never upsamples).
    MinRatio(f64),
}

impl DctScaling {
    /// Default for RandomResizedCrop pipelines: the crop is random anyway, so take the fastest scale that keeps
    /// the crop at least as large as the output.
    pub const RANDOM_CROP_DEFAULT: Self = Self::MinRatio(1.0);
    /// Default for deterministic (eval) pipelines: keep the scaled crop ≥ 2× the output. Measured on the 1,000
    /// ImageNet-sample images, Resize(256) + CenterCrop(224) against Pillow: 2.0 → 994 bit-exact, worst 49.2 dB;
    /// 1.5 → worst 42.5 dB; 1.0 → 3 images below 35 dB (worst 31.0). Tests: `tests/test_pillow_parity.py` and
    /// `eval_dct_scaling_stays_above_35_db_on_the_imagenet_sample`.
    pub const DETERMINISTIC_DEFAULT: Self = Self::MinRatio(2.0);
}

/// How [`SamplePipeline::process_mosaic`] reads a part: `read(j, decode)` hands dataset sample `j`'s encoded bytes
/// and the size its source declares for it (None: no declared size) to `decode` (the worker's reader; it returns
/// the read's or the decode's error).
pub type ReadPart<'a> = dyn FnMut(u64, &mut DecodePart<'_>) -> std::result::Result<(), ImageError> + 'a;

/// A part's decode in [`ReadPart`]: its encoded bytes and declared (width, height).
pub type DecodePart<'a> = dyn FnMut(&[u8], Option<(u32, u32)>) -> std::result::Result<(), ImageError> + 'a;

/// Per-worker decoder and scratch memory (one per thread; never shared). Buffers grow to the largest sample seen
/// and are then reused: no allocation per sample in steady state. (The decoder's pixel scratch, the large one, is
/// released after an outlier above `DecodeLimits::max_retained_scratch_bytes`.)
#[derive(Debug)]
pub struct WorkerScratch {
    decoder: Decoder,
    /// The fused pass's taps and intermediates.
    resample: ResampleScratch,
    /// The uint8 image and spare buffers of a program's pixel ops (untouched when the program has none).
    program: ProgramScratch,
    /// The GPU path's plan of the sample being routed there (`SamplePipeline::prepare_gpu`).
    gpu: GpuPlan,
    /// The (width, height) the source declares for the sample about to be processed: its decoded size must be
    /// this (`source::check_declared_size`), or the sample fails with a `Target` error before any pixel work.
    declared_size: Option<(u32, u32)>,
}

impl WorkerScratch {
    /// The boxes (XYXY, source pixels) of the sample about to be processed, for the ops whose draw depends on
    /// them (`None`: its source has none).
    pub fn set_boxes(&mut self, boxes: Option<&[[f64; 4]]>) {
        match (boxes, &mut self.program.boxes) {
            (Some(b), Some(v)) => {
                v.clear();
                v.extend_from_slice(b);
            }
            (Some(b), slot) => *slot = Some(b.to_vec()),
            (None, slot) => *slot = None,
        }
    }

    /// The size (width, height) the source declares for the sample about to be processed (`None`: it declares
    /// none); [`SamplePipeline::process`] and [`SamplePipeline::process_pixels`] check the image against it.
    pub fn set_declared_size(&mut self, size: Option<(u32, u32)>) {
        self.declared_size = size;
    }

    /// Fresh scratch with its own decompressor, under the default limits.
    pub fn new() -> Result<Self> {
        Self::with_limits(DecodeLimits::default())
    }

    /// Fresh scratch whose decoder applies `limits` (pixels, scans, memory, retained scratch; see
    /// [`crate::decode::DecodeLimits`]). Invalid limits → `ConfigError` naming the field.
    pub fn with_limits(limits: DecodeLimits) -> Result<Self> {
        Ok(Self {
            decoder: Decoder::with_limits(limits)?,
            resample: ResampleScratch::default(),
            program: ProgramScratch::default(),
            gpu: GpuPlan::default(),
            declared_size: None,
        })
    }

    /// The worker's reusable GPU plan (the routing of a sample to the GPU path fills it).
    pub fn gpu_plan(&mut self) -> &mut GpuPlan {
        &mut self.gpu
    }

    /// The decode limits this worker's decoder applies (the GPU path routes only images within them, so a file
    /// beyond one gets the CPU path's error).
    pub fn decode_limits(&self) -> DecodeLimits {
        self.decoder.limits()
    }

    /// Decode `plan`'s window of `bytes` at full size (DCT 8/8) with this worker's decoder, exactly as
    /// [`SamplePipeline::process`] decodes it at that scale: the CPU stand-in for nvJPEG when checking the GPU
    /// resampler against the fused writer. The header must give the size the plan was made for, in the stored
    /// orientation (an EXIF-oriented image under `exif_transpose` is refused as `Unsupported`).
    pub fn decode_gpu_window(
        &mut self,
        bytes: &[u8],
        plan: &GpuPlan,
    ) -> std::result::Result<DecodedRegion<'_>, ImageError> {
        let info = self.decoder.read_header(bytes)?;
        if info.orientation != crate::decode::Orientation::Normal || (info.width, info.height) != plan.image_size {
            return Err(ImageError::new(
                crate::error::ImageErrorKind::Unsupported,
                format!(
                    "the plan was made for a {:?} image in stored orientation, the header says {}x{} ({:?})",
                    plan.image_size, info.width, info.height, info.orientation
                ),
            ));
        }
        self.decoder.decode_window(bytes, 8, plan.window())
    }

    /// The worker's decoder (the ignored timing report of the tests compares a full decode with it).
    #[cfg(test)]
    pub(crate) fn decoder(&mut self) -> &mut Decoder {
        &mut self.decoder
    }
}

/// The compiled per-sample pipeline: transforms + output spec.
#[derive(Debug, Clone)]
pub struct SamplePipeline {
    height: usize,
    width: usize,
    channels: Channels,
    output: OutputSpec,
    program: Program,
    lut: OutputLut,
    dct: DctScaling,
    /// Which compiled copy of the resample kernels runs (chosen once per process, see `simd`).
    simd: Simd,
}

/// One sample of `channels`×`height`×`width` `dtype` values must fit in this machine's memory (a batch of them
/// is checked by `LoaderConfig::validate`); names `transforms`, which set the output size.
fn check_sample_memory(channels: usize, height: usize, width: usize, dtype: DType) -> Result<()> {
    let sample_bytes = channels as u128 * height as u128 * width as u128 * dtype.size_bytes() as u128;
    let Some(usable) = crate::topology::usable_memory_bytes() else { return Ok(()) };
    if sample_bytes > u128::from(usable) {
        let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
        return Err(TrdataError::config(
            TRANSFORMS,
            format!(
                "an output of {channels}×{height}×{width} × {} bytes must fit in memory: one sample needs {:.2} GiB \
                 but this machine has {:.2} GiB; use a smaller output size",
                dtype.size_bytes(),
                gib(sample_bytes),
                gib(u128::from(usable))
            ),
        ));
    }
    Ok(())
}

impl SamplePipeline {
    /// Validate and compile an RGB pipeline (3 channels per output image); the output size must be fixed.
    pub fn new(transforms: Vec<TransformSpec>, output: OutputSpec) -> Result<Self> {
        Self::with_channels(transforms, output, Channels::Rgb)
    }

    /// Validate and compile a pipeline whose images have `channels` channels (see [`Channels`] and the module
    /// docs); the output size must be fixed. A gray pipeline needs a normalize whose three values are equal
    /// (one value given, as [`Normalize::from_user`] makes it for gray output).
    pub fn with_channels(transforms: Vec<TransformSpec>, output: OutputSpec, channels: Channels) -> Result<Self> {
        let program = program::compile_on(&transforms, output.pad_to)?;
        let compiled = &program.prefix;
        if let Some(n) = output.normalize {
            if channels == Channels::Gray
                && (n.mean.iter().any(|&m| m != n.mean[0]) || n.std.iter().any(|&s| s != n.std[0]))
            {
                return Err(TrdataError::config(
                    NORMALIZE,
                    format!(
                        "mean={:?} std={:?} must have one value each with channels=1 (gray output; a 3-value \
                         preset is for RGB)",
                        n.mean, n.std
                    ),
                ));
            }
            if output.dtype == DType::U8 {
                return Err(TrdataError::config(
                    NORMALIZE,
                    format!(
                        "mean={:?} std={:?} must be None with dtype uint8 (normalized values are not integers): use \
                         dtype float32/float16/bfloat16, or normalize=None",
                        n.mean, n.std
                    ),
                ));
            }
            n.check()?;
            // (x/255 − mean)/std for x in 0..=255 must fit the output type: float16 ends at 65504, so a tiny std
            // would silently fill the batch with inf.
            let max_abs = (0..3)
                .map(|c| f64::from(n.mean[c]).abs().max((1.0 - f64::from(n.mean[c])).abs()) / f64::from(n.std[c]).abs())
                .fold(0.0, f64::max);
            let limit = output.dtype.max_finite();
            if max_abs > limit {
                return Err(TrdataError::config(
                    NORMALIZE,
                    format!(
                        "mean={:?} std={:?} must keep values within dtype {} (±{limit:.3e}), not up to {max_abs:.3e}: \
                         the batch would hold inf; use a larger std or a wider dtype",
                        n.mean,
                        n.std,
                        DTYPE.name_of(output.dtype)
                    ),
                ));
            }
        }
        let (height, width) = program.output_hw;
        check_sample_memory(channels.count(), height, width, output.dtype)?;
        let dct =
            if compiled.is_random_crop() { DctScaling::RANDOM_CROP_DEFAULT } else { DctScaling::DETERMINISTIC_DEFAULT };
        Ok(Self { height, width, channels, lut: OutputLut::new(&output), output, program, dct, simd: Simd::detect() })
    }

    /// Override the DCT-scaling policy (see [`DctScaling`]; the default depends on whether the crop is random).
    pub fn with_dct_scaling(mut self, dct: DctScaling) -> Result<Self> {
        if let DctScaling::MinRatio(r) = dct
            && !(r.is_finite() && r > 0.0)
        {
            return Err(TrdataError::config("dct_scaling", format!("min ratio must be positive, got {r}")));
        }
        self.dct = dct;
        Ok(self)
    }

    /// Force the resample kernels' instruction-set path (tests compare both in one process).
    #[cfg(test)]
    pub(crate) fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd;
        self
    }

    /// The DCT-scaling policy in use.
    pub fn dct_scaling(&self) -> DctScaling {
        self.dct
    }

    /// (height, width) of every output image.
    pub fn output_hw(&self) -> (usize, usize) {
        (self.height, self.width)
    }

    /// Channels of every output image.
    pub fn channels(&self) -> Channels {
        self.channels
    }

    /// Shape of one sample: [C, h, w] (NCHW) or [h, w, C] (NHWC), C = 1 or 3.
    pub fn sample_shape(&self) -> [usize; 3] {
        let c = self.channels.count();
        match self.output.layout {
            Layout::Nchw => [c, self.height, self.width],
            Layout::Nhwc => [self.height, self.width, c],
        }
    }

    /// Bytes of one sample in the batch buffer.
    pub fn sample_bytes(&self) -> usize {
        self.channels.count() * self.height * self.width * self.output.dtype.size_bytes()
    }

    /// The output spec.
    pub fn output(&self) -> OutputSpec {
        self.output
    }

    /// The geometry of sample `key` for an image of `width × height` (for tests and tools).
    pub fn plan(&self, width: u32, height: u32, key: SampleKey) -> geometry::SamplePlan {
        self.program.prefix.plan(width, height, key)
    }

    /// The compiled program (prefix geometry + pixel ops).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Whether the GPU resampler (`cuda::resample_gpu`) can write this pipeline's samples: `Err(reason)` when the
    /// program has pixel ops (they run on the CPU's uint8 image between the resample and the write) or the output
    /// is gray (the kernels write RGB). Depends on the pipeline only, so the router can ask once.
    /// A refusal is a ConfigError naming `transforms` (what a caller that requires the GPU path reports).
    pub fn gpu_support(&self) -> Result<()> {
        let refuse = |why: &str| Err(TrdataError::config(TRANSFORMS, why));
        if self.program.moves_pixels() || self.program.mosaic.is_some() {
            return refuse("the GPU resampler takes no pixel ops nor Mosaic (they run on the CPU's uint8 image)");
        }
        if self.channels != Channels::Rgb {
            return refuse("the GPU resampler writes RGB only (channels=1 is written by the CPU path)");
        }
        Ok(())
    }

    /// The one home of "sample → window + taps at full scale" for the GPU path: for sample `key` of an image of
    /// `width × height` pixels (as stored: the GPU decodes the stored orientation, so the caller routes images
    /// with an EXIF orientation to the CPU), fill `out` with the window to decode at full size (DCT 8/8), both
    /// axes' taps (flip applied, image pixels, not rebased) and the pass order — computed by the code the CPU
    /// fused writer runs ([`Self::process`] at scale 8/8), so that the GPU resample of the same decoded pixels
    /// is byte-identical to it; with `pad_to` the taps are the sample's own size, which the resampler writes at
    /// the canvas's top left. `out` is reused across samples (its vectors only grow). Refused
    /// ([`Self::gpu_support`], an empty image, or a sample larger than `pad_to`'s canvas) as `Unsupported`.
    pub fn prepare_gpu(
        &self,
        width: u32,
        height: u32,
        key: SampleKey,
        out: &mut GpuPlan,
    ) -> std::result::Result<(), ImageError> {
        let unsupported = |why: String| ImageError::new(crate::error::ImageErrorKind::Unsupported, why);
        self.gpu_support().map_err(|e| unsupported(e.to_string()))?;
        if width == 0 || height == 0 {
            return Err(unsupported(format!("image size {width}x{height} is empty")));
        }
        let plan = self.program.prefix.plan(width, height, key);
        if plan.y.out_n > self.height || plan.x.out_n > self.width {
            // pad_to: the CPU path reports the sample as too large for the canvas
            return Err(unsupported(format!("{}x{} is larger than pad_to's canvas", plan.x.out_n, plan.y.out_n)));
        }
        out.x.compute(&plan.x, 8, width, width, plan.flip);
        out.y.compute(&plan.y, 8, height, height, plan.vflip);
        out.vertical_first = self.pass_order(8, plan.vertical_first, out.y.win1 - out.y.win0, plan.y.out_n);
        (out.flip, out.vflip, out.image_size) = (plan.flip, plan.vflip, (width, height));
        Ok(())
    }

    /// The output tables the fused writer applies (normalize + cast) as bytes: 3 channels × 256 entries ×
    /// `elem_bytes` (the second value), each entry the element's bytes as this host writes them — what the GPU
    /// resampler's `OutputFormat` needs to write the same bytes.
    pub fn output_table_bytes(&self) -> (Vec<u8>, u32) {
        self.lut.table_bytes()
    }

    /// Decode `bytes`, apply the transforms drawn from `key`, write into `dst` (exactly `sample_bytes()`).
    /// On error `dst` is left as it was.
    pub fn process(
        &self,
        scratch: &mut WorkerScratch,
        bytes: &[u8],
        key: SampleKey,
        dst: &mut [u8],
    ) -> std::result::Result<SampleTiming, ImageError> {
        assert_eq!(dst.len(), self.sample_bytes(), "process: dst must be exactly sample_bytes() long");
        let t0 = Instant::now();
        let WorkerScratch { decoder, resample: s, program, declared_size, .. } = scratch;
        let (src, m, plan, image_wh) =
            self.decode_prefix(&self.program.prefix, decoder, s, bytes, *declared_size, key)?;
        let t1 = Instant::now();
        self.run_stages(src, m, &plan, image_wh, s, program, key, dst)?;
        Ok(SampleTiming::since(t0, t1, decoder.last_decode_damaged()))
    }

    /// Steps 1–4 of the protocol (module docs) under `prefix`: the header (its size checked against the
    /// `declared` one, if any), the plan, the DCT scale, the taps (in `s`) and the decoded window → its pixels,
    /// the scale `m`, the plan and the image's (width, height).
    fn decode_prefix<'d>(
        &self,
        prefix: &geometry::CompiledTransforms,
        decoder: &'d mut Decoder,
        s: &mut ResampleScratch,
        bytes: &[u8],
        declared: Option<(u32, u32)>,
        key: SampleKey,
    ) -> std::result::Result<(SourcePixels<'d>, u8, geometry::SamplePlan, (u32, u32)), ImageError> {
        let ResampleScratch { x, y, .. } = s;
        let info = decoder.read_header(bytes)?;
        crate::source::check_declared_size((info.width, info.height), declared)?;
        let plan = prefix.plan(info.width, info.height, key);
        let (vx, vy) = (plan.x.valid(), plan.y.valid());
        let m = match self.dct {
            DctScaling::MinRatio(r) => choose_scale_eighths(
                vx.len() as f64 * plan.x.scale,
                vy.len() as f64 * plan.y.scale,
                vx.len().max(1) as u32,
                vy.len().max(1) as u32,
                r,
            ),
        };
        let m = info.effective_scale(m);
        let (sw, sh) = info.scaled_size(m);
        x.compute(&plan.x, m, info.width, sw, plan.flip);
        y.compute(&plan.y, m, info.height, sh, plan.vflip);
        let taps = PixelWindow { x0: x.win0, y0: y.win0, x1: x.win1, y1: y.win1 };
        let region = decoder.decode_window(bytes, m, taps)?;
        debug_assert_eq!(region.scale_eighths, m);
        debug_assert!(region.x0 <= x.win0 && x.win1 <= region.x0 + region.width);
        debug_assert!(region.y0 <= y.win0 && y.win1 <= region.y0 + region.height);
        let src =
            SourcePixels { pixels: region.pixels, stride: region.stride, x0: region.x0, y0: region.y0, channels: 3 };
        Ok((src, m, plan, (info.width, info.height)))
    }

    /// A leading `Mosaic`'s row (augment/mosaic.rs): draw from `key` with its `partners`, decode each
    /// part (`read(j, decode)` hands dataset sample `j`'s encoded bytes to `decode`) resized onto the canvas,
    /// then stage 2 and the write into `dst`. A part that fails → its dataset index and error (`dst` untouched).
    pub fn process_mosaic(
        &self,
        scratch: &mut WorkerScratch,
        key: SampleKey,
        partners: mosaic::Partners<'_>,
        read: &mut ReadPart<'_>,
        dst: &mut [u8],
    ) -> std::result::Result<SampleTiming, (u64, ImageError)> {
        assert_eq!(dst.len(), self.sample_bytes(), "process_mosaic: dst must be exactly sample_bytes() long");
        let stage = self.program.mosaic.as_ref().expect("process_mosaic: the program starts with a Mosaic");
        let t0 = Instant::now();
        let draw = stage.draw(key, partners);
        let side = stage.canvas();
        let c = self.channels.count();
        let WorkerScratch { decoder, resample: s, program: ps, .. } = scratch;
        let fill = ops::fill_bytes(&stage.op.fill);
        let buf = &mut ps.frame.buf;
        buf.resize(side * side * c, 0);
        if fill[..c].iter().all(|&v| v == fill[0]) {
            buf[..side * side * c].fill(fill[0]);
        } else {
            buf[..side * side * c].chunks_exact_mut(c).for_each(|px| px.copy_from_slice(&fill[..c]));
        }
        (ps.frame.h, ps.frame.w, ps.frame.c) = (side, side, c);
        let mut damaged = false;
        for (k, j) in stage.indices(&draw, key.index).into_iter().enumerate() {
            let mut part = |bytes: &[u8], declared: Option<(u32, u32)>| {
                let (src, m, plan, image_wh) = self.decode_prefix(&stage.resize, decoder, s, bytes, declared, key)?;
                let p = stage.place(&draw, k, j, image_wh);
                let (rw, rh) = (p.resized.0 as usize, p.resized.1 as usize);
                debug_assert_eq!((rw, rh), (plan.x.out_n, plan.y.out_n));
                let spare = &mut ps.ops.spare;
                if spare.len() < rw * rh * c {
                    spare.resize(rw * rh * c, 0);
                }
                let out = (&OutputLut::U8, Layout::Nhwc, rw, rh);
                self.resample_into(src, m, plan.vertical_first, s, out, &mut spare[..rw * rh * c]);
                damaged |= decoder.last_decode_damaged();
                // the visible window, row by row (module docs of augment/mosaic.rs: canvas = resized + offset)
                let [x0, y0, x1, y1] = p.clip.map(|v| v as usize);
                let (bx, by) = ((x0 as i64 - p.offset.0) as usize, (y0 as i64 - p.offset.1) as usize);
                for y in y0..y1 {
                    let from = ((by + y - y0) * rw + bx) * c;
                    let to = (y * side + x0) * c;
                    ps.frame.buf[to..to + (x1 - x0) * c].copy_from_slice(&spare[from..from + (x1 - x0) * c]);
                }
                Ok(())
            };
            read(j, &mut part).map_err(|e| (j, e))?;
        }
        let t1 = Instant::now();
        let side32 = side as u32;
        self.finish_frame(ps, key, (side32, side32), dst).map_err(|e| (key.index, e))?;
        Ok(SampleTiming::since(t0, t1, damaged))
    }

    /// Like [`process`](Self::process) for raw pixels (`trdata.Arrays`): image `i` of `array`, no decode (and
    /// so no DCT scaling). Read in place; converted (the filter window only) when its channels are not the
    /// output's.
    pub fn process_pixels(
        &self,
        scratch: &mut WorkerScratch,
        array: &crate::source::PixelArray,
        i: usize,
        key: SampleKey,
        dst: &mut [u8],
    ) -> std::result::Result<SampleTiming, ImageError> {
        self.process_raw(scratch, array.raw(i), key, dst)
    }

    /// Like [`process_pixels`](Self::process_pixels) for one raw image as a store's read gave it.
    pub fn process_raw(
        &self,
        scratch: &mut WorkerScratch,
        image: crate::source::RawImage<'_>,
        key: SampleKey,
        dst: &mut [u8],
    ) -> std::result::Result<SampleTiming, ImageError> {
        assert_eq!(dst.len(), self.sample_bytes(), "process_raw: dst must be exactly sample_bytes() long");
        let t0 = Instant::now();
        let (w, h) = (image.width, image.height);
        crate::source::check_declared_size((w, h), scratch.declared_size)?;
        let plan = self.program.prefix.plan(w, h, key);
        let WorkerScratch { resample: s, program, .. } = scratch;
        let ResampleScratch { x, y, .. } = s;
        x.compute(&plan.x, 8, w, w, plan.flip);
        y.compute(&plan.y, 8, h, h, plan.vflip);
        let channels = usize::from(image.channels);
        let src = SourcePixels { pixels: image.pixels, stride: w as usize * channels, x0: 0, y0: 0, channels };
        let t1 = Instant::now();
        self.run_stages(src, 8, &plan, (w, h), s, program, key, dst)?;
        Ok(SampleTiming::since(t0, t1, false))
    }

    /// Stages 1–3 of the program (see [`program`]) after the decode: with no pixel ops the one fused pass into
    /// `dst`; otherwise the prefix's output (`size` = (w, h), the sample's own for the identity prefix) as a uint8
    /// HWC image in the worker's scratch, the ops, and the final normalize/cast/layout write.
    #[allow(clippy::too_many_arguments)]
    fn run_stages(
        &self,
        src: SourcePixels<'_>,
        m: u8,
        plan: &geometry::SamplePlan,
        image_wh: (u32, u32),
        s: &mut ResampleScratch,
        ps: &mut ProgramScratch,
        key: SampleKey,
        dst: &mut [u8],
    ) -> std::result::Result<(), ImageError> {
        let (pillow_vertical_first, pw, ph) = (plan.vertical_first, plan.x.out_n, plan.y.out_n);
        if !self.program.moves_pixels() && self.program.pad_to.is_none() {
            self.resample_into(src, m, pillow_vertical_first, s, (&self.lut, self.output.layout, pw, ph), dst);
            return Ok(());
        }
        let c = self.channels.count();
        let n = pw * ph * c;
        if ps.frame.buf.len() < n {
            ps.frame.buf.resize(n, 0);
        }
        (ps.frame.h, ps.frame.w, ps.frame.c) = (ph, pw, c);
        self.resample_into(
            src,
            m,
            pillow_vertical_first,
            s,
            (&OutputLut::U8, Layout::Nhwc, pw, ph),
            &mut ps.frame.buf[..n],
        );
        self.finish_frame(ps, key, image_wh, dst)
    }

    /// Stages 2 and 3 on the image `ps.frame` holds (the prefix's output or a mosaic's canvas; `image_wh` the
    /// size the target replay sees): the ops, then the normalize/cast/layout write into `dst`.
    fn finish_frame(
        &self,
        ps: &mut ProgramScratch,
        key: SampleKey,
        image_wh: (u32, u32),
        dst: &mut [u8],
    ) -> std::result::Result<(), ImageError> {
        let c = ps.frame.c;
        let unsupported = |msg| ImageError::new(crate::error::ImageErrorKind::Unsupported, msg);
        if targets::needs_boxes(&self.program) {
            // the draws that depend on the boxes: the target replay's (the same for the sample's targets)
            let replay = targets::TargetPlan::replay(&self.program, key, image_wh, c, ps.boxes.as_deref());
            ps.box_draws = replay.map_err(unsupported)?.box_draws;
        }
        self.program.run_ops(ps, key).map_err(unsupported)?;
        let f = &ps.frame;
        let canvas = (self.height, self.width);
        if self.program.pad_to.is_some() {
            // each sample keeps its size, at the canvas's top left; the rest is zero (after normalization)
            if f.h > canvas.0 || f.w > canvas.1 {
                return Err(ImageError::new(
                    crate::error::ImageErrorKind::Unsupported,
                    format!("the transforms made the image ({}, {}), larger than pad_to {canvas:?}", f.h, f.w),
                ));
            }
            if (f.h, f.w) != canvas {
                dst.fill(0);
            }
        } else {
            debug_assert_eq!((f.h, f.w), canvas, "the compiled size walk fixes the final size");
        }
        let line = f.w * c;
        for (i, r) in f.buf[..f.h * line].chunks_exact(line).enumerate() {
            if c == 1 {
                resample::write_row_on::<1>(&self.lut, self.output.layout, r, i, canvas, dst);
            } else {
                resample::write_row_on::<3>(&self.lut, self.output.layout, r, i, canvas, dst);
            }
        }
        Ok(())
    }

    /// The fused writer's pass order for a sample decoded at scale `m`/8 whose row taps span `crop_rows` rows
    /// (it only changes the rounding of the 8-bit intermediate, by ±1): for deterministic pipelines at full size,
    /// Pillow's (`pillow_vertical_first`, see `geometry::pillow_vertical_first`), so that the uint8 result equals
    /// Pillow's bit for bit. Otherwise (random crops, or DCT-scaled decodes, which are not bit-exact anyway) the
    /// cheaper one: vertical first whenever the crop has more rows than the output, so that the costly horizontal
    /// pass runs on output rows only. The GPU path ([`Self::prepare_gpu`]) asks the same question.
    fn pass_order(&self, m: u8, pillow_vertical_first: bool, crop_rows: u32, out_h: usize) -> bool {
        if m == 8 && !self.program.prefix.is_random_crop() { pillow_vertical_first } else { crop_rows as usize > out_h }
    }

    /// The fused write of one sample: convert the source's channels to the output's (the filter window only),
    /// resample through the computed axes, flip, normalize, cast and lay out into `dst` (`out`: the table, layout
    /// and size of what is written).
    fn resample_into(
        &self,
        src: SourcePixels<'_>,
        m: u8,
        pillow_vertical_first: bool,
        s: &mut ResampleScratch,
        (lut, layout, ow, oh): (&OutputLut, Layout, usize, usize),
        dst: &mut [u8],
    ) {
        let ResampleScratch { x, y, inter, wide, row, window } = s;
        let vertical_first = self.pass_order(m, pillow_vertical_first, y.win1 - y.win0, oh);
        simd::resample(
            self.simd,
            resample::Job {
                pixels: src.pixels,
                stride: src.stride,
                region_x0: src.x0,
                region_y0: src.y0,
                src_channels: src.channels,
                out_channels: self.channels.count(),
                window,
                x,
                y,
                inter,
                wide,
                row,
                lut,
                layout,
                out_w: ow,
                out_h: oh,
                vertical_first,
                dst,
            },
        );
    }
}
