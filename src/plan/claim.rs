//! Static claiming (docs/design/protocols.md "Static claiming"): no shared counter decides who processes what.
//!
//! M workers serve one engine; worker j (0 ≤ j < M) takes local sequence numbers n·M + j, n = 0, 1, …
//! Its write position in reproducible mode is (batch = seq div B, slot = seq mod B). Two workers never
//! collide because j differs, and every sequence number is taken exactly once.
//! With W workers in total and E engines in this process: engine = w mod E, j = w div E, and engine e has
//! M_e = ⌈(W − e) / E⌉ workers (W ≥ E), so uneven W still covers every sequence number.

use crate::error::{Result, TrdataError};
use crate::param::IntParam;

/// Worker threads.
pub const WORKERS: IntParam = IntParam::new("workers", 1, 1024);

/// Which engine a worker serves and its position among that engine's workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerClaim {
    /// Engine index within this process.
    pub engine: usize,
    /// Position j among the engine's workers.
    pub j: usize,
    /// Number of workers M serving this engine.
    pub workers_of_engine: usize,
}

/// Workers must cover every engine (`workers` ≥ engines: static claiming gives each engine its own workers).
/// Shared by [`LoaderConfig::validate`] and the claiming math (`plan::claim::WorkerClaim::new`).
pub fn check_workers_per_engine(workers: usize, engines: usize) -> Result<()> {
    if engines == 0 || workers < engines {
        return Err(TrdataError::config(
            WORKERS.name,
            format!("{workers} must be ≥ the {engines} engines (devices) it serves (one worker per engine at least)"),
        ));
    }
    Ok(())
}

impl WorkerClaim {
    /// The claim of worker `w` of `total_workers` over `engines` engines.
    pub fn new(w: usize, total_workers: usize, engines: usize) -> Result<Self> {
        check_workers_per_engine(total_workers, engines)?;
        let engine = w % engines;
        Ok(Self { engine, j: w / engines, workers_of_engine: (total_workers - engine).div_ceil(engines) })
    }

    /// The sequence numbers this worker takes out of `total` (j, j + M, j + 2M, …).
    pub fn seqs(&self, total: u64) -> impl Iterator<Item = u64> + use<> {
        (self.j as u64..total).step_by(self.workers_of_engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_sequence_taken_exactly_once(w_total in 1usize..40, engines in 1usize..9, total in 0u64..500) {
            prop_assume!(w_total >= engines);
            let mut taken = vec![vec![0u32; total as usize]; engines];
            for w in 0..w_total {
                let c = WorkerClaim::new(w, w_total, engines).unwrap();
                prop_assert!(c.j < c.workers_of_engine);
                for s in c.seqs(total) { taken[c.engine][s as usize] += 1; }
            }
            for e in taken { prop_assert!(e.iter().all(|&c| c == 1)); }
        }
    }

    #[test]
    fn too_few_workers_is_a_config_error() {
        assert!(WorkerClaim::new(0, 1, 2).is_err());
    }
}
