//! transfer/gpu_decode — the GPU decode path beside the CPU workers (design and sources:
//! docs/design/gpu-decode.md): per GPU engine, two decode threads that decode the crop windows of the samples routed to
//! them with nvJPEG's hardware engines into device arenas — [`DECODERS`] threads `trdata-nvjpg{g}{t}` the 4:4:4
//! and gray files, one `trdata-nvjpg{g}i{t}` the chroma-subsampled ones, with interpolated upsampling
//! (libjpeg-turbo's, which costs the engines 2.6×; 4:4:4 and gray decode identically without it) — and the engine's transfer thread, which resamples
//! them (Pillow's taps, computed on the host by the CPU path's code) straight into the batch's device slot with one
//! kernel launch per pass.
//!
//! Routing (a CPU worker, per sample, [`GpuDecode::route`]): the sample goes to the GPU iff the pipeline can run
//! there (one view, geometry only — no pixel ops —, RGB output), the file is a JPEG nvJPEG's engines take
//! (`decode::gpu_eligible`: baseline, one scan, 4:4:4/4:2:2/4:2:0/4:4:0/gray, no EXIF rotation, …) and the
//! sample's own draw `SampleRng(seed, epoch, index, OP_DECODE_ROUTE)` is below the GPU share. So in reproducible
//! mode (fixed share) the path of a sample is a function of (seed, epoch, index, file bytes): two runs, or runs
//! with different worker counts, route every sample the same way. `decode="auto"` moves the share (fast mode
//! only) by the controller below.
//!
//! Protocol (one mutex, two condvars: `DecodeQueue`, generic over the task and the arenas' memory and free of
//! CUDA; [`GpuDecode`] and `decode_main` add nvJPEG and the device arenas):
//! - worker `submit(task)`: `batches[b].expected += 1`, push the task, wake the decode thread — *before* the worker
//!   completes the row at the station, so when the transfer thread has taken batch b every task of b is known.
//!   The worker writes the row's label and index; the row's pixels in the host slab stay unwritten.
//! - decode threads (each its own queue, by `GpuTask::interpolate`): take up to [`MAX_SUB_BATCH`] queued tasks
//!   (whatever is there: small batches when idle, full ones under load), place each window in the arena of its
//!   batch (`arena[b mod A]`, bump allocation under the mutex; a window that does not fit falls back to the CPU),
//!   decode them in one `nvjpegDecodeBatchedEx` and wait on the host for the decode (required: the hardware engines write before stream order, docs §0.6); then
//!   pushes each outcome into `batches[b].done` and wakes the transfer thread. A task of an older generation
//!   (epoch restarted meanwhile) is dropped.
//! - transfer thread, batch b (transfer/engine.rs): after the slab's H2D copy is enqueued on the copy stream,
//!   `wait_batch(b)` until `done.len() == expected`, then launches the resample kernels on the copy stream (so
//!   they follow the copy, which wrote garbage into the GPU rows, and the slot's release waits), runs the CPU
//!   fallback of every failed task on this thread (the worker's `produce` for the sample: same bytes, same error
//!   and skip policy as the CPU path) and copies its row, synchronizes, and only then `release(b)` frees b's
//!   arena: nothing reads it any more.
//! - arenas: A = host ring depth + 1. The station lets workers fill batches b..b+K while the transfer thread
//!   holds b (K = depth), so at most K + 1 consecutive batches have tasks, and b + A cannot start before b is
//!   released: `arena[b mod A]` is never shared by two live batches.
//! - epochs: `reset()` (transfer thread, after the station is rewound and before it acknowledges, so no worker
//!   and no kernel of the old epoch is running) bumps the generation, drops queued tasks and results and
//!   empties the arenas. The decode thread finishes its current sub-batch (into the old arenas: nobody reads them)
//!   before it sees the new generation.
//! - failure: a decode thread that cannot continue (nvJPEG error outside a batch) records why; every task from
//!   then on completes at once as a fallback, so the transfer thread never waits forever and the batch is made
//!   on the CPU. `close()` stops and joins the threads and keeps their decoders for the next loader on the GPU
//!   ([`IDLE`]: "Decoder reuse"; a decoder that stopped on an error is destroyed instead).
//!
//! Checked by loom (`make test-loom`, the production `DecodeQueue` with a fake decoder: every task delivered once
//! to its batch, a reset during a decode, close during the waits) and by a stress test (8 workers, 3 decode
//! threads, epochs with random restarts, random decode failures and a lost decoder; `TRDATA_STRESS_SECS`).
//!
//! Auto controller ([`GpuDecode::adjust`], transfer thread, after each batch, fast mode): the inputs are the time
//! the transfer thread waited for the CPU rows of the batch (`cpu_wait`) and for its GPU rows (`gpu_wait`), and
//! whether the consumer was starved (it waited for this batch). Starved: move the share toward the path that made
//! it wait (up when the CPU rows were later, down when the GPU rows were); not starved: drift down slowly, so the
//! CPU stays the main path while it keeps up. The step decays from 0.05 toward 0.005 (nvImageCodec's adaptive
//! load hint does the same).

// transfer/ is an unsafe-allowed module (docs/design/architecture.md "House style"); the device pointers handed to the kernels and nvJPEG are
// checked arena offsets.
#![allow(unsafe_code)]

use crate::augment::GpuAxis;
use crate::cuda::nvjpeg::{BatchDecoder, Nvjpeg, Roi};
use crate::cuda::resample_gpu::AxisTaps;
use crate::cuda::{DeviceMemory, GpuContext};
use crate::error::{Result, SampleError, TrdataError};
use crate::staging::RowWriter;
use crate::stats::{GpuCounters, Stats};
use crate::sync::{Arc, AtomicU64, Condvar, Mutex, Ordering, lock};
use std::collections::{HashMap, VecDeque};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most tasks per nvJPEG batch (the engines' sweet spot is ≥ 7·k; larger batches add latency, not throughput).
pub const MAX_SUB_BATCH: usize = 64;
/// A decode thread that finds fewer tasks than this waits up to [`FILL_WAIT`] for more, unless the transfer
/// thread is waiting for a batch: each nvJPEG batch call has a fixed cost, so small calls waste the engines
/// (measured on the H200: 294 µs of thread time per image at a 0.25 share, whose calls were small, vs 134 µs with
/// full calls).
pub const FILL_TARGET: usize = 32;
/// See [`FILL_TARGET`].
pub const FILL_WAIT: Duration = Duration::from_millis(2);
/// Decode threads (each with its own nvJPEG hardware decoder) per queue: [without, with] interpolated upsampling.
/// Measured on the H200 (300 ImageNet files, 2026-12-01): alone, one decoder with interpolation takes 8.0k img/s
/// of subsampled windows and more decoders do not add to it, while 2 decoders without it take 15.6k of 4:4:4/gray
/// ones vs 13.2k for one. In the loader (batch 256, 15 workers) [1,1] / [2,1] / [3,1] gave 14.8k / 13.5k / 15.1k
/// img/s loader-only at a 0.5 share and 13.5k / 14.2k / 14.9k at share 1, and fed ResNet-18 10.8k / 10.2k / 9.8k
/// (auto) — differences within the runs' noise; 2 plain decoders keep a second call in flight while one blocks.
pub const DECODERS: [usize; 2] = [2, 1];
/// Decode threads per engine (every [`DECODERS`] entry), which the default worker count leaves cores for.
pub const DECODE_THREADS: usize = DECODERS[0] + DECODERS[1];
/// Largest window (bytes, RGB) the GPU path decodes; larger ones go to the CPU path (which DCT-scales them).
pub const MAX_WINDOW_BYTES: usize = 64 << 20;
/// Files above this size go to the CPU path (the GPU path keeps a copy of each file until it is decoded).
pub const MAX_GPU_FILE_BYTES: usize = 16 << 20;

/// One axis' taps of a task (owned: the task crosses threads), as `SamplePipeline::prepare_gpu` computed them.
#[derive(Debug, Clone, Default)]
pub struct TaskTaps {
    /// First image pixel of each output's taps.
    pub start: Vec<u32>,
    /// Weights, `taps` per output.
    pub k: Vec<i32>,
    /// Taps per output.
    pub taps: u32,
    /// Union of the taps: `[win0, win1)`.
    pub win0: u32,
    /// End of the union.
    pub win1: u32,
}

impl From<GpuAxis<'_>> for TaskTaps {
    fn from(a: GpuAxis<'_>) -> Self {
        Self { start: a.start.to_vec(), k: a.k.to_vec(), taps: a.taps as u32, win0: a.win0, win1: a.win1 }
    }
}

impl TaskTaps {
    /// The kernel's view of them.
    pub fn view(&self) -> AxisTaps<'_> {
        AxisTaps { start: &self.start, k: &self.k, taps: self.taps, win0: self.win0, win1: self.win1 }
    }
}

/// One sample routed to the GPU: its file, its crop window and the taps that resample the window to the output.
#[derive(Debug)]
pub struct GpuTask {
    /// Batch and row of the sample.
    pub batch: u64,
    /// Row within the batch.
    pub row: usize,
    /// Dataset index (the CPU fallback decodes it again from the source).
    pub index: u64,
    /// The file.
    pub bytes: Vec<u8>,
    /// The window to decode, full scale, stored orientation.
    pub roi: Roi,
    /// Horizontal taps (starts in image pixels).
    pub x: TaskTaps,
    /// Vertical taps.
    pub y: TaskTaps,
    /// Pass order (as the CPU path would choose it).
    pub vertical_first: bool,
    /// Subsampled chroma: decode with interpolated upsampling (as libjpeg-turbo does).
    pub interpolate: bool,
}

/// A task's outcome: the decoded window in device memory (address, row pitch), or why the CPU must do it.
#[derive(Debug)]
pub struct Decoded<T = GpuTask> {
    /// The task.
    pub task: T,
    /// (device address, pitch) of the window, or the reason for the CPU fallback.
    pub at: Placed,
}

/// Where a task's window was placed: (device address, row pitch), or why the CPU must decode it.
pub type Placed = std::result::Result<(usize, usize), String>;

/// The CPU path for one sample, run by the transfer thread when the GPU could not decode it: the worker's own
/// `produce` (bytes, error and skip policy exactly as on the CPU path) into a one-row buffer.
pub trait CpuFallback: Send + Sync {
    /// Make dataset sample `index` into `dst` (and its label/index); `Ok(written index)` or the sample's error.
    fn produce(&self, index: u64, dst: &mut RowWriter<'_>) -> std::result::Result<u64, SampleError>;
    /// The label of dataset sample `index`.
    fn label(&self, index: u64) -> i64;
}

/// A task as the queue protocol ([`DecodeQueue`]) sees it.
pub(super) trait QueueTask {
    /// The batch of its row.
    fn batch(&self) -> u64;
    /// The queue (and so the decode threads) that takes it.
    fn queue(&self) -> usize;
    /// Width and height of its window (RGB: 3 bytes a pixel, rows unpadded).
    fn window(&self) -> (u32, u32);
}

impl QueueTask for GpuTask {
    fn batch(&self) -> u64 {
        self.batch
    }
    fn queue(&self) -> usize {
        usize::from(self.interpolate)
    }
    fn window(&self) -> (u32, u32) {
        (self.roi.w, self.roi.h)
    }
}

/// How a decode thread fills its calls: at most `max` tasks a call; with fewer than `target` queued it waits up
/// to `wait` for more, unless the transfer thread waits for results.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fill {
    pub(super) max: usize,
    pub(super) target: usize,
    pub(super) wait: Duration,
}

/// The production fill policy ([`MAX_SUB_BATCH`], [`FILL_TARGET`], [`FILL_WAIT`]).
pub(super) const FILL: Fill = Fill { max: MAX_SUB_BATCH, target: FILL_TARGET, wait: FILL_WAIT };

#[derive(Debug)]
struct BatchTasks<T> {
    expected: usize,
    done: Vec<Decoded<T>>,
}

impl<T> Default for BatchTasks<T> {
    fn default() -> Self {
        Self { expected: 0, done: Vec::new() }
    }
}

#[derive(Debug)]
struct State<T, M> {
    generation: u64,
    /// Queued tasks: in production [0] for the decoders without interpolated upsampling (4:4:4, gray), [1] with it.
    queue: Vec<VecDeque<T>>,
    batches: HashMap<u64, BatchTasks<T>>,
    /// Bytes used in each arena (index b mod A).
    arena_used: Vec<usize>,
    /// Why the decode threads stopped decoding (every task then falls back).
    failed: Option<String>,
    /// The transfer thread waits for a batch's results: decode threads start at once, however few tasks they hold.
    transfer_waiting: bool,
    /// The arenas' memory (device memory in production, nothing in the models), given to `place`'s allocator.
    memory: M,
    /// The generation each decode thread is decoding into the arenas now (None: not decoding). A thread of a
    /// newer generation places nothing while one of an older generation still decodes: `reset` emptied the
    /// arenas under it.
    decoding: Vec<Option<u64>>,
    shutdown: bool,
}

/// The decode queue's protocol (module docs: "Protocol"): one mutex, two condvars. Generic over the task `T` and
/// the arenas' memory `M` and free of CUDA, so loom model-checks exactly this code (`make test-loom`, tests
/// below); [`GpuDecode`] and its decode threads add nvJPEG and the device memory.
#[derive(Debug)]
pub(super) struct DecodeQueue<T, M> {
    state: Mutex<State<T, M>>,
    /// Wakes the decode threads (tasks queued, transfer thread waiting, shutdown).
    tasks: Condvar,
    /// Wakes the transfer thread (results pushed) and decode threads waiting in `place` for an older generation.
    results: Condvar,
    arena_bytes: usize,
    fill: Fill,
}

impl<T: QueueTask, M: Default> DecodeQueue<T, M> {
    /// `queues` task queues, `threads` decode threads (slots in the `decoding` guard), `arenas` arenas of
    /// `arena_bytes`.
    pub(super) fn new(queues: usize, threads: usize, arenas: usize, arena_bytes: usize, fill: Fill) -> Self {
        Self {
            state: Mutex::new(State {
                generation: 0,
                queue: (0..queues).map(|_| VecDeque::new()).collect(),
                batches: HashMap::new(),
                arena_used: vec![0; arenas],
                failed: None,
                transfer_waiting: false,
                memory: M::default(),
                decoding: vec![None; threads],
                shutdown: false,
            }),
            tasks: Condvar::new(),
            results: Condvar::new(),
            arena_bytes,
            fill,
        }
    }

    /// Worker: queue `task` (before it completes the row).
    pub(super) fn submit(&self, task: T) {
        let mut g = lock(&self.state);
        g.batches.entry(task.batch()).or_default().expected += 1;
        let q = task.queue();
        g.queue[q].push_back(task);
        drop(g);
        self.tasks.notify_all(); // several decode threads wait on it, each for its own queue
    }

    /// Decode thread of queue `q`: wait for tasks, fill the call (unless the transfer thread waits), take up to
    /// `fill.max` of them with their generation; None at shutdown.
    pub(super) fn take(&self, q: usize) -> Option<(u64, Vec<T>)> {
        let mut g = lock(&self.state);
        while g.queue[q].is_empty() && !g.shutdown {
            g = self.tasks.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        // Fill the call, unless someone waits for results.
        let deadline = Instant::now() + self.fill.wait;
        while g.queue[q].len() < self.fill.target && !g.transfer_waiting && !g.shutdown {
            let Some(left) = time_left(deadline) else { break };
            g = self.tasks.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        if g.shutdown {
            return None;
        }
        let n = g.queue[q].len().min(self.fill.max);
        Some((g.generation, g.queue[q].drain(..n).collect()))
    }

    /// Decode thread `tid`: place the windows of `tasks` (taken in `generation`) in their batches' arenas (arena
    /// b mod A, bump allocation under the mutex; `arena_base(memory, a)` gives arena a's base address, allocating
    /// it on first use). First waits until no thread decodes for an older generation, then marks this thread as
    /// decoding for `generation` until [`finish`](Self::finish).
    pub(super) fn place(
        &self,
        tasks: &[T],
        tid: usize,
        generation: u64,
        mut arena_base: impl FnMut(&mut M, usize) -> std::result::Result<usize, String>,
    ) -> Vec<Placed> {
        let mut placed = Vec::with_capacity(tasks.len());
        let mut g = lock(&self.state);
        while g.decoding.iter().any(|d| d.is_some_and(|d| d < generation)) && !g.shutdown {
            g = self.results.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.decoding[tid] = Some(generation);
        let arenas = g.arena_used.len();
        for t in tasks {
            if let Some(why) = &g.failed {
                placed.push(Err(why.clone()));
                continue;
            }
            if g.generation != generation {
                placed.push(Err("the epoch was restarted".into()));
                continue;
            }
            let (w, h) = t.window();
            let pitch = w as usize * 3;
            let bytes = pitch * h as usize;
            if bytes > self.arena_bytes.min(MAX_WINDOW_BYTES) {
                placed.push(Err(format!("its {w}x{h} window exceeds the GPU arena")));
                continue;
            }
            let a = (t.batch() % arenas as u64) as usize;
            let base = match arena_base(&mut g.memory, a) {
                Ok(base) => base,
                Err(why) => {
                    placed.push(Err(why));
                    continue;
                }
            };
            let off = g.arena_used[a].next_multiple_of(256);
            if off + bytes > self.arena_bytes {
                placed.push(Err("the batch's GPU arena is full".into()));
                continue;
            }
            g.arena_used[a] = off + bytes;
            placed.push(Ok((base + off, pitch)));
        }
        placed
    }

    /// Decode thread: the decoder cannot continue; every task from now on falls back (the first reason stays).
    pub(super) fn fail(&self, why: String) {
        lock(&self.state).failed.get_or_insert(why);
    }

    /// Decode thread `tid`: its call for `generation` is over (nothing writes the arenas for it any more). Push
    /// each outcome into its batch, unless an epoch restart dropped them; `(decoded, fallbacks)` pushed.
    pub(super) fn finish(&self, tid: usize, generation: u64, tasks: Vec<T>, placed: Vec<Placed>) -> Option<(u64, u64)> {
        let mut g = lock(&self.state);
        g.decoding[tid] = None;
        let pushed = (g.generation == generation).then(|| {
            let mut n = (0, 0);
            for (task, at) in tasks.into_iter().zip(placed) {
                if at.is_ok() {
                    n.0 += 1;
                } else {
                    n.1 += 1;
                }
                if let Some(b) = g.batches.get_mut(&task.batch()) {
                    b.done.push(Decoded { task, at });
                }
            }
            n
        });
        drop(g);
        // The transfer thread, and a newer generation's thread waiting in `place` for this one.
        self.results.notify_all();
        pushed
    }

    /// Transfer thread: a new epoch: forget every task and result, empty the arenas.
    pub(super) fn reset(&self) {
        let mut g = lock(&self.state);
        g.generation += 1;
        g.queue.iter_mut().for_each(VecDeque::clear);
        g.batches.clear();
        g.arena_used.fill(0);
    }

    /// Transfer thread: wait until every task of batch `b` has an outcome and take them (empty when b has none).
    /// `aborted` is polled every 50 ms; `None` when it says so, or at shutdown.
    pub(super) fn wait_batch(&self, b: u64, aborted: impl Fn() -> bool) -> Option<Vec<Decoded<T>>> {
        let mut g = lock(&self.state);
        let out = loop {
            match g.batches.get(&b) {
                None => break Some(Vec::new()),
                Some(t) if t.done.len() == t.expected => break g.batches.remove(&b).map(|t| t.done),
                Some(_) => {}
            }
            if aborted() || g.shutdown {
                break None;
            }
            if !g.transfer_waiting {
                g.transfer_waiting = true;
                self.tasks.notify_all(); // a decode thread filling its call starts now
            }
            g = self.results.wait_timeout(g, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
        };
        g.transfer_waiting = false;
        out
    }

    /// Transfer thread: batch `b`'s windows are no longer read: free its arena.
    pub(super) fn release(&self, b: u64) {
        let mut g = lock(&self.state);
        let a = (b % g.arena_used.len() as u64) as usize;
        g.arena_used[a] = 0;
    }

    /// Stop: decode threads return from `take` (after their current call), waits in `place` and `wait_batch`
    /// end. Idempotent.
    pub(super) fn shutdown(&self) {
        lock(&self.state).shutdown = true;
        self.tasks.notify_all();
        self.results.notify_all();
    }
}

/// Time left until the fill wait's `deadline` (None: it passed).
#[cfg(not(loom))]
fn time_left(deadline: Instant) -> Option<Duration> {
    deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
}

/// Under loom time does not pass (its `wait_timeout` never times out either): the fill wait ends only by its
/// conditions (tasks, the transfer thread waiting, shutdown), so the models check that these alone end it.
#[cfg(loom)]
fn time_left(_deadline: Instant) -> Option<Duration> {
    Some(FILL_WAIT)
}

/// How the GPU share is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Share {
    /// Fixed.
    Fixed(f64),
    /// Moved by the controller, starting at the given value.
    Auto(f64),
}

/// One engine's GPU decode path: the routing share, the decode thread and its arenas.
pub struct GpuDecode {
    core: Arc<Core>,
    /// Current GPU share as f64 bits (read by every worker per sample; written by the controller).
    share: AtomicU64,
    /// The auto controller (transfer thread only; None: a fixed share).
    controller: Mutex<Option<Controller>>,
    threads: Mutex<Vec<DecodeThread>>,
    counters: std::sync::Arc<GpuCounters>,
    arena_bytes: usize,
}

impl std::fmt::Debug for GpuDecode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDecode").field("share", &self.share()).finish_non_exhaustive()
    }
}

impl GpuDecode {
    /// Start the decode threads of `ctx`'s GPU: [`DECODERS`] hardware nvJPEG decoders (without and with
    /// interpolated upsampling; taken from the pool of closed loaders' decoders when it has them, else made) and
    /// `arenas` device arenas of `arena_bytes` each (allocated on first use). Errors when the GPU has no hardware
    /// JPEG engine or nvJPEG cannot be set up.
    pub fn start(
        nv: std::sync::Arc<Nvjpeg>,
        ctx: std::sync::Arc<GpuContext>,
        local_engine: usize,
        share: Share,
        arenas: usize,
        arena_bytes: usize,
        counters: std::sync::Arc<GpuCounters>,
    ) -> Result<Self> {
        // nvJPEG's hardware backend allocates internally (not through custom allocators), at handle creation and
        // `nvjpegDecodeBatchedPreAllocate` (64 windows up to 1024²): its device memory is measured as the drop in
        // free device memory while the decoders are made (other users of the GPU may blur it; it is reported as
        // such).
        let free_before = ctx.mem_info().map(|(free, _)| free).ok();
        let key = |q: usize| (ctx.ordinal(), q, nv.path.clone());
        // (queue, decoder, the device bytes it carries when it came from the pool; None: made now)
        let mut decoders: Vec<(usize, BatchDecoder, Option<u64>)> = Vec::new();
        let mut obtain = || -> Result<()> {
            for (q, &n) in DECODERS.iter().enumerate() {
                for _ in 0..n {
                    if let Some((dec, bytes)) = IDLE.take(&key(q)) {
                        decoders.push((q, dec, Some(bytes)));
                        continue;
                    }
                    let dec =
                        BatchDecoder::new(std::sync::Arc::clone(&nv), std::sync::Arc::clone(&ctx), true, q == 1, 0)?;
                    if dec.backend() != crate::cuda::nvjpeg::Backend::Hardware {
                        return Err(TrdataError::config(
                            "decode",
                            format!("needs a GPU with hardware JPEG engines; cuda:{} has none", ctx.ordinal()),
                        ));
                    }
                    decoders.push((q, dec, None));
                }
            }
            Ok(())
        };
        let obtained = obtain();
        let carried: Vec<Option<u64>> = decoders.iter().map(|d| d.2).collect();
        let made = carried.iter().filter(|c| c.is_none()).count();
        let made_bytes = match (made, free_before, ctx.mem_info()) {
            (1.., Some(before), Ok((after, _))) => before.saturating_sub(after) as u64,
            _ => 0,
        };
        let decoders: Vec<(usize, BatchDecoder, u64)> = decoders
            .into_iter()
            .zip(decoder_bytes(&carried, made_bytes))
            .map(|((q, dec, _), bytes)| (q, dec, bytes))
            .collect();
        if let Err(e) = obtained {
            // The decoders made or taken so far are healthy: keep them for the next loader.
            for (q, dec, bytes) in decoders {
                IDLE.put(key(q), dec, bytes);
            }
            return Err(e);
        }
        let nvjpeg_bytes: u64 = decoders.iter().map(|d| d.2).sum();
        let core = Arc::new(Core::new(DECODERS.len(), decoders.len(), arenas, arena_bytes, FILL));
        let (n, mut threads) = (decoders.len(), Vec::new());
        let mut pending = decoders.into_iter().enumerate();
        while let Some((tid, (q, dec, bytes))) = pending.next() {
            let (core2, c, ctx) = (Arc::clone(&core), std::sync::Arc::clone(&counters), std::sync::Arc::clone(&ctx));
            let spawned = std::thread::Builder::new()
                .name(format!("trdata-nvjpg{local_engine}{}{tid}", ["", "i"][q]))
                .spawn(move || decode_main(&core2, &ctx, dec, q, tid, arenas, arena_bytes, &c));
            match spawned {
                Ok(t) => threads.push(DecodeThread { key: key(q), bytes, thread: t }),
                Err(e) => {
                    // The decoders of the threads that started, and those not yet handed to one, are kept (the
                    // one inside the closure that could not start is destroyed with it).
                    core.shutdown();
                    for t in threads {
                        t.join();
                    }
                    for (_, (q, dec, bytes)) in pending {
                        IDLE.put(key(q), dec, bytes);
                    }
                    return Err(TrdataError::Worker(format!("cannot spawn a GPU decode thread: {e}")));
                }
            }
        }
        Stats::add(&counters.decode_gpu_nvjpeg_bytes, nvjpeg_bytes);
        Stats::add(&counters.decode_gpu_decoders, n as u64);
        Stats::add(&counters.decode_gpu_decoders_reused, (n - made) as u64);
        let (p, controller) = match share {
            Share::Fixed(p) => (p, None),
            Share::Auto(p) => (p, Some(Controller::new(p))),
        };
        let me = Self {
            core,
            share: AtomicU64::new(p.to_bits()),
            controller: Mutex::new(controller),
            threads: Mutex::new(threads),
            counters,
            arena_bytes,
        };
        me.publish_share(p);
        Ok(me)
    }

    /// The GPU share now.
    pub fn share(&self) -> f64 {
        f64::from_bits(self.share.load(Ordering::Relaxed))
    }

    fn publish_share(&self, p: f64) {
        self.share.store(p.to_bits(), Ordering::Relaxed);
        self.counters.decode_gpu_share_ppm.store((p * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// Whether sample (seed, epoch, index) goes to the GPU, given that its file is eligible: its own draw below
    /// the share (see the module docs).
    pub fn route(&self, seed: u64, epoch: u64, index: u64) -> bool {
        let p = self.share();
        p >= 1.0
            || (p > 0.0 && crate::rng::SampleRng::new(seed, epoch, index, crate::rng::OP_DECODE_ROUTE).uniform() < p)
    }

    /// A sample whose file the GPU path cannot take went to the CPU workers (counted while the path is on).
    pub fn count_ineligible(&self) {
        Stats::add(&self.counters.decode_gpu_ineligible, 1);
    }

    /// Bytes of one arena (the bound on the decoded windows of one batch).
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Queue `task` (worker, before it completes the row; see the module protocol).
    pub fn submit(&self, task: GpuTask) {
        self.core.submit(task);
    }

    /// A new epoch: forget every task and result, empty the arenas (transfer thread; see the module protocol).
    pub fn reset(&self) {
        self.core.reset();
    }

    /// Wait until every task of batch `b` has an outcome and take them (empty when b has none). `aborted` is
    /// polled every 50 ms; `None` when it says so.
    pub fn wait_batch(&self, b: u64, aborted: impl Fn() -> bool) -> Option<Vec<Decoded>> {
        self.core.wait_batch(b, aborted)
    }

    /// Batch `b`'s decoded windows are no longer read (its kernels completed): free its arena.
    pub fn release(&self, b: u64) {
        self.core.release(b);
    }

    /// The auto controller, after one batch (see the module docs): `starved` = the consumer waited for it;
    /// `cpu_wait`/`gpu_wait` = how long the transfer thread waited for its CPU rows / GPU rows.
    pub fn adjust(&self, starved: bool, cpu_wait: Duration, gpu_wait: Duration) {
        let next = lock(&self.controller).as_mut().map(|c| c.next(starved, cpu_wait, gpu_wait));
        if let Some(p) = next {
            self.publish_share(p);
        }
    }

    /// Stop and join the decode threads (each finishes its current sub-batch first) and keep their decoders
    /// for the next loader ("Decoder reuse"); idempotent. Workers that still submit afterwards only queue
    /// (nothing waits for them: the transfer thread is stopped first).
    pub fn close(&self) {
        self.core.shutdown();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            t.join();
        }
    }
}

impl Drop for GpuDecode {
    fn drop(&mut self) {
        self.close();
    }
}

/// The auto controller's state (module docs: "Auto controller").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Controller {
    share: f64,
    step: f64,
}

impl Controller {
    /// First step (share units) and where the step decays to.
    const STEP: (f64, f64) = (0.05, 0.005);

    /// A controller starting at `share`.
    pub fn new(share: f64) -> Self {
        Self { share: share.clamp(0.0, 1.0), step: Self::STEP.0 }
    }

    /// The share after one more batch (see the module docs).
    pub fn next(&mut self, starved: bool, cpu_wait: Duration, gpu_wait: Duration) -> f64 {
        let p = self.share;
        let next = if !starved {
            p - self.step / 4.0
        } else if cpu_wait > gpu_wait {
            p + self.step
        } else {
            p - self.step
        };
        self.step += 0.1 * (Self::STEP.1 - self.step);
        self.share = next.clamp(0.0, 1.0);
        self.share
    }
}

/// The production queue: nvJPEG tasks, device arenas.
type Core = DecodeQueue<GpuTask, ArenaMemory>;

/// A decode thread (module protocol): the tasks of queue `q` through its decoder `dec`; `tid` is its slot in
/// the `decoding` guard.
#[allow(clippy::too_many_arguments)]
fn decode_main(
    core: &Core,
    ctx: &std::sync::Arc<GpuContext>,
    mut dec: BatchDecoder,
    q: usize,
    tid: usize,
    arenas: usize,
    arena_bytes: usize,
    counters: &GpuCounters,
) -> Option<BatchDecoder> {
    let mut healthy = true;
    while let Some((generation, tasks)) = core.take(q) {
        let t0 = Instant::now();
        let mut placed = core.place(&tasks, tid, generation, |memory: &mut ArenaMemory, a| {
            if memory.0.len() < arenas {
                memory.0.resize(arenas, None);
            }
            if memory.0[a].is_none() {
                // Allocated under the lock: once per arena for the loader's life.
                let m = DeviceMemory::alloc(ctx, arena_bytes)
                    .map_err(|e| format!("the GPU arena could not be allocated: {e}"))?;
                Stats::add(&counters.decode_gpu_arena_bytes, arena_bytes as u64);
                memory.0[a] = Some(std::sync::Arc::new(m));
            }
            Ok(memory.0[a].as_ref().map_or(0, |m| m.ptr() as usize))
        });
        let pick: Vec<usize> = (0..tasks.len()).filter(|&i| placed[i].is_ok()).collect();
        if !pick.is_empty() {
            let images: Vec<&[u8]> = pick.iter().map(|&i| tasks[i].bytes.as_slice()).collect();
            let rois: Vec<Roi> = pick.iter().map(|&i| tasks[i].roi).collect();
            let dst: Vec<(usize, usize)> = pick.iter().map(|&i| *placed[i].as_ref().expect("picked")).collect();
            // A panic inside nvJPEG's wrapper must not leave the batch's tasks without outcomes (the transfer thread
            // would wait for them forever): it stops the decoder like a failed synchronize.
            let decoded =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dec.decode_into(&images, &rois, &dst)))
                    .unwrap_or_else(|_| {
                        Err(crate::cuda::cuda_error("nvjpegDecodeBatchedEx", "the decode call panicked"))
                    });
            match decoded {
                Ok(outcomes) => {
                    for (&i, o) in pick.iter().zip(outcomes) {
                        if let Err(why) = o {
                            placed[i] = Err(why);
                        }
                    }
                }
                Err(e) => {
                    // The stream could not be synchronized: the device state is unknown; stop using it (and never
                    // keep it for another loader).
                    healthy = false;
                    let why = format!("the GPU decoder stopped: {e}");
                    core.fail(why.clone());
                    for &i in &pick {
                        placed[i] = Err(why.clone());
                    }
                }
            }
        }
        Stats::add_since(&counters.decode_gpu_ns, t0);
        // Outcomes of a generation an epoch restart dropped are not pushed (nor counted).
        if let Some((decoded, fallbacks)) = core.finish(tid, generation, tasks, placed) {
            Stats::add(&counters.decode_gpu, decoded);
            Stats::add(&counters.decode_gpu_fallback, fallbacks);
        }
    }
    healthy.then_some(dec)
}

/// The device bytes of each decoder of a starting loader, which travel with it into the pool and which the loader
/// reports: a decoder taken from the pool (`Some`) keeps what it carries; the new ones (`None`) share `measured`
/// — the drop in free device memory while they were made — equally (the division's remainder, < 1 byte per new
/// decoder, is dropped, so a later loader that takes them reports exactly what this one did).
fn decoder_bytes(carried: &[Option<u64>], measured: u64) -> Vec<u64> {
    let made = carried.iter().filter(|c| c.is_none()).count() as u64;
    carried.iter().map(|c| c.unwrap_or(measured / made.max(1))).collect()
}

/// A decode thread and where its decoder goes when it ends.
struct DecodeThread {
    /// The pool's key for its decoder.
    key: IdleKey,
    /// Device bytes the decoder took when it was made (carried with it into the pool).
    bytes: u64,
    thread: JoinHandle<Option<BatchDecoder>>,
}

impl DecodeThread {
    /// Wait for the thread; its decoder goes to the pool unless it stopped on an error (then it was destroyed on
    /// the thread) or the thread panicked (destroyed while unwinding).
    fn join(self) {
        if let Ok(Some(dec)) = self.thread.join() {
            IDLE.put(self.key, dec, self.bytes);
        }
    }
}

/// Decoder reuse: nvJPEG hardware decoders outlive their loader. Closing a loader returns its decoders here and
/// the next loader on the same GPU with the same libnvjpeg takes them instead of making new ones; none is
/// destroyed, so the pool holds, per GPU, as many as were ever in use at once (3 per open GPU-decode loader).
/// Why: on the H200 a process that destroyed trdata's hardware decoders and then ran torchvision's hardware
/// decode (`decode_jpeg(device="cuda")`, batched) hung in 4 of 7 runs, the GPU busy and the engines idle, and did
/// not in 2 of 2 runs with reuse (docs/gpu_decode.md §20); torchvision itself never destroys its decoder. It also
/// saves each later loader the decoders' creation and pre-allocation. The cost: their device buffers
/// (`decode_gpu_nvjpeg_bytes`, ~100 MB each on the H200) and page-locked bitstream buffers (≤ 32 MiB each) stay
/// allocated, and the GPU's primary context retained, until the process ends. A decoder whose stream failed is
/// destroyed, never kept. Not survived: a reset of the primary context by another library while decoders are
/// kept (`cuDevicePrimaryCtxReset`, e.g. numba's `cuda.close()`), which invalidates them.
static IDLE: IdlePool<BatchDecoder> = IdlePool::new();

/// Idle items by (GPU ordinal, queue, library path), each with its device bytes.
struct IdlePool<T>(std::sync::Mutex<Vec<(IdleKey, T, u64)>>);

/// (GPU ordinal, queue, path of the libnvjpeg that made the decoder).
type IdleKey = (u32, usize, String);

impl<T> IdlePool<T> {
    const fn new() -> Self {
        Self(std::sync::Mutex::new(Vec::new()))
    }

    /// The most recently returned item of the kind (so a loader opened after another one closed runs on exactly
    /// that loader's decoders, whatever else the pool holds).
    fn take(&self, key: &IdleKey) -> Option<(T, u64)> {
        let mut idle = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = idle.iter().rposition(|d| &d.0 == key)?;
        let (_, item, bytes) = idle.remove(i);
        Some((item, bytes))
    }

    fn put(&self, key: IdleKey, item: T, bytes: u64) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((key, item, bytes));
    }
}

/// Device memory of the arenas, shared by the decode threads (allocated on first use, kept for the loader's
/// life; freed when the last thread ends).
#[derive(Default)]
struct ArenaMemory(Vec<Option<std::sync::Arc<DeviceMemory>>>);

impl std::fmt::Debug for ArenaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArenaMemory({} allocated)", self.0.iter().flatten().count())
    }
}

/// Bytes of one decode arena for batches of `batch_size`: 768 KiB of decoded window per row (a whole 512×500 RGB
/// image; ImageNet's RandomResizedCrop windows average less than half of that), within [64 MiB, 2 GiB]. There are
/// host ring depth + 1 arenas per GPU, allocated when first used; windows that do not fit go to the CPU path.
pub fn arena_bytes(batch_size: usize) -> usize {
    batch_size.saturating_mul(768 << 10).clamp(64 << 20, 2 << 30)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn new_decoders_share_the_measured_bytes_and_reused_ones_keep_theirs() {
        assert_eq!(decoder_bytes(&[None, None, None], 300), [100, 100, 100]);
        assert_eq!(decoder_bytes(&[None, None, None], 302), [100, 100, 100], "the remainder is dropped");
        assert_eq!(decoder_bytes(&[Some(7), Some(8), Some(9)], 300), [7, 8, 9], "nothing new: measured is ignored");
        assert_eq!(decoder_bytes(&[Some(100), None, None], 90), [100, 45, 45]);
        assert_eq!(decoder_bytes(&[None, None], 0), [0, 0]);
        assert!(decoder_bytes(&[], 5).is_empty());
        // What a loader reports is what the next one, taking the same decoders, reports again.
        let first = decoder_bytes(&[None, None, None], 1_000_001);
        let again = decoder_bytes(&first.iter().map(|&b| Some(b)).collect::<Vec<_>>(), 12_345);
        assert_eq!(first.iter().sum::<u64>(), again.iter().sum::<u64>());
    }

    #[test]
    fn the_idle_pool_hands_out_only_its_kind_and_keeps_every_item() {
        let pool = IdlePool::new();
        let k = |gpu: u32, q: usize, lib: &str| (gpu, q, lib.to_owned());
        assert!(pool.take(&k(0, 0, "a.so")).is_none());
        for (i, item) in ["x", "y", "z"].into_iter().enumerate() {
            pool.put(k(0, 0, "a.so"), item, 10 * i as u64);
        }
        pool.put(k(0, 1, "a.so"), "i", 40);
        pool.put(k(1, 0, "a.so"), "g1", 50);
        pool.put(k(0, 0, "b.so"), "other library", 60);
        assert_eq!(pool.take(&k(0, 1, "a.so")), Some(("i", 40)));
        assert!(pool.take(&k(0, 1, "a.so")).is_none());
        assert_eq!(pool.take(&k(1, 0, "a.so")), Some(("g1", 50)));
        let three: Vec<_> = (0..3).map(|_| pool.take(&k(0, 0, "a.so")).unwrap()).collect();
        assert_eq!(three, [("z", 20), ("y", 10), ("x", 0)], "none was dropped; the last returned comes first");
        assert!(pool.take(&k(0, 0, "a.so")).is_none());
        assert_eq!(pool.take(&k(0, 0, "b.so")), Some(("other library", 60)));
    }

    #[test]
    fn the_controller_follows_the_path_that_makes_the_consumer_wait() {
        // Starved by the CPU rows: the share climbs to 1 and stays there.
        let mut c = Controller::new(0.5);
        let shares: Vec<f64> = (0..400).map(|_| c.next(true, 5 * MS, MS)).collect();
        assert!(shares.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*shares.last().unwrap(), 1.0);
        // Starved by the GPU rows: down to 0.
        let mut c = Controller::new(0.5);
        assert_eq!((0..400).map(|_| c.next(true, MS, 5 * MS)).last(), Some(0.0));
        // Not starved: the CPU stays the main path (the share drifts down, slowly).
        let mut c = Controller::new(0.5);
        let first = c.next(false, MS, MS);
        assert!(0.48 < first && first < 0.5, "{first}");
        assert_eq!((0..2000).map(|_| c.next(false, MS, MS)).last(), Some(0.0));
    }

    #[test]
    fn the_controller_settles_where_the_two_paths_balance() {
        // A model of a loader-bound run: the CPU path alone makes 10 units/s, the GPU path alone 12; a share p
        // takes (1-p)/10 for the CPU rows and p/12 for the GPU rows, so they balance at p = 12/22.
        let mut c = Controller::new(0.0);
        let mut p = 0.0;
        let mut tail = Vec::new();
        for i in 0..600 {
            let cpu = Duration::from_secs_f64((1.0 - p) / 10.0);
            let gpu = Duration::from_secs_f64(p / 12.0);
            p = c.next(true, cpu, gpu);
            if i >= 500 {
                tail.push(p);
            }
        }
        let balance = 12.0 / 22.0;
        assert!(tail.iter().all(|&p| (p - balance).abs() < 0.02), "{tail:?}");
    }

    #[test]
    fn arenas_scale_with_the_batch_within_their_bounds() {
        assert_eq!(arena_bytes(1), 64 << 20);
        assert_eq!(arena_bytes(256), 256 * (768 << 10));
        assert_eq!(arena_bytes(1 << 20), 2 << 30);
    }

    /// splitmix64: the stress test's randomness (seeded per thread and run, so a failure names its seed).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    type Q = DecodeQueue<FakeTask, ()>;
    const DEPTH: u64 = 2; // host ring depth K: A = K + 1 arenas
    const A: usize = DEPTH as usize + 1;
    const ROWS: u64 = 16;
    const BATCHES: u64 = 12;
    const EPOCHS: u64 = 4;
    const WORKERS: usize = 8;
    const ARENA: usize = 16 << 10;
    /// Decode threads: [queue 0, queue 0, queue 1], as [`DECODERS`].
    const QUEUES: [usize; 3] = [0, 0, 1];

    #[derive(Debug, Default)]
    struct Totals {
        runs: u64,
        submitted: u64,
        collected: u64,
        decoded: u64,
        fallback_decoder: u64,
        fallback_full: u64,
        fallback_too_big: u64,
        fallback_stopped: u64,
        restarts: u64,
        dropped: u64,
    }

    /// The fake device: arena a is words [a * ARENA / 4, (a + 1) * ARENA / 4); a decode writes its task id + 1
    /// into every word of its window; `writing` holds the byte ranges being written now.
    struct Device {
        words: Vec<std::sync::atomic::AtomicU32>,
        writing: Mutex<Vec<(usize, usize)>>,
        calls: std::sync::atomic::AtomicU64,
    }

    fn words(at: usize, pitch: usize, h: u32) -> std::ops::Range<usize> {
        at / 4..(at + pitch * h as usize).div_ceil(4)
    }

    /// A decode thread: the production sequence (take, place, decode, finish) with a fake decoder that spins a
    /// few µs per window, fails 5 % of them, and (when `fail_call` says so) fails a whole call.
    fn decoder(q: &Q, dev: &Device, queue: usize, tid: usize, seed: u64, fail_call: Option<u64>) {
        let mut rng = Rng(seed ^ (tid as u64) << 56);
        while let Some((generation, tasks)) = q.take(queue) {
            let mut placed = q.place(&tasks, tid, generation, |_, a| Ok(a * ARENA));
            let call = dev.calls.fetch_add(1, Ordering::Relaxed);
            if fail_call == Some(call) {
                q.fail("the GPU decoder stopped: fake".into());
                placed.iter_mut().filter(|p| p.is_ok()).for_each(|p| *p = Err("the GPU decoder stopped: fake".into()));
            }
            let mine: Vec<(usize, usize)> = placed
                .iter()
                .zip(&tasks)
                .filter_map(|(p, t)| p.as_ref().ok().map(|&(at, pitch)| (at, at + pitch * t.h as usize)))
                .collect();
            {
                let mut w = lock(&dev.writing);
                for &(s, e) in &mine {
                    if let Some(o) = w.iter().find(|o| o.0 < e && s < o.1) {
                        panic!("seed {seed}: [{s}, {e}) placed over {o:?}, which is being written");
                    }
                }
                w.extend(&mine);
            }
            for (p, t) in placed.iter_mut().zip(&tasks) {
                let Ok((at, pitch)) = *p else { continue };
                if rng.chance(5) {
                    *p = Err("fake decode error".into());
                    continue;
                }
                for i in words(at, pitch, t.h) {
                    dev.words[i].store(t.id as u32 + 1, Ordering::Relaxed);
                }
                let spin = Instant::now() + Duration::from_micros(rng.below(5));
                while Instant::now() < spin {
                    std::hint::spin_loop();
                }
            }
            lock(&dev.writing).retain(|o| !mine.contains(o));
            q.finish(tid, generation, tasks, placed);
        }
    }

    /// One run: a fresh queue, EPOCHS epochs of BATCHES batches of ROWS rows made by WORKERS workers that claim
    /// rows from a counter (fast mode) and may work BATCHES ahead only within the A - 1 batches after the one
    /// the transfer thread holds (the station's guarantee); GPU rows go to random queues with random windows.
    /// An epoch may be restarted at a random batch. The transfer thread checks every batch it collects.
    fn run(seed: u64, t: &mut Totals) {
        let mut rng = Rng(seed);
        let q =
            Q::new(2, QUEUES.len(), A, ARENA, Fill { max: MAX_SUB_BATCH, target: 8, wait: Duration::from_micros(200) });
        let dev = Device {
            words: (0..A * ARENA / 4).map(|_| std::sync::atomic::AtomicU32::new(0)).collect(),
            writing: Mutex::new(Vec::new()),
            calls: std::sync::atomic::AtomicU64::new(0),
        };
        // A quarter of the runs lose the decoder at a random call: every task from then on falls back.
        let fail_call = rng.chance(25).then(|| rng.below(40));
        std::thread::scope(|s| {
            for (tid, &queue) in QUEUES.iter().enumerate() {
                let (q, dev) = (&q, &dev);
                s.spawn(move || decoder(q, dev, queue, tid, seed, fail_call));
            }
            for epoch in 0..EPOCHS {
                q.reset(); // the station is rewound: no worker of the previous epoch runs
                let restart_at = rng.chance(50).then(|| rng.below(BATCHES));
                let released = AtomicU64::new(0);
                let next = AtomicU64::new(0);
                let stop = std::sync::atomic::AtomicBool::new(false);
                let complete: Vec<AtomicU64> = (0..BATCHES).map(|_| AtomicU64::new(0)).collect();
                let expected: Vec<Mutex<Vec<u64>>> = (0..BATCHES).map(|_| Mutex::new(Vec::new())).collect();
                std::thread::scope(|w| {
                    for worker in 0..WORKERS {
                        let (q, released, next, stop, complete, expected) =
                            (&q, &released, &next, &stop, &complete, &expected);
                        let mut rng = Rng(seed ^ (epoch << 40) ^ ((worker as u64) << 48) ^ 0xabcd);
                        w.spawn(move || {
                            loop {
                                let seq = next.fetch_add(1, Ordering::Relaxed);
                                if seq >= BATCHES * ROWS {
                                    return;
                                }
                                let b = seq / ROWS;
                                while b >= released.load(Ordering::Acquire) + A as u64 {
                                    if stop.load(Ordering::Relaxed) {
                                        return;
                                    }
                                    std::thread::yield_now();
                                }
                                if stop.load(Ordering::Relaxed) {
                                    return;
                                }
                                if rng.chance(60) {
                                    let id = (epoch << 32) | seq;
                                    let (w, h) =
                                        if rng.chance(2) { (80, 80) } else { (4 + rng.below(45), 4 + rng.below(45)) };
                                    lock(&expected[b as usize]).push(id);
                                    let queue = rng.below(2) as usize;
                                    q.submit(FakeTask { id, batch: b, queue, w: w as u32, h: h as u32 });
                                }
                                complete[b as usize].fetch_add(1, Ordering::Release);
                            }
                        });
                    }
                    for b in 0..BATCHES {
                        if restart_at == Some(b) {
                            stop.store(true, Ordering::Relaxed);
                            t.restarts += 1;
                            break;
                        }
                        while complete[b as usize].load(Ordering::Acquire) < ROWS {
                            std::thread::yield_now();
                        }
                        let t0 = Instant::now();
                        let aborted = || {
                            assert!(t0.elapsed() < Duration::from_secs(10), "seed {seed}: batch {b} waited 10 s");
                            false
                        };
                        let got = q.wait_batch(b, aborted).expect("not shut down");
                        check_batch(seed, epoch, b, &got, &lock(&expected[b as usize]), &dev, t);
                        q.release(b);
                        released.store(b + 1, Ordering::Release);
                    }
                });
                let submitted: u64 = expected.iter().map(|e| lock(e).len() as u64).sum();
                t.submitted += submitted;
                let collected: u64 =
                    expected[..released.load(Ordering::Relaxed) as usize].iter().map(|e| lock(e).len() as u64).sum();
                t.dropped += submitted - collected;
                if restart_at.is_none() {
                    assert_eq!(submitted, collected, "seed {seed}: a whole epoch is collected");
                }
            }
            q.shutdown();
        });
        assert!(lock(&dev.writing).is_empty());
        t.runs += 1;
    }

    /// Batch b's outcomes: exactly its tasks, of this epoch, each once; placed windows inside arena b mod A, not
    /// overlapping, still holding what their decode wrote; fallbacks for a known reason.
    fn check_batch(
        seed: u64,
        epoch: u64,
        b: u64,
        got: &[Decoded<FakeTask>],
        want: &[u64],
        dev: &Device,
        t: &mut Totals,
    ) {
        let mut ids: Vec<u64> = got.iter().map(|d| d.task.id).collect();
        ids.sort_unstable();
        let mut want = want.to_vec();
        want.sort_unstable();
        assert_eq!(ids, want, "seed {seed}: epoch {epoch} batch {b}");
        let a = (b % A as u64) as usize;
        let mut spans = Vec::new();
        for d in got {
            assert_eq!((d.task.batch, d.task.id >> 32), (b, epoch), "seed {seed}");
            match &d.at {
                Ok((at, pitch)) => {
                    assert_eq!(*pitch, d.task.w as usize * 3);
                    let end = at + pitch * d.task.h as usize;
                    assert!(a * ARENA <= *at && end <= (a + 1) * ARENA, "seed {seed}: {d:?} outside arena {a}");
                    assert!(
                        words(*at, *pitch, d.task.h)
                            .all(|i| dev.words[i].load(Ordering::Relaxed) == d.task.id as u32 + 1),
                        "seed {seed}: the window of {d:?} was overwritten"
                    );
                    spans.push((*at, end));
                    t.decoded += 1;
                }
                Err(why) if why == "fake decode error" => t.fallback_decoder += 1,
                Err(why) if why == "the batch's GPU arena is full" => t.fallback_full += 1,
                Err(why) if why.contains("exceeds the GPU arena") => t.fallback_too_big += 1,
                Err(why) if why.starts_with("the GPU decoder stopped") => t.fallback_stopped += 1,
                Err(why) => panic!("seed {seed}: unexpected fallback {why:?}"),
            }
        }
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "seed {seed}: overlapping windows {spans:?}");
        t.collected += got.len() as u64;
    }

    /// Stress: many runs of `run` (8 workers, 3 decode threads, epochs with random restarts and failures) for
    /// TRDATA_STRESS_SECS seconds (default 2; at least 8 runs).
    #[test]
    fn decode_queue_stress_epochs_restarts_and_failures() {
        let secs: f64 = std::env::var("TRDATA_STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0);
        let t0 = Instant::now();
        let mut t = Totals::default();
        let base = std::env::var("TRDATA_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
        while t.runs < 8 || t0.elapsed().as_secs_f64() < secs {
            run(base.wrapping_add(t.runs), &mut t);
        }
        eprintln!("decode queue stress: {:.1} s, {t:?}", t0.elapsed().as_secs_f64());
        assert_eq!(t.submitted, t.collected + t.dropped);
        // Every path was taken.
        assert!(t.restarts > 0 && t.dropped > 0 && t.decoded > 0, "{t:?}");
        assert!(t.fallback_decoder > 0 && t.fallback_full > 0 && t.fallback_too_big > 0, "{t:?}");
    }
}

/// A task of the models and the stress test: an id, its batch and queue, a window.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
struct FakeTask {
    id: u64,
    batch: u64,
    queue: usize,
    w: u32,
    h: u32,
}

#[cfg(test)]
impl QueueTask for FakeTask {
    fn batch(&self) -> u64 {
        self.batch
    }
    fn queue(&self) -> usize {
        self.queue
    }
    fn window(&self) -> (u32, u32) {
        (self.w, self.h)
    }
}

/// The queue protocol under loom (`make test-loom`): the production `DecodeQueue`, with virtual arena addresses
/// (arena a at `a * ARENA`) and a fake decoder that records the byte ranges it is writing. loom's `wait_timeout`
/// never times out and the fill wait's deadline never passes (`time_left`), so a wakeup that the protocol does
/// not send is a reported deadlock, not a slow test.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::thread_spawn;

    type Q = DecodeQueue<FakeTask, ()>;
    const ARENA: usize = 1 << 12;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(f);
    }

    fn task(id: u64, batch: u64, queue: usize) -> FakeTask {
        FakeTask { id, batch, queue, w: 8, h: 8 } // 192 bytes
    }

    /// Byte ranges being written by decodes now, with the generation of each.
    type Writing = Arc<Mutex<Vec<(usize, usize, u64)>>>;

    /// A decode thread's loop, as `decode_main`: take, place, "decode" (register each placed window as being
    /// written, checking it overlaps no window another decode is writing, then unregister), finish.
    fn decoder(q: Arc<Q>, queue: usize, tid: usize, writing: Writing) {
        while let Some((generation, tasks)) = q.take(queue) {
            let placed = q.place(&tasks, tid, generation, |_, a| Ok(a * ARENA));
            let mine: Vec<(usize, usize, u64)> = placed
                .iter()
                .zip(&tasks)
                .filter_map(|(p, t)| p.as_ref().ok().map(|&(at, pitch)| (at, at + pitch * t.h as usize, generation)))
                .collect();
            {
                let mut w = lock(&writing);
                for &(s, e, g) in &mine {
                    if let Some(o) = w.iter().find(|o| o.0 < e && s < o.1) {
                        panic!("generation {g} writes [{s}, {e}) while {o:?} is being written");
                    }
                }
                w.extend(&mine);
            }
            lock(&writing).retain(|o| !mine.contains(o));
            q.finish(tid, generation, tasks, placed);
        }
    }

    fn start_decoder(q: &Arc<Q>, queue: usize, tid: usize, writing: &Writing) -> loom::thread::JoinHandle<()> {
        let (q, writing) = (Arc::clone(q), Arc::clone(writing));
        thread_spawn(move || decoder(q, queue, tid, writing))
    }

    /// The station's guarantee, modeled: batches whose rows are all complete (every task of them submitted).
    type Complete = Arc<(Mutex<u64>, Condvar)>;

    fn wait_complete(c: &Complete, batches: u64) {
        let mut g = lock(&c.0);
        while *g < batches {
            g = c.1.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn ids(d: &[Decoded<FakeTask>], batch: u64) -> Vec<u64> {
        let mut ids: Vec<u64> = d.iter().inspect(|d| assert_eq!(d.task.batch, batch)).map(|d| d.task.id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn decode_queue_loom_delivers_every_task_once_to_its_batch() {
        model(|| {
            // Production fill policy: with 3 tasks queued the decode thread waits to fill its call until the
            // transfer thread waits (loom never times the wait out).
            let q = Arc::new(Q::new(1, 1, 2, ARENA, FILL));
            let writing = Writing::default();
            let complete = Complete::default();
            let dec = start_decoder(&q, 0, 0, &writing);
            let worker = thread_spawn({
                let (q, complete) = (Arc::clone(&q), Arc::clone(&complete));
                move || {
                    q.submit(task(0, 0, 0));
                    q.submit(task(1, 0, 0));
                    *lock(&complete.0) = 1;
                    complete.1.notify_all();
                    q.submit(task(2, 1, 0));
                    *lock(&complete.0) = 2;
                    complete.1.notify_all();
                }
            });
            for (b, want) in [(0, vec![0, 1]), (1, vec![2])] {
                wait_complete(&complete, b + 1);
                let d = q.wait_batch(b, || false).expect("not shut down");
                assert_eq!(ids(&d, b), want);
                for x in &d {
                    let (at, pitch) = *x.at.as_ref().expect("fits");
                    let a = b as usize % 2;
                    assert!(a * ARENA <= at && at + pitch * 8 <= (a + 1) * ARENA, "{x:?} outside arena {a}");
                }
                q.release(b);
            }
            worker.join().unwrap();
            q.shutdown();
            dec.join().unwrap();
        });
    }

    #[test]
    fn decode_queue_loom_reset_during_a_decode() {
        model(|| {
            // One window fills an arena: without the `decoding` guard the new generation's window would be placed
            // where the old one may still be written. Two queues, one decode thread each, calls start at once.
            let q = Arc::new(Q::new(2, 2, 1, 192, Fill { target: 1, ..FILL }));
            let writing = Writing::default();
            let decs = [start_decoder(&q, 0, 0, &writing), start_decoder(&q, 1, 1, &writing)];
            q.submit(task(0, 0, 0)); // epoch 0, batch 0
            q.reset(); // epoch restart: no worker runs, the old task may be decoding
            q.submit(task(1, 0, 1)); // epoch 1, batch 0
            let d = q.wait_batch(0, || false).expect("not shut down");
            assert_eq!(ids(&d, 0), [1], "only the new generation's task");
            assert!(d[0].at.is_ok(), "the arena was emptied by reset: {:?}", d[0].at);
            q.release(0);
            q.shutdown();
            for t in decs {
                t.join().unwrap();
            }
        });
    }

    #[test]
    fn decode_queue_loom_close_ends_every_wait() {
        model(|| {
            let q = Arc::new(Q::new(1, 1, 2, ARENA, FILL));
            let writing = Writing::default();
            let dec = start_decoder(&q, 0, 0, &writing); // fills: 1 task < FILL_TARGET
            q.submit(task(0, 0, 0));
            let transfer = thread_spawn({
                let q = Arc::clone(&q);
                move || q.wait_batch(0, || false).map(|d| ids(&d, 0))
            });
            q.shutdown();
            // Closed while waiting, or the task was decoded first.
            let got = transfer.join().unwrap();
            assert!(got.is_none() || got == Some(vec![0]), "{got:?}");
            dec.join().unwrap();
        });
    }
}
