//! Loader configuration as validated data. Python (src/py) parses user values into these types; the
//! constructors here check ranges and name the offending parameter in the error.

use crate::augment::SamplePipeline;
use crate::error::{Result, TrdataError};

/// What to do with the last, incomplete batch of an engine's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastBatch {
    /// Drop it: every batch is full.
    Drop,
    /// Fill it to a full batch by repeating real samples; `valid` reports the real rows.
    Pad,
    /// Deliver it smaller.
    Partial,
}

impl LastBatch {
    /// Parse `drop` / `pad` / `partial`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "drop" => Ok(Self::Drop),
            "pad" => Ok(Self::Pad),
            "partial" => Ok(Self::Partial),
            _ => Err(TrdataError::config("last_batch", format!("{s:?} is not one of 'drop', 'pad', 'partial'"))),
        }
    }
}

/// What to do with a sample that cannot be read or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// Raise `DecodeError` in the iterating thread at the batch holding the sample.
    Raise,
    /// Replace the sample by a deterministic other sample, count and log it.
    Skip,
}

impl ErrorPolicy {
    /// Parse `raise` / `skip`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "raise" => Ok(Self::Raise),
            "skip" => Ok(Self::Skip),
            _ => Err(TrdataError::config("on_error", format!("{s:?} is not one of 'raise', 'skip'"))),
        }
    }
}

/// How worker threads are bound to CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// No binding.
    None,
    /// Worker w runs on allowed CPU w mod ncpus.
    RoundRobin,
    /// Workers of GPU engine g run on the CPUs of g's NUMA node (round-robin where the node is unknown).
    Numa,
}

impl PinMode {
    /// Parse `none` / `round-robin` / `numa`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Self::None),
            "round-robin" => Ok(Self::RoundRobin),
            "numa" => Ok(Self::Numa),
            _ => Err(TrdataError::config("pin", format!("{s:?} is not one of 'round-robin', 'numa', 'none'"))),
        }
    }
}

/// CPU ids must be below this (glibc's CPU_SETSIZE) to be pinnable.
pub const MAX_CPU_ID: usize = 1024;

/// Everything a loader needs besides its dataset.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Rows per batch.
    pub batch_size: usize,
    /// Worker threads.
    pub workers: usize,
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
    /// Per-sample decode + augmentation.
    pub pipeline: SamplePipeline,
}

impl LoaderConfig {
    /// Check ranges; names the parameter at fault.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(TrdataError::config("batch_size", "must be ≥ 1"));
        }
        if self.batch_size > 1 << 20 {
            return Err(TrdataError::config(
                "batch_size",
                format!("{} is absurdly large (limit 1048576)", self.batch_size),
            ));
        }
        if self.workers == 0 || self.workers > 1024 {
            return Err(TrdataError::config("workers", format!("{} must be in 1..=1024", self.workers)));
        }
        if self.world_size == 0 {
            return Err(TrdataError::config("world_size", "must be ≥ 1"));
        }
        if self.rank >= self.world_size {
            return Err(TrdataError::config(
                "rank",
                format!("{} must be < world_size ({})", self.rank, self.world_size),
            ));
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return Err(TrdataError::config("cpus", "the CPU list is empty"));
            }
            // CPU sets hold ids below CPU_SETSIZE (1024); a larger id would index past the set inside libc.
            if let Some(bad) = cpus.iter().find(|&&c| c >= MAX_CPU_ID) {
                return Err(TrdataError::config("cpus", format!("CPU id {bad} is not below {MAX_CPU_ID}")));
            }
        }
        if self.prefetch < 2 || self.prefetch > 64 {
            return Err(TrdataError::config(
                "prefetch",
                format!("{} must be in 2..=64 (double buffering needs ≥ 2)", self.prefetch),
            ));
        }
        Ok(())
    }
}
