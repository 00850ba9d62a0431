//! worker/skip — what a sample that cannot be made becomes: raised at its batch (`on_error='raise'`) or replaced
//! by a deterministic other sample (`'skip'`), counted once and logged once ([`produce`]'s replacement loop), with
//! the memory the workers share to do it ([`SkipLog`], its protocol in its docs; [`BadRuns`]).

use super::sample::{GpuRow, attempt_sample};
use super::{EpochJob, ErrorPolicy};
use crate::augment::WorkerScratch;
use crate::error::{ImageError, SampleError};
use crate::rng::{OP_SKIP_REPLACEMENT, SampleRng};
use crate::staging::RowWriter;
use crate::stats::Stats;
use crate::sync::{Ordering, lock};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// Random replacement candidates of the `skip` policy before it probes the dataset in order.
pub const MAX_SKIP_ATTEMPTS: u32 = 16;
/// One sample the `skip` policy replaced, kept for the loader's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipRecord {
    /// The bad file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub message: String,
}

/// Shared memory of the skip policy (see `produce`), behind `WorkContext::skipped`.
///
/// Protocol: every field is read and written only under that mutex, never held across a decode. A worker that
/// finds a sample bad records it ([`SkipLog::record_bad`]: `bad` and `bad_runs` together, so they always agree);
/// a worker scanning for a replacement asks for the next candidate not known to be bad
/// ([`SkipLog::next_probe`]), drops the lock and decodes it. Another worker may learn meanwhile that this
/// candidate is bad; the scan then decodes it in vain and fails as that worker did, so the outcome is the same:
/// decode failures are decided by the bytes (decode/mod.rs, damage policy), and skipping a known-bad candidate
/// only saves the attempt. Hence the replacement depends on (seed, epoch, index) only, whatever the timing.
#[derive(Debug, Default)]
pub struct SkipLog {
    /// Dataset indices that failed to decode (reading them again would fail again). Private: only
    /// [`SkipLog::record_bad`] adds to it, keeping `bad_runs` in step.
    bad: HashMap<u64, ImageError>,
    /// The keys of `bad` as maximal runs of consecutive indices, for the in-order scan to jump a run in one
    /// step (a scan that stepped over known-bad indices one look-up at a time was O(N) per bad sample, O(N²)
    /// per epoch when good samples are rare and late).
    bad_runs: BadRuns,
    /// Records not yet drained into the Python log, one per bad index.
    pub pending: Vec<SkipRecord>,
    /// Every sample of the dataset failed: nothing can replace a bad one.
    pub all_bad: bool,
    /// Look-ups of this log by replacement scans (a work counter: at most `MAX_SKIP_ATTEMPTS` + 1 + the
    /// candidates decoded, per bad sample).
    pub probes: u64,
}

impl SkipLog {
    /// Record that sample `index` failed with `error`; true if it was not known before.
    pub fn record_bad(&mut self, index: u64, error: ImageError) -> bool {
        self.bad_runs.insert(index);
        self.bad.insert(index, error).is_none()
    }

    /// The error sample `index` failed with, if it did.
    pub fn known_error(&self, index: u64) -> Option<&ImageError> {
        self.bad.get(&index)
    }

    /// Whether `index` is known to be bad (one look-up of a scan).
    fn is_known_bad(&mut self, index: u64) -> bool {
        self.probes += 1;
        self.bad.contains_key(&index)
    }

    /// The in-order part of sample `index`'s candidate sequence (index + k mod n for k = 1, 2, …, n − 1): the
    /// smallest k' ≥ k whose candidate is not known to be bad, or None when every remaining one is.
    fn next_probe(&mut self, index: u64, k: u64, n: u64) -> Option<u64> {
        self.probes += 1;
        self.bad_runs.next_probe(index, k, n)
    }
}

/// A set of dataset indices kept as disjoint, non-adjacent runs `[start, end)` (key: start, value: end), so
/// "the first index ≥ j not in the set" costs one ordered-map look-up however long the run holding j is.
/// Memory: one entry per run, at most one per bad sample.
#[derive(Debug, Default)]
struct BadRuns(BTreeMap<u64, u64>);

impl BadRuns {
    /// The run holding `i`, as (start, end).
    fn run_of(&self, i: u64) -> Option<(u64, u64)> {
        self.0.range(..=i).next_back().filter(|&(_, &end)| i < end).map(|(&s, &e)| (s, e))
    }

    /// Add `i`, merging it with the runs that end at `i` or start at `i + 1`.
    fn insert(&mut self, i: u64) {
        if self.run_of(i).is_some() {
            return;
        }
        let mut start = i;
        let mut end = i + 1;
        if let Some((&s, &e)) = self.0.range(..i).next_back()
            && e == i
        {
            start = s;
        }
        if let Some(e) = self.0.remove(&(i + 1)) {
            end = e;
        }
        self.0.insert(start, end);
    }

    /// The first index ≥ `j` not in the set (may be past the dataset's end).
    fn next_absent(&self, j: u64) -> u64 {
        self.run_of(j).map_or(j, |(_, end)| end)
    }

    /// See [`SkipLog::next_probe`]. At most two jumps: to the end of the dataset, then from index 0.
    fn next_probe(&self, index: u64, k: u64, n: u64) -> Option<u64> {
        if k >= n {
            return None;
        }
        let c = (index + k) % n;
        let j = self.next_absent(c).min(n);
        let mut k = k + (j - c);
        if j == n && k < n {
            // Ran into the end of the index range: candidate 0 is offset k; go on from there.
            k += self.next_absent(0).min(n);
        }
        (k < n).then_some(k)
    }
}

/// Decode sample `index` into `dst`, replacing it under the skip policy. Returns the dataset index whose
/// pixels were written.
///
/// Skip policy: the replacement candidates of sample i in epoch e form a fixed sequence — first
/// `MAX_SKIP_ATTEMPTS` Philox(seed, e, i, attempt) draws over the dataset, then every other index in order
/// (i+1, i+2, … mod N) — and the first candidate that decodes wins. The sequence depends only on
/// (seed, e, i), so the choice is the same for any worker count or timing; the shared set of known-bad
/// indices only saves re-reading files that already failed (they would fail again), and the in-order part
/// jumps whole runs of known-bad indices in one look-up ([`SkipLog`] says how workers share it), so an epoch
/// costs O(N log N) look-ups and each bad file is decoded about once, however rare and late the good samples
/// are. A sample is counted once in `errors_skipped` however many candidates it took; the error is raised only
/// when no sample of the whole dataset decodes.
pub(crate) fn produce(
    job: &EpochJob,
    index: u64,
    scratch: &mut WorkerScratch,
    file_buf: &mut Vec<u8>,
    dst: &mut RowWriter<'_>,
    gpu: Option<GpuRow<'_>>,
) -> std::result::Result<u64, SampleError> {
    let ctx = &job.ctx;
    let n = ctx.dataset.len() as u64;
    // Under `skip`, a sample that failed before (in any epoch) is not read again: failures are decided by the
    // bytes (decode/mod.rs, damage policy), so it would fail again, and a slow bad file must not cost every epoch.
    let known_bad = match ctx.on_error {
        ErrorPolicy::Skip if ctx.any_bad.load(Ordering::Acquire) => lock(&ctx.skipped).known_error(index).cloned(),
        _ => None,
    };
    let mosaic = ctx.pipeline.first().program().mosaic.is_some();
    let _counted = PlannedRead { job, index: index as usize, count: mosaic || known_bad.is_some() };
    let first = match known_bad {
        Some(error) => SampleError { path: ctx.dataset.sample_name(index as usize), index, error },
        None => match attempt(job, index, scratch, file_buf, dst, gpu) {
            Ok(()) => return Ok(index),
            Err(e) => e,
        },
    };
    if ctx.on_error == ErrorPolicy::Raise {
        dst.clear_images();
        return Err(first);
    }
    Stats::add(&ctx.stats.errors_skipped, 1);
    if !lock(&ctx.skipped).all_bad {
        let drawn = (0..MAX_SKIP_ATTEMPTS).map(|attempt| {
            // Deterministic replacement: depends on (seed, epoch, original index, attempt) only.
            SampleRng::new(ctx.seed, job.plan.epoch, index, OP_SKIP_REPLACEMENT + attempt).below(n)
        });
        for candidate in drawn {
            if lock(&ctx.skipped).is_known_bad(candidate) {
                continue;
            }
            if attempt(job, candidate, scratch, file_buf, dst, None).is_ok() {
                return Ok(candidate);
            }
        }
        // In order: i+1, i+2, … mod N (offset k), known-bad runs jumped by `next_probe`.
        let mut k = 1;
        loop {
            let next = {
                let mut log = lock(&ctx.skipped);
                if log.all_bad {
                    None // another worker proved meanwhile that nothing decodes
                } else {
                    log.next_probe(index, k, n)
                }
            };
            let Some(at) = next else { break };
            let candidate = (index + at) % n;
            if attempt(job, candidate, scratch, file_buf, dst, None).is_ok() {
                return Ok(candidate);
            }
            k = at + 1;
        }
        lock(&ctx.skipped).all_bad = true;
    }
    dst.clear_images();
    let error = ImageError::new(
        first.error.kind.clone(),
        format!(
            "{}; no other sample of the dataset's {n} decodes either, so on_error='skip' has no replacement",
            first.error.message
        ),
    );
    Err(SampleError { error, ..first })
}

/// The plan's read of row `index` in a partial pack's block cache (source/block_cache.rs), counted when dropped
/// (at every return of `produce`) for the rows whose own read does not count it: a Mosaic row (all its parts are
/// read outside the plan; counted once the row is made, replaced or failed) and a sample known bad under `skip`
/// (not read). Not once the loader stopped (a count reads ahead).
struct PlannedRead<'a> {
    job: &'a EpochJob,
    index: usize,
    count: bool,
}

impl Drop for PlannedRead<'_> {
    fn drop(&mut self) {
        if self.count && !self.job.stopping() {
            self.job.ctx.dataset.store.count_planned_read(self.index);
        }
    }
}

/// [`attempt_sample`] under the skip policy: a failure is recorded once in the skip log (the sample whose bytes
/// failed is the bad one; a row whose Mosaic partner failed is tried again with new partners next epoch).
fn attempt(
    job: &EpochJob,
    index: u64,
    scratch: &mut WorkerScratch,
    file_buf: &mut Vec<u8>,
    dst: &mut RowWriter<'_>,
    gpu: Option<GpuRow<'_>>,
) -> std::result::Result<(), SampleError> {
    let ctx = &job.ctx;
    attempt_sample(job, index, scratch, file_buf, dst, gpu).map_err(|(bad, failure)| {
        if ctx.on_error == ErrorPolicy::Skip {
            let mut log = lock(&ctx.skipped);
            ctx.any_bad.store(true, Ordering::Release);
            if log.record_bad(bad, failure.error.clone()) {
                log.pending.push(SkipRecord { path: failure.path.clone(), message: failure.error.to_string() });
            }
        }
        failure
    })
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// The in-order scan over known-bad runs visits exactly the candidates the naive scan (i+1, i+2, … mod N,
        /// skipping known-bad ones one at a time) decodes, in the same order, so it returns the same first good
        /// one — for random bad sets recorded in random order (runs merged from both sides), any sample index.
        #[test]
        fn run_jumping_scan_equals_the_naive_scan(
            n in 1u64..120,
            bad_bits in proptest::collection::vec(any::<bool>(), 120),
            order_seed in any::<u64>(),
            index_pick in any::<u64>(),
            good_bits in proptest::collection::vec(prop::bool::weighted(0.1), 120),
        ) {
            let index = index_pick % n;
            let mut bad: Vec<u64> = (0..n).filter(|&i| bad_bits[i as usize]).collect();
            // A random recording order (runs grow left, right and in the middle).
            let mut x = order_seed | 1;
            for i in (1..bad.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bad.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut log = SkipLog::default();
            for &i in &bad {
                log.record_bad(i, ImageError::new(crate::error::ImageErrorKind::Corrupt, "bad"));
            }
            // Runs are disjoint, non-adjacent and hold exactly the bad set.
            let runs: Vec<(u64, u64)> = log.bad_runs.0.iter().map(|(&s, &e)| (s, e)).collect();
            for w in runs.windows(2) {
                prop_assert!(w[0].1 < w[1].0);
            }
            let covered: Vec<u64> = runs.iter().flat_map(|&(s, e)| s..e).collect();
            let mut sorted = bad.clone();
            sorted.sort_unstable();
            prop_assert_eq!(covered, sorted);
            // Visited offsets: fast vs naive.
            let naive: Vec<u64> = (1..n).filter(|&k| !log.bad.contains_key(&((index + k) % n))).collect();
            let mut fast = Vec::new();
            let mut k = 1;
            while let Some(at) = log.next_probe(index, k, n) {
                fast.push(at);
                k = at + 1;
            }
            prop_assert_eq!(&fast, &naive);
            prop_assert!(log.probes <= naive.len() as u64 + 1);
            // The replacement: the first candidate that decodes (good and not known bad).
            let decodes = |c: u64| good_bits[c as usize] && !log.bad.contains_key(&c);
            let want = (1..n).map(|k| (index + k) % n).find(|&c| decodes(c));
            let got = fast.iter().map(|&k| (index + k) % n).find(|&c| decodes(c));
            prop_assert_eq!(got, want);
        }
    }
}
