//! plan — the epoch plan: which dataset sample every (engine, sequence number) gets.
//!
//! Protocol (docs/design/protocols.md "Epoch plan"):
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
//!
//! Block order (sources read block by block: partial packed files, `source::BlockStructure`): the dataset is
//! cut into blocks of consecutive records. P(s, e) is then built like the seed's DTS loader (and FFCV's
//! quasi-random order): the blocks are permuted by Philox(s, e, op `OP_PLAN_BLOCKS`), the permuted blocks are
//! grouped into windows of `window_blocks` consecutive blocks, and the records of window w are shuffled among
//! themselves by their own stream Philox(s, e, index w, op `OP_PLAN_WINDOW`). Positions of window w are
//! therefore exactly the records of its blocks, so all engines (which take positions p ≡ g mod G) move through
//! the file a window at a time and a cache of about one window of blocks serves them. Without shuffle the
//! order is the file order. It is still one permutation of 0..N computed from (s, e) alone, so exactly-once,
//! the filling rule, sharding and exact resume (resume.rs) hold unchanged; a record's block rank in the epoch
//! and the next epoch's block order ([`EpochPlan::block_schedule`]) tell the block cache what to fetch ahead and
//! which block is needed furthest in the future.

pub mod claim;
pub mod resume;

use crate::rng::{OP_PLAN_BLOCKS, OP_PLAN_SHUFFLE, OP_PLAN_WINDOW, SampleRng};
use crate::source::{BlockSchedule, BlockStructure};

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
    /// Block-structured plans: this epoch's windows (its block order with them), else None.
    windows: Option<Windows>,
}

/// An epoch's windows (module docs, "Block order"), for draws that must stay in a record's window: a Mosaic's
/// partners on a source read window by window (augment/mosaic.rs), which then need no block the cache does not
/// hold for the window anyway. Window w holds the records of blocks `order[w·W .. (w+1)·W]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows {
    /// First record of each block, then N.
    starts: Vec<u32>,
    /// Rank → block (this epoch's block order).
    order: Vec<u32>,
    /// Block → rank.
    rank: Vec<u32>,
    /// Blocks per window.
    window_blocks: usize,
}

impl Windows {
    /// The windows of `epoch` for a source of `blocks` (the plan's own block order, [`block_order`]).
    pub fn new(shape: &PlanShape, epoch: u64, blocks: BlockStructure<'_>) -> Self {
        let order = block_order(shape, epoch, blocks.block_starts.len() - 1);
        Self::from_order(blocks, order)
    }

    fn from_order(blocks: BlockStructure<'_>, order: Vec<u32>) -> Self {
        let mut rank = vec![0u32; order.len()];
        for (r, &k) in order.iter().enumerate() {
            rank[k as usize] = r as u32;
        }
        let window_blocks = blocks.window_blocks.max(1) as usize;
        Self { starts: blocks.block_starts.to_vec(), order, rank, window_blocks }
    }

    /// The blocks of record `i`'s window, in rank order.
    fn window_of(&self, i: u64) -> &[u32] {
        let block = self.starts.partition_point(|&s| u64::from(s) <= i) - 1;
        let w = self.rank[block] as usize / self.window_blocks;
        let lo = w * self.window_blocks;
        &self.order[lo..(lo + self.window_blocks).min(self.order.len())]
    }

    fn block_len(&self, k: u32) -> u64 {
        u64::from(self.starts[k as usize + 1] - self.starts[k as usize])
    }

    /// How many records record `i`'s window holds (≥ 1: `i` itself).
    pub fn len_of(&self, i: u64) -> u64 {
        self.window_of(i).iter().map(|&k| self.block_len(k)).sum()
    }

    /// The `u`-th record (`u < len_of(i)`) of record `i`'s window, counting its blocks in rank order and each
    /// block's records in file order.
    pub fn record_of(&self, i: u64, mut u: u64) -> u64 {
        for &k in self.window_of(i) {
            let len = self.block_len(k);
            if u < len {
                return u64::from(self.starts[k as usize]) + u;
            }
            u -= len;
        }
        panic!("record_of: {u} past the end of record {i}'s window")
    }
}

/// Fisher–Yates over `items` with `rng` (the one shuffle of the plan).
fn shuffle(items: &mut [u32], mut rng: SampleRng) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// The block permutation of `epoch` (rank → block; the identity without shuffle): Philox(s, e, op
/// `OP_PLAN_BLOCKS`), the first step of the block order (module docs).
pub fn block_order(shape: &PlanShape, epoch: u64, blocks: usize) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..blocks as u32).collect();
    if shape.shuffle {
        shuffle(&mut perm, SampleRng::new(shape.seed, epoch, u64::from(u32::MAX), OP_PLAN_BLOCKS));
    }
    perm
}

impl EpochPlan {
    /// Compute P(seed, epoch): a Fisher–Yates shuffle driven by Philox keyed by (seed, epoch).
    pub fn new(shape: PlanShape, epoch: u64) -> Self {
        Self::with_blocks(shape, epoch, None)
    }

    /// P(seed, epoch) for a source with `blocks` (module docs, "Block order"); `None` is [`EpochPlan::new`].
    /// The blocks must cover exactly the shape's samples.
    pub fn with_blocks(shape: PlanShape, epoch: u64, blocks: Option<BlockStructure<'_>>) -> Self {
        assert!(shape.num_samples > 0 && shape.num_samples <= u64::from(u32::MAX), "dataset size out of range");
        let n = shape.num_samples as usize;
        let Some(b) = blocks else {
            let mut order: Vec<u32> = (0..n as u32).collect();
            if shape.shuffle {
                shuffle(&mut order, SampleRng::new(shape.seed, epoch, u64::from(u32::MAX), OP_PLAN_SHUFFLE));
            }
            return Self { shape, epoch, order, windows: None };
        };
        let starts = b.block_starts;
        assert!(
            starts.len() >= 2 && starts[0] == 0 && starts[starts.len() - 1] as usize == n,
            "block structure does not cover the dataset"
        );
        let blocks = starts.len() - 1;
        let perm = block_order(&shape, epoch, blocks);
        let mut order = Vec::with_capacity(n);
        for (w, window) in perm.chunks(b.window_blocks.max(1) as usize).enumerate() {
            let first = order.len();
            for &k in window {
                order.extend(starts[k as usize]..starts[k as usize + 1]);
            }
            if shape.shuffle {
                shuffle(&mut order[first..], SampleRng::new(shape.seed, epoch, w as u64, OP_PLAN_WINDOW));
            }
        }
        Self { shape, epoch, order, windows: Some(Windows::from_order(b, perm)) }
    }

    /// This epoch's block order, rank → block (empty for a plan without blocks).
    pub fn block_order(&self) -> &[u32] {
        self.windows.as_ref().map_or(&[], |w| &w.order)
    }

    /// This epoch's windows (a block-structured plan), else None.
    pub fn windows(&self) -> Option<&Windows> {
        self.windows.as_ref()
    }

    /// What the partial block cache needs to know of this epoch (source/block_cache.rs): the block order of this
    /// epoch and of the next, and how many reads the engines `engines` of this process make of each block from
    /// sequence number `first_seq` on (a resume skips the delivered batches). `blocks` must be the structure the
    /// plan was made with.
    /// `partners`: rows read their window's records outside the plan too (a Mosaic: `BlockSchedule`'s
    /// `partner_windows`).
    pub fn block_schedule(
        &self,
        blocks: BlockStructure<'_>,
        engines: &[u64],
        first_seq: u64,
        partners: bool,
    ) -> BlockSchedule {
        let count = blocks.block_starts.len() - 1;
        let (mut reads, mut real_reads) = (vec![0u32; count], vec![0u32; count]);
        for &g in engines {
            let real = self.shape.real_seqs(g);
            for seq in first_seq..self.shape.seqs_per_engine() {
                let i = self.sample_at(g, seq) as u32;
                let block = blocks.block_starts.partition_point(|&s| s <= i) - 1;
                reads[block] = reads[block].saturating_add(1);
                if seq < real {
                    real_reads[block] = real_reads[block].saturating_add(1);
                }
            }
        }
        let next_order = block_order(&self.shape, self.epoch.wrapping_add(1), count);
        let partner_windows = partners.then_some(blocks.window_blocks.max(1));
        BlockSchedule {
            epoch: self.epoch,
            order: self.block_order().to_vec(),
            next_order,
            reads,
            partner_windows,
            real_reads,
        }
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

    /// Random block sizes from `sizes` (each 1..), as block starts.
    fn starts_of(sizes: &[u32]) -> Vec<u32> {
        let mut s = vec![0];
        for &z in sizes {
            s.push(s.last().unwrap() + z);
        }
        s
    }

    #[test]
    fn block_plans_read_window_by_window_and_keep_file_order_without_shuffle() {
        let starts = starts_of(&[3, 1, 4, 1, 5, 9, 2, 6]);
        let n = u64::from(*starts.last().unwrap());
        let bs = BlockStructure { block_starts: &starts, window_blocks: 3 };
        let ordered = EpochPlan::with_blocks(shape(n, 1, 4, LastBatch::Partial, false), 2, Some(bs));
        assert_eq!(ordered.order, (0..n as u32).collect::<Vec<_>>());
        assert_eq!(ordered.block_order(), (0..8).collect::<Vec<u32>>());
        let a = EpochPlan::with_blocks(shape(n, 1, 4, LastBatch::Partial, true), 2, Some(bs));
        let b = EpochPlan::with_blocks(shape(n, 1, 4, LastBatch::Partial, true), 2, Some(bs));
        assert_eq!(a.order, b.order);
        assert_ne!(a.order, EpochPlan::with_blocks(shape(n, 1, 4, LastBatch::Partial, true), 3, Some(bs)).order);
        assert_ne!(a.order, ordered.order);
    }

    proptest! {
        // Block-structured plans: a permutation (exactly once over all engines, as for plain plans), the same for
        // the same (seed, epoch), and window by window: the positions of window w hold exactly the records of the
        // blocks ranked w·W .. (w+1)·W in the block order, and `Windows` names exactly those for each of them; the
        // block schedule counts every read of every engine and continues with the next epoch's block order.
        #[test]
        fn block_plans_are_windowed_permutations(sizes in proptest::collection::vec(1u32..20, 1..40),
                                                 window in 1u32..6, g in 1u64..5, b in 1u64..9, lb in 0usize..3,
                                                 shuffle: bool, epoch in 0u64..4, seed in 0u64..1000) {
            let lb = [LastBatch::Drop, LastBatch::Pad, LastBatch::Partial][lb];
            let starts = starts_of(&sizes);
            let n = u64::from(*starts.last().unwrap());
            let bs = BlockStructure { block_starts: &starts, window_blocks: window };
            let s = PlanShape { seed, ..shape(n, g, b, lb, shuffle) };
            let plan = EpochPlan::with_blocks(s, epoch, Some(bs));
            prop_assert_eq!(&plan.order, &EpochPlan::with_blocks(s, epoch, Some(bs)).order);
            let mut sorted = plan.order.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..n as u32).collect::<Vec<_>>());
            let block_of = |r: u32| starts.partition_point(|&x| x <= r) - 1;
            let mut p = 0usize;
            let blocks = sizes.len();
            let by_rank: Vec<usize> = plan.block_order().iter().map(|&k| k as usize).collect();
            prop_assert_eq!(by_rank.len(), blocks);
            let engines: Vec<u64> = (0..g).collect();
            let schedule = plan.block_schedule(bs, &engines, 0, false);
            prop_assert_eq!(schedule.reads.iter().map(|&r| u64::from(r)).sum::<u64>(), g * s.seqs_per_engine());
            // real rows' reads: pad and filling rows excluded (they come at the epoch's end: block_cache.rs)
            let real: u64 = (0..g).map(|e| s.real_seqs(e)).sum();
            prop_assert_eq!(schedule.real_reads.iter().map(|&r| u64::from(r)).sum::<u64>(), real);
            let next = EpochPlan::with_blocks(s, epoch + 1, Some(bs));
            prop_assert_eq!(&schedule.next_order[..], next.block_order());
            let windows = plan.windows().expect("a block-structured plan has windows");
            prop_assert_eq!(windows, &Windows::new(&s, epoch, bs));
            for window_blocks in by_rank.chunks(window as usize) {
                let len: usize = window_blocks.iter().map(|&k| sizes[k] as usize).sum();
                let mut positions = plan.order[p..p + len].to_vec();
                for &r in &positions {
                    prop_assert!(window_blocks.contains(&block_of(r)), "record {} outside its window", r);
                }
                // `Windows` names the same records for every record of the window: the u-th, each once
                positions.sort_unstable();
                for &r in &plan.order[p..p + len] {
                    prop_assert_eq!(windows.len_of(u64::from(r)), len as u64);
                    let mut named: Vec<u32> =
                        (0..len as u64).map(|u| windows.record_of(u64::from(r), u) as u32).collect();
                    named.sort_unstable();
                    prop_assert_eq!(&named, &positions);
                }
                p += len;
            }
            // Exactly once across engines and equal batch counts: the engine view of plain plans holds.
            let mut seen = vec![0u32; n as usize];
            for e in 0..g {
                for k in 0..s.real_seqs(e) {
                    seen[plan.sample_at(e, k) as usize] += 1;
                }
            }
            if lb == LastBatch::Drop {
                prop_assert!(seen.iter().all(|&c| c <= 1));
            } else {
                prop_assert!(seen.iter().all(|&c| c == 1));
            }
        }

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
