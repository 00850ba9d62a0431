//! gpu_decode/controller — the GPU share of `decode="auto"` (fast mode), moved after each batch by what the
//! transfer thread saw; the workers' routing (route.rs) reads the share it sets.
//!
//! Auto controller ([`GpuDecode::adjust`](super::GpuDecode::adjust), transfer thread, after each batch, fast mode): the inputs are the time
//! the transfer thread waited for the CPU rows of the batch (`cpu_wait`) and for its GPU rows (`gpu_wait`), and
//! whether the consumer was starved (it waited for this batch). Starved: move the share toward the path that made
//! it wait (up when the CPU rows were later, down when the GPU rows were); not starved: drift down slowly, so the
//! CPU stays the main path while it keeps up. The step decays from 0.05 toward 0.005 (nvImageCodec's adaptive
//! load hint does the same).

use std::time::Duration;

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

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
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
}
