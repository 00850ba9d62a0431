//! The loader: dataset + config → epochs of batches. Owns the lifecycle (DESIGN.md §3): construction only
//! validates; the pool and station start on the first epoch; starting a new epoch cancels a running one;
//! `close` is idempotent and joins every thread (waiting at most `worker::STOP_WAIT` for a worker stuck in a
//! Python sample, which it then leaves running); use from a forked child is refused.
//!
//! Devices: `DeviceSpec::Cpu` is one CPU engine whose station Python reads directly. `DeviceSpec::Cuda`
//! runs one engine per listed GPU in this process (transfer/engine.rs: pinned host station + H2D thread;
//! transfer/ring.rs: device slot ring), fed by the one worker pool (worker w serves local engine w mod D, the static
//! claiming rule); local engine d is global engine rank·D + d of a plan over world_size·D engines, and
//! each step yields one batch per GPU (`next_step`). CUDA problems surface at construction (no driver,
//! no such device) or on the first iteration (context, allocations) as `TrdataError::Cuda`.
//!
//! Exact resume (plan/resume.rs): `state()` at a batch boundary returns the position (epoch, batches
//! delivered, fast mode: delivered sequence numbers) plus a fingerprint of everything the plan depends on;
//! `load_state` on a fresh loader checks the fingerprint (a `Config` error naming the first field that
//! differs) and makes the next `start_epoch` continue that epoch at that batch. Batch k of the running
//! epoch counts as delivered once `next_step` returned it; a checkpoint after the last batch
//! of epoch e is normalized to (e + 1, 0).

use crate::augment::mosaic::Partners;
use crate::config::{self, DecodeMode, LoaderConfig};
use crate::cuda::{self, nvjpeg, nvrtc};
use crate::error::{Result, SampleError, TrdataError};
use crate::gpu_decode::{CpuFallback, GpuDecode, GpuDecodeSetup, GpuRows, Share};
use crate::plan::resume::{ResumePoint, SeqBitmap};
use crate::plan::{EpochPlan, LastBatch, PlanShape};
use crate::sample::{ExtrasStore, RowExtras, RowFields, TargetBatch, TargetStore};
use crate::source::Dataset;
use crate::stats::{GpuCounters, Stats};
use crate::sync::{Arc, AtomicBool, Mutex, Ordering, lock};
use crate::topology::{self, PinMode};
use crate::transfer::{BatchLease, EpochShape, Station, Take};
use crate::transfer::{DeviceBatch, DeviceNext, GpuEngine, GpuEngineConfig};
use crate::worker::{EngineJob, EpochFallback, EpochJob, SkipLog, SkipRecord, WorkContext, WorkerPool};
use std::time::Duration;

/// Where one engine's batch lives.
#[derive(Debug)]
pub enum BatchImages {
    /// A host station buffer (the CPU engine), returned to the station on drop.
    Host(BatchLease),
    /// A device slot of one GPU engine (labels and images live in it), returned to its ring on drop.
    Device(DeviceBatch),
}

/// One engine's batch of a step, as the consumer sees it.
#[derive(Debug)]
pub struct EngineBatch {
    /// The batch's memory.
    pub images: BatchImages,
    /// Label of every row.
    pub labels: Vec<i64>,
    /// Dataset index of every row.
    pub indices: Vec<i64>,
    /// Leading rows that are real, unique samples of this epoch (the rest repeat them).
    pub valid: usize,
    /// Epoch the batch belongs to.
    pub epoch: u64,
    /// Every row's targets as ragged columns (sample/batch.rs), when the source has targets.
    pub targets: Option<TargetBatch>,
    /// Every row's extras as its worker read them (sample/extras.rs), when the source has extras.
    pub extras: Option<Vec<RowExtras>>,
}

/// Where a loader delivers its batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Host memory (numpy/DLPack views of the station's buffers).
    Cpu,
    /// One engine per listed CUDA device, in this order.
    Cuda {
        /// Device ordinals (`cuda:N`), distinct.
        ordinals: Vec<u32>,
        /// Device ring depth per GPU (≥ 2).
        device_slots: usize,
    },
}

impl DeviceSpec {
    /// Local engines: 1 for the CPU, one per GPU.
    pub fn engines(&self) -> usize {
        match self {
            DeviceSpec::Cpu => 1,
            DeviceSpec::Cuda { ordinals, .. } => ordinals.len(),
        }
    }
}

/// What `next_step` returns: the one iteration shape of every loader (a CPU loader is one engine).
#[derive(Debug)]
pub enum NextStep {
    /// One batch per local engine, in engine (device) order.
    Step(Vec<EngineBatch>),
    /// Not ready yet; call again (the caller checks signals in between).
    Timeout,
    /// The epoch is over.
    End,
}

/// One engine's answer to a poll for batch `b`.
enum EnginePoll {
    Ready(BatchImages, Option<SampleError>),
    Timeout,
    End,
    /// Every buffer that could hold the next batch is held by the consumer: (count, what they are).
    AllHeld(usize, String),
    Failed(TrdataError),
}

#[derive(Debug)]
struct Runtime {
    pool: WorkerPool,
    /// CPU: the one station. GPU: unused (each engine owns its station).
    station: Arc<Station>,
    gpus: Vec<GpuEngine>,
    /// Each GPU engine's decode path, when on (in `gpus` order): the workers route to it, the transfer thread
    /// drives it (gpu_decode/).
    gpu_decode: Vec<Option<std::sync::Arc<GpuDecode>>>,
    pid: u32,
}

/// Version of the `LoaderState` format.
pub const STATE_VERSION: u32 = 1;

/// A loader's position at a batch boundary plus the fingerprint of what the epoch plan depends on
/// (`Loader::state` / `Loader::load_state`; plan/resume.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderState {
    /// Format version (`STATE_VERSION`).
    pub version: u32,
    /// Seed of the plan and of every augmentation.
    pub seed: u64,
    /// Epoch to continue.
    pub epoch: u64,
    /// Batches (steps) of `epoch` already delivered.
    pub batches: u64,
    /// Dataset size N.
    pub num_samples: u64,
    /// Ranks.
    pub world_size: u64,
    /// This rank.
    pub rank: u64,
    /// Engines (devices) per rank.
    pub devices: u64,
    /// Batch size B.
    pub batch_size: u64,
    /// Last-batch policy.
    pub last_batch: LastBatch,
    /// Shuffled order.
    pub shuffle: bool,
    /// Fixed slots (true) or ticket slots (false).
    pub reproducible: bool,
    /// What the shuffle follows besides the samples: "samples", or a partial pack's blocks and window
    /// (`Dataset::order_fingerprint`); a checkpoint of one order must not continue in another.
    pub order: String,
    /// The source the checkpoint was taken over (`Dataset::identity`: kind and a cheap fingerprint); None in a
    /// checkpoint of a trdata that did not record it, which then loads without this check.
    pub source: Option<String>,
    /// Fast mode, `batches` > 0: per local engine, the bitmap of delivered sequence numbers. Empty otherwise.
    pub delivered: Vec<Vec<u8>>,
}

#[derive(Debug)]
struct Running {
    plan: Arc<EpochPlan>,
    job: Arc<EpochJob>,
    /// Batch the epoch started at (> 0 after a resume).
    first_batch: u64,
    next_batch: u64,
    /// GPU: batches of the current step already received, per engine.
    /// Per local engine, its batch of the current step once it arrived (a step is complete when all did).
    pending: Vec<Option<BatchImages>>,
    /// The first sample error (under `on_error='raise'`) of a batch of the current step: the step is raised as
    /// that error once every engine's batch of it arrived, and the epoch goes on with the next step.
    failed: Option<SampleError>,
}

/// A configured loader over one dataset (one CPU engine in this process).
#[derive(Debug)]
pub struct Loader {
    cfg: LoaderConfig,
    /// Worker threads: `cfg.workers` or its default for this loader's CPUs, devices and decode path.
    workers: usize,
    shape: PlanShape,
    ctx: Arc<WorkContext>,
    next_epoch: u64,
    runtime: Option<Runtime>,
    running: Option<Running>,
    closed: bool,
    devices: DeviceSpec,
    gpu_counters: std::sync::Arc<GpuCounters>,
    /// Where the next `start_epoch` continues, after `load_state`.
    resume: Option<ResumePoint>,
    /// The GPU decode path (`decode=`), resolved at construction; None: every sample on the CPU workers.
    gpu_plan: Option<GpuPlan>,
}

/// The GPU decode path a loader runs: the libraries found and the share (gpu_decode/).
#[derive(Clone)]
struct GpuPlan {
    nvjpeg: std::sync::Arc<nvjpeg::Nvjpeg>,
    nvrtc: std::sync::Arc<nvrtc::Nvrtc>,
    share: Share,
}

impl std::fmt::Debug for GpuPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuPlan").field("share", &self.share).finish_non_exhaustive()
    }
}

/// What the GPU resampler writes for `p`'s samples: the fused writer's own tables, layout and size.
fn gpu_output_format(p: &crate::augment::SamplePipeline) -> cuda::resample_gpu::OutputFormat {
    let (lut, elem_bytes) = p.output_table_bytes();
    let (h, w) = p.output_hw();
    cuda::resample_gpu::OutputFormat {
        lut,
        elem_bytes,
        nchw: p.output().layout == crate::augment::Layout::Nchw,
        out_h: h as u32,
        out_w: w as u32,
    }
}

/// Resolve `decode=` for this loader: find what blocks the GPU path (no CUDA device, transforms it cannot make,
/// a missing library), then `config::gpu_decode_share` decides (an error for "gpu", the CPU path for "auto").
fn plan_gpu_decode(cfg: &LoaderConfig, devices: &DeviceSpec) -> Result<Option<GpuPlan>> {
    if cfg.decode == DecodeMode::Cpu {
        return Ok(None);
    }
    let tried = |t: &[(String, String)]| t.iter().map(|(p, why)| format!("{p}: {why}")).collect::<Vec<_>>().join("; ");
    let mut libs = None;
    let blocker = if *devices == DeviceSpec::Cpu {
        Some("writes into device batches: use device='cuda:N'".to_owned())
    } else if let Some(why) = cfg.pipeline.gpu_unsupported() {
        Some(format!("cannot make these samples: {why}"))
    } else {
        match (nvjpeg::open(&cfg.gpu_libraries.nvjpeg), nvrtc::open(&cfg.gpu_libraries.nvrtc)) {
            ((Some(j), _), (Some(r), _)) => {
                libs = Some((j, r));
                None
            }
            ((None, p), _) => Some(format!("needs libnvjpeg, which was not found (tried {})", tried(&p.tried))),
            (_, (None, p)) => Some(format!("needs libnvrtc, which was not found (tried {})", tried(&p.tried))),
        }
    };
    let Some((share, auto)) = config::gpu_decode_share(cfg.decode, cfg.reproducible, blocker)? else {
        return Ok(None);
    };
    let (nvjpeg, nvrtc) = libs.expect("no blocker: both libraries were found");
    Ok(Some(GpuPlan { nvjpeg, nvrtc, share: if auto { Share::Auto(share) } else { Share::Fixed(share) } }))
}

impl Loader {
    /// Whether this loader can move a detection source's targets with its images: a `ConfigError` on
    /// `exif_transpose` (annotations are in the stored pixels' orientation), on `views` (one view), or on
    /// `transforms` naming an op whose geometry the targets cannot follow (`augment::targets::check_program`).
    pub fn check_targets(&self) -> Result<()> {
        if self.cfg.decode_limits.exif_transpose {
            return Err(TrdataError::config(
                "exif_transpose",
                "must be False for a source with detection targets: its annotations are in the stored pixels' \
                 orientation (as torchvision's CocoDetection reads them)"
                    .to_string(),
            ));
        }
        if self.cfg.pipeline.is_multi() {
            return Err(TrdataError::config("views", "a source with detection targets takes one view".to_string()));
        }
        let program = self.cfg.pipeline.first().program();
        if crate::augment::targets::needs_boxes(program) && self.dataset().boxes.is_none() {
            return Err(TrdataError::config(
                "transforms",
                "RandomIoUCrop draws its crop from the sample's boxes, and this source has none (a \
                 semantic-segmentation source): use RandomCrop or RandomResizedCrop"
                    .to_string(),
            ));
        }
        crate::augment::targets::check_program(program).map_err(|m| TrdataError::config("transforms", m))
    }

    /// The whole geometry sample `index` of `epoch` gets when its image is `width × height`: the folded prefix's
    /// plan and every stage-2 op that moves pixels, replayed with the workers' draws (a pure function of (seed,
    /// epoch, index, size)) for its targets ([`crate::augment::targets`]). An op that cannot run on this sample
    /// → its message.
    pub fn target_plan(
        &self,
        index: u64,
        epoch: u64,
        width: u32,
        height: u32,
    ) -> std::result::Result<crate::augment::targets::TargetPlan, String> {
        let pipeline = self.cfg.pipeline.first();
        let key = crate::augment::SampleKey { seed: self.cfg.seed, epoch, index };
        let channels = pipeline.channels().count();
        let dataset = self.dataset();
        let boxes = dataset.boxes.as_ref().filter(|_| (index as usize) < dataset.len());
        let boxes = boxes.map(|t| t.of(index as usize));
        crate::augment::targets::TargetPlan::replay(pipeline.program(), key, (width, height), channels, boxes)
    }

    /// The windows of `epoch` when the source is read window by window (plan/mod.rs "Block order"): where a
    /// Mosaic draws its partners from, as the workers do (their epoch plan holds the same).
    fn windows(&self, epoch: u64) -> Option<std::borrow::Cow<'_, crate::plan::Windows>> {
        let running = self.running.as_ref().filter(|r| r.plan.epoch == epoch);
        if let Some(w) = running.and_then(|r| r.plan.windows()) {
            return Some(std::borrow::Cow::Borrowed(w)); // the epoch being read: its plan holds them
        }
        let blocks = self.dataset().block_structure()?;
        Some(std::borrow::Cow::Owned(crate::plan::Windows::new(&self.shape, epoch, blocks)))
    }

    /// Each part's dataset index of the mosaic of each row of `indices` in `epoch` (the row first; the row alone
    /// when the gate stayed shut); `None` when the transforms start with no Mosaic. An index past the dataset →
    /// a message.
    pub fn mosaic_parts(&self, indices: &[u64], epoch: u64) -> std::result::Result<Option<Vec<Vec<u64>>>, String> {
        let Some(stage) = self.cfg.pipeline.first().program().mosaic.as_ref() else { return Ok(None) };
        self.check_rows(indices)?;
        let windows = self.windows(epoch);
        let partners = Partners::of(self.dataset().len() as u64, windows.as_deref());
        let draw = |index| stage.draw(crate::augment::SampleKey { seed: self.cfg.seed, epoch, index }, partners);
        Ok(Some(indices.iter().map(|&index| stage.indices(&draw(index), index)).collect()))
    }

    /// Every row of `indices` is a dataset index, else a message.
    fn check_rows(&self, indices: &[u64]) -> std::result::Result<(), String> {
        let n = self.dataset().len() as u64;
        match indices.iter().find(|&&i| i >= n) {
            Some(i) => Err(format!("row {i} is past the dataset's {n} samples")),
            None => Ok(()),
        }
    }

    /// [`Self::target_plan`] of the mosaic rows `indices` whose parts' images ([`Self::mosaic_parts`]) are
    /// `sizes` (one list per row).
    pub fn mosaic_target_plans(
        &self,
        indices: &[u64],
        epoch: u64,
        sizes: &[Vec<(u32, u32)>],
    ) -> std::result::Result<Vec<crate::augment::targets::TargetPlan>, String> {
        let pipeline = self.cfg.pipeline.first();
        self.check_rows(indices)?;
        let windows = self.windows(epoch);
        let partners = Partners::of(self.dataset().len() as u64, windows.as_deref());
        let (program, channels) = (pipeline.program(), pipeline.channels().count());
        indices
            .iter()
            .zip(sizes)
            .map(|(&index, sizes)| {
                let key = crate::augment::SampleKey { seed: self.cfg.seed, epoch, index };
                crate::augment::targets::TargetPlan::replay_mosaic(program, key, partners, sizes, channels)
            })
            .collect()
    }

    /// Validate the configuration (CPU engine); starts nothing.
    pub fn new(dataset: Dataset, cfg: LoaderConfig) -> Result<Self> {
        Self::with_devices(Arc::new(dataset), cfg, DeviceSpec::Cpu)
    }

    /// Validate the configuration for `devices`; starts nothing (CUDA is only probed: a missing driver or
    /// device is a `TrdataError::Cuda` here, not on the first iteration).
    pub fn with_devices(dataset: Arc<Dataset>, cfg: LoaderConfig, devices: DeviceSpec) -> Result<Self> {
        // Every rule is config.rs's (and the transforms' augment/'s, checked when `cfg.pipeline` was built).
        if let DeviceSpec::Cuda { ordinals, device_slots } = &devices {
            config::check_devices(ordinals)?;
            config::DEVICE_SLOTS.check::<usize>(*device_slots as i128)?;
        }
        let gpu_plan = plan_gpu_decode(&cfg, &devices)?;
        let workers = cfg.workers.unwrap_or_else(|| {
            let cpus = cfg
                .cpus
                .as_ref()
                .map_or_else(|| topology::current_thread_affinity().unwrap_or_default().len(), Vec::len);
            let decode_threads = gpu_plan.as_ref().map_or(0, |_| devices.engines() * crate::gpu_decode::DECODE_THREADS);
            config::default::workers(cpus, devices != DeviceSpec::Cpu, decode_threads, devices.engines())
        });
        let shape = cfg.validate(dataset.len(), devices.engines(), workers)?;
        if let DeviceSpec::Cuda { ordinals, .. } = &devices {
            for &o in ordinals {
                cuda::check_device(o)?;
            }
        }
        let ctx = Arc::new(WorkContext {
            dataset,
            pipeline: cfg.pipeline.clone(),
            stats: Arc::new(Stats::default()),
            seed: cfg.seed,
            reproducible: cfg.reproducible,
            on_error: cfg.on_error,
            skipped: Mutex::new(SkipLog::default()),
            any_bad: AtomicBool::new(false),
            targets: None,
            extras: None,
        });
        Ok(Self {
            cfg,
            workers,
            shape,
            ctx,
            next_epoch: 0,
            runtime: None,
            running: None,
            closed: false,
            devices,
            gpu_counters: std::sync::Arc::new(GpuCounters::default()),
            resume: None,
            gpu_plan,
        })
    }

    /// The GPU share of the decode path now (None: every sample on the CPU workers).
    pub fn gpu_decode_share(&self) -> Option<f64> {
        let rt = self.runtime.as_ref()?;
        let shares: Vec<f64> = rt.gpu_decode.iter().flatten().map(|d| d.share()).collect();
        (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
    }

    /// Batches per epoch for this rank.
    pub fn len(&self) -> usize {
        self.shape.batches_per_engine() as usize
    }

    /// Never empty (validated at construction).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Worker threads (the configured number or its default).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.cfg
    }

    /// The dataset.
    pub fn dataset(&self) -> &Dataset {
        &self.ctx.dataset
    }

    /// Counters.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.ctx.stats)
    }

    /// Where batches go.
    pub fn devices(&self) -> &DeviceSpec {
        &self.devices
    }

    /// H2D counters (GPU loaders; zeros on the CPU).
    pub fn gpu_stats(&self) -> Vec<(&'static str, u64)> {
        self.gpu_counters.snapshot()
    }

    /// (free, total) device memory of each engine's GPU (empty before the first iteration or on the CPU).
    pub fn device_mem_info(&self) -> Result<Vec<(usize, usize)>> {
        self.runtime.as_ref().map_or(Ok(Vec::new()), |rt| rt.gpus.iter().map(|g| g.mem_info()).collect())
    }

    /// Epoch the next `start_epoch` will run.
    pub fn epoch(&self) -> u64 {
        self.next_epoch
    }

    /// Set the epoch of the next iteration (later iterations continue from it: e, e+1, …); `epoch` must be in
    /// `config::EPOCH`'s range. A loaded resume point survives only if it is for this epoch (DDP loops call
    /// `set_epoch(e)` first).
    pub fn set_epoch(&mut self, epoch: u64) -> Result<()> {
        config::EPOCH.check::<u64>(i128::from(epoch))?;
        self.next_epoch = epoch;
        if self.resume.as_ref().is_some_and(|r| r.epoch != epoch) {
            self.resume = None;
        }
        Ok(())
    }

    /// The position at the current batch boundary plus the configuration fingerprint (see the module docs).
    pub fn state(&self) -> LoaderState {
        let (epoch, batches, delivered) = self.position();
        let delivered = delivered.iter().map(SeqBitmap::to_bytes).collect();
        LoaderState {
            version: STATE_VERSION,
            seed: self.cfg.seed,
            epoch,
            batches,
            num_samples: self.shape.num_samples,
            world_size: self.cfg.world_size as u64,
            rank: self.cfg.rank as u64,
            devices: self.devices.engines() as u64,
            batch_size: self.shape.batch_size,
            last_batch: self.cfg.last_batch,
            shuffle: self.cfg.shuffle,
            reproducible: self.cfg.reproducible,
            order: self.ctx.dataset.order_fingerprint(),
            source: Some(self.ctx.dataset.identity()),
            delivered,
        }
    }

    /// (epoch, batches delivered in it, fast mode mid-epoch: the delivered sets) at the current batch boundary.
    fn position(&self) -> (u64, u64, Vec<SeqBitmap>) {
        if let Some(r) = &self.resume {
            (r.epoch, r.first_batch, r.delivered.clone())
        } else if let Some(run) = &self.running {
            let k = run.next_batch;
            if k >= self.shape.batches_per_engine() {
                (run.plan.epoch + 1, 0, Vec::new())
            } else if self.cfg.reproducible || k == 0 {
                (run.plan.epoch, k, Vec::new())
            } else {
                (run.plan.epoch, k, run.job.engines.iter().map(|e| self.delivered_of(e, run.first_batch, k)).collect())
            }
        } else {
            (self.next_epoch, 0, Vec::new())
        }
    }

    /// Fast mode: the sequence numbers `eng` delivered in batches [0, k) (plan/resume.rs).
    fn delivered_of(&self, eng: &EngineJob, first_batch: u64, k: u64) -> SeqBitmap {
        let (t, b) = (self.shape.seqs_per_engine(), self.shape.batch_size);
        let real = self.shape.real_seqs(eng.global_engine);
        let mut d = eng.delivered.clone().unwrap_or_else(|| SeqBitmap::new(t));
        for slot in (first_batch * b).min(real)..(k * b).min(real) {
            // Written before the row's `complete`; batch slot / B was taken, so the store is visible.
            d.insert(eng.slot_seqs[slot as usize].load(Ordering::Relaxed));
        }
        for seq in real..(k * b).min(t) {
            d.insert(seq); // filler/pad rows keep their fixed slots
        }
        debug_assert_eq!(d.count(), (k * b).min(t));
        d
    }

    /// Continue from `state` on the next `start_epoch`. The fingerprint must match this loader's
    /// configuration (`Config` error naming the field otherwise); cancels a running epoch.
    pub fn load_state(&mut self, state: &LoaderState) -> Result<()> {
        self.check_usable()?;
        if state.version != STATE_VERSION {
            return Err(TrdataError::config(
                "version",
                format!("state version {} is not {STATE_VERSION}", state.version),
            ));
        }
        let mine = self.state();
        let fields: [(&str, String, String); 10] = [
            ("seed", state.seed.to_string(), mine.seed.to_string()),
            ("num_samples", state.num_samples.to_string(), mine.num_samples.to_string()),
            ("world_size", state.world_size.to_string(), mine.world_size.to_string()),
            ("rank", state.rank.to_string(), mine.rank.to_string()),
            ("devices", state.devices.to_string(), mine.devices.to_string()),
            ("batch_size", state.batch_size.to_string(), mine.batch_size.to_string()),
            ("last_batch", format!("{:?}", state.last_batch), format!("{:?}", mine.last_batch)),
            ("shuffle", state.shuffle.to_string(), mine.shuffle.to_string()),
            ("reproducible", state.reproducible.to_string(), mine.reproducible.to_string()),
            ("order", state.order.clone(), mine.order.clone()),
        ];
        // The source last: a checkpoint of another size says num_samples, the more telling difference.
        let source =
            state.source.as_ref().map(|theirs| ("source", theirs.clone(), mine.source.clone().unwrap_or_default()));
        if let Some((name, theirs, ours)) = fields.into_iter().chain(source).find(|(_, a, b)| a != b) {
            return Err(TrdataError::config(
                name,
                format!(
                    "the checkpoint was saved with {name}={theirs}, this loader has {name}={ours}{}",
                    if name == "source" {
                        " (another dataset of the same size: resume over the source the checkpoint was taken over)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        config::EPOCH.check::<u64>(i128::from(state.epoch))?;
        let n = self.shape.batches_per_engine();
        if state.batches > n {
            return Err(TrdataError::config(
                "batches",
                format!("{} delivered batches exceed the epoch's {n}", state.batches),
            ));
        }
        let (epoch, first) =
            if state.batches == n { (config::following_epoch(state.epoch)?, 0) } else { (state.epoch, state.batches) };
        let mut delivered = Vec::new();
        if !self.cfg.reproducible && first > 0 {
            let engines = self.devices.engines();
            if state.delivered.len() != engines {
                return Err(TrdataError::config(
                    "delivered",
                    format!(
                        "{} bitmaps for {engines} engines (fast mode needs the delivered samples)",
                        state.delivered.len()
                    ),
                ));
            }
            let t = self.shape.seqs_per_engine();
            let kb = (first * self.shape.batch_size).min(t);
            for (d_idx, bytes) in state.delivered.iter().enumerate() {
                let d = SeqBitmap::from_bytes(bytes.clone(), t)?;
                // A genuine checkpoint marks exactly min(k·B, R) real sequence numbers and exactly the filler/pad
                // numbers [R, k·B): anything else would make workers write outside the remaining slots (a
                // corrupted or hand-edited checkpoint must be an error, never a hang or a panic).
                let real = self.shape.real_seqs((self.cfg.rank * engines + d_idx) as u64);
                let real_marked = (0..real).filter(|&s| d.contains(s)).count() as u64;
                let tail_ok = (real..t).all(|s| d.contains(s) == (s < kb));
                if real_marked != kb.min(real) || !tail_ok {
                    return Err(TrdataError::config(
                        "delivered",
                        format!(
                            "engine {d_idx}: the delivered bitmap does not match {first} delivered batches \
                             ({real_marked} real samples marked, filler rows {})",
                            if tail_ok { "consistent" } else { "inconsistent" }
                        ),
                    ));
                }
                delivered.push(d);
            }
        }
        self.cancel_running();
        self.next_epoch = epoch;
        self.resume = (first > 0).then_some(ResumePoint { epoch, first_batch: first, delivered });
        Ok(())
    }

    /// Skip records not yet drained (each bad file once).
    pub fn drain_skipped(&self) -> Vec<SkipRecord> {
        std::mem::take(&mut lock(&self.ctx.skipped).pending)
    }

    fn check_usable(&self) -> Result<()> {
        if self.closed {
            return Err(TrdataError::Closed("the loader is closed".into()));
        }
        if let Some(rt) = &self.runtime
            && rt.pid != std::process::id()
        {
            return Err(TrdataError::Closed(
                "this loader's worker threads were started in another process; fork after the first \
                 iteration is not supported — create the loader in the child process"
                    .into(),
            ));
        }
        Ok(())
    }

    fn runtime(&mut self) -> Result<&Runtime> {
        if self.runtime.is_none() {
            let layout = self.cfg.batch_layout();
            let depth = self.cfg.prefetch;
            let station =
                Arc::new(Station::new(layout, depth, depth + self.cfg.max_held_batches, self.ctx.stats.clone()));
            // One binding plan for the workers and the transfer threads (topology/binding.rs), within the
            // rank's `cpus` share when given.
            let ordinals: &[u32] = match &self.devices {
                DeviceSpec::Cuda { ordinals, .. } => ordinals,
                _ => &[],
            };
            let nodes: Vec<Option<u32>> = ordinals.iter().map(|&o| cuda::device_numa_node(o)).collect();
            let topo = topology::loader_topology(self.cfg.pin, !ordinals.is_empty(), self.cfg.cpus.as_deref());
            let (mut gpus, mut gpu_decode) = (Vec::new(), Vec::new());
            if let DeviceSpec::Cuda { ordinals, device_slots } = &self.devices {
                let setup = self.gpu_plan.as_ref().map(|p| GpuDecodeSetup {
                    nvjpeg: std::sync::Arc::clone(&p.nvjpeg),
                    nvrtc: std::sync::Arc::clone(&p.nvrtc),
                    share: p.share,
                    format: gpu_output_format(self.cfg.pipeline.first()),
                    arena_bytes: crate::gpu_decode::arena_bytes(self.cfg.batch_size),
                });
                for (d, &ordinal) in ordinals.iter().enumerate() {
                    let cfg = GpuEngineConfig {
                        ordinal,
                        local_engine: d,
                        layout,
                        host_depth: depth,
                        device_slots: *device_slots,
                        max_held_batches: self.cfg.max_held_batches,
                        placement: topology::staging_placement(&topo, nodes[d]),
                    };
                    let counters = std::sync::Arc::clone(&self.gpu_counters);
                    let ctx = cuda::GpuContext::open(ordinal)?;
                    // The engine's GPU decode path, started on its device (one arena per host batch in flight, +1:
                    // gpu_decode/queue.rs "arenas").
                    let rows = match &setup {
                        None => None,
                        Some(s) => match GpuRows::start(
                            &ctx,
                            s,
                            d,
                            depth + 1,
                            std::sync::Arc::clone(&counters),
                            self.ctx.stats.clone(),
                        ) {
                            Ok(rows) => Some(rows),
                            // `decode="auto"`: a GPU without hardware JPEG engines (or a kernel that does not build)
                            // runs the CPU path.
                            Err(_) if self.cfg.decode == DecodeMode::Auto => None,
                            Err(e) => return Err(e),
                        },
                    };
                    gpu_decode.push(rows.as_ref().map(|r| std::sync::Arc::clone(r.decode())));
                    gpus.push(GpuEngine::start(cfg, ctx, rows, self.ctx.stats.clone(), counters)?);
                }
            }
            let plan = topology::worker_plan(&topo, self.cfg.pin, self.workers, &nodes);
            let pool = WorkerPool::start(plan, self.cfg.decode_limits)?;
            self.runtime = Some(Runtime { pool, station, gpus, gpu_decode, pid: std::process::id() });
        }
        Ok(self.runtime.as_ref().expect("just set"))
    }

    /// Cancel the running epoch, if any, and wait for the workers to park.
    fn cancel_running(&mut self) {
        if let (Some(rt), Some(running)) = (&self.runtime, self.running.take()) {
            rt.station.stop();
            for g in &rt.gpus {
                g.stop();
            }
            self.interrupt_reads();
            rt.pool.wait_idle();
            drop(running); // pending device batches return their slots
        }
    }

    /// Wake workers waiting for a partial pack's blocks (after the stations stopped), so stopping never waits out
    /// a fetch's retries and backoff (source/block_cache.rs).
    fn interrupt_reads(&self) {
        if let Some(cache) = self.ctx.dataset.block_cache() {
            cache.wake_waiters();
        }
    }

    /// Start the next epoch (cancelling one in flight).
    pub fn start_epoch(&mut self) -> Result<u64> {
        self.check_usable()?;
        self.cancel_running();
        let epoch = self.next_epoch;
        // The epoch after this one must exist too (config.rs says why).
        let following = config::following_epoch(epoch)?;
        let resume = self.resume.take().filter(|r| r.epoch == epoch);
        let first = resume.as_ref().map_or(0, |r| r.first_batch);
        let mut delivered = resume.map(|r| r.delivered).unwrap_or_default().into_iter();
        let plan = Arc::new(EpochPlan::with_blocks(self.shape, epoch, self.ctx.dataset.block_structure()));
        let ctx = Arc::clone(&self.ctx);
        let shape = self.shape;
        let rank = self.cfg.rank as u64;
        let reproducible = self.cfg.reproducible;
        let limits = self.cfg.decode_limits;
        // a Mosaic reads its partners from the row's window (augment/mosaic.rs; the block cache's schedule)
        let partners = self.cfg.pipeline.first().program().mosaic.is_some();
        let rt = self.runtime()?;
        let epoch_shape = EpochShape {
            batches: shape.batches_per_engine(),
            batch_size: shape.batch_size,
            total_rows: shape.seqs_per_engine(),
        };
        let engines = if rt.gpus.is_empty() {
            rt.station.begin_epoch(epoch_shape, first);
            vec![EngineJob::new(rank, Arc::clone(&rt.station), &shape, reproducible, first, delivered.next())]
        } else {
            let d_count = rt.gpus.len() as u64;
            let mut engines = Vec::with_capacity(rt.gpus.len());
            for (d, g) in rt.gpus.iter().enumerate() {
                let global = rank * d_count + d as u64;
                engines.push(
                    EngineJob::new(global, Arc::clone(g.station()), &shape, reproducible, first, delivered.next())
                        .with_gpu(rt.gpu_decode[d].clone()),
                );
            }
            engines
        };
        if let (Some(cache), Some(blocks)) = (ctx.dataset.block_cache(), ctx.dataset.block_structure()) {
            let ids: Vec<u64> = engines.iter().map(|e| e.global_engine).collect();
            cache.set_schedule(plan.block_schedule(blocks, &ids, first * shape.batch_size, partners));
        }
        let pending = (0..rt.gpus.len().max(1)).map(|_| None).collect();
        let job = Arc::new(EpochJob { plan: Arc::clone(&plan), engines, ctx: Arc::clone(&ctx) });
        // The engines start the epoch once its job exists: the GPU rows' CPU fallback is the job's own code.
        let fallback: Option<std::sync::Arc<dyn CpuFallback>> = if rt.gpu_decode.iter().any(Option::is_some) {
            Some(std::sync::Arc::new(EpochFallback::new(Arc::clone(&job), limits)?))
        } else {
            None
        };
        for g in &rt.gpus {
            g.begin_epoch(epoch_shape, first, fallback.clone())?;
        }
        rt.pool.run(Arc::clone(&job));
        Stats::add(&ctx.stats.epochs, 1);
        self.next_epoch = following;
        self.running = Some(Running { plan, job, first_batch: first, next_batch: first, pending, failed: None });
        Ok(epoch)
    }

    /// The next step of the running epoch: one batch per local engine (the CPU engine, or each GPU in device
    /// order), waiting at most about `timeout` per engine.
    pub fn next_step(&mut self, timeout: Duration) -> Result<NextStep> {
        self.check_usable()?;
        let Some(running) = &self.running else { return Ok(NextStep::End) };
        let b = running.next_batch;
        let epoch = running.plan.epoch;
        if b == self.shape.batches_per_engine() {
            self.runtime.as_ref().expect("running implies runtime").pool.wait_idle();
            self.running = None;
            return Ok(NextStep::End);
        }
        for d in 0..self.devices.engines() {
            if self.running.as_ref().is_some_and(|r| r.pending[d].is_some()) {
                continue;
            }
            match self.poll_engine(d, b, timeout) {
                EnginePoll::Ready(images, error) => {
                    if let Some(r) = self.running.as_mut() {
                        r.pending[d] = Some(images);
                        if let Some(e) = error {
                            r.failed.get_or_insert(e);
                        }
                    }
                }
                EnginePoll::Timeout => return Ok(NextStep::Timeout),
                EnginePoll::End => {
                    self.cancel_running();
                    return Ok(NextStep::End);
                }
                EnginePoll::AllHeld(held, what) => {
                    self.cancel_running();
                    // `held` counts every buffer of the engine: the ones it keeps in flight plus the user's
                    // allowance; the message names both so that the count adds up to the setting.
                    let allowed = self.cfg.max_held_batches;
                    let in_flight = held.saturating_sub(allowed);
                    return Err(TrdataError::config(
                        "max_held_batches",
                        format!(
                            "all {held} {what} are held by Python (max_held_batches={allowed} plus the {in_flight} \
                             the loader keeps in flight), so the next batch can never be produced; drop references \
                             to old batches (a Batch and every tensor or array made from it) or raise \
                             max_held_batches"
                        ),
                    ));
                }
                EnginePoll::Failed(e) => {
                    self.cancel_running();
                    return Err(e);
                }
            }
        }
        let first_engine = self.cfg.rank as u64 * self.devices.engines() as u64;
        let (store, extras_store) = (self.ctx.targets.clone(), self.ctx.extras.is_some());
        let shape = &self.shape;
        let running = self.running.as_mut().expect("checked above");
        running.next_batch += 1;
        if let Some(error) = running.failed.take() {
            // A sample error costs the step that holds it, as torch's DataLoader loses the batch whose
            // __getitem__ raised: its batches are dropped (buffers and slots go back), the position counts it as
            // delivered, and the next call goes on with the next step.
            running.pending.iter_mut().for_each(|p| drop(p.take()));
            return Err(TrdataError::Decode(error));
        }
        let step = running
            .pending
            .iter_mut()
            .enumerate()
            .map(|(d, p)| {
                let mut images = p.take().expect("every engine delivered");
                let (labels, indices, rows) = match &mut images {
                    BatchImages::Host(lease) => {
                        let (labels, indices) = lease.buffer().labels_and_indices(lease.rows);
                        (labels, indices, lease.buffer().take_fields(lease.rows))
                    }
                    // moved out, not copied: the device batch is handed on with its lease only
                    BatchImages::Device(db) => (
                        std::mem::take(&mut db.labels),
                        std::mem::take(&mut db.indices),
                        std::mem::take(&mut db.fields),
                    ),
                };
                let valid = shape.valid_in_batch(first_engine + d as u64, b) as usize;
                let (targets, extras) = row_fields(store.as_deref(), extras_store, rows)?;
                Ok(EngineBatch { images, labels, indices, valid, epoch, targets, extras })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(NextStep::Step(step))
    }

    /// Use `store`'s targets: the workers make each row's beside its image (sample/). Called before the first
    /// epoch starts; the transforms are checked against it now (`check_targets`).
    pub fn set_targets(&mut self, store: std::sync::Arc<dyn TargetStore>) -> Result<()> {
        self.check_targets()?;
        let ctx = Arc::get_mut(&mut self.ctx)
            .ok_or_else(|| TrdataError::Worker("the targets must be set before the loader starts".into()))?;
        ctx.targets = Some(store);
        Ok(())
    }

    /// Use `store`'s extras: the workers read each row's beside its image (sample/extras.rs). Called before the
    /// first epoch starts.
    pub fn set_extras(&mut self, store: std::sync::Arc<dyn ExtrasStore>) -> Result<()> {
        let ctx = Arc::get_mut(&mut self.ctx)
            .ok_or_else(|| TrdataError::Worker("the extras must be set before the loader starts".into()))?;
        ctx.extras = Some(store);
        Ok(())
    }

    /// Ask local engine `d` for batch `b` of the running epoch, waiting at most `timeout`.
    fn poll_engine(&self, d: usize, b: u64, timeout: Duration) -> EnginePoll {
        let rt = self.runtime.as_ref().expect("running implies runtime");
        let Some(gpu) = rt.gpus.get(d) else {
            return match Station::take(&rt.station, b, timeout) {
                Take::Ready(lease, error) => EnginePoll::Ready(BatchImages::Host(lease), error),
                Take::Timeout => EnginePoll::Timeout,
                Take::Stopped => EnginePoll::End,
                Take::AllBuffersHeld { held } => EnginePoll::AllHeld(held, "batch buffers".into()),
                Take::Poisoned(e) => EnginePoll::Failed(e),
            };
        };
        match gpu.next(timeout) {
            Ok(DeviceNext::Batch(mut db)) => {
                let error = db.error.take();
                EnginePoll::Ready(BatchImages::Device(db), error)
            }
            Ok(DeviceNext::Timeout) => EnginePoll::Timeout,
            Ok(DeviceNext::End) => EnginePoll::End,
            Ok(DeviceNext::AllSlotsHeld { held }) => {
                EnginePoll::AllHeld(held, format!("device slots of cuda:{}", gpu.ordinal()))
            }
            Err(e) => EnginePoll::Failed(e),
        }
    }

    /// Stop everything and join the threads; idempotent. Batches still held stay valid until dropped. A worker
    /// still in a sample [`STOP_WAIT`](crate::worker::STOP_WAIT) after the stop (a Python dataset's `__getitem__`
    /// or a `PythonStep` that does not return) is left running, detached (`WorkerPool::close`); returns how many
    /// were (0 when every thread ended, and on every later call).
    pub fn close(&mut self) -> usize {
        if self.runtime.as_ref().is_some_and(|rt| rt.pid != std::process::id()) {
            // In a forked child the threads do not exist and a mutex may have been held by one of them at fork
            // time: touching any lock (even dropping a pending device batch) could hang. Forget it all.
            std::mem::forget(self.running.take());
            std::mem::forget(self.runtime.take());
            self.closed = true;
            return 0;
        }
        // Keep the position: `state()` after closing mid-epoch must still say where the epoch stopped (a
        // checkpoint taken after `close`, e.g. on leaving a `with` block, would otherwise skip its rest).
        let (epoch, first_batch, delivered) = self.position();
        self.next_epoch = epoch;
        self.resume = (first_batch > 0).then_some(ResumePoint { epoch, first_batch, delivered });
        self.running = None; // pending device batches return their slots
        let left_running = self.runtime.take().map_or(0, |mut rt| {
            rt.station.close();
            self.interrupt_reads();
            for g in rt.gpus.iter_mut() {
                g.close();
            }
            rt.pool.close(crate::worker::STOP_WAIT)
        });
        self.closed = true;
        left_running
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Binding mode (for reporting).
    pub fn pin(&self) -> PinMode {
        self.cfg.pin
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        let _ = self.close(); // no caller to warn of threads left running here (the binding's close() does)
    }
}

/// A delivered batch's targets as ragged columns (sample/batch.rs) and its rows' extras, each None without its
/// store. Every row of a delivered batch was made, so each has what its stores give: one without is a worker
/// bug, reported.
fn row_fields(
    store: Option<&dyn TargetStore>,
    extras: bool,
    rows: Vec<RowFields>,
) -> Result<(Option<TargetBatch>, Option<Vec<RowExtras>>)> {
    let missing = |r: usize, what: &str| TrdataError::Worker(format!("row {r} of a delivered batch has no {what}"));
    let (targets, row_extras): (Vec<_>, Vec<_>) = rows.into_iter().map(|f| (f.targets, f.extras)).unzip();
    let extras = extras
        .then(|| row_extras.into_iter().enumerate().map(|(r, e)| e.ok_or_else(|| missing(r, "extras"))).collect())
        .transpose()?;
    let Some(store) = store else { return Ok((None, extras)) };
    let targets = (targets.into_iter().enumerate())
        .map(|(r, t)| t.ok_or_else(|| missing(r, "targets")))
        .collect::<Result<Vec<_>>>()?;
    let batch =
        TargetBatch::from_rows(store.kind(), store.masks(), store.keypoints(), targets).map_err(TrdataError::Worker)?;
    Ok((Some(batch), extras))
}
