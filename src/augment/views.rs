//! views — several independently augmented views of one sample (the loader's `views=`, DINO/SimCLR: two
//! global and N local crops), between decode and staging: the worker reads a sample's bytes once, and each
//! view is decoded and augmented from those same in-memory bytes into its own region of the batch row.
//!
//! Why decode once per view rather than once per sample: each view draws its own crop, so each needs its own
//! ROI and DCT scale (a 96×96 local crop of a small region decodes at 1/4 or 1/8 scale, a 224×224 global crop
//! of most of the image at 1/2 or full scale); one full-size decode shared by all would cost more than the
//! per-view ROI decodes it replaces. What is shared is the expensive part that does not depend on the view:
//! reading the file (or the packed record) from storage, once.
//!
//! Randomness: view `k` of sample (seed, epoch, index) draws exactly what view 0 would draw under the seed
//! [`view_seed`]`(seed, k)` = seed + k·φ (mod 2^64, φ the odd 64-bit golden-ratio constant): every stream of the
//! view (the folded geometry's RandomResizedCrop and flip coins, every pixel op's `OP_BASE + pos`) gets a
//! Philox key of its own, so two views of one sample are independent, view `k` is a function of
//! (seed, epoch, index, k, op) only — the same for any worker, GPU or rank count — and view 0 is exactly the
//! single-pipeline loader's sample (`view_seed(seed, 0) == seed`). Deriving the key rather than offsetting
//! op ids keeps every stream of every op (present and future) apart without the op knowing about views; and
//! a single-pipeline loader with `seed=view_seed(seed, k)` and an unshuffled order reproduces view `k` (the
//! tests prove both through Python).
//!
//! Output: every view shares dtype, layout, normalize and channels; each has its own size. The batch buffer
//! holds the views' blocks back to back (`staging::BatchLayout`); the worker hands this module one
//! [`ViewTargets`] per row, whose view `k` is the row's slot in block `k`.

use super::{Channels, OutputSpec, SampleKey, SamplePipeline, SampleTiming, TransformSpec, WorkerScratch};
use crate::error::{ImageError, Result, TrdataError};
use crate::source::{PixelArray, RawImage};

/// Most views one loader may have: 2 global + 8 local crops is DINO's largest recipe; the limit bounds the
/// batch layout's fixed table (`staging::BatchLayout`) and the work per sample.
pub const MAX_VIEWS: usize = 16;

/// The `views` parameter's name (its rules: [`SampleViews::from_lists`]).
pub const VIEWS: &str = "views";

/// Step between view seeds: the odd 64-bit golden-ratio constant, so k·φ (mod 2^64) differs for every k.
const VIEW_SEED_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// The seed whose view-0 streams view `view` draws from (see the module docs); `view_seed(s, 0) == s`.
pub fn view_seed(seed: u64, view: usize) -> u64 {
    seed.wrapping_add((view as u64).wrapping_mul(VIEW_SEED_STEP))
}

impl SampleKey {
    /// The key whose streams view `view` of this sample draws from (itself for view 0).
    pub fn for_view(self, view: usize) -> SampleKey {
        SampleKey { seed: view_seed(self.seed, view), ..self }
    }
}

/// Where one row's views go: view `k` is exactly `SampleViews::views()[k].sample_bytes()` long.
pub trait ViewTargets {
    /// The destination of view `view` of the row.
    fn view_mut(&mut self, view: usize) -> &mut [u8];
}

/// A row held as one buffer per view (tests and tools).
impl ViewTargets for [Vec<u8>] {
    fn view_mut(&mut self, view: usize) -> &mut [u8] {
        &mut self[view]
    }
}

/// The compiled views of a loader: one [`SamplePipeline`] per view (a loader built with `transforms=` has
/// exactly one, and runs as it always did).
#[derive(Debug, Clone)]
pub struct SampleViews {
    views: Vec<SamplePipeline>,
    /// Built from `views=` (the batch's images are a tuple even for one view) rather than `transforms=`.
    multi: bool,
}

impl From<SamplePipeline> for SampleViews {
    fn from(p: SamplePipeline) -> Self {
        Self { views: vec![p], multi: false }
    }
}

impl SampleViews {
    /// Compile the loader's `transforms=` or `views=` (exactly one of them: `views` None, or `transforms`
    /// empty) with the shared `output` and `channels`. Errors name `views` and the view (`views[k]`) when a
    /// view's list is at fault.
    pub fn from_lists(
        transforms: Vec<TransformSpec>,
        views: Option<Vec<Vec<TransformSpec>>>,
        output: OutputSpec,
        channels: Channels,
    ) -> Result<Self> {
        let Some(views) = views else {
            return Ok(SamplePipeline::with_channels(transforms, output, channels)?.into());
        };
        if !transforms.is_empty() {
            return Err(TrdataError::config(
                VIEWS,
                format!(
                    "a list of {} pipelines must not be given together with transforms (each view has its own \
                     transforms: put the shared ones in every view)",
                    views.len()
                ),
            ));
        }
        if views.is_empty() || views.len() > MAX_VIEWS {
            return Err(TrdataError::config(
                VIEWS,
                format!("a list of {} pipelines must hold 1 to {MAX_VIEWS} pipelines", views.len()),
            ));
        }
        let views = views
            .into_iter()
            .enumerate()
            .map(|(k, t)| {
                SamplePipeline::with_channels(t, output, channels).map_err(|e| match e {
                    // A view's transforms broke a transform rule: say which view, keep the rule's words.
                    TrdataError::Config { parameter, message } if parameter == super::TRANSFORMS => {
                        TrdataError::config(VIEWS, format!("views[{k}]: {message}"))
                    }
                    other => other,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if views.iter().any(|v| v.program().mosaic.is_some()) {
            return Err(TrdataError::config(VIEWS, "a Mosaic takes one view (use transforms=)".to_string()));
        }
        Ok(Self { views, multi: true })
    }

    /// The views' pipelines, in view order.
    pub fn views(&self) -> &[SamplePipeline] {
        &self.views
    }

    /// View 0's pipeline (the only one of a `transforms=` loader).
    pub fn first(&self) -> &SamplePipeline {
        &self.views[0]
    }

    /// True for a loader built with `views=` (its batches' images are a tuple, one array per view).
    pub fn is_multi(&self) -> bool {
        self.multi
    }

    /// Bytes of one image of each view, in view order (the batch layout's blocks).
    pub fn view_bytes(&self) -> Vec<usize> {
        self.views.iter().map(SamplePipeline::sample_bytes).collect()
    }

    /// Bytes of one row, all views together.
    pub fn row_bytes(&self) -> usize {
        self.views.iter().map(SamplePipeline::sample_bytes).sum()
    }

    /// Why the GPU decode path (gpu_decode/) cannot make these samples, or None when it can: one
    /// view, and a pipeline the GPU resampler writes ([`SamplePipeline::gpu_support`]: geometry only, RGB) whose
    /// geometry fixes the output size by a crop or resize.
    pub fn gpu_unsupported(&self) -> Option<String> {
        if self.is_multi() {
            return Some(format!("views= ({} views): the GPU path makes one view per sample", self.views.len()));
        }
        let p = self.first();
        if let Err(e) = p.gpu_support() {
            return Some(match e {
                crate::error::TrdataError::Config { message, .. } => message,
                other => other.to_string(),
            });
        }
        if p.program().prefix.geometry == super::geometry::Geometry::Identity && p.program().pad_to.is_none() {
            return Some("the transforms fix no output size by a crop or resize (nor does pad_to)".into());
        }
        None
    }

    /// Decode `bytes` once per view (see the module docs) into `dst`'s views. On error the views written
    /// before the failing one keep their pixels (the worker zeroes the row or writes a replacement).
    pub fn process(
        &self,
        scratch: &mut WorkerScratch,
        bytes: &[u8],
        key: SampleKey,
        dst: &mut (impl ViewTargets + ?Sized),
    ) -> std::result::Result<SampleTiming, ImageError> {
        self.each_view(key, dst, |p, k, d| p.process(scratch, bytes, k, d))
    }

    /// Like [`process`](Self::process) for image `i` of a pixel array.
    pub fn process_pixels(
        &self,
        scratch: &mut WorkerScratch,
        array: &PixelArray,
        i: usize,
        key: SampleKey,
        dst: &mut (impl ViewTargets + ?Sized),
    ) -> std::result::Result<SampleTiming, ImageError> {
        self.process_raw(scratch, array.raw(i), key, dst)
    }

    /// Like [`process`](Self::process) for one raw image as a store's read gave it.
    pub fn process_raw(
        &self,
        scratch: &mut WorkerScratch,
        image: RawImage<'_>,
        key: SampleKey,
        dst: &mut (impl ViewTargets + ?Sized),
    ) -> std::result::Result<SampleTiming, ImageError> {
        self.each_view(key, dst, |p, k, d| p.process_raw(scratch, image, k, d))
    }

    fn each_view<T: ViewTargets + ?Sized>(
        &self,
        key: SampleKey,
        dst: &mut T,
        mut run: impl FnMut(&SamplePipeline, SampleKey, &mut [u8]) -> std::result::Result<SampleTiming, ImageError>,
    ) -> std::result::Result<SampleTiming, ImageError> {
        let mut total = SampleTiming::default();
        for (k, p) in self.views.iter().enumerate() {
            let t = run(p, key.for_view(k), dst.view_mut(k))?;
            total.decode_ns += t.decode_ns;
            total.augment_ns += t.augment_ns;
            total.damaged |= t.damaged;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::{DType, Layout};

    const U8_NHWC: OutputSpec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None };

    fn rrc(side: u32, scale: (f64, f64)) -> Vec<TransformSpec> {
        vec![
            TransformSpec::RandomResizedCrop { height: side, width: side, scale, ratio: (0.75, 4.0 / 3.0) },
            TransformSpec::RandomHorizontalFlip { p: 0.5 },
        ]
    }

    /// A textured RGB array of one 60×80 image (every crop and flip changes the pixels).
    fn array() -> PixelArray {
        let data = (0..60 * 80 * 3).map(|i| ((i * 37 + (i / 7) * 11) % 251) as u8).collect();
        PixelArray { data, height: 60, width: 80, channels: 3 }
    }

    fn single(t: Vec<TransformSpec>, a: &PixelArray, key: SampleKey) -> Vec<u8> {
        let p = SamplePipeline::new(t, U8_NHWC).unwrap();
        let mut dst = vec![0; p.sample_bytes()];
        p.process_pixels(&mut WorkerScratch::new().unwrap(), a, 0, key, &mut dst).unwrap();
        dst
    }

    /// View k of a multi-view run is the single pipeline of view k under `view_seed(seed, k)`; view 0 under the
    /// seed itself; two views with the same transforms differ.
    #[test]
    fn view_k_is_the_single_pipeline_under_the_view_seed() {
        let lists = vec![rrc(24, (0.4, 1.0)), rrc(24, (0.4, 1.0)), rrc(10, (0.05, 0.4))];
        let views = SampleViews::from_lists(vec![], Some(lists.clone()), U8_NHWC, Channels::Rgb).unwrap();
        assert!(views.is_multi());
        assert_eq!(views.row_bytes(), 24 * 24 * 3 * 2 + 10 * 10 * 3);
        let a = array();
        let key = SampleKey { seed: 11, epoch: 3, index: 5 };
        let mut row: Vec<Vec<u8>> = views.views().iter().map(|p| vec![0; p.sample_bytes()]).collect();
        views.process_pixels(&mut WorkerScratch::new().unwrap(), &a, 0, key, &mut row[..]).unwrap();
        assert_eq!(row[0], single(lists[0].clone(), &a, key), "view 0 is the single-pipeline sample");
        for (k, l) in lists.iter().enumerate() {
            let seeded = SampleKey { seed: view_seed(11, k), ..key };
            assert_eq!(row[k], single(l.clone(), &a, seeded), "view {k}");
        }
        assert_ne!(row[0], row[1], "two views of one sample must be independently augmented");
        assert_eq!(view_seed(11, 0), 11);
        assert_eq!(key.for_view(0), key);
        assert_ne!(key.for_view(1).seed, key.for_view(2).seed);
    }

    #[test]
    fn transforms_alone_compile_to_one_view_as_before() {
        let v = SampleViews::from_lists(rrc(8, (0.5, 1.0)), None, U8_NHWC, Channels::Rgb).unwrap();
        assert!(!v.is_multi());
        assert_eq!(v.views().len(), 1);
        assert_eq!(v.row_bytes(), v.first().sample_bytes());
    }

    #[test]
    fn bad_views_are_config_errors_naming_views() {
        let err = |t: Vec<TransformSpec>, v: Vec<Vec<TransformSpec>>| {
            SampleViews::from_lists(t, Some(v), U8_NHWC, Channels::Rgb).unwrap_err().to_string()
        };
        assert_eq!(
            err(rrc(8, (0.5, 1.0)), vec![rrc(8, (0.5, 1.0))]),
            "invalid views: a list of 1 pipelines must not be given together with transforms (each view has its \
             own transforms: put the shared ones in every view)"
        );
        assert_eq!(err(vec![], vec![]), "invalid views: a list of 0 pipelines must hold 1 to 16 pipelines");
        assert!(err(vec![], vec![rrc(8, (0.5, 1.0)); 17]).contains("17 pipelines must hold 1 to 16"));
        // A view's own rule keeps its words and says which view.
        let e = err(vec![], vec![rrc(8, (0.5, 1.0)), vec![TransformSpec::RandomHorizontalFlip { p: 0.5 }]]);
        assert!(e.starts_with("invalid views: views[1]: ") && e.contains("must fix the output size"), "{e}");
    }
}
