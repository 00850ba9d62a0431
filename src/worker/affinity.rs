//! CPU binding of worker threads. `round-robin` (the seed's mode): worker w → allowed CPU w mod ncpus,
//! where the allowed set is read once from the thread that starts the pool, before anything is pinned
//! (core_affinity reports the calling thread's mask). `numa` plans come from `transfer::gpu::numa_worker_plan`
//! (they need the GPUs' NUMA nodes); here, without GPUs, `numa` degrades to round-robin.

use crate::config::PinMode;

/// The CPU each worker is bound to (None = unbound), computed before any thread starts.
pub fn binding_plan(mode: PinMode, workers: usize, allowed: &[usize]) -> Vec<Option<usize>> {
    match mode {
        PinMode::None => vec![None; workers],
        PinMode::RoundRobin | PinMode::Numa if allowed.is_empty() => vec![None; workers],
        PinMode::RoundRobin | PinMode::Numa => (0..workers).map(|w| Some(allowed[w % allowed.len()])).collect(),
    }
}

/// CPUs the calling thread may run on.
pub fn allowed_cpus() -> Vec<usize> {
    core_affinity::get_core_ids().map(|ids| ids.into_iter().map(|c| c.id).collect()).unwrap_or_default()
}

/// Bind the calling thread to `cpu`; false if the OS refused (e.g. a CPU outside a container's cpuset).
pub fn pin_current_thread(cpu: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_wraps_over_allowed_cpus() {
        assert_eq!(binding_plan(PinMode::RoundRobin, 5, &[2, 5, 7]), [Some(2), Some(5), Some(7), Some(2), Some(5)]);
        assert_eq!(binding_plan(PinMode::None, 2, &[0, 1]), [None, None]);
    }
}
