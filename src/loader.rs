//! The loader: dataset + config → epochs of batches. Owns the lifecycle (DESIGN.md §3): construction only
//! validates; the pool and station start on the first epoch; starting a new epoch cancels a running one;
//! `close` is idempotent and joins every thread; use from a forked child is refused.

use crate::config::{LoaderConfig, PinMode};
use crate::error::{Result, TrdataError};
use crate::plan::claim::WorkerClaim;
use crate::plan::{EpochPlan, PlanShape};
use crate::source::Dataset;
use crate::staging::BatchLayout;
use crate::stats::Stats;
use crate::sync::{lock, Arc, AtomicU64, Mutex};
use crate::transfer::{BatchLease, EpochShape, Station, Take};
use crate::worker::{EngineJob, EpochJob, SkipRecord, WorkContext, WorkerPool};
use std::collections::HashSet;
use std::time::Duration;

/// A batch as the consumer sees it.
#[derive(Debug)]
pub struct Batch {
    /// The buffer, returned to the station on drop.
    pub lease: BatchLease,
    /// Label of every row.
    pub labels: Vec<i64>,
    /// Dataset index of every row.
    pub indices: Vec<i64>,
    /// Leading rows that are real, unique samples of this epoch (the rest repeat them).
    pub valid: usize,
    /// Epoch the batch belongs to.
    pub epoch: u64,
}

/// What `next_batch` returns.
#[derive(Debug)]
pub enum Next {
    /// A batch.
    Batch(Batch),
    /// Not ready yet; call again (the caller checks signals in between).
    Timeout,
    /// The epoch is over.
    End,
}

#[derive(Debug)]
struct Runtime {
    pool: WorkerPool,
    station: Arc<Station>,
    pid: u32,
}

#[derive(Debug)]
struct Running {
    plan: Arc<EpochPlan>,
    next_batch: u64,
}

/// A configured loader over one dataset (one CPU engine in this process).
#[derive(Debug)]
pub struct Loader {
    cfg: LoaderConfig,
    shape: PlanShape,
    ctx: Arc<WorkContext>,
    next_epoch: u64,
    runtime: Option<Runtime>,
    running: Option<Running>,
    closed: bool,
}

impl Loader {
    /// Validate the configuration; starts nothing.
    pub fn new(dataset: Dataset, cfg: LoaderConfig) -> Result<Self> {
        cfg.validate()?;
        if dataset.is_empty() {
            return Err(TrdataError::config("source", "the dataset has no samples"));
        }
        WorkerClaim::new(0, cfg.workers, 1)?;
        let shape = PlanShape {
            num_samples: dataset.len() as u64,
            global_engines: cfg.world_size as u64,
            batch_size: cfg.batch_size as u64,
            last_batch: cfg.last_batch,
            shuffle: cfg.shuffle,
            seed: cfg.seed,
        };
        if shape.batches_per_engine() == 0 {
            return Err(TrdataError::config(
                "batch_size",
                format!(
                    "{} is larger than the {} samples per rank, and last_batch='drop' leaves no batch",
                    cfg.batch_size,
                    shape.samples_per_engine()
                ),
            ));
        }
        let ctx = Arc::new(WorkContext {
            dataset: Arc::new(dataset),
            pipeline: cfg.pipeline.clone(),
            stats: Arc::new(Stats::default()),
            seed: cfg.seed,
            reproducible: cfg.reproducible,
            on_error: cfg.on_error,
            skipped: Mutex::new((HashSet::new(), Vec::new())),
        });
        Ok(Self { cfg, shape, ctx, next_epoch: 0, runtime: None, running: None, closed: false })
    }

    /// Batches per epoch for this rank.
    pub fn len(&self) -> usize {
        self.shape.batches_per_engine() as usize
    }

    /// Never empty (validated at construction).
    pub fn is_empty(&self) -> bool {
        false
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

    /// Epoch the next `start_epoch` will run.
    pub fn epoch(&self) -> u64 {
        self.next_epoch
    }

    /// Set the epoch of the next iteration (later iterations continue from it: e, e+1, …).
    pub fn set_epoch(&mut self, epoch: u64) {
        self.next_epoch = epoch;
    }

    /// Skip records not yet drained (each bad file once).
    pub fn drain_skipped(&self) -> Vec<SkipRecord> {
        std::mem::take(&mut lock(&self.ctx.skipped).1)
    }

    fn check_usable(&self) -> Result<()> {
        if self.closed {
            return Err(TrdataError::Closed("the loader is closed".into()));
        }
        if let Some(rt) = &self.runtime {
            if rt.pid != std::process::id() {
                return Err(TrdataError::Closed(
                    "this loader's worker threads were started in another process; fork after the first \
                     iteration is not supported — create the loader in the child process"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    fn runtime(&mut self) -> Result<&Runtime> {
        if self.runtime.is_none() {
            let layout = BatchLayout { rows: self.cfg.batch_size, sample_bytes: self.cfg.pipeline.sample_bytes() };
            let depth = self.cfg.prefetch;
            let station = Arc::new(Station::new(layout, depth, depth + self.cfg.max_held_batches, self.ctx.stats.clone()));
            let pool = WorkerPool::start(self.cfg.workers, self.cfg.pin)?;
            self.runtime = Some(Runtime { pool, station, pid: std::process::id() });
        }
        Ok(self.runtime.as_ref().expect("just set"))
    }

    /// Cancel the running epoch, if any, and wait for the workers to park.
    fn cancel_running(&mut self) {
        if let (Some(rt), Some(_)) = (&self.runtime, self.running.take()) {
            rt.station.stop();
            rt.pool.wait_idle();
        }
    }

    /// Start the next epoch (cancelling one in flight).
    pub fn start_epoch(&mut self) -> Result<u64> {
        self.check_usable()?;
        self.cancel_running();
        let epoch = self.next_epoch;
        let plan = Arc::new(EpochPlan::new(self.shape, epoch));
        let ctx = Arc::clone(&self.ctx);
        let shape = self.shape;
        let rank = self.cfg.rank as u64;
        let rt = self.runtime()?;
        rt.station.begin_epoch(EpochShape {
            batches: shape.batches_per_engine(),
            batch_size: shape.batch_size,
            total_rows: shape.seqs_per_engine(),
        });
        let engines = vec![EngineJob { global_engine: rank, station: Arc::clone(&rt.station), real_tickets: AtomicU64::new(0) }];
        rt.pool.run(Arc::new(EpochJob { plan: Arc::clone(&plan), engines, ctx: Arc::clone(&ctx) }));
        Stats::add(&ctx.stats.epochs, 1);
        self.next_epoch = epoch + 1;
        self.running = Some(Running { plan, next_batch: 0 });
        Ok(epoch)
    }

    /// The next batch of the running epoch, waiting at most `timeout`.
    pub fn next_batch(&mut self, timeout: Duration) -> Result<Next> {
        self.check_usable()?;
        let Some(running) = &self.running else { return Ok(Next::End) };
        let b = running.next_batch;
        let plan = Arc::clone(&running.plan);
        let rt = self.runtime.as_ref().expect("running implies runtime");
        if b == self.shape.batches_per_engine() {
            rt.pool.wait_idle();
            self.running = None;
            return Ok(Next::End);
        }
        match Station::take(&rt.station, b, timeout) {
            Take::Timeout => Ok(Next::Timeout),
            Take::Ready(lease, Some(err)) => {
                drop(lease);
                self.cancel_running();
                Err(TrdataError::Decode(err))
            }
            Take::Ready(lease, None) => {
                let (labels, indices) = lease.buffer().labels_and_indices(lease.rows);
                let valid = self.shape.valid_in_batch(self.cfg.rank as u64, b) as usize;
                if let Some(r) = self.running.as_mut() {
                    r.next_batch += 1;
                }
                Ok(Next::Batch(Batch { lease, labels, indices, valid, epoch: plan.epoch }))
            }
            Take::AllBuffersHeld { held } => {
                self.cancel_running();
                Err(TrdataError::config(
                    "max_held_batches",
                    format!(
                        "all {held} batch buffers are held by Python, so the next batch can never be produced; \
                         drop references to old batches or raise max_held_batches"
                    ),
                ))
            }
            Take::Poisoned(msg) => {
                self.cancel_running();
                Err(TrdataError::Worker(msg))
            }
            Take::Stopped => {
                self.running = None;
                Ok(Next::End)
            }
        }
    }

    /// Stop everything and join the threads; idempotent. Batches still held stay valid until dropped.
    pub fn close(&mut self) {
        if let Some(mut rt) = self.runtime.take() {
            rt.station.close();
            if rt.pid == std::process::id() {
                rt.pool.shutdown();
            } else {
                // In a forked child the threads do not exist; joining would hang. Forget them.
                std::mem::forget(rt.pool);
            }
        }
        self.running = None;
        self.closed = true;
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
        self.close();
    }
}
