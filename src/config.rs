//! Loader configuration as validated data, and the one place where each loader parameter's rule and default
//! are written. Python (python/trdata) and the binding (src/py) only translate user values into these types;
//! the rules here (and the transform rules in augment/, the decode limits in decode/, the file-list rules in
//! source/) decide what is valid, and every error is worded `invalid <param>: <value> must be …`
//! (`scripts/validation_sites.py` checks that each parameter has exactly one such site).

use crate::augment::program::sized_by_source;
use crate::augment::views::SampleViews;
pub use crate::augment::{Channels, DTYPE, LAYOUT};
use crate::augment::{OutputSpec, TransformSpec};
use crate::decode::DecodeLimits;
use crate::error::{Result, TrdataError};
use crate::param::bound;
pub use crate::param::{Choice, IntParam};
pub use crate::plan::claim::WORKERS;
use crate::plan::claim::check_workers_per_engine;
use crate::plan::{LastBatch, PlanShape};
use crate::source::Dataset;
use crate::staging::BatchLayout;
use crate::topology::PinMode;
use crate::worker::ErrorPolicy;
use std::collections::HashSet;

pub use crate::augment::program::PAD_TO;
/// Rows per batch.
pub const BATCH_SIZE: IntParam = IntParam::new("batch_size", 1, 1 << 20);
/// Seed of every random decision (any 64-bit unsigned value).
pub const SEED: IntParam = IntParam::new("seed", 0, u64::MAX as i128);
/// This process's rank (also below `world_size`, checked by [`LoaderConfig::validate`]).
pub const RANK: IntParam = IntParam::new("rank", 0, i64::MAX as i128);
/// Number of ranks.
pub const WORLD_SIZE: IntParam = IntParam::new("world_size", 1, i64::MAX as i128);
/// Batches the station fills ahead of the consumer (host ring depth per engine).
pub const PREFETCH: IntParam = IntParam::new("prefetch", 2, 64).because(" (double buffering needs ≥ 2)");
/// Batches Python may hold beyond the ring (each may keep one batch buffer allocated).
pub const MAX_HELD_BATCHES: IntParam = IntParam::new("max_held_batches", 0, 65_536);
/// Device batch slots per GPU (each holds one batch in device memory). Checked for every loader, CPU or
/// CUDA: a value is valid or not whatever the device.
pub const DEVICE_SLOTS: IntParam = IntParam::new("device_slots", 2, 64).because(" (double buffering needs ≥ 2)");
/// One CPU id of `cpus` (CPU sets hold ids below glibc's CPU_SETSIZE; a larger id would index past the set
/// inside libc).
pub const CPU_ID: IntParam = IntParam::new("cpus", 0, 1023).because(" (glibc's CPU_SETSIZE)");
/// Epoch numbers (they travel through checkpoints as signed 64-bit ints).
pub const EPOCH: IntParam = IntParam::new("epoch", 0, i64::MAX as i128);
/// The `device` parameter's name (its rule: [`check_devices`]).
pub const DEVICE: &str = "device";
/// The `source` parameter's name (its rule: a dataset with samples, in [`LoaderConfig::validate`]).
pub const SOURCE: &str = "source";
/// The `channels` parameter's name (its rule: [`check_channels`]; its default: [`default::channels`]).
pub const CHANNELS: &str = "channels";

/// `last_batch` values.
pub const LAST_BATCH: Choice<LastBatch> = Choice {
    name: "last_batch",
    values: &[("partial", LastBatch::Partial), ("drop", LastBatch::Drop), ("pad", LastBatch::Pad)],
};
/// `on_error` values.
pub const ON_ERROR: Choice<ErrorPolicy> =
    Choice { name: "on_error", values: &[("raise", ErrorPolicy::Raise), ("skip", ErrorPolicy::Skip)] };
/// `pin` values.
pub const PIN: Choice<PinMode> = Choice {
    name: "pin",
    values: &[("round-robin", PinMode::RoundRobin), ("numa", PinMode::Numa), ("none", PinMode::None)],
};
/// Where the loader decodes JPEGs (`decode`; docs/design/gpu-decode.md, src/gpu_decode/).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecodeMode {
    /// Every sample on the CPU workers.
    Cpu,
    /// Every GPU-decodable sample on the GPU (nvJPEG's hardware engines + the resample kernel); the others, and
    /// any the GPU refuses, on the CPU. An error at construction when the GPU path is unavailable.
    Gpu,
    /// This fraction of the GPU-decodable samples on the GPU (chosen per sample by (seed, epoch, index)).
    Share(f64),
    /// The GPU share follows the load (starvation meter, CPU vs GPU waits); the CPU path when the GPU path is
    /// unavailable. In reproducible mode a fixed share ([`default::AUTO_REPRODUCIBLE_SHARE`]), because the path a
    /// sample takes must not depend on timing there.
    Auto,
}

/// `decode` as a string.
pub const DECODE: Choice<DecodeMode> = Choice {
    name: "decode",
    values: &[("cpu", DecodeMode::Cpu), ("gpu", DecodeMode::Gpu), ("auto", DecodeMode::Auto)],
};

/// `decode` as a number: the GPU share, in [0, 1]. The one place this rule is written.
pub fn check_decode_share(share: f64) -> Result<DecodeMode> {
    if !(share.is_finite() && (0.0..=1.0).contains(&share)) {
        return Err(TrdataError::config(
            DECODE.name,
            format!("{share} must be 'cpu', 'gpu', 'auto' or a GPU share in [0, 1]"),
        ));
    }
    Ok(DecodeMode::Share(share))
}

/// Whether the GPU decode path runs, and how its share is set: `Some((share, auto))`, or None for the CPU path.
/// `blocker` is why the GPU path cannot run for this loader (no CUDA device, transforms it cannot make, a missing
/// library), as the caller found it: `decode="gpu"` or a share > 0 then fails naming `decode`; `"auto"` runs on
/// the CPU. `"auto"` in reproducible mode is the fixed [`default::AUTO_REPRODUCIBLE_SHARE`]. The one place these
/// rules are written.
pub fn gpu_decode_share(mode: DecodeMode, reproducible: bool, blocker: Option<String>) -> Result<Option<(f64, bool)>> {
    let wanted = match mode {
        DecodeMode::Cpu | DecodeMode::Share(0.0) => return Ok(None),
        DecodeMode::Gpu => (1.0, false),
        DecodeMode::Share(p) => (p, false),
        DecodeMode::Auto if reproducible => (default::AUTO_REPRODUCIBLE_SHARE, false),
        DecodeMode::Auto => (default::AUTO_START_SHARE, true),
    };
    match (mode, blocker) {
        (_, None) => Ok(Some(wanted)),
        (DecodeMode::Auto, Some(_)) => Ok(None),
        (_, Some(why)) => {
            let shown = match mode {
                DecodeMode::Share(p) => p.to_string(),
                _ => "'gpu'".into(),
            };
            Err(TrdataError::config(DECODE.name, format!("{shown} needs the GPU decode path, which {why}")))
        }
    }
}

/// Defaults of the loader's parameters: the one place each is written. The binding exports them as
/// `_core.DEFAULTS`, which the Python signatures read (`Loader(batch_size=DEFAULTS["batch_size"], …)`).
/// Parameters whose default depends on others or on the machine have a function here instead.
pub mod default {
    use super::{ErrorPolicy, LastBatch, PinMode};
    use crate::augment::{Channels, DType, Layout};

    /// `batch_size`.
    pub const BATCH_SIZE: usize = 64;
    /// `shuffle`.
    pub const SHUFFLE: bool = false;
    /// `seed`.
    pub const SEED: u64 = 0;
    /// `last_batch`.
    pub const LAST_BATCH: LastBatch = LastBatch::Partial;
    /// `on_error`.
    pub const ON_ERROR: ErrorPolicy = ErrorPolicy::Raise;
    /// `pin`.
    pub const PIN: PinMode = PinMode::RoundRobin;
    /// `prefetch`.
    pub const PREFETCH: usize = 2;
    /// `max_held_batches`.
    pub const MAX_HELD_BATCHES: usize = 16;
    /// `device_slots`.
    pub const DEVICE_SLOTS: usize = 3;
    /// `dtype`.
    pub const DTYPE: DType = DType::F32;
    /// `layout`.
    pub const LAYOUT: Layout = Layout::Nchw;
    /// `device`: the host (batches are numpy views).
    pub const DEVICE: &str = "cpu";
    /// `exif_transpose`: pixels in stored order, as torchvision's loaders (PIL without `exif_transpose`).
    pub const EXIF_TRANSPOSE: bool = false;
    /// `decode`: the CPU workers (the GPU path is opt-in).
    pub const DECODE: &str = "cpu";
    /// The GPU share of `decode="auto"` in reproducible mode (where it cannot follow the load).
    pub const AUTO_REPRODUCIBLE_SHARE: f64 = 0.5;
    /// Where `decode="auto"` starts (fast mode); the controller moves it from there.
    pub const AUTO_START_SHARE: f64 = 0.5;

    /// `channels` when the user gives none: the source's natural count (`Dataset::natural_channels`) — 1 for a
    /// source gray by construction (MNIST and its kin: torchvision's `MNIST(transform=ToTensor())` gives
    /// (1, 28, 28)), 3 for everything else (encoded files, which torchvision's ImageFolder converts to RGB
    /// whatever they hold).
    pub fn channels(natural: u8) -> Channels {
        if natural == 1 { Channels::Gray } else { Channels::Rgb }
    }

    /// `reproducible` when the user gives none: fixed slots (dataset order) for an unshuffled loader — eval
    /// code writes predictions by position, as with torch's DataLoader — and first-finished slots for a
    /// shuffled one, whose order is random anyway (`benches/order_cost.py` measures what order costs).
    pub fn reproducible(shuffle: bool) -> bool {
        !shuffle
    }

    /// `workers` when the user gives none, from the `cpus` the workers are pinned to: every one for a CPU
    /// loader; for a GPU loader (more than two CPUs) one less, left to the training thread, whose kernel launches a
    /// worker on every core delays (benches/results/gpu.md) — and one less per GPU decode thread
    /// (`gpu_decode_threads`, 0 on the CPU path), never below half the CPUs: the decode threads feed the JPEG
    /// engines and wait on the GPU in short calls, and a worker on every core delays them too
    /// (docs/design/gpu-decode-log.md §17). Never below `engines` either: every engine needs a worker
    /// (`check_workers_per_engine`).
    pub fn workers(cpus: usize, gpu: bool, gpu_decode_threads: usize, engines: usize) -> usize {
        let w = if gpu && cpus > 2 {
            cpus.saturating_sub(1 + gpu_decode_threads).max(cpus.div_ceil(2))
        } else {
            cpus.max(1)
        };
        w.max(engines)
    }
}

/// (height, width) of every image of `ds` when the source itself says they share one size, without reading a
/// sample: raw pixel stores (`trdata.Arrays`, MNIST, CIFAR) and packed files whose index lists raw records of one
/// known size only. `None` for encoded images, whose sizes are their own.
pub fn uniform_image_size(ds: &Dataset) -> Option<(u32, u32)> {
    ds.store.uniform_size()
}

/// The loader's compiled pipeline for `ds`: `transforms=` or `views=` ([`SampleViews::from_lists`]'s rules),
/// where a source whose images share one size ([`uniform_image_size`]) fixes the output size of a list that
/// fixes none (the tutorials' `Compose([ToTensor(), Normalize(..)])` on MNIST/CIFAR needs no crop:
/// `augment::program::sized_by_source`).
pub fn sample_views(
    ds: &Dataset,
    transforms: Vec<TransformSpec>,
    views: Option<Vec<Vec<TransformSpec>>>,
    output: OutputSpec,
    channels: Channels,
) -> Result<SampleViews> {
    let size = uniform_image_size(ds);
    let (transforms, views) = match views {
        // with views, `transforms` must stay as given (the core refuses both together)
        Some(vs) => (transforms, Some(vs.into_iter().map(|v| sized_by_source(v, size)).collect())),
        None => (sized_by_source(transforms, size), None),
    };
    SampleViews::from_lists(transforms, views, output, channels)
}

/// Check a CUDA device list (`device`): at least one device, none twice. The one place these rules are
/// written; the ordinals themselves are probed when the loader is built (`cuda::check_device`).
pub fn check_devices(ordinals: &[u32]) -> Result<()> {
    if ordinals.is_empty() {
        return Err(TrdataError::config(DEVICE, "[] must name at least one CUDA device"));
    }
    let mut seen = HashSet::new();
    if let Some(dup) = ordinals.iter().find(|o| !seen.insert(**o)) {
        let shown: Vec<String> = ordinals.iter().map(|o| format!("'cuda:{o}'")).collect();
        return Err(TrdataError::config(
            DEVICE,
            format!("[{}] must list each device once (cuda:{dup} is listed twice)", shown.join(", ")),
        ));
    }
    Ok(())
}

/// Check `channels` (the user's int, `value` None when it does not even fit 128 bits, shown as `shown`): 1
/// (gray: luma of RGB sources as Pillow's `convert("L")`) or 3 (RGB: gray sources widened). The one place this
/// rule is written; `None` (the source's own count) is [`default::channels`].
pub fn check_channels(value: Option<i128>, shown: &str) -> Result<Channels> {
    match value {
        Some(1) => Ok(Channels::Gray),
        Some(3) => Ok(Channels::Rgb),
        _ => Err(TrdataError::config(
            CHANNELS,
            format!(
                "{shown} must be 1 (gray), 3 (RGB) or None (the source's own: 1 for gray sources such as \
                 trdata.MNIST, else 3)"
            ),
        )),
    }
}

/// The epoch after `epoch`, which must exist (a wrapped counter would silently replay epoch 0) and be one a
/// checkpoint can name (in [`EPOCH`]'s range).
pub fn following_epoch(epoch: u64) -> Result<u64> {
    epoch.checked_add(1).filter(|&e| i128::from(e) <= EPOCH.max).ok_or_else(|| {
        TrdataError::config(
            EPOCH.name,
            format!("{epoch} must be < {} (the last epoch number: nothing can follow it)", bound(EPOCH.max)),
        )
    })
}

impl LastBatch {
    /// Parse `drop` / `pad` / `partial`.
    pub fn parse(s: &str) -> Result<Self> {
        LAST_BATCH.parse(s)
    }

    /// The accepted string of this value.
    pub fn name(self) -> &'static str {
        LAST_BATCH.name_of(self)
    }
}

impl ErrorPolicy {
    /// Parse `raise` / `skip`.
    pub fn parse(s: &str) -> Result<Self> {
        ON_ERROR.parse(s)
    }
}

impl PinMode {
    /// Parse `none` / `round-robin` / `numa`.
    pub fn parse(s: &str) -> Result<Self> {
        PIN.parse(s)
    }
}

/// Everything a loader needs besides its dataset.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Rows per batch.
    pub batch_size: usize,
    /// Worker threads (None: [`default::workers`] for the CPUs, devices and decode path, resolved by
    /// `Loader::with_devices`).
    pub workers: Option<usize>,
    /// Shuffle the epoch order.
    pub shuffle: bool,
    /// Seed of every random decision.
    pub seed: u64,
    /// Byte-identical batches (fixed slots) instead of first-finished-first-placed slots.
    pub reproducible: bool,
    /// Last-batch policy.
    pub last_batch: LastBatch,
    /// This process's rank and the number of ranks.
    pub rank: usize,
    /// Number of ranks (processes) sharing the epoch.
    pub world_size: usize,
    /// CPU binding of workers.
    pub pin: PinMode,
    /// CPUs the `round-robin` binding cycles over (None = every CPU this process may run on). Set to this
    /// process's share of the node's cores when several ranks share a node, so they never pin to the same
    /// cores.
    pub cpus: Option<Vec<usize>>,
    /// Bad-sample policy.
    pub on_error: ErrorPolicy,
    /// Batches the station fills ahead of the consumer (ring depth K ≥ 2).
    pub prefetch: usize,
    /// Batches Python may hold at once beyond the ring before the producer blocks.
    pub max_held_batches: usize,
    /// Per-sample decode + augmentation: one compiled pipeline per view (`transforms=` is one view;
    /// `views=` several, augment/views.rs). A `SamplePipeline` converts with `.into()`.
    pub pipeline: SampleViews,
    /// Decode-bomb budgets of every worker's decoder (pixels, progressive scans, memory, retained scratch), and
    /// whether it applies EXIF orientation (`exif_transpose`, a bool: its only rule is its type).
    pub decode_limits: DecodeLimits,
    /// Where JPEGs are decoded (checked against the devices and the transforms by `Loader::with_devices`).
    pub decode: DecodeMode,
    /// Extra places to look for libnvjpeg and libnvrtc (Python passes the wheel copies on `sys.path`; the search
    /// orders are in cuda/nvjpeg.rs and cuda/nvrtc.rs).
    pub gpu_libraries: GpuLibraries,
}

/// Candidate library files of the GPU decode path, before the built-in search order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuLibraries {
    /// libnvjpeg candidates.
    pub nvjpeg: Vec<std::path::PathBuf>,
    /// libnvrtc candidates.
    pub nvrtc: Vec<std::path::PathBuf>,
}

impl LoaderConfig {
    /// Check every parameter against its rule, then against a dataset of `num_samples` samples served by
    /// `engines` engines (devices) per rank with `workers` workers (`self.workers` or its default) and this
    /// machine's memory; returns the epoch plan's shape. Names
    /// the parameter at fault. (The transforms, normalize and output type were checked when `pipeline` was
    /// built, the decode limits are checked here by `DecodeLimits::validate`.)
    pub fn validate(&self, num_samples: usize, engines: usize, workers: usize) -> Result<PlanShape> {
        self.decode_limits.validate()?;
        BATCH_SIZE.check::<usize>(self.batch_size as i128)?;
        WORKERS.check::<usize>(workers as i128).map_err(|e| match e {
            // torch's DataLoader habit: num_workers=0 loads in the training process. Say what to write instead.
            TrdataError::Config { parameter, message } if workers == 0 => TrdataError::Config {
                parameter,
                message: format!(
                    "{message}: trdata has no in-process mode (DataLoader's num_workers=0); workers=1 runs one worker \
                     thread, and errors name the file and the sample, so debugging works with workers=1"
                ),
            },
            other => other,
        })?;
        WORLD_SIZE.check::<usize>(self.world_size as i128)?;
        RANK.check::<usize>(self.rank as i128)?;
        if self.rank >= self.world_size {
            return Err(TrdataError::config(
                RANK.name,
                format!("{} must be < world_size ({})", self.rank, self.world_size),
            ));
        }
        if let Some(cpus) = &self.cpus {
            check_cpus(cpus)?;
        }
        MAX_HELD_BATCHES.check::<usize>(self.max_held_batches as i128)?;
        PREFETCH.check::<usize>(self.prefetch as i128)?;
        check_workers_per_engine(workers, engines)?;
        if num_samples == 0 {
            return Err(TrdataError::config(SOURCE, "a dataset of 0 samples must have at least one"));
        }
        let shape = PlanShape {
            num_samples: num_samples as u64,
            global_engines: (self.world_size * engines) as u64,
            batch_size: self.batch_size as u64,
            last_batch: self.last_batch,
            shuffle: self.shuffle,
            seed: self.seed,
        };
        if shape.batches_per_engine() == 0 {
            return Err(TrdataError::config(
                BATCH_SIZE.name,
                format!(
                    "{} must be ≤ the {} samples per rank with last_batch='drop' (else there is no batch)",
                    self.batch_size,
                    shape.samples_per_engine()
                ),
            ));
        }
        self.check_staging_memory(engines)?;
        Ok(shape)
    }

    /// Byte layout of one batch buffer (host slab and device slot): `batch_size` rows, one block per view.
    pub fn batch_layout(&self) -> BatchLayout {
        BatchLayout::with_views(self.batch_size, &self.pipeline.view_bytes())
    }

    /// The host batch buffers this configuration needs must be able to exist: the slab size must not
    /// overflow, and the `prefetch` buffers each engine's station keeps in flight must fit in this machine's
    /// memory (otherwise the first allocation would fail mid-iteration, or be killed by the OOM killer when
    /// touched). A single sample too large for the machine was refused when the pipeline was built.
    fn check_staging_memory(&self, engines: usize) -> Result<()> {
        let sample_bytes = self.pipeline.row_bytes();
        let layout = self.batch_layout();
        let shapes: Vec<String> = self
            .pipeline
            .views()
            .iter()
            .map(|p| {
                let [c, h, w] = p.sample_shape();
                format!("{c}×{h}×{w}")
            })
            .collect();
        let describe = || {
            format!(
                "a batch of {} samples of {} × {} bytes = {} bytes",
                self.batch_size,
                shapes.join(" + "),
                self.pipeline.first().output().dtype.size_bytes(),
                u128::from(sample_bytes as u64) * self.batch_size as u128
            )
        };
        let Some(slab) = layout.checked_total_bytes() else {
            return Err(TrdataError::config(
                BATCH_SIZE.name,
                format!("{} must fit in memory addresses ({})", self.batch_size, describe()),
            ));
        };
        let Some(usable) = crate::topology::usable_memory_bytes() else { return Ok(()) };
        let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
        // A GPU loader has one host station per device.
        let needed = slab as u128 * self.prefetch as u128 * engines as u128;
        if needed > u128::from(usable) {
            return Err(TrdataError::config(
                BATCH_SIZE.name,
                format!(
                    "{} must fit in memory: {}; the {} batch buffers kept in flight (prefetch={} per engine) need \
                     {:.2} GiB but this machine has {:.2} GiB of memory",
                    self.batch_size,
                    describe(),
                    self.prefetch * engines,
                    self.prefetch,
                    gib(needed),
                    gib(u128::from(usable))
                ),
            ));
        }
        Ok(())
    }
}

/// Check `cpus`: at least one id, none twice, each a CPU this process may run on (`sched_getaffinity`, the
/// set the workers are pinned within; an id outside it would make pinning fail when the workers start).
fn check_cpus(cpus: &[usize]) -> Result<()> {
    let shown = || format!("{cpus:?}");
    if cpus.is_empty() {
        return Err(TrdataError::config(CPU_ID.name, "[] must list at least one CPU id"));
    }
    for &c in cpus {
        CPU_ID.check::<usize>(c as i128)?;
    }
    let mut seen = HashSet::new();
    if let Some(dup) = cpus.iter().find(|c| !seen.insert(**c)) {
        return Err(TrdataError::config(
            CPU_ID.name,
            format!("{} must list each CPU once (CPU {dup} is listed twice)", shown()),
        ));
    }
    let allowed = crate::topology::current_thread_affinity().unwrap_or_default();
    // An empty allowed set means it could not be read: no check then (pinning falls back to none).
    let outside: Vec<usize> = cpus.iter().copied().filter(|c| !allowed.is_empty() && !allowed.contains(c)).collect();
    if !outside.is_empty() {
        return Err(TrdataError::config(
            CPU_ID.name,
            format!(
                "{} must be CPUs this process may run on: {outside:?} not in sched_getaffinity(0) = {}",
                shown(),
                crate::topology::format_cpu_list(&allowed)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_of_one_size_fixes_the_output_size_of_a_list_that_fixes_none() {
        use crate::augment::{DType, Layout, OutputSpec, TransformSpec as T};
        let pixels = crate::source::arrays(vec![9; 2 * 5 * 7], 2, 5, 7, 1, vec![0, 1]).unwrap();
        let files = crate::source::file_list(vec!["a.jpg".into()], vec![0]).unwrap();
        assert_eq!((uniform_image_size(&pixels), uniform_image_size(&files)), (Some((5, 7)), None));
        let out = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None };
        let hw =
            |ds: &Dataset, t: Vec<T>| sample_views(ds, t, None, out, Channels::Gray).map(|v| v.views()[0].output_hw());
        assert_eq!(hw(&pixels, vec![]).unwrap(), (5, 7));
        assert_eq!(hw(&pixels, vec![T::RandomHorizontalFlip { p: 0.5 }]).unwrap(), (5, 7));
        assert_eq!(hw(&pixels, vec![T::ResizeShorter { shorter: 10 }]).unwrap(), (10, 14));
        // a list that fixes its own size is compiled as given; encoded files still need one
        assert_eq!(hw(&pixels, vec![T::CenterCrop { height: 3, width: 3 }]).unwrap(), (3, 3));
        assert!(hw(&files, vec![]).unwrap_err().to_string().contains("must fix the output size"));
        // with views, `transforms` stays empty (both together stay refused) and each view is sized
        let v = sample_views(&pixels, vec![], Some(vec![vec![], vec![]]), out, Channels::Gray).unwrap();
        assert_eq!(v.views().iter().map(|p| p.output_hw()).collect::<Vec<_>>(), [(5, 7), (5, 7)]);
    }

    #[test]
    fn every_choice_round_trips_and_only_exact_strings_parse() {
        for (name, v) in LAST_BATCH.values {
            assert_eq!(LastBatch::parse(name).unwrap(), *v);
            assert_eq!(v.name(), *name);
        }
        for (name, v) in DTYPE.values {
            assert_eq!(DTYPE.parse(name).unwrap(), *v);
            assert_eq!(DTYPE.name_of(*v), *name);
        }
        assert_eq!(PinMode::parse("numa").unwrap(), PinMode::Numa);
        assert_eq!(ErrorPolicy::parse("skip").unwrap(), ErrorPolicy::Skip);
        for bad in ["Drop", "drop ", "", "DROP"] {
            let e = LastBatch::parse(bad).unwrap_err().to_string();
            assert_eq!(e, format!("invalid last_batch: {bad:?} must be one of 'partial', 'drop', 'pad'"));
        }
        let e = LAYOUT.parse("nchw").unwrap_err().to_string();
        assert_eq!(e, "invalid layout: \"nchw\" must be one of 'NCHW', 'NHWC'");
    }

    #[test]
    fn int_params_check_their_range_once_with_one_wording() {
        for ok in [2, 3, 64] {
            assert_eq!(DEVICE_SLOTS.check::<usize>(ok).unwrap(), ok as usize);
        }
        for bad in [i128::from(i64::MIN), -1, 0, 1, 65, 1_000_000_000, i128::from(i64::MAX)] {
            let e = DEVICE_SLOTS.check::<usize>(bad).unwrap_err().to_string();
            assert_eq!(e, format!("invalid device_slots: {bad} must be in 2..=64 (double buffering needs ≥ 2)"));
        }
        let e = SEED.check_shown::<u64>(None, "1000…(5000 digits)").unwrap_err().to_string();
        assert_eq!(e, "invalid seed: 1000…(5000 digits) must be in 0..=2**64 - 1");
        assert_eq!(SEED.check::<u64>(i128::from(u64::MAX)).unwrap(), u64::MAX);
        assert_eq!(EPOCH.error("-1").to_string(), "invalid epoch: -1 must be in 0..=2**63 - 1");
        assert_eq!(following_epoch(5).unwrap(), 6);
        assert!(following_epoch((1 << 63) - 2).is_ok());
        assert!(following_epoch((1 << 63) - 1).is_err());
        assert!(following_epoch(u64::MAX).is_err());
    }

    #[test]
    fn channels_are_one_or_three_and_default_to_the_source() {
        assert_eq!(check_channels(Some(1), "1").unwrap(), Channels::Gray);
        assert_eq!(check_channels(Some(3), "3").unwrap(), Channels::Rgb);
        for (v, shown) in [(Some(0), "0"), (Some(2), "2"), (Some(4), "4"), (Some(-1), "-1"), (None, "10**40")] {
            let e = check_channels(v, shown).unwrap_err().to_string();
            assert!(e.starts_with(&format!("invalid channels: {shown} must be 1 (gray), 3 (RGB) or None")), "{e}");
        }
        assert_eq!(default::channels(1), Channels::Gray);
        assert_eq!(default::channels(3), Channels::Rgb);
    }

    #[test]
    fn device_lists_and_worker_counts() {
        assert!(check_devices(&[0, 1]).is_ok());
        assert_eq!(
            check_devices(&[]).unwrap_err().to_string(),
            "invalid device: [] must name at least one CUDA device"
        );
        assert!(check_devices(&[1, 0, 1]).unwrap_err().to_string().contains("cuda:1 is listed twice"));
        assert!(check_workers_per_engine(2, 2).is_ok());
        assert!(check_workers_per_engine(1, 2).is_err());
        assert!(check_workers_per_engine(1, 0).is_err());
        assert_eq!(default::workers(16, true, 0, 1), 15);
        assert_eq!(default::workers(2, true, 0, 1), 2);
        assert_eq!(default::workers(16, false, 0, 1), 16);
        // GPU decode threads get cores of their own (3 per engine), never below half the CPUs...
        assert_eq!(default::workers(16, true, 3, 1), 12);
        assert_eq!(default::workers(4, true, 3, 1), 2);
        assert_eq!(default::workers(128, true, 24, 8), 103);
        assert_eq!(default::workers(16, true, 24, 8), 8);
        // ...nor below one per engine (8 GPUs on 12 CPUs with GPU decode: 8, not 6).
        assert_eq!(default::workers(12, true, 24, 8), 8);
        assert_eq!(default::workers(4, true, 0, 8), 8);
        assert!(check_workers_per_engine(default::workers(12, true, 24, 8), 8).is_ok());
    }

    #[test]
    fn cpu_lists_are_checked_against_this_process() {
        let allowed = crate::topology::current_thread_affinity().unwrap_or_default();
        assert!(check_cpus(&allowed).is_ok());
        for (bad, says) in [
            (vec![], "[] must list at least one CPU id"),
            (vec![1024], "must be in 0..=1023"),
            (vec![allowed[0], allowed[0]], "listed twice"),
            (vec![1023], "sched_getaffinity"),
        ] {
            let e = check_cpus(&bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid cpus: ") && e.contains(says), "{e}");
        }
    }
}
