//! Counters and per-stage timers, updated with relaxed atomics by workers and the consumer and read as a
//! snapshot by `loader.stats()`. Relaxed is enough: each counter is independent and only summed for display.

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
