//! worker — the loader's workers: W named threads that turn the plan's sample indices into batch rows. By concern:
//! - `pool`: the persistent pool (threads started once per loader, pinned, parked between epochs; the pool
//!   protocol in its docs), an epoch's job ([`EpochJob`], [`EngineJob`]), each worker's loop over its claim, and the
//!   CPU fallback of the GPU's rows;
//! - `skip`: what a bad sample becomes under `on_error` (`produce`'s replacement loop, the shared [`SkipLog`]);
//! - `sample`: making one row: the sample's one read (`source::Dataset::read`), decode and augmentation into
//!   every view, a Mosaic's parts, the routing of a sample to the GPU;
//! - `targets`: the row's targets, made beside its pixels.

mod pool;
mod sample;
mod skip;
mod targets;

pub use pool::{EngineJob, EpochFallback, EpochJob, STOP_WAIT, WorkerPool};
pub use skip::{MAX_SKIP_ATTEMPTS, SkipLog, SkipRecord};

use crate::augment::views::SampleViews;
use crate::source::Dataset;
use crate::stats::Stats;
use crate::sync::{Arc, AtomicBool, Mutex};

/// What to do with a sample that cannot be read or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// Raise `DecodeError` in the iterating thread at the batch holding the sample.
    Raise,
    /// Replace the sample by a deterministic other sample, count and log it.
    Skip,
}

/// Files above this size are refused before reading (absurd input guard).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Shared, loader-lifetime context of every job.
#[derive(Debug)]
pub struct WorkContext {
    /// The samples.
    pub dataset: Arc<Dataset>,
    /// Decode + augmentation: one pipeline per view (one without `views=`); a sample is read once and every
    /// view is made from its bytes (augment/views.rs).
    pub pipeline: SampleViews,
    /// Counters.
    pub stats: Arc<Stats>,
    /// Seed of all randomness.
    pub seed: u64,
    /// Fixed slots (true) or ticket slots (false).
    pub reproducible: bool,
    /// Bad-sample policy.
    pub on_error: ErrorPolicy,
    /// What the skip policy learned: bad samples (each logged once, drained by the Python layer).
    pub skipped: Mutex<SkipLog>,
    /// `skipped.bad` is not empty: until a sample fails, the per-sample known-bad check takes no lock.
    pub any_bad: AtomicBool,
    /// The samples' targets, made by the worker beside each row's image (targets.rs; None: images only).
    pub targets: Option<std::sync::Arc<dyn crate::sample::TargetStore>>,
    /// The samples' extras, read by the worker beside each row's image (targets.rs; None: no extras).
    pub extras: Option<std::sync::Arc<dyn crate::sample::ExtrasStore>>,
}

#[cfg(all(test, not(feature = "loom")))]
mod tests;
