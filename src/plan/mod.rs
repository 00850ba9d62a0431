//! plan — the epoch plan: which dataset sample every (engine, sequence number) gets.
//!
//! Protocol (DESIGN.md §2 "Epoch plan"):
//! - N samples, seed s, epoch e → permutation P(s, e) (identity without shuffle), computed identically on
//!   every rank from (s, e) alone: no communication.
//! - G = world_size · devices_per_rank global engines; engine g = rank · D + d. Plan position p goes to
//!   engine p mod G at local sequence p div G.
//! - Every engine yields S = ceil(N / G) sequence numbers. With r = N mod G, engine g needs filling iff
//!   r ≠ 0 and g ≥ r; its last sequence number S−1 maps to position p = (S−1)·G + g ≥ N and is filled with
//!   P[p mod N] (DistributedSampler's wrap-around). Equal counts per engine mean no DDP hang.
//! - Last-batch policy over an engine's S sequence numbers with batch size B: `drop` → ⌊S/B⌋ full batches;
//!   `partial` → ⌈S/B⌉ batches, the last one S mod B rows; `pad` → ⌈S/B⌉ full batches where sequence
//!   k ≥ S repeats sequence k mod S.
//! - `real` sequence numbers are those with p < N: they form the prefix [0, R) of an engine's sequence
//!   numbers (R = S, or S−1 for a filled engine), so a batch's real rows are always its first `valid` rows.

pub mod claim;
pub mod resume;

use crate::rng::{OP_PLAN_SHUFFLE, SampleRng};

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

/// The shape of the plan: everything except the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanShape {
    /// Dataset size N.
    pub num_samples: u64,
    /// Global engines G = world_size × devices per rank.
    pub global_engines: u64,
    /// Batch size B.
    pub batch_size: u64,
    /// Last-batch policy.
    pub last_batch: LastBatch,
    /// Shuffle the order.
    pub shuffle: bool,
    /// Seed of the shuffle.
    pub seed: u64,
}

impl PlanShape {
    /// S: sequence numbers per engine with real or filled samples.
    pub fn samples_per_engine(&self) -> u64 {
        self.num_samples.div_ceil(self.global_engines)
    }

    /// Batches per epoch for every engine.
    pub fn batches_per_engine(&self) -> u64 {
        let s = self.samples_per_engine();
        match self.last_batch {
            LastBatch::Drop => s / self.batch_size,
            LastBatch::Pad | LastBatch::Partial => s.div_ceil(self.batch_size),
        }
    }

    /// T: sequence numbers an engine processes in an epoch (rows over all its batches).
    pub fn seqs_per_engine(&self) -> u64 {
        let s = self.samples_per_engine();
        match self.last_batch {
            LastBatch::Drop => (s / self.batch_size) * self.batch_size,
            LastBatch::Pad => s.div_ceil(self.batch_size) * self.batch_size,
            LastBatch::Partial => s,
        }
    }

    /// R: the real (unfilled, unpadded) sequence numbers of `engine`, a prefix [0, R).
    pub fn real_seqs(&self, engine: u64) -> u64 {
        let r = self.num_samples % self.global_engines;
        let s = self.samples_per_engine();
        let real = if r != 0 && engine >= r { s - 1 } else { s };
        real.min(self.seqs_per_engine())
    }

    /// Rows of batch `b` (B except possibly the last under `partial`).
    pub fn rows_in_batch(&self, b: u64) -> u64 {
        let t = self.seqs_per_engine();
        (t - b * self.batch_size).min(self.batch_size)
    }

    /// Real rows of batch `b` of `engine` (its first rows).
    pub fn valid_in_batch(&self, engine: u64, b: u64) -> u64 {
        let start = b * self.batch_size;
        self.real_seqs(engine).saturating_sub(start).min(self.rows_in_batch(b))
    }
}

/// The plan of one epoch: the permutation plus the shape.
#[derive(Debug, Clone)]
pub struct EpochPlan {
    /// Shape shared by all epochs.
    pub shape: PlanShape,
    /// Epoch number.
    pub epoch: u64,
    order: Vec<u32>,
}

impl EpochPlan {
    /// Compute P(seed, epoch): a Fisher–Yates shuffle driven by Philox keyed by (seed, epoch).
    pub fn new(shape: PlanShape, epoch: u64) -> Self {
        assert!(shape.num_samples > 0 && shape.num_samples <= u64::from(u32::MAX), "dataset size out of range");
        let n = shape.num_samples as usize;
        let mut order: Vec<u32> = (0..n as u32).collect();
        if shape.shuffle {
            let mut rng = SampleRng::new(shape.seed, epoch, u64::from(u32::MAX), OP_PLAN_SHUFFLE);
            for i in (1..n).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        Self { shape, epoch, order }
    }

    /// Dataset index served by `engine` at sequence number `seq` (0 ≤ seq < T).
    pub fn sample_at(&self, engine: u64, seq: u64) -> u64 {
        let s = self.shape.samples_per_engine();
        let k = seq % s; // pad rows repeat real ones
        let p = (k * self.shape.global_engines + engine) % self.shape.num_samples; // filling wraps around
        u64::from(self.order[p as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shape(n: u64, g: u64, b: u64, lb: LastBatch, shuffle: bool) -> PlanShape {
        PlanShape { num_samples: n, global_engines: g, batch_size: b, last_batch: lb, shuffle, seed: 7 }
    }

    #[test]
    fn filling_rule_of_the_seed() {
        // N = 10, G = 4: r = 2, engines 2 and 3 are filled at their last sequence number.
        let plan = EpochPlan::new(shape(10, 4, 2, LastBatch::Partial, false), 0);
        let per: Vec<Vec<u64>> = (0..4).map(|g| (0..3).map(|k| plan.sample_at(g, k)).collect()).collect();
        assert_eq!(per, vec![vec![0, 4, 8], vec![1, 5, 9], vec![2, 6, 0], vec![3, 7, 1]]);
        assert_eq!((0..4).map(|g| plan.shape.real_seqs(g)).collect::<Vec<_>>(), [3, 3, 2, 2]);
    }

    #[test]
    fn epochs_and_seeds_change_the_order_deterministically() {
        let s = shape(1000, 1, 10, LastBatch::Drop, true);
        let a = EpochPlan::new(s, 0);
        assert_eq!(a.order, EpochPlan::new(s, 0).order);
        assert_ne!(a.order, EpochPlan::new(s, 1).order);
        assert_ne!(a.order, EpochPlan::new(PlanShape { seed: 8, ..s }, 0).order);
    }

    proptest! {
        // Every sample exactly once per epoch across all engines (real rows), equal batch counts per engine,
        // fillers and pads only after the real prefix.
        #[test]
        fn exactly_once_equal_batches(n in 1u64..600, g in 1u64..9, b in 1u64..40, lb in 0usize..3,
                                      shuffle: bool, epoch in 0u64..4) {
            let lb = [LastBatch::Drop, LastBatch::Pad, LastBatch::Partial][lb];
            let s = shape(n, g, b, lb, shuffle);
            let plan = EpochPlan::new(s, epoch);
            let mut seen = vec![0u32; n as usize];
            let t = s.seqs_per_engine();
            prop_assert_eq!(t, (0..s.batches_per_engine()).map(|bb| s.rows_in_batch(bb)).sum::<u64>());
            for e in 0..g {
                let mut valid_total = 0;
                for bb in 0..s.batches_per_engine() {
                    let rows = s.rows_in_batch(bb);
                    prop_assert!(rows >= 1 && rows <= b);
                    if lb != LastBatch::Partial { prop_assert_eq!(rows, b); }
                    valid_total += s.valid_in_batch(e, bb);
                }
                prop_assert_eq!(valid_total, s.real_seqs(e));
                for k in 0..s.real_seqs(e) {
                    seen[plan.sample_at(e, k) as usize] += 1;
                }
                for k in 0..t { prop_assert!(plan.sample_at(e, k) < n); }
            }
            if lb == LastBatch::Drop {
                prop_assert!(seen.iter().all(|&c| c <= 1));
            } else {
                prop_assert!(seen.iter().all(|&c| c == 1), "counts {:?}", seen);
            }
        }
    }
}
