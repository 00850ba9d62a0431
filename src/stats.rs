//! Counters and per-stage timers, updated with relaxed atomics by workers and the consumer and read as a
//! snapshot by `loader.stats()`. Relaxed is enough: each counter is independent and only summed for display.
//! [`Stats`] is every loader's; [`GpuCounters`] are the transfer engines' (GPU loaders add them to `stats()`).

use crate::sync::{AtomicU64, Ordering};
use std::time::Instant;

/// Live counters of one loader.
#[derive(Debug, Default)]
pub struct Stats {
    /// Samples written into batches (including replacements and padding rows).
    pub samples: AtomicU64,
    /// Batches handed to the consumer.
    pub batches: AtomicU64,
    /// Bytes read from files.
    pub bytes_read: AtomicU64,
    /// Time reading files.
    pub read_ns: AtomicU64,
    /// Time in header parse + entropy decode + IDCT.
    pub decode_ns: AtomicU64,
    /// Time in the fused resample/flip/normalize/cast writer.
    pub augment_ns: AtomicU64,
    /// Time workers waited for a writeable batch buffer (consumer too slow: good).
    pub worker_wait_ns: AtomicU64,
    /// Time the consumer waited for a ready batch (loader too slow: the starvation meter).
    pub consumer_wait_ns: AtomicU64,
    /// Samples replaced under `on_error="skip"`.
    pub errors_skipped: AtomicU64,
    /// Samples decoded although libjpeg-turbo met damaged entropy data in them (filled in, as Pillow does).
    pub decode_warnings: AtomicU64,
    /// Batch buffers allocated so far (ring + buffers held by Python).
    pub buffers_allocated: AtomicU64,
    /// Epochs started.
    pub epochs: AtomicU64,
}

impl Stats {
    /// Add `v` to counter `c`.
    #[inline]
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Ordering::Relaxed);
    }

    /// Add the nanoseconds elapsed since `t0` to `c`.
    #[inline]
    pub fn add_since(c: &AtomicU64, t0: Instant) {
        c.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// (name, value) pairs for display; names carry their units.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("samples", g(&self.samples)),
            ("batches", g(&self.batches)),
            ("bytes_read", g(&self.bytes_read)),
            ("read_ns", g(&self.read_ns)),
            ("decode_ns", g(&self.decode_ns)),
            ("augment_ns", g(&self.augment_ns)),
            ("worker_wait_ns", g(&self.worker_wait_ns)),
            ("consumer_wait_ns", g(&self.consumer_wait_ns)),
            ("errors_skipped", g(&self.errors_skipped)),
            ("decode_warnings", g(&self.decode_warnings)),
            ("buffers_allocated", g(&self.buffers_allocated)),
            ("epochs", g(&self.epochs)),
        ]
    }
}

/// H2D counters of all GPU engines of one loader (merged into `loader.stats()`).
#[derive(Debug, Default)]
pub struct GpuCounters {
    /// Time from issuing a batch's H2D copy to its completion event (transfer threads, host clock). Includes
    /// the copy stream's device-side wait for the slot's previous consumers to release it.
    pub h2d_ns: AtomicU64,
    /// Time of the H2D copies alone (device clock: timing events around `cuMemcpyHtoDAsync`, after the
    /// slot-release waits). Always ≤ `h2d_ns`.
    pub h2d_copy_ns: AtomicU64,
    /// Bytes copied host → device.
    pub h2d_bytes: AtomicU64,
    /// Batches copied (epochs' first batches found unpinned are counted in `unpinned_host_buffers`).
    pub h2d_batches: AtomicU64,
    /// Time transfer threads waited for a filled host batch (workers too slow for the copy engine).
    pub h2d_wait_host_ns: AtomicU64,
    /// Time transfer threads waited for a free device slot (consumer holds / trains slower: good).
    pub h2d_wait_slot_ns: AtomicU64,
    /// Time the consumer waited for a device batch (the GPU-path starvation meter).
    pub device_wait_ns: AtomicU64,
    /// Device slots allocated.
    pub device_slots_allocated: AtomicU64,
    /// Epochs whose first host batch was not page-locked (copies from pageable memory: slower).
    pub unpinned_host_buffers: AtomicU64,
    /// Samples decoded on the GPU (gpu_decode/).
    pub decode_gpu: AtomicU64,
    /// Samples routed to the GPU that it could not decode, made by the CPU fallback instead.
    pub decode_gpu_fallback: AtomicU64,
    /// Samples the GPU path could not take (not a JPEG its engines decode: progressive, CMYK, PNG, …), decoded
    /// by the CPU workers (counted only while the GPU path is on).
    pub decode_gpu_ineligible: AtomicU64,
    /// Time the GPU decode threads spent placing and decoding (busy time: nvJPEG's calls and the host waits).
    pub decode_gpu_ns: AtomicU64,
    /// Time transfer threads waited for a batch's GPU rows after its CPU rows were ready.
    pub decode_gpu_wait_ns: AtomicU64,
    /// Time of the resample kernels and CPU fallbacks of the GPU rows (transfer threads, host clock).
    pub decode_gpu_finish_ns: AtomicU64,
    /// The GPU share now, in millionths (a gauge: `decode="auto"` moves it).
    pub decode_gpu_share_ppm: AtomicU64,
    /// Device bytes of the GPU decode arenas allocated.
    pub decode_gpu_arena_bytes: AtomicU64,
    /// Device bytes nvJPEG's decoders took when they were made (free device memory before − after: their
    /// pre-allocated buffers for batches of 64 windows up to 1024²).
    pub decode_gpu_nvjpeg_bytes: AtomicU64,
    /// nvJPEG hardware decoders the GPU decode path runs, and how many of them an earlier loader made (kept for
    /// the process: gpu_decode/pool.rs, "Decoder reuse").
    pub decode_gpu_decoders: AtomicU64,
    /// See [`Self::decode_gpu_decoders`].
    pub decode_gpu_decoders_reused: AtomicU64,
}

impl GpuCounters {
    /// (name, value) pairs; names carry their units.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("h2d_ns", g(&self.h2d_ns)),
            ("h2d_copy_ns", g(&self.h2d_copy_ns)),
            ("h2d_bytes", g(&self.h2d_bytes)),
            ("h2d_batches", g(&self.h2d_batches)),
            ("h2d_wait_host_ns", g(&self.h2d_wait_host_ns)),
            ("h2d_wait_slot_ns", g(&self.h2d_wait_slot_ns)),
            ("device_wait_ns", g(&self.device_wait_ns)),
            ("device_slots_allocated", g(&self.device_slots_allocated)),
            ("unpinned_host_buffers", g(&self.unpinned_host_buffers)),
            ("decode_gpu", g(&self.decode_gpu)),
            ("decode_gpu_fallback", g(&self.decode_gpu_fallback)),
            ("decode_gpu_ineligible", g(&self.decode_gpu_ineligible)),
            ("decode_gpu_ns", g(&self.decode_gpu_ns)),
            ("decode_gpu_wait_ns", g(&self.decode_gpu_wait_ns)),
            ("decode_gpu_finish_ns", g(&self.decode_gpu_finish_ns)),
            ("decode_gpu_share_ppm", g(&self.decode_gpu_share_ppm)),
            ("decode_gpu_arena_bytes", g(&self.decode_gpu_arena_bytes)),
            ("decode_gpu_nvjpeg_bytes", g(&self.decode_gpu_nvjpeg_bytes)),
            ("decode_gpu_decoders", g(&self.decode_gpu_decoders)),
            ("decode_gpu_decoders_reused", g(&self.decode_gpu_decoders_reused)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_snapshot_names_units() {
        let c = GpuCounters::default();
        Stats::add(&c.h2d_bytes, 5);
        let s = c.snapshot();
        assert!(s.contains(&("h2d_bytes", 5)));
        assert!(s.iter().any(|(k, _)| *k == "h2d_ns"));
        assert!(s.iter().any(|(k, _)| *k == "h2d_copy_ns"));
    }
}
