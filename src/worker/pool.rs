//! worker/pool — the persistent pool: W named threads (`trdata-w{i}`), started once per loader, pinned, each
//! with its own decoder, scratch memory and file buffer, parked on a condvar between epochs.
//!
//! Pool protocol: `run(job)` publishes an epoch job under the pool mutex (generation += 1, active = W) and
//! wakes everyone; each worker runs its static claim of the job, then decrements `active` and parks until
//! the next generation. `wait_idle` waits for active == 0 (after `Station::stop` if the epoch is cancelled).
//! A panic inside a job is caught, poisons the station (the consumer raises `WorkerError`) and the worker
//! still checks out, so nothing hangs. `shutdown` sets the flag, wakes and joins every thread; `close` does the
//! same but waits at most [`STOP_WAIT`] and leaves a thread that has not ended by then running, detached: one
//! stuck in code outside the core (a Python dataset's `__getitem__`, a `PythonStep`) cannot be stopped, and an
//! unbounded join made `Loader.close()` and the interpreter's exit hang with it. Each thread counts itself out
//! of `PoolState::alive` when it ends (a drop guard, so a panic counts too); `close` waits on that count.

use super::sample::GpuRow;
use super::skip::produce;
use super::{MAX_FILE_BYTES, WorkContext};
use crate::augment::WorkerScratch;
use crate::decode::DecodeLimits;
use crate::error::{Result, SampleError, TrdataError};
use crate::gpu_decode::GpuDecode;
use crate::plan::claim::WorkerClaim;
use crate::plan::resume::SeqBitmap;
use crate::plan::{EpochPlan, PlanShape};
use crate::source::ImageStore;
use crate::staging::RowWriter;
use crate::sync::{Arc, AtomicU64, Condvar, Mutex, Ordering, lock};
use crate::transfer::Station;
use std::thread::JoinHandle;

/// How long [`WorkerPool::close`] (`Loader.close()`, a loader's drop) waits for the threads to end before it
/// leaves those still in a sample running: as long as `trdata.batch.STOP_WAIT_S`, the bound of a
/// `batch_transform` call's wait. A native sample ends in far less; a sample in Python may never end.
pub const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// One engine's share of an epoch job.
#[derive(Debug)]
pub struct EngineJob {
    /// Global engine index g (plan position p goes to p mod G).
    pub global_engine: u64,
    /// The engine's station.
    pub station: Arc<Station>,
    /// Fast mode: next free slot among the real rows [0, R) (starts at min(k·B, R) on a resume at batch k).
    pub real_tickets: AtomicU64,
    /// Sequence numbers below this were delivered before a resume (reproducible mode: k·B).
    pub skip_below: u64,
    /// Fast-mode resume: the sequence numbers delivered before the interruption (plan/resume.rs).
    pub delivered: Option<SeqBitmap>,
    /// Fast mode: the real sequence number written into each ticket slot of [0, R) (plan/resume.rs says
    /// why and how it is read); empty in reproducible mode.
    pub slot_seqs: Box<[AtomicU64]>,
    /// The engine's GPU decode path, when on for this loader (gpu_decode/route.rs).
    pub gpu: Option<std::sync::Arc<GpuDecode>>,
}

impl EngineJob {
    /// The job of global engine `global_engine` for an epoch of `shape`, starting at batch `first_batch`
    /// with `delivered` (fast mode) already consumed.
    pub fn new(
        global_engine: u64,
        station: Arc<Station>,
        shape: &PlanShape,
        reproducible: bool,
        first_batch: u64,
        delivered: Option<SeqBitmap>,
    ) -> Self {
        let real = shape.real_seqs(global_engine);
        let done = (first_batch * shape.batch_size).min(shape.seqs_per_engine());
        let (skip_below, tickets, slot_seqs) = if reproducible {
            (done, 0, Vec::new())
        } else {
            (0, done.min(real), (0..real).map(|_| AtomicU64::new(u64::MAX)).collect())
        };
        Self {
            global_engine,
            station,
            real_tickets: AtomicU64::new(tickets),
            skip_below,
            delivered,
            slot_seqs: slot_seqs.into_boxed_slice(),
            gpu: None,
        }
    }

    /// The same job with `gpu` as its GPU decode path.
    pub fn with_gpu(mut self, gpu: Option<std::sync::Arc<GpuDecode>>) -> Self {
        self.gpu = gpu;
        self
    }

    fn skips(&self, seq: u64) -> bool {
        seq < self.skip_below || self.delivered.as_ref().is_some_and(|d| d.contains(seq))
    }
}

/// An epoch for the pool to run.
#[derive(Debug)]
pub struct EpochJob {
    /// The plan.
    pub plan: Arc<EpochPlan>,
    /// Engines of this process, indexed by `WorkerClaim::engine`.
    pub engines: Vec<EngineJob>,
    /// Loader context.
    pub ctx: Arc<WorkContext>,
}

impl EpochJob {
    /// True once the loader stopped this epoch or closed (any engine's station says so: they stop together).
    pub fn stopping(&self) -> bool {
        self.engines.iter().any(|e| e.station.is_stopped())
    }
}

#[derive(Debug, Default)]
struct PoolState {
    generation: u64,
    job: Option<Arc<EpochJob>>,
    active: usize,
    started: usize,
    start_error: Option<String>,
    shutdown: bool,
    /// Threads spawned and not ended yet (each decrements it on its way out: [`AliveGuard`]).
    alive: usize,
}

#[derive(Debug, Default)]
struct PoolShared {
    state: Mutex<PoolState>,
    wake: Condvar,
    idle: Condvar,
}

/// The persistent worker pool of one loader.
#[derive(Debug)]
pub struct WorkerPool {
    shared: Arc<PoolShared>,
    threads: Vec<JoinHandle<()>>,
    workers: usize,
}

impl WorkerPool {
    /// Start one thread per entry of `plan` (`topology::worker_plan`), worker w bound to CPU `plan[w]`
    /// (None = unbound); every worker's decoder applies `limits`. Returns once every thread created its scratch
    /// (or failed).
    pub fn start(plan: Vec<Option<usize>>, limits: DecodeLimits) -> Result<Self> {
        let workers = plan.len();
        let shared = Arc::new(PoolShared::default());
        let mut pool = Self { shared: Arc::clone(&shared), threads: Vec::with_capacity(workers), workers };
        for (w, cpu) in plan.into_iter().enumerate() {
            let sh = Arc::clone(&shared);
            lock(&shared.state).alive += 1; // before the thread can end and count itself out
            let spawned = std::thread::Builder::new().name(format!("trdata-w{w}")).spawn(move || {
                let _alive = AliveGuard(&sh);
                worker_main(&sh, w, workers, cpu, limits)
            });
            match spawned {
                Ok(h) => pool.threads.push(h),
                Err(e) => {
                    lock(&shared.state).alive -= 1;
                    pool.shutdown();
                    return Err(TrdataError::Worker(format!("cannot spawn worker thread {w}: {e}")));
                }
            }
        }
        let mut g = lock(&shared.state);
        while g.started < workers && g.start_error.is_none() {
            g = shared.idle.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(e) = g.start_error.take() {
            drop(g);
            pool.shutdown();
            return Err(TrdataError::Worker(e));
        }
        Ok(pool)
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Publish an epoch job; the pool must be idle.
    pub fn run(&self, job: Arc<EpochJob>) {
        let mut g = lock(&self.shared.state);
        assert_eq!(g.active, 0, "run() while a job is active");
        g.generation += 1;
        g.job = Some(job);
        g.active = self.workers;
        drop(g);
        self.shared.wake.notify_all();
    }

    /// Wait until every worker finished the current job (stop the station first to cancel it).
    pub fn wait_idle(&self) {
        let mut g = lock(&self.shared.state);
        while g.active > 0 {
            g = self.shared.idle.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.job = None;
    }

    /// Stop and join every thread; idempotent.
    pub fn shutdown(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.wake.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }

    /// Stop every thread and join those that end within `wait` ([`STOP_WAIT`] for a loader); idempotent. A thread
    /// still running then (in a sample that does not return: a Python `__getitem__` or step) is detached and left
    /// running: it ends by itself if the call ever returns (the station is closed, so it delivers nothing), and
    /// until then what it holds (its job: the epoch's plan, stations and their buffers) stays allocated. Returns
    /// how many threads were left so.
    pub fn close(&mut self, wait: std::time::Duration) -> usize {
        let deadline = std::time::Instant::now() + wait;
        let mut g = lock(&self.shared.state);
        g.shutdown = true;
        self.shared.wake.notify_all();
        while g.alive > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            g = self.shared.idle.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        let all_ended = g.alive == 0;
        drop(g);
        let mut left_running = 0;
        for h in self.threads.drain(..) {
            if all_ended || h.is_finished() {
                let _ = h.join(); // ended, or between its count-out and its return
            } else {
                left_running += 1; // dropping the handle detaches the thread
            }
        }
        left_running
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Counts a worker thread out of `PoolState::alive` when the thread ends, however it ends.
struct AliveGuard<'a>(&'a PoolShared);

impl Drop for AliveGuard<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).alive -= 1;
        self.0.idle.notify_all();
    }
}

fn worker_main(shared: &PoolShared, w: usize, workers: usize, cpu: Option<usize>, limits: DecodeLimits) {
    // Start-up must always end in `started += 1` or a `start_error`: `WorkerPool::start` waits for one of them,
    // so a panic here (inside pinning or decoder set-up) is caught and reported instead of hanging the caller.
    let setup = std::panic::catch_unwind(|| {
        if let Some(cpu) = cpu {
            // A refused binding (cpuset) is not fatal: the worker runs unbound.
            let _ = crate::topology::pin_current_thread(&[cpu]);
        }
        WorkerScratch::with_limits(limits)
    });
    let mut scratch = match setup {
        Ok(Ok(s)) => Some(s),
        failed => {
            let why = match failed {
                Ok(Err(e)) => format!("worker {w} cannot initialise its decoder: {e}"),
                _ => format!("worker {w} panicked while starting (CPU binding {cpu:?})"),
            };
            let mut g = lock(&shared.state);
            g.start_error.get_or_insert(why);
            drop(g);
            shared.idle.notify_all();
            return;
        }
    };
    let mut file_buf = Vec::new();
    let mut seen = 0u64;
    {
        lock(&shared.state).started += 1;
        shared.idle.notify_all();
    }
    loop {
        let job = {
            let mut g = lock(&shared.state);
            while !g.shutdown && g.generation == seen {
                g = shared.wake.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            if g.shutdown {
                return;
            }
            seen = g.generation;
            g.job.clone()
        };
        if let Some(job) = job {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let s = scratch
                    .get_or_insert_with(|| WorkerScratch::with_limits(limits).expect("decoder init worked before"));
                run_job(&job, w, workers, s, &mut file_buf)
            }));
            if let Err(panic) = run {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                scratch = None; // state after a panic is suspect: rebuild it for the next job
                for e in &job.engines {
                    e.station.poison(format!("worker trdata-w{w} panicked: {msg}"));
                }
            }
        }
        let mut g = lock(&shared.state);
        g.active -= 1;
        if g.active == 0 {
            drop(g);
            shared.idle.notify_all();
        }
    }
}

/// The CPU fallback of an epoch's GPU rows (gpu_decode/rows.rs): [`produce`] on the transfer thread, with a
/// scratch of its own, so a sample the GPU could not decode is made exactly as a worker would make it (same
/// bytes, same error and skip policy).
pub struct EpochFallback {
    job: Arc<EpochJob>,
    scratch: Mutex<(WorkerScratch, Vec<u8>)>,
}

impl EpochFallback {
    /// The fallback of `job`, whose decoder applies `limits`.
    pub fn new(job: Arc<EpochJob>, limits: DecodeLimits) -> Result<Self> {
        Ok(Self { job, scratch: Mutex::new((WorkerScratch::with_limits(limits)?, Vec::new())) })
    }
}

impl crate::gpu_decode::CpuFallback for EpochFallback {
    fn produce(&self, index: u64, dst: &mut RowWriter<'_>) -> std::result::Result<u64, SampleError> {
        let mut g = lock(&self.scratch);
        let (scratch, file_buf) = &mut *g;
        produce(&self.job, index, scratch, file_buf, dst, None)
    }

    fn label(&self, index: u64) -> i64 {
        self.job.ctx.dataset.label(index as usize)
    }
}

/// Drops the reads a worker started ahead when its job ends, however it ends (source/remote.rs).
struct ReadAheadEnd<'a>(Option<&'a dyn ImageStore>);

impl Drop for ReadAheadEnd<'_> {
    fn drop(&mut self) {
        if let Some(store) = self.0 {
            store.end_read_ahead();
        }
    }
}

/// Worker `w`'s share of `job`: its claimed sequence numbers, each made into its batch row ([`produce`]).
fn run_job(job: &EpochJob, w: usize, workers: usize, scratch: &mut WorkerScratch, file_buf: &mut Vec<u8>) {
    let claim = WorkerClaim::new(w, workers, job.engines.len()).expect("worker count validated at loader creation");
    let eng = &job.engines[claim.engine];
    let shape = &job.plan.shape;
    let b_size = shape.batch_size;
    let total = shape.seqs_per_engine();
    let real = shape.real_seqs(eng.global_engine);
    let ctx = &job.ctx;
    // Objects behind URLs: this worker's next samples, whose GETs start ahead of it (source/remote.rs).
    let store: &dyn ImageStore = &*ctx.dataset.store;
    let remote = store.reads_ahead().then_some(store);
    let _read_ahead_ends = ReadAheadEnd(remote);
    for seq in claim.seqs(total) {
        if eng.skips(seq) {
            continue; // delivered before an exact resume (plan/resume.rs)
        }
        if let Some(r) = remote {
            // this sample and the worker's next ones (j, j + M, …: the claim's step), delivered ones left out
            let next = (seq..total).step_by(claim.workers_of_engine).filter(|&s| !eng.skips(s));
            let next = next.take(crate::source::remote::READ_AHEAD);
            r.read_ahead(&mut next.map(|s| job.plan.sample_at(eng.global_engine, s) as usize), MAX_FILE_BYTES);
        }
        // Reproducible: the slot is the sequence number. Fast: real rows take the next free slot of [0, R);
        // filler/pad rows keep their fixed slots ≥ R, so real rows always form the batch prefix.
        let slot = if ctx.reproducible || seq >= real {
            seq
        } else {
            let slot = eng.real_tickets.fetch_add(1, Ordering::Relaxed);
            // Published to the consumer by the station mutex in `complete` below (plan/resume.rs).
            eng.slot_seqs[slot as usize].store(seq, Ordering::Relaxed);
            slot
        };
        let (b, row) = (slot / b_size, (slot % b_size) as usize);
        let Some(buf) = eng.station.acquire(b) else { return };
        let index = job.plan.sample_at(eng.global_engine, seq);
        let mut writer = buf.claim_row(row);
        let gpu = eng.gpu.as_deref().map(|gpu| GpuRow { gpu, batch: b, row });
        let outcome = produce(job, index, scratch, file_buf, &mut writer, gpu);
        let written = *outcome.as_ref().unwrap_or(&index);
        writer.set_meta(ctx.dataset.label(written as usize), written as i64);
        drop(buf); // the row is written: release our handle before announcing it
        eng.station.complete(b, outcome.err());
    }
}
