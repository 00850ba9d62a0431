//! gpu_decode/pool — decoder reuse: the nvJPEG hardware decoders of closed loaders, kept per (GPU, queue,
//! libnvjpeg) for the next loader's decode threads (threads.rs), and the device bytes each carries.

use crate::cuda::nvjpeg::BatchDecoder;

/// The device bytes of each decoder of a starting loader, which travel with it into the pool and which the loader
/// reports: a decoder taken from the pool (`Some`) keeps what it carries; the new ones (`None`) share `measured`
/// — the drop in free device memory while they were made — equally (the division's remainder, < 1 byte per new
/// decoder, is dropped, so a later loader that takes them reports exactly what this one did).
pub(super) fn decoder_bytes(carried: &[Option<u64>], measured: u64) -> Vec<u64> {
    let made = carried.iter().filter(|c| c.is_none()).count() as u64;
    carried.iter().map(|c| c.unwrap_or(measured / made.max(1))).collect()
}

/// Decoder reuse: nvJPEG hardware decoders outlive their loader. Closing a loader returns its decoders here and the
/// next loader on the same GPU with the same libnvjpeg takes them instead of making new ones; none is destroyed, so the
/// pool holds, per GPU, as many as were ever in use at once (3 per open GPU-decode loader). Why: on the H200 a process
/// that destroyed trdata's hardware decoders and then ran torchvision's hardware decode (`decode_jpeg(device="cuda")`,
/// batched) hung in 4 of 7 runs, the GPU busy and the engines idle, and did not in 2 of 2 runs with reuse
/// (docs/design/gpu-decode-log.md §20); torchvision itself never destroys its decoder. It also saves each later loader
/// the decoders' creation and pre-allocation. The cost: their device buffers (`decode_gpu_nvjpeg_bytes`, ~100 MB each
/// on the H200) and page-locked bitstream buffers (≤ 32 MiB each) stay allocated, and the GPU's primary context
/// retained, until the process ends. A decoder whose stream failed is destroyed, never kept. Not survived: a reset of
/// the primary context by another library while decoders are kept (`cuDevicePrimaryCtxReset`, e.g. numba's
/// `cuda.close()`), which invalidates them.
pub(super) static IDLE: IdlePool<BatchDecoder> = IdlePool::new();

/// Idle items by (GPU ordinal, queue, library path), each with its device bytes.
pub(super) struct IdlePool<T>(std::sync::Mutex<Vec<(IdleKey, T, u64)>>);

/// (GPU ordinal, queue, path of the libnvjpeg that made the decoder).
pub(super) type IdleKey = (u32, usize, String);

impl<T> IdlePool<T> {
    pub(super) const fn new() -> Self {
        Self(std::sync::Mutex::new(Vec::new()))
    }

    /// The most recently returned item of the kind (so a loader opened after another one closed runs on exactly
    /// that loader's decoders, whatever else the pool holds).
    pub(super) fn take(&self, key: &IdleKey) -> Option<(T, u64)> {
        let mut idle = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = idle.iter().rposition(|d| &d.0 == key)?;
        let (_, item, bytes) = idle.remove(i);
        Some((item, bytes))
    }

    pub(super) fn put(&self, key: IdleKey, item: T, bytes: u64) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((key, item, bytes));
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn new_decoders_share_the_measured_bytes_and_reused_ones_keep_theirs() {
        assert_eq!(decoder_bytes(&[None, None, None], 300), [100, 100, 100]);
        assert_eq!(decoder_bytes(&[None, None, None], 302), [100, 100, 100], "the remainder is dropped");
        assert_eq!(decoder_bytes(&[Some(7), Some(8), Some(9)], 300), [7, 8, 9], "nothing new: measured is ignored");
        assert_eq!(decoder_bytes(&[Some(100), None, None], 90), [100, 45, 45]);
        assert_eq!(decoder_bytes(&[None, None], 0), [0, 0]);
        assert!(decoder_bytes(&[], 5).is_empty());
        // What a loader reports is what the next one, taking the same decoders, reports again.
        let first = decoder_bytes(&[None, None, None], 1_000_001);
        let again = decoder_bytes(&first.iter().map(|&b| Some(b)).collect::<Vec<_>>(), 12_345);
        assert_eq!(first.iter().sum::<u64>(), again.iter().sum::<u64>());
    }

    #[test]
    fn the_idle_pool_hands_out_only_its_kind_and_keeps_every_item() {
        let pool = IdlePool::new();
        let k = |gpu: u32, q: usize, lib: &str| (gpu, q, lib.to_owned());
        assert!(pool.take(&k(0, 0, "a.so")).is_none());
        for (i, item) in ["x", "y", "z"].into_iter().enumerate() {
            pool.put(k(0, 0, "a.so"), item, 10 * i as u64);
        }
        pool.put(k(0, 1, "a.so"), "i", 40);
        pool.put(k(1, 0, "a.so"), "g1", 50);
        pool.put(k(0, 0, "b.so"), "other library", 60);
        assert_eq!(pool.take(&k(0, 1, "a.so")), Some(("i", 40)));
        assert!(pool.take(&k(0, 1, "a.so")).is_none());
        assert_eq!(pool.take(&k(1, 0, "a.so")), Some(("g1", 50)));
        let three: Vec<_> = (0..3).map(|_| pool.take(&k(0, 0, "a.so")).unwrap()).collect();
        assert_eq!(three, [("z", 20), ("y", 10), ("x", 0)], "none was dropped; the last returned comes first");
        assert!(pool.take(&k(0, 0, "a.so")).is_none());
        assert_eq!(pool.take(&k(0, 0, "b.so")), Some(("other library", 60)));
    }
}
